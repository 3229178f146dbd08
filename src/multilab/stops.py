"""Stop signals as exceptions (SIGTERM: :class:`~multilab.errors.Terminated`, SIGINT:
``KeyboardInterrupt``), raised where the program is, except inside a section that must finish
first (a checkpoint being written), where they wait for its end.

Why the wait: a stop raised inside a library's write is replaced by the library's own error
from its clean-up. ``torch.save``'s zip writer, stopped half-way, raised ``RuntimeError:
unexpected pos`` while closing the archive; the run ended FAILED instead of KILLED and the
command printed a traceback. A checkpoint takes a second or two to write, so the stop waits
that long and the run keeps the checkpoint it was writing.

Why :func:`received`: if a stop is replaced all the same (a library that catches everything
and raises its own error), the run that ends is still a stopped run: ``tracking.run`` asks,
and :func:`stop_exception` gives the exception the stop should have been.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

from multilab.errors import Terminated

SIGNALS = (signal.SIGTERM, signal.SIGINT)
_deferring = 0  # nesting depth of :func:`deferred` (handlers run in the main thread only)
_pending: int | None = None  # a signal that arrived while deferring
_received: int | None = None  # the last stop signal since the outermost :func:`catching`


def stop_exception(signum: int) -> BaseException:
    """What a stop signal raises: ``KeyboardInterrupt`` for SIGINT, else :class:`Terminated`."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(f"signal {signum}")


def exit_status(stop: BaseException) -> int:
    """A stopped command's exit status, as a shell gives one a signal ended: 128 + signal."""
    return 128 + (signal.SIGINT if isinstance(stop, KeyboardInterrupt) else signal.SIGTERM)


def stop_of_exit_status(code: int) -> BaseException | None:
    """The stop a command's exit status says ended it (:func:`exit_status`), else None. The
    command said so itself: the stop is marked :func:`said`, so it is not said twice."""
    if code - 128 not in SIGNALS:
        return None
    stop = stop_exception(code - 128)
    stop.said = True  # type: ignore[attr-defined]
    return stop


def said(stop: BaseException) -> bool:
    """Whether a stop was said already, by the in-process command it stopped."""
    return bool(getattr(stop, "said", False))


def _on_stop(signum: int, _frame: Any) -> None:
    global _pending, _received
    _received = signum
    if _deferring:
        _pending = signum
        return
    raise stop_exception(signum)


def received() -> int | None:
    """The stop signal this process received since :func:`catching` began, if any."""
    return _received


@contextlib.contextmanager
def catching() -> Iterator[None]:
    """SIGTERM and SIGINT raise their exceptions (deferred inside :func:`deferred`) until the
    block ends; the previous handlers are put back. Outside the main thread, or where SIGINT
    is ignored (a background job), that signal is left alone."""
    global _received
    previous: dict[int, Any] = {}
    for signum in SIGNALS:
        with contextlib.suppress(ValueError):  # not the main thread
            if signal.getsignal(signum) is not signal.SIG_IGN:
                previous[signum] = signal.signal(signum, _on_stop)
    if previous and _on_stop not in previous.values():  # the outermost: reset; nested: keep
        _received = None
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A stop that arrives inside the block is raised when the block has finished."""
    global _deferring, _pending
    _deferring += 1
    try:
        yield
    except BaseException:  # the block's own error goes up; received() still tells the stop
        _deferring -= 1
        if not _deferring:
            _pending = None
        raise
    _deferring -= 1
    if not _deferring and _pending is not None:
        signum, _pending = _pending, None
        raise stop_exception(signum)
