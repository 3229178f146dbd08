"""Resume after a kill: what a researcher must be able to trust when runs die.

* a ``multilab train`` process SIGKILLed at seeded random steps resumes from its last
  checkpoint and ends with the weights and metrics of an uninterrupted run;
* a checkpoint cut short by the kill is never read; a damaged one is one clear error;
* no MLflow run stays RUNNING: SIGTERM ends it KILLED, and the run of a SIGKILLed process is
  ended by the next process that trains the same fingerprint (live processes are left alone).

docs/RELIABILITY.md says which guarantee each test proves.
"""

from __future__ import annotations

import os
import random
import re
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from multilab import tracking
from multilab.cli import main
from multilab.config import Config
from multilab.errors import StoppedEarly, Terminated
from multilab.evaluation.evaluate import evaluate_and_record
from multilab.resolve import resolve_run
from multilab.training.model_dir import (
    CHECKPOINT_PREFIX,
    TMP_PREFIX,
    checkpoint_steps,
    latest_checkpoint,
    model_fingerprint,
    read_done,
    run_checkpoint_area,
)
from multilab.training.train import train_model
from tests.helpers import (
    BIN,
    LAUNCH_TIMEOUT,
    PARAMS,
    STEPS,
    cli_args,
    cli_settings,
    config_of,
    dead_pid,
    evaluated_metrics,
    finish,
    launch,
    link_project,
    one_torch_thread,
    run_statuses,
    saved_weights,
    subprocess_env,
)

KILL_SEED = 8  # the kill points are random but reproducible
slow = pytest.mark.slow
pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.slow]  # every test trains (in-process or in a subprocess)


def _written_steps(area: Path) -> list[int]:
    """Steps of checkpoints written or being written."""
    return [*checkpoint_steps(area), *checkpoint_steps(area, partial=True)]


def _kill_at(process: subprocess.Popen, area: Path, step: int, log: Path) -> int:
    """SIGKILL as soon as checkpoint ``step`` (or a later one) starts being written.

    Watching the ``.tmp-`` folder as well lands many kills in the middle of a checkpoint
    write. Returns the last *complete* checkpoint left behind.
    """
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    while True:
        if max(_written_steps(area), default=0) >= step:
            break
        if process.poll() is not None:
            pytest.fail(f"training ended (exit {process.returncode}) before step {step}:\n"
                        + log.read_text()[-3000:])
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"no checkpoint {step} within {LAUNCH_TIMEOUT}s")
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)  # reaped: the pid is gone, as after a real kill
    return max(checkpoint_steps(area), default=0)


#: A process that starts an MLflow run of a fingerprint as `multilab train` does (same tags)
#: and then waits to be SIGKILLed: a training killed before its first checkpoint, minus the
#: seconds of importing torch and transformers.
ORPHAN_MAKER = """
import sys, time
from multilab import tracking
from multilab.resolve import load_config, parse_overrides
cfg = load_config(sys.argv[1], parse_overrides(sys.argv[3:]))
tags = {"fingerprint": sys.argv[2], **tracking.process_tags()}
with tracking.run(tracking.connect(cfg.paths, cfg.experiment), tags=tags) as run_id:
    print(run_id, flush=True)
    time.sleep(LAUNCH_TIMEOUT)
""".replace("LAUNCH_TIMEOUT", str(LAUNCH_TIMEOUT))


def _sigkilled_run(settings: list[str], fingerprint: str) -> tuple[str, int]:
    """(run id, pid) of a RUNNING run whose process was SIGKILLed."""
    maker = subprocess.Popen(
        [str(BIN / "python"), "-c", ORPHAN_MAKER, str(PARAMS), fingerprint, *settings],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=subprocess_env(), text=True,
    )
    try:
        ready, _, _ = select.select([maker.stdout], [], [], LAUNCH_TIMEOUT)
        run_id = maker.stdout.readline().strip() if ready else ""
    finally:
        maker.send_signal(signal.SIGKILL)
        maker.wait(timeout=60)
        maker.stdout.close()
    assert run_id, "the orphan maker started no run"
    return run_id, maker.pid


