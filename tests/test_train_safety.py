"""A training never turns into a wrong "finished" model.

* checkpoints live outside the DVC out, so a killed ``dvc exp run`` resumes from them;
* a damaged checkpoint or weight file, a NaN loss or NaN weights: one line, exit 2, no
  ``multilab.json``, no RUNNING run, nothing logged into the model's run;
* a kill between the final weights and ``multilab.json`` leaves the previous model, labelled
  as before, and the new configuration's checkpoints;
* a second training of the same model is refused while the first holds ``train.lock``.

docs/RELIABILITY.md ("Training and resume") lists the cases and their outcomes.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from multilab import tracking
from multilab.cli import main
from multilab.config import Config, RunConfig
from multilab.errors import StoppedEarly
from multilab.files import write_json
from multilab.resolve import load_config, resolve_run
from multilab.training.checkpoints import TRAIN_LOCK
from multilab.training.model_dir import (
    CHECKPOINT_PREFIX,
    DONE_FILE,
    WEIGHTS,
    WEIGHTS_HASH,
    checkpoint_home,
    checkpoint_steps,
    read_done,
    run_checkpoint_area,
    staging_dir,
)
from multilab.training.train import train_model
from tests.helpers import (
    BIN,
    DVC,
    LAUNCH_TIMEOUT,
    PARAMS,
    ROOT,
    STEPS,
    cli_args,
    cli_settings,
    config_of,
    run_statuses,
    saved_weights,
    subprocess_env,
)

slow = pytest.mark.slow
pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.slow]  # every test trains (in-process or in a subprocess)
SHORT = {"train.max_train_sentences": 64}  # 4 steps, a checkpoint after each but the last
#: the SIGTERM-to-DVC test's epochs (24 steps): the lifeline's stop (≤ 1 s after DVC ends) must
#: land mid-training even when a loaded machine lets the test see checkpoint 2 late; at 8
#: steps the training could reach its end first
LONG_EPOCHS = 6


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The single ``multilab: error:`` line the command printed (no traceback; progress
    bars and MLflow's store set-up may print too)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("multilab: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("multilab: error: ")
    return lines[0]


def _overwrite_middle(path: Path, size: int = 2048) -> None:
    """Overwrite ``size`` bytes in the middle of ``path`` with 0xFF (NaN as float32): tensor
    data, not a header, so the file still loads: what a bad disk or a bad copy does."""
    data = bytearray(path.read_bytes())
    start = len(data) // 2
    data[start:start + size] = b"\xff" * size
    path.write_bytes(bytes(data))


def _trained(tmp_path: Path, capsys, **extra: object) -> tuple[list[str], Path]:
    """A finished 4-step model, tracked in the project's local store."""
    settings = cli_settings(tmp_path, **SHORT, **extra)
    assert main(cli_args(settings, "train", "--seed", "0")) == 0
    capsys.readouterr()
    return settings, resolve_run(config_of(settings), "original", 0).model_dir


# --------------------------------------------------------------------------- item 3


def _stopped_after_two_steps(tmp_path: Path) -> tuple[list[str], Config, RunConfig]:
    """A short training stopped after step 2: its checkpoint is there, no model yet."""
    settings = cli_settings(tmp_path, **SHORT)
    cfg = config_of(settings)
    run = resolve_run(cfg, "original", 0)
    with pytest.raises(StoppedEarly):
        train_model(run, experiment_id=tracking.connect(cfg.paths, cfg.experiment),
                    stop_after_step=2, progress=False)
    return settings, cfg, run


def test_overwritten_checkpoint_bytes_are_refused(project: Config, tmp_path: Path, capsys
                                                  ) -> None:
    """2 KiB overwritten inside ``state.pt`` still loads (a zip of stored tensors has no
    checksum) and used to resume into NaN; its SHA-256 now refuses it in one line."""
    settings, cfg, run = _stopped_after_two_steps(tmp_path)
    state = run_checkpoint_area(run) / f"{CHECKPOINT_PREFIX}2" / "state.pt"
    torch.load(state, weights_only=False)  # intact, it loads
    _overwrite_middle(state)
    torch.load(state, weights_only=False)  # damaged, it loads as well
    capsys.readouterr()
    assert main(cli_args(settings, "train", "--seed", "0")) == 2
    line = _one_error_line(capsys)
    assert str(state.parent) in line and "damaged" in line and "delete that folder" in line
    assert not run.model_dir.exists()  # no weights, no multilab.json
    assert run_statuses(cfg) == ["KILLED"]  # the stopped run; none RUNNING or FINISHED


