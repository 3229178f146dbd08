"""MLM pretraining through Accelerate: resumable, deterministic, tracked.

Every random draw of step ``s`` (dropout, masking) is seeded from (seed, s), and the batch
order of epoch ``e`` from (seed, e). A checkpoint therefore needs only weights, optimizer,
scheduler and the step: a run resumed after a kill ends with the same weights as an
uninterrupted one. Checkpoints are written to a temp folder and renamed (atomic on POSIX),
so a kill during a write never leaves a half-written checkpoint that a resume would pick up.

The global batch (``batch_size × grad_accum``, 256 in both paper models) is masked as a
whole and then split across processes and accumulation steps, so the loss of a step does
not depend on how many devices share it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate import Accelerator
from tqdm.auto import tqdm
from transformers import get_linear_schedule_with_warmup

from multilab import tracking
from multilab.config import RunConfig
from multilab.data.batches import (
    Examples,
    bucketed_batches,
    least_padding_cuts,
    mask_tokens,
    seeded_generator,
    sort_by_length,
    tokenize_lines,
    training_examples,
)
from multilab.data.corpus import read_lines
from multilab.data.inputs import InputEncoder
from multilab.data.vocab import BILINGUAL_DIR, load_tokenizer
from multilab.errors import UserError
from multilab.files import replace_dir, write_text
from multilab.lab.metric_table import TRAIN_LOSS
from multilab.spaces import fasttext_spaces
from multilab.training.model import CurveHook, MaskedLMObjective, build_model
from multilab.training.model_dir import (
    TRAIN_LOG,
    checkpoint_dir,
    data_fingerprint,
    latest_checkpoint,
    partial_checkpoint_dir,
    read_done,
    remove_checkpoints,
    write_done,
)

log = logging.getLogger(__name__)



@dataclass
class TrainingData:
    examples: Examples
    truncated: int
    sentences: int


def prepare_data(run: RunConfig) -> tuple[TrainingData, InputEncoder]:
    paths, train = run.study.paths, run.study.train
    tokenizer = load_tokenizer(paths.vocab)
    encoder = InputEncoder(run.recipe, len(tokenizer), train.max_length)
    lines = read_lines(paths.corpora / "train.txt")
    if train.max_train_sentences:
        lines = lines[: train.max_train_sentences]
    sentences, truncated = tokenize_lines(lines, tokenizer, encoder)
    examples = training_examples(sentences, run.recipe, encoder)
    return TrainingData(examples, truncated, len(lines)), encoder


def load_knn_table(run: RunConfig) -> torch.Tensor | None:
    """The knn table, checked against the tokenizer: a space of another vocabulary is refused.

    Neighbours are token ids; a table built with another vocabulary would silently replace
    tokens by the wrong words.
    """
    if not run.recipe.needs_knn:
        return None
    tokenizer = load_tokenizer(run.study.paths.vocab)
    vocab_words = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return fasttext_spaces.load_knn_table(run.study.paths.spaces, vocab_words)


def _load_checkpoint(checkpoint: Path) -> dict:
    """A checkpoint's state, or one clear error: an unreadable one is never skipped silently.

    Writes are atomic (temp folder + rename), so a kill cannot leave a corrupted checkpoint;
    one that is unreadable was damaged afterwards (disk, copy, hand). Only the latest
    checkpoint is kept, so skipping it would silently restart from step 0.
    """
    try:
        return torch.load(checkpoint / "state.pt", weights_only=False)
    except Exception as err:  # truncated zip, bad pickle, missing file: many types
        reason = (str(err).strip().split(". ")[0].splitlines() or [type(err).__name__])[0]
        raise UserError(
            f"checkpoint {checkpoint} is unreadable ({reason}); delete that folder to "
            "retrain this model from step 0"
        ) from err


def _save_checkpoint(
    run: RunConfig, model_dir: Path, step: int, model, optimizer, scheduler, state: dict
) -> None:
    """Write to ``.tmp-checkpoint-N``, flush it to disk, rename: all or nothing is visible.

    A checkpoint is a model directory of its own (``save_pretrained`` + tokenizer: any
    intermediate model loads with ``AutoModelForMaskedLM.from_pretrained``) plus ``state.pt``
    with the weights, optimizer, scheduler and step for an exact resume.
    """
    final = checkpoint_dir(model_dir, step)
    tmp = partial_checkpoint_dir(model_dir, step)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(str(tmp))
    load_tokenizer(run.study.paths.vocab, BILINGUAL_DIR).save_pretrained(str(tmp))
    with (tmp / "state.pt").open("wb") as handle:
        torch.save(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "state": state,
            },
            handle,
        )
        handle.flush()
        os.fsync(handle.fileno())  # the rename must not outrun the data (power loss)
    replace_dir(tmp, final)
    remove_checkpoints(model_dir, keep=final)


def _no_decay(name: str) -> bool:
    return name.endswith("bias") or "LayerNorm" in name


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float, eps: float):
    """AdamW without decay on biases and LayerNorm weights (as BERT)."""
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if not _no_decay(n)], "weight_decay": weight_decay},
        {"params": [p for n, p in named if _no_decay(n)], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, eps=eps)


def curve_steps(total_steps: int, fractions: tuple[float, ...]) -> set[int]:
    """Optimizer steps at which curve metrics are taken during training.

    The final step is not one of them: the evaluate stage logs the final point (on the full
    dev set) at ``total_steps``, and two values at one step would be ambiguous in MLflow.
    """
    return {max(1, round(f * total_steps)) for f in fractions if 0 < f < 1} - {total_steps}


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
    accelerator = Accelerator(
        gradient_accumulation_steps=1,
        mixed_precision="bf16" if torch.cuda.is_available() else "no",
    )
    model_dir = model_dir or run.model_dir
    fingerprint = run.fingerprint(data_fingerprint(run))
    done = read_done(model_dir)
    if done and done.get("fingerprint") == fingerprint:
        log.info("%s already trained (fingerprint %s): skipping", model_dir, fingerprint)
        remove_checkpoints(model_dir)  # left if a kill landed right after multilab.json
        if accelerator.is_main_process and experiment_id is not None:
            # killed between multilab.json and the end of its run: the training did finish
            tracking.end_orphaned_runs(experiment_id, fingerprint, completed=done.get("run_id"))
        return model_dir

    data, encoder = prepare_data(run)
    knn_table = load_knn_table(run)
    train_cfg, model_cfg = run.study.train, run.model
    global_batch = model_cfg.batch_size * model_cfg.grad_accum
    steps_per_epoch = math.ceil(len(data.examples) / global_batch)
    total_steps = max(1, round(run.epochs * steps_per_epoch)) if run.recipe.trained else 0

    model = build_model(model_cfg, 2 * encoder.vocab_size, run.seed)
    optimizer = make_optimizer(model, model_cfg.lr, train_cfg.weight_decay, train_cfg.adam_eps)
    scheduler = get_linear_schedule_with_warmup(
        optimizer, min(train_cfg.warmup_steps, max(total_steps, 1)), max(total_steps, 1)
    )
    model_dir.mkdir(parents=True, exist_ok=True)
    start_step, run_id, log_rows = 0, None, []
    checkpoint = latest_checkpoint(model_dir)
    if checkpoint is not None:
        saved = _load_checkpoint(checkpoint)
        if saved["state"]["fingerprint"] == fingerprint:
            model.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
            scheduler.load_state_dict(saved["scheduler"])
            start_step = saved["state"]["step"]
            run_id = saved["state"]["run_id"]
            log_rows = saved["state"]["log_rows"]
            log.info("resuming %s from step %d", model_dir, start_step)
        else:
            log.warning("ignoring %s: it belongs to another configuration", checkpoint)

    objective = MaskedLMObjective(model)
    if train_cfg.compile:
        objective = torch.compile(objective)
    # The scheduler is NOT prepared: Accelerate would step it once per process for every
    # optimizer step (its convention for per-process batches), and our step is already global.
    objective, optimizer = accelerator.prepare(objective, optimizer)
    main = accelerator.is_main_process
    world, rank = accelerator.num_processes, accelerator.process_index
    tags = {
        "paper_id": run.paper_id or "",
        "modification": run.modification,
        "seed": run.seed,
        "profile": run.study.profile,
        "git_commit": tracking.git_commit(),
        "data_hash": data_fingerprint(run),
        "fingerprint": fingerprint,
        "study": run.study.experiment,
        **tracking.process_tags(),  # lets a later process tell a live run from an orphan
    }
    if main and experiment_id is not None:
        tracking.end_orphaned_runs(experiment_id, fingerprint, keep=run_id)
    curve_at = curve_steps(total_steps, train_cfg.eval_points) if total_steps else set()

    with _maybe_run(main, experiment_id, run_id, tags, run) as active_run:
        if main and start_step == 0 and active_run:
            tracking.log_params(run.as_params())
            tracking.log_metrics(
                {"train_examples": len(data.examples), "truncated_sentences": data.truncated,
                 "total_steps": total_steps, "world_size": world}
            )
        bar = tqdm(
            total=total_steps, initial=start_step, disable=not (progress and main),
            desc=f"{run.modification} s{run.seed}", unit="step",
        )
        epoch_batches: dict[int, list[torch.Tensor]] = {}
        pending: list[dict[str, float]] = []  # per-step rows not yet sent to MLflow
        objective.train()
        for step in range(start_step, total_steps):
            step_start = time.perf_counter()
            epoch, index = divmod(step, steps_per_epoch)
            if epoch not in epoch_batches:
                epoch_batches = {
                    epoch: bucketed_batches(
                        data.examples.lengths, global_batch, run.seed, epoch,
                        train_cfg.bucket_chunk,
                    )
                }
            indices = epoch_batches[epoch][index]
            if train_cfg.length_pieces > 1:
                indices = sort_by_length(indices, data.examples.lengths)
            batch = data.examples.batch(indices)
            masked = mask_tokens(
                batch, encoder, train_cfg.mask_prob, run.recipe.replacement,
                seeded_generator(run.seed, step, 1), knn_table,
            )
            total_selected = len(masked.labels)
            torch.manual_seed(_mix(run.seed, step, rank))  # dropout of this step
            pieces = accumulation_pieces(
                masked, world, rank, model_cfg.grad_accum, train_cfg.length_pieces
            )
            step_loss = _accumulate(objective, accelerator, masked, pieces, world, total_selected)
            if world > 1:  # each rank holds its share; the logged loss is the global batch's
                step_loss = float(accelerator.reduce(
                    torch.tensor(step_loss, device=accelerator.device), reduction="sum"
                ))
            accelerator.clip_grad_norm_(objective.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)

            done_steps = step + 1
            step_tokens = int(batch.attention_mask.sum())  # the global batch's real tokens
            row = {
                "step": done_steps,
                "epoch": done_steps / steps_per_epoch,
                "loss": step_loss,
                "lr": scheduler.get_last_lr()[0],
                "tokens_per_s": step_tokens / max(time.perf_counter() - step_start, 1e-9),
            }
            log_rows.append(row)
            pending.append(row)
            bar.update(1)
            checkpoint_now = main and done_steps < total_steps and (
                done_steps % train_cfg.checkpoint_every == 0 or done_steps in curve_at
            )
            flush = done_steps % train_cfg.log_every == 0 or checkpoint_now
            if flush or done_steps in (total_steps, stop_after_step):
                # every step is logged; log_every only sets how often one batch is sent
                bar.set_postfix(loss=f"{sum(r['loss'] for r in pending) / len(pending):.3f}",
                                tok_s=f"{row['tokens_per_s']:.0f}")
                if main and active_run:
                    tracking.log_step_rows(active_run, pending, {
                        TRAIN_LOSS: "loss", "lr": "lr", "tokens_per_s": "tokens_per_s"})
                pending = []
            if done_steps in curve_at and curve_hook and main:
                objective.eval()
                metrics = curve_hook(done_steps, model)
                objective.train()
                if active_run:
                    tracking.log_metrics(metrics, step=done_steps)
            if checkpoint_now:
                state = {"step": done_steps, "fingerprint": fingerprint, "run_id": active_run,
                         "log_rows": log_rows}
                _save_checkpoint(
                    run, model_dir, done_steps, model, optimizer,
                    scheduler, state,
                )
            accelerator.wait_for_everyone()
            if stop_after_step is not None and done_steps >= stop_after_step:
                if main:
                    state = {"step": done_steps, "fingerprint": fingerprint,
                             "run_id": active_run, "log_rows": log_rows}
                    _save_checkpoint(
                        run, model_dir, done_steps, model, optimizer,
                        scheduler, state,
                    )
                bar.close()
                raise _Stopped(done_steps)
        bar.close()
        if main:
            _save_final(run, model, model_dir, fingerprint, {
                "run_id": active_run, "steps": total_steps, "steps_per_epoch": steps_per_epoch,
                "train_examples": len(data.examples), "truncated_sentences": data.truncated,
                "world_size": world,
            }, log_rows)
            if active_run:
                tracking.log_artifact(model_dir / TRAIN_LOG)
        accelerator.wait_for_everyone()
    return model_dir


class _Stopped(Exception):
    """Raised by ``stop_after_step`` to end a run early on purpose (tests of resume)."""


def accumulation_pieces(
    masked, world: int, rank: int, accum: int, length_pieces: int = 1
) -> list[torch.Tensor]:
    """The rows of this process's share of the global batch, piece by piece.

    The share (every ``world``-th row from ``rank``) is cut into ``accum`` equal groups
    (memory: none holds more rows than ``batch_size``); with ``length_pieces`` > 1 the batch
    arrives sorted by length and each group is cut again where the padding is least
    (:func:`~multilab.data.batches.least_padding_cuts`). Every rank gets exactly
    ``accum * length_pieces`` pieces, empty ones included: each piece is a DDP collective.
    """
    rows = torch.arange(masked.selected.shape[0])
    lengths = masked.inputs["attention_mask"].sum(1)
    pieces: list[torch.Tensor] = []
    for group in rows[rank::world].tensor_split(accum):
        cuts = least_padding_cuts(lengths[group], length_pieces) if length_pieces > 1 else []
        parts = list(group.split(cuts)) if cuts else [group]
        parts += [group[:0]] * (length_pieces - len(parts))
        pieces.extend(parts)
    return pieces


def _accumulate(
    objective, accelerator: Accelerator, masked, pieces: list[torch.Tensor], world: int,
    total: int,
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
        width = int(inputs["attention_mask"].sum(1).max())
        inputs = {k: v[:, :width] for k, v in inputs.items()}
        selected = selected[:, :width].to(accelerator.device)
        labels = _labels_of(masked, piece).to(accelerator.device)
        if stand_in:
            selected = torch.zeros_like(selected)
            labels = labels[:0]
        sync = number == len(pieces) - 1
        with _maybe_no_sync(accelerator, objective, sync):
            with accelerator.autocast():
                loss_sum = objective(selected, labels, **inputs)
            accelerator.backward(loss_sum / total * world)
        step_loss += float(loss_sum.detach()) / total
    return step_loss


def _maybe_no_sync(accelerator: Accelerator, objective, sync: bool):
    """Skip DDP's gradient all-reduce on all but the last accumulation piece."""
    return contextlib.nullcontext() if sync else accelerator.no_sync(objective)


