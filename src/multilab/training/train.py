"""MLM pretraining through Accelerate: resumable, deterministic, tracked.

Every random draw of step ``s`` (dropout, masking) is seeded from (seed, s), and the batch
order of epoch ``e`` from (seed, e). A checkpoint therefore needs only weights, optimizer,
scheduler and the step: a run resumed after a kill ends with the same weights as an
uninterrupted one. Checkpoints are written to a temp folder and renamed (atomic on POSIX),
so a kill during a write never leaves a half-written checkpoint that a resume would pick up.

The global batch (``batch_size × grad_accum``, 256 in both paper models) is masked as a
whole and then split across processes and accumulation steps, so the loss of a step does
not depend on how many devices share it.

:func:`train_model` is the whole loop on one screen, in the spirit of nanoGPT's
``train.py``; each of its lines is one named function below.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from filelock import FileLock, Timeout
from tqdm.auto import tqdm
from transformers import BertForMaskedLM, get_linear_schedule_with_warmup

from multilab import devices, tracking
from multilab.config import Config, RunConfig
from multilab.data.batches import (
    BatchOrder,
    Examples,
    MaskedBatch,
    code_switched_lines,
    gradient_pieces,
    mask_tokens,
    mix_seed,
    permuted_corpus,
    seeded_generator,
    tokenize_lines,
    training_examples,
    unigram_lines,
    windows,
)
from multilab.data.corpus import training_lines
from multilab.data.inputs import InputEncoder
from multilab.data.layout import layout, tokenized_verses
from multilab.data.vocab import load_tokenizer, vocabulary_words
from multilab.errors import StoppedEarly, UserError
from multilab.files import replace_dir, write_text
from multilab.lab.metric_table import TRAIN_LOSS, curve_key
from multilab.progress import progress_bar, show_postfix
from multilab.spaces import fasttext_spaces, verse_spaces
from multilab.training.model import (
    CurveHook,
    MaskedLMObjective,
    build_model,
    check_finite_weights,
)
from multilab.training.model_dir import (
    TRAIN_LOG,
    WEIGHTS,
    WEIGHTS_HASH,
    check_weights,
    checkpoint_area,
    checkpoint_dir,
    data_fingerprint,
    file_sha256,
    latest_checkpoint,
    partial_checkpoint_dir,
    read_done,
    remove_checkpoints,
    staging_dir,
    write_done,
)

log = logging.getLogger(__name__)

#: The columns of ``train_log.csv``, one row per optimizer step (MLflow gets them as step
#: metrics: ``train_loss``, ``lr``, ``tokens_per_s``).
LOG_COLUMNS = ("step", "epoch", "loss", "lr", "tokens_per_s")
STEP_METRICS = {TRAIN_LOSS: "loss", "lr": "lr", "tokens_per_s": "tokens_per_s"}
STATE_HASH = "state.sha256"  # beside a checkpoint's state.pt
TRAIN_LOCK = "train.lock"  # in the model's checkpoint folder


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
    if _already_trained(model_dir, area, fingerprint, experiment_id if tracked else None):
        return model_dir

    data, encoder = prepare_data(run)
    knn_table = load_knn_table(run)  # before anything is written: a wrong space is refused clean
    batches = BatchOrder(data.examples.lengths, run.model.global_batch, run.seed,
                         run.study.train.bucket_chunk)
    plan = Plan.of(run, batches.steps_per_epoch)
    model = build_model(run.model, encoder.total_size, run.seed, encoder.languages,
                        run.recipe.next_sentence, run.recipe.separate_layers, encoder.offsets)
    optimizer, scheduler = _optimizer_and_schedule(model, run, plan.total_steps)
    with training_lock(area.parent, model_dir) if main else contextlib.nullcontext():
        state = _resume(area, model_dir, fingerprint, model, optimizer, scheduler)
        one_step = _Step(run, data.examples, batches, encoder, knn_table, model,
                         optimizer, scheduler, accelerator)
        if tracked:
            tracking.end_orphaned_runs(experiment_id, fingerprint, keep=state.run_id)
        tags = _run_tags(run, data_hash, fingerprint)
        with _tracked_run(tracked, experiment_id, state.run_id, tags, run) as run_id:
            state.run_id = run_id
            if run_id and state.step == 0:
                _log_start(run, data, plan, accelerator.num_processes)
            logged = _logged_through(run, run_id) if run_id and state.step else 0
            steps = _StepLog(run_id, _progress_bar(run, plan, state.step, progress and main),
                             logged)
            for number in range(state.step, plan.total_steps):
                state.record(check_finite_loss(one_step(number), model_dir))
                stopping = stop_after_step is not None and state.step >= stop_after_step
                save = main and (stopping or plan.checkpoint_due(state.step))
                steps.add(state.log_rows[-1], send=save or stopping or plan.log_due(state.step))
                if main and curve_hook and state.step in plan.curve_at:
                    steps.say(f"step {state.step}: evaluating the curve point on "
                              f"{run.study.evaluate.curve_sentences:,} dev sentences…")
                    _log_curve_point(curve_hook, one_step.objective, model, state.step, run_id)
                    steps.say(None)
                if save:
                    _save_checkpoint(run, area, model, one_step.optimizer, scheduler, state)
                accelerator.wait_for_everyone()
                if stopping:
                    steps.close()
                    raise StoppedEarly(state.step)
            steps.close()
            if main:
                _save_final(run, model, model_dir, area, state, plan, data,
                            accelerator.num_processes)
            accelerator.wait_for_everyone()
    return model_dir


# --------------------------------------------------------------------------- data


@dataclass
class TrainingData:
    examples: Examples
    truncated: int  # training sentences longer than max_length, cut


def study_encoder(run: RunConfig) -> InputEncoder:
    """The input encoder of ``run``'s languages and built vocabulary."""
    lay = layout(run.study)
    return InputEncoder(run.recipe, lay.sizes[0], run.study.train.max_length, lay.offsets,
                        lay.total)


