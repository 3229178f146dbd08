"""scripts/lanes.sh across sessions: a lane that a session's stop ends resumes where it
stopped (`resume`), a lost clone starts again without double-booking, and `harvest` never
overwrites a record of this checkout's, skips deleted paths and writes only under results/.

Each test builds a small git project (the two scripts, a set-up that links this
virtualenv, the session's built corpora and vocabulary) and its own LANES_DIR under its temp
folder: nothing touches the machine's real lanes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import torch

from tests.helpers import (
    BIN,
    LAUNCH_TIMEOUT,
    ROOT,
    cli_args,
    cli_settings,
    finish,
    saved_weights,
    subprocess_env,
)

SCRIPTS = ("lanes.sh", "background.sh")
#: the smoke profile's 256 sentences: 16 steps, a checkpoint every step
SENTENCES, STEPS = 256, 16


def _git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)


def _project(root: Path, built: Path | None = None) -> Path:
    """A git project with scripts/lanes.sh, background.sh and a set-up that links this
    virtualenv; ``built``: the corpora, vocabulary and data of a built project, linked."""
    (root / "scripts").mkdir(parents=True, exist_ok=True)
    for name in SCRIPTS:
        shutil.copy(ROOT / "scripts" / name, root / "scripts" / name)
    (root / "scripts" / "setup.sh").write_text(
        f'#!/usr/bin/env bash\ncd "$(dirname "$0")/.." && ln -sfn {BIN.parent} .venv\n')
    (root / ".gitignore").write_text(".venv\nartifacts/\nmlruns/\nreports/\nmetrics/\n")
    (root / ".venv").symlink_to(BIN.parent)
    (root / "results").mkdir(exist_ok=True)
    if built is not None:
        (root / "artifacts").mkdir()
        for name in ("corpora", "vocab"):
            (root / "artifacts" / name).symlink_to(built / "artifacts" / name)
        (root / "data").symlink_to(built / "data")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "add", "-f", *(["artifacts/corpora", "artifacts/vocab"] if built else []))
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "project")
    return root


def _lanes(root: Path, lanes: Path, *args: str, check: bool = True
           ) -> subprocess.CompletedProcess:
    done = subprocess.run(["bash", str(root / "scripts" / "lanes.sh"), *args], cwd=root,
                          env=subprocess_env() | {"LANES_DIR": str(lanes)},
                          capture_output=True, text=True, timeout=LAUNCH_TIMEOUT)
    if check and done.returncode != 0:
        pytest.fail(f"lanes.sh {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
    return done


def _wait(condition, what: str, log: Path | None = None, ended: Path | None = None) -> None:
    """Until ``condition()``; a failure after LAUNCH_TIMEOUT, or once ``ended`` exists."""
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    while not condition():
        if time.monotonic() > deadline or (ended is not None and ended.exists()):
            pytest.fail(f"no {what} within {LAUNCH_TIMEOUT}s"
                        + (f":\n{log.read_text()[-3000:]}" if log and log.exists() else ""))
        time.sleep(0.01)


def _group_alive(group: int) -> bool:
    """Whether a process of the group is left (zombies not counted)."""
    found = subprocess.run(["pgrep", "-s", str(group)], capture_output=True, text=True)
    return found.returncode == 0


def _session_stop(group: int) -> None:
    """What a session's end does to a lane: SIGTERM, then SIGKILL, of its process group."""
    os.killpg(group, signal.SIGTERM)
    time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    _wait(lambda: not _group_alive(group), f"end of process group {group}")


