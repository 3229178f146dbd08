"""Where each row's seeds ran, stated on its study page; a study that names the kind of device
its records come from (``device``) reads that kind only, keeps the others' records, and has
``study run`` train what they lack on that kind (Dufter & Schütze 2020 Table 3 at real-quick:
the baseline's seed 42 on a CPU, 43 and 44 first on an H100, every other row on a CPU). A
verdict of mixed devices, where a study names no device, says which seeds ran where."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from multilab import devices
from multilab.errors import UserError
from multilab.studies import runner
from multilab.studies.claims import load_claims
from multilab.studies.records import Record, iter_records, model_identity, record_path
from multilab.studies.spec import load_study
from multilab.studies.tables import (
    device_lines,
    on_device,
    record_devices,
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
PARAMS = ROOT / "params.yaml"
CLAIMS = load_claims(ROOT / "studies" / "claims")
H100 = "cuda (NVIDIA H100 80GB HBM3)"


def test_seeds_are_grouped_by_the_device_they_ran_on() -> None:
    found = {42: "cpu: Intel Xeon", 43: "cuda: NVIDIA H100", 44: "cuda: NVIDIA H100"}
    assert seeds_by_device(found) == "seed 42 on cpu (Intel Xeon); seeds 43, 44 on cuda " \
        "(NVIDIA H100)"
    assert seeds_by_device(found, kinds_only=True) == "seed 42 on cpu; seeds 43, 44 on cuda"
    assert row_device_kinds(found) == {"cpu", "cuda"}
    # one seed's records on two devices (trained on a GPU, measured on a CPU): both named
    assert seeds_by_device({1: "cpu: x + cuda: y"}) == "seed 1 on cpu (x) + cuda (y)"
    assert row_device_kinds({1: "cpu: x + cuda: y"}) == {"cpu", "cuda"}


def _spec_without_device(folder: Path) -> Path:
    """The committed Table 3 spec as it was before it named its device."""
    text = STUDY.read_text(encoding="utf-8")
    assert "\ndevice: cpu\n" in text
    path = folder / STUDY.name
    path.write_text(text.replace("\ndevice: cpu\n", "\n"), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def table3_real():
    study = load_study(STUDY, CLAIMS)
    return study_result(study, iter_records(RESULTS), CLAIMS, PARAMS)


@pytest.fixture(scope="module")
def table3_any_device(tmp_path_factory):
    study = load_study(_spec_without_device(tmp_path_factory.mktemp("spec")), CLAIMS)
    return study_result(study, iter_records(RESULTS), CLAIMS, PARAMS)


def test_table3_real_reads_its_cpu_records_only_and_names_the_gpu_ones(table3_real) -> None:
    """``device: cpu``: the baseline reads its CPU seed only; the H100's two seeds are kept
    (their own folders) and named on the page as not read; no row mixes devices."""
    result = table3_real
    assert result.study.device == "cpu"
    found = {row.label: row_devices(result, row) for row in result.study.rows}
    assert set(found["original"]) == {42} and found["original"][42].startswith("cpu:")
    assert result.seeds_found["original"] == (42,)
    assert all(row_device_kinds(found[label]) == {"cpu"} for label in found)
    assert set(result.other_devices) == {"original"}
    assert set(result.other_devices["original"]) == {43, 44}
    assert not any(outcome.mixed_devices for outcome in result.outcomes.values())
    lines = "\n".join(device_lines(result))
    assert "| ID | row | reads | where its seeds ran |" in lines
    assert "| 0-base | original | cpu | seed 42 on cpu (" in lines
    assert f"Kept under `results/`, not read (another kind of device): 0-base (original): " \
        f"seeds 43, 44 on {H100}." in lines
    assert "(mixed devices)" not in lines
    assert all(path.parent.name.endswith("-cuda") for path in RESULTS.glob("*/*/*.json")
               if '"device": "cuda' in path.read_text(encoding="utf-8"))


def test_the_committed_page_states_every_rows_device(table3_real) -> None:
    committed = PAGE.read_text(encoding="utf-8")
    assert "## Devices" in committed and all(
        f"| {row.label} | cpu | seed" in committed for row in table3_real.study.rows)
    assert f"seeds 43, 44 on {H100}." in committed


def test_without_a_device_the_baseline_mixes_and_its_verdicts_say_so(table3_any_device) -> None:
    """The same records without ``device``: every seed read, the baseline's row flagged."""
    result = table3_any_device
    found = row_devices(result, result.study.row("original"))
    assert set(found) == {42, 43, 44}
    assert all(found[seed].startswith("cuda:") for seed in (43, 44))
    assert not result.other_devices
    lines = "\n".join(device_lines(result))
    assert f"seeds 43, 44 on {H100} **(mixed devices)** |" in lines
    assert lines.count("**(mixed devices)**") == 1  # the baseline's row only
    assert "it stands as a test over seeds whose spread then includes the devices'" in lines
    page = render_study(result, CLAIMS)
    mixed = [entry.id for entry in result.study.claims
             if result.outcomes[entry.id].mixed_devices]
    assert "dufter2020-t3-r3-deu-drops" in mixed
    for claim_id in mixed:
        line = next(line for line in page.splitlines() if line.startswith(f"| `{claim_id}`"))
        assert "(mixed devices: original: seed 42 on cpu; seeds 43, 44 on cuda)" in line


