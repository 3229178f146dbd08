"""One trainer contract (training/member.py): a modification's batches, masks and schedule
are decided in one place, so the single-model trainer and a stack of one train it alike.

The two paths differ in their arithmetic on purpose (the single-model step: ``BertForMaskedLM``
under Accelerate with torch's AdamW and dropout from the global generator; the stack: a
vmapped functional model, its own AdamW, counter dropout), so the comparison turns dropout
off: then both compute the same losses from the same weights, to float rounding, exactly
when they built the same batches and masks from the modification's recipe. The model is the
smoke profile's BERT-small cut to two layers, on synthetic sentences, for three steps.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from torch import nn

from multilab.config import RunConfig
from multilab.data.batches import training_examples
from multilab.data.inputs import InputEncoder
from multilab.resolve import resolve_run
from multilab.training import stacked, train
from multilab.training.member import Member
from multilab.training.model import build_model
from multilab.training.training_data import TrainingData
from tests.helpers import one_torch_thread, smoke_config

VOCAB = 60
STEPS = 3
#: masking (random replacements within the row's language) and positions (each language its
#: own): two recipe fields that reach the batches through different stages
MODIFICATION = "lang-random+lang-pos"


def _run(tmp_path: Path, modification: str) -> RunConfig:
    run = resolve_run(smoke_config(tmp_path), modification, 0)
    study = replace(run.study, train=replace(run.study.train, warmup_steps=2))
    return replace(run, model=replace(run.model, num_hidden_layers=2), study=study)


def _member(run: RunConfig) -> Member:
    """The run's member on a synthetic corpus: its recipe's inputs and masking."""
    encoder = InputEncoder(run.recipe, VOCAB, run.study.train.max_length)
    generator = torch.Generator().manual_seed(1000)
    lines = [torch.randint(5, VOCAB, (int(torch.randint(3, 24, (1,), generator=generator)),),
                           generator=generator) for _ in range(80)]
    return Member(run.seed, training_examples(lines, run.recipe, encoder), encoder,
                  run.model.lr, 6, run.study.train.mask_prob, run.recipe.replacement,
                  name=run.modification)


def _without_dropout(model: nn.Module) -> nn.Module:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    return model


def _single_path(run: RunConfig, model: nn.Module) -> list[dict[str, float]]:
    """``STEPS`` steps of the single-model trainer's own step (train.py)."""
    member = _member(run)
    optimizer, scheduler = train._optimizer_and_schedule(model, run, member.total_steps)
    step = train._Step(run, member, model, optimizer, scheduler,
                       Accelerator(gradient_accumulation_steps=1, cpu=True))
    return [step(number) for number in range(STEPS)]


def _stack_of_one(run: RunConfig, model: nn.Module) -> list[dict[str, float]]:
    """``STEPS`` steps of the stacked trainer with the run as its only member."""
    member = _member(run)
    trainer = stacked.StackedTrainer([member], stacked.settings_of(run, member.encoder),
                                     models=[model])
    return [trainer(number)[0] for number in range(STEPS)]


def _initial_model(run: RunConfig) -> nn.Module:
    return _without_dropout(build_model(run.model, 2 * VOCAB, run.seed, 2))


def test_a_modification_trains_alike_alone_and_as_a_stack_of_one(tmp_path: Path) -> None:
    run = _run(tmp_path, MODIFICATION)
    assert run.recipe.random_in_language and run.recipe.language_positions
    with one_torch_thread():
        model = _initial_model(run)
        alone = _single_path(run, copy.deepcopy(model))
        stack = _stack_of_one(run, copy.deepcopy(model))
        original = _single_path(_run(tmp_path, "original"), _initial_model(run))
    for step, (mine, theirs) in enumerate(zip(alone, stack, strict=True)):
        assert mine["step"] == theirs["step"] == step + 1
        assert mine["lr"] == pytest.approx(theirs["lr"], rel=1e-12)
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=1e-5), f"step {step + 1}"
    # the modification reached the batches: the original recipe trains otherwise
    assert abs(original[0]["loss"] - alone[0]["loss"]) > 1e-3
    assert alone[-1]["loss"] != alone[0]["loss"]  # the steps trained


def test_a_member_s_plan_counts_an_epoch_as_its_batch_order_does(tmp_path: Path) -> None:
    """``Member.of`` counts an epoch's steps once, by the batch order the steps are drawn
    from: the plan's epoch and the order's cannot drift apart (they were two counts)."""
    run = _run(tmp_path, "original")
    synthetic = _member(run)
    member = Member.of(run, TrainingData(synthetic.examples, 0), synthetic.encoder)
    order = member.order(run.model.global_batch, run.study.train.bucket_chunk)
    assert order is member.order(run.model.global_batch, run.study.train.bucket_chunk)
    examples = len(synthetic.examples.lengths)
    assert member.plan is not None
    assert member.plan.steps_per_epoch == order.steps_per_epoch == \
        -(-examples // run.model.global_batch)
    assert member.total_steps == member.plan.total_steps == \
        max(1, round(run.epochs * order.steps_per_epoch))
