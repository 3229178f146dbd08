"""Progress bars that read well both in a terminal and in a log file.

In a terminal tqdm redraws one line in place. In a log (``dvc repro``'s output, ``nohup``,
CI) every redraw is kept, so a bar redrawn ten times a second, or on every ``set_postfix``,
floods the log with thousands of copies of itself. Off a terminal the bars here redraw at most
every :data:`LOG_INTERVAL` seconds and a new postfix waits for the next redraw;
``TQDM_MININTERVAL`` in the environment still decides where it is set.
"""

from __future__ import annotations

import os
import sys
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
