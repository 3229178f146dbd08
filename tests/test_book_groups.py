"""The downstream task's labels and chapter split: total, stratified, identical everywhere."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from multilab.data import bible
from multilab.data.book_groups import (
    LABELS,
    SPLITS,
    chapter_of,
    classification_scores,
    group_of_book,
    label_of,
    majority_baseline,
    ot_chapters,
    passage_examples,
    split_chapters,
    task_examples,
)
from multilab.lab.languages import parse_languages
from tests.helpers import ROOT, subprocess_env


def test_every_ot_book_has_exactly_one_group() -> None:
    groups = [group_of_book(book) for book in range(1, 40)]
    assert groups == [0] * 5 + [1] * 12 + [2] * 5 + [3] * 5 + [4] * 12
    assert LABELS[label_of("19.023.001")] == "wisdom"  # Psalm 23
    assert LABELS[label_of("32.001.001")] == "minor-prophets"  # Jonah
    for book in (0, 40, 66):
        with pytest.raises(ValueError, match="not in the Old Testament"):
            group_of_book(book)


def test_chapter_table_is_the_db_s() -> None:
    verses = bible.read_verses("k", (1, 39))
    assert sorted({chapter_of(vid) for vid, _ in verses}) == ot_chapters()
    assert len(ot_chapters()) == 929


def test_split_is_total_stratified_and_80_10_10() -> None:
    split = split_chapters(seed=0)
    assert set(split) == set(ot_chapters())
    per_group = Counter((group_of_book(book), s) for (book, _), s in split.items())
    for label in range(len(LABELS)):
        assert all(per_group[label, s] >= 1 for s in SPLITS)
    assert Counter(split.values()) == {"train": 743, "dev": 93, "test": 93}
    assert split != split_chapters(seed=1)


def test_no_chapter_crosses_splits_and_every_language_has_the_same_verses() -> None:
    verses = {code: bible.read_verses(code, (28, 39)) for code in ("3", "j", "b")}
    langs = parse_languages(["3", "j", "b", "fake"])
    examples = task_examples(langs, verses, seed=0)
    chapters: dict[tuple[int, int], str] = {}
    for split in SPLITS:
        rows = [[(e.verse_id, e.label) for e in examples[split][lang]] for lang in langs]
        assert rows[0] and all(r == rows[0] for r in rows)
        for vid, label in rows[0]:
            assert chapters.setdefault(chapter_of(vid), split) == split
            assert label == 4
    assert examples["test"][langs[1]][0].text != examples["test"][langs[0]][0].text


def test_passages_are_runs_of_one_chapter_with_its_label_and_split() -> None:
    """bible-passages: consecutive verses of one chapter, the verse task's split and labels,
    the same passages (by first verse id) in every language."""
    verses = {code: bible.read_verses(code, (28, 39)) for code in ("3", "s")}
    langs = parse_languages(["3", "s"])
    single = task_examples(langs, verses, seed=0)
    passages = passage_examples(langs, verses, seed=0, size=3)
    for split in SPLITS:
        ids = [[e.id for e in passages[split][lang]] for lang in langs]
        assert ids[0] and ids[0] == ids[1]
        by_id = {e.id: e for e in single[split][langs[0]]}
        members: list[str] = []
        for passage in passages[split][langs[0]]:
            start = [e.id for e in single[split][langs[0]]].index(passage.id)
            run = [e for e in single[split][langs[0]][start:start + 3]
                   if chapter_of(e.id) == chapter_of(passage.id)]
            assert passage.text == " ".join(e.text for e in run)
            assert passage.label == by_id[passage.id].label
            members += [e.id for e in run]
        assert members == [e.id for e in single[split][langs[0]]]  # every verse, once
    hosea_1 = [e for e in passages["train"][langs[0]] + passages["dev"][langs[0]]
               + passages["test"][langs[0]] if chapter_of(e.id) == (28, 1)]
    assert [e.id for e in hosea_1][:2] == ["28.001.001", "28.001.004"]
    assert passage_examples(langs, verses, seed=0, size=1) == single


def test_split_is_the_same_in_a_fresh_process() -> None:
    code = (
        "import json; from multilab.data.book_groups import split_chapters;"
        "print(json.dumps(sorted(f'{b}.{c}.{s}' for (b, c), s in split_chapters(3).items())))"
    )
    env = subprocess_env() | {"PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    here = sorted(f"{b}.{c}.{s}" for (b, c), s in split_chapters(3).items())
    assert json.loads(out.stdout) == here


def test_majority_baseline() -> None:
    base = majority_baseline([1, 1, 0, 2], [1, 0, 0, 1])
    assert base.label == 1 and base.accuracy == 0.5
    assert base.macro_f1 == pytest.approx((2 * 0.5 / 1.5) / 5)
    assert majority_baseline([0, 1], [1]).label == 0  # ties: the lower label


def test_classification_scores() -> None:
    gold = [0, 0, 1, 2, 4]
    perfect = classification_scores(gold, gold)
    assert perfect.accuracy == 1.0 and perfect.macro_f1 == pytest.approx(0.8)  # 3: never gold
    scores = classification_scores([0, 1, 1, 2, 3], gold)
    assert scores.accuracy == pytest.approx(0.6)
    # F1 per label: 0: 2/3, 1: 2/3, 2: 1, 3: 0, 4: 0
    assert scores.macro_f1 == pytest.approx((2 / 3 + 2 / 3 + 1) / 5)
    with pytest.raises(ValueError, match="as many predictions"):
        classification_scores([0], [0, 1])
