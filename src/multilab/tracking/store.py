"""Where MLflow's store is, and whether it answers: the connection half of tracking.

Default store: ``sqlite:///<project>/mlruns/mlflow.db`` with artefacts in ``mlruns/artifacts``
(the file store is legacy since MLflow 3.7). ``MLFLOW_TRACKING_URI`` overrides it for a server,
which gets :data:`HTTP_SETTINGS` (fail in seconds, not minutes); a server that stops answering
is one line (:func:`server_call`), and a stop signal never lands inside a call to a database
store (:func:`uninterrupted`). Each experiment is tagged a model-training experiment; the
stages whose numbers are no model's metrics log to experiments of their own.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import mlflow
from filelock import FileLock
from mlflow.tracking import MlflowClient

from multilab import stops
from multilab.config import Paths
from multilab.errors import UserError

URI_VARIABLE = "MLFLOW_TRACKING_URI"
#: The experiment tag the MLflow UI reads to open an experiment on its training runs (without
#: it, MLflow 3 infers a GenAI experiment and lands on traces).
EXPERIMENT_KIND_TAG, MODEL_TRAINING = "mlflow.experimentKind", "custom_model_development"
#: MLflow's HTTP client (``mlflow.environment_variables``) by default retries a failed request
#: 7 times with backoff factor 2 and waits 120 s for each answer: about 4.5 minutes before a
#: dead server becomes an error, and as long again for ending the run. That suits a
#: rate-limited hosted service, not a lab server that is up or down. We fail in seconds
#: instead: 2 retries (about 3 s in all for a refused connection) and 10 s per request (about
#: half a minute for a host that swallows packets). Set the variables to override; a value
#: already in the environment is never changed.
HTTP_SETTINGS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}


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
    store = local_store(paths)
    return f"sqlite:///{store / 'mlflow.db'}"


def point_at(uri: str) -> None:
    """Point the fluent API at ``uri`` without touching ``MLFLOW_TRACKING_URI``.

    ``mlflow.set_tracking_uri`` also exports the variable; we read it as the user's choice,
    so leaving ours there would pin every later config (another project, a test) to it.
    A server gets :data:`HTTP_SETTINGS` (fail in seconds, not minutes).
    """
    if uri.startswith("http"):
        for key, value in HTTP_SETTINGS.items():
            os.environ.setdefault(key, value)
    previous = os.environ.get(URI_VARIABLE)
    mlflow.set_tracking_uri(uri)
    if previous is None:
        os.environ.pop(URI_VARIABLE, None)
    else:
        os.environ[URI_VARIABLE] = previous


def local_store(paths: Paths) -> Path:
    """The project's local store folder (created): ``mlruns/`` of the project root."""
    store = paths.mlruns if paths.mlruns.is_absolute() else project_root() / paths.mlruns
    store.mkdir(parents=True, exist_ok=True)
    return store


