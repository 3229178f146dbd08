"""The only module that talks to MLflow.

Default store: ``sqlite:///<project>/mlruns/mlflow.db`` with artefacts in ``mlruns/artifacts``
(the file store is legacy since MLflow 3.7). ``MLFLOW_TRACKING_URI`` overrides it for a server.
A run that raises ends FAILED; Ctrl-C / SIGTERM (and a deliberate early stop) end it KILLED;
never left RUNNING.
SIGKILL cannot be caught: the run of a killed process is ended KILLED by the next process
that trains the same fingerprint (:func:`end_orphaned_runs`).

What a run carries, as MLflow's UI expects it: the experiment is tagged a model-training
experiment (``mlflow.experimentKind``), runs carry MLflow's standard source tags, each model
run is nested under one parent run per modification (:func:`group_run`), process bookkeeping
lives under ``multilab.sys.`` and the ``spaces`` stage logs to an experiment of its own
(:func:`spaces_experiment`). Metrics that describe the final model are logged once
(:func:`log_final_metrics`): a re-evaluation never appends a duplicate point.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import math
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import mlflow
import pandas as pd
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from multilab.config import Paths
from multilab.errors import StoppedEarly, Terminated, UserError
from multilab.lab.modifications import same_modification
from multilab.progress import quiet_transformers

log = logging.getLogger(__name__)

URI_VARIABLE = "MLFLOW_TRACKING_URI"
FINISHED, FAILED, KILLED, RUNNING = "FINISHED", "FAILED", "KILLED", "RUNNING"

#: The experiment tag the MLflow UI reads to open an experiment on its training runs (without
#: it, MLflow 3 infers a GenAI experiment and lands on traces).
EXPERIMENT_KIND_TAG, MODEL_TRAINING = "mlflow.experimentKind", "custom_model_development"
#: MLflow's standard run tags (shown in the UI's run header and "Source" column).
GIT_COMMIT_TAG, PARENT_TAG = "mlflow.source.git.commit", "mlflow.parentRunId"
#: Bookkeeping, not research: every tag multilab sets for itself starts with this.
SYS = "multilab.sys."
#: ``multilab.sys.role`` of a parent run (one per modification; its seed runs are nested).
ROLE_TAG, GROUP = SYS + "role", "group"

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
#: a run re-created from a model's multilab.json names the lost run it replaces
RESTORED_TAG = SYS + "restored_from"


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


def _local_store(paths: Paths) -> Path:
    store = paths.mlruns if paths.mlruns.is_absolute() else project_root() / paths.mlruns
    store.mkdir(parents=True, exist_ok=True)
    return store


def _is_local(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


_Result = TypeVar("_Result")


def _lost_server(err: BaseException) -> UserError | None:
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


def _server_call(func: Callable[..., _Result]) -> Callable[..., _Result]:
    """A tracking function whose lost server is one line (:func:`_lost_server`)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> _Result:
        try:
            return func(*args, **kwargs)
        except mlflow.exceptions.MlflowException as err:
            lost = _lost_server(err)
            if lost is None:
                raise
            raise lost from err

    return wrapper


@_server_call
def connect(paths: Paths, experiment: str) -> str:
    """Point MLflow at the store, check it answers, and return the experiment id.

    The experiment is tagged a model-training experiment (also an older one without the tag).
    """
    uri = tracking_uri(paths)
    if uri.startswith("http"):
        _check_server(uri)
    _use(uri)
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    if found is not None:
        if found.tags.get(EXPERIMENT_KIND_TAG) != MODEL_TRAINING:
            client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
        return found.experiment_id
    location = None
    if _is_local(uri):
        location = (_local_store(paths) / "artifacts").as_uri()
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


def source_tags() -> dict[str, str]:
    """MLflow's standard source tags: the git commit (MLflow finds none itself, because the
    ``multilab`` entry point lives in the virtualenv, outside the repository)."""
    return {GIT_COMMIT_TAG: git_commit()}


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

    tags = {k: str(v) for k, v in (tags or {}).items()}
    if run_id and not _run_exists(run_id):  # the store was lost or replaced (mlruns/ deleted)
        log.warning("run %s is not in the tracking store %s: continuing in a new run",
                    run_id, mlflow.get_tracking_uri())
        run_id, tags = None, tags | {RESTORED_TAG: run_id}
    with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
        signal.signal(signal.SIGTERM, on_term)
    status = FAILED
    try:
        active = _server_call(mlflow.start_run)(
            run_id=run_id, experiment_id=None if run_id else experiment_id, run_name=name,
            tags=tags,
        )
    except BaseException:
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, previous)
        raise
    try:
        yield active.info.run_id
        status = FINISHED
    except (KeyboardInterrupt, Terminated, StoppedEarly):
        status = KILLED
        raise
    except mlflow.exceptions.MlflowException as err:
        lost = _lost_server(err)
        if lost is None:
            raise
        raise lost from err
    finally:
        _end_run(active.info.run_id, status)
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, previous)


