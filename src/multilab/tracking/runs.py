"""A run's life: started or resumed, ended FINISHED, FAILED or KILLED, never left RUNNING;
nested under one parent run per modification (per study row in a study's experiment);
re-created when its store was lost.

A run that raises ends FAILED; Ctrl-C / SIGTERM (and a deliberate early stop) end it KILLED.
SIGKILL cannot be caught: :mod:`multilab.tracking.orphans` ends such a run later. Runs carry
MLflow's standard source tags, and process bookkeeping lives under ``multilab.sys.``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Param
from mlflow.tracking import MlflowClient

from multilab import stops
from multilab.config import Paths
from multilab.errors import StoppedEarly, Terminated
from multilab.lab.modifications import same_modification
from multilab.source import source_commit
from multilab.tracking.colors import RUN_COLOR_TAG, pick_color
from multilab.tracking.log import log_step_rows
from multilab.tracking.store import lost_server, point_at, server_call, tracking_uri

#: the package's logger: its warnings read ``multilab.tracking: …`` as before the split
log = logging.getLogger("multilab.tracking")

FINISHED, FAILED, KILLED, RUNNING = "FINISHED", "FAILED", "KILLED", "RUNNING"
#: MLflow's standard run tags (shown in the UI's run header and "Source" column).
GIT_COMMIT_TAG, PARENT_TAG = "mlflow.source.git.commit", "mlflow.parentRunId"
#: Bookkeeping, not research: every tag multilab sets for itself starts with this.
SYS = "multilab.sys."
#: ``multilab.sys.role`` of a parent run (one per modification; its seed runs are nested).
ROLE_TAG, GROUP = SYS + "role", "group"
#: the study row (its label) of a parent run and of its seeds (``multilab study run``)
ROW_TAG = "row"
#: a run re-created from a model's multilab.json names the lost run it replaces
RESTORED_TAG = SYS + "restored_from"


def source_tags() -> dict[str, str]:
    """MLflow's standard source tags: the git commit (MLflow finds none itself, because the
    ``multilab`` entry point lives in the virtualenv, outside the repository)."""
    return {GIT_COMMIT_TAG: git_commit()}


def git_commit() -> str:
    return source_commit() or "unknown"


@contextlib.contextmanager
def run(
    experiment_id: str,
    *,
    run_id: str | None = None,
    name: str | None = None,
    tags: dict[str, Any] | None = None,
    suspend: bool = False,
) -> Iterator[str]:
    """Start (or resume) a run; end it FINISHED, FAILED or KILLED, never RUNNING.

    ``suspend``: a visit to one of several runs that one process trains together (a stack):
    a normal exit leaves it RUNNING, with this process's tags, to be visited again and
    ended by :func:`held_runs` if the process stops first (MLflow's fluent API holds one
    active run per thread).
    """
    tags = {k: str(v) for k, v in (tags or {}).items()}
    if run_id and not _run_exists(run_id):  # the store was lost or replaced (mlruns/ deleted)
        log.warning("run %s is not in the tracking store %s: continuing in a new run",
                    run_id, mlflow.get_tracking_uri())
        run_id, tags = None, tags | {RESTORED_TAG: run_id}
    with stops.catching():
        status, started = FAILED, None
        try:
            # a stop that lands while the store marks the run RUNNING is raised once it has
            # (inside this try, so the run it started ends KILLED, not RUNNING)
            with stops.deferred():
                started = server_call(mlflow.start_run)(
                    run_id=run_id, experiment_id=None if run_id else experiment_id,
                    run_name=name, tags=tags,
                ).info.run_id
            yield started
            status = RUNNING if suspend else FINISHED
        except (KeyboardInterrupt, Terminated, StoppedEarly):
            status = KILLED
            raise
        except BaseException as err:
            if (signum := stops.received()) is not None:  # a stop a library replaced
                status = KILLED
                raise stops.stop_exception(signum) from err
            lost = lost_server(err) if isinstance(err, mlflow.exceptions.MlflowException) \
                else None
            if lost is None:
                raise
            raise lost from err
        finally:
            if started is not None:  # None: the store refused to start it
                _end_run(started, status)


@contextlib.contextmanager
def held_runs(run_ids: Callable[[], Iterable[str]]) -> Iterator[None]:
    """While one process trains several runs between visits (``run(..., suspend=True)``):
    SIGTERM raises :class:`Terminated`, and leaving by an exception ends every run
    ``run_ids()`` still names KILLED (a stop, a kill) or FAILED, never RUNNING."""
    with stops.catching():
        try:
            yield
        except BaseException as err:
            stopped = isinstance(err, KeyboardInterrupt | Terminated | StoppedEarly) or \
                stops.received() is not None
            status = KILLED if stopped else FAILED
            with stops.deferred():  # a second stop waits until every run is ended
                for run_id in run_ids():
                    _end_run(run_id, status, active=False)
            raise


def _run_exists(run_id: str) -> bool:
    try:
        server_call(MlflowClient().get_run)(run_id)
    except mlflow.exceptions.MlflowException as err:
        if err.error_code == "RESOURCE_DOES_NOT_EXIST":
            return False
        raise
    return True


def _end_run(run_id: str, status: str, active: bool = True) -> None:
    """End the active run (``active=False``: a run held between visits, by its id); if the
    store cannot be written (server gone, disk full), say so once and let the first error be
    the one reported: the run stays RUNNING there until the next ``train`` of it (or
    ``report``) ends it as an orphan, or its resume reopens it.

    A stop signal that lands meanwhile is raised once the status is written: cut in the
    middle, the store's write was lost and the run stayed RUNNING (a SIGTERM as a training
    wrote FINISHED). A training that finished is FINISHED even if stopped as it ended."""
    with stops.deferred():
        try:
            if active:
                mlflow.end_run(status=status)
            else:
                MlflowClient().set_terminated(run_id, status)
        except Exception as err:  # any store failure; the error of the body wins
            log.warning("could not mark run %s %s (%s); the next train or report of it will",
                        run_id, status, " ".join(str(err).split())[:200])


@server_call
def run_exists(paths: Paths, run_id: str) -> bool:
    """Whether the store holds ``run_id`` (False after mlruns/ was deleted or replaced)."""
    point_at(tracking_uri(paths))
    return _run_exists(run_id)


@server_call
def current_run_id(paths: Paths, experiment_id: str, run_id: str) -> str | None:
    """The run that holds a model's numbers now: ``run_id`` itself, or the run re-created
    for it after the store was lost (:data:`RESTORED_TAG`), or None when neither exists.
    A model's ``multilab.json`` keeps the id of the run that trained it for good."""
    point_at(tracking_uri(paths))
    if _run_exists(run_id):
        return run_id
    found = MlflowClient().search_runs(
        [experiment_id], filter_string=f"tags.`{RESTORED_TAG}` = '{run_id}'", max_results=1)
    return found[0].info.run_id if found else None