def test_nan_loss_stops_the_training_failed(project: Config, tmp_path: Path, capsys) -> None:
    """A diverging run (lr 1e6: the loss is NaN at step 4) stops in one line naming the step;
    its run ends FAILED, no ``multilab.json`` is written, a later train does not skip it."""
    settings = cli_settings(tmp_path, **SHORT, **{"models.small.lr": "1.0e+6"})
    cfg = config_of(settings)
    assert main(cli_args(settings, "train", "--seed", "0")) == 2
    line = _one_error_line(capsys)
    assert "training loss is nan at step 4" in line
    assert not (resolve_run(cfg, "original", 0).model_dir / DONE_FILE).exists()
    assert run_statuses(cfg) == ["FAILED"]


def test_damaged_weights_are_refused_by_evaluate_and_train(project: Config, tmp_path: Path,
                                                           capsys) -> None:
    """Overwritten bytes in ``model.safetensors`` (NaN weights that load fine): evaluate
    refuses them in one line, writes no JSON and logs nothing into the model's run; train
    does not call the model finished. Without the recorded hash (a model of an earlier
    version), the NaN weights themselves are refused."""
    settings, model_dir = _trained(tmp_path, capsys)
    cfg = config_of(settings)
    done = read_done(model_dir)
    assert done[WEIGHTS_HASH]
    _overwrite_middle(model_dir / WEIGHTS)
    assert main(cli_args(settings, "evaluate", str(model_dir))) == 2
    assert "does not match the weights_sha256" in _one_error_line(capsys)
    assert main(cli_args(settings, "train", "--seed", "0")) == 2
    assert f"{model_dir / WEIGHTS} is damaged" in _one_error_line(capsys)

    write_json(model_dir / DONE_FILE, {k: v for k, v in done.items() if k != WEIGHTS_HASH})
    assert main(cli_args(settings, "evaluate", str(model_dir))) == 2
    assert "non-finite weights" in _one_error_line(capsys)
    assert not cfg.paths.eval_file("original", 0).exists()
    run = tracking.search_runs(cfg.paths, cfg.experiment).iloc[0]
    assert run["status"] == "FINISHED"
    assert str(run.get("tags.evaluated")) in ("nan", "None")
    assert not any(str(c).startswith("metrics.ppl") for c in run.dropna().index)


def test_nan_perplexity_is_refused(project: Config, tmp_path: Path, capsys, monkeypatch
                                   ) -> None:
    """Finite weights that still evaluate to a NaN metric: one line, no JSON, no logging."""
    settings, model_dir = _trained(tmp_path, capsys)
    monkeypatch.setattr("multilab.evaluation.evaluate.perplexity",
                        lambda *args, **kwargs: float("nan"))
    logged = []
    monkeypatch.setattr(tracking, "log_to_run", lambda *args, **kwargs: logged.append(args))
    assert main(cli_args(settings, "evaluate", str(model_dir))) == 2
    assert "non-finite metrics (ppl_dev=nan, ppl_train=nan)" in _one_error_line(capsys)
    assert not config_of(settings).paths.eval_file("original", 0).exists() and not logged


# --------------------------------------------------------------------------- item 4

#: ``multilab train`` whose write of ``multilab.json`` is a SIGKILL: the kill lands between
#: the final weights and the done file, where a kill used to leave new weights labelled old.
KILLED_AT_DONE_FILE = """
import os, signal, sys
import multilab.training.checkpoints as checkpoints
from multilab.cli import main

checkpoints.write_done = lambda *args: os.kill(os.getpid(), signal.SIGKILL)
sys.exit(main(sys.argv[1:]))
"""


