"""Verse-aligned corpora of real languages: train on the New Testament, dev on the Old.

A real language's unit is the **verse**, not the sentence: the verse is what the editions
align (gold alignment by verse id in every language pair), and no sentence splitter exists for
most of the DB's 22 languages (Punkt, trained per corpus, has nothing to split Chinese or
Japanese at; NLTK's word tokenizer is English). The English + Fake-English setup keeps the
paper's NLTK sentences, where the alignment is the identity anyway.

- train: the NT verse ids (books 40–66) present with text (:func:`has_text`) in *every*
  chosen edition, in canonical order; with ``disjoint`` (the no-parallel modification) each
  language instead gets its own seeded share of those ids, no id in two shares; with
  ``corpus.train_scope: bible`` (:data:`WHOLE_BIBLE`) the ids of both testaments instead,
  less the held-out ones (the dev corpus and the downstream task's dev and test chapters);
- dev: the first :data:`DEV_VERSES` OT verse ids (books 1–39) present with text in every
  chosen edition, the same ids in every language.

Words are what the lab's BERT pipeline cuts (:func:`multilab.lab.enfake.bert_words`), per
script (checked in tests/test_parallel.py and docs/CORPORA.md):

- Latin, Cyrillic, Devanagari, Bengali, Arabic, Persian, Hangul: whitespace-separated
  words, punctuation split off (a Korean "word" is an eojeol, the particles attached; Arabic
  and Persian are stored in logical order, right-to-left is display only, so nothing changes);
- Chinese (``c``): every CJK ideograph is a word of its own (BERT and mBERT isolate CJK
  Unified Ideographs); Chinese has no other word unit here;
- Japanese (``j``): kanji are single-character words like Chinese, but kana are *not*
  isolated: a run of hiragana/katakana between kanji or punctuation is one word
  (``アブラハムの`` = Abraham + the particle の), as in mBERT;
- format characters (zero-width joiners in Hindi, left-to-right marks in Arabic) are deleted
  by the BERT normalizer: they change rendering, never the word.

Pure functions over ``(verse id, text)`` lists; :func:`read_edition` is the only I/O.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from multilab.config import NEW_TESTAMENT_SCOPE, TRAIN_SCOPES, WHOLE_BIBLE
from multilab.data.bible import export_path, read_verses, squeeze_spaces
from multilab.errors import UserError
from multilab.files import read_utf8
from multilab.lab.languages import Language, editions_of

#: ``(verse id "BB.CCC.VVV", text)``: the id sorts in canonical order as a string.
Verse = tuple[str, str]

OLD_TESTAMENT = (1, 39)
NEW_TESTAMENT = (40, 66)
BIBLE = (1, 66)
#: Dufter & Schütze 2020's dev set: the first 10,000 sentences of the KJV Old Testament; here
#: verses.
DEV_VERSES = 10_000

_WORD_CHARACTER = re.compile(r"\w")


def has_text(text: str) -> bool:
    """True when a verse has at least one letter or digit.

    Every edition holds all 31,102 ids, but some mark a verse merged into its neighbour or
    left out with a placeholder: ``-`` (800 in Bengali ``b``, 13 in Persian ``p``, 8 in
    Tagalog ``g``), ``[]``, ``...`` or ``***`` (35 in ``3``; ``[]`` is a verse modern texts
    omit, e.g. Matthew 17:21), ``(*)`` (``e``), ``:`` (``y``). Such a verse is absent.
    """
    return _WORD_CHARACTER.search(text) is not None


def book_of(verse_id: str) -> int:
    """The book number (1–66) of a verse id ``BB.CCC.VVV``."""
    return int(verse_id.split(".", 1)[0])


#: a verse id of an export: book, chapter, verse (``40.001.001``)
VERSE_ID = re.compile(r"\d+\.\d+\.\d+")


def read_edition(code: str, data_dir: Path | None = None) -> list[Verse]:
    """An edition's verses: the versioned export ``data/bible/<code>.tsv`` where it exists,
    else the DB with the export's whitespace squeezing, so both give the same text.

    Read once per process and file version (the corpora, their statistics, the vocabulary
    and the probes read the same editions): an export is read again when its size, time
    or inode changed; the DB is the installed package's, read-only."""
    if data_dir is not None and (path := export_path(data_dir, code)).exists():
        stat = path.stat()
        return list(_exported_edition(code, path, stat.st_size, stat.st_mtime_ns, stat.st_ino))
    return list(_database_edition(code))