@pytest.fixture(scope="module")
def killed_and_resumed(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """``multilab train --seed 0`` SIGKILLed at three seeded random steps, then run to the end.

    Before it, a SIGKILLed process left a RUNNING run of the same fingerprint and no
    checkpoint: what a kill before the first checkpoint leaves. Launch 1 starts from scratch
    (and must end that orphan); launches 2–4 resume; many kills land in the middle of a
    checkpoint write (see ``_kill_at``).
    """
    root = link_project(built_project, tmp_path_factory.mktemp("killed"))
    settings = cli_settings(root)
    cfg = config_of(settings)
    run = resolve_run(cfg, "original", 0)
    model_dir, area = run.model_dir, run_checkpoint_area(run)
    orphan_id, orphan_pid = _sigkilled_run(settings, model_fingerprint(run))
    rng = random.Random(KILL_SEED)
    # from step 2, so that even a kill during the first write leaves checkpoint 1 to resume;
    # up to STEPS - 3: two steps of slack for a kill that lands late
    kill_steps = sorted(rng.sample(range(2, STEPS - 2), 3))
    logs = [root / f"launch{number}.log" for number in range(1, 5)]

    left_at, resumed_from = [], []
    for log, target in zip(logs, kill_steps, strict=False):
        # past every folder already there, complete or not: a stale one must not trigger
        beyond = max(_written_steps(area), default=0) + 1
        process = launch(settings, log, subprocess_env(), "train", "--seed", "0")
        left_at.append(_kill_at(process, area, min(max(target, beyond), STEPS - 1), log))
    finish(launch(settings, logs[-1], subprocess_env(), "train", "--seed", "0"), logs[-1])
    for log in logs[1:]:
        found = re.findall(r"resuming \S+ from step (\d+)", log.read_text())
        resumed_from.append(int(found[0]) if found else 0)

    with pytest.MonkeyPatch.context() as patch, one_torch_thread():
        patch.delenv(tracking.URI_VARIABLE, raising=False)
        record = evaluate_and_record(cfg, model_dir)
        runs = tracking.search_runs(cfg.paths, cfg.experiment)
        client = MlflowClient(tracking.tracking_uri(cfg.paths))
        history = {run_id: client.get_metric_history(run_id, "train_loss")
                   for run_id in runs["run_id"]}
    return {"cfg": cfg, "model_dir": model_dir, "area": area, "record": record, "runs": runs,
            "history": history, "orphan_id": orphan_id, "orphan_pid": orphan_pid,
            "left_at": left_at,
            "resumed_from": resumed_from, "kill_steps": kill_steps, "logs": logs}


@slow
def test_sigkill_at_random_steps_resumes_to_identical_weights(killed_and_resumed, served
                                                              ) -> None:
    """Each relaunch resumes from the last complete checkpoint; the end equals no kill."""
    killed = killed_and_resumed
    assert len(killed["left_at"]) == 3
    assert killed["resumed_from"] == killed["left_at"]  # not from 0, not a half-written one
    assert all(step >= 1 for step in killed["resumed_from"])
    reference = served["cfg"].paths.model_dir("original", 0)  # the same command, never killed
    ours, theirs = saved_weights(killed["model_dir"]), saved_weights(reference)
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)
    assert read_done(killed["model_dir"])["steps"] == STEPS
    for folder in (killed["model_dir"], killed["area"]):
        assert not list(folder.glob(f"{CHECKPOINT_PREFIX}*"))
        assert not list(folder.glob(f"{TMP_PREFIX}*"))  # leftovers of mid-write kills removed


@slow
def test_same_seed_gives_identical_metrics_after_kills(killed_and_resumed, served) -> None:
    """Determinism end to end: an interrupted and an uninterrupted run evaluate the same."""
    killed, uninterrupted = killed_and_resumed["record"], served["records"][0]
    assert evaluated_metrics(killed) == evaluated_metrics(uninterrupted)


@slow
def test_sigkilled_run_is_ended_killed_by_the_next_launch(killed_and_resumed) -> None:
    """The run of the process killed before any checkpoint ends KILLED and tagged; the
    four launches continue one run (its id is in each checkpoint), which ends FINISHED."""
    runs = killed_and_resumed["runs"].set_index("run_id")
    assert sorted(runs["status"]) == ["FINISHED", "KILLED"]
    orphan = runs.loc[killed_and_resumed["orphan_id"]]
    assert orphan["status"] == "KILLED"
    assert orphan[f"tags.{tracking.PID_TAG}"] == str(killed_and_resumed["orphan_pid"])
    assert "died without ending this run" in orphan[f"tags.{tracking.ORPHAN_TAG}"]
    finished = runs[runs["status"] == "FINISHED"].iloc[0]
    assert str(finished.get(f"tags.{tracking.ORPHAN_TAG}")) in ("nan", "None")