def _run_exists(run_id: str) -> bool:
    try:
        _server_call(MlflowClient().get_run)(run_id)
    except mlflow.exceptions.MlflowException as err:
        if err.error_code == "RESOURCE_DOES_NOT_EXIST":
            return False
        raise
    return True


def _end_run(run_id: str, status: str) -> None:
    """End the active run; if the store cannot be written (server gone, disk full), say so
    once and let the first error be the one reported: the run stays RUNNING there until the
    next ``train`` of it (or ``report``) ends it as an orphan, or its resume reopens it."""
    try:
        mlflow.end_run(status=status)
    except Exception as err:  # any store failure; the error of the body wins
        log.warning("could not mark run %s %s (%s); the next train or report of it will",
                    run_id, status, " ".join(str(err).split())[:200])


HOST_TAG, PID_TAG, PROCESS_START_TAG = SYS + "host", SYS + "pid", SYS + "process_start"
ORPHAN_TAG = SYS + "orphaned"
#: The names of these tags before they moved under ``multilab.sys.`` (read, never written):
#: orphans of runs logged before the rename are still found.
_LEGACY = {HOST_TAG: "multilab.host", PID_TAG: "multilab.pid",
           PROCESS_START_TAG: "multilab.process_start"}


def _tag(tags: dict[str, str], key: str) -> str:
    return tags.get(key) or tags.get(_LEGACY.get(key, key), "")


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
    if _tag(tags, HOST_TAG) != socket.gethostname() or not _tag(tags, PID_TAG).isdigit():
        return False  # another machine (or an old run without the tags): cannot know
    started = _process_start(int(_tag(tags, PID_TAG)))
    if started is None:
        return True
    recorded = _tag(tags, PROCESS_START_TAG)
    return bool(started and recorded) and started != recorded  # the pid was recycled


@_server_call
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
    ``multilab.sys.orphaned``.
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
        owner = f"{_tag(orphan.data.tags, HOST_TAG)}:{_tag(orphan.data.tags, PID_TAG)}"
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


@_server_call
def run_exists(paths: Paths, run_id: str) -> bool:
    """Whether the store holds ``run_id`` (False after mlruns/ was deleted or replaced)."""
    _use(tracking_uri(paths))
    return _run_exists(run_id)


@_server_call
def restore_run(
    experiment_id: str, lost_run_id: str, *, name: str, tags: dict[str, Any],
    params: dict[str, Any], metrics: dict[str, float], step_rows: list[dict[str, float]],
    step_keys: dict[str, str], artifact: Path | None = None,
) -> str:
    """A FINISHED run standing in for ``lost_run_id`` (its store was lost): the same tags,
    params and training curve, tagged :data:`RESTORED_TAG`. Created once: a later call finds
    it by that tag. Returns its id."""
    client = MlflowClient()
    found = client.search_runs(
        [experiment_id], filter_string=f"tags.`{RESTORED_TAG}` = '{lost_run_id}'", max_results=1
    )
    if found:
        return found[0].info.run_id
    created = client.create_run(
        experiment_id, run_name=name,
        tags={k: str(v) for k, v in tags.items()} | {RESTORED_TAG: lost_run_id},
    )
    run_id = created.info.run_id
    try:
        for key, value in params.items():
            client.log_param(run_id, key, str(value)[:6000])
        for key, value in metrics.items():
            client.log_metric(run_id, key, float(value))
        if step_rows:
            log_step_rows(run_id, step_rows, step_keys)
        if artifact is not None and artifact.exists():
            client.log_artifact(run_id, str(artifact))
    except BaseException:
        client.set_terminated(run_id, status=FAILED)  # never a half-restored FINISHED run
        raise
    client.set_terminated(run_id, status=FINISHED)
    return run_id


@_server_call
def log_to_run(
    paths: Paths, run_id: str, metrics: dict[str, float], step: int | None = None
) -> None:
    """Add metrics to an existing (possibly finished) run without changing its status."""
    _use(tracking_uri(paths))
    client = MlflowClient()
    for key, value in metrics.items():
        client.log_metric(run_id, key, float(value), step=step or 0)