@pytest.mark.slow
def test_a_lane_stopped_like_a_session_resumes_to_identical_weights(
        built_project: Path, tmp_path: Path) -> None:
    """A lane trains a smoke model in its own process group; a session's stop (SIGTERM then
    SIGKILL of the group) lands mid-training after checkpoints; `lanes.sh resume` restarts
    the same command in the same clone, which resumes from its last checkpoint and ends with
    the weights of an uninterrupted run of the same seed. A finished lane is not restarted."""
    settings = cli_settings(Path(), **{"train.max_train_sentences": SENTENCES})
    command = shlex.join(["multilab", "-v", *cli_args(settings, "train", "--seed", "0")])
    root = _project(tmp_path / "project", built_project)
    lanes = tmp_path / "lanes"
    started = _lanes(root, lanes, "run", command)
    assert "lane 1: multilab -v" in started.stdout
    assert (lanes / "lane1.command").read_text().strip() == command  # it sets the interval
    clone, log = lanes / "lane1", lanes / "lane1.log"
    area = clone / "artifacts" / "checkpoints" / "models" / "original" / "seed0"
    group = int((lanes / "lane1.session").read_text())
    assert os.getpgid(group) == group  # its own process group

    def steps() -> list[int]:
        return [int(p.name.split("-")[1]) for p in area.glob("*/checkpoint-*")]

    _wait(lambda: max(steps(), default=0) >= 3, "checkpoint 3", log, lanes / "lane1.exit")
    _session_stop(group)
    stopped_at = max(steps())
    assert 3 <= stopped_at < STEPS, "the stop landed after the training's end"
    assert not (lanes / "lane1.exit").exists()  # ended by the stop, not by itself
    assert "ended by a session's stop" in _lanes(root, lanes, "status").stdout

    resumed = _lanes(root, lanes, "resume")
    assert f"lane 1: resumed in its clone (its last checkpoint: models/original/seed0 step " \
           f"{stopped_at}/{STEPS})" in resumed.stdout
    _wait(lambda: (lanes / "lane1.exit").exists(), "end of the resumed lane", log)
    assert (lanes / "lane1.exit").read_text().strip() == "0", log.read_text()[-3000:]
    assert re.findall(r"resuming \S+ from step (\d+)", log.read_text()) == [str(stopped_at)]
    again = _lanes(root, lanes, "resume")
    assert "lane 1: finished (exit 0), not restarted" in again.stdout
    assert not (root / "results" / "lanes.tsv").exists()  # nothing left to resume

    reference = _project(tmp_path / "reference", built_project)  # the same, never stopped
    with (reference / "train.log").open("w") as handle:
        process = subprocess.Popen(
            ["bash", "-c", command], cwd=reference, stdout=handle, stderr=subprocess.STDOUT,
            env=subprocess_env() | {"PATH": f"{BIN}:{os.environ['PATH']}"})
    finish(process, reference / "train.log")
    ours = saved_weights(clone / "artifacts" / "models" / "original" / "seed0")
    theirs = saved_weights(reference / "artifacts" / "models" / "original" / "seed0")
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)


def test_a_lost_lane_is_reported_and_restarted_without_its_dead_bookings(
        tmp_path: Path) -> None:
    """A new machine: LANES_DIR is empty, the committed results/lanes.tsv names a lane of
    a machine that is gone and the committed ledger its booking. `resume` says it is lost
    and what it lost, releases that machine's booking (here and in the new clone; another
    host's stays) and starts its command again in a new clone."""
    root = tmp_path / "project"
    (root / "results").mkdir(parents=True)
    (root / "results" / "ledger.csv").write_text(
        "study,row,seed,by,since\n"
        "s,original,43,gone-host pid 7,2026-12-01T00:00:00+00:00\n"
        "s,other,43,elsewhere pid 3,2026-12-01T00:00:00+00:00\n")
    line = "cat results/ledger.csv > seen.csv"
    (root / "results" / "lanes.tsv").write_text(
        f"1\tgone-host\t2026-12-01T00:00:00Z\tstudies/s/models/original/seed43 step "
        f"4200/13524\t{line}\n")
    _project(root)
    lanes = tmp_path / "lanes"
    resumed = _lanes(root, lanes, "resume")
    assert "lane 1: LOST: its clone" in resumed.stdout
    assert "(the last: studies/s/models/original/seed43 step 4200/13524)" in resumed.stdout
    assert f"starts again from step 0 in a new clone: {line}" in resumed.stdout
    assert "released s original seed 43 (booked by gone-host pid 7" in resumed.stdout
    _wait(lambda: (lanes / "lane1.exit").exists(), "end of the restarted lane")
    for ledger in (lanes / "lane1" / "seen.csv", root / "results" / "ledger.csv"):
        text = ledger.read_text()
        assert "elsewhere pid 3" in text and "gone-host" not in text
    assert (lanes / "lane1.host").read_text().strip() == socket.gethostname()