def _labels_of(masked, rows: torch.Tensor) -> torch.Tensor:
    """The labels of the selected positions that fall in ``rows`` (row-major order kept)."""
    owner = masked.selected.nonzero()[:, 0]
    keep = torch.isin(owner, rows)
    return masked.labels[keep]


def _mix(*keys: int) -> int:
    mixed = 0
    for key in keys:
        mixed = (mixed * 1_000_003 + int(key)) % (2**63 - 1)
    return mixed


class _maybe_run:
    """An MLflow run on the main process (None elsewhere or when tracking is off)."""

    def __init__(self, main: bool, experiment_id, run_id, tags, run: RunConfig) -> None:
        self.enabled = main and experiment_id is not None
        self.context = (
            tracking.run(
                experiment_id, run_id=run_id, tags=tags,
                name=f"{run.modification} s{run.seed}",
            )
            if self.enabled
            else None
        )

    def __enter__(self) -> str | None:
        return self.context.__enter__() if self.context else None

    def __exit__(self, *exc) -> bool | None:
        if self.context:
            if exc[0] is _Stopped:  # deliberate early stop: the run stays resumable
                return self.context.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None)
            return self.context.__exit__(*exc)
        return None


def _save_final(
    run: RunConfig, model, model_dir: Path, fingerprint: str, info: dict, log_rows: list
) -> None:
    """save_pretrained + tokenizer + train log; ``multilab.json`` last marks completion."""
    model.save_pretrained(str(model_dir))
    load_tokenizer(run.study.paths.vocab, BILINGUAL_DIR).save_pretrained(str(model_dir))
    header = ["step", "epoch", "loss", "lr", "tokens_per_s"]
    lines = [",".join(header)] + [",".join(f"{r[h]:.6g}" for h in header) for r in log_rows]
    write_text(model_dir / TRAIN_LOG, "\n".join(lines) + "\n")
    record = {
        "fingerprint": fingerprint,
        "modification": run.modification,
        "paper_id": run.paper_id,
        "seed": run.seed,
        "profile": run.study.profile,
        **info,
    }
    write_done(model_dir, record)
    # only now: a kill before this line resumes from the last checkpoint, not from step 0
    remove_checkpoints(model_dir)
