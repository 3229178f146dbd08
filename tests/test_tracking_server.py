"""A real ``mlflow server`` (SQLite store, proxied local artefacts): two concurrent training
processes lose nothing, and train → evaluate → report work against it.

The server and the two runs are session fixtures of conftest.py (``tracking_server``,
``served``); the resume tests compare their killed run with the same uninterrupted one.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from multilab import tracking
from multilab.resolve import resolve_run
from tests.helpers import (
    LAUNCH_TIMEOUT,
    STEPS,
    cli_settings,
    config_of,
    evaluated_metrics,
    finish,
    free_port,
    launch,
    link_project,
    subprocess_env,
)

slow = pytest.mark.slow


@slow
def test_different_seeds_give_different_metrics(served) -> None:
    first, second = evaluated_metrics(served["records"][0]), evaluated_metrics(served["records"][1])
    assert first.keys() == second.keys()
    assert first["ppl_train"] != second["ppl_train"] and first != second


@slow
def test_two_writers_on_a_tracking_server_lose_nothing(served) -> None:
    """Both concurrent runs are FINISHED with every param, every step and their artefact."""
    cfg, runs = served["cfg"], served["runs"]
    assert sorted(runs["tags.seed"]) == ["0", "1"]
    assert set(runs["status"]) == {"FINISHED"}
    for run_id, run in served["full"].items():
        seed = int(run.data.tags["seed"])
        params = resolve_run(cfg, "original", seed).as_params()
        expected = {k: str(v)[:6000] for k, v in params.items()}
        sizes = {"train_examples", "truncated_sentences", "total_steps", "world_size",
                 "curve_sentences"}  # constants: params, not metrics
        assert {k: v for k, v in run.data.params.items() if k not in sizes} == expected
        assert sizes <= run.data.params.keys() and not sizes & run.data.metrics.keys()
        assert {"mu", "ppl_dev"} <= run.data.metrics.keys()
        assert sorted(point.step for point in served["history"][run_id]) == list(
            range(1, STEPS + 1))
        assert run.data.tags["evaluated"] == "true"
        assert "train_log.csv" in served["artifacts"][run_id]
        assert run.info.artifact_uri.startswith("mlflow-artifacts:")  # through the server


@slow
def test_report_against_the_server_uses_both_seeds(served) -> None:
    assert served["report"] == 0
    table = pd.read_csv(served["cfg"].paths.reports / "table1.csv", keep_default_na=False)
    assert table["modification"].tolist() == ["original"]
    row = table.iloc[0]
    assert row["n_seeds"] == 2 and row["missing_seeds"] == ""
    mean = (served["records"][0]["metrics"]["mu"] + served["records"][1]["metrics"]["mu"]) / 2
    assert float(row["mu_mean"]) == pytest.approx(mean)


@slow
def test_a_server_dying_mid_training_fails_fast_and_the_run_resumes(
        start_server, built_project: Path, tmp_path: Path, preloaded_multilab: dict[str, str]
        ) -> None:
    """Issue 23 item 6: the server dies at a checkpoint; training used to block ≈ 8.5 min in
    MLflow's retries and end in a traceback. Now: one line within a minute of the death, the
    checkpoint kept; with the server back, the same command resumes the same run to
    FINISHED, every step logged."""
    store, port = tmp_path / "server", free_port()
    store.mkdir()
    root = link_project(built_project, tmp_path / "project")
    # 40 steps: the server dies at checkpoint 3, and the process stops at its next call to
    # the server, a step or two later; each step the resume trains costs a checkpoint
    settings = cli_settings(root, **{"train.epochs": 10})
    log = root / "train.log"
    with start_server(store, port) as uri:
        process = launch(settings, log, subprocess_env(uri, preloaded_multilab),
                         "train", "--seed", "0")
        deadline = time.monotonic() + LAUNCH_TIMEOUT
        while not any(root.rglob("checkpoint-3")) and process.poll() is None:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
    died = time.monotonic()  # the server is stopped (its process group killed)
    code = process.wait(timeout=LAUNCH_TIMEOUT)
    assert time.monotonic() - died < 60, "a lost server must not block for minutes"
    output = log.read_text()
    errors = [line for line in output.splitlines() if line.startswith("multilab: error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in output, output[-3000:]
    assert f"tracking server {uri} stopped answering" in errors[0]
    assert any(root.rglob("checkpoint-*")), "the checkpoint survives for the resume"

    with start_server(store, port) as uri:
        finish(launch(settings, log, subprocess_env(uri, preloaded_multilab),
                      "train", "--seed", "0"), log)
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name(config_of(settings).experiment)
        (run,) = [r for r in client.search_runs([experiment.experiment_id])
                  if r.data.tags.get(tracking.ROLE_TAG) != tracking.GROUP]  # not the parent
        steps = {m.step for m in client.get_metric_history(run.info.run_id, "train_loss")}
    assert run.info.status == "FINISHED"  # the same run, resumed and ended
    assert steps == set(range(1, 41))