def test_harvest_never_overwrites_skips_deleted_paths_and_stays_in_results(
        tmp_path: Path) -> None:
    """A lane that edited a committed record, deleted one, renamed one, wrote a new one and
    a link out of results/: harvest copies the new and the renamed one only, reports the
    edited one (exit 3), leaves the deleted one here and never follows the link; --force
    takes the edit."""
    root = tmp_path / "project"
    (root / "results" / "s").mkdir(parents=True)
    for name, text in (("edited", "committed"), ("deleted", "kept"), ("renamed", "old")):
        (root / "results" / "s" / f"{name}.json").write_text(f"{text}\n")
    _project(root)
    lanes = tmp_path / "lanes"
    lanes.mkdir()
    _git(lanes, "clone", "-q", str(root), "lane1")
    lane = lanes / "lane1" / "results" / "s"
    (lane / "edited.json").write_text("the lane's\n")
    (lane / "deleted.json").unlink()
    (lane / "new.json").write_text("new\n")
    (lane / "link.json").symlink_to(tmp_path / "outside.txt")
    (tmp_path / "outside.txt").write_text("not a record\n")
    _git(lanes / "lane1", "mv", "results/s/renamed.json", "results/s/moved.json")

    done = _lanes(root, lanes, "harvest", check=False)
    assert done.returncode == 3, done.stderr
    assert sorted(done.stdout.splitlines()) == ["results/s/moved.json", "results/s/new.json"]
    assert "NOT copied results/s/edited.json: it differs from this checkout's" in done.stderr
    assert "skipped results/s/link.json" in done.stderr and "cannot stat" not in done.stderr
    here = root / "results" / "s"
    assert (here / "edited.json").read_text() == "committed\n"
    assert (here / "deleted.json").read_text() == "kept\n"
    assert (here / "renamed.json").read_text() == (here / "moved.json").read_text() == "old\n"
    assert not (here / "link.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lanes", "outside.txt", "project"]
    forced = _lanes(root, lanes, "harvest", "--force")
    assert forced.stdout.splitlines() == ["results/s/edited.json"]
    assert (here / "edited.json").read_text() == "the lane's\n"


def test_pause_and_continue_and_a_resume_without_lanes(tmp_path: Path) -> None:
    """SIGSTOP / SIGCONT are `pause` / `continue` (`resume` restarts stopped lanes now);
    with no lanes, `resume` says so and exits 0."""
    root = _project(tmp_path / "project")
    lanes = tmp_path / "lanes"
    assert "no lanes in" in _lanes(root, lanes, "resume").stderr
    usage = _lanes(root, lanes, "nonsense", check=False)
    assert usage.returncode == 2 and "pause | continue" in usage.stderr
    _lanes(root, lanes, "run", "sleep 60")
    group = int((lanes / "lane1.session").read_text())
    try:
        _lanes(root, lanes, "pause")
        _wait(lambda: "T" in subprocess.run(["ps", "-o", "stat=", "-s", str(group)],
                                            capture_output=True, text=True).stdout, "a stop")
        _lanes(root, lanes, "continue")
        _lanes(root, lanes, "stop")
        _wait(lambda: not _group_alive(group), "the lane's end")
        assert "lane 1: stopped by lanes.sh stop, not restarted" in \
            _lanes(root, lanes, "resume").stdout
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


