"""The fast paths of docs/PERFORMANCE.md compute what the simple paths compute.

Already covered elsewhere: selected-positions head = full head on one batch
(test_train.py::test_fast_loss_equals_the_full_head_loss) and batched alignment/retrieval =
one sentence at a time (test_evaluate.py::test_batched_metrics_equal_one_sentence_at_a_time).
Here: batch composition (bucketed vs a wide random batch), attention kernel, recomputed
activations of wide batches, and batched perplexity.
"""

from __future__ import annotations

import pytest
import torch

from multilab.config import Config
from multilab.data.batches import (
    bucketed_batches,
    gradient_pieces,
    mask_tokens,
    seeded_generator,
    tokenize_lines,
    training_examples,
)
from multilab.data.corpus import read_lines
from multilab.data.inputs import InputEncoder
from multilab.data.vocab import load_tokenizer
from multilab.evaluation import metrics
from multilab.evaluation.evaluate import PERPLEXITY_REPLACEMENT, perplexity, sentence_batches
from multilab.resolve import resolve_run
from multilab.training.model import MaskedLMObjective, build_model
from multilab.training.train import _accumulate
from multilab.training.training_data import prepare_data
from tests.helpers import CpuAccelerator


def _short_and_long(project: Config):
    """Rows of 24 short examples and of the single longest one, and the encoder."""
    run = resolve_run(project, "original", 0)
    data, encoder = prepare_data(run)
    order = torch.argsort(data.examples.lengths, stable=True)
    return run, data.examples, encoder, order[:24], order[-1:]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_loss_is_independent_of_padding_head_and_attention_kernel(
    project: Config, attention: str
) -> None:
    """Short sentences in their own bucket + selected head = the same sentences padded to the
    longest one of a random batch + full head (the HF recipe), whichever attention kernel."""
    run, examples, encoder, short, long = _short_and_long(project)
    model = build_model(run.model, 4096, 0).eval()
    model.set_attn_implementation(attention)
    wide = mask_tokens(
        examples.batch(torch.cat([short, long])), encoder, 0.15, run.recipe.replacement,
        seeded_generator(0),
    )
    rows = len(short)
    is_short_row = wide.selected.nonzero()[:, 0] < rows
    full_labels = torch.full_like(wide.inputs["input_ids"], -100)
    full_labels[wide.selected] = torch.where(is_short_row, wide.labels, -100)
    with torch.no_grad():
        padded_full = model(**wide.inputs, labels=full_labels).loss

        width = int(examples.lengths[short].max())
        assert width < wide.inputs["input_ids"].shape[1]  # really less padding
        bucket = {k: v[:rows, :width] for k, v in wide.inputs.items()}
        selected = wide.selected[:rows, :width]
        labels = wide.labels[is_short_row]
        bucketed_fast = MaskedLMObjective(model)(selected, labels, **bucket) / len(labels)
    assert torch.allclose(bucketed_fast, padded_full, atol=1e-5)


def _counting(function, calls: list[int]):
    def wrapped(*args, **kwargs):
        calls.append(1)
        return function(*args, **kwargs)

    return wrapped


def test_recomputed_wide_batches_give_identical_gradients(project: Config) -> None:
    """Activation recompute (checkpointing) changes memory, not one bit of the gradients."""
    run, examples, encoder, short, long = _short_and_long(project)
    masked = mask_tokens(
        examples.batch(torch.cat([short, long])), encoder, 0.15, run.recipe.replacement,
        seeded_generator(1),
    )
    grads, recomputed = [], []
    for limit in (None, 1):  # never / always recompute
        model = build_model(run.model, 4096, 0).train()
        objective = MaskedLMObjective(model, checkpoint_positions=limit)
        calls: list[int] = []
        for layer in objective._layers:
            layer._gradient_checkpointing_func = _counting(layer._gradient_checkpointing_func,
                                                           calls)
        torch.manual_seed(7)  # the same dropout masks
        objective(masked.selected, masked.labels, **masked.inputs).backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
        recomputed.append(len(calls))
        assert not any(layer.gradient_checkpointing for layer in objective._layers)
    assert recomputed == [0, run.model.num_hidden_layers]
    assert all(torch.equal(grads[0][name], grads[1][name]) for name in grads[0])


