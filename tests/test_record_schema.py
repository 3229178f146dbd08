"""The record schema (multilab.studies.record_schema): every committed record names its
commit, date, command, device and model, or says in ``provenance.unbacked`` why it cannot."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from multilab.cli import main
from multilab.studies.record_schema import check_document, check_records

ROOT = Path(__file__).resolve().parents[1]

GOOD = {"schema": 1, "kind": "evaluate", "qualifier": "", "config": {"profile": "quick"},
        "model": {"modification": "original", "seed": 42, "fingerprint": "0123456789abcdef",
                  "profile": "quick"},
        "provenance": {"commit": "61d7255", "date": "2026-12-07T09:00:00+00:00",
                       "command": "multilab evaluate artifacts/models/original/seed42",
                       "machine": {"device": "cpu: AMD EPYC"}},
        "result": {"metrics": {"mu": 0.2}}}


def test_every_committed_record_passes_the_schema() -> None:
    """What CI runs: the committed results/ as a whole (README's test command runs this)."""
    problems = [problem.line() for problem in check_records(ROOT / "results")]
    assert problems == []


def test_a_gap_is_named_by_file_and_field(tmp_path: Path) -> None:
    record = copy.deepcopy(GOOD)
    record["provenance"]["commit"] = None
    del record["provenance"]["command"]
    record["model"]["fingerprint"] = None
    assert check_document(tmp_path / "r.json", GOOD) == []
    fields = [problem.field for problem in check_document(tmp_path / "r.json", record)]
    assert sorted(fields) == ["model.fingerprint", "provenance.command", "provenance.commit"]


def test_an_unbacked_mark_accepts_only_the_gaps_it_names(tmp_path: Path) -> None:
    record = copy.deepcopy(GOOD)
    record["provenance"]["commit"] = None
    reason = "the run's commit is named nowhere in its source file"
    record["provenance"]["unbacked"] = {"fields": ["provenance.commit"], "reason": reason}
    assert check_document(tmp_path / "r.json", record) == []
    record["provenance"]["unbacked"]["fields"].append("provenance.date")  # it has one
    problems = check_document(tmp_path / "r.json", record)
    assert [p.field for p in problems] == ["provenance.unbacked"]
    assert "provenance.date" in problems[0].message
    record["provenance"]["unbacked"] = {"fields": ["provenance.commit"], "reason": ""}
    assert [p.field for p in check_document(tmp_path / "r.json", record)] == [
        "provenance.unbacked.reason"]


def test_a_record_of_no_single_model_names_its_profile(tmp_path: Path) -> None:
    record = copy.deepcopy(GOOD) | {"model": None, "kind": "spaces"}
    assert check_document(tmp_path / "r.json", record) == []
    record["config"] = {}
    assert [p.field for p in check_document(tmp_path / "r.json", record)] == ["config.profile"]


def test_records_check_exits_2_with_one_line_per_bad_field(tmp_path: Path, capsys) -> None:
    results = tmp_path / "results"
    good = results / "x" / "original" / "seed42-0123456789abcdef" / "evaluate.json"
    good.parent.mkdir(parents=True)
    good.write_text(json.dumps(GOOD))
    assert main(["records", "check", str(results)]) == 0
    bad = copy.deepcopy(GOOD)
    bad["provenance"]["date"] = "yesterday"
    bad["model"]["seed"] = "42"
    (good.parent / "train.json").write_text(json.dumps(bad))
    (results / "notes.txt").write_text("a stray file")
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        main(["records", "check", str(results)])
    assert stopped.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"{results / 'notes.txt'}: (file): neither a .json record, the run "
                     "ledger nor the lanes' list",
                     f"{good.parent / 'train.json'}: model.seed: '42' is not of type 'integer'",
                     f"{good.parent / 'train.json'}: provenance.date: 'yesterday' does not "
                     "match '^\\\\d{4}-\\\\d{2}-\\\\d{2}T\\\\d{2}:\\\\d{2}:\\\\d{2}(\\\\.\\\\d+)?"
                     "(Z|[+-]\\\\d{2}:\\\\d{2})$'"]


def test_the_lanes_list_is_checked_line_by_line(tmp_path: Path) -> None:
    """scripts/lanes.sh writes results/lanes.tsv: five tab-separated fields a lane."""
    lanes = tmp_path / "lanes.tsv"
    lanes.write_text("1\tvm\t2026-12-07T09:29:19Z\t\tmultilab study run s\n"
                     "two\tvm\t2026-12-07T09:29:19Z\t\tmultilab study run s\n"
                     "3\tvm\tmultilab study run s\n")
    assert [p.line() for p in check_records(tmp_path)] == [
        f"{lanes}: (line {n}): not a lane: lane number, host, start, checkpoint and command, "
        "tab-separated" for n in (2, 3)]


def test_the_ledger_s_empty_lock_is_no_problem_but_a_full_one_is(tmp_path: Path) -> None:
    """Every `study run` leaves results/.ledger.csv.lock (FileLock's empty file): `records
    check` named it "neither a .json record …" and exited 2 on a working checkout."""
    from multilab.studies.ledger import LEDGER_LOCK

    (tmp_path / LEDGER_LOCK).write_text("")
    assert list(check_records(tmp_path)) == []
    (tmp_path / LEDGER_LOCK).write_text("not a lock")
    assert [p.field for p in check_records(tmp_path)] == ["(file)"]