@_server_call
def log_final_metrics(
    paths: Paths, run_id: str, metrics: dict[str, float], step: int,
    once: Iterable[str] = (),
) -> dict[str, float]:
    """Log the metrics of a finished model at ``step`` unless that point is already there.

    Evaluating the same model again (``dvc repro`` after a code change that leaves the
    evaluation as it was, ``multilab variant`` reusing a study model) gives the same values:
    they are not logged a second time, so every metric history has one point per step. A
    value that did change (the evaluation itself changed) is logged, and MLflow shows the
    latest. Keys in ``once`` (timings) are logged only if the step has no point yet.
    Returns what was logged.
    """
    _use(tracking_uri(paths))
    client = MlflowClient()
    once = set(once)
    fresh = {}
    for key, value in metrics.items():
        here = [m.value for m in client.get_metric_history(run_id, key) if m.step == step]
        if here and (key in once or math.isclose(here[-1], float(value), rel_tol=1e-9,
                                                 abs_tol=1e-12)):
            continue
        fresh[key] = float(value)
    now = int(time.time() * 1000)
    values = [Metric(key, value, now, step) for key, value in fresh.items()]
    for start in range(0, len(values), 1000):
        client.log_batch(run_id, metrics=values[start : start + 1000], synchronous=True)
    return fresh


@_server_call
def log_artifact_to_run(paths: Paths, run_id: str, path: Path, folder: str | None = None) -> None:
    _use(tracking_uri(paths))
    MlflowClient().log_artifact(run_id, str(path), artifact_path=folder)


@_server_call
def set_tags(paths: Paths, run_id: str, tags: dict[str, Any]) -> None:
    _use(tracking_uri(paths))
    client = MlflowClient()
    for key, value in tags.items():
        client.set_tag(run_id, key, str(value))


@_server_call
def search_runs(paths: Paths, experiment: str, *, groups: bool = False) -> pd.DataFrame:
    """The model runs of an experiment as a DataFrame (params., metrics., tags. columns);
    with ``groups``, their parent runs (:func:`group_run`) too."""
    experiment_id = connect(paths, experiment)
    runs = mlflow.search_runs(experiment_ids=[experiment_id], max_results=50000)
    column = f"tags.{ROLE_TAG}"
    if groups or runs.empty or column not in runs:
        return runs
    return runs[runs[column] != GROUP].reset_index(drop=True)


def runs_of(runs: pd.DataFrame, modification: str, seeds: Iterable[int]) -> pd.DataFrame:
    """The rows of ``runs`` (:func:`search_runs`) of ``modification`` (its parts in any order)
    and of one of ``seeds``."""
    if runs.empty:
        return runs
    mine = runs[runs["tags.modification"].map(lambda m: same_modification(m, modification))]
    mine = mine[mine["tags.seed"].notna()]  # a parent run has no seed
    return mine[mine["tags.seed"].astype(int).isin(list(seeds))]


# --------------------------------------------------------------------------- parent runs


@_server_call
def group_run(experiment_id: str, modification: str, tags: dict[str, Any]) -> str:
    """The parent run of ``modification`` in the experiment: found, or created FINISHED.

    One parent per modification (a Table 1 row, or a variant of ``dvc exp run``) holds its
    seed runs, so the UI shows a row per modification that unfolds into its seeds. Two
    processes may create one at once (seeds trained in parallel): both then keep the oldest
    and the other one is deleted, so every seed lands under the same parent.
    """
    client = MlflowClient()

    def existing() -> list:
        found = client.search_runs(
            [experiment_id], filter_string=f"tags.`{ROLE_TAG}` = '{GROUP}'", max_results=5000)
        mine = [r for r in found
                if same_modification(r.data.tags.get("modification", ""), modification)]
        return sorted(mine, key=lambda r: (r.info.start_time, r.info.run_id))

    found = existing()
    if found:
        return found[0].info.run_id
    created = client.create_run(
        experiment_id, run_name=modification,
        tags={**{k: str(v) for k, v in tags.items()}, "modification": modification,
              ROLE_TAG: GROUP, **source_tags()},
    ).info.run_id
    client.set_terminated(created, status=FINISHED)
    winner = existing()[0].info.run_id
    if winner != created:
        client.delete_run(created)
    return winner


def parent_tags(parent_run_id: str) -> dict[str, str]:
    """Tags that nest a run under ``parent_run_id`` in the UI."""
    return {PARENT_TAG: parent_run_id}


