"""``train.stack: k``: train several models of one architecture in one process, as one stacked
computation (:mod:`multilab.training.stacked`), each one a model of its own.

Everything around the step is the single-model path's (:mod:`multilab.training.train`), per
member: its fingerprint (with ``trainer: stacked``, whatever k), data and batch order
(:func:`~multilab.training.training_data.prepare_data`), checkpoint area, lock, checkpoints
and final model folder (:mod:`~multilab.training.checkpoints`), ``multilab.json``, train
log, curve points and MLflow run (:mod:`~multilab.training.run_tracking`). The members'
MLflow runs are visited in turn (``tracking.run(..., suspend=True)``: MLflow holds one active
run per thread); ``tracking.held_runs`` ends them KILLED or FAILED if the process stops.
Around the step the loop keeps the main thread free for the device: the next step's batch is
built in a worker thread meanwhile (``prefetch``), and the members' windows of step rows go
to MLflow from another (:class:`_Sender`).

A member's results do not depend on who it was stacked with (tests/test_stacked.py), so
members need not stay together: after a kill, members may hold checkpoints of different
steps (a kill between two members' checkpoint writes); the stack then trains the members
that are behind until they reach the next ones and continues with all of them, and a
finished member leaves the stack. Each regrouping restacks the members' weights and AdamW
moments; a member's own arithmetic stays that of the stack it is in (float rounding, not
bit for bit, differs between stacks of other widths: tests/test_stacked.py says which ops).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import BertForMaskedLM

from multilab import tracking
from multilab.config import RunConfig
from multilab.data.layout import layout
from multilab.data.vocab import load_tokenizer
from multilab.errors import StoppedEarly, UserError
from multilab.progress import progress_bar
from multilab.training import stacked
from multilab.training.checkpoints import (
    TrainingState,
    load_checkpoint,
    save_checkpoint,
    save_final_model,
    training_lock,
)
from multilab.training.member import Member, Plan
from multilab.training.model import CurveHook, check_finite_weights
from multilab.training.model_dir import (
    TRAIN_LOG,
    checkpoint_area,
    data_fingerprint,
    latest_checkpoint,
)
from multilab.training.run_tracking import (
    STEP_METRICS,
    StepLog,
    log_curve_point,
    open_logging,
    run_tags,
    tracked_run,
)
from multilab.training.train import already_trained, check_finite_loss, done_record
from multilab.training.training_data import TrainingData, prepare_data

log = logging.getLogger(__name__)

#: A stacked member's checkpoint: its optimizer entry holds the member's AdamW moments here.
MOMENTS = "stacked_adamw"


class _Sender:
    """Sends the members' windows of step rows to MLflow from one worker thread, in order:
    k members' ``log_batch`` requests (a database commit each) would otherwise stall the
    stack's step each ``log_every`` steps. :meth:`drain` waits for them (and raises the
    first failure) before anything that must follow them: a checkpoint, a curve point, a
    run's end. Rows lost to a kill are trained and sent again after the resume (steps
    after MLflow's last are re-sent, as ever)."""

    def __init__(self) -> None:
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mlflow-rows")
        self._sent: list[concurrent.futures.Future] = []

    def __call__(self, run_id: str, rows: list[dict[str, float]]) -> None:
        pending = []
        for future in self._sent:  # a failure surfaces at the next window, not at the end
            if future.done():
                future.result()
            else:
                pending.append(future)
        self._sent = pending
        self._sent.append(self._worker.submit(tracking.log_step_rows, run_id, rows,
                                              STEP_METRICS))

    def drain(self) -> None:
        sent, self._sent = self._sent, []
        for future in sent:
            future.result()

    def close(self) -> None:
        """Wait for what was handed over (its failures are not raised: a failure that
        ends the training is already on its way)."""
        concurrent.futures.wait(self._sent)
        self._sent = []
        self._worker.shutdown(wait=True)