@server_call
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


@server_call
def group_run(experiment_id: str, modification: str, tags: dict[str, Any],
              row: str | None = None, params: dict[str, Any] | None = None) -> str:
    """The parent run of ``modification`` (of study row ``row``) in the experiment: found,
    or created FINISHED in a colour of its own (:func:`~multilab.tracking.colors.pick_color`).
    ``params``: the row's recipe (:func:`multilab.resolve.row_recipe`), logged on it where
    it has none of that name yet, so that Compare of the rows shows what each one changes.

    One parent per modification (a Table 1 row, or a variant of ``dvc exp run``) holds its
    seed runs, so the UI shows a row per modification that unfolds into its seeds. A study
    row (``row``, :data:`ROW_TAG`) has a parent of its own, named after it: a study's rows
    may share a modification and differ in their settings. Two processes may create one at
    once (seeds trained in parallel): both then keep the oldest and the other one is
    deleted, so every seed lands under the same parent.
    """
    client = MlflowClient()

    def existing() -> tuple[list, list]:
        found = client.search_runs(
            [experiment_id], filter_string=f"tags.`{ROLE_TAG}` = '{GROUP}'", max_results=5000)
        mine = [r for r in found if r.data.tags.get(ROW_TAG) == row
                and same_modification(r.data.tags.get("modification", ""), modification)]
        return sorted(mine, key=lambda r: (r.info.start_time, r.info.run_id)), found

    found, every = existing()
    if found:
        _add_params(client, found[0], params or {})
        return found[0].info.run_id
    color = pick_color(modification, (r.data.tags.get(RUN_COLOR_TAG) for r in every))
    created = client.create_run(
        experiment_id, run_name=row or modification,
        tags={**{k: str(v) for k, v in tags.items()}, "modification": modification,
              ROLE_TAG: GROUP, RUN_COLOR_TAG: color, **source_tags(),
              **({ROW_TAG: row} if row is not None else {})},
    ).info.run_id
    client.set_terminated(created, status=FINISHED)
    winner = existing()[0][0]
    if winner.info.run_id != created:
        client.delete_run(created)
    _add_params(client, winner, params or {})
    return winner.info.run_id


def _add_params(client: MlflowClient, parent: Any, params: dict[str, Any]) -> None:
    """``params`` the parent does not hold yet (a parameter is written once in MLflow)."""
    fresh = [Param(key, str(value)[:6000]) for key, value in params.items()
             if key not in parent.data.params]
    if fresh:
        client.log_batch(parent.info.run_id, params=fresh, synchronous=True)


@server_call
def parent_tags(parent_run_id: str) -> dict[str, str]:
    """Tags that nest a run under ``parent_run_id`` in the UI, in its row's colour."""
    tags = {PARENT_TAG: parent_run_id}
    color = MlflowClient().get_run(parent_run_id).data.tags.get(RUN_COLOR_TAG)
    return tags | ({RUN_COLOR_TAG: color} if color else {})
