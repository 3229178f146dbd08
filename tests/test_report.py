"""The report reads MLflow: mean ± std per modification over seeds, one run per
(configuration, seed), stale/failed/unevaluated runs ignored, missing seeds named."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from multilab import tracking
from multilab.cli import main
from multilab.config import Config
from multilab.lab.metric_table import METRICS
from multilab.reporting.report import build_report
from tests.helpers import cli_args, cli_settings, config_of, fake_run, smoke_config


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Config, pd.DataFrame, str]:
    """One report of fake runs, read by six tests (built once: ≈ 3 CPU s a report); the one
    test that changes its folder builds the report again, to the same files."""
    tmp_path = tmp_path_factory.mktemp("reported")
    cfg = smoke_config(tmp_path, seeds=[0, 1, 2], study=["original", "inv-order", "lang-pos"])
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    for seed, value in enumerate([0.2, 0.4, 0.9]):
        fake_run(cfg, experiment, "original", seed, value)
    fake_run(cfg, experiment, "original", 0, 0.99, fail=True)  # FAILED: ignored
    fake_run(cfg, experiment, "original", 1, 0.99, evaluated=False)  # not evaluated: ignored
    fake_run(cfg, experiment, "inv-order", 0, 0.05, fingerprint="old")  # stale, then rerun:
    fake_run(cfg, experiment, "inv-order", 0, 0.01, fingerprint="new")  # only the latest counts
    fake_run(cfg, experiment, "inv-order", 1, 0.03)
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
    tex = (cfg.paths.reports / "table1.tex").read_text()
    assert r"\begin{tabular}" in tex and tex.rstrip().endswith(r"\end{tabular}")
    assert "0.500$_{0.361}$" in tex and "[0.700]" in tex  # ours with std, the paper's below
    assert "## Modifications" in markdown and "`inv-order`: Fake-English word order" in markdown


def test_table_is_compact_with_the_paper_in_its_own_table(reported) -> None:
    """Issue 22: a cell is "mean ± std" alone (no "(paper …, Δ …)" wrapping onto four lines);
    the paper's values are a table of their own with the same columns."""
    _, _, markdown = reported
    ours, paper = markdown.split("### Table 1 of the paper")
    original = next(line for line in ours.splitlines() if line.startswith("| 0 | original |"))
    assert "| 0.500 ± 0.361 |" in original and "paper" not in original and "Δ" not in original
    metric_cells = original.split("|")[3 : 3 + len(METRICS)]
    assert max(map(len, metric_cells)) <= len(" 0.500 ± 0.361 ")
    paper_row = next(line for line in paper.splitlines() if line.startswith("| 0 | original |"))
    assert paper_row.split("|")[3].strip() == "0.700" and "| 217 |" in paper_row
    assert "| 3 | inv-order |" in paper  # every row with a paper ID, in the study's order


def test_small_values_never_read_as_zero() -> None:
    """τ of 0.0027 rounded to two places read 0.00: values keep 3 places, and a non-zero value
    below that keeps two significant digits."""
    from multilab.lab.cells import number

    assert number(0.0027) == "0.003" and number(0.00043) == "0.00043"
    assert number(0.0) == "0.000" and number(4128.4) == "4,128"


def test_plot_data_overlays_every_model_per_quantity(reported) -> None:
    """One CSV per quantity, a column per study entry (dvc.yaml's `y: ${study}`), the mean
    over seeds at each step; an entry without runs still has its (empty) column."""
    cfg, _, _ = reported
    loss = pd.read_csv(cfg.paths.reports / "plots" / "train_loss.csv")
    assert list(loss.columns) == ["step", "original", "inv-order", "lang-pos"]
    assert loss["original"].tolist() == pytest.approx([8.0 - statistics.fmean([0.2, 0.4, 0.9])])
    assert loss["inv-order"].tolist() == pytest.approx([8.0 - statistics.fmean([0.01, 0.03])])
    assert loss["lang-pos"].isna().all()
    # no per-model folders: the variant's curves (here the study's `original`) are the one
    folders = {path.parent.name for path in (cfg.paths.reports / "plots").glob("*/*.csv")}
    assert folders == {"variant"}



