"""The only module that talks to MLflow.

Default store: ``sqlite:///<project>/mlruns/mlflow.db`` with artefacts in ``mlruns/artifacts``
(the file store is legacy since MLflow 3.7). ``MLFLOW_TRACKING_URI`` overrides it for a server.
A run that raises ends FAILED; Ctrl-C / SIGTERM (and a deliberate early stop) end it KILLED;
never left RUNNING.
SIGKILL cannot be caught: the run of a killed process is ended KILLED by the next process
that trains the same fingerprint (:func:`end_orphaned_runs`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from multilab.config import Paths
from multilab.errors import StoppedEarly, Terminated, UserError
from multilab.lab.modifications import same_modification

URI_VARIABLE = "MLFLOW_TRACKING_URI"
FINISHED, FAILED, KILLED, RUNNING = "FINISHED", "FAILED", "KILLED", "RUNNING"


def project_root(start: Path | None = None) -> Path:
    """The project directory, also from inside a ``dvc exp run --queue`` temp workspace.

    Queued DVC experiments run in ``<project>/.dvc/tmp/exps/<tmp>``; their runs must land in
    the project's own store, not in a temp copy that is deleted afterwards.
    """
    here = (start or Path.cwd()).resolve()
    parts = here.parts
    for i in range(len(parts) - 3):
        if parts[i : i + 4] == (".dvc", "tmp", "exps", parts[i + 3]) and i > 0:
            return Path(*parts[:i])
    return here


def tracking_uri(paths: Paths) -> str:
    if os.environ.get(URI_VARIABLE):
        return os.environ[URI_VARIABLE]
    store = _local_store(paths)
    return f"sqlite:///{store / 'mlflow.db'}"


def _use(uri: str) -> None:
    """Point the fluent API at ``uri`` without touching ``MLFLOW_TRACKING_URI``.

    ``mlflow.set_tracking_uri`` also exports the variable; we read it as the user's choice,
    so leaving ours there would pin every later config (another project, a test) to it.
    """
    previous = os.environ.get(URI_VARIABLE)
    mlflow.set_tracking_uri(uri)
    if previous is None:
        os.environ.pop(URI_VARIABLE, None)
    else:
        os.environ[URI_VARIABLE] = previous


def _local_store(paths: Paths) -> Path:
    store = paths.mlruns if paths.mlruns.is_absolute() else project_root() / paths.mlruns
    store.mkdir(parents=True, exist_ok=True)
    return store


def _is_local(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


def connect(paths: Paths, experiment: str) -> str:
    """Point MLflow at the store, check it answers, and return the experiment id."""
    uri = tracking_uri(paths)
    if uri.startswith("http"):
        _check_server(uri)
    _use(uri)
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    if found is not None:
        return found.experiment_id
    location = None
    if _is_local(uri):
        location = (_local_store(paths) / "artifacts").as_uri()
    try:
        return client.create_experiment(experiment, artifact_location=location)
    except mlflow.exceptions.MlflowException:  # created concurrently by another process
        found = client.get_experiment_by_name(experiment)
        if found is None:
            raise
        return found.experiment_id


def _check_server(uri: str) -> None:
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5) as response:
            response.read()
    except (urllib.error.URLError, OSError) as err:
        raise UserError(
            f"MLFLOW_TRACKING_URI={uri} does not answer ({err}); start the server or unset "
            "the variable to use the local mlruns/ store"
        ) from err


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


@contextlib.contextmanager
def run(
    experiment_id: str,
    *,
    run_id: str | None = None,
    name: str | None = None,
    tags: dict[str, Any] | None = None,
) -> Iterator[str]:
    """Start (or resume) a run; end it FINISHED, FAILED or KILLED, never RUNNING."""
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        raise Terminated(f"signal {signum}")

    with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
        signal.signal(signal.SIGTERM, on_term)
    active = mlflow.start_run(
        run_id=run_id,
        experiment_id=None if run_id else experiment_id,
        run_name=name,
        tags={k: str(v) for k, v in (tags or {}).items()},
    )
    status = FAILED
    try:
        yield active.info.run_id
        status = FINISHED
    except (KeyboardInterrupt, Terminated, StoppedEarly):
        status = KILLED
        raise
    finally:
        mlflow.end_run(status=status)
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, previous)


HOST_TAG, PID_TAG, PROCESS_START_TAG = "multilab.host", "multilab.pid", "multilab.process_start"
ORPHAN_TAG = "multilab.orphaned"


def _process_start(pid: int) -> str | None:
    """Start time of a live process (Linux clock ticks since boot); None if it is gone.

    With the pid it names a process uniquely: a recycled pid has another start time.
    Zombies (killed, not yet reaped) count as gone. "" where /proc is unavailable.
    """
    if not Path("/proc/self/stat").exists():  # not Linux: only "does the pid exist"
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def process_tags() -> dict[str, str]:
    """Which process owns a run: host, pid and the pid's start time."""
    pid = os.getpid()
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(pid),
            PROCESS_START_TAG: _process_start(pid) or ""}


