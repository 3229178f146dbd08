"""Per-edition statistics: counts by the BERT pipeline's words, scripts, the docs table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from multilab.data import bible
from multilab.data.edition_stats import (
    BEGIN,
    END,
    edition_stats,
    letter_scripts,
    main,
    replace_table,
    stats_table,
)
from multilab.errors import UserError
from tests.helpers import ROOT, subprocess_env

TOY = [
    ("01.001.001", "In the beginning, God."),
    ("01.001.002", "-"),
    ("40.001.001", "God is God"),
]


def test_counts_skip_placeholders_and_split_punctuation() -> None:
    stats = edition_stats("3", TOY)
    assert (stats.verses, stats.placeholders) == (2, 1)
    assert stats.words == 6 + 3  # In the beginning , God .  |  God is God
    assert stats.types == 7 and stats.nt_words == 3
    assert stats.median_words == 4.5 and stats.scripts == "Latin"
    assert stats.characters == len(set("Inthebeginning,God.is")) == 14


@pytest.mark.parametrize(
    ("code", "scripts"),
    [("c", "CJK"), ("j", "Hiragana + CJK + Katakana"), ("y", "Arabic"), ("p", "Arabic"),
     ("n", "Hangul"), ("r", "Cyrillic"), ("i", "Devanagari"), ("b", "Bengali")],
)  # fmt: skip
def test_scripts_of_real_editions(code: str, scripts: str) -> None:
    assert letter_scripts([t for _, t in bible.read_verses(code, (43, 43))]) == scripts


def test_chinese_words_are_characters() -> None:
    stats = edition_stats("c", bible.read_verses("c", (43, 43)))
    assert stats.types <= stats.characters  # every word is one character (or punctuation)


def test_table_and_markers() -> None:
    table = stats_table([edition_stats("3", TOY)])
    row = "| `3` | en | English, Bible in Basic English 1949 | Latin | 2 | 1 | 9 | 7 | 14 | 4.5 |"
    assert row in table
    doc = f"# Corpora\n\nprose\n{BEGIN}\nstale rows\n{END}\nmore prose\n"
    new = replace_table(doc, table)
    assert new.startswith("# Corpora\n\nprose\n") and new.endswith(f"{END}\nmore prose\n")
    assert "stale rows" not in new and table in new
    assert replace_table(new, table) == new
    with pytest.raises(UserError, match="markers"):
        replace_table("no markers", table)


@pytest.mark.slow  # statistics of whole Bible editions (6–10 CPU s)
def test_command_writes_between_markers(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "CORPORA.md"
    out.write_text(f"intro\n{BEGIN}\n{END}\n")
    main(["--out", str(out), "--data", str(tmp_path), "t"])
    text = out.read_text()
    assert text.startswith(f"intro\n{BEGIN}\n| code |") and "| `t` | tr | Turkish" in text


def test_bad_edition_and_markerless_file_are_one_line_exit_2(tmp_path: Path) -> None:
    env = subprocess_env() | {"PYTHONPATH": str(ROOT / "src")}
    bad = tmp_path / "plain.md"
    bad.write_text("no markers\n")
    for args in (["q"], ["--out", str(bad), "t"]):
        run = subprocess.run(
            [sys.executable, "-m", "multilab.data.edition_stats", *args],
            env=env, capture_output=True, text=True,
        )  # fmt: skip
        assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
    assert bad.read_text() == "no markers\n"


@pytest.mark.slow  # statistics of whole Bible editions (6–10 CPU s)
def test_multilab_corpus_editions(capsys: pytest.CaptureFixture) -> None:
    from multilab.cli import main as multilab

    assert multilab(["corpus", "editions", "--edition", "t", "--edition", "h"]) == 0
    out = capsys.readouterr().out
    assert "| `t` | tr | Turkish" in out and "| `h` | sw | Swahili" in out
    assert multilab(["corpus", "editions", "--edition", "K"]) == 2
    assert "unknown Bible edition 'K'" in capsys.readouterr().err