def test_dvc_metrics_of_the_study_are_the_table_metrics(reported) -> None:
    """metrics/study/<row>.json (dvc.yaml's `metrics:` folder): one file per row, so `dvc
    metrics show` prints a row per model; each table metric under its one DVC key, flat."""
    cfg, _, _ = reported
    folder = cfg.paths.metrics / "study"
    study = {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")}
    assert set(study) == {"original", "inv-order", "lang-pos"}
    assert set(study["original"]) == {*(m.dvc for m in METRICS.values()), "seeds"}
    assert study["original"]["1.mu"] == round(statistics.fmean([0.2, 0.4, 0.9]), 3)
    assert study["original"]["seeds"] == 3
    assert study["lang-pos"] == {"seeds": 0}
    stale = folder / "no-longer-studied.json"
    stale.write_text("{}")
    build_report(cfg)
    assert not stale.exists()


def test_runs_of_other_parameters_are_ignored_and_counted(project: Config) -> None:
    """A later run of the same modification and seed trained with other parameters (here: a
    different fingerprint, as `dvc exp run -S train.epochs=5` gives) never replaces the run of
    the current configuration; the table says it was ignored."""
    from multilab.reporting.report import expected_fingerprint

    cfg = project
    current = expected_fingerprint(cfg, "original", 42)
    assert current is not None  # the corpus and vocabulary are built here
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    fake_run(cfg, experiment, "original", 42, 0.5, fingerprint=current)
    fake_run(cfg, experiment, "original", 42, 0.9, fingerprint="other-epochs")  # later
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
    fake_run(cfg, experiment, "original", 0, 0.6)
    fake_run(cfg, experiment, "no-parallel", 0, 0.2)
    build_report(cfg)
    table2 = (cfg.paths.reports / "table2.md").read_text()
    assert "| 21 | no-parallel |" in table2 and "| 0 | original |" in table2
    # one seed: the value alone, no "± 0.000"; μ of ID 21 in the paper's Table 2 below it
    assert "| 21 | no-parallel | 0.200 |" in table2
    assert "| 21 | no-parallel | 0.250 |" in table2.split("Table 2 of the paper")[1]
    frame = pd.read_csv(cfg.paths.reports / "table2.csv")
    assert list(frame["modification"]) == ["original", "no-parallel"]
    assert (cfg.paths.reports / "table2.tex").exists()


def test_report_counts_one_finished_run_per_fingerprint_and_seed(tmp_path: Path) -> None:
    """A RUNNING orphan and a KILLED run never enter the table, and of two FINISHED runs of
    one fingerprint only the latest counts (through the command line)."""
    cfg = config_of(cli_settings(tmp_path, seeds="[0]"))
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    fake_run(cfg, experiment, "original", 0, 0.2, fingerprint="same")
    time.sleep(0.01)  # distinct end times: "latest" is well defined
    fake_run(cfg, experiment, "original", 0, 0.4, fingerprint="same")
    client = MlflowClient(tracking.tracking_uri(cfg.paths))
    tags = {"modification": "original", "seed": "0", "profile": cfg.profile,
            "fingerprint": "same", "evaluated": "true"}
    for status in ("RUNNING", "KILLED"):
        stray = client.create_run(experiment, tags=tags).info.run_id
        client.log_metric(stray, "mu", 0.9)
        if status == "KILLED":
            client.set_terminated(stray, status=status)
    assert main(cli_args(cli_settings(tmp_path, seeds="[0]"), "report")) == 0
    table = pd.read_csv(cfg.paths.reports / "table1.csv", keep_default_na=False)
    row = table.set_index("modification").loc["original"]
    assert row["n_seeds"] == 1 and row["mu_mean"] == pytest.approx(0.4)


def test_an_earlier_reports_files_go_and_command_results_stay(tmp_path: Path) -> None:
    """The stage's out persists (commands leave results in reports/): the report removes what
    an earlier report wrote, keeps `multilab static`'s JSON and gathers it."""
    from tests.test_liu_sections import static_record

    cfg = smoke_config(tmp_path, seeds=[0], study=["original"])
    fake_run(cfg, tracking.connect(cfg.paths, cfg.experiment), "original", 0, 0.6)
    reports = cfg.paths.reports
    (reports / "figures").mkdir(parents=True)
    (reports / "static").mkdir()
    (reports / "plots" / "original").mkdir(parents=True)  # the per-model layout of old
    stale = [reports / "table2.md", reports / "downstream.csv", reports / "figures" / "old.png",
             reports / "retrieval.md", reports / "word_order.md",
             reports / "word_order_correlation.json", reports / "plots" / "original" / "loss.csv"]
    for path in stale:
        path.write_text("of an earlier study")
    (reports / "static" / "3-fake.json").write_text(json.dumps(static_record()))
    (reports / "similarity" / "3-l").mkdir(parents=True)  # `multilab similarity`'s result
    curve = {"sentence_retrieval": [0.1, 0.5], "cka": [0.3, 0.4]}  # an older JSON's measures
    (reports / "similarity" / "3-l" / "similarity.json").write_text(json.dumps({
        "editions": ["3", "l"], "verses": 100, "layers": [0, 1], "aligned_occurrences": 7,
        "dictionary": {"kind": "silver", "pairs": 9}, "trained": curve,
        "untrained": {m: [v / 2 for v in values] for m, values in curve.items()}}))
    build_report(cfg)
    assert not any(path.exists() for path in stale)
    assert (reports / "static" / "3-fake.json").exists()
    table = (reports / "table1.md").read_text()
    assert "word retrieval MRR (Liu et al. 2020a/b)" in table
    assert "![mrr-by-window-3-fake](figures/mrr-by-window-3-fake.png)" in table
    assert "| 3–l | 100 | silver (9) | 7 | verse retrieval P@1 | 1 | 0.500 | 0.250 | +0.250 |" \
        in table and "![figure2-cka](figures/figure2-cka.png)" in table
    assert (reports / "similarity.md").exists()


def test_the_variant_is_reported_beside_the_study(tmp_path: Path) -> None:
    """Issue 54: the variant (params.yaml's modification) has its own table in the report and
    its curves in the plot data, under its name; one the study has is named, not repeated."""
    cfg = smoke_config(tmp_path, seeds=[0, 1], study=["original"], modification="inv-order")
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    for seed in (0, 1):
        fake_run(cfg, experiment, "original", seed, 0.5)
        fake_run(cfg, experiment, "inv-order", seed, 0.1 + seed / 10)
    build_report(cfg)
    table = (cfg.paths.reports / "table1.md").read_text()
    assert "### Variant: inv-order" in table and "| 3 | inv-order | 0.150 ± 0.071 |" in table
    variant = pd.read_csv(cfg.paths.reports / "plots" / "variant" / "train_loss.csv")
    assert list(variant.columns) == ["step", "variant inv-order"]
    assert variant["variant inv-order"].tolist() == pytest.approx([7.85])
    study = pd.read_csv(cfg.paths.reports / "plots" / "train_loss.csv")
    assert list(study.columns) == ["step", "original"]  # the variant in its own file
    same = smoke_config(tmp_path, seeds=[0, 1], study=["original"], modification="original")
    build_report(same)
    table = (same.paths.reports / "table1.md").read_text()
    assert "### Variant" not in table and "is the study's row `original`" in table


def test_a_report_that_fails_half_way_keeps_the_previous_one(tmp_path: Path, monkeypatch
                                                             ) -> None:
    """Issue 53, case 1: the report used to delete its earlier tables, figures and plot data
    first, then crash (a lost run): a failing report now leaves every earlier file as it
    was; the earlier report's files it does not write again go only once the new ones exist."""
    import multilab.reporting.report as report

    cfg = smoke_config(tmp_path, seeds=[0], study=["original"])
    fake_run(cfg, tracking.connect(cfg.paths, cfg.experiment), "original", 0, 0.6)
    build_report(cfg)
    reports = cfg.paths.reports
    stale = reports / "figures" / "of-an-earlier-study.png"
    stale.write_bytes(b"png")
    before = {path: path.read_bytes() for path in reports.rglob("*") if path.is_file()}
    assert reports / "table1.md" in before and reports / "plots" / "train_loss.csv" in before

    def lost_run(*args, **kwargs):
        raise RuntimeError("run not found")

    monkeypatch.setattr(report, "write_plot_data", lost_run)  # the report's last writer
    with pytest.raises(RuntimeError, match="run not found"):
        build_report(cfg)
    assert {path: path.read_bytes() for path in reports.rglob("*") if path.is_file()} == before
    monkeypatch.undo()
    build_report(cfg)
    assert not stale.exists() and (reports / "table1.md").exists()
    assert "of-an-earlier-study" not in (reports / "table1.md").read_text()
