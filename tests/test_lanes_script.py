"""scripts/lanes.sh across sessions: a lane that a session's stop ends resumes where it
stopped (`resume`), a lost clone starts again without double-booking, and `harvest` never
overwrites a record of this checkout's, skips deleted paths and writes only under results/.

Each test builds a small git project (the two scripts, a set-up that links this
virtualenv, the session's built corpora and vocabulary) and its own LANES_DIR under its temp
folder: nothing touches the machine's real lanes.
"""

from __future__ import annotations

import contextlib
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
