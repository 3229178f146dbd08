"""A session's background lanes (`multilab study next --lanes N --hours H`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from multilab.cli import main
from multilab.studies.lane_packing import (
    BESIDE_ANOTHER_LANE,
    LANE_CHECKPOINT_EVERY,
    LaneCheckpoint,
    lane_checkpoints,
    lane_command,
    lane_lines,
    measure_seconds,
    pack_lanes,
)
from multilab.studies.planning import ClaimPlan
from multilab.studies.records import Record


def _plan(claim: str, study: str, *runs: tuple[str, int], key: str | None = None
          ) -> ClaimPlan:
    """A claim's runs; ``key`` names the model of every run (two studies, one model)."""
    return ClaimPlan(claim, study, runs, tuple((key or f"{study}/{r}", s) for r, s in runs))


def test_whole_run_sets_first_then_single_models_where_they_fit() -> None:
    """Two lanes of an hour, 5 minutes of measurement a model. The cheapest set (two
    20-minute models) goes in whole, one model a lane; the 50-minute set does not fit beside
    it and waits; the set of two 30-minute models fills both lanes to the hour; no unpriced
    model is planned."""
    minutes = 60 / BESIDE_ANOTHER_LANE  # a price whose lane time is a whole minute
    plans = [_plan("cheap", "a", ("small", 1), ("small", 2)),
             _plan("slow", "a", ("big", 1)),
             _plan("pair", "a", ("mid", 1), ("mid", 2)),
             _plan("gpu", "b", ("paper", 1))]
    prices = {("a", "small"): 20 * minutes, ("a", "big"): 50 * minutes,
              ("a", "mid"): 30 * minutes, ("b", "paper"): None}
    lanes = pack_lanes(plans, prices, {"a": 5 * 60.0}, lanes=2, hours=1.0)
    assert [[job.model for job in lane.jobs] for lane in lanes] == [
        [("a/small", 1), ("a/mid", 1)], [("a/small", 2), ("a/mid", 2)]]
    assert [lane.seconds for lane in lanes] == pytest.approx([3600.0, 3600.0])  # 25 + 35 min
    every = f"--set=train.checkpoint_every={LANE_CHECKPOINT_EVERY}"
    assert lanes[0].shell() == (f"multilab {every} study run a --rows small --seeds 1; "
                                f"multilab {every} study run a --rows mid --seeds 1")
    assert not any(job.spans for lane in lanes for job in lane.jobs)  # span: off by default
    # a longer session: 'slow' fits too, and nothing the GPU needs is planned
    longer = pack_lanes(plans, prices, {"a": 5 * 60.0}, lanes=2, hours=2.0)
    planned = {job.model for lane in longer for job in lane.jobs}
    assert ("a/big", 1) in planned and ("b/paper", 1) not in planned
    # a set that cannot fit whole gives its models singly where they fit: one 50-minute
    # lane of an hour takes one model of a pair of 50-minute models
    pair = [_plan("pair", "a", ("big", 1), ("big", 2))]
    single = pack_lanes(pair, prices, {"a": 5 * 60.0}, lanes=1, hours=1.0)
    assert [job.model for job in single[0].jobs] == [("a/big", 1)]


def test_runs_that_outlive_the_hours_span_sessions_a_checkpoint_on_its_lane() -> None:
    """With ``span``, a lane with time left takes one model that does not finish (marked,
    priced at its whole time; the emptiest lane first); a model lane 2's clone has a
    checkpoint of at step 3,000 of 12,000 costs three quarters of its time, goes on lane 2
    and before any other spanning model."""
    minutes = 60 / BESIDE_ANOTHER_LANE
    plans = [_plan("cheap", "a", ("small", 1)),
             _plan("long", "a", ("paper", 1), ("paper", 2), ("paper", 3))]
    prices = {("a", "small"): 20 * minutes, ("a", "paper"): 300 * minutes}
    packed = pack_lanes(plans, prices, {"a": 0.0}, lanes=2, hours=1.0, span=True)
    assert [[(job.model, job.spans) for job in lane.jobs] for lane in packed] == [
        [(("a/small", 1), False), (("a/paper", 2), True)], [(("a/paper", 1), True)]]
    assert packed[0].seconds == pytest.approx((20 + 300) * 60)
    checkpoint = LaneCheckpoint(2, 3000, 12000, Path("ckpt"))
    packed = pack_lanes(plans, prices, {"a": 0.0}, lanes=2, hours=1.0, span=True,
                        checkpoints={("a", "paper", 3): checkpoint})
    assert [[job.model for job in lane.jobs] for lane in packed] == [
        [("a/small", 1), ("a/paper", 1)], [("a/paper", 3)]]
    assert packed[1].jobs[0].seconds == pytest.approx(225 * 60)  # 3/4 of 300 min
    lines = lane_lines(packed, 1.0)
    assert lines[0] == ("lane 1: ≈ 1.0 of 1 h, then ≈ 4.3 h more in later sessions "
                        "(bash scripts/lanes.sh resume)")
    assert "from step 3,000/12,000 (lane 2's checkpoint); spans sessions" in "\n".join(lines)


