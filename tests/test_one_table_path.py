"""One path for a number: an MLflow run and a committed record are two serialisations of one
record, and the one table builder gives byte-identical tables from either."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from multilab import tracking
from multilab.config import Config
from multilab.lab.metric_table import METRICS, dvc_metrics
from multilab.reporting.report import (
    finished_runs,
    latex_table,
    markdown_table,
    paper_table,
    rows_frame,
    table_rows,
)
from multilab.studies.default import default_configurations, default_study
from multilab.studies.records import Record, write_record
from multilab.studies.restore import import_records
from multilab.studies.run_records import (
    RECORDS_FOLDER,
    committed_records,
    record_config,
    records_of_runs,
)
from multilab.studies.tables import study_result, table_lines
from multilab.training.model_dir import write_done
from tests.helpers import fake_record, smoke_config

STUDY = ["original", "inv-order", "lang-pos"]
SEEDS = [0, 1, 2]


def _value(mod: str, seed: int, key: str) -> float:
    """A distinct number for each model and metric (the lang-pos row has no seed 2)."""
    return round(0.1 * STUDY.index(mod) + 0.01 * seed + 0.001 * list(METRICS).index(key), 6)


def _smoke_study(tmp_path: Path) -> Config:
    """A smoke study of three rows × three seeds, as `multilab evaluate` leaves it: each
    model's run with its metrics, and its record committed and carried by the run."""
    cfg = smoke_config(tmp_path, seeds=SEEDS, study=STUDY)
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    for mod in STUDY:
        for seed in SEEDS[:2] if mod == "lang-pos" else SEEDS:
            metrics = {key: _value(mod, seed, key) for key in METRICS}
            tags = {"modification": mod, "seed": seed, "profile": cfg.profile,
                    "fingerprint": f"{mod}-{seed}", "evaluated": "true"}
            with tracking.run(experiment, tags=tags) as run_id:
                tracking.log_metrics(metrics)
            fake_record(cfg, run_id, tags, metrics)
            write_done(cfg.paths.model_dir(mod, seed), tags | {"run_id": run_id})
    return cfg


def tables(cfg: Config, records: list[Record]) -> dict[str, str]:
    """Every form of the default study's table the report writes (Table 1's markdown, the
    paper's beside it, CSV, LaTeX, the DVC metrics) and the study page's table, from one
    serialisation of the records."""
    rows = table_rows(cfg, records, list(cfg.study))
    frame = rows_frame(rows)
    study = default_study(cfg, list(cfg.study))
    result = study_result(study, records, {}, configurations=default_configurations(cfg, study))
    return {"table1.md": markdown_table(rows, "Table 1"),
            "paper.md": paper_table(rows, "Table 1 of the paper"),
            "table1.csv": frame.to_csv(index=False), "table1.tex": latex_table(frame),
            "metrics": json.dumps([dvc_metrics(row.stats, len(row.seeds_found))
                                   for row in rows]),
            "study page": "\n".join(table_lines(result))}


def test_mlflow_and_committed_records_give_byte_identical_tables(tmp_path: Path) -> None:
    cfg = _smoke_study(tmp_path)
    from_runs = records_of_runs(cfg, finished_runs(cfg))
    from_files = committed_records(cfg)
    assert len(from_runs) == len(from_files) == 8
    assert all(str(r.path).startswith("runs:/") for r in from_runs)  # really two sources
    assert all(r.path.is_relative_to(cfg.paths.results) for r in from_files)
    assert tables(cfg, from_runs) == tables(cfg, from_files)
    # and the table holds the numbers: mean ± std over the seeds of each row
    rows = {row.modification: row for row in table_rows(cfg, from_runs, STUDY)}
    values = [_value("original", seed, "mu") for seed in SEEDS]
    assert rows["original"].stats["mu"] == pytest.approx(
        (statistics.fmean(values), statistics.stdev(values)))
    assert rows["lang-pos"].seeds_found == [0, 1] and rows["lang-pos"].seeds_missing == [2]
    assert "0 (missing" not in tables(cfg, from_runs)["table1.md"]


def test_a_lost_store_is_imported_back_from_the_records_to_the_same_tables(tmp_path: Path
                                                                           ) -> None:
    """`rm -rf mlruns`: the committed records re-create the runs (record → run), which
    carry them again and give the same tables, byte for byte."""
    cfg = _smoke_study(tmp_path)
    before = tables(cfg, records_of_runs(cfg, finished_runs(cfg)))
    lost = set(finished_runs(cfg)["run_id"])
    fresh = replace(cfg, paths=replace(cfg.paths, mlruns=tmp_path / "new-mlruns"))
    assert finished_runs(fresh).empty
    restored = import_records(fresh, committed_records(fresh))
    assert len(restored) == 8 and not lost & set(restored)
    assert import_records(fresh, committed_records(fresh)) == []  # once: found by its tag
    runs = finished_runs(fresh)
    assert set(runs[f"tags.{tracking.RESTORED_TAG}"]) == lost
    assert tables(fresh, records_of_runs(fresh, runs)) == before


def test_records_of_models_trained_elsewhere_stay_out_of_the_store(tmp_path: Path) -> None:
    """A fresh clone's committed records name runs its store never held: without the model
    directory that names the run, no run is made up for them."""
    cfg = _smoke_study(tmp_path)
    for done in cfg.paths.models.rglob("multilab.json"):
        done.unlink()
    fresh = replace(cfg, paths=replace(cfg.paths, mlruns=tmp_path / "new-mlruns"))
    assert import_records(fresh, committed_records(fresh)) == []
    assert finished_runs(fresh).empty


