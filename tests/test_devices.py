"""Where each row's seeds ran, stated on its study page; a verdict of mixed devices says which
seeds ran where (Dufter & Schütze 2020 Table 3 at real-quick: the baseline's seed 42 on a CPU,
43 and 44 on an H100, every other row on a CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from multilab.studies.claims import load_claims
from multilab.studies.records import iter_records
from multilab.studies.spec import load_study
from multilab.studies.tables import (
    device_lines,
    render_study,
    row_device_kinds,
    row_devices,
    seeds_by_device,
    study_result,
)

ROOT = Path(__file__).resolve().parent.parent
STUDY = ROOT / "studies" / "dufter2020-table3-real.yaml"
RESULTS = ROOT / "results" / "dufter2020-table3-real"
PAGE = ROOT / "docs" / "studies" / "dufter2020-table3-real.md"


def test_seeds_are_grouped_by_the_device_they_ran_on() -> None:
    devices = {42: "cpu: Intel Xeon", 43: "cuda: NVIDIA H100", 44: "cuda: NVIDIA H100"}
    assert seeds_by_device(devices) == "seed 42 on cpu (Intel Xeon); seeds 43, 44 on cuda " \
        "(NVIDIA H100)"
    assert seeds_by_device(devices, kinds_only=True) == "seed 42 on cpu; seeds 43, 44 on cuda"
    assert row_device_kinds(devices) == {"cpu", "cuda"}
    # one seed's records on two devices (trained on a GPU, measured on a CPU): both named
    assert seeds_by_device({1: "cpu: x + cuda: y"}) == "seed 1 on cpu (x) + cuda (y)"
    assert row_device_kinds({1: "cpu: x + cuda: y"}) == {"cpu", "cuda"}


@pytest.fixture(scope="module")
def table3_real():
    claims = load_claims(ROOT / "studies" / "claims")
    study = load_study(STUDY, claims)
    return study_result(study, iter_records(RESULTS), claims, ROOT / "params.yaml"), claims


def test_table3_real_quick_states_each_rows_device(table3_real) -> None:
    """The records' own devices: the baseline mixes a CPU and an H100, the rest a CPU."""
    result, _ = table3_real
    devices = {row.label: row_devices(result, row) for row in result.study.rows}
    assert set(devices["original"]) == {42, 43, 44}
    assert devices["original"][42].startswith("cpu:")
    assert all(devices["original"][seed].startswith("cuda:") for seed in (43, 44))
    assert all(row_device_kinds(devices[label]) == {"cpu"} for label in devices
               if label != "original")
    lines = "\n".join(device_lines(result))
    assert "| 0-base | original | seed 42 on cpu (" in lines
    assert "seeds 43, 44 on cuda (NVIDIA H100 80GB HBM3) **(mixed devices)** |" in lines
    assert lines.count("**(mixed devices)**") == 1  # the baseline's row only
    assert "it stands as a test over seeds whose spread then includes the devices'" in lines


def test_a_verdict_reading_the_mixed_baseline_says_which_seeds_ran_where(table3_real) -> None:
    result, claims = table3_real
    page = render_study(result, claims)
    baseline_claims = [entry.id for entry in result.study.claims
                       if result.outcomes[entry.id].mixed_devices]
    assert "dufter2020-t3-r3-deu-drops" in baseline_claims
    for claim_id in baseline_claims:
        line = next(line for line in page.splitlines() if line.startswith(f"| `{claim_id}`"))
        assert "(mixed devices: original: seed 42 on cpu; seeds 43, 44 on cuda)" in line
    committed = PAGE.read_text(encoding="utf-8")
    assert "## Devices" in committed and all(
        f"| {row.label} | seed" in committed for row in result.study.rows)


def test_two_cpu_models_are_one_kind_and_a_cpu_gpu_value_is_mixed() -> None:
    """A Δ of an Intel and an AMD CPU record is no device mix (it was flagged as one when
    the two names were joined into "mixed"); a value from a CPU and a GPU record is."""
    from multilab.studies.tables import joined_devices
    from multilab.studies.verdict import Arm

    cpus = joined_devices({"cpu: Intel Xeon", "cpu: AMD EPYC"})
    assert cpus == "cpu: AMD EPYC + cpu: Intel Xeon"
    assert not Arm.of([0.1, 0.2, 0.3], [cpus, "cpu: AMD EPYC", "cpu"]).mixed_devices
    both = joined_devices({"cpu: AMD EPYC", "cuda: NVIDIA H100"})
    assert Arm.of([0.1, 0.2, 0.3], [both, "cpu: AMD EPYC", "cpu"]).mixed_devices