def prepare_data(run: RunConfig) -> tuple[TrainingData, InputEncoder]:
    """The training examples of ``run`` (every language of each sentence, or shares).

    Seed 002's corpus rewrites (``unigram-target``, ``permute-p``), ``nsp``'s sentence pairs
    and seed 004's ``window-<w>`` happen here and only here: the pretraining corpus, never the
    dev set or the downstream task.
    """
    encoder = study_encoder(run)
    cfg, recipe = run.study, run.recipe

    def unigram(language: int, lines: list[str]) -> list[str]:
        return unigram_lines(lines, run.seed, language) if language else lines

    rewrite = unigram if recipe.unigram_target else None
    if recipe.code_switch:  # extra-anchors: needs every language's verses at once
        switched = _code_switched(cfg, run.seed)

        def rewrite(language: int, lines: list[str]) -> list[str]:
            return switched[language][:len(lines)]
    if cfg.verses:
        whole = cfg.user_corpora  # a user corpus's line is a document: cut, not truncated
        by_language, truncated = tokenized_verses(
            cfg, layout(cfg), "train", cfg.train.max_train_sentences,
            DOCUMENT_LENGTH if whole else cfg.train.max_length, rewrite)
        if whole:
            by_language = document_pieces(by_language, cfg.train.max_length)
            recipe = replace(recipe, parallel=True)  # unrelated lines already: no-parallel is
            # what they are (seed 000 §5's row 8 on Wikipedia), so every line is kept
        by_language = permuted_corpus(by_language, recipe.permute, run.seed)
        examples = training_examples([], recipe, encoder, by_language, run.seed)
        return TrainingData(examples, truncated), encoder
    tokenizer = load_tokenizer(cfg.paths.vocab)
    lines = training_lines(cfg)
    sentences, truncated = tokenize_lines(lines, tokenizer, encoder)
    by_language = None
    if rewrite is not None or recipe.permute:
        by_language = [sentences] + [
            tokenize_lines(rewrite(lang, lines), tokenizer, encoder)[0] if rewrite else sentences
            for lang in range(1, encoder.languages)
        ]
        by_language = permuted_corpus(by_language, recipe.permute, run.seed)
    examples = training_examples(sentences, recipe, encoder, by_language, run.seed)
    return TrainingData(examples, truncated), encoder


def _code_switched(cfg: Config, seed: int) -> list[list[str]]:
    """extra-anchors' rewritten train verses of every language (batches.code_switched_lines)."""
    from multilab.data.layout import read_verse_table

    _, texts = read_verse_table(cfg.paths.corpora / "train.txt")
    columns = layout(cfg).columns
    limit = cfg.train.max_train_sentences
    lines = [texts[column][:limit] if limit else texts[column] for column in columns]
    return code_switched_lines(lines, seed)[0]