@slow
def test_resumed_run_logs_every_step_once(killed_and_resumed) -> None:
    """Steps between the last checkpoint and a kill are trained again after the resume, but
    their points are not sent again: one point per step (a paper run resumed once had 40
    doubled steps before this)."""
    runs = killed_and_resumed["runs"]
    finished = runs[runs["status"] == "FINISHED"]["run_id"].iloc[0]
    steps = [point.step for point in killed_and_resumed["history"][finished]]
    assert sorted(steps) == list(range(1, STEPS + 1))


def _stopped_at_two(project: Config, tmp_path: Path) -> tuple[list[str], Path, Path]:
    """A 4-step run stopped (resumably) after step 2, tracked in the local store; the
    settings, the model directory and its checkpoint folder."""
    settings = cli_settings(tmp_path, **{"train.max_train_sentences": 64})
    cfg = config_of(settings)
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    with pytest.raises(StoppedEarly):
        train_model(resolve_run(cfg, "original", 0), experiment_id=experiment, stop_after_step=2,
                    progress=False)
    run = resolve_run(cfg, "original", 0)
    return settings, run.model_dir, run_checkpoint_area(run)


def test_half_written_checkpoint_is_ignored(project: Config, tmp_path: Path, caplog) -> None:
    """A ``.tmp-checkpoint-N`` (a write the kill cut short) is never picked up, only removed."""
    settings, model_dir, area = _stopped_at_two(project, tmp_path)
    half = area / f"{TMP_PREFIX}{CHECKPOINT_PREFIX}3"
    half.mkdir()
    complete = (area / f"{CHECKPOINT_PREFIX}2" / "state.pt").read_bytes()
    (half / "state.pt").write_bytes(complete[: len(complete) // 2])
    assert latest_checkpoint(area) == area / f"{CHECKPOINT_PREFIX}2"
    caplog.set_level("INFO", logger="multilab.training.train")
    assert main(cli_args(settings, "train", "--seed", "0")) == 0
    assert "from step 2" in caplog.text
    assert read_done(model_dir)["steps"] == 4 and not list(area.glob(f"{TMP_PREFIX}*"))
    assert run_statuses(config_of(settings)) == ["FINISHED"]


def test_a_checkpoint_says_its_progress_without_torch(project: Config, tmp_path: Path) -> None:
    """``progress.json`` beside ``state.pt``: the step, the run's steps, its seconds so far
    (what ``study next --lanes`` reads of a lane's stopped training)."""
    from multilab.training.checkpoints import read_progress

    _, _, area = _stopped_at_two(project, tmp_path)
    progress = read_progress(area / f"{CHECKPOINT_PREFIX}2")
    assert progress is not None and progress["step"] == 2 and progress["total_steps"] == 4
    assert progress["step_seconds"] > 0 and progress["fingerprint"] == area.name
    assert read_progress(area) is None  # no progress.json: an older checkpoint


def test_damaged_checkpoint_is_one_clear_error(project: Config, tmp_path: Path, capsys
                                               ) -> None:
    """A complete checkpoint that cannot be read stops the run: skipping it would silently
    retrain from step 0 (only the latest checkpoint is kept)."""
    settings, model_dir, area = _stopped_at_two(project, tmp_path)
    state = area / f"{CHECKPOINT_PREFIX}2" / "state.pt"
    state.write_bytes(state.read_bytes()[:1000])
    capsys.readouterr()
    assert main(cli_args(settings, "train", "--seed", "0")) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("multilab: error: checkpoint ")
    assert str(state.parent) in lines[0] and "delete that folder" in lines[0]
    assert not (model_dir / "model.safetensors").exists()
    assert run_statuses(config_of(settings)) == ["KILLED"]  # the stopped run; none RUNNING


def test_sigterm_ends_the_run_killed_and_it_resumes(project: Config, tmp_path: Path) -> None:
    """A real SIGTERM in the middle of training: KILLED, then the same run resumes."""
    settings = cli_settings(tmp_path, **{"train.max_train_sentences": 64,
                                      "train.eval_points": "[0.5]"})
    cfg = config_of(settings)
    run = resolve_run(cfg, "original", 0)
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    signals = []

    def terminate_once(step: int, model) -> dict[str, float]:
        if not signals:
            signals.append(step)
            os.kill(os.getpid(), signal.SIGTERM)
        return {}

    with pytest.raises(Terminated, match="signal 15"):
        train_model(run, experiment_id=experiment, curve_hook=terminate_once, progress=False)
    assert run_statuses(cfg) == ["KILLED"]
    train_model(run, experiment_id=experiment, curve_hook=terminate_once, progress=False)
    assert run_statuses(cfg) == ["FINISHED"] and signals == [2]


def test_only_runs_of_dead_local_processes_are_orphans(tmp_path: Path) -> None:
    """A second live process training the same fingerprint, or a run of another host, is
    left RUNNING; a dead or recycled pid on this host is ended; other fingerprints untouched."""
    paths = config_of(cli_settings(tmp_path)).paths
    experiment = tracking.connect(paths, "orphans")
    client = MlflowClient(tracking.tracking_uri(paths))
    me = tracking.process_tags()
    dead = {**me, tracking.PID_TAG: str(dead_pid())}
    cases = {
        "live": me,
        "other_host": {**dead, tracking.HOST_TAG: "elsewhere"},
        "dead": dead,
        "recycled": {**me, tracking.PROCESS_START_TAG: "1"},
        "resumed": dead,
        "completed": dead,
        "no_tags": {},
        "other_fingerprint": dead,
    }
    ids = {}
    for name, tags in cases.items():
        fingerprint = "f2" if name == "other_fingerprint" else "f1"
        ids[name] = client.create_run(experiment, tags={**tags, "fingerprint": fingerprint}
                                      ).info.run_id
    ended = tracking.end_orphaned_runs(experiment, "f1", keep=ids["resumed"],
                                       completed=ids["completed"])
    status = {name: client.get_run(run_id).info.status for name, run_id in ids.items()}
    assert sorted(ended) == sorted([ids["dead"], ids["recycled"], ids["completed"]])
    assert status == {"live": "RUNNING", "other_host": "RUNNING", "dead": "KILLED",
                      "recycled": "KILLED", "resumed": "RUNNING", "completed": "FINISHED",
                      "no_tags": "RUNNING", "other_fingerprint": "RUNNING"}
    assert tracking.ORPHAN_TAG in client.get_run(ids["dead"]).data.tags
    # without a fingerprint (what the report does): every orphan of the experiment
    # ("resumed" was only kept above; its owner is dead too, and nothing resumes it here)
    assert sorted(tracking.end_orphaned_runs(experiment, None)) == sorted(
        [ids["other_fingerprint"], ids["resumed"]])
    status = {name: client.get_run(run_id).info.status for name, run_id in ids.items()}
    assert status["other_fingerprint"] == status["resumed"] == "KILLED"
    assert status["live"] == status["other_host"] == status["no_tags"] == "RUNNING"


def test_truncated_sentences_are_counted_logged_and_kill_after_save_is_healed(
    project: Config, tmp_path: Path, caplog
) -> None:
    """Too-long lines are cut (a warning, not an error) and counted in MLflow; a kill between
    ``multilab.json`` and the end of the run leaves a RUNNING run that the next launch ends
    FINISHED (the model is complete) and checkpoints it removes."""
    settings = cli_settings(tmp_path, **{"train.max_train_sentences": 64,
                                      "train.max_length": 16, "downstream.max_length": 16})
    cfg = config_of(settings)
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    caplog.set_level("WARNING", logger="multilab.data.batches")
    model_dir = train_model(resolve_run(cfg, "original", 0), experiment_id=experiment,
                            progress=False)
    done = read_done(model_dir)
    assert done["truncated_sentences"] > 0
    assert f"{done['truncated_sentences']} of 64 sentences longer than" in caplog.text
    run = tracking.search_runs(cfg.paths, cfg.experiment).iloc[0]
    assert int(run["params.truncated_sentences"]) == done["truncated_sentences"]

    client = MlflowClient(tracking.tracking_uri(cfg.paths))  # forge the kill's aftermath
    client.update_run(done["run_id"], status="RUNNING")
    client.set_tag(done["run_id"], tracking.PID_TAG, str(dead_pid()))
    area = run_checkpoint_area(resolve_run(cfg, "original", 0))
    (area / f"{CHECKPOINT_PREFIX}3").mkdir(parents=True)
    train_model(resolve_run(cfg, "original", 0), experiment_id=experiment, progress=False)
    healed = client.get_run(done["run_id"])
    assert healed.info.status == "FINISHED" and tracking.ORPHAN_TAG in healed.data.tags
    assert not list(area.glob(f"{CHECKPOINT_PREFIX}*"))