@pytest.mark.parametrize(("accum", "length_pieces"), [(1, 4), (2, 3)])
def test_length_sorted_pieces_give_the_random_batch_gradient(
    project: Config, accum: int, length_pieces: int
) -> None:
    """A random batch sorted by length and run in pieces cut at the least padding, each
    only as wide as its longest row: the loss and gradient of the whole batch at once."""
    run = resolve_run(project, "original", 0)
    data, encoder = prepare_data(run)
    random_batch = bucketed_batches(data.examples.lengths, 48, 0, 0, chunk_batches=1)[0]
    indices, pieces = gradient_pieces(random_batch, data.examples.lengths, length_pieces, accum)
    masked = mask_tokens(data.examples.batch(indices), encoder, 0.15, run.recipe.replacement,
                         seeded_generator(2))
    assert len(pieces) == accum * length_pieces
    assert sorted(torch.cat(pieces).tolist()) == list(range(len(indices)))
    widths = [int(masked.inputs["attention_mask"][p].sum(1).max()) for p in pieces]
    assert sum(widths[:-1]) < (len(pieces) - 1) * widths[-1]  # less padding than one batch

    results = []
    for split in (False, True):
        model = build_model(run.model, 2 * encoder.vocab_size, 0).eval()  # no dropout
        objective = MaskedLMObjective(model)
        total = len(masked.labels)
        if split:
            loss = _accumulate(objective, CpuAccelerator(), masked, pieces, 1, total)
        else:
            whole = objective(masked.selected, masked.labels, **masked.inputs) / total
            whole.backward()
            loss = float(whole.detach())
        results.append((loss, {n: p.grad.clone() for n, p in model.named_parameters()}))
    (whole_loss, whole_grads), (split_loss, split_grads) = results
    assert split_loss == pytest.approx(whole_loss, rel=1e-6)  # float32 sums in another order
    worst = max(float((split_grads[n] - whole_grads[n]).abs().max()) for n in whole_grads)
    scale = max(float(g.abs().max()) for g in whole_grads.values())
    assert worst <= 1e-5 * scale, f"largest gradient difference {worst:.2e} (scale {scale:.2e})"


def test_batched_perplexity_equals_one_example_at_a_time(project: Config) -> None:
    """Length-sorted batches + selected head = each example alone + full-vocabulary logits."""
    run = resolve_run(project, "original", 0)
    tokenizer = load_tokenizer(project.paths.vocab)
    encoder = InputEncoder(run.recipe, len(tokenizer), project.train.max_length)
    lines = read_lines(project.paths.corpora / "dev.txt")[:24]
    sentences, _ = tokenize_lines(lines, tokenizer, encoder)
    model = build_model(run.model, 4096, 0).eval()
    fast = perplexity(model, encoder, sentences, run.recipe, 0.15, 3, batch_size=8)

    examples = training_examples(sentences, run.recipe, encoder)
    total, count = 0.0, 0
    with torch.no_grad():
        for number, rows in enumerate(sentence_batches(examples.lengths, 8)):
            batch = examples.batch(rows)
            masked = mask_tokens(batch, encoder, 0.15, PERPLEXITY_REPLACEMENT,
                                 seeded_generator(3, number))  # the same masks as the fast path
            for row in range(len(rows)):
                n = int(batch.attention_mask[row].sum())
                alone = {k: v[row : row + 1, :n] for k, v in masked.inputs.items()}
                chosen = masked.selected[row, :n]
                logits = model(**alone).logits[0, chosen]
                nll, k = metrics.masked_nll(logits, batch.input_ids[row, :n][chosen])
                total, count = total + nll, count + k
    assert count > 0
    assert fast == pytest.approx(metrics.perplexity(total, count), rel=1e-4)
