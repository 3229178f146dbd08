"""MLM pretraining through Accelerate: resumable, deterministic, tracked.

Every random draw of step ``s`` (dropout, masking) is seeded from (seed, s), and the batch
order of epoch ``e`` from (seed, e). A checkpoint therefore needs only weights, optimizer,
scheduler and the step: a run resumed after a kill ends with the same weights as an
uninterrupted one (:mod:`multilab.training.checkpoints` writes them all or nothing).

The global batch (``batch_size × grad_accum``, 256 in both paper models) is masked as a
whole and then split across processes and accumulation steps, so the loss of a step does
not depend on how many devices share it.

:func:`train_model` is the whole loop on one screen, in the spirit of nanoGPT's
``train.py``; each of its lines is one named function, here (the optimizer, one step) or
beside it: the model's examples, plan, batches and masks, the contract it shares with the
stacked trainer (:mod:`~multilab.training.member`), checkpoint I/O
(:mod:`~multilab.training.checkpoints`) and what the run tells MLflow
(:mod:`~multilab.training.run_tracking`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from tqdm.auto import tqdm
from transformers import BertForMaskedLM, get_linear_schedule_with_warmup

from multilab import devices, tracking
from multilab.config import FUSED_STEP, RunConfig
from multilab.data.batches import MaskedBatch, mix_seed
from multilab.data.layout import layout
from multilab.data.vocab import load_tokenizer
from multilab.errors import StoppedEarly, UserError
from multilab.progress import progress_bar
from multilab.training.checkpoints import (
    TrainingState,
    load_checkpoint,
    save_checkpoint,
    save_final_model,
    training_lock,
)
from multilab.training.fused_step import FusedObjective, check_compiler
from multilab.training.member import Member, Plan, step_batch
from multilab.training.model import CurveHook, MaskedLMObjective, build_model, check_finite_weights
from multilab.training.model_dir import (
    TRAIN_LOG,
    check_weights,
    checkpoint_area,
    data_fingerprint,
    latest_checkpoint,
    read_done,
    remove_checkpoints,
)
from multilab.training.run_tracking import (
    StepLog,
    log_curve_point,
    open_logging,
    run_tags,
    tracked_run,
)
from multilab.training.training_data import TrainingData, prepare_data

log = logging.getLogger(__name__)


def train_model(
    run: RunConfig,
    *,
    experiment_id: str | None = None,
    curve_hook: CurveHook | None = None,
    stop_after_step: int | None = None,
    progress: bool = True,
    model_dir: Path | None = None,
) -> Path:
    """Train one model into ``run.model_dir`` (or resume it); skip if already trained.

    ``stop_after_step`` ends the process's work early (tests of resume use it instead of
    a kill); the run stays resumable.
    """
    model_dir = model_dir or run.model_dir
    accelerator = Accelerator(
        gradient_accumulation_steps=1,
        mixed_precision=devices.mixed_precision(),
    )
    main = accelerator.is_main_process
    tracked = main and experiment_id is not None
    data_hash = data_fingerprint(run)
    fingerprint = run.fingerprint(data_hash)
    area = checkpoint_area(run.study.paths, model_dir, fingerprint)
    if already_trained(model_dir, area, fingerprint, experiment_id if tracked else None):
        return model_dir

    data, member, model, optimizer, scheduler = _built(run)
    plan = member.plan
    with training_lock(area.parent, model_dir) if main else contextlib.nullcontext():
        # asked again under the lock: a concurrent `train` of this model may have finished
        # while this one prepared its data, and must not be trained again from step 0
        if _finished_meanwhile(accelerator, main and already_trained(
                model_dir, area, fingerprint, experiment_id if tracked else None)):
            return model_dir
        try:
            state = _resume(area, model_dir, fingerprint, model, optimizer, scheduler)
        except UserError:  # a damaged checkpoint: the killed run it belongs to ends KILLED
            if tracked:
                tracking.end_orphaned_runs(experiment_id, fingerprint)
            raise
        one_step = _Step(run, member, model, optimizer, scheduler, accelerator)
        if tracked:
            tracking.end_orphaned_runs(experiment_id, fingerprint, keep=state.run_id)
        tags = run_tags(run, data_hash, fingerprint)
        with tracked_run(tracked, experiment_id, state.run_id, tags, run,
                         resumed_from_step=state.step) as run_id:
            logged = open_logging(run, run_id, state, data, plan.total_steps,
                                  accelerator.num_processes)
            steps = StepLog(run_id, _progress_bar(run, plan, state.step, progress and main),
                             logged)
            for number in range(state.step, plan.total_steps):
                state.record(check_finite_loss(one_step(number), model_dir))
                stopping = stop_after_step is not None and state.step >= stop_after_step
                save = main and (stopping or plan.checkpoint_due(state.step))
                steps.add(state.log_rows[-1], send=save or stopping or plan.log_due(state.step))
                if main and curve_hook and state.step in plan.curve_at:
                    steps.say(f"step {state.step}: evaluating the curve point on "
                              f"{run.study.evaluate.curve_sentences:,} dev sentences…")
                    state.curve.append(log_curve_point(curve_hook, one_step.objective, model,
                                                       state.step, run_id))
                    steps.say(None)
                if save:
                    save_checkpoint(run, area, model, one_step.optimizer, scheduler, state,
                                    plan.total_steps)
                accelerator.wait_for_everyone()
                if stopping:
                    steps.close()
                    raise StoppedEarly(state.step)
            steps.close()
            if main:
                _save_finished(run, model, model_dir, area, state,
                               done_record(run, state, plan, data, accelerator.num_processes,
                                           accelerator.device.type))
            accelerator.wait_for_everyone()
    return model_dir


def _built(run: RunConfig) -> tuple[TrainingData, Member, BertForMaskedLM, Any, Any]:
    """What the run trains: its data, its member (batches, masks and plan: the stack's
    contract), the fresh model, its optimizer and schedule. Every input is read here,
    before anything is written: a damaged one is one line, not a traceback at the first
    checkpoint (which saves the tokenizer) or in the first step."""
    load_tokenizer(run.study.paths.vocab, layout(run.study).saved)
    data, encoder = prepare_data(run)
    member = Member.of(run, data, encoder)
    model = build_model(run.model, encoder.total_size, run.seed, encoder.languages,
                        run.recipe.next_sentence, run.recipe.separate_layers, encoder.offsets)
    optimizer, scheduler = _optimizer_and_schedule(model, run, member.total_steps)
    return data, member, model, optimizer, scheduler


def _save_finished(run: RunConfig, model: BertForMaskedLM, model_dir: Path, area: Path,
                   state: TrainingState, done: dict[str, Any]) -> None:
    """The finished model and its done file; its train log to the run's MLflow artefacts."""
    save_final_model(run, model, model_dir, area, state, done)
    if state.run_id:
        tracking.log_artifact(model_dir / TRAIN_LOG)