def test_lane_commands_checkpoint_every_lane_checkpoint_every_steps() -> None:
    """Every ``multilab`` of a lane's line gets the lanes' checkpoint interval, unless the
    line sets one; other commands are left alone."""
    every = f"--set=train.checkpoint_every={LANE_CHECKPOINT_EVERY}"
    assert lane_command("multilab study run a; echo multilab x && multilab train") == (
        f"multilab {every} study run a; echo multilab x && multilab {every} train")
    kept = "multilab --set train.checkpoint_every=7 study run a"
    assert lane_command(kept) == kept


def _toy_result():
    """What lane_checkpoints reads of a study result: study "toy", row original, seed 43."""
    from multilab.studies.spec import Row

    row = Row("original", "original", None, {})

    class Study:
        name = "toy"
        rows = (row,)

        @staticmethod
        def seeds_of(_row):
            return [43]

    class Result:
        study = Study

    return Result


def toy_checkpoint_area(clone: Path, fingerprint: str = "f1") -> Path:
    """Where training keeps the toy study's model's checkpoints in a lane's clone: the
    study's own artifacts folder is the run's ``paths.artifacts`` (studies.settings), and
    ``model_dir.checkpoint_area`` mirrors the model folder under it, as the lanes showed."""
    from types import SimpleNamespace

    from multilab.training.model_dir import checkpoint_area

    study = clone / "artifacts" / "studies" / "toy"
    area = checkpoint_area(SimpleNamespace(artifacts=study),
                           study / "models" / "original" / "seed43", fingerprint)
    assert area == study / "checkpoints" / "models" / "original" / "seed43" / fingerprint
    return area


def test_a_lane_checkpoint_is_found_with_its_progress(tmp_path: Path) -> None:
    """A checkpoint under lane 2's clone, where ``study run`` trains the row's model, with
    its ``progress.json``: found, the latest of its folder; one without it is not read."""
    import json

    Result = _toy_result()
    area = toy_checkpoint_area(tmp_path / "lane2")
    for step in (50, 100):
        (area / f"checkpoint-{step}").mkdir(parents=True)
    (area / "checkpoint-100" / "progress.json").write_text(json.dumps(
        {"step": 100, "total_steps": 400, "fingerprint": "f1", "step_seconds": 9.0}))
    found = lane_checkpoints(tmp_path, [Result])
    assert list(found) == [("toy", "original", 43)]
    assert found["toy", "original", 43].lane == 2 and found["toy", "original", 43].left == 0.75
    (area / "checkpoint-100" / "progress.json").unlink()
    assert lane_checkpoints(tmp_path, [Result]) == {}


def test_a_model_two_studies_read_runs_in_one_lane_trained_once() -> None:
    """Liu et al. 2020b's Tables 2 and 4 read one model: its job measures both studies, one
    after the other in the same lane (another clone would train it again), and its time has
    both studies' measurements; a row label with spaces and commas is quoted for the shell."""
    label = "original (vocab.mode union, Default anchors)"
    plans = [_plan("first", "t4", (label, 1), key="shared"),
             _plan("second", "t2", ("original", 1), key="shared")]
    prices = {("t4", label): 600.0, ("t2", "original"): 600.0}
    lanes = pack_lanes(plans, prices, {"t4": 60.0, "t2": 120.0}, lanes=2, hours=1.0)
    jobs = [job for lane in lanes for job in lane.jobs]
    assert len(jobs) == 1 and jobs[0].claims == ["first", "second"]
    assert jobs[0].runs == [("t4", label, 1, False), ("t2", "original", 1, False)]
    assert jobs[0].seconds == pytest.approx(600 * BESIDE_ANOTHER_LANE + 60 + 120)
    assert jobs[0].commands()[0] == (
        "multilab study run t4 --rows 'original (vocab.mode union, Default anchors)' --seeds 1")


def _record(path: Path, kind: str, date: str, pid: int, step_seconds: float | None = None
            ) -> Record:
    result = {"step_seconds": step_seconds} if step_seconds else {}
    return Record(path / f"{kind}.json", {
        "kind": kind, "model": {"modification": "original", "seed": 1},
        "provenance": {"date": date, "pid": pid, "machine": {"device": "cpu: x"}},
        "result": result})