@slow
def test_kill_before_the_done_file_keeps_the_previous_model(project: Config, tmp_path: Path,
                                                            capsys) -> None:
    """Model A is finished; retraining with another configuration B is SIGKILLed between
    B's final weights and its ``multilab.json``. A stays intact and labelled A; training A
    again skips it without deleting B's checkpoints; training B resumes and finishes."""
    settings, model_dir = _trained(tmp_path, capsys)
    weights_a, done_a = saved_weights(model_dir), read_done(model_dir)
    settings_b = [*settings, "train.weight_decay=0.02"]
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AT_DONE_FILE, *cli_args(settings_b, "train", "--seed", "0")],
        env=subprocess_env(), capture_output=True, text=True, timeout=LAUNCH_TIMEOUT,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert read_done(model_dir) == done_a
    assert _same_weights(saved_weights(model_dir), weights_a)
    area_b = run_checkpoint_area(resolve_run(config_of(settings_b), "original", 0))
    assert max(checkpoint_steps(area_b)) == 3

    assert main(cli_args(settings, "train", "--seed", "0")) == 0  # A: already trained
    assert max(checkpoint_steps(area_b)) == 3
    assert main(cli_args(settings_b, "train", "--seed", "0")) == 0  # B: resumes, finishes
    done_b = read_done(model_dir)
    assert done_b["fingerprint"] != done_a["fingerprint"] and done_b["steps"] == 4
    assert not _same_weights(saved_weights(model_dir), weights_a)
    assert not checkpoint_steps(area_b) and not staging_dir(model_dir).exists()