#: A user corpus line's word-pieces are read whole (no line of a Wikipedia extract is longer)
#: and then cut into inputs by :func:`document_pieces`.
DOCUMENT_LENGTH = 1 << 30


def document_pieces(by_language: list[list[torch.Tensor]], max_length: int
                    ) -> list[list[torch.Tensor]]:
    """Each language's lines (documents or paragraphs of a user corpus) cut into consecutive
    inputs of at most ``max_length - 2`` word-pieces, every piece kept (BERT's own
    pretraining data packs a document into full-length inputs; truncating a Wikipedia
    paragraph at 126 pieces would drop most of the text). The languages' lists are padded
    with empty rows to one length (rows are not parallel; empty rows are no example)."""
    pieces = [windows(rows, max_length - 2) for rows in by_language]
    longest = max(len(rows) for rows in pieces)
    empty = torch.empty(0, dtype=torch.long)
    return [rows + [empty] * (longest - len(rows)) for rows in pieces]


def load_knn_table(run: RunConfig) -> torch.Tensor | None:
    """The knn table, checked against the tokenizer: a space of another vocabulary is refused.

    Neighbours are token ids; a table built with another vocabulary would silently replace
    tokens by the wrong words.
    """
    if not run.recipe.needs_knn:
        return None
    cfg = run.study
    if cfg.verses:
        words = vocabulary_words(load_tokenizer(cfg.paths.vocab, layout(cfg).saved))
        return verse_spaces.load_verse_knn_table(cfg.paths.spaces, words)
    tokenizer = load_tokenizer(cfg.paths.vocab)
    return fasttext_spaces.load_knn_table(cfg.paths.spaces, vocabulary_words(tokenizer))


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Plan:
    """How long a run trains and when it logs, measures and checkpoints (steps count from 1)."""

    steps_per_epoch: int
    total_steps: int
    curve_at: frozenset[int]
    checkpoint_every: int
    log_every: int

    @classmethod
    def of(cls, run: RunConfig, steps_per_epoch: int) -> Plan:
        train = run.study.train
        total = max(1, round(run.epochs * steps_per_epoch)) if run.recipe.trained else 0
        curve_at = curve_steps(total, train.eval_points) if total else set()
        return cls(steps_per_epoch, total, frozenset(curve_at), train.checkpoint_every,
                   train.log_every)

    def checkpoint_due(self, done: int) -> bool:
        """Every ``checkpoint_every`` steps and at curve points; never at the end (the model
        itself is saved then)."""
        return done < self.total_steps and (
            done % self.checkpoint_every == 0 or done in self.curve_at
        )

    def log_due(self, done: int) -> bool:
        """When to send the steps logged so far to MLflow (each step is logged, in batches)."""
        return done % self.log_every == 0 or done == self.total_steps


def curve_steps(total_steps: int, fractions: tuple[float, ...]) -> set[int]:
    """Optimizer steps at which curve metrics are taken during training.

    The final step is not one of them: the evaluate stage measures the final model (on the
    full dev set, under the metrics' own names, at ``total_steps``).
    """
    return {max(1, round(f * total_steps)) for f in fractions if 0 < f < 1} - {total_steps}


def _optimizer_and_schedule(model: torch.nn.Module, run: RunConfig, total_steps: int):
    """AdamW (BERT's decay groups) and a linear schedule with warm-up over ``total_steps``."""
    train = run.study.train
    optimizer = make_optimizer(model, run.model.lr, train.weight_decay, train.adam_eps)
    steps = max(total_steps, 1)
    scheduler = get_linear_schedule_with_warmup(optimizer, min(train.warmup_steps, steps), steps)
    return optimizer, scheduler


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


# --------------------------------------------------------------------------- one step