# --------------------------------------------------------------------------- inputs, models


def log_datasets(files: dict[str, tuple[Path, str]], digests: dict[str, str]) -> None:
    """Log corpora as MLflow datasets of the active run: ``files`` maps a dataset name to
    (path, context), ``digests`` the name to its hash (the hash that enters the fingerprint).

    Only metadata is logged (source path, name, digest), not the sentences: the corpora live
    in the DVC cache, and the digest says which version a model saw.
    """
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    for name, (path, context) in files.items():
        with warnings.catch_warnings():  # "" and "file" schemes both name the local source
            warnings.simplefilter("ignore", UserWarning)
            source = resolve_dataset_source(str(Path(path).resolve()))
        _log_input_once(MetaDataset(source, name=name, digest=digests[name]), context)


def _log_input_once(dataset: object, context: str, attempts: int = 3) -> None:
    """``mlflow.log_input``, retried when a concurrent run inserted the same dataset first.

    The tracking store looks a dataset up and inserts it if missing; two runs of one
    experiment that log one corpus at the same moment (seeds trained at once against a
    server) can both miss it, and the second insert fails on the store's unique key. The
    row exists by then, so the retry finds it and only links it to this run.
    """
    for attempt in range(attempts):
        try:
            mlflow.log_input(dataset, context=context)
            return
        except mlflow.exceptions.MlflowException as error:
            if "UNIQUE constraint" not in str(error) or attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


def file_digest(path: Path) -> str:
    """The first 16 hex digits of a file's SHA-256 (as the data fingerprint writes them)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


@_server_call
def logged_model(paths: Paths, run_id: str) -> str | None:
    """The id of the model logged to a run (:func:`log_model`), or None."""
    _use(tracking_uri(paths))
    outputs = MlflowClient().get_run(run_id).outputs
    models = outputs.model_outputs if outputs else []
    return models[0].model_id if models else None


@_server_call
def log_model(paths: Paths, run_id: str, model_dir: Path, step: int) -> str:
    """Log a saved model directory to a (finished) run with MLflow's transformers flavour
    (model + tokenizer, task fill-mask), as the run's output at ``step``; returns its id.

    The model is created outside any active run and then attached to the run: MLflow's own
    ``log_model`` in a run copies every metric of that step into new points linked to the
    model, which would double each final metric's history. Offline by construction: the
    model's ``name_or_path`` is its absolute directory, which is no Hub repository id, so
    MLflow's model-card and licence look-ups stop before any request; the model card is ours,
    and the requirements are given (MLflow would otherwise infer them in a subprocess that
    imports the model: seconds).
    """
    import huggingface_hub
    import mlflow.transformers
    import transformers
    from mlflow.entities import LoggedModelOutput

    _use(tracking_uri(paths))
    client = MlflowClient()
    run = client.get_run(run_id)
    directory = Path(model_dir).resolve()
    created = mlflow.initialize_logged_model(
        name="model", source_run_id=run_id, experiment_id=run.info.experiment_id,
        params=dict(run.data.params),
    )
    with _quiet_transformers():
        model = transformers.AutoModelForMaskedLM.from_pretrained(str(directory))
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
        model.name_or_path = str(directory)
        card = huggingface_hub.ModelCard(
            "---\nlicense: other\nlibrary_name: transformers\npipeline_tag: fill-mask\n---\n"
            "A small BERT trained by multilab (English + Fake-English, masked LM). The "
            "training data are Bible editions; see the project's README for their terms.\n")
        mlflow.transformers.log_model(
            {"model": model, "tokenizer": tokenizer}, name="model", task="fill-mask",
            model_card=card, pip_requirements=_requirements(), model_id=created.model_id,
        )
    client.log_outputs(run_id, models=[LoggedModelOutput(created.model_id, step=step)])
    return created.model_id


def _requirements() -> list[str]:
    from importlib.metadata import version

    return [f"{package}=={version(package)}" for package in ("mlflow", "transformers", "torch")]


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No "Loading weights" / "Writing model shards" bars and no licence warning."""
    logger = logging.getLogger("mlflow.transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with quiet_transformers():
            yield
    finally:
        logger.setLevel(level)


@_server_call
def metric_history(paths: Paths, run_id: str, key: str) -> list[tuple[int, float]]:
    _use(tracking_uri(paths))
    history = MlflowClient().get_metric_history(run_id, key)
    return sorted((m.step, m.value) for m in history)