class _Saved:
    """What :func:`save_checkpoint` asks of an optimizer or a scheduler: a state dict."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def state_dict(self) -> dict[str, Any]:
        return self.state


@dataclass
class _Seat:
    """One member of the stack and all that is its own besides its stacked tensors."""

    run: RunConfig
    data_hash: str
    fingerprint: str
    area: Path
    curve_hook: CurveHook | None
    data: TrainingData | None = None
    plan: Plan | None = None
    member: Member | None = None
    state: TrainingState | None = None
    weights: dict[str, torch.Tensor] | None = None  # None: its initial weights
    moments: dict[str, dict[str, torch.Tensor]] | None = None
    steps: StepLog | None = None
    tags: dict[str, Any] = field(default_factory=dict)
    finished: bool = False

    @property
    def model_dir(self) -> Path:
        return self.run.model_dir


def train_stack(runs: Sequence[RunConfig], *, experiment_id: str | None = None,
                curve_hooks: Sequence[CurveHook | None] | None = None,
                stop_after_step: int | None = None, progress: bool = True) -> list[Path]:
    """Train ``runs`` (or resume them) as one stack into their model folders; members
    already trained are skipped. ``stop_after_step`` ends the work once the stack reaches
    that step (checkpointed, resumable: the resume tests' stand-in for a kill)."""
    stacked.check_members(list(runs))
    hooks = list(curve_hooks) if curve_hooks is not None else [None] * len(runs)
    seats = []
    for run, hook in zip(runs, hooks, strict=True):
        data_hash = data_fingerprint(run)
        fingerprint = run.fingerprint(data_hash)
        seats.append(_Seat(run, data_hash, fingerprint,
                           checkpoint_area(run.study.paths, run.model_dir, fingerprint), hook))
    names = [str(seat.model_dir) for seat in seats]
    if len(set(names)) < len(names):
        raise UserError(f"stack: {names[0]} twice; valid: each model once in a stack")
    todo = [s for s in seats if not already_trained(s.model_dir, s.area, s.fingerprint,
                                                    experiment_id)]
    if not todo:
        return [seat.model_dir for seat in seats]

    # every input read before anything is written (as train_model): one line, not a traceback
    load_tokenizer(todo[0].run.study.paths.vocab, layout(todo[0].run.study).saved)
    encoders = {}
    for seat in todo:
        seat.data, encoder = prepare_data(seat.run)
        encoders[seat.model_dir] = encoder
        seat.member = Member.of(seat.run, seat.data, encoder)  # as train_model's
        seat.plan = seat.member.plan
    settings = _shared_settings(todo, encoders)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    with contextlib.ExitStack() as locks:
        for seat in todo:
            locks.enter_context(training_lock(seat.area.parent, seat.model_dir))
        # asked again under the locks: another process may have finished one meanwhile
        todo = [s for s in todo if not already_trained(s.model_dir, s.area, s.fingerprint,
                                                       experiment_id)]
        for seat in todo:
            _resume(seat, experiment_id)
        open_runs = [seat for seat in todo if experiment_id is not None]
        with tracking.held_runs(lambda: [s.state.run_id for s in open_runs
                                         if s.state.run_id and not s.finished]):
            sender = _Sender()
            for seat in todo:
                _open_run(seat, experiment_id, sender)
            bar = progress_bar(total=max(s.plan.total_steps for s in todo),
                               initial=min(s.state.step for s in todo),
                               disable=not progress, desc=f"stack of {len(todo)}", unit="step")
            try:
                _train(todo, settings, device, experiment_id, stop_after_step, bar, sender)
            finally:
                sender.close()
                bar.close()
    return [seat.model_dir for seat in seats]


def _shared_settings(seats: Sequence[_Seat], encoders: dict) -> stacked.Settings:
    """The stack's shared shape; members whose vocabularies differ in size are refused."""
    first = seats[0]
    for seat in seats[1:]:
        mine, theirs = encoders[first.model_dir], encoders[seat.model_dir]
        if (mine.total_size, mine.languages) != (theirs.total_size, theirs.languages):
            raise UserError(
                f"stack of {first.run.modification!r} and {seat.run.modification!r}: their "
                f"inputs differ ({mine.total_size} and {theirs.total_size} token ids); valid: "
                "modifications of one vocabulary in one stack")
    return stacked.settings_of(first.run, encoders[first.model_dir])


def _resume(seat: _Seat, experiment_id: str | None) -> None:
    """The member's latest checkpoint of its fingerprint, or a fresh state."""
    seat.area.mkdir(parents=True, exist_ok=True)
    seat.state = TrainingState(seat.fingerprint)
    checkpoint = latest_checkpoint(seat.area)
    if checkpoint is not None:
        try:
            saved = load_checkpoint(checkpoint)
        except UserError:  # a damaged checkpoint: the killed run it belongs to ends KILLED
            if experiment_id is not None:
                tracking.end_orphaned_runs(experiment_id, seat.fingerprint)
            raise
        moments = saved["optimizer"].get(MOMENTS) if isinstance(saved["optimizer"], dict) \
            else None
        if saved["state"]["fingerprint"] != seat.fingerprint or moments is None:
            log.warning("ignoring %s: it belongs to another configuration", checkpoint)
        else:
            check_finite_weights(saved["model"], checkpoint)
            seat.weights, seat.moments = saved["model"], moments
            seat.state = TrainingState.of_checkpoint(saved["state"])
            log.info("resuming %s from step %d", seat.model_dir, seat.state.step)
    if experiment_id is not None:
        tracking.end_orphaned_runs(experiment_id, seat.fingerprint, keep=seat.state.run_id)


def _open_run(seat: _Seat, experiment_id: str | None, sender: _Sender) -> None:
    """Start (or resume) the member's MLflow run, log its start, leave it RUNNING."""
    run = seat.run
    seat.tags = run_tags(run, seat.data_hash, seat.fingerprint)
    with tracked_run(experiment_id is not None, experiment_id, seat.state.run_id, seat.tags,
                     run, suspend=True, resumed_from_step=seat.state.step) as run_id:
        logged = open_logging(run, run_id, seat.state, seat.data, seat.plan.total_steps, 1)
    seat.steps = StepLog(seat.state.run_id, progress_bar(total=1, disable=True), logged,
                         sender)


def _visit(seat: _Seat, experiment_id: str | None, finish: bool = False):
    return tracked_run(experiment_id is not None, experiment_id, seat.state.run_id, seat.tags,
                       seat.run, suspend=not finish)


def _train(seats: list[_Seat], settings: stacked.Settings, device: torch.device,
           experiment_id: str | None, stop_after_step: int | None, bar, sender: _Sender
           ) -> None:
    """Stack the members that are furthest behind, train them until they reach the next
    ones, a member finishes or the stop; save, regroup, until every member is done."""
    active = list(seats)
    while active:
        step = min(seat.state.step for seat in active)
        group = [seat for seat in active if seat.state.step == step]
        trainer = stacked.StackedTrainer(
            [s.member for s in group], settings, device,
            models=[_member_model(s, settings) for s in group],
            moments=[s.moments for s in group] if step else None, steps_done=step)
        try:
            _train_group(trainer, group, active, step, settings, device, experiment_id,
                         stop_after_step, bar, sender)
        finally:
            trainer.close()
        active = [seat for seat in active if not seat.finished]


def _train_group(trainer: stacked.StackedTrainer, group: list[_Seat], active: list[_Seat],
                 step: int, settings: stacked.Settings, device: torch.device,
                 experiment_id: str | None, stop_after_step: int | None, bar,
                 sender: _Sender) -> None:
    """Train one stack from ``step`` until it regroups (a member done, the members
    behind caught up) or stops; each step's next batch is built in a worker thread while
    the device computes (``prefetch``)."""
    rejoin = min((s.state.step for s in active if s.state.step > step), default=None)
    last = min(s.plan.total_steps for s in group) - 1  # the stack's last step
    if stop_after_step is not None:
        last = min(last, stop_after_step - 1)
    while True:
        started = time.perf_counter()
        rows = trainer(step, prefetch=step < last and step + 1 != rejoin)
        seconds = time.perf_counter() - started
        step += 1
        bar.update(1)
        for index, (seat, row) in enumerate(zip(group, rows, strict=True)):
            seat.state.record(check_finite_loss(_log_row(seat, row, trainer, index,
                                                         seconds), seat.model_dir))
        stopping = stop_after_step is not None and step >= stop_after_step
        done = [seat for seat in group if step >= seat.plan.total_steps]
        checkpoint = stopping or any(s.plan.checkpoint_due(step) for s in group)
        for seat in group:
            seat.steps.add(seat.state.log_rows[-1], send=(
                checkpoint or seat in done or seat.plan.log_due(step)))
        if checkpoint or done or stopping or any(
                s.curve_hook and step in s.plan.curve_at for s in group):
            sender.drain()  # what follows (a run's end, a checkpoint) comes after them
        for index, seat in enumerate(group):
            if seat.curve_hook and step in seat.plan.curve_at:
                model = trainer.unstack(index).to(device)
                with _visit(seat, experiment_id) as run_id:
                    seat.state.curve.append(
                        log_curve_point(seat.curve_hook, model, model, step, run_id))
        regroup = stopping or bool(done) or step == rejoin
        if checkpoint or regroup:
            for index, seat in enumerate(group):
                seat.weights = trainer.member_state(index)
                seat.moments = trainer.member_moments(index)
        for seat in group:
            if seat in done:
                _finish(seat, settings, experiment_id, device)
            elif checkpoint:
                _checkpoint(seat, settings)
        if stopping:
            raise StoppedEarly(step)
        if regroup:
            return


def _log_row(seat: _Seat, row: dict[str, float], trainer: stacked.StackedTrainer, index: int,
             seconds: float) -> dict[str, float]:
    """The member's row of ``train_log.csv``: the stack's step time is shared by its
    members (``seconds``, what the model cost); its tokens/s is its own progress."""
    return {"step": row["step"], "epoch": row["step"] / seat.plan.steps_per_epoch,
            "loss": row["loss"], "lr": row["lr"],
            "tokens_per_s": trainer.tokens[index] / max(seconds, 1e-9),
            "seconds": seconds / len(trainer.members)}


def _member_model(seat: _Seat, settings: stacked.Settings) -> BertForMaskedLM:
    """The member as a plain model: its current weights, or its initial ones."""
    if seat.weights is None:
        return stacked.fresh_model(settings, seat.run.seed)
    return stacked.member_model(settings, seat.run.seed, seat.weights)


def _checkpoint(seat: _Seat, settings: stacked.Settings) -> None:
    """The member's checkpoint: weights, its AdamW moments and step, its training state."""
    save_checkpoint(seat.run, seat.area, _member_model(seat, settings),
                    _Saved({MOMENTS: seat.moments, "step": seat.state.step}),
                    _Saved({"last_epoch": seat.state.step}), seat.state,
                    seat.plan.total_steps if seat.plan else None)


def _finish(seat: _Seat, settings: stacked.Settings, experiment_id: str | None,
            device: torch.device) -> None:
    """The member's final model folder and done file; its MLflow run ends FINISHED."""
    done = done_record(seat.run, seat.state, seat.plan, seat.data, 1, device.type)
    save_final_model(seat.run, _member_model(seat, settings), seat.model_dir, seat.area,
                     seat.state, done | {"trainer": "stacked"})
    if seat.state.run_id:
        with _visit(seat, experiment_id, finish=True):
            tracking.log_artifact(seat.model_dir / TRAIN_LOG)
    seat.finished = True
