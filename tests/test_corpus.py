"""Corpora from the Bible DB: deterministic counts, paper cleaning, data.dvc stays valid."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from multilab.config import CorpusConfig
from multilab.data import bible, corpus
from multilab.errors import UserError
from tests.helpers import DVC, ROOT


def test_train_and_dev_counts(built_project: Path) -> None:
    train = (built_project / "artifacts/corpora/train.txt").read_text().splitlines()
    dev = (built_project / "artifacts/corpora/dev.txt").read_text().splitlines()
    assert len(dev) == 10000
    assert len(train) == 11731  # NT of edition 3, Punkt + the ';'/':' split (README)
    assert all(line.strip() for line in train + dev)
    assert dev[0] == "In the beginning God created the heaven and the earth ."


def test_quotes_and_brackets_removed_and_punctuation_split(built_project: Path) -> None:
    text = (built_project / "artifacts/corpora/train.txt").read_text()
    for char in "“”‘’()[]\"":
        assert char not in text
    assert " , " in text and " ." in text


def test_clean_verse() -> None:
    # removed characters become spaces; whitespace is then normalised
    assert corpus.clean_verse('He said, “Go (now)”  [to] "them".') == "He said, Go now to them ."


@pytest.mark.slow  # punkt over the New Testament, three times
def test_punkt_only_split_matches_the_measured_count(built_project: Path) -> None:
    verses = bible.load_export(built_project / "data", "3", (40, 66))
    plain = corpus.build_sentences(verses, split_colons=False)
    stats = corpus.CorpusStats.of(plain)
    assert stats.sentences == 9009 and stats.median_length == 24
    colons = corpus.CorpusStats.of(corpus.build_sentences(verses, split_colons=True))
    assert colons.words == stats.words  # the same words, cut into more sentences
    # split_clauses: the paper's length profile (17,178 sentences of median 12) from these words
    clauses = corpus.CorpusStats.of(corpus.build_sentences(verses, True, split_clauses=True))
    assert (clauses.sentences, clauses.median_length) == (16384, 12)
    assert clauses.words == stats.words


def test_split_clauses_cuts_after_a_comma_before_a_conjunction_only() -> None:
    verses = ["And he said , Go ; and they went , for the day was near , the day of God ."]
    splitter = corpus.SentenceSplitter(verses, split_colons=True, split_clauses=True)
    assert list(splitter(verses[0])) == ["And he said , Go ;", "and they went ,",
                                         "for the day was near , the day of God ."]
    plain = corpus.SentenceSplitter(verses, split_colons=True)
    assert list(plain(verses[0])) == ["And he said , Go ;",
                                      "and they went , for the day was near , the day of God ."]


def test_export_is_byte_for_byte_deterministic(tmp_path: Path, built_project: Path) -> None:
    path = bible.export_edition("3", tmp_path)
    ours = hashlib.md5(path.read_bytes()).hexdigest()
    theirs = hashlib.md5((built_project / "data/bible/3.tsv").read_bytes()).hexdigest()
    assert ours == theirs
    first = path.read_text().splitlines()[0]
    assert first.startswith("01.001.001\t")


def test_export_of_another_language(tmp_path: Path) -> None:
    lines = bible.export_edition("s", tmp_path).read_text().splitlines()
    assert len(lines) == 31102
    assert lines[0].split("\t")[0] == "01.001.001"


def test_unknown_edition_names_the_valid_codes(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"unknown Bible edition 'q'; valid: 1, 2, 3"):
        bible.export_edition("q", tmp_path)


def test_missing_corpus_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="missing or empty"):
        corpus.build_corpora(CorpusConfig(), tmp_path, tmp_path / "out")
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(UserError, match="is empty"):
        corpus.read_lines(tmp_path / "empty.txt")


@pytest.mark.slow  # every Bible edition exported again, then `dvc add`
def test_regenerated_data_matches_data_dvc(tmp_path: Path) -> None:
    """The set-up command regenerates data/ with the md5 recorded in data.dvc."""
    shutil.copy(ROOT / "data.dvc", tmp_path / "data.dvc")
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    subprocess.run([DVC, "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    subprocess.run(
        [sys.executable, "-m", "multilab", "corpus", "export"], cwd=tmp_path, check=True
    )
    # set-up re-adds data/ (a fresh clone has an empty cache): data.dvc must not change
    subprocess.run([DVC, "add", "-q", "data"], cwd=tmp_path, check=True)
    assert (tmp_path / "data.dvc").read_text() == (ROOT / "data.dvc").read_text()
    status = subprocess.run(
        [DVC, "status", "data.dvc"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert "up to date" in status.stdout, status.stdout


def test_stats_table_shows_the_paper_beside_ours(built_project: Path) -> None:
    stats = {
        name: corpus.CorpusStats.of(
            (built_project / f"artifacts/corpora/{name}.txt").read_text().splitlines()
        )
        for name in ("train", "dev")
    }
    table = corpus.stats_table(stats)
    assert "| sentences | 11731 | 17178 | 10000 |" in table


def test_stats_command_prints_and_records_without_rewriting(
    built_project: Path, tmp_path: Path, capsys
) -> None:
    from multilab.cli import main

    corpora = built_project / "artifacts" / "corpora"
    before = {p.name: p.stat().st_mtime_ns for p in corpora.iterdir()}
    settings = ["profile=smoke", f"paths.artifacts={built_project / 'artifacts'}",
                f"paths.metrics={tmp_path}"]
    assert main([*(f"--set={s}" for s in settings), "corpus", "stats"]) == 0
    assert "| median_length | 18 | 12 | 27 |" in capsys.readouterr().out
    recorded = json.loads((tmp_path / "corpus.json").read_text())
    assert recorded["train"]["words"] == 227970 and recorded["paper"]["vocabulary"] == 4449
    assert {p.name: p.stat().st_mtime_ns for p in corpora.iterdir()} == before