@functools.lru_cache(maxsize=8)
def _exported_edition(code: str, path: Path, *version: int) -> tuple[Verse, ...]:
    """The verses of an export, checked line by line (``version``: the cache's key only)."""
    fix = f"export it again with `multilab corpus export --edition {code}`"
    verses = []
    for number, line in enumerate(read_utf8(path, fix).splitlines(), 1):
        vid, tab, text = line.partition("\t")
        if not tab or not VERSE_ID.fullmatch(vid):  # a damaged file: one line, not a
            raise UserError(f"{path} line {number}: {line[:40]!r} is not "  # traceback
                            f"`BB.CCC.VVV<TAB>text`; {fix}")
        verses.append((vid, text))
    return tuple(verses)


@functools.lru_cache(maxsize=8)
def _database_edition(code: str) -> tuple[Verse, ...]:
    return tuple((vid, squeeze_spaces(text)) for vid, text in read_verses(code))


def aligned_ids(
    verses_by_edition: Mapping[str, Sequence[Verse]], books: tuple[int, int]
) -> list[str]:
    """Verse ids of ``books`` present with text (:func:`has_text`) in every edition, in
    canonical order."""
    if not verses_by_edition:
        raise ValueError("aligned_ids needs at least one edition")
    common: set[str] | None = None
    for verses in verses_by_edition.values():
        ids = {
            vid for vid, text in verses if has_text(text) and books[0] <= book_of(vid) <= books[1]
        }
        common = ids if common is None else common & ids
    return sorted(common or ())


def disjoint_shares(ids: Sequence[str], parts: int, seed: int) -> list[list[str]]:
    """``ids`` shuffled by ``random.Random(seed)`` and cut into ``parts`` disjoint shares of
    near-equal size (the first ``len % parts`` one longer), each back in canonical order.

    Why random rather than contiguous halves: contiguous shares would give each language
    different books (the Gospels to one, the Epistles to another), a topic shift that the
    no-parallel ablation is not about.
    """
    if parts < 1:
        raise ValueError(f"disjoint_shares needs at least one part, got {parts}")
    shuffled = list(ids)
    random.Random(seed).shuffle(shuffled)
    size, extra = divmod(len(shuffled), parts)
    shares, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        shares.append(sorted(shuffled[start:end]))
        start = end
    return shares


def _texts(
    language: Language, ids: Sequence[str], verses_by_edition: Mapping[str, Sequence[Verse]]
) -> list[Verse]:
    text_of = dict(verses_by_edition[language.edition])
    out = []
    for vid in ids:
        try:
            out.append((vid, language.text(text_of[vid])))
        except ValueError as err:  # e.g. enfake of a script outside its source range
            raise UserError(
                f"language {language.name!r} cannot be made of verse {vid}: {err}"
            ) from err
    return out


def _check_editions(
    languages: Sequence[Language], verses_by_edition: Mapping[str, Sequence[Verse]]
) -> None:
    missing = [code for code in editions_of(languages) if code not in verses_by_edition]
    if missing:
        raise ValueError(f"verses of editions {missing} were not given")


#: Seeds the choice of an ``ot`` language's training verses (one choice for every model).
OTHER_DOMAIN_SEED = 3


