"""The vectorised metrics equal their per-sentence definitions on constructed embeddings."""

from __future__ import annotations

import math

import pytest
import torch

from multilab.evaluation import metrics, reference


def _pairs(generator: torch.Generator, n: int, dim: int = 8, noise: float = 0.1):
    """Random sentences (lengths 3–10) and noisy copies: mostly aligned, not trivially."""
    lengths = torch.randint(3, 11, (n,), generator=generator)
    width = int(lengths.max())
    english = torch.randn(n, width, dim, generator=generator)
    fake = english + noise * torch.randn(n, width, dim, generator=generator)
    return english, fake, lengths


def test_identical_sentences_align_perfectly() -> None:
    english, _, lengths = _pairs(torch.Generator().manual_seed(0), 20)
    gold = torch.arange(english.shape[1]).expand(20, -1)
    counts = metrics.alignment_counts(english, english.clone(), lengths, gold)
    assert counts == (int(lengths.sum()),) * 3
    score = metrics.alignment_score(counts)
    assert (score.precision, score.recall, score.f1) == (1.0, 1.0, 1.0)


def test_batched_alignment_equals_the_per_sentence_loop() -> None:
    generator = torch.Generator().manual_seed(1)
    english, fake, lengths = _pairs(generator, 30, noise=1.5)
    width = english.shape[1]
    gold = torch.arange(width).expand(30, -1)
    fast = metrics.alignment_counts(english, fake, lengths, gold)
    slow = reference.reference_alignment_counts(
        [english[b, : lengths[b]] for b in range(30)],
        [fake[b, : lengths[b]] for b in range(30)],
        [list(range(int(n))) for n in lengths],
    )
    assert fast == slow
    assert 0 < fast[2] < fast[1]  # the noise makes some alignments wrong: a real check


def test_reversed_gold_scores_reversed_sentences() -> None:
    generator = torch.Generator().manual_seed(2)
    english, _, lengths = _pairs(generator, 10)
    fake = torch.zeros_like(english)
    gold = torch.zeros(10, english.shape[1], dtype=torch.long)
    for b, n in enumerate(lengths.tolist()):
        fake[b, :n] = english[b, :n].flip(0)
        gold[b, :n] = torch.arange(n - 1, -1, -1)
    score = metrics.alignment_score(metrics.alignment_counts(english, fake, lengths, gold))
    assert score.f1 == 1.0


def test_alignment_score_pools_counts_not_sentences() -> None:
    score = metrics.alignment_score([(10, 10, 5), (2, 4, 2)])
    assert score.precision == pytest.approx(7 / 12)
    assert score.recall == pytest.approx(7 / 14)
    assert score.f1 == pytest.approx(2 * (7 / 12) * (7 / 14) / (7 / 12 + 7 / 14))
    assert metrics.alignment_score((0, 5, 0)).f1 == 0.0


def test_retrieval_equals_the_per_query_loop_and_blocks_do_not_matter() -> None:
    generator = torch.Generator().manual_seed(3)
    english = torch.randn(300, 16, generator=generator)
    fake = english + 1.2 * torch.randn(300, 16, generator=generator)
    whole = metrics.retrieval_score(english, fake)
    blocked = metrics.retrieval_score(english, fake, block_size=7)
    assert whole == blocked
    assert whole.p1 == pytest.approx(reference.reference_retrieval_p1(english, fake))
    assert 0.05 < whole.p1 < 0.95 and whole.p1 <= whole.p5 <= whole.p10
    assert whole.p1 == pytest.approx((whole.p1_forward + whole.p1_backward) / 2)


def test_retrieval_is_one_for_identical_and_near_chance_for_random() -> None:
    generator = torch.Generator().manual_seed(4)
    english = torch.randn(500, 32, generator=generator)
    assert metrics.retrieval_score(english, 3 * english).p1 == 1.0  # cosine: scale-free
    unrelated = metrics.retrieval_score(english, torch.randn(500, 32, generator=generator))
    assert unrelated.p1 < 0.02 and unrelated.p10 < 0.06


def test_retrieval_rejects_unequal_sets() -> None:
    with pytest.raises(ValueError, match="equal shapes"):
        metrics.retrieval_score(torch.zeros(3, 4), torch.zeros(2, 4))


