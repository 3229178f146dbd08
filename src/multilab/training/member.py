"""The one trainer contract: what a model trains on, decided once from its run, and the batch
and masks of each of its steps, which both trainers take from here.

:meth:`Member.of` turns a resolved run into its examples (the corpus and input recipe
fields, :mod:`~multilab.training.training_data`), its knn table, its plan (how many steps:
``trained``, ``epoch_factor``) and its masking (``mask_prob``, ``replacement``;
``random_in_language`` and knn through :func:`~multilab.data.batches.mask_tokens`).
:func:`step_batch` is a step's global batch, its gradient pieces and its masks. The
single-model trainer (training/train.py) runs a member alone with these; the stacked trainer
(training/stacked.py) runs several, building the same integers vectorised
(``StackBatcher``, checked against :func:`step_batch` by tests/test_stacked.py). So a
``Recipe`` field that changes data, inputs or masking is honoured here, once, for both
(tests/test_trainer_contract.py trains a modification both ways).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from multilab.config import ModelConfig, RunConfig, TrainConfig
from multilab.data.batches import (
    BatchOrder,
    Examples,
    MaskedBatch,
    gradient_pieces,
    mask_tokens,
    seeded_generator,
)
from multilab.data.inputs import Batch, InputEncoder
from multilab.training.training_data import TrainingData, load_knn_table, prepare_data


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


@dataclass
class Member:
    """One model and all that is its own: seed, examples, masks, schedule (alone, or one
    member of a stack)."""

    seed: int
    examples: Examples
    encoder: InputEncoder
    lr: float
    total_steps: int
    mask_prob: float
    replacement: tuple[float, ...]
    knn_table: torch.Tensor | None = None
    name: str = ""
    plan: Plan | None = None  # Member.of's; a synthetic member (tests) has none

    def __post_init__(self) -> None:
        self._order: BatchOrder | None = None

    def order(self, global_batch: int, bucket_chunk: int) -> BatchOrder:
        """The member's batch order for this global batch and bucket chunk (built once)."""
        order = self._order
        if order is None or (order.batch_size, order.chunk_batches) != (global_batch,
                                                                         bucket_chunk):
            order = self._order = BatchOrder(self.examples.lengths, global_batch, self.seed,
                                             bucket_chunk)
        return order

    @classmethod
    def of(cls, run: RunConfig, data: TrainingData | None = None,
           encoder: InputEncoder | None = None) -> Member:
        """The member of a resolved run: its examples (built here unless ``data`` and
        ``encoder`` are given), knn table, plan and masking."""
        if data is None or encoder is None:
            data, encoder = prepare_data(run)
        # the plan's epoch is the batch order's: one count of an epoch's steps, not two
        order = BatchOrder(data.examples.lengths, run.model.global_batch, run.seed,
                           run.study.train.bucket_chunk)
        plan = Plan.of(run, order.steps_per_epoch)
        member = cls(run.seed, data.examples, encoder, run.model.lr, plan.total_steps,
                     run.study.train.mask_prob, run.recipe.replacement, load_knn_table(run),
                     f"{run.modification} s{run.seed}", plan)
        member._order = order  # the order step_batch draws from (Member.order keeps it)
        return member


@dataclass
class StepBatch:
    """One step's global batch in the order it runs, this process's gradient pieces of it
    (row positions) and its masks."""

    batch: Batch
    pieces: list[torch.Tensor]
    masked: MaskedBatch


def step_batch(member: Member, model: ModelConfig, train: TrainConfig, step: int,
               world: int = 1, rank: int = 0) -> StepBatch:
    """Optimizer step ``step``'s (0-based) batch of ``member``: its examples in its own
    order, cut into this process's pieces (:func:`~multilab.data.batches.gradient_pieces`),
    masked with its own draws (``seeded_generator(seed, step, 1)``)."""
    order = member.order(model.global_batch, train.bucket_chunk)
    indices, pieces = gradient_pieces(order(step), member.examples.lengths,
                                      train.length_pieces, model.grad_accum, world, rank)
    batch = member.examples.batch(indices)
    masked = mask_tokens(batch, member.encoder, member.mask_prob, member.replacement,
                         seeded_generator(member.seed, step, 1), member.knn_table)
    return StepBatch(batch, pieces, masked)
