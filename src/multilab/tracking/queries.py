"""What the store holds: an experiment's model runs as a table, a run's metric history, its
logged model and the files of one of its artifact folders (what the report and the figures
read)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.tracking import MlflowClient

from multilab.config import Paths
from multilab.lab.modifications import same_modification
from multilab.tracking.runs import GROUP, ROLE_TAG
from multilab.tracking.store import connect, point_at, server_call, tracking_uri


@server_call
def search_runs(paths: Paths, experiment: str, *, groups: bool = False) -> pd.DataFrame:
    """The model runs of an experiment as a DataFrame (params., metrics., tags. columns);
    with ``groups``, their parent runs (:func:`~multilab.tracking.runs.group_run`) too."""
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


@server_call
def metric_history(paths: Paths, run_id: str, key: str) -> list[tuple[int, float]]:
    point_at(tracking_uri(paths))
    history = MlflowClient().get_metric_history(run_id, key)
    return sorted((m.step, m.value) for m in history)


@server_call
def logged_model(paths: Paths, run_id: str) -> str | None:
    """The id of the model logged to a run (:func:`~multilab.tracking.log.log_model`), or None."""
    point_at(tracking_uri(paths))
    outputs = MlflowClient().get_run(run_id).outputs
    models = outputs.model_outputs if outputs else []
    return models[0].model_id if models else None


@server_call
def run_files(paths: Paths, run_id: str, folder: str, into: Path | None = None) -> list[Path]:
    """The files of a run's artifact ``folder`` (none: an empty list): their names alone
    (as paths) without ``into``, else copied into ``into`` (a folder per run is the caller's)."""
    point_at(tracking_uri(paths))
    client = MlflowClient()
    names = sorted(Path(item.path).name for item in client.list_artifacts(run_id, folder)
                   if not item.is_dir)
    if into is None:
        return [Path(name) for name in names]
    into.mkdir(parents=True, exist_ok=True)
    with _quiet_downloads():  # a bar per small file would bury the report's own lines
        return [Path(client.download_artifacts(run_id, f"{folder}/{name}", str(into)))
                for name in names]


@contextlib.contextmanager
def _quiet_downloads() -> Iterator[None]:
    """MLflow's download progress bar off (it reads the variable at each download)."""
    before = os.environ.get(PROGRESS_BAR)
    os.environ[PROGRESS_BAR] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PROGRESS_BAR, None)
        else:
            os.environ[PROGRESS_BAR] = before


#: MLflow's switch of its artifact progress bars
PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
