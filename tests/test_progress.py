"""Progress bars off a terminal (dvc repro's log, nohup, CI) redraw rarely, so a long run's
log holds tens of bar lines, not thousands."""

from __future__ import annotations

import io

import pytest

from multilab import progress


@pytest.fixture
def log_file(monkeypatch) -> io.StringIO:
    out = io.StringIO()  # not a terminal
    monkeypatch.setattr(progress.sys, "stderr", out)
    monkeypatch.delenv("TQDM_MININTERVAL", raising=False)
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    return out


def test_a_bar_in_a_log_redraws_every_log_interval(log_file: io.StringIO) -> None:
    with progress.progress_bar(total=1000, file=log_file) as bar:
        assert bar.mininterval == progress.LOG_INTERVAL
        for step in range(1000):
            bar.update(1)
            if step % 10 == 0:  # as training does at each logged step
                progress.show_postfix(bar, loss=f"{1 / (step + 1):.3f}")
    # the bar is drawn at its start and its end: no redraw in between within 30 s, none for
    # the hundred postfixes
    assert log_file.getvalue().count("\r") <= 3


def test_the_users_interval_and_a_terminal_keep_tqdms_behaviour(log_file, monkeypatch) -> None:
    monkeypatch.setenv("TQDM_MININTERVAL", "5")  # the user's choice is not overridden
    assert "mininterval" not in _kwargs_passed(monkeypatch)
    monkeypatch.delenv("TQDM_MININTERVAL")
    monkeypatch.setattr(progress, "in_terminal", lambda: True)
    assert "mininterval" not in _kwargs_passed(monkeypatch)


def _kwargs_passed(monkeypatch) -> dict:
    seen: dict = {}
    monkeypatch.setattr(progress, "tqdm", lambda *args, **kwargs: seen.update(kwargs))
    progress.progress_bar(total=3)
    return seen
