"""Stop signals (multilab/stops.py): a stop inside a checkpoint write waits for the checkpoint,
and a stop that a library replaced by its own error still ends the run KILLED."""

from __future__ import annotations

import io
import itertools
import os
import random
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
from mlflow.tracking import MlflowClient
from sqlalchemy import event
from sqlalchemy.engine import Engine

from multilab import stops, tracking
from multilab.errors import Terminated
from tests.helpers import smoke_config


class _StopsWhileWriting(io.BytesIO):
    """A file that sends this process ``signum`` during its second write: a stop landing in
    the middle of ``torch.save``, at a chosen place instead of by chance."""

    def __init__(self, signum: int) -> None:
        super().__init__()
        self.signum, self.writes = signum, 0

    def write(self, data) -> int:  # type: ignore[override]
        self.writes += 1
        if self.writes == 2:
            os.kill(os.getpid(), self.signum)
        return super().write(data)


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """SIGINT as in a terminal (an xdist worker ignores it, and a stop handler leaves an
    ignored signal alone, as a background job's must stay ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize(("signum", "stop"), [(signal.SIGTERM, Terminated),
                                              (signal.SIGINT, KeyboardInterrupt)])
def test_a_stop_during_a_checkpoint_write_waits_for_the_checkpoint(
        signum: int, stop: type, sigint_raises: None) -> None:
    weights = {"w": torch.arange(4096, dtype=torch.float32), "b": torch.ones(64)}
    target = _StopsWhileWriting(signum)
    with stops.catching(), pytest.raises(stop):
        with stops.deferred():
            torch.save(weights, target)
        pytest.fail("the stop was not raised after the write")
    assert target.writes > 2  # the write went on after the signal
    loaded = torch.load(io.BytesIO(target.getvalue()))
    assert all(torch.equal(loaded[key], weights[key]) for key in weights)


def test_an_error_inside_the_section_goes_up_and_forgets_the_stop() -> None:
    with stops.catching():
        with pytest.raises(OSError, match="disk full"), stops.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            raise OSError("disk full")
        assert stops.received() == signal.SIGTERM
        with stops.deferred():  # the stop is not raised a second time, later
            pass


def test_a_stop_a_library_replaced_still_ends_the_run_killed(tmp_path: Path) -> None:
    """The run a stop ended is KILLED, and the command still reads it as a stop (one line,
    exit 143), even when a library raised its own error in its place."""
    cfg = smoke_config(tmp_path)
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    with pytest.raises(Terminated) as caught, tracking.run(experiment, name="stopped") as run_id:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except Terminated as stop:
            raise RuntimeError("unexpected pos 1137536 vs 1137488") from stop
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert MlflowClient().get_run(run_id).info.status == tracking.KILLED
    assert signal.getsignal(signal.SIGTERM) is not stops._on_stop  # the handler is put back


def _stops_after(target: object, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``target.name`` sends this process SIGTERM as it is first called: a stop that lands
    while the store writes a run's status, at a chosen place instead of by chance."""
    original, calls = getattr(target, name), []

    def stopping(*args, **kwargs):
        calls.append(name)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, stopping)


def test_a_stop_as_a_finished_run_is_ended_leaves_it_finished_not_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flake of `test_sigterm_to_dvc_repro_reaches_the_training`: the lifeline's SIGTERM
    landed while the training's run was being ended FINISHED; the write was cut and the run
    stayed RUNNING. The stop now waits for the write and is raised after it."""
    cfg = smoke_config(tmp_path)
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    _stops_after(MlflowClient, "set_terminated", monkeypatch)
    with pytest.raises(Terminated), tracking.run(experiment, name="ending") as run_id:
        pass
    monkeypatch.undo()
    assert MlflowClient().get_run(run_id).info.status == tracking.FINISHED


def test_a_second_stop_while_a_stopped_run_is_ended_keeps_it_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = smoke_config(tmp_path)
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    with pytest.raises(Terminated), tracking.run(experiment, name="stopped") as run_id:
        _stops_after(MlflowClient, "set_terminated", monkeypatch)
        os.kill(os.getpid(), signal.SIGTERM)
    monkeypatch.undo()
    assert MlflowClient().get_run(run_id).info.status == tracking.KILLED


def test_a_stop_while_a_run_is_started_ends_it_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop landing inside ``start_run`` (which marks a resumed run RUNNING) used to go up
    before the run was held, leaving it RUNNING; it now ends the run it started KILLED."""
    cfg = smoke_config(tmp_path)
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    with tracking.run(experiment, name="first") as run_id:
        pass
    body_ran = False
    _stops_after(SqlAlchemyStore, "update_run_info", monkeypatch)  # start_run's resume
    with pytest.raises(Terminated), tracking.run(experiment, run_id=run_id):
        body_ran = True
    monkeypatch.undo()
    assert not body_ran
    assert MlflowClient().get_run(run_id).info.status == tracking.KILLED


def test_a_stop_inside_a_store_write_waits_for_it_and_the_run_ends_killed(
        tmp_path: Path) -> None:
    """A stop landing inside MLflow's SQLite session (here: as the step metrics are
    inserted) waits for the write, which is kept, and is raised right after it."""
    cfg = smoke_config(tmp_path)
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    inserts: list[str] = []

    def stop_in_the_write(_conn, _cursor, statement: str, *_args) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO METRICS"):
            inserts.append(statement)
            if len(inserts) == 1:
                os.kill(os.getpid(), signal.SIGTERM)

    event.listen(Engine, "before_cursor_execute", stop_in_the_write)
    try:
        with pytest.raises(Terminated), tracking.run(experiment, name="sending") as run_id:
            tracking.log_step_rows(run_id, [{"step": 1.0, "loss": 2.5}], {"train/loss": "loss"})
            pytest.fail("the stop was not raised after the write")
    finally:
        event.remove(Engine, "before_cursor_execute", stop_in_the_write)
    assert inserts  # the signal was sent inside the store's session
    run = MlflowClient().get_run(run_id)
    assert run.info.status == tracking.KILLED
    assert [m.value for m in MlflowClient().get_metric_history(run_id, "train/loss")] == [2.5]


def test_stops_at_random_moments_of_sending_steps_end_every_run_killed(tmp_path: Path) -> None:
    """The flake of `test_sigterm_to_dvc_repro_reaches_the_training` in CI: the lifeline's
    SIGTERM landed inside MLflow's SQLite session while a training's step metrics were sent;
    the cut session kept its transaction open, ending the run waited out SQLite's busy
    timeout ("database is locked") and the run stayed RUNNING (without the fix this loop
    fails at once: the store stays locked). Stops at seeded random moments: every run KILLED."""
    cfg = smoke_config(tmp_path)
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    keys = {f"train/m{i}": "loss" for i in range(10)}
    delays = random.Random(0).sample(range(5, 150), 12)
    for delay_ms in delays:
        timer = threading.Timer(delay_ms / 1000, os.kill, (os.getpid(), signal.SIGTERM))
        with pytest.raises(Terminated), tracking.run(experiment, name=f"{delay_ms} ms") as run_id:
            timer.start()
            for step in itertools.count(0, 20):
                tracking.log_step_rows(run_id, [{"step": step + k, "loss": 1.0}
                                                for k in range(20)], keys)
        timer.join()
    runs = MlflowClient().search_runs([experiment], max_results=100)
    assert len(runs) == len(delays)
    assert {run.info.status for run in runs} == {tracking.KILLED}
