"""The report reads MLflow: mean ± std per modification over seeds, one run per
(configuration, seed), stale/failed/unevaluated runs ignored, missing seeds named."""

from __future__ import annotations

import statistics

import pandas as pd
import pytest

from multilab import tracking
from multilab.config import Config
from multilab.lab.metric_table import METRICS
from multilab.reporting.report import build_report
from tests.helpers import smoke_config

METRIC_KEYS = list(METRICS)


def _fake_run(cfg: Config, experiment: str, mod: str, seed: int, value: float, *,
              fingerprint: str | None = None, evaluated: bool = True, fail: bool = False) -> None:
    """A run as train + evaluate leave it, with every table metric = ``value``."""
    tags = {"modification": mod, "seed": seed, "profile": cfg.profile,
            "fingerprint": fingerprint or f"{mod}-{seed}"}
    if evaluated:
        tags["evaluated"] = "true"
    try:
        with tracking.run(experiment, tags=tags):
            tracking.log_metrics(dict.fromkeys(METRIC_KEYS, value))
            tracking.log_metrics({"train_loss": 8.0 - value}, step=1)
            if fail:
                raise RuntimeError("crash")
    except RuntimeError:
        pass


@pytest.fixture
def reported(tmp_path) -> tuple[Config, pd.DataFrame, str]:
    cfg = smoke_config(tmp_path, seeds=[0, 1, 2], study=["original", "inv-order", "lang-pos"])
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    for seed, value in enumerate([0.2, 0.4, 0.9]):
        _fake_run(cfg, experiment, "original", seed, value)
    _fake_run(cfg, experiment, "original", 0, 0.99, fail=True)  # FAILED: ignored
    _fake_run(cfg, experiment, "original", 1, 0.99, evaluated=False)  # not evaluated: ignored
    _fake_run(cfg, experiment, "inv-order", 0, 0.05, fingerprint="old")  # stale, then rerun:
    _fake_run(cfg, experiment, "inv-order", 0, 0.01, fingerprint="new")  # only the latest counts
    _fake_run(cfg, experiment, "inv-order", 1, 0.03)
    build_report(cfg)
    frame = pd.read_csv(cfg.paths.reports / "table1.csv")
    return cfg, frame.set_index("modification"), (cfg.paths.reports / "table1.md").read_text()


def test_mean_and_std_over_seeds(reported) -> None:
    _, frame, _ = reported
    original = frame.loc["original"]
    assert original["n_seeds"] == 3
    assert original["mu_mean"] == pytest.approx(statistics.fmean([0.2, 0.4, 0.9]))
    assert original["mu_std"] == pytest.approx(statistics.stdev([0.2, 0.4, 0.9]))
    assert original["mu_paper"] == pytest.approx(0.70) and str(original["paper_id"]) == "0"


def test_one_run_per_configuration_and_seed(reported) -> None:
    _, frame, _ = reported
    inv = frame.loc["inv-order"]
    assert inv["n_seeds"] == 2 and str(inv["missing_seeds"]) == "2"
    assert inv["retrieval_p1.l8_mean"] == pytest.approx(statistics.fmean([0.01, 0.03]))


def test_missing_rows_and_seeds_are_said(reported) -> None:
    cfg, frame, markdown = reported
    assert frame.loc["lang-pos"]["n_seeds"] == 0
    assert "2 (missing 2)" in markdown and "0 (missing 0, 1, 2)" in markdown
    assert "0.50 ± 0.36 (paper 0.70, Δ -0.20)" in markdown
    tex = (cfg.paths.reports / "table1.tex").read_text()
    assert r"\begin{tabular}" in tex and tex.rstrip().endswith(r"\end{tabular}")
    assert "0.50$_{0.36}$" in tex and "[0.70]" in tex  # ours with std, the paper's below
    assert "## Modifications" in markdown and "`inv-order`: Fake-English word order" in markdown
    plot = pd.read_csv(cfg.paths.reports / "plots" / "loss" / "original-seed2.csv")
    assert plot["train_loss"].tolist() == pytest.approx([8.0 - 0.9])


def test_runs_of_other_parameters_are_ignored_and_counted(project: Config) -> None:
    """A later run of the same modification and seed trained with other parameters (here: a
    different fingerprint, as `dvc exp run -S train.epochs=5` gives) never replaces the run of
    the current configuration; the table says it was ignored."""
    from multilab.reporting.report import expected_fingerprint

    cfg = project
    current = expected_fingerprint(cfg, "original", 42)
    assert current is not None  # the corpus and vocabulary are built here
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    _fake_run(cfg, experiment, "original", 42, 0.5, fingerprint=current)
    _fake_run(cfg, experiment, "original", 42, 0.9, fingerprint="other-epochs")  # later
    build_report(cfg)
    frame = pd.read_csv(cfg.paths.reports / "table1.csv").set_index("modification")
    assert frame.loc["original"]["mu_mean"] == pytest.approx(0.5)
    assert not (cfg.paths.reports / "table2.md").exists()  # no non-parallel run: no Table 2
    markdown = (cfg.paths.reports / "table1.md").read_text()
    assert "1 run(s) of other parameters ignored" in markdown
    assert "not verified" not in markdown.split("| original |")[1].splitlines()[0]


def test_table_2_is_written_when_non_parallel_runs_exist(tmp_path) -> None:
    cfg = smoke_config(tmp_path, seeds=[0], study=["original"])
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    _fake_run(cfg, experiment, "original", 0, 0.6)
    _fake_run(cfg, experiment, "no-parallel", 0, 0.2)
    build_report(cfg)
    table2 = (cfg.paths.reports / "table2.md").read_text()
    assert "| 21 | no-parallel |" in table2 and "| 0 | original |" in table2
    # μ of ID 21 in the paper's Table 2; one seed: the value alone, no "± 0.00"
    assert "| 0.20 (paper 0.25, Δ -0.05) |" in table2
    frame = pd.read_csv(cfg.paths.reports / "table2.csv")
    assert list(frame["modification"]) == ["original", "no-parallel"]
    assert (cfg.paths.reports / "table2.tex").exists()
