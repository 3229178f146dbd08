"""Mean of language, mean difference shift and unsupervised token translation (Liu et al.
2020b §4)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from nltk.translate.bleu_score import corpus_bleu
from transformers import BertConfig, BertForMaskedLM

from multilab.evaluation.mean_shift import (
    bleu1,
    convert_rate,
    id_set,
    language_means,
    mean_difference_shift,
    shifted,
    translate,
    translation_sweep,
)

VOCAB = 24  # ids 0-3 special, 4-13 "source language", 14-23 "target language"
SPECIALS = {0, 1, 2, 3}  # [PAD] [UNK] [CLS] [SEP]
LAYERS = 3


@pytest.fixture(scope="module")
def model() -> BertForMaskedLM:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=LAYERS,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=16)
    return BertForMaskedLM(config).eval()


def batch(rows: list[list[int]]) -> dict[str, torch.Tensor]:
    """[CLS] row [SEP], right-padded."""
    width = max(len(r) for r in rows) + 2
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row) + 2] = torch.tensor([2, *row, 3])
        mask[i, : len(row) + 2] = 1
    return {"input_ids": ids, "attention_mask": mask}


SOURCE = [batch([[4, 5, 6, 7], [8, 9]]), batch([[10, 11, 12]])]
TARGET = [batch([[14, 15, 16, 17], [18, 19]]), batch([[20, 21, 22]])]


@torch.no_grad()
def hidden_states(model, inputs):
    return model.bert(**inputs, output_hidden_states=True).hidden_states


@pytest.mark.parametrize("layer", [0, 1, LAYERS])
def test_shift_adds_exactly_alpha_d_at_the_chosen_layer(model, layer):
    inputs = SOURCE[0]
    shift = 2.5 * torch.linspace(-1, 1, 16)
    before = hidden_states(model, inputs)
    with shifted(model, layer, shift):
        during = hidden_states(model, inputs)
    after = hidden_states(model, inputs)
    for lower in range(layer):
        assert torch.equal(during[lower], before[lower])
    assert torch.allclose(during[layer] - before[layer], shift.expand_as(before[layer]),
                          atol=1e-5)
    for higher in range(layer + 1, LAYERS + 1):
        assert not torch.allclose(during[higher], before[higher], atol=1e-3)
    for b, a in zip(before, after, strict=True):  # the hook is gone
        assert torch.equal(a, b)


def test_shift_rejects_bad_layers_and_shapes(model):
    with pytest.raises(ValueError, match="valid: 0"), shifted(model, LAYERS + 1, torch.zeros(16)):
        pass
    with pytest.raises(ValueError, match="one vector of size 16"), shifted(
        model, 1, torch.zeros(2, 16)
    ):
        pass


def test_language_means_average_real_tokens_only(model):
    means = language_means(model, SOURCE, SPECIALS)
    assert means.shape == (LAYERS + 1, 16)
    # by hand: every real token of each sentence, run alone (no padding at all)
    rows = [[4, 5, 6, 7], [8, 9], [10, 11, 12]]
    tokens_by_layer: list[list[torch.Tensor]] = [[] for _ in range(LAYERS + 1)]
    for row in rows:
        for layer, hidden in enumerate(hidden_states(model, batch([row]))):
            tokens_by_layer[layer].append(hidden[0, 1:-1])  # drop [CLS] and [SEP]
    expected = torch.stack([torch.cat(tokens).mean(dim=0) for tokens in tokens_by_layer])
    assert torch.allclose(means, expected, atol=1e-5)


def test_language_means_read_the_inputs_positions(model):
    """lang-pos gives a language its own positions: the means must be taken with them."""
    moved = [dict(b, position_ids=torch.arange(b["input_ids"].shape[1]).expand_as(
        b["input_ids"]) + 8) for b in SOURCE]
    assert not torch.allclose(language_means(model, moved, SPECIALS),
                              language_means(model, SOURCE, SPECIALS))
    row = moved[1]
    expected = hidden_states(model, row)[LAYERS][0, 1:-1].mean(dim=0)
    assert torch.allclose(language_means(model, [row], SPECIALS)[LAYERS], expected, atol=1e-5)


def test_mean_difference_shift_is_target_minus_source(model):
    source = language_means(model, SOURCE, SPECIALS)
    target = language_means(model, TARGET, SPECIALS)
    assert torch.equal(mean_difference_shift(source, target), target - source)
    with pytest.raises(ValueError, match="different shapes"):
        mean_difference_shift(source, target[1:])


def test_translate_is_the_argmax_at_real_positions(model):
    outputs = translate(model, SOURCE[0], LAYERS, torch.zeros(16), SPECIALS)
    assert [len(o) for o in outputs] == [4, 2]
    with torch.no_grad():
        plain = model(**SOURCE[0]).logits.argmax(dim=-1)
    assert outputs[0] == plain[0, 1:5].tolist() and outputs[1] == plain[1, 1:3].tolist()


def test_a_shift_at_the_last_layer_feeds_the_mlm_head(model):
    shift = torch.linspace(-3, 3, 16)
    outputs = translate(model, SOURCE[0], LAYERS, shift, SPECIALS)
    with torch.no_grad():
        by_hand = model.cls(model.bert(**SOURCE[0]).last_hidden_state + shift).argmax(dim=-1)
    assert outputs == [by_hand[0, 1:5].tolist(), by_hand[1, 1:3].tolist()]
    assert outputs != translate(model, SOURCE[0], LAYERS, torch.zeros(16), SPECIALS)


def test_translation_sweep_runs_end_to_end(model):
    d = mean_difference_shift(language_means(model, SOURCE, SPECIALS),
                              language_means(model, TARGET, SPECIALS))
    references = [[14, 15, 16, 17], [18, 19], [20, 21, 22]]
    sweep = translation_sweep(model, SOURCE, references, d, id_set(range(14, 24)), SPECIALS,
                              is_shared=id_set(SPECIALS))
    assert sweep.alphas == (1.0, 2.0, 3.0) and sweep.layers == (1, 2, 3)
    for grid in (sweep.convert_rate, sweep.bleu1):
        assert grid.shape == (3, LAYERS)
        assert np.all((grid >= 0) & (grid <= 1))
    # each cell is what translate + the metrics give for that α and layer
    outputs = [s for b in SOURCE for s in translate(model, b, 2, 3.0 * d[2], SPECIALS)]
    assert sweep.bleu1[2, 1] == bleu1(outputs, references)


def test_convert_rate_by_hand():
    outputs = [[14, 5, 1], [20, 2, 30]]  # target 14, 20; source 5; shared 1, 2; other 30
    rate = convert_rate(outputs, id_set(range(14, 24)), id_set({1, 2}))
    assert rate == pytest.approx(2 / 4)  # 2 target among 14, 5, 20, 30
    assert convert_rate(outputs, id_set(range(14, 24))) == pytest.approx(2 / 6)
    assert math.isnan(convert_rate([[1, 2]], id_set({14}), id_set({1, 2})))


def test_bleu1_by_hand_is_corpus_level():
    hypotheses = [["a", "a", "a"], ["x", "y"]]
    references = [["a", "b", "c"], ["x", "y", "z", "w"]]
    # clipped unigram matches 1 + 2 over 5 hypothesis tokens; brevity penalty exp(1 − 7/5)
    assert bleu1(hypotheses, references) == pytest.approx(3 / 5 * math.exp(1 - 7 / 5))
    assert bleu1([["a", "b"]], [["a", "b"]]) == pytest.approx(1.0)
    with warnings.catch_warnings():  # NLTK warns about the zero-weight 2- to 4-grams
        warnings.simplefilter("ignore")
        four_weights = corpus_bleu([[r] for r in references], hypotheses, weights=(1, 0, 0, 0))
    assert bleu1(hypotheses, references) == pytest.approx(four_weights)
    with pytest.raises(ValueError, match="references"):
        bleu1(hypotheses, references[:1])