def other_domain_ids(verses: Sequence[Verse], count: int, held_out: Collection[str]
                     ) -> list[str]:
    """Conneau et al. 2020's domain (the ``ot`` transform): ``count`` Old Testament verse ids of one
    edition, drawn by ``random.Random(OTHER_DOMAIN_SEED)`` from those with text outside
    ``held_out`` (the dev corpus, the downstream task's dev and test chapters), in canonical
    order; a draw, not the first ones, so that every group of books is in it."""
    pool = [vid for vid, text in verses if has_text(text) and vid not in held_out
            and OLD_TESTAMENT[0] <= book_of(vid) <= OLD_TESTAMENT[1]]
    if len(pool) < count:
        raise UserError(f"only {len(pool)} Old Testament verses are outside the dev corpus and "
                        f"the task's dev and test chapters, fewer than the {count} New "
                        "Testament verses to match (valid: a smaller corpus.dev_sentences)")
    return sorted(random.Random(OTHER_DOMAIN_SEED).sample(pool, count))


def train_corpora(
    languages: Sequence[Language],
    verses_by_edition: Mapping[str, Sequence[Verse]],
    disjoint: bool = False,
    seed: int = 0,
    held_out: Collection[str] = (),
    scope: str = NEW_TESTAMENT_SCOPE,
) -> dict[Language, list[Verse]]:
    """The NT verses of every language, aligned by id; ``disjoint``: a seeded share each.
    A language of another domain (``ot``) gets as many OT verses instead
    (:func:`other_domain_ids`, never one of ``held_out``), its rows unrelated to the others'.
    ``scope`` :data:`WHOLE_BIBLE`: the verses of both testaments outside ``held_out``
    (canonical order: the Old Testament's first), for languages of the Bible's own domain."""
    if scope not in TRAIN_SCOPES:
        raise ValueError(f"scope {scope!r}; valid: {', '.join(TRAIN_SCOPES)}")
    _check_editions(languages, verses_by_edition)
    order = list(languages)
    other = [lang for lang in languages if lang.other_domain]
    if other and scope == WHOLE_BIBLE:
        raise UserError(f"language {other[0].name!r} trains on Old Testament verses as another "
                        f"domain; corpus.train_scope = {scope!r} gives every language the Old "
                        f"Testament already (valid: {NEW_TESTAMENT_SCOPE!r})")
    languages = [lang for lang in languages if not lang.other_domain]
    needed = {code: verses_by_edition[code] for code in editions_of(languages)}
    if scope == WHOLE_BIBLE:
        kept_out = set(held_out)
        ids = [vid for vid in aligned_ids(needed, BIBLE) if vid not in kept_out]
    else:
        ids = aligned_ids(needed, NEW_TESTAMENT)
    if not ids:
        raise UserError(
            f"no {'Bible' if scope == WHOLE_BIBLE else 'New Testament'} verse is present in "
            f"every edition of {', '.join(needed)}; choose other editions"
        )
    domains = {lang: _texts(lang, other_domain_ids(verses_by_edition[lang.edition], len(ids),
                                                   set(held_out)), verses_by_edition)
               for lang in other}
    if disjoint:
        shares = disjoint_shares(ids, len(languages), seed)
        corpora = {lang: _texts(lang, share, needed)
                   for lang, share in zip(languages, shares, strict=True)} | domains
    else:
        corpora = {lang: _texts(lang, ids, needed) for lang in languages} | domains
    return {lang: corpora[lang] for lang in order}


def dev_corpora(
    languages: Sequence[Language],
    verses_by_edition: Mapping[str, Sequence[Verse]],
    size: int = DEV_VERSES,
) -> dict[Language, list[Verse]]:
    """The first ``size`` OT verse ids present in every edition, in every language."""
    _check_editions(languages, verses_by_edition)
    needed = {code: verses_by_edition[code] for code in editions_of(languages)}
    ids = aligned_ids(needed, OLD_TESTAMENT)
    if len(ids) < size:
        raise UserError(
            f"only {len(ids)} Old Testament verses are present in every edition of "
            f"{', '.join(needed)}, fewer than the {size} dev verses asked for"
        )
    return {lang: _texts(lang, ids[:size], needed) for lang in languages}