@pytest.mark.slow
def test_queued_commands_follow_the_lane_in_order_and_stop_at_a_failure(tmp_path: Path) -> None:
    """`queue K` runs its commands after lane K's, in its clone, one after another; a lane
    that has finished already (or one started by an older lanes.sh) starts the next one at
    once; a failing command ends the queue; a lane without a command is refused."""
    root = _project(tmp_path / "project")
    lanes = tmp_path / "lanes"
    order = lanes / "lane1" / "order.txt"
    _lanes(root, lanes, "run", "sleep 5; echo first >> order.txt")
    queued = _lanes(root, lanes, "queue", "1", "echo second >> order.txt",
                    "echo third >> order.txt")
    assert "2 command(s) queued" in queued.stdout or order.exists()
    _wait(lambda: (lanes / "lane1.exit").exists(), "the lane's end", lanes / "lane1.log")
    assert order.read_text().split() == ["first", "second", "third"]
    assert (lanes / "lane1.exit").read_text().strip() == "0"
    assert (lanes / "lane1.command").read_text().strip() == "echo third >> order.txt"
    assert not re.search(r"\(\d+ queued\)", _lanes(root, lanes, "status").stdout)

    started = _lanes(root, lanes, "queue", "1", "false", "echo never >> order.txt")
    assert "started the next one queued: false" in started.stdout
    _wait(lambda: (lanes / "lane1.exit").exists(), "the queue's end", lanes / "lane1.log")
    assert (lanes / "lane1.exit").read_text().strip() == "1"
    assert "never" not in order.read_text()
    assert "(1 queued)" in _lanes(root, lanes, "status").stdout
    assert "finished (exit 1), not restarted" in _lanes(root, lanes, "resume").stdout

    refused = _lanes(root, lanes, "queue", "7", "true", check=False)
    assert refused.returncode == 2 and "lane '7' has no command" in refused.stderr
    assert _lanes(root, lanes, "queue", "1", "", check=False).returncode == 2


@pytest.mark.slow
def test_the_queue_is_taken_and_appended_only_under_its_lock(tmp_path: Path) -> None:
    """The lane's loop takes its queue's next line, and `queue K` appends to it, only while
    holding laneK.queue.lock: `sed -i 1d` replaces the file, so an append to the one it
    replaced was lost. While another holds the lock neither moves; released, every command
    queued runs once, in order."""
    root = _project(tmp_path / "project")
    lanes = tmp_path / "lanes"
    order = lanes / "lane1" / "order.txt"
    _lanes(root, lanes, "run", "sleep 5; echo first >> order.txt")
    _lanes(root, lanes, "queue", "1", "echo second >> order.txt")
    with (lanes / "lane1.queue.lock").open("a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            _wait(order.exists, "the lane's first command", lanes / "lane1.log")
            appending = subprocess.Popen(
                ["bash", str(root / "scripts" / "lanes.sh"), "queue", "1",
                 "echo third >> order.txt"], cwd=root, text=True, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env=subprocess_env() | {"LANES_DIR": str(lanes)})
            time.sleep(3)
            assert order.read_text() == "first\n"  # the lane waits for the lock
            assert "second" not in (lanes / "lane1.command").read_text()
            assert not (lanes / "lane1.exit").exists()
            assert appending.poll() is None  # and so does the append
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    assert appending.wait(timeout=LAUNCH_TIMEOUT) == 0, appending.stderr.read()
    _wait(lambda: order.read_text().split() == ["first", "second", "third"],
          "every queued command", lanes / "lane1.log")
    _wait(lambda: (lanes / "lane1.exit").exists(), "the queue's end", lanes / "lane1.log")
    assert (lanes / "lane1.exit").read_text().strip() == "0"
    assert not (lanes / "lane1.queue").read_text().strip()


@pytest.mark.slow
def test_queueing_after_a_finished_lane_starts_that_lane_alone(tmp_path: Path) -> None:
    """`queue K` on a finished lane starts lane K's next command and nothing else: another
    lane that a session's stop ended stays ended until `resume` is asked for."""
    root = _project(tmp_path / "project")
    lanes = tmp_path / "lanes"
    _lanes(root, lanes, "run", "true", "sleep 600")
    group = int((lanes / "lane2.session").read_text())
    try:
        _wait(lambda: (lanes / "lane1.exit").exists(), "lane 1's end", lanes / "lane1.log")
        _session_stop(group)
        queued = _lanes(root, lanes, "queue", "1", "echo next >> order.txt")
        assert "lane 1: its command finished; started the next one queued" in queued.stdout
        assert "lane 2" not in queued.stdout
        _wait(lambda: (lanes / "lane1.exit").exists(), "the queue's end", lanes / "lane1.log")
        assert (lanes / "lane1" / "order.txt").read_text() == "next\n"
        assert "ended by a session's stop" in _lanes(root, lanes, "status").stdout
        assert (lanes / "lane2.session").read_text().strip() == str(group)
    finally:
        for file in lanes.glob("lane*.session"):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int(file.read_text()), signal.SIGKILL)