def _is_orphan(tags: dict[str, str]) -> bool:
    """RUNNING but its process is gone. Only decidable for runs started on this host."""
    if tags.get(HOST_TAG) != socket.gethostname() or not tags.get(PID_TAG, "").isdigit():
        return False  # another machine (or an old run without the tags): cannot know
    started = _process_start(int(tags[PID_TAG]))
    if started is None:
        return True
    recorded = tags.get(PROCESS_START_TAG, "")
    return bool(started and recorded) and started != recorded  # the pid was recycled


def end_orphaned_runs(
    experiment_id: str, fingerprint: str | None, *, keep: str | None = None,
    completed: str | None = None,
) -> list[str]:
    """End the RUNNING runs of ``fingerprint`` (None: of any) left by killed processes.

    Returns their ids. A SIGKILL (OOM killer, ``kill -9``, a lost node) leaves the run RUNNING
    forever. An orphan is a run started on this host by a process that no longer exists; runs of
    live processes (another worker training the same fingerprint) and of other hosts are left
    alone. ``keep`` (the run being resumed) is never touched; ``completed`` (a run whose model
    was finished before the kill) ends FINISHED, every other orphan KILLED, tagged
    ``multilab.orphaned``.
    """
    client = MlflowClient()
    wanted = f"attributes.status = '{RUNNING}'"
    if fingerprint is not None:
        wanted = f"tags.fingerprint = '{fingerprint}' and {wanted}"
    found = client.search_runs([experiment_id], filter_string=wanted)
    ended = []
    for orphan in found:
        run_id = orphan.info.run_id
        if run_id == keep or not _is_orphan(orphan.data.tags):
            continue
        status = FINISHED if run_id == completed else KILLED
        owner = f"{orphan.data.tags[HOST_TAG]}:{orphan.data.tags[PID_TAG]}"
        client.set_tag(run_id, ORPHAN_TAG, f"process {owner} died without ending this run; "
                       f"ended {status} by process {socket.gethostname()}:{os.getpid()}")
        client.set_terminated(run_id, status=status)
        ended.append(run_id)
    return ended


def log_params(params: dict[str, Any]) -> None:
    mlflow.log_params({k: str(v)[:6000] for k, v in params.items()})


def log_metrics(metrics: dict[str, float], step: int | None = None) -> None:
    mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step)


def log_step_rows(run_id: str, rows: list[dict[str, float]], keys: dict[str, str]) -> None:
    """Per-step metrics of many steps in few requests: ``keys`` maps metric → row field.

    Logging each training step with its own call costs a database round trip per metric per
    step; one ``log_batch`` (at most 1000 values, MLflow's limit) sends a window of steps.
    """
    now = int(time.time() * 1000)
    values = [Metric(key, float(row[field]), now, int(row["step"]))
              for row in rows for key, field in keys.items()]
    client = MlflowClient()
    for start in range(0, len(values), 1000):
        client.log_batch(run_id, metrics=values[start : start + 1000], synchronous=True)


def log_artifact(path: Path, folder: str | None = None) -> None:
    mlflow.log_artifact(str(path), artifact_path=folder)


def log_to_run(
    paths: Paths, run_id: str, metrics: dict[str, float], step: int | None = None
) -> None:
    """Add metrics to an existing (possibly finished) run without changing its status."""
    _use(tracking_uri(paths))
    client = MlflowClient()
    for key, value in metrics.items():
        client.log_metric(run_id, key, float(value), step=step or 0)


def log_artifact_to_run(paths: Paths, run_id: str, path: Path, folder: str | None = None) -> None:
    _use(tracking_uri(paths))
    MlflowClient().log_artifact(run_id, str(path), artifact_path=folder)


def set_tags(paths: Paths, run_id: str, tags: dict[str, Any]) -> None:
    _use(tracking_uri(paths))
    client = MlflowClient()
    for key, value in tags.items():
        client.set_tag(run_id, key, str(value))


def search_runs(paths: Paths, experiment: str) -> pd.DataFrame:
    """All runs of an experiment as a DataFrame (params., metrics., tags. columns)."""
    experiment_id = connect(paths, experiment)
    return mlflow.search_runs(experiment_ids=[experiment_id], max_results=50000)


def runs_of(runs: pd.DataFrame, modification: str, seeds: Iterable[int]) -> pd.DataFrame:
    """The rows of ``runs`` (:func:`search_runs`) of ``modification`` (its parts in any order)
    and of one of ``seeds``."""
    if runs.empty:
        return runs
    mine = runs[runs["tags.modification"].map(lambda m: same_modification(m, modification))]
    return mine[mine["tags.seed"].astype(int).isin(list(seeds))]


def metric_history(paths: Paths, run_id: str, key: str) -> list[tuple[int, float]]:
    _use(tracking_uri(paths))
    history = MlflowClient().get_metric_history(run_id, key)
    return sorted((m.step, m.value) for m in history)