def test_measurement_time_is_read_from_the_records(tmp_path: Path) -> None:
    """From a model's training record to the last record its process wrote: the median over
    a study's models; a measurement by another process (a later --again) is not counted."""
    study = tmp_path / "results" / "toy" / "original"
    records = [_record(study / "seed1-a", "train", "2026-12-01T10:00:00+00:00", 7, 1800.0),
               _record(study / "seed1-a", "evaluate", "2026-12-01T10:02:00+00:00", 7),
               _record(study / "seed1-a", "downstream", "2026-12-01T10:06:00+00:00", 7),
               _record(study / "seed1-a", "mrr", "2026-12-03T10:00:00+00:00", 99),
               _record(study / "seed2-b", "train", "2026-12-01T11:00:00+00:00", 8, 1800.0),
               _record(study / "seed2-b", "downstream", "2026-12-01T11:10:00+00:00", 8),
               _record(study / "seed3-c", "train", "2026-12-01T12:00:00+00:00", 9, 1800.0),
               _record(study / "seed3-c", "downstream", "2026-12-01T12:02:00+00:00", 9)]
    assert measure_seconds(records) == {"toy": 360.0}


def test_study_next_lanes_on_the_committed_studies(capsys) -> None:
    """The committed studies packed into two lanes: every lane within its hours (and what
    spans sessions said after them), each with the command that starts it; --shell gives
    one command line a lane; bad numbers are one line, exit 2."""
    assert main(["study", "next", "--lanes", "2", "--hours", "3"]) == 0
    out = capsys.readouterr().out
    lanes = [line for line in out.splitlines() if line.startswith("lane ")]
    assert 1 <= len(lanes) <= 2
    for line in lanes:
        planned, budget = (float(x) for x in line.split("≈ ")[1].split(" h")[0].split(" of "))
        assert 0 < planned <= budget == 3
    assert "bash scripts/background.sh lane1.log bash -c " in out
    assert main(["study", "next", "--lanes", "2", "--hours", "3", "--shell"]) == 0
    shell = capsys.readouterr().out.splitlines()
    every = f"multilab --set=train.checkpoint_every={LANE_CHECKPOINT_EVERY} study run "
    assert 1 <= len(shell) <= 2 and all(line.startswith(every) for line in shell if line)
    assert main(["study", "next", "--lanes", "0"]) == 2
    assert "--lanes 0: must be from 1 to 256" in capsys.readouterr().err
    assert main(["study", "next", "--hours", "-1"]) == 2
    assert "--hours -1: must be a number of hours > 0" in capsys.readouterr().err


def test_a_row_priced_by_a_lower_bound_is_named_not_planned(tmp_path: Path, capsys) -> None:
    """A toy study: original has a CPU training on record, lang-pos (a character vocabulary)
    only a word piece's of its shape, a lower bound. Original's seeds 1 and 2 are planned
    (its layer-8 claim); lang-pos's are not, and the plan says why."""
    import shutil

    from multilab.studies.records import write_record
    from tests.test_studies import STUDIES, _model_config, _spec

    folder = tmp_path / "studies"
    folder.mkdir()
    shutil.copytree(STUDIES / "claims", folder / "claims")
    char = {"vocab.unit": "char"}
    _spec(folder, rows=[{"id": "0", "modification": "original"},
                        {"id": "1", "modification": "lang-pos", "settings": char}],
          claims=["dufter2020-t1-r1-lang-pos", "dufter2020-t1-r0-retrieval-layer8"])
    results = tmp_path / "results"
    metrics = {"mu": 0.3, "retrieval_p1.l0": 0.1, "retrieval_p1.l8": 0.2}
    for modification, settings in (("original", {}), ("lang-pos", char)):
        config = _model_config("smoke", "3,fake", modification, **settings)
        model = {"modification": modification, "seed": 0, "fingerprint": modification}
        write_record(results, "toy", "evaluate", {"metrics": metrics}, model=model,
                     config=config)
    write_record(results, "toy", "train", {"step_seconds": 600.0}, model=model | {
        "modification": "original", "fingerprint": "original"},
        config=_model_config("smoke", "3,fake"),
        origin={"commit": "abc", "date": "2026-12-06T00:00:00+00:00", "machine": {"device": "cpu"}})
    args = ["--set", f"paths.results={results}", "study", "next", "--studies", str(folder),
            "--lanes", "1", "--hours", "1", "--wide"]  # the last line whole
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    # two trainings of 600 s x 1.15, each with the default 360 s of measurement (no record
    # that the training's process measured it)
    assert out[0] == "lane 1: ≈ 0.6 of 1 h"
    assert out[1].startswith("  ≈  18 min  toy-study original s1  [")
    assert out[2].startswith("  ≈  18 min  toy-study original s2  [")
    assert out[-1] == ("left out, their time not measured (a lower bound only; "
                       "benchmarks/bench_row_steps.py prices one, to run by hand): "
                       "toy-study lang-pos")