@pytest.mark.slow
def test_a_study_lane_s_checkpoint_reaches_the_manifest(tmp_path: Path) -> None:
    """A study's run checkpoints under its own artifacts folder
    (`artifacts/studies/<study>/checkpoints/…`): `resume` beside a running lane writes it to
    results/lanes.tsv as the model's folder and step (it read only `artifacts/checkpoints/`
    and wrote none, so a new machine's `resume` could not say what was lost)."""
    from tests.test_lane_packing import toy_checkpoint_area

    root = _project(tmp_path / "project")
    lanes = tmp_path / "lanes"
    _lanes(root, lanes, "run", "sleep 60")
    group = int((lanes / "lane1.session").read_text())
    try:
        area = toy_checkpoint_area(lanes / "lane1") / "checkpoint-100"
        area.mkdir(parents=True)
        (area / "progress.json").write_text('{"step": 100, "total_steps": 400}')
        assert "lane 1: running, left alone" in _lanes(root, lanes, "resume").stdout
        fields = (root / "results" / "lanes.tsv").read_text().split("\t")
        assert fields[3] == "studies/toy/models/original/seed43 step 100/400"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def _toy_checkpoint(area: Path, step: int, total: int = 400) -> Path:
    """A complete checkpoint folder as save_checkpoint leaves it (its state.pt's hash
    beside it), and the training lock beside the model's checkpoints."""
    import hashlib

    folder = area / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "state.pt").write_bytes(f"state {step}".encode())
    (folder / "state.sha256").write_text(
        hashlib.sha256(f"state {step}".encode()).hexdigest() + "\n")
    (folder / "progress.json").write_text(f'{{"step": {step}, "total_steps": {total}}}\n')
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "config.json").write_text("{}\n")
    (area.parent / "train.lock").write_text("")
    return folder


def _parked(root: Path, lane: int = 1) -> list[str]:
    return sorted(p.relative_to(root / "lanes-parked" / f"lane{lane}").as_posix()
                  for p in (root / "lanes-parked" / f"lane{lane}").rglob("*") if p.is_file())


