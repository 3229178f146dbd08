"""The run ledger: a run booked by a live runner is skipped by another; stale bookings (a dead
process here, an old one from elsewhere) are taken over; a runner releases what it booked."""

from __future__ import annotations

import os
import re
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from multilab.errors import UserError
from multilab.studies import ledger
from multilab.studies.ledger import Booking, book, read_ledger, release
from multilab.studies.runner import Step, run_study
from multilab.studies.spec import load_study
from tests.test_studies import CLAIMS, _spec


def _other(results: Path, by: str, since: datetime) -> None:
    ledger._write(results, [Booking("s", "original", 0, by,
                                    since.replace(microsecond=0).isoformat())])


def test_a_live_booking_is_respected_and_a_stale_one_taken_over(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    host = socket.gethostname()
    _other(tmp_path, f"{host} pid {os.getppid()}", now)  # alive: our parent process
    held = book(tmp_path, "s", "original", 0)
    assert held is not None and held.by == f"{host} pid {os.getppid()}"
    _other(tmp_path, f"{host} pid 999999999", now)  # no such process on this machine
    assert book(tmp_path, "s", "original", 0) is None
    assert [b.by for b in read_ledger(tmp_path)] == [ledger.me()]
    _other(tmp_path, "elsewhere pid 1", now - timedelta(hours=1))  # another machine, fresh
    assert book(tmp_path, "s", "original", 0) is not None
    _other(tmp_path, "elsewhere pid 1", now - timedelta(hours=ledger.STALE_HOURS + 1))
    assert book(tmp_path, "s", "original", 0) is None


def test_release_drops_only_this_runners_booking(tmp_path: Path) -> None:
    _other(tmp_path, "elsewhere pid 1", datetime.now(UTC))
    assert book(tmp_path, "s", "lang-pos", 1) is None
    release(tmp_path, "s", "lang-pos", 1)
    release(tmp_path, "s", "original", 0)  # not ours: kept
    assert [(b.row, b.by) for b in read_ledger(tmp_path)] == [("original", "elsewhere pid 1")]


def test_the_runner_skips_a_booked_run_and_releases_its_own(tmp_path: Path) -> None:
    """Two runners of one study share its work: the run another holds is skipped, the
    ledger is empty (no file) once this runner's runs are done, even after a failure."""
    study = load_study(_spec(tmp_path), CLAIMS)
    original, lang_pos = study.rows
    results = tmp_path / "results"
    ledger._write(results, [Booking(study.name, "original", 0, "elsewhere pid 1",
                                    datetime.now(UTC).replace(microsecond=0).isoformat())])
    calls: list[list[str]] = []

    def command(argv: list[str]) -> int:
        calls.append([a for a in argv if not a.startswith("--set")])
        if argv[-1] == "build":  # what corpus build leaves, so vocab and train follow
            (tmp_path / "artifacts" / "studies" / study.name / "corpora").mkdir(parents=True)
            (tmp_path / "artifacts" / "studies" / study.name / "corpora" / "train.txt").touch()
        return 0

    said: list[str] = []
    run_study(study, [Step(original, 0), Step(lang_pos, 0)], command, tmp_path, said.append,
              results=results)
    assert any("original seed 0 skipped: under way by elsewhere pid 1" in s for s in said)
    trained = [c for c in calls if c[0] == "train"]
    assert trained == [["train", "--modification", "lang-pos", "--seed", "0"]]
    assert [b.row for b in read_ledger(results)] == ["original"]  # ours released

    def failing(argv: list[str]) -> int:
        return 1 if "train" in argv else 0

    ledger._write(results, [])
    with pytest.raises(UserError, match="`multilab train --modification lang-pos --seed 1` "
                       "failed"):
        run_study(study, [Step(lang_pos, 1)], failing, tmp_path, said.append, results=results)
    assert not (results / ledger.LEDGER).exists()


def test_a_row_with_a_script_is_run_by_it_for_each_missing_seed(tmp_path: Path) -> None:
    """A similarity row (two models: the runner cannot train it) names the command that
    writes its records: ``study run`` plans the seeds it lacks, runs the command from the
    project root with the seed filled in, booked in the ledger and released, and stops on
    its failure in one line naming the command."""
    import sys
    from dataclasses import replace

    from multilab.studies.runner import missing_runs

    script = f"{sys.executable} -c \"open('ran-{{seed}}', 'w')\""
    study = load_study(_spec(tmp_path, languages=["3", "l"], seeds=[42, 43],
                             metrics=["similarity.cka.best"], claims=[], rows=[
                                 {"label": "English–French", "modification": "original",
                                  "script": script}]), CLAIMS)
    steps = missing_runs(study, [])
    assert [(step.row.label, step.seed) for step in steps] == [("English–French", 42),
                                                                ("English–French", 43)]
    results = tmp_path / "results"

    def command(argv: list[str]) -> int:  # nothing of multilab's own is run
        raise AssertionError(argv)

    said: list[str] = []
    run_study(study, steps, command, tmp_path, said.append, results=results)
    assert (tmp_path / "ran-42").exists() and (tmp_path / "ran-43").exists()
    assert any("English–French seed 43: " in line for line in said)
    assert not (results / ledger.LEDGER).exists()
    broken = replace(study.rows[0], script="false {seed}")
    with pytest.raises(UserError, match=r"`false 43` failed \(exit 1"):
        run_study(study, [Step(broken, 43)], command, tmp_path, said.append, results=results)
    assert not (results / ledger.LEDGER).exists()
    with pytest.raises(UserError, match=re.escape("script 'run.sh': a command with {seed} in")):
        load_study(_spec(tmp_path, rows=[{"modification": "original", "script": "run.sh"}]),
                   CLAIMS)


def test_a_stopped_lanes_bookings_are_released_but_the_committed_ones(tmp_path: Path) -> None:
    """Before a lane restarts, its host's bookings go (its processes are all gone, a
    recycled pid would make one look live), except those its commit's ledger has; other
    hosts' stay."""
    results = tmp_path / "results"
    here = socket.gethostname()
    committed = ledger.Booking("s", "kept", 1, f"{here} pid 1", "2026-12-01T00:00:00+00:00")
    ledger._write(results, [
        committed,
        ledger.Booking("s", "mine", 1, f"{here} pid {os.getpid()}", "2026-12-01T00:00:00+00:00"),
        ledger.Booking("s", "other", 1, "elsewhere pid 5", "2026-12-01T00:00:00+00:00")])
    keep = tmp_path / "committed.csv"
    keep.write_text(f"study,row,seed,by,since\ns,kept,1,{here} pid 1,{committed.since}\n")
    assert ledger.main(["release", str(results), here, str(keep)]) == 0
    assert [b.row for b in ledger.read_ledger(results)] == ["kept", "other"]
    assert [b.row for b in ledger.release_host(results, "elsewhere")] == ["other"]
    assert ledger.main(["release"]) == 2


def test_a_booking_of_this_machine_expires_by_age_though_its_pid_lives(tmp_path: Path) -> None:
    """A pid of this machine that is alive may belong to another program (pids are reused):
    the age limit applies on every host, not only to other machines' bookings."""
    host = socket.gethostname()
    _other(tmp_path, f"{host} pid {os.getppid()}",
           datetime.now(UTC) - timedelta(hours=ledger.STALE_HOURS + 1))
    assert book(tmp_path, "s", "original", 0) is None
    assert [b.by for b in read_ledger(tmp_path)] == [ledger.me()]


def test_a_merge_conflicted_ledger_reads_both_sides(tmp_path: Path) -> None:
    """git merged two sessions' ledgers with a conflict: the markers are passed over, both
    sides' bookings are kept, and the next booking writes the file whole."""
    since = datetime.now(UTC).replace(microsecond=0).isoformat()
    (tmp_path / ledger.LEDGER).write_text(
        "study,row,seed,by,since\n<<<<<<< HEAD\n"
        f"s,original,0,elsewhere pid 1,{since}\n=======\n"
        f"s,lang-pos,1,yonder pid 2,{since}\n>>>>>>> lane2\n")
    assert [(b.row, b.by) for b in read_ledger(tmp_path)] == [
        ("original", "elsewhere pid 1"), ("lang-pos", "yonder pid 2")]
    assert book(tmp_path, "s", "original", 0) is not None  # the other side's, still live
    assert book(tmp_path, "s", "original", 1) is None
    text = (tmp_path / ledger.LEDGER).read_text()
    assert "<<<" not in text and len(text.splitlines()) == 4


def test_a_runner_with_an_out_of_date_plan_does_not_measure_again(tmp_path: Path) -> None:
    """The plan was made before another runner finished a (row, seed) and released it: once
    booked, the step is planned again from the records, skipped and released, its record
    not rewritten."""
    from multilab.studies.records import iter_records, write_record
    from multilab.studies.runner import missing_runs
    from tests.test_studies import _model_config

    study = load_study(_spec(tmp_path), CLAIMS)
    results = tmp_path / "results"
    steps = [step for step in missing_runs(study, []) if step.seed == 0]
    assert [step.row.label for step in steps] == ["original", "lang-pos"]
    record = write_record(results, "multilab-smoke", "evaluate",  # the other runner's
                          {"metrics": {"mu": 0.2, "retrieval_p1.l0": 0.1,
                                       "retrieval_p1.l8": 0.3}},
                          model={"modification": "original", "seed": 0, "fingerprint": "f"},
                          config=_model_config("smoke", "3,fake"))
    written = record.read_bytes()
    assert [s.row.label for s in missing_runs(study, iter_records(results))
            if s.seed == 0] == ["lang-pos"]
    calls: list[list[str]] = []

    def command(argv: list[str]) -> int:
        calls.append([a for a in argv if not a.startswith("--set")])
        if argv[-1] == "build":
            (tmp_path / "artifacts" / "studies" / study.name / "corpora").mkdir(parents=True)
            (tmp_path / "artifacts" / "studies" / study.name / "corpora" / "train.txt").touch()
        return 0

    said: list[str] = []
    run_study(study, steps, command, tmp_path, said.append, results=results)
    assert next(c for c in calls if c[0] in ("train", "evaluate")) == [
        "train", "--modification", "lang-pos", "--seed", "0"]
    assert not any("original" in c for c in calls if c[0] == "train")
    assert any("original seed 0 skipped: its records were written since the plan" in line
               for line in said)
    assert record.read_bytes() == written and not (results / ledger.LEDGER).exists()