# --------------------------------------------------------------------------- the optimizer


def _optimizer_and_schedule(model: torch.nn.Module, run: RunConfig, total_steps: int):
    """AdamW (BERT's decay groups) and a linear schedule with warm-up over ``total_steps``."""
    train = run.study.train
    optimizer = make_optimizer(model, run.model.lr, train.weight_decay, train.adam_eps)
    steps = max(total_steps, 1)
    scheduler = get_linear_schedule_with_warmup(optimizer, min(train.warmup_steps, steps), steps)
    return optimizer, scheduler


def _no_decay(name: str) -> bool:
    return name.endswith("bias") or "LayerNorm" in name


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float, eps: float,
                   one_kernel: bool = False):
    """AdamW without decay on biases and LayerNorm weights (as BERT).

    ``one_kernel``: torch's fused AdamW (one C++ pass over each parameter instead of a dozen
    ops each), the same update to float rounding (tests/test_fused_step.py). A lever measured
    by benchmarks/bench_cpu_floor.py (``--fused-adamw``), not used by the trainer: it did not
    shorten the fused step measurably (benchmarks/results/cpu-floor-2026-12-07-b-*.json)."""
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if not _no_decay(n)], "weight_decay": weight_decay},
        {"params": [p for n, p in named if _no_decay(n)], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, eps=eps, fused=True if one_kernel else None)


# --------------------------------------------------------------------------- one step