def test_park_keeps_a_lane_s_newest_complete_checkpoint_and_its_queue(tmp_path: Path) -> None:
    """`park` copies a running lane's newest checkpoint (not the training lock, not a
    damaged one) to lanes-parked/laneK/<its path under artifacts/>, replacing the one
    parked before, and the lane's queue to lanes-parked/laneK.queue; it says what to commit."""
    from tests.test_lane_packing import toy_checkpoint_area

    root = _project(tmp_path / "project")
    lanes = tmp_path / "lanes"
    _lanes(root, lanes, "run", "sleep 60")
    group = int((lanes / "lane1.session").read_text())
    try:
        _lanes(root, lanes, "queue", "1", "echo next")
        area = toy_checkpoint_area(lanes / "lane1")
        _toy_checkpoint(area, 100)
        parked = _lanes(root, lanes, "park")
        where = "studies/toy/checkpoints/models/original/seed43/f1/checkpoint-100"
        assert f"lane 1: parked studies/toy/models/original/seed43 step 100/400: " \
               f"lanes-parked/lane1/{where}" in parked.stdout
        assert "git add -A lanes-parked results/lanes.tsv && git commit" in parked.stdout
        assert _parked(root) == [f"{where}/{name}" for name in (
            "config.json", "model.safetensors", "progress.json", "state.pt", "state.sha256")]
        assert (root / "lanes-parked" / "lane1.queue").read_text() == "echo next\n"

        shutil.rmtree(area / "checkpoint-100")
        _toy_checkpoint(area, 150)
        _lanes(root, lanes, "park")
        assert {p.split("/")[-2] for p in _parked(root)} == {"checkpoint-150"}

        (area / "checkpoint-150" / "state.pt").write_bytes(b"damaged")  # never parked
        damaged = _lanes(root, lanes, "park", check=False)
        assert damaged.returncode == 1 and "no complete checkpoint" in damaged.stderr
        assert {p.split("/")[-2] for p in _parked(root)} == {"checkpoint-150"}
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def test_a_new_machine_s_resume_restores_the_parked_checkpoint_and_queue(
        tmp_path: Path) -> None:
    """A new machine: an empty LANES_DIR, the committed manifest and parked checkpoint and
    queue. `resume` puts the checkpoint into the new clone's artifacts/ at its path, says
    so, restores the queue, and starts the command (then the queued one)."""
    from tests.test_lane_packing import toy_checkpoint_area

    root = tmp_path / "project"
    parked = toy_checkpoint_area(root / "lanes-parked" / "lane1" / "x").relative_to(
        root / "lanes-parked" / "lane1" / "x" / "artifacts")
    _toy_checkpoint(root / "lanes-parked" / "lane1" / parked, 150)
    (root / "lanes-parked" / "lane1.queue").write_text("echo queued > queued.txt\n")
    line = "find artifacts -name progress.json > seen.txt"
    (root / "results").mkdir(parents=True)
    (root / "results" / "lanes.tsv").write_text(
        f"1\tgone-host\t2026-12-01T00:00:00Z\tstudies/toy/models/original/seed43 step "
        f"150/400\t{line}\n")
    _project(root)
    lanes = tmp_path / "lanes"
    resumed = _lanes(root, lanes, "resume")
    assert "LOST" not in resumed.stdout
    assert "lane 1: restored from parked checkpoint studies/toy/models/original/seed43 step " \
           "150/400 on a new machine" in resumed.stdout
    assert "lane 1: restored its queue (1 command(s))" in resumed.stdout
    clone = lanes / "lane1"
    _wait(lambda: (lanes / "lane1.exit").exists(), "end of the lane", lanes / "lane1.log")
    assert (lanes / "lane1.exit").read_text().strip() == "0"
    assert (clone / "seen.txt").read_text().split() == [
        f"artifacts/{parked}/checkpoint-150/progress.json"]
    assert (clone / "queued.txt").read_text() == "queued\n"


def test_harvest_deletes_the_parked_checkpoint_of_a_finished_model(tmp_path: Path) -> None:
    """Once the lane's model is finished (its multilab.json names the parked checkpoint's
    fingerprint), harvest deletes that lane's parked checkpoint and says so; one of another
    fingerprint (the model retrained since) stays."""
    from tests.test_lane_packing import toy_checkpoint_area

    root = tmp_path / "project"
    for lane, fingerprint in ((1, "f1"), (2, "f2")):
        home = root / "lanes-parked" / f"lane{lane}" / "x"
        relative = toy_checkpoint_area(home, fingerprint).relative_to(home / "artifacts")
        _toy_checkpoint(root / "lanes-parked" / f"lane{lane}" / relative, 100)
    _project(root)
    lanes = tmp_path / "lanes"
    lanes.mkdir()
    for lane in (1, 2):
        _git(lanes, "clone", "-q", str(root), f"lane{lane}")
        model = lanes / f"lane{lane}" / "artifacts" / "studies" / "toy" / "models" / \
            "original" / "seed43"
        model.mkdir(parents=True)
        (model / "multilab.json").write_text('{"fingerprint": "f1", "steps": 400}\n')
    done = _lanes(root, lanes, "harvest")
    assert "lane 1's studies/toy/models/original/seed43 finished: deleted its parked " \
           "checkpoint (lanes-parked/lane1" in done.stderr
    assert not (root / "lanes-parked" / "lane1").exists()
    assert _parked(root, 2)  # f2: not the finished model's checkpoint


def test_queue_without_the_virtualenv_fails_and_queues_nothing(tmp_path: Path) -> None:
    """No .venv/bin/python in the checkout: one line, exit 2, no queue file (it said
    "0 command(s) queued" and exited 0)."""
    root = _project(tmp_path / "project")
    (root / ".venv").unlink()
    lanes = tmp_path / "lanes"
    lanes.mkdir()
    (lanes / "lane1.command").write_text("true\n")
    done = _lanes(root, lanes, "queue", "1", "echo next", check=False)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "set up first" in done.stderr
    assert "queued" not in done.stdout
    assert not (lanes / "lane1.queue").exists()