def test_mean_pool_ignores_special_and_padding_positions() -> None:
    hidden = torch.arange(12, dtype=torch.float).reshape(1, 4, 3).repeat(2, 1, 1)
    word_mask = torch.tensor([[False, True, True, False], [False, True, False, False]])
    pooled = metrics.mean_pool(hidden, word_mask)
    assert torch.equal(pooled[0], (hidden[0, 1] + hidden[0, 2]) / 2)
    assert torch.equal(pooled[1], hidden[1, 1])


def test_mu_and_perplexity() -> None:
    assert metrics.multilinguality_score(0.2, 0.4, 0.6, 0.8) == pytest.approx(0.5)
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]))
    nll, n = metrics.masked_nll(logits, torch.tensor([0, 1]))
    assert n == 2 and nll == pytest.approx(-math.log(0.5) - math.log(0.8), 1e-6)
    assert metrics.perplexity(nll, n) == pytest.approx(1 / math.sqrt(0.5 * 0.8), 1e-6)
    uniform = torch.zeros(4, 4096)
    assert metrics.perplexity(*metrics.masked_nll(uniform, torch.arange(4))) == pytest.approx(4096)
    assert math.isnan(metrics.perplexity(0.0, 0))


def test_known_permutation_gives_the_exact_precision_and_recall() -> None:
    """Fake = English with words 0↔1 swapped and word 4 a copy of word 3, gold = identity.

    Words 0 and 1 align mutually but to the wrong twin (2 wrong predictions); Fake 4 prefers
    English 3, so English 4's best match (Fake 4) is not mutual; words 2, 3, 5 are right.
    """
    basis = torch.eye(6)
    english = basis[None].clone()
    fake = basis[[1, 0, 2, 3, 3, 5]][None].clone()
    fake[0, 4] += 0.01 * basis[4]  # Fake 4 is English 3 (best) with a trace of English 4
    lengths = torch.tensor([6])
    gold = torch.arange(6)[None]
    predicted, n_gold, correct = metrics.alignment_counts(english, fake, lengths, gold)
    slow = reference.reference_alignment_counts([english[0]], [fake[0]], [list(range(6))])
    assert (predicted, n_gold, correct) == slow
    # mutual pairs: 0–1, 1–0, 2–2, 3–3, 5–5; three of them are gold
    assert (predicted, n_gold, correct) == (5, 6, 3)
    score = metrics.alignment_score((predicted, n_gold, correct))
    assert score.precision == pytest.approx(3 / 5) and score.recall == pytest.approx(3 / 6)


def test_retrieval_directions_agree_for_symmetric_similarities() -> None:
    """With one-to-one matches (a permutation + scaling), both directions score the same."""
    generator = torch.Generator().manual_seed(5)
    english = torch.randn(200, 24, generator=generator)
    fake = english.clone()
    fake[:50] = english[torch.randperm(50, generator=generator)]  # 50 rows shuffled among
    score = metrics.retrieval_score(english, 2 * fake)
    assert score.p1_forward == score.p1_backward
    assert score.p1 == pytest.approx(score.p1_forward)


def test_position_diagonal_reads_figures_5_and_8() -> None:
    """Shared structure (Fake-English position p a noisy copy of English p) gives a diagonal,
    the same copies in reversed order (inverted Fake-English) none, and noise from position
    90 on lowers the rare positions' similarity below the frequent ones'."""
    generator = torch.Generator().manual_seed(0)
    length = 128
    english = torch.randn(length, 16, generator=generator)
    copy = english + 0.3 * torch.randn(length, 16, generator=generator)
    copy[metrics.RARE_POSITION:] = torch.randn(length - metrics.RARE_POSITION, 16,
                                               generator=generator)
    shared = metrics.position_diagonal(torch.cat([english, copy]), length)
    assert shared["position.diagonal"] > 0.5
    assert shared["position.diagonal"] == pytest.approx(
        shared["position.cos.same"] - shared["position.cos.other"])
    assert shared["position.cos.same.frequent"] > 0.9 > 0.2 > shared["position.cos.same.rare"]
    inverted = metrics.position_diagonal(torch.cat([english, copy.flip(0)]), length)
    assert abs(inverted["position.diagonal"]) < 0.1
    short = metrics.position_diagonal(torch.cat([english[:64], copy[:64]]), 64)
    assert "position.cos.same.rare" not in short and "position.diagonal" in short
    with pytest.raises(ValueError, match="lang-pos needs 256"):
        metrics.position_diagonal(english, length)
