"""The languages of a study made concrete: their corpora, vocabulary blocks and token ids.

Two setups share every stage after this module:

- **sentences** (``languages: [<corpus.train_edition>, fake]``, the paper's and the default):
  ``train.txt`` / ``dev.txt`` hold English NLTK sentences, one a line; Fake-English is the
  same ids shifted into a second block (:mod:`multilab.data.vocab`, unchanged, so every model
  trained before languages were a parameter keeps its data and its fingerprint);
- **verses** (any other list, e.g. ``[3, s, i]``): ``train.txt`` / ``dev.txt`` are verse tables
  (``data/parallel.py``: NT verses for training, the first ``corpus.dev_sentences`` OT verses
  for dev, the same ids in every language), a tab-separated header ``verse <key> …`` and one
  verse a line, a column per language that has a text of its own. Each such language gets its
  own WordPiece (``vocab/language-<i>/``), the blocks are concatenated with disjoint ids
  (``vocab/multilingual/``, saved with every model; ``vocab/blocks.json`` says where each
  language's block starts), and an id transform (``fake``) reuses its base's tokenizer.
  ``vocab.mode: joint`` trains one WordPiece over every language instead, every language's
  block at offset 0 (mBERT-style shared ids; :mod:`multilab.data.multilingual_vocab`);
  ``vocab.mode: union`` (Conneau et al. 2020's default-anchors) keeps a WordPiece per language and
  puts every language at offset 0 of their union (identical strings share ids), each language's
  ``language-<i>/`` tokenizer cutting its text by its own pieces into the union's ids.
  User corpora (``corpora:``, :mod:`multilab.data.user_corpora`) are verse tables too, of
  numbered lines: dev rows aligned, train rows unrelated (columns of different lengths).

Either way a study is N languages, each a block of ids at an offset
(:class:`Layout`): what inputs, batches, training and evaluation read.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from multilab.config import Config
from multilab.data import parallel
from multilab.data.multilingual_vocab import (
    JOINT,
    Block,
    build_blocks,
    minimum_size,
    tokenizer_tokens,
    vocabulary,
)
from multilab.data.vocab import (
    BILINGUAL_DIR,
    ENGLISH_DIR,
    _save_bert_tokenizer,
    load_tokenizer,
)
from multilab.errors import UserError
from multilab.files import read_utf8, write_json, write_text
from multilab.lab.enfake import bert_words
from multilab.lab.languages import Language

log = logging.getLogger(__name__)

MULTILINGUAL_DIR = "multilingual"  # the concatenated vocabulary, saved with every model
BLOCKS_FILE = "blocks.json"


def vocab_built(vocab: Path) -> bool:
    """Whether ``vocab`` holds a finished vocabulary: the last file of either kind of build
    (``build_vocab``'s bilingual tokenizer, ``build_verse_vocab``'s blocks) is there. A folder
    holding only a stopped build's staging folder is not one."""
    return (vocab / BILINGUAL_DIR / "tokenizer.json").is_file() or (vocab / BLOCKS_FILE).is_file()
VERSE_COLUMN = "verse"
#: A language whose characters alone fill more of the vocabulary than this share gets
#: ``vocab.size × MERGE_SHARE`` merges on top of them (:func:`block_size`).
MERGE_SHARE = 0.25


def language_dir(index: int) -> str:
    """The vocab subfolder of the tokenizer trained on language ``index``'s text."""
    return f"language-{index}"


def metric_name(key: str) -> str:
    """A language key as it appears in metric names (``enfake:s`` → ``enfake_s``)."""
    return key.replace(":", "_")


@dataclass(frozen=True)
class Layout:
    """Where each language's ids live, and which tokenizer cuts its text."""

    keys: tuple[str, ...]  # the study's languages, canonical spelling
    offsets: tuple[int, ...]  # first id of each language's block
    sizes: tuple[int, ...]  # tokens of each block (specials included)
    tokenizers: tuple[str, ...]  # vocab subfolder that tokenizes each language's text
    columns: tuple[str, ...]  # verse-table column of each language's text ("" for sentences)
    saved: str  # the vocab subfolder saved with models (the whole vocabulary)

    @property
    def total(self) -> int:
        return max(o + s for o, s in zip(self.offsets, self.sizes, strict=True))


