"""A command that DVC runs as a stage ends when DVC ends: a stop signal reaches every child.

DVC starts a stage's command (``$SHELL -c 'multilab train …'``) and, sent SIGTERM itself,
ends at once without passing the signal on (Ctrl-C reaches the whole process group, SIGTERM
to DVC's pid does not). The training went on as an orphan, holding its ``train.lock``, and the
next ``dvc repro`` was refused until it finished. DVC marks every stage command with the
``DVC_STAGE`` variable; under it, a daemon thread watches the process that started us (and,
when that is a shell, the process that started the shell) and, once one is gone, sends this
process SIGTERM: the training then ends as on any SIGTERM (run KILLED, last complete
checkpoint kept, resumed by the next ``dvc repro``). Outside DVC nothing is watched: a
``multilab train … &`` must outlive the terminal that started it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path

STAGE_VARIABLE = "DVC_STAGE"  # set by DVC for every stage command (dvc.env.DVC_STAGE)
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "fish", "ksh"})
INTERVAL_S = 1.0
_watcher: threading.Thread | None = None  # one per process (``main`` may run many times)


def _stat(pid: int) -> tuple[str, int] | None:
    """A process's name and parent pid from ``/proc`` (None when it is gone or unreadable)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return (name, int(fields[1])) if fields[0] != "Z" else None


def watched_chain(pid: int) -> list[tuple[int, int]]:
    """``(process, its parent)`` pairs whose parent must stay: this process and its parent,
    and the parent's parent when the parent is a shell that did not ``exec`` the command."""
    parent = os.getppid() if pid == os.getpid() else (_stat(pid) or ("", 0))[1]
    chain = [(pid, parent)]
    found = _stat(parent)
    if found is not None and found[0] in SHELLS and found[1] > 1:
        chain.append((parent, found[1]))
    return chain


def _orphaned(chain: list[tuple[int, int]]) -> bool:
    for pid, parent in chain:
        now = os.getppid() if pid == os.getpid() else (_stat(pid) or ("", -1))[1]
        if now != parent:
            return True
    return False


def end_with_dvc(environ: Mapping[str, str] = os.environ,
                 interval: float = INTERVAL_S) -> threading.Thread | None:
    """Under a DVC stage, start the watcher (see the module's docstring), once per process;
    else do nothing."""
    global _watcher
    if STAGE_VARIABLE not in environ or not Path("/proc/self/stat").exists():
        return None
    if _watcher is not None:
        return _watcher
    chain = watched_chain(os.getpid())

    def watch() -> None:
        while True:
            time.sleep(interval)
            if _orphaned(chain):
                os.kill(os.getpid(), signal.SIGTERM)
                return

    _watcher = threading.Thread(target=watch, name="multilab-lifeline", daemon=True)
    _watcher.start()
    return _watcher
