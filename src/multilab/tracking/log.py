"""What a run records: parameters, metrics (per step in batches, final ones once), tags,
artifacts, the corpora as datasets, and the trained model with MLflow's transformers flavour.

Metrics that describe the final model are logged once (:func:`log_final_metrics`): a
re-evaluation never appends a duplicate point.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import re
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from multilab.config import Paths
from multilab.progress import quiet_transformers
from multilab.tracking.store import point_at, server_call, tracking_uri, uninterrupted


@uninterrupted
def log_params(params: dict[str, Any]) -> None:
    mlflow.log_params({k: str(v)[:6000] for k, v in params.items()})


@uninterrupted
def log_metrics(metrics: dict[str, float], step: int | None = None) -> None:
    mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step)


@uninterrupted
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


@uninterrupted
def log_artifact(path: Path, folder: str | None = None) -> None:
    mlflow.log_artifact(str(path), artifact_path=folder)


@server_call
def log_to_run(
    paths: Paths, run_id: str, metrics: dict[str, float], step: int | None = None
) -> None:
    """Add metrics to an existing (possibly finished) run without changing its status."""
    point_at(tracking_uri(paths))
    client = MlflowClient()
    for key, value in metrics.items():
        client.log_metric(run_id, key, float(value), step=step or 0)


@server_call
def log_final_metrics(
    paths: Paths, run_id: str, metrics: dict[str, float], step: int,
    model_id: str | None = None,
) -> dict[str, float]:
    """Log the metrics of a finished model at ``step`` unless that point is already there.

    Evaluating the same model again (``dvc repro`` after a code change that leaves the
    evaluation as it was, ``multilab variant`` reusing a study model) gives the same values:
    they are not logged a second time, so every metric history has one point per step. A
    value that did change (the evaluation itself changed) is logged, and MLflow shows the
    latest. With ``model_id`` the points are the logged model's metrics too (the UI's model
    page). Timings are no metrics: they go to tags.
    Returns what was logged.
    """
    point_at(tracking_uri(paths))
    client = MlflowClient()
    fresh = {}
    for key, value in metrics.items():
        here = [m.value for m in client.get_metric_history(run_id, key) if m.step == step]
        if here and math.isclose(here[-1], float(value), rel_tol=1e-9, abs_tol=1e-12):
            continue
        fresh[key] = float(value)
    now = int(time.time() * 1000)
    values = [Metric(key, value, now, step, model_id=model_id) for key, value in fresh.items()]
    for start in range(0, len(values), 1000):
        client.log_batch(run_id, metrics=values[start : start + 1000], synchronous=True)
    return fresh


@server_call
def log_artifact_to_run(paths: Paths, run_id: str, path: Path, folder: str | None = None) -> None:
    point_at(tracking_uri(paths))
    MlflowClient().log_artifact(run_id, str(path), artifact_path=folder)


@server_call
def set_tags(paths: Paths, run_id: str, tags: dict[str, Any]) -> None:
    point_at(tracking_uri(paths))
    client = MlflowClient()
    for key, value in tags.items():
        client.set_tag(run_id, key, str(value))


@uninterrupted
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


@server_call
def log_model(paths: Paths, run_id: str, model_dir: Path, step: int) -> str:
    """Log a saved model directory to a (finished) run with MLflow's transformers flavour
    (model + tokenizer, task fill-mask), as the run's output at ``step``; returns its id.
    It is named after its row and seed (:func:`model_name`) and carries the run's
    :data:`MODEL_TAGS`.

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

    point_at(tracking_uri(paths))
    client = MlflowClient()
    run = client.get_run(run_id)
    directory = Path(model_dir).resolve()
    created = mlflow.initialize_logged_model(
        name=model_name(run.data.tags), source_run_id=run_id,
        experiment_id=run.info.experiment_id, params=dict(run.data.params),
        tags={key: run.data.tags[key] for key in MODEL_TAGS if key in run.data.tags},
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


#: The run tags a logged model carries too: which row, seed, profile and weights it is.
MODEL_TAGS = ("modification", "seed", "profile", "fingerprint", "paper_id")


def model_name(tags: dict[str, str]) -> str:
    """A logged model's name: its row and seed (``lang-pos-seed42``), in the characters
    MLflow allows in a model name (no ``/ : . % " '``)."""
    name = tags.get("modification", "model")
    if tags.get("seed"):
        name += f"-seed{tags['seed']}"
    return re.sub(r"[/:.%\"']", "_", name)


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