def layout(cfg: Config) -> Layout:
    """The layout of the built vocabulary (``vocab`` stage) of ``cfg``'s languages."""
    if not cfg.verses:
        size = len(load_tokenizer(cfg.paths.vocab))
        return Layout(cfg.languages, (0, size), (size, size), (ENGLISH_DIR, ENGLISH_DIR),
                      ("", ""), BILINGUAL_DIR)
    path = cfg.paths.vocab / BLOCKS_FILE
    if not path.exists():
        raise UserError(f"{path} not found; run `dvc repro vocab` first")
    saved = json.loads(read_utf8(path, "rebuild it with `dvc repro vocab`"))
    keys = tuple(entry["language"] for entry in saved["blocks"])
    if keys != cfg.languages:
        raise UserError(
            f"{path} was built for languages [{', '.join(keys)}], not [{', '.join(cfg.languages)}]"
            "; rebuild it with `dvc repro corpus vocab`"
        )
    blocks = saved["blocks"]
    return Layout(
        keys, tuple(b["offset"] for b in blocks), tuple(b["size"] for b in blocks),
        tuple(b["tokenizer"] for b in blocks), tuple(b["column"] for b in blocks),
        MULTILINGUAL_DIR,
    )


# --------------------------------------------------------------------------- corpus stage


def text_columns(languages: Sequence[Language]) -> dict[Language, str]:
    """Each language with a text of its own → its column (its key); ``fake`` has none."""
    first = languages[0].edition
    return {lang: lang.key(first) for lang in languages if not lang.id_copy}


def column_of(language: Language, languages: Sequence[Language]) -> str:
    """The column whose text a language is made of (its base's for an id transform)."""
    columns = text_columns(languages)
    return columns.get(language) or columns[Language(language.edition)]


def _table(columns: list[str], rows: dict[str, list[tuple[str, str]]]) -> str:
    """A verse table; columns shorter than the longest (user corpora's train lines, which
    are not parallel) end in empty cells, the id column counting rows."""
    longest = max(rows.values(), key=len)
    lines = ["\t".join([VERSE_COLUMN, *columns])]
    for i, (vid, _) in enumerate(longest):
        lines.append("\t".join([vid, *(rows[c][i][1] if i < len(rows[c]) else ""
                                       for c in columns)]))
    return "".join(line + "\n" for line in lines)


def build_verse_corpora(cfg: Config) -> dict[str, dict[str, float]]:
    """``train.txt`` and ``dev.txt`` as verse tables; statistics per split and language."""
    from multilab.data.corpus import CorpusStats

    languages = cfg.language_list
    columns = text_columns(languages)
    if cfg.user_corpora:
        from multilab.data.user_corpora import user_corpora

        train, dev = user_corpora(cfg, languages, list(columns))
    else:
        verses = {code: parallel.read_edition(code, cfg.paths.data)
                  for code in dict.fromkeys(lang.edition for lang in languages)}
        dev = parallel.dev_corpora(list(columns), verses, cfg.corpus.dev_sentences)
        train = parallel.train_corpora(list(columns), verses,
                                       held_out=held_out_verses(cfg, dev, verses),
                                       scope=cfg.corpus.train_scope)
    stats: dict[str, dict[str, float]] = {}
    for split, rows in (("train", train), ("dev", dev)):
        named = {columns[lang]: texts for lang, texts in rows.items()}
        write_text(cfg.paths.corpora / f"{split}.txt", _table(list(named), named))
        for key, texts in named.items():
            words = [" ".join(bert_words(text)) for _, text in texts if text]
            stats[f"{split}.{metric_name(key)}"] = CorpusStats.of(words).as_dict()
    return stats