class _Step:
    """One optimisation step: the step's global batch, its masks, its pieces forward and
    backward, the clipped update. Returns the row ``train_log.csv`` records for it."""

    def __init__(self, run: RunConfig, examples: Examples, batches: BatchOrder,
                 encoder: InputEncoder, knn_table: torch.Tensor | None, model: BertForMaskedLM,
                 optimizer, scheduler, accelerator: Accelerator) -> None:
        self.run, self.examples, self.batches = run, examples, batches
        self.encoder, self.knn_table = encoder, knn_table
        self.optimizer, self.scheduler, self.accelerator = optimizer, scheduler, accelerator
        objective = MaskedLMObjective(model)
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
        indices, pieces = gradient_pieces(
            self.batches(step), self.examples.lengths, train.length_pieces,
            run.model.grad_accum, world, rank,
        )
        batch = self.examples.batch(indices)
        masked = mask_tokens(batch, self.encoder, train.mask_prob, run.recipe.replacement,
                             seeded_generator(run.seed, step, 1), self.knn_table)
        torch.manual_seed(mix_seed(run.seed, step, rank))  # dropout of this step
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
            "epoch": (step + 1) / self.batches.steps_per_epoch,
            "loss": loss,
            "lr": self.scheduler.get_last_lr()[0],
            "tokens_per_s": tokens / max(time.perf_counter() - started, 1e-9),
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


# --------------------------------------------------------------------------- state, resume


@dataclass
class TrainingState:
    """What a checkpoint records besides the tensors: enough to resume exactly."""

    fingerprint: str
    step: int = 0  # optimizer steps done
    run_id: str | None = None  # the MLflow run a resume continues
    log_rows: list[dict[str, float]] = field(default_factory=list)

    def record(self, row: dict[str, float]) -> None:
        self.step = int(row["step"])
        self.log_rows.append(row)

    def as_checkpoint(self) -> dict[str, Any]:
        return {"step": self.step, "fingerprint": self.fingerprint, "run_id": self.run_id,
                "log_rows": self.log_rows}


def _already_trained(model_dir: Path, area: Path, fingerprint: str,
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
    saved = _load_checkpoint(checkpoint)
    if saved["state"]["fingerprint"] != fingerprint:
        log.warning("ignoring %s: it belongs to another configuration", checkpoint)
        return TrainingState(fingerprint)
    check_finite_weights(saved["model"], checkpoint)
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    state = TrainingState(fingerprint, saved["state"]["step"], saved["state"]["run_id"],
                          saved["state"]["log_rows"])
    log.info("resuming %s from step %d", model_dir, state.step)
    return state


def _load_checkpoint(checkpoint: Path) -> dict:
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


def _save_checkpoint(run: RunConfig, area: Path, model, optimizer, scheduler,
                     state: TrainingState) -> None:
    """Write to ``.tmp-checkpoint-N``, flush it to disk, rename: all or nothing is visible.

    A checkpoint is a model directory of its own (``save_pretrained`` + tokenizer: any
    intermediate model loads with ``AutoModelForMaskedLM.from_pretrained``) plus ``state.pt``
    with the weights, optimizer, scheduler and :class:`TrainingState` for an exact resume,
    and ``state.sha256`` to recognise a damaged ``state.pt``.
    """
    final = checkpoint_dir(area, state.step)
    tmp = partial_checkpoint_dir(area, state.step)
    shutil.rmtree(tmp, ignore_errors=True)
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
    replace_dir(tmp, final)
    remove_checkpoints(area, keep=final)


def _save_final(run: RunConfig, model: BertForMaskedLM, model_dir: Path, area: Path,
                state: TrainingState, plan: Plan, data: TrainingData, world_size: int) -> None:
    """The finished model, written whole beside ``model_dir`` and renamed over it.

    The staging folder gets the weights, tokenizer, train log and last ``multilab.json``
    (with the weights' SHA-256); one rename then replaces the previous model. A kill before
    it leaves the previous model, labelled as before, and the checkpoints to resume from.
    """
    check_finite_weights(model.state_dict(), model_dir)
    staging = staging_dir(model_dir)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    model.save_pretrained(str(staging))
    load_tokenizer(run.study.paths.vocab, layout(run.study).saved).save_pretrained(str(staging))
    write_text(staging / TRAIN_LOG, _train_log_csv(state.log_rows))
    write_done(staging, _done_record(run, state, plan, data, world_size)
               | {WEIGHTS_HASH: file_sha256(staging / WEIGHTS)})
    replace_dir(staging, model_dir)
    # only now: a kill before this line resumes from the last checkpoint, not from step 0
    remove_checkpoints(area)
    with contextlib.suppress(OSError):  # the empty folder of this configuration
        area.rmdir()
    if state.run_id:
        tracking.log_artifact(model_dir / TRAIN_LOG)


def _train_log_csv(rows: list[dict[str, float]]) -> str:
    lines = [",".join(LOG_COLUMNS)] + [
        ",".join(f"{row[column]:.6g}" for column in LOG_COLUMNS) for row in rows
    ]
    return "\n".join(lines) + "\n"


def _done_record(run: RunConfig, state: TrainingState, plan: Plan, data: TrainingData,
                 world_size: int) -> dict[str, Any]:
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
    }


