"""The zero-shot downstream task (the lab's XNLI analogue): which group of
books an Old Testament verse comes from.

Labels come from the verse id alone (``BB.CCC.VVV``), so every edition carries exactly the
same gold labels: fine-tune on English, test on every language, and the only thing that
changes is the language. The five groups of the Protestant canon's Old Testament:

====  ===============  ======  ======== ========
 id    group            books   chapters  verses
====  ===============  ======  ======== ========
 0     law              1–5       187     5,852
 1     history          6–17      249     7,018
 2     wisdom           18–22     243     4,785
 3     major-prophets   23–27     183     4,440
 4     minor-prophets   28–39      67     1,050
====  ===============  ======  ======== ========

The split is **by chapter** (verses of one chapter share names and topic: a verse split would
leak them from train to test), stratified by group so that every group is in every split:
in each group the chapters are shuffled by ``random.Random(seed)`` and cut 80 / 10 / 10 %
(train / dev / test, rounded, at least one chapter each for dev and test). The chapter list is
the canon's (:data:`OT_CHAPTERS`, checked against the DB by the tests), so the split depends
on the seed only: the same chapters for any choice of editions, in any process. Seed 0:
743 / 93 / 93 chapters, 18,528 / 2,240 / 2,377 verses (KJV); the majority baseline (always
``history``) scores accuracy .288 and macro-F1 .089 on its test split.

The pretraining corpora never see these verses as training data: train is the New Testament;
the dev corpus (the first 10,000 OT verses) is only scored for perplexity.

This is the ``bible-books`` task of :mod:`multilab.data.tasks` (the default); its
:class:`~multilab.data.classification.Example` and scores are the ones every task shares.

**Passages** (the ``bible-passages`` task): the same labels and the same chapter
split, but an example is a passage of :data:`PASSAGE_VERSES` consecutive verses of one chapter
(:func:`passage_examples`) instead of one verse. One verse is often too little to tell its
group (a quick BERT-small reaches .45 in-language on five classes, majority .288), so
differences between models drown in the task's own ceiling; a passage carries more of its
book's names and style. The held-out verses are the same as the verse task's, so a whole-Bible
corpus (``corpus.train_scope: bible``) keeps out both tasks' dev and test chapters.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

from multilab.data import classification
from multilab.data.classification import SPLITS, Baseline, Example, Scores
from multilab.data.parallel import OLD_TESTAMENT, Verse, aligned_ids, book_of
from multilab.lab.languages import Language, editions_of

#: (name, first book, last book), in label order.
BOOK_GROUPS: tuple[tuple[str, int, int], ...] = (
    ("law", 1, 5),
    ("history", 6, 17),
    ("wisdom", 18, 22),
    ("major-prophets", 23, 27),
    ("minor-prophets", 28, 39),
)
LABELS: tuple[str, ...] = tuple(name for name, _, _ in BOOK_GROUPS)
#: Chapters of each OT book, Genesis (1) to Malachi (39), as in every edition of the DB.
OT_CHAPTERS: tuple[int, ...] = (
    50, 40, 27, 36, 34, 24, 21, 4, 31, 24, 22, 25, 29, 36, 10, 13, 10, 42, 150, 31,
    12, 8, 66, 52, 5, 48, 12, 14, 3, 9, 1, 4, 7, 3, 3, 3, 2, 14, 4,
)  # fmt: skip
#: Shares of each group's chapters in train / dev / test.
PROPORTIONS = (0.8, 0.1, 0.1)
#: Verses of one ``bible-passages`` example (the last passage of a chapter may be shorter).
PASSAGE_VERSES = 4

Chapter = tuple[int, int]  # (book, chapter)


def group_of_book(book: int) -> int:
    """The label (index into :data:`LABELS`) of an OT book; ValueError outside books 1–39."""
    for label, (_, first, last) in enumerate(BOOK_GROUPS):
        if first <= book <= last:
            return label
    raise ValueError(f"book {book} is not in the Old Testament; valid: 1–39")


def label_of(verse_id: str) -> int:
    """The label of a verse id ``BB.CCC.VVV``."""
    return group_of_book(book_of(verse_id))


def chapter_of(verse_id: str) -> Chapter:
    book, chapter, _ = verse_id.split(".")
    return int(book), int(chapter)


def ot_chapters() -> list[Chapter]:
    """Every OT chapter in canonical order."""
    return [(b, c) for b, n in enumerate(OT_CHAPTERS, start=1) for c in range(1, n + 1)]


def split_chapters(seed: int = 0) -> dict[Chapter, str]:
    """Every OT chapter → ``train``, ``dev`` or ``test``; stratified by group, seeded."""
    rng = random.Random(seed)
    chapters = ot_chapters()
    assignment: dict[Chapter, str] = {}
    for label in range(len(BOOK_GROUPS)):
        group = [ch for ch in chapters if group_of_book(ch[0]) == label]
        rng.shuffle(group)
        dev = max(1, round(PROPORTIONS[1] * len(group)))
        test = max(1, round(PROPORTIONS[2] * len(group)))
        for i, chapter in enumerate(group):
            assignment[chapter] = "dev" if i < dev else "test" if i < dev + test else "train"
    return assignment


def task_examples(
    languages: Sequence[Language],
    verses_by_edition: Mapping[str, Sequence[Verse]],
    seed: int = 0,
) -> dict[str, dict[Language, list[Example]]]:
    """``split → language → examples``: the OT verses present in every chosen edition, by the
    split of their chapter; the same verse ids and labels in every language."""
    needed = {code: verses_by_edition[code] for code in editions_of(languages)}
    ids = aligned_ids(needed, OLD_TESTAMENT)
    assignment = split_chapters(seed)
    text_of = {code: dict(verses) for code, verses in needed.items()}
    out: dict[str, dict[Language, list[Example]]] = {s: {} for s in SPLITS}
    for split in SPLITS:
        split_ids = [vid for vid in ids if assignment[chapter_of(vid)] == split]
        for lang in languages:
            out[split][lang] = [
                Example(vid, lang.text(text_of[lang.edition][vid]), label_of(vid))
                for vid in split_ids
            ]
    return out


def passage_examples(
    languages: Sequence[Language],
    verses_by_edition: Mapping[str, Sequence[Verse]],
    seed: int = 0,
    size: int = PASSAGE_VERSES,
) -> dict[str, dict[Language, list[Example]]]:
    """:func:`task_examples` in passages: each chapter's aligned verses cut, in order, into
    runs of ``size`` (the last one shorter where the chapter does not divide), the verse
    texts joined by a space; an example's id is its first verse's, the same in every
    language, its label and split those of its chapter."""
    if size < 1:
        raise ValueError(f"a passage needs at least one verse, got {size}")
    verses = task_examples(languages, verses_by_edition, seed)
    out: dict[str, dict[Language, list[Example]]] = {s: {} for s in SPLITS}
    for split, by_language in verses.items():
        for lang, examples in by_language.items():
            passages: list[Example] = []
            run: list[Example] = []
            for example in [*examples, None]:
                ends = example is None or (run and (
                    len(run) == size or chapter_of(example.id) != chapter_of(run[0].id)))
                if ends and run:
                    passages.append(Example(run[0].id, " ".join(e.text for e in run),
                                            run[0].label))
                    run = []
                if example is not None:
                    run.append(example)
            out[split][lang] = passages
    return out


def classification_scores(predicted: Sequence[int], gold: Sequence[int],
                          num_labels: int = len(LABELS)) -> Scores:
    """:func:`multilab.data.classification.classification_scores` over the five groups."""
    return classification.classification_scores(predicted, gold, num_labels)


def majority_baseline(train_labels: Iterable[int], test_labels: Sequence[int],
                      num_labels: int = len(LABELS)) -> Baseline:
    """:func:`multilab.data.classification.majority_baseline` over the five groups."""
    return classification.majority_baseline(train_labels, test_labels, num_labels)
