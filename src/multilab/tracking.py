"""The only module that talks to MLflow.

Default store: ``sqlite:///<project>/mlruns/mlflow.db`` with artefacts in ``mlruns/artifacts``
(the file store is legacy since MLflow 3.7). ``MLFLOW_TRACKING_URI`` overrides it for a server.
A run that raises ends FAILED; Ctrl-C / SIGTERM end it KILLED; never left RUNNING.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
from mlflow.tracking import MlflowClient

from multilab.config import ConfigError, Paths

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
        raise ConfigError(
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


class _Terminated(Exception):
    """SIGTERM turned into an exception so the run can be marked KILLED."""


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
        raise _Terminated(f"signal {signum}")

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
    except (KeyboardInterrupt, _Terminated):
        status = KILLED
        raise
    finally:
        mlflow.end_run(status=status)
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, previous)


def log_params(params: dict[str, Any]) -> None:
    mlflow.log_params({k: str(v)[:6000] for k, v in params.items()})


def log_metrics(metrics: dict[str, float], step: int | None = None) -> None:
    mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step)


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


def run_status(paths: Paths, run_id: str) -> str:
    _use(tracking_uri(paths))
    return MlflowClient().get_run(run_id).info.status


def search_runs(paths: Paths, experiment: str) -> pd.DataFrame:
    """All runs of an experiment as a DataFrame (params., metrics., tags. columns)."""
    experiment_id = connect(paths, experiment)
    return mlflow.search_runs(experiment_ids=[experiment_id], max_results=50000)


def metric_history(paths: Paths, run_id: str, key: str) -> list[tuple[int, float]]:
    _use(tracking_uri(paths))
    history = MlflowClient().get_metric_history(run_id, key)
    return sorted((m.step, m.value) for m in history)
