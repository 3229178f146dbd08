"""What a training run tells MLflow: its tags, parameters and datasets when it starts, every
step's row in batches, the curve points; and the run itself, nested under its modification's
parent run (its study row's, when ``rows`` names one), resumed with the training.

Research tags say what the model is; bookkeeping under ``multilab.sys.`` (threads, owner
process) lets a later process tell a live run from an orphan.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import BertForMaskedLM

from multilab import tracking
from multilab.config import RunConfig
from multilab.lab.metric_table import EVALUATION_FACTS, TRAIN_LOSS, curve_key
from multilab.progress import show_postfix
from multilab.resolve import row_recipe
from multilab.training.model import CurveHook
from multilab.training.training_data import TrainingData

STEP_METRICS = {TRAIN_LOSS: "loss", "lr": "lr", "tokens_per_s": "tokens_per_s"}


def run_tags(run: RunConfig, data_hash: str, fingerprint: str) -> dict[str, Any]:
    """Research tags (what the model is), MLflow's source tags, and process bookkeeping
    under ``multilab.sys.`` (lets a later process tell a live run from an orphan)."""
    return {
        "paper_id": run.paper_id or "",
        "modification": run.modification,
        "seed": run.seed,
        "profile": run.study.profile,
        "data_hash": data_hash,
        "fingerprint": fingerprint,
        "study": run.study.experiment,
        **({tracking.ROW_TAG: row} if (row := run.study.row_of(run.modification)) else {}),
        **tracking.source_tags(),
        # bookkeeping: bit-identical runs need the same thread count; the owner process
        tracking.SYS + "threads": torch.get_num_threads(),
        **tracking.process_tags(),
    }


#: tags of a run that continues a checkpoint whose run this store lacks (a new machine: the
#: lane's checkpoint came back from the repository, its MLflow store did not)
RESUMED_FROM_STEP_TAG = "multilab.resumed_from_step"
RESUMED_ON_NEW_STORE_TAG = "multilab.resumed_on_new_store"


@contextlib.contextmanager
def tracked_run(tracked: bool, experiment_id: str | None, run_id: str | None,
                tags: dict[str, Any], run: RunConfig, suspend: bool = False,
                resumed_from_step: int = 0) -> Iterator[str | None]:
    """The MLflow run's id on the main process (resumed when ``run_id`` is given); None on
    other processes or without tracking. ``suspend``: a visit (``tracking.run``'s).

    ``resumed_from_step``: the checkpoint's step when a training resumes; if this store
    lacks ``run_id`` (the checkpoint came from another machine) a new run opens, nested like
    any new one and tagged with that step (:func:`open_logging` re-sends the history)."""
    if not tracked:
        yield None
        return
    if run_id is not None and resumed_from_step and \
            not tracking.run_exists(run.study.paths, run_id):
        tags = {**tags, RESUMED_FROM_STEP_TAG: resumed_from_step,
                RESUMED_ON_NEW_STORE_TAG: "true", tracking.RESTORED_TAG: run_id}
        run_id = None
    if run_id is None:  # a new run: nested under its modification's (study row's) parent
        parent = tracking.group_run(experiment_id, run.modification,
                                    {"paper_id": run.paper_id or "", "profile": run.study.profile},
                                    row=run.study.row_of(run.modification),
                                    params=row_recipe(run.study, run.modification))
        tags = {**tags, **tracking.parent_tags(parent)}
    with tracking.run(experiment_id, run_id=run_id, tags=tags,
                      name=seed_run_name(run), suspend=suspend) as opened:
        yield opened  # the resumed run, or a new one


def seed_run_name(run: RunConfig) -> str:
    """A seed run's name in MLflow: its study row's label (a sweep's rows share one
    modification and differ in their settings) or its modification, and its seed."""
    return f"{run.study.row_of(run.modification) or run.modification} s{run.seed}"


def run_sizes(run: RunConfig, train_examples: int, truncated: int, total_steps: int,
              world_size: int) -> dict[str, int]:
    """The run's sizes: one number each, so MLflow params, not metrics (a metric of one point
    is a chart of one dot, and Compare would offer it among the metrics)."""
    return {"train_examples": train_examples, "truncated_sentences": truncated,
            "total_steps": total_steps, "world_size": world_size,
            "curve_sentences": run.study.evaluate.curve_sentences}


def log_start(run: RunConfig, data: TrainingData, total_steps: int, world_size: int) -> None:
    """Parameters and the run's sizes (params), and the corpora as MLflow datasets with
    their hashes."""
    tracking.log_params(run.as_params() | run_sizes(run, len(data.examples), data.truncated,
                                                    total_steps, world_size))
    corpora = run.study.paths.corpora
    files = {"train": (corpora / "train.txt", "training"), "dev": (corpora / "dev.txt", "eval")}
    files = {name: spec for name, spec in files.items() if spec[0].exists()}
    tracking.log_datasets(files, {name: tracking.file_digest(path)
                                  for name, (path, _) in files.items()})


def log_curve_point(curve_hook: CurveHook, objective, model: BertForMaskedLM, step: int,
                    run_id: str | None) -> dict[str, float]:
    """The curve metrics under their own names (``curve/mu``, …): they are measured on
    ``curve_sentences`` dev sentences (a param of the run), the final evaluation on
    ``dev_sentences``. How long the point took is no metric of the model: not logged.
    Returns the point as the done file keeps it: ``{"step": step, "mu": …, …}``."""
    objective.eval()
    metrics = curve_hook(step, model)
    objective.train()
    point = {key: float(value) for key, value in metrics.items()
             if key not in EVALUATION_FACTS}
    if run_id:
        tracking.log_metrics({curve_key(key): value for key, value in point.items()},
                             step=step)
    return {"step": float(step), **point}


def open_logging(run: RunConfig, run_id: str | None, state: Any, data: TrainingData,
                 total_steps: int, world_size: int) -> int:
    """What a run opened by :func:`tracked_run` logs first; returns the last step it holds.

    ``state`` is the training's ``TrainingState``. A new run logs its start; a new run for
    a resumed checkpoint (its own run not in this store) also gets the checkpoint's step
    rows and curve points, so one run holds the whole history."""
    fresh = run_id is not None and run_id != state.run_id
    state.run_id = run_id
    if fresh:
        log_start(run, data, total_steps, world_size)
    if fresh and state.step:
        tracking.log_step_rows(run_id, state.log_rows, STEP_METRICS)
        for point in state.curve:
            tracking.log_metrics({curve_key(key): value for key, value in point.items()
                                  if key != "step"}, step=int(point["step"]))
    return logged_through(run, run_id) if run_id and state.step else 0


def logged_through(run: RunConfig, run_id: str) -> int:
    """The last step a resumed run already sent to MLflow: the steps between the checkpoint
    and the kill are trained again, and sending them again would double their points."""
    history = tracking.metric_history(run.study.paths, run_id, TRAIN_LOSS)
    return max((step for step, _ in history), default=0)


def _send_now(run_id: str, rows: list[dict[str, float]]) -> None:
    tracking.log_step_rows(run_id, rows, STEP_METRICS)


class StepLog:
    """Every step's row goes to MLflow, in batches (one request per ``log_every`` steps, at
    checkpoints and at the end), and the progress bar shows their mean loss. Steps up to
    ``logged_through`` (sent before a kill, trained again after the resume) are not re-sent."""

    def __init__(self, run_id: str | None, bar: tqdm, logged_through: int = 0,
                 sender: Callable[[str, list[dict[str, float]]], None] | None = None) -> None:
        """``sender(run_id, rows)`` sends a window of rows (default: at once, in this
        thread; the stacked trainer hands them to a worker thread)."""
        self.run_id, self.bar, self.logged_through = run_id, bar, logged_through
        self.sender = sender or _send_now
        self.name = getattr(bar, "desc", "")  # a disabled bar has none
        self.pending: list[dict[str, float]] = []

    def add(self, row: dict[str, float], send: bool) -> None:
        self.pending.append(row)
        self.bar.update(1)
        if not send:
            return
        mean_loss = sum(r["loss"] for r in self.pending) / len(self.pending)
        show_postfix(self.bar, loss=f"{mean_loss:.3f}", tok_s=f"{row['tokens_per_s']:.0f}")
        fresh = [r for r in self.pending if r["step"] > self.logged_through]
        if self.run_id and fresh:
            self.sender(self.run_id, fresh)
        self.pending = []

    def say(self, message: str | None) -> None:
        """Show what the run does while no step advances (None: back to the run's name)."""
        self.bar.set_description_str(message or self.name, refresh=True)

    def close(self) -> None:
        self.bar.close()
