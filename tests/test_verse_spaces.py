"""knn-replace spaces for N real languages: the table's layout (a language and a neighbour per
uniform column draw, the pivot through the first language, tokens without a vector staying),
and a whole build, byte for byte the same twice."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from multilab.config import SpacesConfig
from multilab.errors import UserError
from multilab.spaces.fasttext_spaces import KNN_TABLE
from multilab.spaces.verse_spaces import (
    LanguageText,
    _Space,
    build_verse_spaces,
    knn_columns,
    load_verse_knn_table,
    silver_dictionary,
    silver_precision,
)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _language(key: str, offset: int, size: int, verses: list[list[int]]) -> LanguageText:
    prefix = "" if offset == 0 else f"{key}::"
    words = [prefix + w for w in SPECIALS] + [f"{prefix}w{i}" for i in range(5, size)]
    return LanguageText(key, offset, words, verses)


def test_knn_columns_one_group_per_other_language_and_the_pivot() -> None:
    """Three blocks of 8 ids; trained words 5, 6, 7 in each. Row a holds k = 2 ids in each
    other language in listed order; i → j goes through the first language."""
    languages = [_language(k, o, 8, []) for k, o in (("3", 0), ("s", 8), ("i", 16))]
    spaces = [_Space(torch.zeros(8, 2), [5, 6, 7]) for _ in languages]
    # positions into each side's trained rows: first → i, i → first (best first)
    reverse = torch.tensor([[2, 1], [1, 0], [0, 2]])
    identity = torch.tensor([[0, 1], [1, 2], [2, 0]])
    pairs = {1: (identity, reverse), 2: (reverse, identity)}
    table = knn_columns(languages, spaces, pairs, k=2, total=24)

    assert list(table.shape) == [24, 4]
    assert table[5].tolist() == [8 + 5, 8 + 6, 16 + 7, 16 + 6]  # en → de, then en → hi
    assert table[8 + 5].tolist() == [7, 6, 16 + 5, 16 + 7]  # de → en; en word 7 → hi
    assert table[16 + 5].tolist() == [5, 6, 8 + 5, 8 + 6]  # hi → en; hi → en word 5 → de
    for untrained in [*range(5), *range(8, 13), *range(16, 21)]:  # specials point to themselves
        assert table[untrained].tolist() == [untrained] * 4


def test_knn_columns_repeat_when_a_language_has_fewer_words_than_k() -> None:
    languages = [_language("3", 0, 7, []), _language("s", 7, 7, [])]
    spaces = [_Space(torch.zeros(7, 2), [5, 6]), _Space(torch.zeros(7, 2), [5, 6])]
    pairs = {1: (torch.tensor([[1], [0]]), torch.tensor([[0], [1]]))}
    table = knn_columns(languages, spaces, pairs, k=3, total=14)
    assert table[5].tolist() == [13, 13, 13] and table[7 + 6].tolist() == [6, 6, 6]


def _synthetic_study(verses: int = 300) -> tuple[list[LanguageText], list[str]]:
    """Three 'languages' of one Zipf-ish word stream: English, a renamed copy, a reversed
    copy (word order inverted per verse), each its own block of 40 ids."""
    rng = random.Random(0)
    stream = [[5 + min(34, int(rng.paretovariate(1.2))) for _ in range(rng.randint(4, 12))]
              for _ in range(verses)]
    languages = [
        _language("3", 0, 40, stream),
        _language("s", 40, 40, [list(v) for v in stream]),
        _language("i", 80, 40, [list(reversed(v)) for v in stream]),
    ]
    words = [w for lang in languages for w in lang.words]
    return languages, words


CONFIG = SpacesConfig(dim=8, epochs=3, min_count=1, window=3, threads=1, fake_shuffle_seed=1,
                      knn_k=5, vecmap_seed=0, vecmap_max_iterations=5)


def test_build_is_deterministic_and_checked_against_the_vocabulary(tmp_path: Path) -> None:
    languages, words = _synthetic_study()
    first = build_verse_spaces(languages, words, tmp_path / "a", CONFIG)
    build_verse_spaces(languages, words, tmp_path / "b", CONFIG)
    assert (tmp_path / "a" / KNN_TABLE).read_bytes() == (tmp_path / "b" / KNN_TABLE).read_bytes()
    assert set(first["languages"]) == {"s", "i"} and first["knn_k"] == 5
    for metrics in first["languages"].values():
        assert metrics["silver_entries_held_out"] > 0
        assert 0.0 <= metrics["silver_precision_at_1_csls"] <= 1.0
    table = load_verse_knn_table(tmp_path / "a", words)
    assert list(table.shape) == [120, 10]
    english = table[5:40]
    moved = (english != torch.arange(5, 40)[:, None]).all(dim=1)  # the words of the verses
    assert moved.sum() >= 25 and not moved[:1].any()  # w5 never occurs: it stays
    assert bool(((english[moved, :5] >= 40) & (english[moved, :5] < 80)).all())  # German block
    assert bool(((english[moved, 5:] >= 80) & (english[moved, 5:] < 120)).all())  # Hindi block
    assert sorted({p.name for p in (tmp_path / "a").iterdir()}) == [
        "3.vec", "i.vec", "knn.pt", "languages.mapped.vec", "metrics.json", "s.vec"]
    with pytest.raises(UserError, match="word 40 is 's::\\[PAD\\]' but the tokenizer has 'x'"):
        load_verse_knn_table(tmp_path / "a", [*words[:40], "x", *words[41:]])
    with pytest.raises(UserError, match="the spaces stage built no knn table"):
        load_verse_knn_table(tmp_path / "missing", words)


def test_silver_dictionary_halves_score_the_top_neighbour() -> None:
    """German here is English renamed, so the silver dictionary is the identity: a mapping
    that finds each twin scores 1 on the held-out half, one off by one word scores 0."""
    rng = random.Random(1)
    verses = [rng.sample(range(5, 25), 6) for _ in range(200)]
    english, german = _language("3", 0, 25, verses), _language("s", 25, 25, verses)
    rows = list(range(5, 25))  # both sides trained every word, in id order
    silver = silver_dictionary(english, german, rows, rows, split_seed=0)
    assert len(silver.seed[0]) == len(silver.held_out[0]) == 10
    assert bool((silver.seed[0] == silver.seed[1]).all())  # the identity, as positions
    assert not set(silver.seed[0].tolist()) & set(silver.held_out[0].tolist())
    twin = torch.arange(20)[:, None]
    assert silver_precision(silver.held_out, twin) == 1.0
    assert silver_precision(silver.held_out, (twin + 1) % 20) == 0.0


def test_a_silver_seed_is_what_vecmap_starts_from(tmp_path: Path) -> None:
    """``seed_dictionary: silver`` hands half the silver dictionary to VecMap (the start it
    takes is tested in test_vecmap.py) and scores on the other half either way."""
    languages, words = _synthetic_study()
    plain = build_verse_spaces(languages[:2], words[:80], tmp_path / "a", CONFIG)
    seeded = build_verse_spaces(languages[:2], words[:80], tmp_path / "b",
                                replace(CONFIG, seed_dictionary="silver"))
    assert plain["languages"]["s"]["silver_entries_seeding"] == 0
    held_out = plain["languages"]["s"]["silver_entries_held_out"]
    assert held_out > 0 and seeded["languages"]["s"]["silver_entries_held_out"] == held_out
    assert seeded["languages"]["s"]["silver_entries_seeding"] in (held_out, held_out - 1)
