"""Word order (Dufter & Schütze 2020 App. B.2): wordpieces, SimAlign Match, Kendall tau,
correlations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from multilab.evaluation.wordorder import (
    correlate,
    correlations,
    cosine_similarities,
    kendall_tau,
    match_alignment,
    mean_tau,
    merge_wordpieces,
    verse_taus,
    word_ids_from_pieces,
)


def random_words(n: int, dim: int = 64, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim))


# --- wordpieces → words ------------------------------------------------------------------------


def test_word_ids_follow_continuation_pieces_and_skip_specials():
    # Dufter & Schütze 2020 App. A.2: "He ate wild honey ." → He ate wild hon ##e ##y .
    pieces = ["[CLS]", "He", "ate", "wild", "hon", "##e", "##y", ".", "[SEP]", "[PAD]"]
    assert word_ids_from_pieces(pieces) == [-1, 0, 1, 2, 3, 3, 3, 4, -1, -1]


def test_fake_english_pieces_get_the_same_word_ids():
    english = ["[CLS]", "He", "ate", "wild", "hon", "##e", "##y", ".", "[SEP]"]
    fake = ["[CLS]", "::He", "::ate", "::wild", "::hon", "::##e", "::##y", "::.", "[SEP]"]
    assert word_ids_from_pieces(fake) == word_ids_from_pieces(english)
    assert word_ids_from_pieces(["::[CLS]", "::a", "::##b"]) == [-1, 0, 0]


def test_unk_is_a_word_and_a_leading_continuation_starts_one():
    assert word_ids_from_pieces(["[UNK]", "##x", "a"]) == [0, 0, 1]
    assert word_ids_from_pieces(["##x", "##y", "[SEP]", "##z"]) == [0, 0, -1, 1]


def test_merge_averages_the_pieces_of_each_word():
    pieces = torch.tensor(
        [[9.0, 9.0],   # [CLS]: no word
         [1.0, 2.0],   # word 0
         [2.0, 0.0],   # word 1, piece 1
         [4.0, 6.0],   # word 1, piece 2
         [0.0, 3.0],   # word 1, piece 3
         [5.0, 5.0]]   # word 2
    )
    words = merge_wordpieces(pieces, [-1, 0, 1, 1, 1, 2])
    expected = torch.tensor([[1.0, 2.0], [2.0, 3.0], [5.0, 5.0]])
    torch.testing.assert_close(words, expected)


def test_merge_accepts_numpy_and_the_ids_of_a_token_list():
    tokens = ["[CLS]", "hon", "##e", "##y", "ate", "[SEP]"]
    vectors = np.arange(12, dtype=np.float32).reshape(6, 2)
    words = merge_wordpieces(vectors, word_ids_from_pieces(tokens))
    assert words.dtype == torch.float32
    torch.testing.assert_close(words, torch.tensor([[4.0, 5.0], [8.0, 9.0]]))


def test_merge_rejects_inconsistent_ids():
    vectors = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="3 rows"):
        merge_wordpieces(vectors, [0, 1])
    with pytest.raises(ValueError, match=r"no piece for word\(s\) \[1\]"):
        merge_wordpieces(vectors, [0, 2, 2])
    with pytest.raises(ValueError, match="-1"):
        merge_wordpieces(vectors, [0, -2, 1])


# --- SimAlign's Match ----------------------------------------------------------------------------


def test_match_hand_checked_example():
    # Source words are the unit vectors e0, e1, e2 and every target vector has length 1, so
    # cos(source i, target j) = target_j[i] and the similarity matrix S is (rows: source i):
    #          t0   t1   t2
    #   s0  [ 0.8  0.6  0.0 ]
    #   s1  [ 0.6  0.0  0.6 ]
    #   s2  [ 0.0  0.8  0.8 ]
    # The six one-to-one matchings (target of s0, s1, s2) and their summed cosines:
    #   (0,1,2) 0.8+0.0+0.8 = 1.6    (0,2,1) 0.8+0.6+0.8 = 2.2  <- maximum
    #   (1,0,2) 0.6+0.6+0.8 = 2.0    (1,2,0) 0.6+0.6+0.0 = 1.2
    #   (2,0,1) 0.0+0.6+0.8 = 1.4    (2,1,0) 0.0+0.0+0.0 = 0.0
    # (Note s2 alone would take t1 or t2 at 0.8 either way; only the global optimum settles
    # it.) Kendall: p = [0, 2, 1] has D = 1 discordant pair (s1, s2) of Z = 3:
    # K = 1 - sqrt(1/3) = 0.4226...; without the root 1 - 1/3 = 0.6667.
    source = np.eye(3)
    target = np.array([[0.8, 0.6, 0.0], [0.6, 0.0, 0.8], [0.0, 0.6, 0.8]])
    np.testing.assert_allclose(
        cosine_similarities(source, target),
        [[0.8, 0.6, 0.0], [0.6, 0.0, 0.6], [0.0, 0.8, 0.8]],
        atol=1e-12,
    )
    alignment = match_alignment(source, target)
    assert alignment.tolist() == [0, 2, 1]
    assert kendall_tau(alignment) == pytest.approx(1 - math.sqrt(1 / 3))
    assert kendall_tau(alignment, square_root=False) == pytest.approx(2 / 3)


def test_match_unequal_lengths_leaves_the_surplus_unaligned():
    # 3 source words (e0, e1, e2), 2 target words: S =
    #          t0   t1
    #   s0  [ 0.0  0.8 ]
    #   s1  [ 0.6  0.6 ]
    #   s2  [ 0.8  0.0 ]
    # Every maximum matching has 2 links; the best is s0-t1 + s2-t0 = 1.6 (any link of s1
    # gives at most 0.6 + 0.8 = 1.4), so s1 stays unaligned: [1, -1, 0].
    # Kendall: s1 takes its left neighbour's position → p = [1, 1, 0]; the pairs (s0, s2) and
    # (s1, s2) are inverted, the tie (s0, s1) is not: D = 2 of Z = 3.
    source = np.eye(3)
    target = np.array([[0.0, 0.6, 0.8], [0.8, 0.6, 0.0]])
    alignment = match_alignment(source, target)
    assert alignment.tolist() == [1, -1, 0]
    assert kendall_tau(alignment) == pytest.approx(1 - math.sqrt(2 / 3))
    # the other way round every source word is aligned and one target word is left out
    assert match_alignment(target, source).tolist() == [2, 0]


def test_match_is_a_partial_permutation_of_maximum_cardinality():
    for n, m, seed in [(12, 30, 1), (30, 12, 2), (25, 25, 3)]:
        alignment = match_alignment(random_words(n, seed=seed), random_words(m, seed=seed + 10))
        linked = alignment[alignment >= 0]
        assert len(alignment) == n
        assert len(linked) == min(n, m)
        assert len(set(linked.tolist())) == len(linked)
        assert linked.max() < m


def test_tie_break_changes_nothing_without_ties():
    for seed in range(100):
        rng = np.random.default_rng(seed)
        n, m = rng.integers(10, 41, size=2)
        source = rng.standard_normal((n, 64))
        target = rng.standard_normal((m, 64))
        assert np.array_equal(
            match_alignment(source, target), match_alignment(source, target, tie_break=0.0)
        )


def test_match_accepts_torch_tensors():
    source, target = random_words(15, seed=4), random_words(18, seed=5)
    assert np.array_equal(
        match_alignment(torch.from_numpy(source).float(), torch.from_numpy(target).float()),
        match_alignment(source, target),
    )


def test_match_rejects_bad_input():
    with pytest.raises(ValueError, match="dim"):
        match_alignment(random_words(3, dim=4), random_words(3, dim=5))
    with pytest.raises(ValueError, match="non-empty"):
        match_alignment(np.zeros((0, 4)), random_words(3, dim=4))
    with pytest.raises(ValueError, match="tie_break"):
        match_alignment(random_words(3), random_words(3), tie_break=-1.0)


# --- Kendall's tau and the sanity anchors -------------------------------------------------------


def test_anchor_identical_vectors_score_one():
    english = random_words(25, seed=6)
    assert kendall_tau(match_alignment(english, english.copy())) == 1.0
    # static spaces: a 20-word verse drawn from 5 word types repeats every word ~4 times,
    # so many crossed matchings tie exactly with the straight one
    rng = np.random.default_rng(6)
    for _ in range(50):
        verse = rng.standard_normal((5, 64))[rng.integers(0, 5, size=20)]
        alignment = match_alignment(verse, verse.copy())
        assert alignment.tolist() == list(range(20))


def test_anchor_fake_english_with_repeated_words_scores_one():
    # Fake-English is English with every piece renamed: same pieces → same word vectors. In a
    # static space the two "and" (and "he") have identical vectors, so crosswise matchings tie
    # with the straight one; the tie-break must still give 1.0.
    english = ["[CLS]", "and", "he", "said", "and", "he", "went", "out", "##side", "[SEP]"]
    fake = ["[CLS]"] + ["::" + t for t in english[1:-1]] + ["[SEP]"]
    table = {w: v for w, v in zip(["and", "he", "said", "went", "out", "##side"],
                                  random_words(6, seed=7), strict=True)}
    def pieces(tokens: list[str]) -> torch.Tensor:
        rows = [np.zeros(64) if t.startswith("[") else table[t.removeprefix("::")]
                for t in tokens]
        return torch.tensor(np.stack(rows))
    eng_words = merge_wordpieces(pieces(english), word_ids_from_pieces(english))
    fake_words = merge_wordpieces(pieces(fake), word_ids_from_pieces(fake))
    assert eng_words.shape == (7, 64)
    torch.testing.assert_close(eng_words, fake_words)
    assert kendall_tau(match_alignment(eng_words, fake_words)) == 1.0


def test_anchor_reversed_sentence_scores_the_minimum_zero():
    english = random_words(30, seed=8)
    alignment = match_alignment(english, english[::-1])
    assert alignment.tolist() == list(range(29, -1, -1))
    assert kendall_tau(alignment) == 0.0
    assert kendall_tau(alignment, square_root=False) == 0.0


def test_kendall_without_root_matches_scipy_on_full_permutations():
    # For a permutation (no ties) SciPy's tau = (C - D) / Z, so 1 - D/Z = (1 + tau) / 2.
    rng = np.random.default_rng(9)
    for n in (2, 5, 17, 40):
        perm = rng.permutation(n)
        tau = stats.kendalltau(np.arange(n), perm).statistic
        assert kendall_tau(perm, square_root=False) == pytest.approx((1 + tau) / 2)
        assert kendall_tau(perm) == pytest.approx(1 - math.sqrt((1 - tau) / 2))


def test_kendall_small_cases_by_hand():
    # [1, 0, 3, 2]: pairs (0,1) and (2,3) inverted, D = 2 of Z = 6
    assert kendall_tau([1, 0, 3, 2]) == pytest.approx(1 - math.sqrt(2 / 6))
    # a leading unaligned word takes position 0: p = [0, 0, 1] is in order
    assert kendall_tau([-1, 0, 1]) == 1.0
    # p = [0, 1, 0]: only (1, 2) inverted
    assert kendall_tau([-1, 1, 0], square_root=False) == pytest.approx(2 / 3)
    assert kendall_tau([3]) == 1.0


def test_kendall_rejects_bad_alignments():
    with pytest.raises(ValueError, match="no source word is aligned"):
        kendall_tau([-1, -1])
    with pytest.raises(ValueError, match="non-empty"):
        kendall_tau([])
    with pytest.raises(ValueError, match="-1"):
        kendall_tau([0, -3])


def test_verse_taus_and_mean_over_verses():
    rng = np.random.default_rng(10)
    english = [rng.standard_normal((int(k), 64)) for k in rng.integers(10, 41, size=20)]
    same = verse_taus(english, [v.copy() for v in english])
    assert same.shape == (20,) and np.all(same == 1.0)
    reversed_ = [v[::-1] for v in english]
    assert np.all(verse_taus(english, reversed_) == 0.0)
    # half the verses reversed: the mean is exactly half way
    mixed = [v.copy() if i % 2 else v[::-1] for i, v in enumerate(english)]
    assert mean_tau(english, mixed) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="20 source verses but 19"):
        verse_taus(english, english[:19])


def test_verse_taus_decrease_with_more_reordering():
    # Target = the source words in a partly shuffled order (plus noise): the more words
    # displaced, the lower the mean tau.
    rng = np.random.default_rng(11)
    english = [rng.standard_normal((30, 64)) for _ in range(20)]
    means = []
    for displaced in (0, 6, 15, 30):
        targets = []
        for v in english:
            order = np.arange(30)
            chosen = rng.choice(30, size=displaced, replace=False)
            order[chosen] = rng.permutation(chosen)
            targets.append(v[order] + 0.1 * rng.standard_normal(v.shape))
        means.append(mean_tau(english, targets))
    assert means[0] == 1.0
    assert means == sorted(means, reverse=True) and means[-1] < 0.5


# --- correlations -----------------------------------------------------------------------------


# Dufter & Schütze 2020, Table 4: Kendall's tau and mBERT's zero-shot XNLI accuracy per language.
PAPER_TAU = {"en": 1.0, "ar": 0.72, "de": 0.74, "fr": 0.80, "ru": 0.72, "th": 0.71, "ur": 0.59,
             "zh": 0.68, "bg": 0.75, "el": 0.77, "es": 0.76, "hi": 0.58, "sw": 0.73, "tr": 0.47,
             "vi": 0.78}
PAPER_XNLI = {"en": 81.4, "ar": 64.9, "de": 71.1, "fr": 73.8, "ru": 69.0, "th": 55.8, "ur": 58.0,
              "zh": 69.3, "bg": 68.9, "el": 66.4, "es": 74.3, "hi": 60.0, "sw": 50.4, "tr": 61.6,
              "vi": 69.5}


def test_correlations_reproduce_seed_000_from_its_table_4():
    # App. B.2: "46% when disregarding English and 64% when including English"
    result = correlations(PAPER_TAU, PAPER_XNLI, without="en")
    assert round(result["pearson"].r, 2) == 0.64
    assert round(result["pearson_without_en"].r, 2) == 0.46
    assert result["pearson"].n == 15 and result["pearson_without_en"].n == 14
    assert "en" not in result["spearman_without_en"].languages
    assert set(result) == {"pearson", "spearman", "pearson_without_en", "spearman_without_en"}


def test_correlate_against_numpy_and_on_monotone_data():
    x = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "e": 5.0}
    y = {k: v**3 for k, v in x.items()}  # monotone, not linear
    pearson = correlate(x, y)
    xs, ys = list(x.values()), list(y.values())
    assert pearson.r == pytest.approx(np.corrcoef(xs, ys)[0, 1])
    assert pearson.r < 1.0 and 0.0 < pearson.p < 0.05
    spearman = correlate(x, y, method="spearman")
    assert spearman.r == pytest.approx(1.0)
    assert spearman.n == 5 and spearman.languages == ("a", "b", "c", "d", "e")
    # dropping the point that makes it curved brings Pearson closer to 1
    assert correlate(x, y, exclude=["e"]).r > pearson.r
    anti = correlate(x, {k: -v for k, v in x.items()})
    assert anti.r == pytest.approx(-1.0)


def test_correlate_rejects_bad_input():
    x = {"a": 1.0, "b": 2.0, "c": 3.0}
    with pytest.raises(ValueError, match=r"only in x \['c'\]"):
        correlate(x, {"a": 1.0, "b": 2.0})
    with pytest.raises(ValueError, match=r"exclude=\['zz'\].*valid: \['a', 'b', 'c'\]"):
        correlate(x, x, exclude=["zz"])
    with pytest.raises(ValueError, match="at least 3"):
        correlate(x, x, exclude=["a"])
    with pytest.raises(ValueError, match="valid: pearson, spearman"):
        correlate(x, x, method="kendall")  # type: ignore[arg-type]
