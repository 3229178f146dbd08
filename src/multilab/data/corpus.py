"""Raw verse exports (``data/``) → cleaned, sentence-split, tokenized corpora, and their stats.

Deterministic from the exports to the last byte: DVC's hashes of ``train.txt`` and
``dev.txt`` (part of every model's data fingerprint) do not change on a rebuild.
"""

from __future__ import annotations

import functools
import itertools
import re
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from multilab.config import Config, CorpusConfig
from multilab.data.bible import load_export, squeeze_spaces
from multilab.errors import UserError
from multilab.files import read_utf8, write_text

if TYPE_CHECKING:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

#: The paper's corpus statistics (Dufter & Schütze 2020 §2.1) for comparison.
PAPER_STATS = {
    "sentences": 17178,
    "words": 228000,
    "vocabulary": 4449,
    "characters": 71,
    "median_length": 12,
}

_REMOVED = re.compile(r"[“”‘’()\[\]\"]")
_CLAUSE_BREAK = re.compile(r"(?<=\s[;:])\s+")
#: ``split_clauses``: a cut after a comma that an English conjunction or relative pronoun
#: follows, which gives the Basic English NT the paper's length profile from the same words
#: (16,384 sentences of median 12; the paper 17,178 of 12: docs/notes/paper-setup-diff.md §4.1)
_CLAUSE_START = re.compile(r"(?<=\s,)\s+(?=(?:and|but|for|so|then|because|who|which|that)\s)")


def clean_verse(text: str) -> str:
    """Drop quotes and brackets (as the paper), normalise whitespace."""
    return squeeze_spaces(_REMOVED.sub(" ", text))


class SentenceSplitter:
    """Punkt trained on the corpus itself (no ``nltk.download``) + NLTK word tokenizer."""

    def __init__(self, verses: list[str], split_colons: bool = False,
                 split_clauses: bool = False) -> None:
        # imported here: NLTK costs every `multilab train`/`evaluate` process a second of CPU
        from nltk.tokenize import NLTKWordTokenizer

        self.punkt = _trained_punkt("\n".join(verses))
        self.words = NLTKWordTokenizer()
        self.breaks = [rule for rule, on in ((_CLAUSE_BREAK, split_colons),
                                             (_CLAUSE_START, split_clauses)) if on]

    def __call__(self, verse: str) -> Iterator[str]:
        for sentence in self.punkt.tokenize(verse):
            parts = [" ".join(self.words.tokenize(sentence))]
            for rule in self.breaks:
                parts = [piece for part in parts for piece in rule.split(part)]
            yield from (part.strip() for part in parts if part.strip())


@functools.lru_cache(maxsize=2)
def _trained_punkt(text: str) -> PunktSentenceTokenizer:
    """Punkt trained on ``text``: seconds of CPU, so the same verses split several ways (with
    and without ``split_colons``) train it once per process. Tokenizing does not change it."""
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    return PunktSentenceTokenizer(text)


def build_sentences(verses: list[str], split_colons: bool, split_clauses: bool = False,
                    limit: int | None = None) -> list[str]:
    """Cleaned verses → tokenized sentences (space-separated words, punctuation split); the
    first ``limit`` of them (Punkt still learns from every verse, so they are the same)."""
    cleaned = [clean_verse(v) for v in verses]
    cleaned = [v for v in cleaned if v]
    splitter = SentenceSplitter(cleaned, split_colons, split_clauses)
    sentences = (s for verse in cleaned for s in splitter(verse))
    return list(itertools.islice(sentences, limit))


@dataclass(frozen=True)
class CorpusStats:
    sentences: int
    words: int
    vocabulary: int
    characters: int
    median_length: float

    @classmethod
    def of(cls, sentences: Iterable[str]) -> CorpusStats:
        tokenized = [s.split() for s in sentences]
        words = [w for s in tokenized for w in s]
        return cls(
            sentences=len(tokenized),
            words=len(words),
            vocabulary=len(set(words)),
            characters=len({ch for w in words for ch in w}),
            median_length=float(statistics.median(len(s) for s in tokenized)) if tokenized else 0,
        )

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def build_corpora(cfg: CorpusConfig, data_dir: Path, out_dir: Path) -> dict[str, CorpusStats]:
    """Write ``train.txt`` and ``dev.txt`` (one tokenized sentence a line); return stats."""
    train_verses = load_export(data_dir, cfg.train_edition, cfg.train_books)
    dev_verses = load_export(data_dir, cfg.dev_edition, cfg.dev_books)
    train = build_sentences(train_verses, cfg.split_colons, cfg.split_clauses)
    # dev is the paper's procedure exactly (same KJV, NLTK only): the splits are train options
    dev = build_sentences(dev_verses, split_colons=False, limit=cfg.dev_sentences)
    if len(dev) < cfg.dev_sentences:
        raise UserError(
            f"dev corpus has {len(dev)} sentences, fewer than corpus.dev_sentences="
            f"{cfg.dev_sentences}"
        )
    write_text(out_dir / "train.txt", "".join(s + "\n" for s in train))
    write_text(out_dir / "dev.txt", "".join(s + "\n" for s in dev))
    return {"train": CorpusStats.of(train), "dev": CorpusStats.of(dev)}


def corpus_stats(corpora_dir: Path) -> dict[str, CorpusStats]:
    """Statistics of the built ``train.txt`` / ``dev.txt`` (read only: DVC owns those files)."""
    return {
        name: CorpusStats.of(read_lines(corpora_dir / f"{name}.txt")) for name in ("train", "dev")
    }


def training_lines(cfg: Config) -> list[str]:
    """The training sentences models see: ``train.txt``, cut to ``train.max_train_sentences``."""
    lines = read_lines(cfg.paths.corpora / "train.txt")
    return lines[: cfg.train.max_train_sentences] if cfg.train.max_train_sentences else lines


def read_lines(path: Path) -> list[str]:
    """Non-empty lines of a corpus file; a clear error if it is missing or empty."""
    if not path.exists():
        raise UserError(f"corpus file {path} not found; run `dvc repro corpus` first")
    text = read_utf8(path, "rebuild it with `dvc repro corpus` (or `multilab corpus build`)")
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise UserError(f"corpus file {path} is empty")
    return lines


def verse_stats_table(stats: dict[str, dict[str, float]]) -> str:
    """Markdown table of a real-language study's corpora: one row per split and language
    (words as the BERT pre-tokenizer cuts them; a sentence is a verse)."""
    keys = ("sentences", "words", "vocabulary", "characters", "median_length")
    rows = ["| corpus | verses | words | types | characters | median words/verse |",
            "|---|--:|--:|--:|--:|--:|"]
    for name, values in stats.items():
        rows.append(f"| {name} | " + " | ".join(f"{values[k]:g}" for k in keys) + " |")
    return "\n".join(rows)


def stats_table(stats: dict[str, CorpusStats]) -> str:
    """Markdown table of our statistics beside the paper's."""
    rows = ["| statistic | train (ours) | paper train | dev (ours) |", "|---|---|---|---|"]
    for key, paper in PAPER_STATS.items():
        rows.append(
            f"| {key} | {getattr(stats['train'], key):g} | {paper:g} | "
            f"{getattr(stats['dev'], key):g} |"
        )
    return "\n".join(rows)