# --------------------------------------------------------------------------- tracking


def _run_tags(run: RunConfig, data_hash: str, fingerprint: str) -> dict[str, Any]:
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
        **tracking.source_tags(),
        # bookkeeping: bit-identical runs need the same thread count; the owner process
        tracking.SYS + "threads": torch.get_num_threads(),
        **tracking.process_tags(),
    }


@contextlib.contextmanager
def _tracked_run(tracked: bool, experiment_id: str | None, run_id: str | None,
                 tags: dict[str, Any], run: RunConfig) -> Iterator[str | None]:
    """The MLflow run's id on the main process (resumed when ``run_id`` is given); None on
    other processes or without tracking."""
    if not tracked:
        yield None
        return
    if run_id is None:  # a new run: nested under its modification's parent run
        parent = tracking.group_run(experiment_id, run.modification,
                                    {"paper_id": run.paper_id or "", "profile": run.study.profile})
        tags = {**tags, **tracking.parent_tags(parent)}
    with tracking.run(experiment_id, run_id=run_id, tags=tags,
                      name=f"{run.modification} s{run.seed}") as opened:
        yield opened  # the resumed run, or a new one


def _log_start(run: RunConfig, data: TrainingData, plan: Plan, world_size: int) -> None:
    """Parameters, the run's sizes, and the corpora as MLflow datasets with their hashes."""
    tracking.log_params(run.as_params())
    tracking.log_metrics({"train_examples": len(data.examples),
                          "truncated_sentences": data.truncated,
                          "total_steps": plan.total_steps, "world_size": world_size})
    corpora = run.study.paths.corpora
    files = {"train": (corpora / "train.txt", "training"), "dev": (corpora / "dev.txt", "eval")}
    files = {name: spec for name, spec in files.items() if spec[0].exists()}
    tracking.log_datasets(files, {name: tracking.file_digest(path)
                                  for name, (path, _) in files.items()})


def _log_curve_point(curve_hook: CurveHook, objective, model: BertForMaskedLM, step: int,
                     run_id: str | None) -> None:
    """The curve metrics under their own names (``curve/mu``, …): they are measured on
    ``curve_sentences`` dev sentences, the final evaluation on ``dev_sentences``."""
    objective.eval()
    metrics = curve_hook(step, model)
    objective.train()
    if run_id:
        tracking.log_metrics({curve_key(key): value for key, value in metrics.items()},
                             step=step)


def _progress_bar(run: RunConfig, plan: Plan, start: int, show: bool) -> tqdm:
    return progress_bar(total=plan.total_steps, initial=start, disable=not show,
                        desc=f"{run.modification} s{run.seed}", unit="step")


def _logged_through(run: RunConfig, run_id: str) -> int:
    """The last step a resumed run already sent to MLflow: the steps between the checkpoint
    and the kill are trained again, and sending them again would double their points."""
    history = tracking.metric_history(run.study.paths, run_id, TRAIN_LOSS)
    return max((step for step, _ in history), default=0)


class _StepLog:
    """Every step's row goes to MLflow, in batches (one request per ``log_every`` steps, at
    checkpoints and at the end), and the progress bar shows their mean loss. Steps up to
    ``logged_through`` (sent before a kill, trained again after the resume) are not re-sent."""

    def __init__(self, run_id: str | None, bar: tqdm, logged_through: int = 0) -> None:
        self.run_id, self.bar, self.logged_through = run_id, bar, logged_through
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
            tracking.log_step_rows(self.run_id, fresh, STEP_METRICS)
        self.pending = []

    def say(self, message: str | None) -> None:
        """Show what the run does while no step advances (None: back to the run's name)."""
        self.bar.set_description_str(message or self.name, refresh=True)

    def close(self) -> None:
        self.bar.close()
