"""Word retrieval MRR / P@1 (Liu et al. 2020b §3.1.1) and contextual word vectors."""

from __future__ import annotations

import numpy as np
import pytest

from multilab.evaluation.word_retrieval import (
    ContextualWordVectors,
    contextual_word_vectors,
    word_retrieval,
)

# hand-made space: cos(u_a, ·) ranks x > y > z; u_b ranks z > y > x; u_c ranks y first
SOURCE_WORDS = ["a", "b", "c"]
SOURCE = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
TARGET_WORDS = ["x", "y", "z", "w"]
TARGET = np.array([[1.0, 0.1], [1.0, 0.9], [0.1, 1.0], [-1.0, -1.0]])


def test_mrr_by_hand():
    # a → y: rank 2; b → z: rank 1; c → x: cos(c,y) > cos(c,x), cos(c,z) = cos(c,x) → rank 3
    result = word_retrieval(SOURCE_WORDS, SOURCE, TARGET_WORDS, TARGET,
                            [("a", "y"), ("b", "z"), ("c", "x")])
    assert result.mrr == pytest.approx((1 / 2 + 1 + 1 / 3) / 3)
    assert result.precision_at_1 == pytest.approx(1 / 3)
    assert (result.queries, result.skipped) == (3, 0)
    # each query's source word and rank: MRR over a class of source words
    assert result.ranks == (("a", 2), ("b", 1), ("c", 3))
    assert result.mrr_of(["a", "c"]) == (pytest.approx((1 / 2 + 1 / 3) / 2), 2)
    assert result.mrr_of(["q"]) == (None, 0)


def test_candidates_are_the_dictionary_targets_unless_all_are_asked():
    # w is not in the dictionary; it would outrank nothing here, so move it onto a's direction
    target = TARGET.copy()
    target[3] = [1.0, 0.0]
    pairs = [("a", "y"), ("b", "z"), ("c", "x")]
    only_dictionary = word_retrieval(SOURCE_WORDS, SOURCE, TARGET_WORDS, target, pairs)
    everything = word_retrieval(SOURCE_WORDS, SOURCE, TARGET_WORDS, target, pairs,
                                candidates="all")
    assert only_dictionary.mrr == pytest.approx((1 / 2 + 1 + 1 / 3) / 3)
    assert everything.mrr == pytest.approx((1 / 3 + 1 + 1 / 3) / 3)  # w beats y for a


def test_several_translations_pair_versus_best():
    pairs = [("a", "x"), ("a", "y"), ("b", "z")]
    per_pair = word_retrieval(SOURCE_WORDS, SOURCE, TARGET_WORDS, TARGET, pairs)
    # the paper's formula: a→x rank 1, a→y rank 2 (x, a correct translation, outranks it)
    assert per_pair.mrr == pytest.approx((1 + 1 / 2 + 1) / 3)
    assert per_pair.queries == 3
    best = word_retrieval(SOURCE_WORDS, SOURCE, TARGET_WORDS, TARGET, pairs, multiple="best")
    assert best.mrr == 1.0 and best.precision_at_1 == 1.0 and best.queries == 2


def test_ties_count_against_the_query_and_missing_words_are_skipped():
    flat = np.ones((4, 2))  # a degenerate space: every candidate ties
    result = word_retrieval(SOURCE_WORDS, SOURCE, TARGET_WORDS, flat,
                            [("a", "x"), ("b", "y"), ("c", "z"), ("a", "nope"), ("nope", "x")])
    assert result.mrr == pytest.approx(1 / 3)  # 3 candidates, all tied: rank 3
    assert result.precision_at_1 == 0.0
    assert result.skipped == 2
    with pytest.raises(ValueError, match="no dictionary pair"):
        word_retrieval(SOURCE_WORDS, SOURCE, TARGET_WORDS, TARGET, [("nope", "x")])


def test_identical_spaces_retrieve_perfectly():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(50, 16))
    words = [f"w{i}" for i in range(50)]
    fake = [f"::{w}" for w in words]
    result = word_retrieval(words, vectors, fake, vectors, list(zip(words, fake, strict=True)))
    assert result.mrr == 1.0 and result.precision_at_1 == 1.0


def test_contextual_vectors_merge_pieces_then_average_occurrences():
    # sentence 1: [CLS] walk ##ing home [SEP]; sentence 2: [CLS] home [SEP] [PAD]
    hidden_1 = np.array([[9.0, 9.0], [1.0, 0.0], [3.0, 2.0], [0.0, 4.0], [9.0, 9.0]])
    hidden_2 = np.array([[9.0, 9.0], [2.0, 0.0], [9.0, 9.0], [9.0, 9.0]])
    words, vectors = contextual_word_vectors(
        [hidden_1, hidden_2],
        [[None, 0, 0, 1, None], [None, 0, None, -1]],
        [["walking", "home"], ["home"]],
    )
    assert words == ["walking", "home"]
    assert vectors[0].tolist() == [2.0, 1.0]  # mean of its two pieces
    assert vectors[1].tolist() == [1.0, 2.0]  # mean of (0, 4) and (2, 0)


def test_contextual_vectors_keep_trailing_dimensions_and_min_count():
    rng = np.random.default_rng(1)
    accumulator = ContextualWordVectors()
    layers = rng.normal(size=(3, 5, 4))  # tokens × layers × d
    accumulator.add(layers, [0, 1, 1], ["a", "b"])
    accumulator.add(layers[:1], [0], ["a"])
    words, vectors = accumulator.result(min_count=2)
    assert words == ["a"]
    assert vectors.shape == (1, 5, 4)
    assert np.allclose(vectors[0], layers[0])
    with pytest.raises(ValueError, match="word ids"):
        accumulator.add(layers, [0, 1], ["a", "b"])
