"""``multilab study run --executor ray``: a study's (row, seed) runs as tasks on a Ray cluster.

The local runner (:func:`multilab.studies.runner.run_study`) plans the runs, builds the
study's data once and turns each (row, seed) into its commands (:class:`StepRun`: ``train``,
then the commands that write its records). This module only chooses where those commands
run: each run becomes one Ray task with the resources it asks for (``num_cpus``,
``num_gpus``), executed in a fresh worker process (``max_calls=1``: a training's threads, GPU
memory and MLflow state die with it) that runs the very same ``multilab`` commands. So the
records, checkpoints, fingerprints and MLflow runs are the local runner's, byte for byte.

Data and results travel by a shared path: every worker works in the driver's project folder
(the same path on each machine: one machine, or a network file system across machines), reads
the data the driver prepared there, writes its checkpoints, model and records there. MLflow
runs go to the driver's tracking URI (``MLFLOW_TRACKING_URI``, passed on to each task, or the
project's own store under that folder).

Failures: a worker that dies (SIGKILL, the OOM killer, a lost node) or a run stopped by a
signal (a node drained) is retried by Ray (:data:`MAX_RETRIES`); the retried task runs the
same ``train``, which resumes from the run's last checkpoint, so the model ends with the
weights of an uninterrupted run. A command that fails by itself (bad input, a diverged loss)
is not retried: it would fail again.

The ledger of :mod:`multilab.studies.ledger` books runs for the local lanes; with Ray, Ray
schedules, and nothing is booked. Ray is an optional dependency (the ``ray`` extra), imported
only here and only when asked for.
"""

from __future__ import annotations

import math
import os
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from multilab import stops
from multilab.errors import UserError
from multilab.studies.runner import Command, Dispatch, StepRun, failure_line, shown_command

EXECUTORS = ("local", "ray")
RAY_REQUIREMENT = "ray==2.60.0"  # pyproject's `ray` extra
INSTALL = f"pip install '{RAY_REQUIREMENT}' (the project's extra: pip install -e '.[ray]')"
#: retries of a task whose worker died or was stopped: each resumes from the checkpoints
MAX_RETRIES = 3
#: the driver's variables each task gets: where MLflow runs go, the lab's own switches
PASSED_VARIABLES = ("MLFLOW_TRACKING_URI", "TQDM_DISABLE", "OMP_WAIT_POLICY")
PASSED_PREFIX = "MULTILAB_"
#: seconds to wait for a cluster's head to answer before a study builds anything (Ray's own
#: connect waits about a minute, after the data is built)
CONNECT_TIMEOUT_S = 10.0


class CommandFailed(Exception):
    """A run's command exited non-zero on its worker: its own failure, not retried."""

    def __init__(self, shown: str, code: int) -> None:
        super().__init__(shown, code)
        self.shown, self.code = shown, code


class RunStopped(Exception):
    """A run's command took a stop (SIGTERM, SIGINT on its worker): retried, it resumes."""


def import_ray() -> ModuleType:
    """Ray, or one line naming the command that installs it."""
    try:
        import ray
    except ImportError:
        raise UserError(f"--executor ray: Ray is not installed; install it with {INSTALL}"
                        ) from None
    return ray


@dataclass(frozen=True)
class RayExecutor:
    """Dispatches a study's prepared runs as Ray tasks (a :data:`Dispatch`)."""

    command: Command  # the command line's main, with its --params and --set
    root: Path  # the project folder, the same path on every worker
    address: str | None = None  # a running cluster ("HOST:6379", "auto"); None: a local one
    cpus_per_run: float = 1.0
    gpus_per_run: float | None = None  # None: one GPU a run where the cluster has GPUs
    say: Callable[[str], None] = print

    def __call__(self, runs: Sequence[StepRun]) -> None:
        ray = import_ray()
        started = not ray.is_initialized()  # a caller (a test) may have connected already
        if started:
            # "local": always a new instance on this machine, never a cluster found by chance
            try:
                ray.init(address=self.address or "local", include_dashboard=False,
                         log_to_driver=True)
            except ConnectionError as error:  # `auto` finding none; a head gone since
                raise UserError(f"--address {self.address or 'local'}: no Ray cluster to "
                                f"connect to ({_first_line(error)}); start one (`ray start "
                                "--head`) or leave --address out (a local one)") from None
        try:
            self._run(ray, runs)
        finally:
            if started:
                ray.shutdown()

    def _run(self, ray: ModuleType, runs: Sequence[StepRun]) -> None:
        cpus, gpus = self.resources(ray.cluster_resources())
        task = ray.remote(
            num_cpus=cpus, num_gpus=gpus, max_calls=1, max_retries=MAX_RETRIES,
            retry_exceptions=[RunStopped], runtime_env={"env_vars": passed_environment()},
        )(run_commands)
        pending = {}
        for run in runs:
            self.say(f"{run.title}: a Ray task ({cpus:g} CPU, {gpus:g} GPU)")
            pending[task.remote(self.command, str(self.root.resolve()), run.commands,
                                sys.argv)] = run
        failures: list[str] = []
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    run = pending.pop(ref)
                    try:
                        host = ray.get(ref)
                    except CommandFailed as error:  # Ray's error is an instance of the cause
                        failures.append(failure_line(run.study, error.shown, error.code))
                    except ray.exceptions.RayError as error:
                        print(error, file=sys.stderr)  # the worker's traceback, if any
                        failures.append(task_failure(run, error))
                    else:
                        self.say(f"{run.title}: done on {host}")
        except BaseException:  # a stop of the driver: the tasks end too, resumable
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        if failures:
            for line in failures[1:]:
                self.say(line)
            raise UserError(failures[0])

    def resources(self, cluster: dict[str, float]) -> tuple[float, float]:
        """(CPUs, GPUs) a run asks for, checked against what the cluster has: a request no
        node can meet would wait forever."""
        cpus = self.cpus_per_run
        gpus = self.gpus_per_run if self.gpus_per_run is not None else \
            (1.0 if cluster.get("GPU", 0) else 0.0)
        offered_cpus, offered_gpus = cluster.get("CPU", 0), cluster.get("GPU", 0)
        if not 0 < cpus <= offered_cpus:
            raise UserError(f"--cpus-per-run {cpus:g}: the Ray cluster has {offered_cpus:g} "
                            f"CPU(s); valid: more than 0, up to {offered_cpus:g}")
        if not 0 <= gpus <= offered_gpus:
            raise UserError(f"--gpus-per-run {gpus:g}: the Ray cluster has {offered_gpus:g} "
                            f"GPU(s); valid: 0 to {offered_gpus:g} (0.25: four runs a GPU)")
        return cpus, gpus


