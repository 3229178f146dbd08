"""Stop signals (multilab/stops.py): a stop inside a checkpoint write waits for the checkpoint,
and a stop that a library replaced by its own error still ends the run KILLED."""

from __future__ import annotations

import io
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

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
