"""The tracking store failing, without a real server: a dead server is one
line in seconds (MLflow's own retries bounded), a store that lost a model's run gets it back
from the model directory. The real ``mlflow server`` tests are in test_tracking_server.py.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import mlflow
import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from multilab import tracking
from multilab.cli import main
from multilab.config import Config
from multilab.errors import StoppedEarly, UserError
from multilab.evaluation.evaluate import evaluate_and_record
from multilab.resolve import resolve_run
from multilab.tracking.store import point_at
from multilab.training.train import train_model
from tests.helpers import (
    LAUNCH_TIMEOUT,
    PARAMS,
    cli_args,
    free_port,
    link_project,
    multilab_program,
    one_torch_thread,
    smoke_config,
    subprocess_env,
)

pytestmark = pytest.mark.usefixtures("one_thread")

REFUSED = ("API request to http://127.0.0.1:1/api/2.0/mlflow/runs/log-batch failed with "
           "exception HTTPConnectionPool(host='127.0.0.1', port=1): Max retries exceeded "
           "(Caused by NewConnectionError(\"Failed to establish a new connection: [Errno 111] "
           "Connection refused\"))")


@pytest.fixture
def dead_server(monkeypatch) -> str:
    """MLFLOW_TRACKING_URI at a closed port, MLflow's HTTP settings as a user's shell has them
    (unset), and the fluent API pointed back at the default afterwards."""
    uri = f"http://127.0.0.1:{free_port()}"
    for key in tracking.HTTP_SETTINGS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv(tracking.URI_VARIABLE, uri)
    previous = mlflow.get_tracking_uri()
    yield uri
    mlflow.set_tracking_uri(previous)


def test_http_retries_are_bounded_but_a_users_setting_wins(dead_server: str, monkeypatch
                                                           ) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "33")
    point_at(dead_server)
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "2"
    assert os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] == "1"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "33"


def test_a_dataset_inserted_by_a_concurrent_run_is_linked_not_fatal(tmp_path: Path,
                                                                     monkeypatch) -> None:
    """Two seeds started at once against a server can both miss the corpus in the store; the
    second insert then fails on the unique key (CI saw it). The retry links the row instead;
    any other store error still ends the run."""
    corpus = tmp_path / "train.txt"
    corpus.write_text("in the beginning\n")
    real_log_input = mlflow.log_input
    calls = []

    def first_insert_loses_the_race(dataset, context=None):
        calls.append(dataset.name)
        if len(calls) == 1:
            raise MlflowException("BAD_REQUEST: (sqlite3.IntegrityError) UNIQUE constraint "
                                  "failed: datasets.experiment_id, datasets.name, datasets.digest")
        return real_log_input(dataset, context=context)

    monkeypatch.setattr(mlflow, "log_input", first_insert_loses_the_race)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"  # set so that teardown restores the user's
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setattr(mlflow.tracking._tracking_service.utils, "_tracking_uri", store)
    with mlflow.start_run() as run:
        tracking.log_datasets({"train": (corpus, "training")}, {"train": "abc"})
    inputs = MlflowClient().get_run(run.info.run_id).inputs.dataset_inputs
    assert calls == ["train", "train"]
    assert [(d.dataset.name, d.dataset.digest) for d in inputs] == [("train", "abc")]

    def store_is_broken(dataset, context=None):
        raise MlflowException("BAD_REQUEST: no such table: datasets")

    monkeypatch.setattr(mlflow, "log_input", store_is_broken)
    with mlflow.start_run(), pytest.raises(MlflowException, match="no such table"):
        tracking.log_datasets({"train": (corpus, "training")}, {"train": "abc"})


def test_a_server_lost_after_connecting_is_one_line_in_seconds(dead_server: str,
                                                                tmp_path: Path) -> None:
    """Past the /health check (a server that died mid-run): MLflow's client used to retry
    for about 4.5 minutes; now a few seconds, then one line that says what to do."""
    paths = smoke_config(tmp_path).paths
    started = time.monotonic()
    with pytest.raises(UserError) as err:
        tracking.set_tags(paths, "0" * 32, {"evaluated": "true"})
    assert time.monotonic() - started < 20
    message = str(err.value)
    assert message.startswith(f"tracking server {dead_server} stopped answering (")
    assert "Connection refused" in message and "run the same command again" in message
    assert "\n" not in message


def test_a_server_lost_inside_a_run_ends_it_and_is_one_line(project: Config, monkeypatch
                                                           ) -> None:
    """The body's lost-server error becomes one line; the run is ended (here FAILED, as the
    store still answers; with a dead store it stays RUNNING until the next train or report
    ends it as an orphan, or a resume reopens it)."""
    experiment = tracking.connect(project.paths, project.experiment)
    lost = r"stopped answering \(\[Errno 111\] Connection refused"
    with pytest.raises(UserError, match=lost), tracking.run(experiment, tags={"fingerprint": "f"}):
        raise MlflowException(REFUSED)
    assert tracking.search_runs(project.paths, project.experiment)["status"].tolist() == [
        "FAILED"]


def test_a_failing_end_of_run_does_not_hide_the_first_error(project: Config, monkeypatch
                                                            ) -> None:
    """Disk full or server gone: ending the run fails too; the body's error is the one
    reported (it used to be a second traceback)."""
    experiment = tracking.connect(project.paths, project.experiment)

    def unwritable(*args, **kwargs):
        raise MlflowException("(sqlite3.OperationalError) database or disk is full")

    with pytest.raises(RuntimeError, match="first"), tracking.run(experiment):
        monkeypatch.setattr(MlflowClient, "set_terminated", unwritable)
        raise RuntimeError("first")
    assert mlflow.active_run() is None


def _short_project(built_project: Path, root: Path) -> Config:
    """Two optimizer steps of the original model, no curve points."""
    return smoke_config(link_project(built_project, root), seeds=[0],
                        study=["original"],
                        train={"epochs": 1, "max_train_sentences": 64, "eval_points": [],
                               "checkpoint_every": 1})


@pytest.mark.slow  # trains a smoke model
def test_a_model_whose_run_the_store_lost_gets_it_back(built_project: Path, tmp_path: Path,
                                                       capsys) -> None:
    """mlruns/ lost after training (here: a fresh store) with the evaluation JSON: train
    still skips the finished model, report says what to do in one line, evaluate re-creates
    the run from
    multilab.json and train_log.csv (once), and report works again."""
    cfg = _short_project(built_project, tmp_path / "project")
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    model_dir = train_model(resolve_run(cfg, "original", 0), experiment_id=experiment,
                            progress=False)
    lost = evaluate_and_record(cfg, model_dir)["run_id"]

    cfg = replace(cfg, paths=replace(cfg.paths, mlruns=tmp_path / "new-mlruns"))
    settings = [f"--set=paths.{name}={getattr(cfg.paths, name)}" for name in
                ("data", "artifacts", "reports", "metrics", "mlruns", "results")]
    common = ["--params", str(PARAMS), "--set=profile=smoke", "--set=seeds=[0]",
              "--set=study=[original]", "--set=train.epochs=1",
              "--set=train.max_train_sentences=64", "--set=train.eval_points=[]", *settings]
    evaluation = cfg.paths.eval_file("original", 0)  # gone too: report cannot restore it
    evaluation.rename(evaluation.with_suffix(".moved"))
    assert main([*common, "report"]) == 2
    assert "`multilab evaluate <model dir>`" in capsys.readouterr().err
    assert main([*common, "train", "--seed", "0"]) == 0  # already trained: skipped

    first = evaluate_and_record(cfg, model_dir)["run_id"]
    again = evaluate_and_record(cfg, model_dir)["run_id"]
    assert first == again != lost
    client = MlflowClient(tracking.tracking_uri(cfg.paths))
    restored = client.get_run(first)
    assert restored.info.status == "FINISHED"
    assert restored.data.tags[tracking.RESTORED_TAG] == lost
    assert restored.data.tags["evaluated"] == "true"
    assert restored.data.params["train.max_train_sentences"] == "64"
    assert [m.step for m in client.get_metric_history(first, "train_loss")] == [1, 2]
    assert main([*common, "report"]) == 0
    assert "original" in (cfg.paths.reports / "table1.csv").read_text()


@pytest.mark.slow  # trains a smoke model
def test_a_resume_whose_run_the_store_lost_continues_in_a_new_run(built_project: Path,
                                                                   tmp_path: Path) -> None:
    cfg = _short_project(built_project, tmp_path / "project")
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    with pytest.raises(StoppedEarly):
        train_model(resolve_run(cfg, "original", 0), experiment_id=experiment, stop_after_step=1,
                    progress=False)
    (lost,) = tracking.search_runs(cfg.paths, cfg.experiment)["run_id"]
    cfg = replace(cfg, paths=replace(cfg.paths, mlruns=tmp_path / "new-mlruns"))
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    train_model(resolve_run(cfg, "original", 0), experiment_id=experiment, progress=False)
    runs = tracking.search_runs(cfg.paths, cfg.experiment)
    assert runs["status"].tolist() == ["FINISHED"]
    assert runs.iloc[0][f"tags.{tracking.RESTORED_TAG}"] == lost


@pytest.mark.slow
def test_after_losing_mlruns_one_report_command_restores_runs_and_report(
        built_project: Path, tmp_path: Path, preloaded_multilab: dict[str, str]) -> None:
    """Issue 53, case 1: `rm -rf mlruns`, then `multilab report` in a fresh process (no
    client cache of the old store) re-creates the run from the committed record (and
    train_log.csv), and writes the same Table 1 with its figures; nothing retrained, the
    model directory unchanged. It used to say "no finished runs" (and, after the
    documented `evaluate`, crash on the lost run id after deleting the earlier report)."""
    from multilab.cli.common import record_result

    cfg = _short_project(built_project, tmp_path / "project")
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    with one_torch_thread():
        model_dir = train_model(resolve_run(cfg, "original", 0), experiment_id=experiment,
                                progress=False)
        evaluation = evaluate_and_record(cfg, model_dir)
        record_result(cfg, "evaluate", evaluation, model_dir)  # as `multilab evaluate` does
        lost = evaluation["run_id"]
    settings = [f"paths.{name}={getattr(cfg.paths, name)}" for name in
                ("data", "artifacts", "reports", "metrics", "mlruns", "results")]
    settings += ["profile=smoke", "seeds=[0]", "study=[original]", "train.epochs=1",
                 "train.max_train_sentences=64", "train.eval_points=[]",
                 "train.checkpoint_every=1"]
    assert main(cli_args(settings, "report")) == 0
    table = (cfg.paths.reports / "table1.csv").read_text()
    model_files = {p.name: p.read_bytes() for p in model_dir.iterdir() if p.is_file()}

    shutil.rmtree(cfg.paths.mlruns)
    env = subprocess_env(preloaded=preloaded_multilab)
    done = subprocess.run([multilab_program(env), *cli_args(settings, "report")],
                          capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=LAUNCH_TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (cfg.paths.reports / "table1.csv").read_text() == table  # the same numbers
    assert (cfg.paths.figures / "original-seed0-positions.png").exists()
    # the new store read directly: this process's MLflow still holds the deleted database open
    with sqlite3.connect(cfg.paths.mlruns / "mlflow.db") as store:
        runs = store.execute("SELECT run_uuid, status FROM runs WHERE name != 'original'"
                             ).fetchall()
        assert [status for _, status in runs] == ["FINISHED"]
        tags = dict(store.execute("SELECT key, value FROM tags WHERE run_uuid = ?",
                                  (runs[0][0],)).fetchall())
    assert tags[tracking.RESTORED_TAG] == lost and tags["evaluated"] == "true"
    assert {p.name: p.read_bytes() for p in model_dir.iterdir() if p.is_file()} == model_files


@pytest.mark.parametrize(("command", "module", "compute"), [
    (["translate", "--source", "3", "--target", "fake"], "token_translation",
     "token_translation"),
    (["mrr", "--source", "3", "--target", "fake"], "lab_word_retrieval", "lab_word_retrieval"),
    (["model-order", "--source", "3", "--target", "fake"], "model_word_order",
     "model_word_order"),
])
def test_commands_reading_a_model_reach_the_server_before_computing(
        dead_server: str, tmp_path: Path, capsys, monkeypatch, command: list[str], module: str,
        compute: str) -> None:
    """Issue 53, case 7: mrr, translate and model-order computed for 29-45 s, wrote their
    JSON and figures, then exited 2 saying "a training resumes…". Now the server is asked
    first: one line naming the variable, nothing computed, nothing written."""
    import importlib

    def computed(*args, **kwargs):
        raise AssertionError("computed before reaching the tracking server")

    monkeypatch.setattr(importlib.import_module(f"multilab.evaluation.{module}"), compute,
                        computed)
    settings = ["profile=smoke", *(f"paths.{name}={tmp_path / name}" for name in
                                   ("data", "artifacts", "reports", "metrics", "mlruns",
                                    "results"))]
    model_dir = tmp_path / "artifacts" / "models" / "original" / "seed0"
    assert main(cli_args(settings, command[0], str(model_dir), *command[1:])) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"multilab: error: MLFLOW_TRACKING_URI={dead_server} does not answer")
    assert err.count("\n") == 1 and "training resumes" not in err
    assert list(tmp_path.iterdir()) == []  # no JSON, no figure, no record


def test_a_full_disk_under_the_sqlite_store_is_one_line(project: Config, capfd,
                                                         monkeypatch) -> None:
    """Issue 53, case 9: a full disk under the local store printed 90 lines (MLflow logs
    each SQLAlchemy error with its traceback before raising it) before multilab's line."""
    import sqlite3

    import sqlalchemy.exc
    import sqlalchemy.orm

    tracking.connect(project.paths, project.experiment)  # the store exists; then the disk fills

    def disk_full(self) -> None:
        raise sqlalchemy.exc.OperationalError(
            "UPDATE", {}, sqlite3.OperationalError("database or disk is full"))

    monkeypatch.setattr(sqlalchemy.orm.Session, "commit", disk_full)
    settings = ["profile=smoke", *(f"paths.{name}={getattr(project.paths, name)}" for name in
                                   ("data", "artifacts", "reports", "metrics", "mlruns",
                                    "results"))]
    capfd.readouterr()
    assert main(cli_args(settings, "report")) == 2
    err = capfd.readouterr().err
    assert err.startswith("multilab: error: database or disk is full; free some space"), err
    assert err.count("\n") == 1 and "Traceback" not in err