class _Step:
    """One optimisation step: the step's global batch, its masks and pieces (the member's,
    as a stack builds them: training/member.py), its pieces forward and backward, the
    clipped update. Returns the row ``train_log.csv`` records for it."""

    def __init__(self, run: RunConfig, member: Member, model: BertForMaskedLM,
                 optimizer, scheduler, accelerator: Accelerator) -> None:
        self.run, self.member = run, member
        self.optimizer, self.scheduler, self.accelerator = optimizer, scheduler, accelerator
        self.fused = None
        if run.study.train.step == FUSED_STEP:
            if accelerator.device.type == "cpu":  # a GPU's inductor needs no C++ compiler
                check_compiler()
            self.fused = FusedObjective(model)
        objective = self.fused or MaskedLMObjective(model)
        if run.study.train.compile:
            objective = torch.compile(objective)
        # The scheduler is NOT prepared: Accelerate would step it once per process for every
        # optimizer step (its convention for per-process batches); our step is already global.
        self.objective, self.optimizer = accelerator.prepare(objective, optimizer)
        self.objective.train()

    def __call__(self, step: int) -> dict[str, float]:
        """Optimizer step ``step`` (0-based); its row of ``train_log.csv``."""
        started = time.perf_counter()
        run, train, accelerator = self.run, self.run.study.train, self.accelerator
        world, rank = accelerator.num_processes, accelerator.process_index
        drawn = step_batch(self.member, run.model, train, step, world, rank)
        batch, pieces, masked = drawn.batch, drawn.pieces, drawn.masked
        torch.manual_seed(mix_seed(run.seed, step, rank))  # dropout of this step
        if self.fused is not None:  # its counter-hash keys: their own generator
            self.fused.seed_step(mix_seed(run.seed, step, rank))
        loss = _accumulate(self.objective, accelerator, masked, pieces, world, len(masked.labels))
        if world > 1:  # each rank holds its share; the logged loss is the global batch's
            loss = float(accelerator.reduce(torch.tensor(loss, device=accelerator.device),
                                            reduction="sum"))
        accelerator.clip_grad_norm_(self.objective.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        tokens = int(batch.real_tokens().sum())  # the global batch's real tokens
        return {
            "step": step + 1,
            "epoch": (step + 1) / self.member.order(run.model.global_batch,
                                                    train.bucket_chunk).steps_per_epoch,
            "loss": loss,
            "lr": self.scheduler.get_last_lr()[0],
            "tokens_per_s": tokens / max(time.perf_counter() - started, 1e-9),
            "seconds": time.perf_counter() - started,  # not in train_log.csv: the cost
        }


def _accumulate(
    objective, accelerator: Accelerator, masked: MaskedBatch, pieces: list[torch.Tensor],
    world: int, total: int,
) -> float:
    """Forward/backward this process's ``pieces`` of the global batch, one at a time.

    Each piece's summed cross-entropy is divided by the global number of selected tokens
    and multiplied by the world size (DDP averages gradients): the gradient equals that of
    the mean loss over the whole global batch. Every rank runs as many forward and backward
    passes as there are pieces, whatever its share holds (each one is a DDP collective: a
    rank that ran fewer would leave the others waiting forever); an empty piece runs on a
    stand-in row with nothing selected, which adds an exact zero. Each piece is cut to its
    own widest row. Returns this rank's share of the step's mean loss.
    """
    rows = torch.arange(masked.selected.shape[0])
    step_loss = 0.0
    for number, piece in enumerate(pieces):
        stand_in = len(piece) == 0
        if stand_in:
            piece = rows[:1]
        selected = masked.selected[piece]
        inputs = {k: v[piece].to(accelerator.device) for k, v in masked.inputs.items()}
        width = int(masked.token_mask[piece].sum(1).max())  # the piece's widest real row
        inputs = {k: v[:, :width] for k, v in inputs.items()}
        selected = selected[:, :width].to(accelerator.device)
        labels = _labels_of(masked, piece).to(accelerator.device)
        if stand_in:
            selected = torch.zeros_like(selected)
            labels = labels[:0]
        nsp = {}
        if masked.next_sentence is not None:  # NSP's mean over the global batch's rows
            rows_total = masked.selected.shape[0]
            nsp = {"next_sentence": masked.next_sentence[piece].to(accelerator.device),
                   "nsp_weight": 0.0 if stand_in else total / rows_total}
        sync = number == len(pieces) - 1
        with _maybe_no_sync(accelerator, objective, sync):
            with accelerator.autocast():
                loss_sum = objective(selected, labels, **nsp, **inputs)
            accelerator.backward(loss_sum / total * world)
        step_loss += float(loss_sum.detach()) / total
    return step_loss


def _maybe_no_sync(accelerator: Accelerator, objective, sync: bool):
    """Skip DDP's gradient all-reduce on all but the last accumulation piece."""
    return contextlib.nullcontext() if sync else accelerator.no_sync(objective)


def _labels_of(masked: MaskedBatch, rows: torch.Tensor) -> torch.Tensor:
    """The labels of the selected positions that fall in ``rows`` (row-major order kept)."""
    owner = masked.selected.nonzero()[:, 0]
    keep = torch.isin(owner, rows)
    return masked.labels[keep]


# --------------------------------------------------------------------------- skip, resume, finish


def already_trained(model_dir: Path, area: Path, fingerprint: str,
                     experiment_id: str | None) -> bool:
    """A finished model of this fingerprint is there: tidy up after a late kill, skip.

    Weights that no longer match the done file are an error, not a finished model.
    """
    done = read_done(model_dir, damaged_ok=True)  # a damaged done file: train it again
    if not (done and done.get("fingerprint") == fingerprint):
        return False
    check_weights(model_dir, done)
    log.info("%s already trained (fingerprint %s): skipping", model_dir, fingerprint)
    remove_checkpoints(area)  # left if a kill landed right after the final rename
    remove_checkpoints(model_dir)  # left there by versions that checkpointed inside it
    if experiment_id is not None:
        # killed between the final rename and the end of its run: the training did finish
        tracking.end_orphaned_runs(experiment_id, fingerprint, completed=done.get("run_id"))
    return True


def _finished_meanwhile(accelerator: Accelerator, finished: bool) -> bool:
    """The main process's answer to "already trained?", the same on every process."""
    if accelerator.num_processes == 1:
        return finished
    from accelerate.utils import broadcast_object_list

    return bool(broadcast_object_list([finished])[0])


def check_finite_loss(row: dict[str, float], model_dir: Path) -> dict[str, float]:
    """``row`` if its loss is a number; else stop: a NaN or infinite loss never recovers, and
    training on would end in a "finished" model of NaN weights."""
    if not math.isfinite(row["loss"]):
        raise UserError(
            f"training loss is {row['loss']} at step {int(row['step'])} of {model_dir}; "
            "stopped, nothing marked finished (a damaged checkpoint or a learning rate too "
            "high)"
        )
    return row


def _resume(area: Path, model_dir: Path, fingerprint: str, model, optimizer, scheduler
            ) -> TrainingState:
    """Load the latest checkpoint of this fingerprint into the model, optimizer and scheduler;
    a fresh state when there is none (a checkpoint left inside ``model_dir`` by an earlier
    version counts too)."""
    area.mkdir(parents=True, exist_ok=True)
    checkpoint = latest_checkpoint(area) or latest_checkpoint(model_dir)
    if checkpoint is None:
        return TrainingState(fingerprint)
    saved = load_checkpoint(checkpoint)
    if saved["state"]["fingerprint"] != fingerprint:
        log.warning("ignoring %s: it belongs to another configuration", checkpoint)
        return TrainingState(fingerprint)
    check_finite_weights(saved["model"], checkpoint)
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    state = TrainingState.of_checkpoint(saved["state"])
    log.info("resuming %s from step %d", model_dir, state.step)
    return state


def done_record(run: RunConfig, state: TrainingState, plan: Plan, data: TrainingData,
                 world_size: int, device: str) -> dict[str, Any]:
    """What ``multilab.json`` says of the finished model (the weights' hash is added when
    they are written); ``device``: the kind it trained on (``cpu``, ``cuda``), which its
    records carry and a study that reads one kind of device checks."""
    return {
        "fingerprint": state.fingerprint,
        "modification": run.modification,
        "paper_id": run.paper_id,
        "seed": run.seed,
        "profile": run.study.profile,
        "run_id": state.run_id,
        "steps": plan.total_steps,
        "steps_per_epoch": plan.steps_per_epoch,
        "train_examples": len(data.examples),
        "truncated_sentences": data.truncated,
        "world_size": world_size,
        "device": device,
        # what the model cost (optimizer steps only; a checkpoint from before this key
        # counts as 0): the study list prices its missing runs with it
        "step_seconds": round(sum(row.get("seconds", 0.0) for row in state.log_rows), 1),
        # the metrics at train.eval_points (on evaluate.curve_sentences dev sentences)
        "curve": state.curve,
    }


def _progress_bar(run: RunConfig, plan: Plan, start: int, show: bool) -> tqdm:
    return progress_bar(total=plan.total_steps, initial=start, disable=not show,
                        desc=f"{run.modification} s{run.seed}", unit="step")
