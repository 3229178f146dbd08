"""docs/RELIABILITY.md stays true to the tests: every case it lists names a test that exists,
the page stays within its length, lists at least 50 cases, and none is left open.

A case is a row of one of its tables (``| case | what happens | test |``). Its test cell names
``test_x.py::test_name`` (``[…]``: a parametrised case), ``::test_other`` of the same file, a
whole ``test_x.py``, or says "the same test" (the row above's).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "RELIABILITY.md"
#: the page's own limit: a table per surface, terse
MAX_LINES = 250
MIN_CASES = 50
#: `test_x.py::name[…]`, `::name`, `test_x.py`
REFERENCE = re.compile(r"`(?P<file>test_\w+\.py)?(?:::(?P<name>\w+))?(?:\[[^\]`]*\])?`")


def cases(text: str) -> list[tuple[int, list[str]]]:
    """(line number, cells) of each table row that is a case: not a header, not a rule."""
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            continue
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if cells[0] == "case" or set("".join(cells)) <= set("-: "):
            continue
        rows.append((number, cells))
    return rows


def references(cell: str) -> list[tuple[str, str | None]]:
    """The (file, test name or None: the whole file) a test cell names, in order."""
    found, current = [], None
    for match in REFERENCE.finditer(cell):
        current = match["file"] or current
        if current is None or not (match["file"] or match["name"]):
            continue
        found.append((current, match["name"]))
    return found


def test_every_case_names_a_test_that_exists() -> None:
    missing, unnamed = [], []
    for number, cells in cases(DOC.read_text(encoding="utf-8")):
        test_cell = cells[-1]
        named = references(test_cell)
        if not named and not test_cell.startswith("the same test"):
            unnamed.append(f"line {number}: {test_cell!r}")
        for file, name in named:
            path = ROOT / "tests" / file
            if not path.is_file():
                missing.append(f"line {number}: tests/{file}")
            elif name and not re.search(rf"^def {name}\(", path.read_text(encoding="utf-8"),
                                        re.MULTILINE):
                missing.append(f"line {number}: tests/{file}::{name}")
    assert not unnamed, f"cases naming no test: {unnamed}"
    assert not missing, f"tests the page names but the tests lack: {missing}"


def test_the_page_lists_enough_cases_none_open_within_its_length() -> None:
    text = DOC.read_text(encoding="utf-8")
    rows = cases(text)
    assert len(text.splitlines()) <= MAX_LINES
    assert len(rows) >= MIN_CASES, f"{len(rows)} cases listed"
    still_open = [number for number, cells in rows
                  if any(re.search(r"\b(open|todo|tbd|not yet)\b", cell, re.IGNORECASE)
                         for cell in cells)]
    assert not still_open, f"open cases on lines {still_open}"
    assert all(len(cells) == 3 for _, cells in rows), "a row of other than three cells"


def test_the_reference_parser_reads_the_page_s_forms() -> None:
    """The forms above, so that a change of style cannot pass the checks by reading none."""
    assert references("`test_a.py::test_b[x-…]`, `::test_c`, `test_d.py`") == [
        ("test_a.py", "test_b"), ("test_a.py", "test_c"), ("test_d.py", None)]
    assert references("the same test") == []
    assert cases("| case | what | test |\n|---|---|---|\n| x | y | `test_a.py` |\n") == [
        (3, ["x", "y", "`test_a.py`"])]
