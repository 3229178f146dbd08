"""Silver dictionary induced from a verse-aligned corpus."""

from __future__ import annotations

import numpy as np
import pytest

from multilab.data.dictionary import (
    DictionaryEntry,
    aligned_occurrences,
    evaluate_dictionary,
    ibm1_translation_table,
    induce_dictionary,
    prefixed_copy,
    prefixed_gold,
)


def synthetic_parallel(n_segments: int = 600, vocab: int = 60, seed: int = 0):
    """A source language with Zipfian words; the target translates each word by a fixed
    bijection (w3 → t3'), shuffles word order, adds a frequent function word ``der`` that has
    no source counterpart and drops one source word in five."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(vocab)]
    translation = {w: f"t{(7 * i) % vocab}'" for i, w in enumerate(words)}
    zipf = 1.0 / np.arange(1, vocab + 1)
    source, target = [], []
    for _ in range(n_segments):
        segment = list(rng.choice(words, size=rng.integers(4, 12), p=zipf / zipf.sum()))
        translated = [translation[w] for w in segment if rng.random() > 0.2]
        translated += ["der"] * int(rng.integers(0, 3))
        rng.shuffle(translated)
        source.append(segment)
        target.append(translated)
    return source, target, {w: {t} for w, t in translation.items()}


@pytest.mark.parametrize("association", ["dice", "ibm1"])
def test_recovers_a_known_translation(association):
    source, target, gold = synthetic_parallel()
    entries = induce_dictionary(source, target, min_count=5, association=association)
    quality = evaluate_dictionary(entries, gold, source)
    assert quality.precision_at_1 == 1.0
    assert quality.evaluated == quality.entries >= 50  # nearly every one of the 60 words
    assert all(e.target != "der" for e in entries)
    assert entries == sorted(entries, key=lambda e: (-e.score, e.source))


def test_min_count_trades_coverage_for_reliability():
    source, target, gold = synthetic_parallel(n_segments=150)
    loose = evaluate_dictionary(induce_dictionary(source, target, min_count=1), gold, source)
    strict = evaluate_dictionary(induce_dictionary(source, target, min_count=20), gold, source)
    assert strict.entries < loose.entries
    assert strict.type_coverage < loose.type_coverage
    assert strict.precision_at_1 >= loose.precision_at_1
    for entry in induce_dictionary(source, target, min_count=20):
        assert entry.source_count >= 20 and entry.target_count >= 20


def test_min_score_drops_the_weakest_matches_only():
    source, target, _ = synthetic_parallel(n_segments=150)
    entries = induce_dictionary(source, target, min_count=1)
    cut = entries[len(entries) // 2].score
    kept = induce_dictionary(source, target, min_count=1, min_score=cut)
    assert kept == [e for e in entries if e.score >= cut]
    assert 0 < len(kept) < len(entries)


def test_dice_scores_and_counts_by_hand():
    source = [["a", "b"], ["a", "c"], ["b", "c", "c"]]
    target = [["x", "y"], ["x", "z"], ["y", "z"]]
    entries = {e.source: e for e in induce_dictionary(source, target, 1, "dice")}
    assert set(entries) == {"a", "b", "c"}
    a = entries["a"]
    assert (a.target, a.source_count, a.target_count, a.cooccurrences) == ("x", 2, 2, 2)
    assert a.score == pytest.approx(1.0)
    assert entries["c"].target == "z" and entries["c"].source_count == 2  # a repeat counts once


def test_words_with_identical_verses_tie_and_give_no_entry():
    source = [["p", "q", "r"], ["p", "q"], ["r"]]
    target = [["P", "Q", "R"], ["P", "Q"], ["R"]]
    entries = induce_dictionary(source, target, min_count=1)
    assert [(e.source, e.target) for e in entries] == [("r", "R")]


def test_fake_english_gold_and_copy():
    english = [["In", "the", "beginning"], ["the", "end"]]
    fake = prefixed_copy(english)
    assert fake == [["::In", "::the", "::beginning"], ["::the", "::end"]]
    gold = prefixed_gold({w for s in english for w in s})
    quality = evaluate_dictionary(induce_dictionary(english, fake, min_count=1), gold, english)
    # "In" and "beginning" share their only verse with each other: tied, no entry
    assert (quality.entries, quality.correct, quality.precision_at_1) == (2, 2, 1.0)
    assert quality.type_coverage == pytest.approx(2 / 4)
    assert quality.token_coverage == pytest.approx(3 / 5)


def test_evaluation_counts_only_words_the_gold_knows():
    entries = [DictionaryEntry("a", "x", 1.0, 1, 1, 1), DictionaryEntry("b", "q", 1.0, 1, 1, 1),
               DictionaryEntry("zz", "x", 1.0, 1, 1, 1)]
    quality = evaluate_dictionary(entries, {"a": {"x", "y"}, "b": {"y"}}, [["a", "b", "c"]])
    assert (quality.entries, quality.evaluated, quality.correct) == (3, 2, 1)
    assert quality.precision_at_1 == 0.5
    assert quality.type_coverage == pytest.approx(2 / 3)


def test_ibm1_table_is_a_distribution_and_explains_away_a_frequent_word():
    # "the" is in every segment, "house" only with "Haus": EM gives Haus to house, not to "the"
    source = [np.array([0, 1]), np.array([0, 2]), np.array([0, 1])]  # the, house / the, cat
    target = [np.array([0, 1]), np.array([0, 2]), np.array([0, 1])]  # das, Haus / das, Katze
    table = ibm1_translation_table(source, target, 3, 3, iterations=10).toarray()
    # rows are t(target | source) over the real targets (NULL is a source), so each sums to 1
    assert np.allclose(table.sum(axis=1), 1.0)
    assert table[1].argmax() == 1 and table[2].argmax() == 2 and table[0].argmax() == 0


def test_aligned_occurrences_need_one_occurrence_on_each_side():
    entries = [DictionaryEntry("a", "x", 1.0, 1, 1, 1), DictionaryEntry("b", "y", 1.0, 1, 1, 1)]
    source = [["a", "b", "c"], ["a", "a", "b"], ["b"]]
    target = [["y", "z", "x"], ["x", "y", "y"], ["q"]]
    # segment 0: a→x and b→y; segment 1: "a" twice and "y" twice, nothing unambiguous
    assert aligned_occurrences(source, target, entries) == [(0, 0, 2), (0, 1, 0)]


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="as many source as target"):
        induce_dictionary([["a"]], [["x"], ["y"]])
    with pytest.raises(ValueError, match="token lists"):
        induce_dictionary(["a b"], ["x y"])
    with pytest.raises(ValueError, match="valid: dice, ibm1"):
        induce_dictionary([["a"]], [["x"]], association="pmi")
