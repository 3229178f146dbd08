"""Stacked training (training/stacked.py): k members trained as one batched module equal the
same members trained one by one, step by step, with dropout on.

What is exact and what is not: the masks, the batches, the dropout bits and the learning
rates are the same integers and Python floats in both paths (the rates are asserted equal
exactly; the first three are drawn by the same code from the member's own seed). The floating
point results agree to float32 rounding, not bit for bit, because the stack runs other
kernels on other shapes: batched matrix products (``bmm`` over k members instead of one
``mm``) and pieces padded to the widest member's width block their reductions differently
(the padded keys add exact zeros to the attention sums, but change the summation order),
per-member gradient norms reduce a row of a [k, n] tensor instead of a whole tensor, and
members whose learning rates differ update with ``value * t1 / t2`` spelled out instead of
``addcdiv``. So losses and weights are compared within 1e-5 at every step (measured: about
1e-7 after four steps). The test found one real difference, vmap's embedding backward
ignoring ``padding_idx`` beyond member 0 (stacked.PaddingSafeEmbedding).

The model is the smoke profile's BERT-small (hidden 64, one head, its batch and pieces) cut to
two layers, on synthetic sentences: seconds, not the corpus build.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from multilab.config import RunConfig
from multilab.data.batches import training_examples
from multilab.data.inputs import InputEncoder
from multilab.errors import UserError
from multilab.resolve import resolve_run
from multilab.training import stacked
from multilab.training.model import MaskedLMObjective
from tests.helpers import one_torch_thread, smoke_config

VOCAB = 60
STEPS = 4


@pytest.fixture
def smoke_run(tmp_path) -> RunConfig:
    return resolve_run(smoke_config(tmp_path), "original", 0)


def _member(run: RunConfig, seed: int, modification: str = "original", total_steps: int = 6,
            sentences: int = 80) -> stacked.Member:
    """A member on its own synthetic corpus (seeded by ``seed``): its own data and masks."""
    recipe = resolve_run(run.study, modification, seed).recipe
    encoder = InputEncoder(recipe, VOCAB, run.study.train.max_length)
    generator = torch.Generator().manual_seed(1000 + seed)
    lines = [torch.randint(5, VOCAB, (int(torch.randint(3, 24, (1,), generator=generator)),),
                           generator=generator) for _ in range(sentences)]
    examples = training_examples(lines, recipe, encoder)
    return stacked.Member(seed, examples, encoder, run.model.lr, total_steps,
                          run.study.train.mask_prob, recipe.replacement, name=modification)


def _settings(run: RunConfig, layers: int = 2) -> stacked.Settings:
    model = replace(run.model, num_hidden_layers=layers)
    # warm-up shorter than the run: the learning rates differ between members from step 1
    train = replace(run.study.train, warmup_steps=2)
    return stacked.Settings(model, 2 * VOCAB, 2, train)


def _specs() -> list[tuple[int, str, int]]:
    """Two seeds of the original and a masking-only row with a longer schedule (its own
    learning rates): (seed, modification, total steps)."""
    return [(0, "original", 6), (1, "original", 6), (7, "no-random", 9)]


def test_stack_equals_members_trained_one_by_one(smoke_run):
    run = smoke_run
    settings = _settings(run)
    specs = _specs()
    with one_torch_thread():
        stack = stacked.StackedTrainer([_member(run, *s) for s in specs], settings)
        alone = [stacked.SoloTrainer(_member(run, *s), settings) for s in specs]
        for step in range(STEPS):
            rows = stack(step)
            for index, solo in enumerate(alone):
                expected = solo(step)
                assert rows[index]["lr"] == expected["lr"]  # the same Python float
                assert rows[index]["loss"] == pytest.approx(expected["loss"], rel=1e-5)
                mine, theirs = stack.member_state(index), solo.state()
                assert mine.keys() <= theirs.keys()
                for name, weight in mine.items():
                    torch.testing.assert_close(weight, theirs[name], rtol=1e-5, atol=1e-5,
                                               msg=f"step {step}, member {index}, {name}")
    # dropout was on and the members' learning rates differed: not a vacuous comparison
    assert rows[0]["lr"] != rows[2]["lr"]
    assert stack.skeleton.model.bert.encoder.layer[0].output.dropout.p > 0


def test_a_member_does_not_depend_on_its_neighbours(smoke_run):
    """The same member stacked with different others ends with the same weights (to float
    rounding): its draws are its own."""
    run = smoke_run
    settings = _settings(run, layers=1)
    with one_torch_thread():
        first = stacked.StackedTrainer([_member(run, 0), _member(run, 1)], settings)
        second = stacked.StackedTrainer([_member(run, 2), _member(run, 0)], settings)
        for step in range(2):
            first(step)
            second(step)
    for name, weight in first.member_state(0).items():
        torch.testing.assert_close(weight, second.member_state(1)[name], rtol=1e-5, atol=1e-6)
    assert not torch.equal(first.member_state(0)["bert.embeddings.word_embeddings.weight"],
                           first.member_state(1)["bert.embeddings.word_embeddings.weight"])


@pytest.mark.parametrize(("length_pieces", "grad_accum", "attend"),
                         [(1, 1, False), (1, 1, True), (4, 2, True)])
def test_the_vectorised_batch_is_the_member_by_member_one(smoke_run, length_pieces,
                                                           grad_accum, attend):
    """``StackedTrainer.batch`` (all members at once, :class:`stacked.StackBatcher`) builds
    the same integers as the member-by-member path (``member_pieces`` + ``stack_pieces``,
    what ``SoloTrainer`` runs), key by key, over two epochs: members of every input and
    masking kind that stacks (attend-padding's attended padding, sep-emb's in-language
    random ids, knn's neighbours, shift-special's [MASK], lang-pos), corpora of other
    sizes (other epoch lengths, a last batch cut short, empty pieces)."""
    run = smoke_run
    model = replace(run.model, num_hidden_layers=1, grad_accum=grad_accum)
    train = replace(run.study.train, length_pieces=length_pieces)
    settings = stacked.Settings(model, 2 * VOCAB, 2, train)
    specs = [(0, "original", 80), (1, "original", 30), (2, "sep-emb", 80),
             (3, "knn-replace", 50), (4, "shift-special;lang-pos", 80), (5, "no-random", 3)]
    members = [_member(run, seed, mod, sentences=n) for seed, mod, n in specs]
    # attend-padding's inputs (its recipe refuses pieces at resolve time; the batch does not)
    members[1].examples.attend_padding = attend
    knn = members[3]
    knn.knn_table = torch.randint(0, 2 * VOCAB, (2 * VOCAB, 3),
                                  generator=torch.Generator().manual_seed(9))
    assert knn.replacement[3] > 0
    stack = stacked.StackedTrainer(members, settings)
    steps = 2 * max(m.order(model.global_batch, train.bucket_chunk).steps_per_epoch
                    for m in members)
    for step in range(steps):
        reference, reference_totals = stack.batch_member_by_member(step)
        reference_tokens = list(stack.tokens)
        pieces, totals = stack.batch(step)
        assert torch.equal(totals, reference_totals)
        assert stack.tokens == reference_tokens
        assert len(pieces) == len(reference)
        for piece, expected in zip(pieces, reference, strict=True):
            assert piece.keys() == expected.keys()
            for key, tensor in expected.items():
                assert piece[key].dtype == tensor.dtype, (step, key)
                assert torch.equal(piece[key], tensor), (step, key)


def test_a_prefetched_batch_trains_the_same_stack(smoke_run):
    """The next batch built in a worker thread (``prefetch``) is the batch of that step:
    the stack ends bit for bit where one without prefetch ends."""
    settings = _settings(smoke_run, layers=1)
    with one_torch_thread():
        stacks = [stacked.StackedTrainer([_member(smoke_run, 0), _member(smoke_run, 1)],
                                         settings) for _ in range(2)]
        for step in range(3):
            stacks[0](step)
            stacks[1](step, prefetch=True)
        stacks[1].close()
    for index in range(2):
        for name, weight in stacks[0].member_state(index).items():
            assert torch.equal(stacks[1].member_state(index)[name], weight), name


def test_counter_dropout_ignores_padding_and_keeps_one_minus_p():
    drop = stacked.CounterDropout(0.1, 0, padded=(1,)).train()
    words = torch.tensor(stacked.dropout_words(3, 5, 0, 1))
    with stacked.using_words(words):
        narrow = drop(torch.ones(4, 7, 16))
        wide = drop(torch.ones(6, 11, 16))
        other = stacked.CounterDropout(0.1, 0, padded=(1,)).train()(torch.ones(4, 7, 16))
    assert torch.equal(wide[:4, :7], narrow)  # padding rows and columns change nothing
    assert torch.equal(other, narrow)  # a function of (word, coordinates) only
    kept = float((wide > 0).float().mean())
    assert 0.85 < kept < 0.95
    assert torch.allclose(wide[wide > 0], torch.tensor(1 / 0.9))
    with stacked.using_words(torch.tensor(stacked.dropout_words(4, 5, 0, 1))):
        assert not torch.equal(drop(torch.ones(4, 7, 16)), narrow)  # another seed


def test_masked_lm_loss_is_berts(smoke_run):
    """Without dropout the stack's loss body (layer by layer, flat selected positions) is
    the trainer's ``MaskedLMObjective`` on the same model."""
    settings = _settings(smoke_run)
    member = _member(smoke_run, 0)
    pieces, _, _ = stacked.member_pieces(member, settings, 0)
    piece = next(p for p in pieces if p is not None)
    model = stacked.fresh_model(settings, 0).eval()
    rows, width = piece.inputs["input_ids"].shape
    selected = torch.zeros(rows * width, dtype=torch.bool)
    selected[piece.positions] = True
    reference = MaskedLMObjective(model, checkpoint_positions=None).eval()(
        selected.view(rows, width), piece.labels, **piece.inputs)
    stacked.install_counter_dropout(model)
    body = stacked.MaskedLMLoss(model).eval()(torch.zeros(1, dtype=torch.long),
                                                piece.inputs["input_ids"],
                                                piece.inputs["attention_mask"],
                                                piece.inputs["position_ids"],
                                                piece.inputs["token_type_ids"],
                                                piece.positions, piece.labels)
    torch.testing.assert_close(body, reference, rtol=1e-5, atol=1e-5)


def test_unstacked_member_is_a_plain_bert(smoke_run, tmp_path):
    from transformers import AutoModelForMaskedLM

    settings = _settings(smoke_run, layers=1)
    with one_torch_thread():
        stack = stacked.StackedTrainer([_member(smoke_run, 0), _member(smoke_run, 1)],
                                       settings)
        stack(0)
        stack(1)
    model = stack.unstack(1)
    assert type(model.bert.encoder.layer[0].output.dropout) is torch.nn.Dropout
    model.save_pretrained(tmp_path / "member")
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "member")
    for name, weight in stack.member_state(1).items():
        assert torch.equal(loaded.state_dict()[name], weight), name
def test_mixed_stacks_are_refused_in_one_line(smoke_run):
    cfg = smoke_run.study
    runs = [resolve_run(cfg, "original", 0), resolve_run(cfg, "overparam", 0)]
    with pytest.raises(UserError, match="overparam") as err:
        stacked.check_members(runs)
    assert "\n" not in str(err.value)
    stacked.check_members([resolve_run(cfg, "original", 0), resolve_run(cfg, "no-random", 1),
                           resolve_run(cfg, "lang-pos", 2)])
    with pytest.raises(UserError, match="stack >= 1"):
        stacked.check_members([])