def _same_weights(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> bool:
    return ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


# --------------------------------------------------------------------------- item 8

LOCK_HOLDER = """
import sys, time
from filelock import FileLock
lock = FileLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_second_training_of_one_model_is_refused(project: Config, tmp_path: Path, capsys
                                                 ) -> None:
    """While another process holds the model's ``train.lock``, ``train`` says so in one line
    (exit 2) and writes nothing; once that process is gone, the same command trains."""
    settings = cli_settings(tmp_path, **SHORT)
    cfg = config_of(settings)
    run = resolve_run(cfg, "original", 0)
    home = checkpoint_home(cfg.paths, run.model_dir)
    home.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(home / TRAIN_LOCK), str(LAUNCH_TIMEOUT)],
        stdout=subprocess.PIPE, text=True, env=subprocess_env(),
    )
    try:
        ready, _, _ = select.select([holder.stdout], [], [], LAUNCH_TIMEOUT)
        assert ready and holder.stdout.readline().strip() == "held"
        assert main(cli_args(settings, "train", "--seed", "0")) == 2
        line = _one_error_line(capsys)
        assert f"{run.model_dir} is already being trained" in line and TRAIN_LOCK in line
        assert not run.model_dir.exists() and not run_checkpoint_area(run).exists()
        assert run_statuses(cfg) == []
    finally:
        holder.kill()
        holder.wait(timeout=60)
        holder.stdout.close()
    assert main(cli_args(settings, "train", "--seed", "0")) == 0
    assert read_done(run.model_dir)["steps"] == 4


# --------------------------------------------------------------------------- item 2


def _dvc_repo(built_project: Path, root: Path, epochs: int = 2) -> Path:
    """A git + DVC repository with the project's train stage (its out, ``persist: true``),
    the smoke profile cut to 8 steps (``epochs`` 2), and the corpora and vocabulary
    committed."""
    repo = root / "repo"
    (repo / "artifacts").mkdir(parents=True)
    for name in ("corpora", "vocab"):
        shutil.copytree(built_project / "artifacts" / name, repo / "artifacts" / name)
    params = yaml.safe_load(PARAMS.read_text())
    params |= {"profile": "smoke", "study": ["original"], "seeds": [0]}
    params["profiles"]["smoke"]["train"] |= {"max_train_sentences": 128, "epochs": epochs,
                                            "checkpoint_every": 1, "eval_points": []}
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["train"]
    stage["deps"] = ["${paths.artifacts}/corpora/train.txt", "${paths.artifacts}/vocab"]
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"train": stage}}))
    (repo / ".gitignore").write_text("/artifacts/*\n!/artifacts/corpora/\n!/artifacts/vocab/\n"
                                     "/mlruns/\n")
    for command in (["git", "init", "-q"], ["git", "config", "user.name", "test"],
                    ["git", "config", "user.email", "test@example.org"], [DVC, "init", "-q"],
                    ["git", "add", "-A"], ["git", "commit", "-qm", "train stage"]):
        subprocess.run(command, cwd=repo, check=True, env=_dvc_env(), capture_output=True)
    return repo


def _dvc_env() -> dict[str, str]:
    return subprocess_env() | {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def _kill_training_after(session: int, area: Path, step: int) -> None:
    """SIGKILL the ``multilab train`` that ``dvc exp run`` started (as the OOM killer or a
    user would) once checkpoint ``step`` is complete."""
    os.kill(_training_of(session, area, step), signal.SIGKILL)


@slow
def test_killed_dvc_exp_run_resumes_from_its_checkpoint(built_project: Path,
                                                        tmp_path: Path) -> None:
    """``dvc exp run`` empties the model directory (an out it has no hash for) before it runs
    the stage again; the checkpoints outside it survive, and the rerun resumes the same run."""
    repo = _dvc_repo(built_project, tmp_path)
    cfg = load_config(repo / "params.yaml", {"paths": {"artifacts": str(repo / "artifacts"),
                                                      "mlruns": str(repo / "mlruns"),
                                                      "results": str(repo / "results")}})
    run = resolve_run(cfg, "original", 0)
    log = tmp_path / "exp.log"
    with log.open("w") as out:
        first = subprocess.Popen([DVC, "exp", "run"], cwd=repo, env=_dvc_env(), stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _kill_training_after(first.pid, run_checkpoint_area(run), 2)
        assert first.wait(timeout=LAUNCH_TIMEOUT) != 0
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    second = subprocess.run([DVC, "exp", "run"], cwd=repo, env=_dvc_env(), text=True,
                            capture_output=True, timeout=LAUNCH_TIMEOUT)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert read_done(run.model_dir)["steps"] == STEPS
    assert run_statuses(cfg) == ["FINISHED"]  # the killed run resumed, not one from step 0


def test_checkpoint_inside_the_model_directory_still_resumes(project: Config, tmp_path: Path,
                                                             caplog) -> None:
    """A training interrupted under an earlier version left its checkpoint inside the model
    directory: it is resumed, and the finished model replaces that folder whole."""
    settings, cfg, run = _stopped_after_two_steps(tmp_path)
    run.model_dir.mkdir(parents=True)
    legacy = run.model_dir / f"{CHECKPOINT_PREFIX}2"
    (run_checkpoint_area(run) / legacy.name).rename(legacy)
    caplog.set_level("INFO", logger="multilab.training.train")
    assert main(cli_args(settings, "train", "--seed", "0")) == 0
    assert "from step 2" in caplog.text
    assert read_done(run.model_dir)["steps"] == 4 and not legacy.exists()
    assert run_statuses(cfg) == ["FINISHED"]


def test_a_model_finished_by_a_concurrent_train_is_not_trained_again(
        project: Config, tmp_path: Path, capsys, monkeypatch) -> None:
    """Issue 53, case 4: "already trained?" was asked only before the lock; a concurrent
    `train` of the same model that finished in between (here: the first answer is forced to
    "not yet", as it was when asked) made this one retrain from step 0, replace the model
    and leave a second FINISHED run. Now it is asked again under the lock: nothing retrained."""
    import multilab.training.train as train

    settings, model_dir = _trained(tmp_path, capsys)
    cfg = config_of(settings)
    files = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in model_dir.iterdir()}
    runs = tracking.search_runs(cfg.paths, cfg.experiment)["run_id"].tolist()
    real = train.already_trained
    asked: list[tuple] = []

    def not_yet_at_first(*args: object) -> bool:  # the other training still ran then
        asked.append(args)
        return False if len(asked) == 1 else real(*args)

    monkeypatch.setattr(train, "already_trained", not_yet_at_first)
    assert main(cli_args(settings, "train", "--seed", "0")) == 0
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in model_dir.iterdir()} == files
    after = tracking.search_runs(cfg.paths, cfg.experiment)
    assert after["run_id"].tolist() == runs and set(after["status"]) == {"FINISHED"}
    assert len(asked) == 2  # before the lock and under it


# ----------------------------------------------------------------------- the fault audit, case 5

LIFELINE_CHILD = """
import os, sys, time
from multilab.lifeline import end_with_dvc
end_with_dvc({"DVC_STAGE": "train@0"}, interval=0.1)
print(os.getpid(), flush=True)
time.sleep(float(sys.argv[1]))
"""
LIFELINE_PARENT = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
child.wait()
"""


def _ended(pid: int, timeout: float) -> bool:
    """Whether ``pid`` (not our child: it cannot be waited for) ends, or is a zombie, in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_a_stage_command_ends_when_its_dvc_process_is_terminated() -> None:
    """SIGTERM to DVC's pid ends DVC alone; a command it ran as a stage (DVC_STAGE set) now
    notices its parent is gone and sends itself SIGTERM (here a stand-in that sleeps)."""
    parent = subprocess.Popen(
        [sys.executable, "-c", LIFELINE_PARENT, LIFELINE_CHILD, str(LAUNCH_TIMEOUT)],
        stdout=subprocess.PIPE, text=True, env=subprocess_env() | {
            "PYTHONPATH": str(ROOT / "src")}, start_new_session=True)
    try:
        ready, _, _ = select.select([parent.stdout], [], [], LAUNCH_TIMEOUT)
        assert ready
        child = int(parent.stdout.readline())
        parent.send_signal(signal.SIGTERM)  # the parent only, as `kill <dvc pid>` does
        assert parent.wait(timeout=60) == -signal.SIGTERM
        assert _ended(child, 60), "the stage command outlived its DVC process"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
        parent.stdout.close()


@slow
def test_sigterm_to_dvc_repro_reaches_the_training(built_project: Path, tmp_path: Path
                                                   ) -> None:
    """Issue 53, case 5: `kill <pid of dvc repro>` left `multilab train` running as an orphan
    holding train.lock, and the next `dvc repro` was refused until it ended. Now the training
    ends too (run KILLED, checkpoint kept) and the next `dvc repro` resumes it to FINISHED."""
    repo = _dvc_repo(built_project, tmp_path, epochs=LONG_EPOCHS)
    cfg = load_config(repo / "params.yaml", {"paths": {"artifacts": str(repo / "artifacts"),
                                                      "mlruns": str(repo / "mlruns"),
                                                      "results": str(repo / "results")}})
    run = resolve_run(cfg, "original", 0)
    area = run_checkpoint_area(run)
    log = tmp_path / "repro.log"
    with log.open("w") as out:
        first = subprocess.Popen([DVC, "repro"], cwd=repo, env=_dvc_env(), stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    try:
        training = _training_of(first.pid, area, 2)
        first.send_signal(signal.SIGTERM)  # DVC alone, not its process group
        first.wait(timeout=LAUNCH_TIMEOUT)
        assert _ended(training, LAUNCH_TIMEOUT), "multilab train outlived dvc repro"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
    assert run_statuses(cfg) == ["KILLED"]
    assert max(checkpoint_steps(area)) >= 2 and not run.model_dir.joinpath(DONE_FILE).exists()
    second = subprocess.run([DVC, "repro"], cwd=repo, env=_dvc_env(), text=True,
                            capture_output=True, timeout=LAUNCH_TIMEOUT)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert read_done(run.model_dir)["steps"] == STEPS * LONG_EPOCHS // 2
    assert run_statuses(cfg) == ["FINISHED"]  # the same run, resumed


def _training_of(session: int, area: Path, step: int) -> int:
    """The pid of the ``multilab train`` of DVC's session, once checkpoint ``step`` exists."""
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    while max(checkpoint_steps(area), default=0) < step:
        assert time.monotonic() < deadline, f"no checkpoint {step} in {LAUNCH_TIMEOUT}s"
        time.sleep(0.05)
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if os.getsid(pid) == session and b"train" in command and any(
                    part.endswith(b"multilab") for part in command):
                return pid
        except (OSError, ProcessLookupError):
            continue
    pytest.fail("the training process of DVC was not found")


def test_a_refused_damaged_checkpoint_ends_the_killed_run_it_belongs_to(
        project: Config, tmp_path: Path, capsys) -> None:
    """Issue 53, case 9: a training SIGKILLed earlier left its run RUNNING; the next `train`
    refused the damaged checkpoint (rightly) but left that run RUNNING. It now ends KILLED."""
    from mlflow.tracking import MlflowClient

    from tests.helpers import dead_pid

    settings, cfg, run = _stopped_after_two_steps(tmp_path)
    (run_id,) = tracking.search_runs(cfg.paths, cfg.experiment)["run_id"]
    client = MlflowClient(tracking.tracking_uri(cfg.paths))
    client.update_run(run_id, status="RUNNING")  # as a SIGKILL leaves it
    client.set_tag(run_id, tracking.PID_TAG, str(dead_pid()))
    _overwrite_middle(run_checkpoint_area(run) / f"{CHECKPOINT_PREFIX}2" / "state.pt")
    capsys.readouterr()
    assert main(cli_args(settings, "train", "--seed", "0")) == 2
    assert "damaged" in _one_error_line(capsys)
    assert run_statuses(cfg) == ["KILLED"]