def test_a_run_without_its_record_gets_the_committed_one(tmp_path: Path) -> None:
    """A run evaluated before runs carried their records is given the committed copy (and
    is not re-created: the store holds it)."""
    cfg = smoke_config(tmp_path, seeds=[0], study=["original"])
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    tags = {"modification": "original", "seed": 0, "profile": cfg.profile,
            "fingerprint": "original-0", "evaluated": "true"}
    with tracking.run(experiment, tags=tags) as run_id:
        tracking.log_metrics({"mu": 0.25})
    model = {"modification": "original", "seed": 0, "profile": cfg.profile,
             "fingerprint": "original-0", "run_id": run_id}
    path = write_record(cfg.paths.results, cfg.experiment, "evaluate",
                        {"metrics": {"mu": 0.25}}, model=model,
                        config=record_config(cfg, "original", 0))
    train = write_record(cfg.paths.results, cfg.experiment, "train", {"steps": 1}, model=model,
                         config=record_config(cfg, "original", 0))
    tracking.log_artifact_to_run(cfg.paths, run_id, train, RECORDS_FOLDER)  # train's alone
    own = [r for r in records_of_runs(cfg, finished_runs(cfg)) if r.kind == "evaluate"]
    assert [str(r.path) for r in own] == [f"runs:/{run_id}"]  # read from the run's fields
    assert own[0].metrics["metrics.mu"] == 0.25
    assert import_records(cfg, committed_records(cfg)) == []  # the run is there
    carried = {r.kind: r for r in records_of_runs(cfg, finished_runs(cfg))}
    assert set(carried) == {"train", "evaluate"}
    assert carried["evaluate"].data == json.loads(path.read_text())
    assert table_rows(cfg, [carried["evaluate"]], ["original"])[0].run_ids == (run_id,)


def test_a_record_of_another_configuration_is_counted_and_ignored(tmp_path: Path) -> None:
    """A record of a row's modification and seed measured under other parameters (here one
    more training epoch) is no row's record: the table leaves it out and says so."""
    cfg = smoke_config(tmp_path, seeds=[0], study=["original"])
    model = {"modification": "original", "seed": 0, "profile": cfg.profile,
             "fingerprint": "original-0", "run_id": None}
    config = record_config(cfg, "original", 0)
    write_record(cfg.paths.results, cfg.experiment, "evaluate", {"metrics": {"mu": 0.25}},
                 model=model, config=config)
    write_record(cfg.paths.results, cfg.experiment, "evaluate", {"metrics": {"mu": 0.75}},
                 model=model | {"fingerprint": "more-epochs"},
                 config=config | {"train.epochs": config["train.epochs"] + 1})
    (row,) = table_rows(cfg, committed_records(cfg), ["original"])
    assert row.stats["mu"] == (0.25, 0.0) and row.other_configurations == 1
    assert "1 run(s) of other parameters ignored" in markdown_table([row], "Table 1")


def test_the_default_study_is_listed_and_reported_from_where_dvc_repro_writes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`study list | report` hold the default study beside studies/*.yaml, named after its
    experiment; its page's table is the one the report stage builds from the runs, and a
    record of the same model in another study's folder is not read."""
    from multilab.cli import main

    cfg = _smoke_study(tmp_path)
    model = {"modification": "original", "seed": 0, "profile": cfg.profile,
             "fingerprint": "original-0", "run_id": None}
    write_record(cfg.paths.results, "another-study", "evaluate", {"metrics": {"mu": 0.9}},
                 model=model, config=record_config(cfg, "original", 0))  # newer, elsewhere
    sets = [arg for key, value in {
        "profile": "smoke", "seeds": "[0, 1, 2]", "study": f"[{', '.join(STUDY)}]",
        **{f"paths.{name}": tmp_path / name for name in
           ("data", "artifacts", "reports", "metrics", "mlruns", "results")}}.items()
            for arg in ("--set", f"{key}={value}")]
    studies = Path(__file__).parents[1] / "studies"
    assert main([*sets, "study", "list", "--wide", "--studies", str(studies)]) == 0
    listed = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert listed[1][:1] == [cfg.experiment] and "8/9" in listed[1]  # first, 8 of 9 runs
    out = tmp_path / "pages"
    assert main([*sets, "study", "report", cfg.experiment, "--out", str(out),
                 "--studies", str(studies)]) == 0
    page = (out / f"{cfg.experiment}.md").read_text()
    assert tables(cfg, records_of_runs(cfg, finished_runs(cfg)))["study page"] in page
    assert "This study tests no claim" in page


def test_a_re_created_run_is_named_as_training_names_it(tmp_path: Path) -> None:
    """A sweep's row (``rows``: original → h32-l8) names its seed runs after the row; a run
    re-created from its committed record keeps that name, not the shared modification's."""
    from mlflow.tracking import MlflowClient

    cfg = smoke_config(tmp_path, seeds=[0], study=["original"], rows={"original": "h32-l8"})
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    tags = {"modification": "original", "seed": 0, "profile": cfg.profile,
            "fingerprint": "original-0", "evaluated": "true"}
    with tracking.run(experiment, tags=tags) as run_id:
        tracking.log_metrics({"mu": 0.25})
    fake_record(cfg, run_id, tags, {"mu": 0.25})
    write_done(cfg.paths.model_dir("original", 0), tags | {"run_id": run_id})
    fresh = replace(cfg, paths=replace(cfg.paths, mlruns=tmp_path / "new-mlruns"))
    (restored,) = import_records(fresh, committed_records(fresh))
    assert MlflowClient().get_run(restored).info.run_name == "h32-l8 s0"
