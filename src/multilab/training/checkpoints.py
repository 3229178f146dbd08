"""Checkpoint I/O: what a checkpoint holds, written all or nothing, and read back whole.

A checkpoint needs only weights, optimizer, scheduler and the step (every random draw is
seeded from the seed and the step): a run resumed after a kill ends with the same weights as
an uninterrupted one. Checkpoints and the final model are written to a temp folder and
renamed (atomic on POSIX), so a kill during a write never leaves a half-written one that a
resume would pick up; a damaged one is one clear error, never skipped. Only one process
trains a model at a time (:func:`training_lock`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock, Timeout
from transformers import BertForMaskedLM

from multilab import stops
from multilab.config import RunConfig
from multilab.data.layout import layout
from multilab.data.vocab import load_tokenizer
from multilab.errors import UserError
from multilab.files import replace_dir, write_text
from multilab.training.model import check_finite_weights
from multilab.training.model_dir import (
    TRAIN_LOG,
    WEIGHTS,
    WEIGHTS_HASH,
    checkpoint_dir,
    file_sha256,
    partial_checkpoint_dir,
    remove_checkpoints,
    staging_dir,
    write_done,
)

STATE_HASH = "state.sha256"  # beside a checkpoint's state.pt
#: beside state.pt: the step, the run's total steps and the seconds so far, as JSON (read by
#: ``study next --lanes`` without torch: what a lane's stopped training has left to do)
PROGRESS = "progress.json"


TRAIN_LOCK = "train.lock"  # in the model's checkpoint folder


@dataclass
class TrainingState:
    """What a checkpoint records besides the tensors: enough to resume exactly."""

    fingerprint: str
    step: int = 0  # optimizer steps done
    run_id: str | None = None  # the MLflow run a resume continues
    log_rows: list[dict[str, float]] = field(default_factory=list)
    #: the curve points so far, ``{"step": s, "mu": …, …}`` each: the done file (and so the
    #: train record) keeps them, since MLflow is not where a number lasts
    curve: list[dict[str, float]] = field(default_factory=list)

    def record(self, row: dict[str, float]) -> None:
        self.step = int(row["step"])
        self.log_rows.append(row)

    def as_checkpoint(self) -> dict[str, Any]:
        return {"step": self.step, "fingerprint": self.fingerprint, "run_id": self.run_id,
                "log_rows": self.log_rows, "curve": self.curve}

    @classmethod
    def of_checkpoint(cls, saved: dict[str, Any]) -> TrainingState:
        """The state a checkpoint saved (one from before curve points were kept: none)."""
        return cls(saved["fingerprint"], saved["step"], saved["run_id"], saved["log_rows"],
                   list(saved.get("curve", [])))


@contextlib.contextmanager
def training_lock(home: Path, model_dir: Path) -> Iterator[None]:
    """Hold ``home/train.lock`` while training ``model_dir``; refuse a second trainer at once.

    Two processes training one model would overwrite each other's checkpoints and final
    rename. The lock is a ``flock`` (``filelock``): the kernel drops it when its process
    ends, however it ends, so a killed training never leaves the model locked.
    """
    home.mkdir(parents=True, exist_ok=True)
    lock = FileLock(home / TRAIN_LOCK, timeout=0)
    owner = home / f"{TRAIN_LOCK}.owner"
    try:
        lock.acquire()
    except Timeout:
        holder = owner.read_text().strip() if owner.exists() else "another process"
        raise UserError(
            f"{model_dir} is already being trained ({holder} holds {lock.lock_file}); wait "
            "for it to finish or stop it, then run the same command again to resume"
        ) from None
    try:
        owner.write_text(f"pid {os.getpid()} on {socket.gethostname()}\n")
        yield
    finally:
        owner.unlink(missing_ok=True)  # a stale name would blame the wrong process
        lock.release()


def load_checkpoint(checkpoint: Path) -> dict:
    """A checkpoint's state, or one clear error: an unreadable one is never skipped silently.

    Writes are atomic (temp folder + rename), so a kill cannot leave a corrupted checkpoint;
    one that is unreadable was damaged afterwards (disk, copy, hand). Only the latest
    checkpoint is kept, so skipping it would silently restart from step 0. ``state.pt`` is
    a zip of stored tensors without checksums: overwritten bytes load fine as garbage
    numbers, so its SHA-256, written beside it, is checked first.
    """
    state = checkpoint / "state.pt"
    checksum = checkpoint / STATE_HASH
    if state.exists() and checksum.exists() and file_sha256(state) != checksum.read_text().strip():
        raise UserError(f"checkpoint {checkpoint} is damaged (state.pt does not match "
                        f"{STATE_HASH}); delete that folder to retrain this model from step 0")
    try:
        saved = torch.load(state, weights_only=False)
    except Exception as err:  # truncated zip, bad pickle, missing file: many types
        reason = (str(err).strip().split(". ")[0].splitlines() or [type(err).__name__])[0]
        raise UserError(
            f"checkpoint {checkpoint} is unreadable ({reason}); delete that folder to "
            "retrain this model from step 0"
        ) from err
    return _complete_checkpoint(saved, checkpoint)


#: what a resume reads from ``state.pt``, and from its ``state`` entry
CHECKPOINT_KEYS = ("model", "optimizer", "scheduler", "state")


STATE_KEYS = ("step", "fingerprint", "run_id", "log_rows")


def _complete_checkpoint(saved: Any, checkpoint: Path) -> dict:
    """A loaded ``state.pt`` with every entry a resume reads, or one clear error."""
    state = saved.get("state") if isinstance(saved, dict) else None
    missing = [key for key in CHECKPOINT_KEYS if not isinstance(saved, dict) or key not in saved]
    missing += [f"state.{key}" for key in STATE_KEYS
                if isinstance(state, dict) and key not in state]
    if missing or not isinstance(state, dict):
        raise UserError(
            f"checkpoint {checkpoint} is incomplete (state.pt lacks "
            f"{', '.join(missing) or 'a state mapping'}); delete that folder to retrain this "
            "model from step 0"
        )
    return saved


def save_checkpoint(run: RunConfig, area: Path, model, optimizer, scheduler,
                    state: TrainingState, total_steps: int | None = None) -> None:
    """Write to ``.tmp-checkpoint-N``, flush it to disk, rename: all or nothing is visible.

    A checkpoint is a model directory of its own (``save_pretrained`` + tokenizer: any
    intermediate model loads with ``AutoModelForMaskedLM.from_pretrained``) plus ``state.pt``
    with the weights, optimizer, scheduler and :class:`TrainingState` for an exact resume,
    and ``state.sha256`` to recognise a damaged ``state.pt``, and ``progress.json`` (the step,
    ``total_steps`` and the training seconds so far). A stop signal that arrives meanwhile is
    raised once the checkpoint is complete.
    """
    with stops.deferred():  # a stop waits for the checkpoint (multilab/stops.py says why)
        final = checkpoint_dir(area, state.step)
        tmp = partial_checkpoint_dir(area, state.step)
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(parents=True)
            model.save_pretrained(str(tmp))
            load_tokenizer(run.study.paths.vocab, layout(run.study).saved).save_pretrained(str(tmp))
            with (tmp / "state.pt").open("wb") as handle:
                torch.save(
                    {
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(),
                        "state": state.as_checkpoint(),
                    },
                    handle,
                )
                handle.flush()
                os.fsync(handle.fileno())  # the rename must not outrun the data (power loss)
            write_text(tmp / STATE_HASH, file_sha256(tmp / "state.pt") + "\n")
            write_text(tmp / PROGRESS, json.dumps(progress_of(state, total_steps)) + "\n")
            replace_dir(tmp, final)
        except BaseException:  # a full disk: the partial folder would only take space
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        remove_checkpoints(area, keep=final)


def progress_of(state: TrainingState, total_steps: int | None) -> dict[str, Any]:
    """What ``progress.json`` says of a checkpoint."""
    return {"step": state.step, "total_steps": total_steps, "fingerprint": state.fingerprint,
            "step_seconds": round(sum(row.get("seconds", 0.0) for row in state.log_rows), 1)}


def read_progress(checkpoint: Path) -> dict[str, Any] | None:
    """A checkpoint's ``progress.json`` (None: none, an older checkpoint; or not one that
    :func:`progress_of` writes: damaged, or edited by hand, its numbers never trusted)."""
    try:
        progress = json.loads((checkpoint / PROGRESS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return progress if valid_progress(progress) else None


def valid_progress(progress: Any) -> bool:
    """Whether ``progress`` is what :func:`progress_of` writes: a step done (a whole number,
    at least 0) and the run's total steps (none, or a whole number at least the step)."""
    if not isinstance(progress, dict):
        return False
    step, total = progress.get("step"), progress.get("total_steps")

    def whole(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    return whole(step) and (total is None or (whole(total) and total >= max(step, 1)))


def save_final_model(run: RunConfig, model: BertForMaskedLM, model_dir: Path, area: Path,
                     state: TrainingState, done: dict[str, Any]) -> None:
    """The finished model, written whole beside ``model_dir`` and renamed over it.

    The staging folder gets the weights, tokenizer, train log and last ``multilab.json``
    (``done``, with the weights' SHA-256); one rename then replaces the previous model. A kill
    before it leaves the previous model, labelled as before, and the checkpoints to resume
    from.
    """
    check_finite_weights(model.state_dict(), model_dir)
    staging = staging_dir(model_dir)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    model.save_pretrained(str(staging))
    load_tokenizer(run.study.paths.vocab, layout(run.study).saved).save_pretrained(str(staging))
    write_text(staging / TRAIN_LOG, train_log_csv(state.log_rows))
    write_done(staging, done | {WEIGHTS_HASH: file_sha256(staging / WEIGHTS)})
    replace_dir(staging, model_dir)
    # only now: a kill before this line resumes from the last checkpoint, not from step 0
    remove_checkpoints(area)
    with contextlib.suppress(OSError):  # the empty folder of this configuration
        area.rmdir()


#: The columns of ``train_log.csv``, one row per optimizer step (MLflow gets them as step
#: metrics: ``train_loss``, ``lr``, ``tokens_per_s``).
LOG_COLUMNS = ("step", "epoch", "loss", "lr", "tokens_per_s")


def train_log_csv(rows: list[dict[str, float]]) -> str:
    lines = [",".join(LOG_COLUMNS)] + [
        ",".join(f"{row[column]:.6g}" for column in LOG_COLUMNS) for row in rows
    ]
    return "\n".join(lines) + "\n"