def held_out_verses(cfg: Config, dev: dict[Language, list[tuple[str, str]]],
                    verses: dict[str, list[tuple[str, str]]]) -> set[str]:
    """What an ``ot`` language (Conneau et al. 2020's other domain) or a whole-Bible corpus
    (``corpus.train_scope: bible``) must not train on: the dev corpus's verses and those of
    the downstream task's dev and test chapters (every edition holds the same verse ids)."""
    from multilab.data.book_groups import chapter_of, split_chapters

    split = split_chapters(cfg.downstream.split_seed)
    ids = {vid for rows in dev.values() for vid, _ in rows}
    any_edition = next(iter(verses.values()))
    return ids | {vid for vid, _ in any_edition
                  if parallel.book_of(vid) <= parallel.OLD_TESTAMENT[1]
                  and split[chapter_of(vid)] != "train"}


def verse_stats(cfg: Config) -> dict[str, dict[str, float]]:
    """The statistics :func:`build_verse_corpora` returned, from the built tables."""
    from multilab.data.corpus import CorpusStats

    stats = {}
    for split in ("train", "dev"):
        _, texts = read_verse_table(cfg.paths.corpora / f"{split}.txt")
        for key, lines in texts.items():
            words = [" ".join(bert_words(text)) for text in lines if text]
            stats[f"{split}.{metric_name(key)}"] = CorpusStats.of(words).as_dict()
    return stats


def read_verse_table(path: Path) -> tuple[list[str], dict[str, list[str]]]:
    """(verse ids, column → texts) of a verse table written by :func:`build_verse_corpora`."""
    from multilab.data.corpus import read_lines

    header, *rows = read_lines(path)
    names = header.split("\t")
    if names[0] != VERSE_COLUMN:
        raise UserError(f"{path} is not a verse table (its first line is not 'verse\\t…'); "
                        "rebuild it with `dvc repro corpus`")
    cells = [row.split("\t") for row in rows]
    if any(len(c) != len(names) for c in cells):
        raise UserError(f"{path} has rows of another width than its header; rebuild it with "
                        "`dvc repro corpus`")
    return [c[0] for c in cells], {name: [c[i] for c in cells] for i, name in
                                   enumerate(names) if i}


# --------------------------------------------------------------------------- vocab stage


def block_size(words: Sequence[str], size: int) -> int:
    """The WordPiece size of one language: ``vocab.size``, or, for a script whose characters
    alone take more than ``1 - MERGE_SHARE`` of it, those characters plus ``vocab.size ×
    MERGE_SHARE`` merges.

    Why: a block must hold every character of its language (:func:`minimum_size`) or it cannot
    spell its words; 2,048 holds the 60–150 characters of alphabetic scripts with room for
    ~1,900 merges, but not Chinese (2,421 characters on the NT) and leaves Japanese (1,750)
    and Korean (1,554) few merges. The same ``vocab.size`` for every other language keeps
    their blocks comparable to the paper's English. WordPiece stops earlier when no merge is
    left (Chinese: every ideograph is a word of its own, 2,449 tokens): that block is smaller.
    """
    needed = minimum_size(words)
    if needed <= size * (1 - MERGE_SHARE):
        return size
    return max(size, needed + int(size * MERGE_SHARE))


