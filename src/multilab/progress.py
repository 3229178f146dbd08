"""Progress bars that read well both in a terminal and in a log file.

In a terminal tqdm redraws one line in place. In a log (``dvc repro``'s output, ``nohup``,
CI) every redraw is kept, so a bar redrawn ten times a second, or on every ``set_postfix``,
floods the log with thousands of copies of itself. Off a terminal the bars here redraw at most
every :data:`LOG_INTERVAL` seconds and a new postfix waits for the next redraw;
``TQDM_MININTERVAL`` in the environment still decides where it is set.

:func:`quiet_transformers` keeps the Hugging Face libraries' own bars and load reports off the
screen while a model is loaded or written, so that the run's own bar stays readable.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from tqdm.auto import tqdm

#: seconds between two redraws of a bar written to a log instead of a terminal
LOG_INTERVAL = 30.0


def in_terminal() -> bool:
    """Whether the bars draw on a terminal (where tqdm redraws a line in place)."""
    return sys.stderr.isatty()


def progress_bar(*args: Any, **kwargs: Any) -> tqdm:
    """``tqdm(*args, **kwargs)``, redrawn every :data:`LOG_INTERVAL` s when not in a terminal.

    The interval is passed only where the user has not set ``TQDM_MININTERVAL``: an argument
    passed explicitly overrides tqdm's environment defaults."""
    if not in_terminal() and "TQDM_MININTERVAL" not in os.environ:
        kwargs.setdefault("mininterval", LOG_INTERVAL)
    return tqdm(*args, **kwargs)


def show_postfix(bar: tqdm, **values: Any) -> None:
    """Set the bar's postfix; in a terminal at once, in a log at the bar's next redraw."""
    bar.set_postfix(refresh=in_terminal(), **values)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """No load report and no per-file bars while a checkpoint is loaded or written: the
    "Loading weights" bars and the missing/unexpected lists (a classifier made of a masked-LM
    checkpoint misses exactly its head) bury the run's own progress."""
    import transformers  # here: importing this module must stay cheap (the CLI's start-up)

    log = transformers.utils.logging
    previous, bars = log.get_verbosity(), log.is_progress_bar_enabled()
    log.set_verbosity_error()
    log.disable_progress_bar()
    try:
        yield
    finally:
        log.set_verbosity(previous)
        if bars:
            log.enable_progress_bar()
