"""The torch thread count follows the cores and the processes sharing them.

No timings here: what is checked is the choice (multilab.threads) and that a fresh process
really runs with it, waiting passively.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from multilab.cli import main
from multilab.errors import UserError
from multilab.threads import (
    DVC_EXP_NAME,
    DVC_ROOT,
    OMP_THREADS,
    OMP_WAIT,
    THREADS_VARIABLE,
    WORKERS_VARIABLE,
    ThreadChoice,
    apply_threads,
    choose_threads,
    in_dvc_queue,
    usable_cores,
)
from tests.helpers import DVC, LAUNCH_TIMEOUT, PARAMS, subprocess_env

HERE = Path("/repo")


@pytest.mark.parametrize(("environ", "cores", "threads"), [
    ({}, 2, 2),                                            # alone: every usable core
    ({}, 1, 1),
    ({OMP_THREADS: "3"}, 8, 3),                            # the standard variable, respected
    ({OMP_THREADS: "3,2"}, 8, 3),                          # OpenMP's nested list: first level
    ({THREADS_VARIABLE: "2", OMP_THREADS: "1"}, 8, 2),     # ours wins
    ({WORKERS_VARIABLE: "2"}, 2, 1),                       # dvc queue start -j 2 on 2 cores
    ({WORKERS_VARIABLE: "3"}, 16, 5),
    ({WORKERS_VARIABLE: "4"}, 2, 1),                       # never 0
    ({DVC_EXP_NAME: "exp", DVC_ROOT: "/elsewhere"}, 16, 1),  # a queued experiment
    ({DVC_EXP_NAME: "exp", DVC_ROOT: str(HERE)}, 16, 16),    # dvc exp run in the workspace
    ({DVC_EXP_NAME: "exp", DVC_ROOT: "/elsewhere", WORKERS_VARIABLE: "4"}, 16, 4),
])
def test_thread_count_follows_cores_and_workers(environ: dict[str, str], cores: int,
                                                threads: int) -> None:
    assert choose_threads(environ, cores, HERE).threads == threads


def test_queue_is_recognised_by_its_temporary_workspace(tmp_path: Path) -> None:
    """A queued run works in a copy of the repository under .dvc/tmp/exps; DVC_ROOT names
    the user's repository, where a workspace ``dvc exp run`` works."""
    repo = tmp_path / "repo"
    environ = {DVC_EXP_NAME: "exp", DVC_ROOT: str(repo)}
    assert in_dvc_queue(environ, repo / ".dvc" / "tmp" / "exps" / "tmpabc123")
    assert in_dvc_queue(environ, tmp_path / "elsewhere")  # a --temp copy anywhere else
    assert not in_dvc_queue(environ, repo)
    assert not in_dvc_queue(environ, repo / "sub")  # a stage's wdir
    assert not in_dvc_queue({DVC_ROOT: str(repo)}, tmp_path)  # `dvc repro`: no experiment


@pytest.mark.parametrize("variable", [THREADS_VARIABLE, WORKERS_VARIABLE, OMP_THREADS])
@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_bad_thread_settings_are_one_clear_error(variable: str, value: str) -> None:
    with pytest.raises(UserError, match=f"{variable} must be a whole number >= 1, not '{value}'"):
        choose_threads({variable: value}, 2, HERE)


def test_bad_thread_setting_on_the_command_line_is_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setenv(THREADS_VARIABLE, "many")
    assert main(["--params", str(PARAMS), "train", "--seed", "0"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"multilab: error: {THREADS_VARIABLE} must be a whole number >= 1, " \
                          "not 'many'"


def test_passive_waiting_only_with_several_threads() -> None:
    several, one = {}, {OMP_WAIT: "ACTIVE"}
    apply_threads(ThreadChoice(2, ""), several)
    apply_threads(ThreadChoice(3, ""), one)
    assert several == {OMP_THREADS: "2", OMP_WAIT: "PASSIVE"}
    assert one == {OMP_THREADS: "3", OMP_WAIT: "ACTIVE"}  # a user's choice stays
    single: dict[str, str] = {}
    apply_threads(ThreadChoice(1, ""), single)
    assert single == {OMP_THREADS: "1"}


FRESH_PROCESS = """
import os
from multilab.threads import configure_threads
choice = configure_threads()
import torch
print(choice.threads, torch.get_num_threads(), os.environ.get("OMP_WAIT_POLICY"))
"""


def test_a_fresh_process_runs_with_the_chosen_threads() -> None:
    """Before torch is imported, the choice reaches torch (OpenMP reads it once)."""
    env = subprocess_env() | {THREADS_VARIABLE: "2"}  # OMP_NUM_THREADS=1 there: ours wins
    env.pop(OMP_WAIT, None)
    out = subprocess.run([sys.executable, "-c", FRESH_PROCESS], env=env, text=True,
                         capture_output=True, check=True).stdout.split()
    assert out == ["2", "2", "PASSIVE"]


PROBE = """
import os
from multilab.threads import configure_threads
choice = configure_threads()
print(choice.threads, os.environ["OMP_NUM_THREADS"], choice.why)
"""


def _dvc(repo: Path, *args: str) -> str:
    env = {k: v for k, v in subprocess_env().items()
           if k not in (OMP_THREADS, THREADS_VARIABLE, WORKERS_VARIABLE)}
    done = subprocess.run([DVC, *args], cwd=repo, env=env, text=True, capture_output=True,
                          timeout=LAUNCH_TIMEOUT, check=True)
    return done.stdout


@pytest.mark.slow
def test_a_queued_experiment_takes_one_thread(tmp_path: Path) -> None:
    """A real experiment outside the workspace (``dvc exp run --temp``: the same temporary
    copy under .dvc/tmp/exps that a ``dvc queue`` worker runs in) takes one thread; the same
    stage in a workspace ``dvc exp run`` takes every usable core.

    ``--temp`` rather than ``dvc queue start``: the queue's detached Celery worker never came
    up on the CI machine (0 active, 0 idle for 300 s), while ``--temp`` runs the same
    temporary-workspace code path in the foreground."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "probe.py").write_text(PROBE)
    (repo / "params.yaml").write_text("x: 1\n")
    stage = {"cmd": f"{sys.executable} probe.py > probe.txt", "params": ["x"],
             "outs": ["probe.txt"]}
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"probe": stage}}))
    for command in (["git", "init", "-q"], ["git", "config", "user.name", "test"],
                    ["git", "config", "user.email", "test@example.org"], [DVC, "init", "-q"],
                    ["git", "add", "-A"], ["git", "commit", "-qm", "probe"]):
        subprocess.run(command, cwd=repo, check=True, capture_output=True)
    _dvc(repo, "exp", "run")
    assert (repo / "probe.txt").read_text().split()[:2] == [str(usable_cores())] * 2
    _dvc(repo, "exp", "run", "--temp", "-S", "x=2", "--name", "queued")
    _dvc(repo, "exp", "apply", "queued")
    assert (repo / "probe.txt").read_text().startswith("1 1 a dvc queue worker")