def _is_local(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


_Result = TypeVar("_Result")


def lost_server(err: BaseException) -> UserError | None:
    """The one-line error for an MLflow call that failed because the server did not answer
    (refused, timed out, too many 5xx); None for any other MLflow error."""
    message = str(err)
    if not message.startswith("API request to"):
        return None
    uri = os.environ.get(URI_VARIABLE) or mlflow.get_tracking_uri()
    found = re.search(r"\[Errno -?\d+\] [^'\\\")]+|timed? ?out|too many \d+ error responses",
                      message)
    reason = found.group(0) if found else message[:160]
    return UserError(
        f"tracking server {uri} stopped answering ({reason}); start it again (or unset "
        f"{URI_VARIABLE} to use the local mlruns/ store) and run the same command again: a "
        "training resumes from its last checkpoint"
    )


def uninterrupted(func: Callable[..., _Result]) -> Callable[..., _Result]:
    """A tracking function that a stop signal (SIGTERM, Ctrl-C) waits for, unless the store is
    a server: on a database store (SQLite, the default, or any other SQLAlchemy one).

    Why: a stop raised inside MLflow's SQLite session (a training's step metrics being sent)
    left that session's connection, held by the exception's traceback, with its transaction
    open; ending the run KILLED then waited SQLite's 20 s busy timeout, failed with "database
    is locked", and the run stayed RUNNING (CI saw it in the SIGTERM-to-``dvc repro`` test).
    Such a call takes milliseconds, so the stop is raised right after it. A server's calls
    are not deferred: an interrupted request holds nothing here, and a dead server's retries
    would hold the stop back for seconds. Other threads (the stacked trainer's sender) are
    left alone: signals interrupt the main thread only."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> _Result:
        if threading.current_thread() is not threading.main_thread() or \
                mlflow.get_tracking_uri().startswith(("http:", "https:")):
            return func(*args, **kwargs)
        with stops.deferred():
            return func(*args, **kwargs)

    return wrapper


def server_call(func: Callable[..., _Result]) -> Callable[..., _Result]:
    """A tracking function whose lost server is one line (:func:`lost_server`), and which a
    stop signal waits for on a local store (:func:`uninterrupted`)."""

    @functools.wraps(func)
    @uninterrupted
    def wrapper(*args: Any, **kwargs: Any) -> _Result:
        try:
            return func(*args, **kwargs)
        except mlflow.exceptions.MlflowException as err:
            lost = lost_server(err)
            if lost is None:
                raise
            raise lost from err

    return wrapper


@server_call
def connect(paths: Paths, experiment: str) -> str:
    """Point MLflow at the store, check it answers, and return the experiment id.

    The experiment is tagged a model-training experiment (also an older one without the tag).
    """
    uri = tracking_uri(paths)
    if uri.startswith("http"):
        _check_server(uri)
    point_at(uri)
    try:
        with _creation_lock(uri):
            return _experiment_id(paths, uri, experiment)
    except Exception as err:
        problem = damaged_store(err)
        if problem is None:
            raise
        raise UserError(
            f"the MLflow store {uri} is damaged ({problem}); restore its mlflow.db from a "
            f"copy, or move {paths.mlruns} aside and run `multilab report`: it re-creates the "
            "study's runs from their committed records") from err


def _creation_lock(uri: str) -> contextlib.AbstractContextManager:
    """Held while a process first opens a SQLite store: MLflow creates and migrates a new
    database's tables on first use, and two processes doing it at once (two Ray tasks, two
    queue workers on a fresh clone) fail with "duplicate column name: step"."""
    if not uri.startswith("sqlite:///"):
        return contextlib.nullcontext()
    database = Path(uri.removeprefix("sqlite:///"))
    database.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(f"{database}.lock")


#: what SQLite says of a file that is no database, or no longer a whole one
_DAMAGED_DATABASE = ("database disk image is malformed", "file is not a database")


def damaged_store(err: BaseException) -> str | None:
    """SQLite's words when the store's database file is damaged (cut short, overwritten),
    wherever in the exception's chain (SQLAlchemy and MLflow wrap it); None otherwise (a
    full disk or a locked database is no damage)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for text in _DAMAGED_DATABASE:
            if text in str(current):
                return text
        current = current.__cause__ or current.__context__
    return None


def _experiment_id(paths: Paths, uri: str, experiment: str) -> str:
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    if found is not None:
        if found.tags.get(EXPERIMENT_KIND_TAG) != MODEL_TRAINING:
            client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
        return found.experiment_id
    location = None
    if _is_local(uri):
        location = (local_store(paths) / "artifacts").as_uri()
    try:
        return client.create_experiment(experiment, artifact_location=location,
                                        tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING})
    except mlflow.exceptions.MlflowException:  # created concurrently by another process
        found = client.get_experiment_by_name(experiment)
        if found is None:
            raise
        return found.experiment_id


def check_server(paths: Paths) -> None:
    """A tracking server that does not answer is one line, in seconds (the local store
    always answers)."""
    uri = tracking_uri(paths)
    if uri.startswith("http"):
        _check_server(uri)


def spaces_experiment(experiment: str) -> str:
    """Where the ``spaces`` stage logs: its VecMap iterations and objective are no model's
    metrics, so they stay out of the study experiment's charts."""
    return f"{experiment}-spaces"


def word_order_experiment(profile: str) -> str:
    """Where the ``word_order`` stage logs: a property of the Bible's editions, the same for
    every study of a profile."""
    return f"multilab-{profile}-word-order"


def similarity_experiment(profile: str) -> str:
    """Where ``multilab similarity`` logs: a comparison of two models, no model's own run."""
    return f"multilab-{profile}-similarity"


def _check_server(uri: str) -> None:
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5) as response:
            response.read()
    except (urllib.error.URLError, OSError) as err:
        raise UserError(
            f"MLFLOW_TRACKING_URI={uri} does not answer ({err}); start the server or unset "
            "the variable to use the local mlruns/ store"
        ) from err