def check_resources(cpus_per_run: float, gpus_per_run: float | None) -> None:
    """What a run asks for, before the cluster is asked what it has: a count of CPUs above
    0 and of GPUs from 0, finite (``nan`` compares false with every bound)."""
    if not (math.isfinite(cpus_per_run) and cpus_per_run > 0):
        raise UserError(f"--cpus-per-run {cpus_per_run:g}; valid: a number above 0 "
                        "(1: a run's torch threads)")
    if gpus_per_run is not None and not (math.isfinite(gpus_per_run) and gpus_per_run >= 0):
        raise UserError(f"--gpus-per-run {gpus_per_run:g}; valid: 0 or more (0.25: four "
                        "runs a GPU)")


def check_address(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A cluster's head answers at ``address`` (``HOST:PORT``, ``ray://HOST:PORT``; ``auto``
    and ``local`` are Ray's to find), before any data is built for it."""
    if address in ("auto", "local"):
        return
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not host or not port.isdigit():
        raise UserError(f"--address {address!r}; valid: HOST:PORT of a running Ray head "
                        "(HOST:6379), ray://HOST:10001, auto, or leave it out (a local one)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise UserError(f"--address {address}: no Ray cluster answers there ({error}); start "
                        "one (`ray start --head`) or leave --address out (a local one)"
                        ) from None


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def task_failure(run: StepRun, error: BaseException) -> str:
    """The one line of a task that failed otherwise than by its command's exit status: an
    exception inside it, or its worker lost more often than it was retried."""
    cause = getattr(error, "cause", None) or error
    lines = str(cause).strip().splitlines()
    return (f"{run.title}: its Ray task failed ({type(cause).__name__}: "
            f"{lines[0] if lines else 'no message'}; retried up to {MAX_RETRIES} times where "
            "its worker died)")


def passed_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The driver's variables a task runs with: its tracking URI and the lab's switches."""
    environ = dict(os.environ if environ is None else environ)
    return {name: value for name, value in environ.items()
            if name in PASSED_VARIABLES or name.startswith(PASSED_PREFIX)}


def run_commands(command: Command, root: str, commands: Sequence[Sequence[str]],
                 program: Sequence[str] = ()) -> str:
    """On a worker: one run's commands, in the project folder; returns the worker's host.
    ``program``: the driver's ``sys.argv``, which records name as the command that made
    them (the local runner's records say ``multilab study run …``, and so do these)."""
    if program:
        sys.argv = list(program)
    folder = Path(root)
    if not folder.is_dir():
        raise CommandFailed(f"cd {root} (on {socket.gethostname()}: the project must lie on "
                            "a path every Ray node shares)", 2)
    os.chdir(folder)
    for args in commands:
        code = command(list(args))
        if stops.stop_of_exit_status(code) is not None:
            raise RunStopped(f"{shown_command(args)}: stopped (exit {code})")
        if code != 0:
            raise CommandFailed(shown_command(args), code)
    return socket.gethostname()


def executor_dispatch(executor: str, command: Command, root: Path, address: str | None = None,
                      cpus_per_run: float = 1.0, gpus_per_run: float | None = None,
                      stack: int = 1, queue: bool = False,
                      say: Callable[[str], None] = print) -> Dispatch | None:
    """The ``study run`` dispatch of ``--executor`` (None: the local runner's own loop),
    checked before anything runs: an unknown executor, ``--address`` or resources without
    Ray, Ray with ``--queue`` or ``--stack``, Ray missing — each one line."""
    if executor not in EXECUTORS:
        raise UserError(f"--executor {executor!r}; valid: {', '.join(EXECUTORS)}")
    if executor == "local":
        given = [name for name, value in (("--address", address),
                                          ("--gpus-per-run", gpus_per_run)) if value is not None]
        if given or cpus_per_run != 1.0:
            raise UserError(f"{(given or ['--cpus-per-run'])[0]} needs --executor ray "
                            "(valid: --executor ray, or leave it out)")
        return None
    if queue:
        raise UserError("--queue with --executor ray: DVC's queue or Ray schedules the runs, "
                        "not both (valid: one of them)")
    if stack != 1:
        raise UserError(f"--stack {stack} with --executor ray: each (row, seed) is one Ray "
                        "task (valid: --stack 1)")
    check_resources(cpus_per_run, gpus_per_run)
    import_ray()  # before the data is built: one line naming the install command
    if address is not None:
        check_address(address)
    return RayExecutor(command, root, address, cpus_per_run, gpus_per_run, say)
