"""Verse corpora of real languages: alignment by verse id, disjoint shares, dev, scripts."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

from multilab.data import bible
from multilab.data.parallel import (
    NEW_TESTAMENT,
    OLD_TESTAMENT,
    aligned_ids,
    dev_corpora,
    disjoint_shares,
    has_text,
    read_edition,
    train_corpora,
)
from multilab.errors import UserError
from multilab.lab.enfake import bert_words
from multilab.lab.languages import parse_languages

#: A toy DB: two OT and three NT verses; "s" lacks one NT verse, "i" marks one as merged.
TOY = {
    "3": [("01.001.001", "In the beginning"), ("01.001.002", "And the earth"),
          ("40.001.001", "The book"), ("40.001.002", "Abraham"), ("41.001.001", "The start")],
    "s": [("01.001.001", "Im Anfang"), ("01.001.002", "Und die Erde"),
          ("40.001.001", "Buch"), ("41.001.001", "Anfang")],
    "i": [("01.001.001", "आदि में"), ("01.001.002", "-"),
          ("40.001.001", "वंशावली"), ("40.001.002", "अब्राहम"), ("41.001.001", "आरम्भ")],
}  # fmt: skip


def test_placeholders_are_not_text() -> None:
    assert not any(has_text(t) for t in ["-", "[]", "...", "***", "(*)", ":", " "])
    assert all(has_text(t) for t in ["a", "神", "상동", "7"])


def test_aligned_ids_need_text_in_every_edition() -> None:
    assert aligned_ids(TOY, NEW_TESTAMENT) == ["40.001.001", "41.001.001"]
    assert aligned_ids(TOY, OLD_TESTAMENT) == ["01.001.001"]
    assert aligned_ids({"3": TOY["3"]}, NEW_TESTAMENT) == ["40.001.001", "40.001.002", "41.001.001"]


def test_parallel_train_has_the_same_ids_in_every_language() -> None:
    langs = parse_languages(["3", "s", "i", "fake", "enfake:s"])
    train = train_corpora(langs, TOY)
    assert list(train) == list(langs)
    assert {tuple(vid for vid, _ in verses) for verses in train.values()} == {
        ("40.001.001", "41.001.001")
    }
    assert train[langs[3]] == train[langs[0]]  # fake: the same text, ids shift later
    assert train[langs[1]][0][1] == "Buch"
    assert train[langs[4]][0][1] != "Buch" and "B" not in train[langs[4]][0][1]


def test_whole_bible_trains_on_both_testaments_less_the_held_out_verses() -> None:
    langs = parse_languages(["3", "i", "fake"])
    nt = train_corpora(langs, TOY)
    whole = train_corpora(langs, TOY, scope="bible", held_out={"40.001.002"})
    assert [vid for vid, _ in nt[langs[0]]] == ["40.001.001", "40.001.002", "41.001.001"]
    # "01.001.002" is a placeholder in Hindi; "40.001.002" is held out
    ids = ["01.001.001", "40.001.001", "41.001.001"]
    assert [[vid for vid, _ in verses] for verses in whole.values()] == [ids] * 3
    assert whole == train_corpora(langs, TOY, scope="bible", held_out={"40.001.002"})
    with pytest.raises(UserError, match="another domain"):
        train_corpora(parse_languages(["3", "ot"]), TOY, scope="bible")


def test_a_transform_that_cannot_apply_is_a_one_line_error() -> None:
    verses = {"3": TOY["3"], "c": [("40.001.001", "神爱世人"), ("41.001.001", "起初")]}
    with pytest.raises(UserError, match=r"enfake of Chinese.*cannot be made of verse 40\.001\.001"):
        train_corpora(parse_languages(["3", "c", "enfake:c"]), verses)


def test_disjoint_shares_partition_the_ids_by_seed() -> None:
    ids = [f"40.001.{v:03d}" for v in range(1, 102)]
    shares = disjoint_shares(ids, 3, seed=7)
    assert sorted(vid for share in shares for vid in share) == ids
    assert [len(s) for s in shares] == [34, 34, 33]
    assert all(s == sorted(s) for s in shares)
    assert shares == disjoint_shares(ids, 3, seed=7)
    assert shares != disjoint_shares(ids, 3, seed=8)


def test_disjoint_train_gives_each_language_its_own_verses() -> None:
    verses = {code: bible.read_verses(code, (40, 40))[:300] for code in ("3", "s")}
    langs = parse_languages(["3", "s", "fake"])
    train = train_corpora(langs, verses, disjoint=True, seed=1)
    id_sets = [{vid for vid, _ in v} for v in train.values()]
    assert [len(ids) for ids in id_sets] == [100, 100, 100]
    assert not (id_sets[0] & id_sets[1]) and not (id_sets[0] & id_sets[2])
    assert not (id_sets[1] & id_sets[2])
    assert set().union(*id_sets) == set(aligned_ids(verses, NEW_TESTAMENT))


def test_dev_is_the_first_common_old_testament_verses() -> None:
    verses = {code: bible.read_verses(code, (1, 1)) for code in ("3", "b")}
    langs = parse_languages(["3", "b"])
    dev = dev_corpora(langs, verses, size=100)
    ids = [vid for vid, _ in dev[langs[0]]]
    assert ids == [vid for vid, _ in dev[langs[1]]] and len(ids) == 100
    assert ids[0] == "01.001.001" and "01.001.018" not in ids  # Bengali's "-": merged verse
    assert dev[langs[0]][0][1] == "At the first God made the heaven and the earth."
    with pytest.raises(UserError, match="only 1 Old Testament verses"):
        dev_corpora(parse_languages(["3", "i"]), TOY, size=2)


def test_missing_edition_verses_are_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="were not given"):
        train_corpora(parse_languages(["3", "k"]), TOY)


def test_read_edition_export_and_db_agree(tmp_path: Path) -> None:
    from_db = read_edition("3")
    bible.export_edition("3", tmp_path)
    assert read_edition("3", tmp_path) == from_db
    assert len(from_db) == 31102


def john_3_16(code: str) -> str:
    return dict(bible.read_verses(code, (43, 43)))["43.003.016"]


def is_ideograph(ch: str) -> bool:
    return unicodedata.name(ch, "").startswith("CJK UNIFIED IDEOGRAPH")


def test_chinese_words_are_single_ideographs() -> None:
    words = bert_words(john_3_16("c"))
    assert "神" in words and "爱" in words
    assert all(len(w) == 1 for w in words)


def test_japanese_kanji_are_isolated_and_kana_runs_are_words() -> None:
    words = bert_words(bible.read_verses("j", (40, 40))[0][1])
    assert words[:4] == ["アブラハムの", "子", "孫", "、"]
    assert all(len(w) == 1 for w in words if any(is_ideograph(ch) for ch in w))


def test_korean_words_are_space_separated_eojeol() -> None:
    text = john_3_16("n")
    assert bert_words(text) == text.split()
    assert bert_words(text)[0] == "하나님이"  # God + subject particle: one word


@pytest.mark.parametrize(("code", "first"), [("y", "لانه"), ("p", "زیرا")])
def test_right_to_left_words_in_logical_order(code: str, first: str) -> None:
    words = bert_words(john_3_16(code))
    assert words[0] == first and words[-1] == "."
    text = john_3_16(code)
    assert [w for w in words if w not in ".،"] == text.rstrip(".").replace("،", " ").split()


def test_format_characters_are_dropped_not_words() -> None:
    text = bible.read_verses("i", (40, 40))[1][1]
    assert "\u200d" in text
    assert "उत्पन्न" in bert_words(text)  # उत्‍पन्‍न with zero-width joiners