def test_study_run_plans_the_gpu_seeds_again_on_the_cpu() -> None:
    """The baseline's GPU records do not count for a CPU study: its seeds 43 and 44 are
    missing (the lane commands), the other rows complete."""
    study = load_study(STUDY, CLAIMS)
    records = list(iter_records(RESULTS))
    baseline = runner.missing_runs(study, records, rows=["0-base"], params=PARAMS)
    assert [(step.row.label, step.seed, step.fingerprints) for step in baseline] == [
        ("original", 43, ()), ("original", 44, ())]
    assert [(s.row.label, s.seed) for s in runner.missing_runs(study, records, params=PARAMS)] \
        == [("original", 43), ("original", 44)]


def test_a_bad_device_is_one_line_naming_the_kinds(tmp_path: Path) -> None:
    path = tmp_path / STUDY.name
    path.write_text(STUDY.read_text(encoding="utf-8").replace("\ndevice: cpu\n",
                                                               "\ndevice: gpu\n"))
    with pytest.raises(UserError, match=r"device 'gpu': .* one of cpu, cuda"):
        load_study(path, CLAIMS)


MODEL = {"modification": "original", "seed": 43, "fingerprint": "436afb8cc5ebb860",
         "profile": "real-quick"}


def test_a_gpu_model_s_records_have_a_folder_of_their_own(tmp_path: Path) -> None:
    """The fingerprint names no device: a CPU rerun of a GPU's model would replace its
    records but for the ``-cuda`` folder; a CPU's (or an older done file's) has none."""
    cpu = record_path(tmp_path, "e", "evaluate", MODEL | {"device": "cpu"})
    assert cpu == record_path(tmp_path, "e", "evaluate", MODEL)
    assert cpu.parent.name == "seed43-436afb8cc5ebb860"
    gpu = record_path(tmp_path, "e", "evaluate", MODEL | {"device": "cuda"})
    assert gpu.parent.name == "seed43-436afb8cc5ebb860-cuda"
    done = {**MODEL, "run_id": "r", "steps": 2910}
    assert "device" not in model_identity(done)
    assert model_identity(done | {"device": "cuda"})["device"] == "cuda"


def _record(device: str, trained: str | None = None) -> Record:
    path = next(RESULTS.glob("original/seed42-*/evaluate.json"))
    data = copy.deepcopy(json.loads(path.read_text(encoding="utf-8")))
    data["provenance"]["machine"]["device"] = device
    if trained is not None:
        data["model"]["device"] = trained
    return Record(path, data)


def test_a_record_is_of_a_kind_where_its_model_trained_there_too() -> None:
    assert on_device(_record("cpu: AMD EPYC"), "cpu")
    assert on_device(_record("cpu: AMD EPYC", "cpu"), "cpu")
    measured_here = _record("cpu: AMD EPYC", "cuda")  # a GPU's model measured on a CPU
    assert record_devices(measured_here) == ["cpu: AMD EPYC", "cuda"]
    assert not on_device(measured_here, "cpu") and not on_device(measured_here, "cuda")
    assert not on_device(_record("unknown"), "cpu")


def test_visible_device_kind_reads_nvidia_smi_and_a_hidden_gpu(monkeypatch) -> None:
    monkeypatch.setattr(devices, "query_gpus", lambda: [devices.Gpu(0, "GPU-a")])
    assert devices.visible_device_kind({}) == "cuda"
    assert devices.visible_device_kind({devices.VISIBLE: ""}) == "cpu"
    assert devices.visible_device_kind({devices.VISIBLE: "-1"}) == "cpu"
    monkeypatch.setattr(devices, "query_gpus", list)
    assert devices.visible_device_kind({}) == "cpu"


def test_study_run_refuses_to_train_a_cpu_row_where_a_gpu_is_visible(monkeypatch) -> None:
    study = load_study(STUDY, CLAIMS)
    steps = runner.missing_runs(study, list(iter_records(RESULTS)), params=PARAMS)
    monkeypatch.setattr(devices, "visible_device_kind", lambda: "cuda")
    with pytest.raises(UserError, match=r"reads records of the cpu only .* CUDA_VISIBLE_DEVICES="):
        runner.check_device(study, steps)
    monkeypatch.setattr(devices, "visible_device_kind", lambda: "cpu")
    runner.check_device(study, steps)


def _done_model(folder: Path, device: str | None) -> Path:
    folder.mkdir(parents=True)
    done = {**MODEL} | ({"device": device} if device else {})
    (folder / "multilab.json").write_text(json.dumps(done))
    return folder


def test_a_gpu_model_on_disk_is_not_measured_for_a_cpu_row(tmp_path: Path) -> None:
    study = load_study(STUDY, CLAIMS)
    step = runner.Step(study.row("original"), 43, fingerprints=(MODEL["fingerprint"],))
    elsewhere = _done_model(tmp_path / "artifacts" / "models" / "original" / "seed43", "cuda")
    own = runner.study_model_dir(study, tmp_path, step)
    assert runner.trained_elsewhere(step, tmp_path, own) == elsewhere
    assert runner.trained_elsewhere(step, tmp_path, own, "cpu") is None
    _done_model(own, "cuda")
    with pytest.raises(UserError, match="trained on the cuda, and the row reads the cpu"):
        runner.check_model_device(study, step, own)
    (own / "multilab.json").write_text(json.dumps({**MODEL, "device": "cpu"}))
    runner.check_model_device(study, step, own)
    (own / "multilab.json").write_text(json.dumps(MODEL))  # older: names no device
    runner.check_model_device(study, step, own)
