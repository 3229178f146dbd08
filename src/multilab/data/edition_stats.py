"""Statistics of every edition in the Bible DB, as the lab's BERT pipeline sees it.

For each edition: verses with text (placeholders such as ``-`` for a merged verse do not
count, :func:`multilab.data.parallel.has_text`), words and word types
(:func:`multilab.lab.enfake.bert_words`: what a word is depends on the script, see
:mod:`multilab.data.parallel`), distinct characters, the median words per verse, the New
Testament's words (the train corpus of a real-language study) and the scripts of its letters.

Regenerate docs/CORPORA.md's table (it replaces only the text between the markers)::

    flock /tmp/multilab-heavy.lock python -m multilab.data.edition_stats --out docs/CORPORA.md

``multilab corpus editions [--edition CODE ...]`` prints the same table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from multilab.data.bible import check_edition
from multilab.data.parallel import NEW_TESTAMENT, Verse, book_of, has_text, read_edition
from multilab.errors import UserError
from multilab.files import write_text
from multilab.lab.enfake import bert_words
from multilab.lab.languages import EDITIONS

BEGIN = "<!-- edition-stats:begin -->"
END = "<!-- edition-stats:end -->"
#: A script is named when at least this share of an edition's letters is in it.
SCRIPT_SHARE = 0.05


@dataclass(frozen=True)
class EditionStats:
    code: str
    iso: str
    name: str
    verses: int
    placeholders: int
    words: int
    types: int
    characters: int
    median_words: float
    nt_words: int
    scripts: str


def script_of(ch: str) -> str:
    """The script of a letter, from its Unicode name (``LATIN``, ``ARABIC``, ``CJK``...)."""
    name = unicodedata.name(ch, "")
    return name.split(" ", 1)[0] if name else "UNKNOWN"


def letter_scripts(texts: Sequence[str]) -> str:
    """The scripts holding at least :data:`SCRIPT_SHARE` of the letters, most used first."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(script_of(ch) for ch in text if unicodedata.category(ch).startswith("L"))
    total = sum(counts.values()) or 1
    return " + ".join(
        s.capitalize() if s != "CJK" else s
        for s, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        if n / total >= SCRIPT_SHARE
    )


def edition_stats(code: str, verses: Sequence[Verse]) -> EditionStats:
    """The statistics of one edition's verses."""
    kept = [(vid, text) for vid, text in verses if has_text(text)]
    texts = [text for _, text in kept]
    per_verse = [bert_words(text) for text in texts]
    nt = [
        len(words)
        for (vid, _), words in zip(kept, per_verse, strict=True)
        if NEW_TESTAMENT[0] <= book_of(vid) <= NEW_TESTAMENT[1]
    ]
    words = Counter(w for ws in per_verse for w in ws)
    return EditionStats(
        code=code,
        iso=EDITIONS[code][0],
        name=EDITIONS[code][1],
        verses=len(texts),
        placeholders=len(verses) - len(texts),
        words=sum(words.values()),
        types=len(words),
        characters=len({ch for w in words for ch in w}),
        median_words=float(statistics.median(len(ws) for ws in per_verse)) if texts else 0.0,
        nt_words=sum(nt),
        scripts=letter_scripts(texts),
    )


def stats_table(stats: Sequence[EditionStats]) -> str:
    """Markdown table, one edition a row."""
    rows = [
        "| code | ISO | edition | scripts | verses | placeholders | words | types | "
        "characters | median words/verse | NT words |",
        "|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for s in stats:
        rows.append(
            f"| `{s.code}` | {s.iso} | {s.name} | {s.scripts} | {s.verses:,} | "
            f"{s.placeholders:,} | {s.words:,} | {s.types:,} | {s.characters:,} | "
            f"{s.median_words:g} | {s.nt_words:,} |"
        )
    return "\n".join(rows)


def replace_table(document: str, table: str) -> str:
    """``document`` with the text between :data:`BEGIN` and :data:`END` set to ``table``."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        raise UserError(f"the document has no {BEGIN} … {END} markers to put the table between")
    return f"{document[: start + len(BEGIN)]}\n{table}\n{document[end:]}"


def editions_table(codes: Sequence[str], data_dir: Path | None = None) -> str:
    """The statistics table of ``codes`` (every edition when empty); UserError for a bad code."""
    codes = list(codes) or list(EDITIONS)
    for code in codes:
        check_edition(code)
    return stats_table([edition_stats(code, read_edition(code, data_dir)) for code in codes])


def _document(out: Path) -> str:
    """The markdown file to put the table in (checked before the minutes of counting)."""
    document = out.read_text(encoding="utf-8") if out.exists() else f"{BEGIN}\n{END}\n"
    try:
        replace_table(document, "")
    except UserError as err:
        raise UserError(f"{out}: {err}") from err
    return document


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, help="markdown file whose marked table to replace")
    parser.add_argument("--data", type=Path, default=Path("data"), help="export directory")
    parser.add_argument("editions", nargs="*", help="edition codes (default: all)")
    args = parser.parse_args(argv)
    try:
        document = _document(args.out) if args.out else ""
        table = editions_table(args.editions, args.data)
    except UserError as err:  # one line, exit 2, nothing written (as `multilab` does)
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.out is None:
        print(table)
    else:
        write_text(args.out, replace_table(document, table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
