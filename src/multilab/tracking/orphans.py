"""Runs left RUNNING by a process that died without ending them (SIGKILL, the OOM killer, a
lost node), found and ended by the next process that trains the same fingerprint.

A run records which process owns it (host, pid and the pid's start time, under
``multilab.sys.``); an orphan is a run of this host whose process no longer exists.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from mlflow.tracking import MlflowClient

from multilab.tracking.runs import FINISHED, KILLED, RUNNING, SYS
from multilab.tracking.store import server_call

HOST_TAG, PID_TAG, PROCESS_START_TAG = SYS + "host", SYS + "pid", SYS + "process_start"
ORPHAN_TAG = SYS + "orphaned"


#: The names of these tags before they moved under ``multilab.sys.`` (read, never written):
#: orphans of runs logged before the rename are still found.
_LEGACY = {HOST_TAG: "multilab.host", PID_TAG: "multilab.pid",
           PROCESS_START_TAG: "multilab.process_start"}


def _tag(tags: dict[str, str], key: str) -> str:
    return tags.get(key) or tags.get(_LEGACY.get(key, key), "")


def _process_start(pid: int) -> str | None:
    """Start time of a live process (Linux clock ticks since boot); None if it is gone.

    With the pid it names a process uniquely: a recycled pid has another start time.
    Zombies (killed, not yet reaped) count as gone. "" where /proc is unavailable.
    """
    if not Path("/proc/self/stat").exists():  # not Linux: only "does the pid exist"
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def process_tags() -> dict[str, str]:
    """Which process owns a run: host, pid and the pid's start time."""
    pid = os.getpid()
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(pid),
            PROCESS_START_TAG: _process_start(pid) or ""}


def _is_orphan(tags: dict[str, str]) -> bool:
    """RUNNING but its process is gone. Only decidable for runs started on this host."""
    if _tag(tags, HOST_TAG) != socket.gethostname() or not _tag(tags, PID_TAG).isdigit():
        return False  # another machine (or an old run without the tags): cannot know
    started = _process_start(int(_tag(tags, PID_TAG)))
    if started is None:
        return True
    recorded = _tag(tags, PROCESS_START_TAG)
    return bool(started and recorded) and started != recorded  # the pid was recycled


@server_call
def end_orphaned_runs(
    experiment_id: str, fingerprint: str | None, *, keep: str | None = None,
    completed: str | None = None,
) -> list[str]:
    """End the RUNNING runs of ``fingerprint`` (None: of any) left by killed processes.

    Returns their ids. A SIGKILL (OOM killer, ``kill -9``, a lost node) leaves the run RUNNING
    forever. An orphan is a run started on this host by a process that no longer exists; runs of
    live processes (another worker training the same fingerprint) and of other hosts are left
    alone. ``keep`` (the run being resumed) is never touched; ``completed`` (a run whose model
    was finished before the kill) ends FINISHED, every other orphan KILLED, tagged
    ``multilab.sys.orphaned``.
    """
    client = MlflowClient()
    wanted = f"attributes.status = '{RUNNING}'"
    if fingerprint is not None:
        wanted = f"tags.fingerprint = '{fingerprint}' and {wanted}"
    found = client.search_runs([experiment_id], filter_string=wanted)
    ended = []
    for orphan in found:
        run_id = orphan.info.run_id
        if run_id == keep or not _is_orphan(orphan.data.tags):
            continue
        status = FINISHED if run_id == completed else KILLED
        owner = f"{_tag(orphan.data.tags, HOST_TAG)}:{_tag(orphan.data.tags, PID_TAG)}"
        client.set_tag(run_id, ORPHAN_TAG, f"process {owner} died without ending this run; "
                       f"ended {status} by process {socket.gethostname()}:{os.getpid()}")
        client.set_terminated(run_id, status=status)
        ended.append(run_id)
    return ended