def build_verse_vocab(cfg: Config) -> dict[str, int]:
    """Per-language WordPiece blocks of the train verses, concatenated; ``blocks.json``."""
    languages = cfg.language_list
    _, texts = read_verse_table(cfg.paths.corpora / "train.txt")
    columns = text_columns(languages)
    missing = [c for c in columns.values() if c not in texts]
    if missing:
        raise UserError(f"{cfg.paths.corpora / 'train.txt'} has no column {missing[0]!r}; "
                        "rebuild it with `dvc repro corpus`")
    train = {lang: texts[column] for lang, column in columns.items()}
    sizes = {lang: block_size([w for t in train[lang] for w in bert_words(t)], cfg.vocab.size)
             for lang in columns}
    unit = cfg.vocab.unit
    if unit != "wordpiece":  # word and char vocabularies: their size is the corpus's
        sizes = {}
    if cfg.vocab.mode == JOINT:  # as many ids as the separate blocks: the same model size;
        # a word vocabulary of every language scales from all of them (the paper's 100k words
        # stand to its joint 60k word-pieces), not from one language's `vocab.size`
        joint_size = sum(sizes.values()) or cfg.vocab.size * len(columns)
        blocks = build_blocks(languages, train, joint_size, mode=JOINT, unit=unit)
    else:  # separate, or union: each language's own WordPiece, the same sizes
        blocks = build_blocks(languages, train, cfg.vocab.size, mode=cfg.vocab.mode,
                              sizes=sizes, unit=unit)
    index = {lang: i for i, lang in enumerate(languages)}
    for block in blocks:
        if block.tokenizer_of == block.language:
            _save_bert_tokenizer(tokenizer_tokens(block), cfg.paths.vocab / language_dir(
                index[block.language]))
    _save_bert_tokenizer(saved_tokens(blocks, languages), cfg.paths.vocab / MULTILINGUAL_DIR)
    entries = [_entry(block, index, languages) for block in blocks]
    write_json(cfg.paths.vocab / BLOCKS_FILE, {"blocks": entries})
    return {e["language"]: e["size"] for e in entries} | {"total": len(vocabulary(blocks))}


def saved_tokens(blocks: Sequence[Block], languages: Sequence[Language]) -> list[str]:
    """The whole vocabulary in id order, each token spelled once: a block after the first
    has its tokens prefixed ``<key>::`` (``s::Abraham``, ``s::[CLS]``), as Fake-English's are
    ``::``; the languages' own tokenizers (``language-<i>/``) are what cut text."""
    first = languages[0].edition
    tokens: list[str] = []
    for index, block in enumerate(blocks):
        if block.offset < len(tokens):  # a joint or union vocabulary: the first block's ids
            continue
        own = index == 0 or (block.language == Language(first, "fake"))
        prefix = "" if own else metric_name(block.language.key(first)) + "::"
        tokens.extend(prefix + t for t in block.tokens)
    if len(set(tokens)) != len(tokens):  # e.g. two blocks of one shared vocabulary
        raise UserError("the languages' vocabularies overlap; list each language once")
    return tokens


def _entry(block: Block, index: dict[Language, int], languages: Sequence[Language]) -> dict:
    return {
        "language": block.language.key(languages[0].edition),
        "offset": block.offset,
        "size": block.size,
        "tokenizer": language_dir(index[block.tokenizer_of]),
        "column": column_of(block.language, languages),
    }


# --------------------------------------------------------------------------- model inputs


def tokenized_verses(cfg: Config, lay: Layout, split: str, limit: int | None,
                     max_length: int,
                     rewrite: Callable[[int, list[str]], list[str]] | None = None,
                     ) -> tuple[list[list[torch.Tensor]], int]:
    """Each language's wordpiece ids (its own tokenizer, no specials, cut to ``max_length -
    2``) of the first ``limit`` verses of ``split``; verse i is row i in every language.

    ``rewrite(language, lines)`` replaces a language's lines before tokenization (K et al. 2020's
    unigram corpus; pretraining only)."""
    _, texts = read_verse_table(cfg.paths.corpora / f"{split}.txt")
    tokenizers = {name: load_tokenizer(cfg.paths.vocab, name) for name in set(lay.tokenizers)}
    by_language, truncated = [], 0
    for language, (column, name) in enumerate(zip(lay.columns, lay.tokenizers, strict=True)):
        lines = texts[column][:limit] if limit else texts[column]
        if rewrite is not None:
            lines = rewrite(language, list(lines))
        ids = tokenizers[name](lines, add_special_tokens=False)["input_ids"]
        rows = []
        for row in ids:
            rows.append(torch.tensor(row[: max_length - 2], dtype=torch.long))
            truncated += len(row) > max_length - 2
        by_language.append(rows)
    if truncated:
        log.warning("%d verses longer than max_length=%d wordpieces were truncated",
                    truncated, max_length)
    return by_language, truncated