def _train_runs(project: Path) -> list:
    """The training runs (not the row's parent) in a project's MLflow store."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    return [(run, client) for run in client.search_runs(experiments)
            if "mlflow.parentRunId" in run.data.tags]


def _loss_history(run, client) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id,
                                                                       "train_loss"))


@pytest.mark.slow
def test_a_parked_lane_continues_on_a_new_machine_to_identical_weights(
        built_project: Path, tmp_path: Path) -> None:
    """A session's stop lands mid-training; `park` and a commit keep the lane's checkpoint
    in the repository; a new machine (a clone of that commit, an empty LANES_DIR: nothing
    else survives) `resume`s: the lane continues from the parked step, ends with the weights
    of an uninterrupted run, and its new MLflow run (this store lacks the old one) holds the
    whole loss history once, tagged with the step it resumed from."""
    settings = cli_settings(Path(), **{"train.max_train_sentences": SENTENCES})
    command = shlex.join(["multilab", "-v", *cli_args(settings, "train", "--seed", "0")])
    root = _project(tmp_path / "project", built_project)
    old_lanes = tmp_path / "old-lanes"
    _lanes(root, old_lanes, "run", command)
    area = old_lanes / "lane1" / "artifacts" / "checkpoints" / "models" / "original" / "seed0"

    def steps() -> list[int]:
        return [int(p.name.split("-")[1]) for p in area.glob("*/checkpoint-*")]

    _wait(lambda: max(steps(), default=0) >= 3, "checkpoint 3", old_lanes / "lane1.log",
          old_lanes / "lane1.exit")
    _session_stop(int((old_lanes / "lane1.session").read_text()))
    stopped_at = max(steps())
    assert stopped_at < STEPS, "the stop landed after the training's end"
    parked = _lanes(root, old_lanes, "park")
    assert f"lane 1: parked models/original/seed0 step {stopped_at}/{STEPS}" in parked.stdout
    _git(root, "add", "-A", "lanes-parked", "results/lanes.tsv")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "park lanes")

    new_root = tmp_path / "new-machine"  # what survives: the repository's commits
    _git(tmp_path, "clone", "-q", str(root), str(new_root))
    subprocess.run(["bash", "scripts/setup.sh"], cwd=new_root, check=True)
    lanes = tmp_path / "lanes"
    resumed = _lanes(new_root, lanes, "resume")
    assert f"lane 1: restored from parked checkpoint models/original/seed0 step " \
           f"{stopped_at}/{STEPS} on a new machine" in resumed.stdout
    log = lanes / "lane1.log"
    _wait(lambda: (lanes / "lane1.exit").exists(), "end of the resumed lane", log)
    assert (lanes / "lane1.exit").read_text().strip() == "0", log.read_text()[-3000:]
    assert re.findall(r"resuming \S+ from step (\d+)", log.read_text()) == [str(stopped_at)]

    reference = _project(tmp_path / "reference", built_project)  # the same, never stopped
    with (reference / "train.log").open("w") as handle:
        process = subprocess.Popen(
            ["bash", "-c", command], cwd=reference, stdout=handle, stderr=subprocess.STDOUT,
            env=subprocess_env() | {"PATH": f"{BIN}:{os.environ['PATH']}"})
    finish(process, reference / "train.log")
    clone = lanes / "lane1"
    ours = saved_weights(clone / "artifacts" / "models" / "original" / "seed0")
    theirs = saved_weights(reference / "artifacts" / "models" / "original" / "seed0")
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)

    [(run, client)] = _train_runs(clone)
    assert run.info.status == "FINISHED"
    assert run.data.tags["multilab.resumed_from_step"] == str(stopped_at)
    assert run.data.tags["multilab.resumed_on_new_store"] == "true"
    [(uninterrupted, its_client)] = _train_runs(reference)
    history = _loss_history(run, client)
    assert [step for step, _ in history] == list(range(1, STEPS + 1))
    assert history == _loss_history(uninterrupted, its_client)
