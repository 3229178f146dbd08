"""The run ledger: which study runs are under way, by whom, since when (``results/ledger.csv``).

Planned and done need no ledger — a (row, seed) without an ``evaluate`` record is planned, one
with it is done. What the records cannot say is that someone is training it right now, in
another process or in another session of the lab whose results arrive by git. So
``multilab study run`` books a (row, seed) here before training it and releases it once its
records exist (or its command failed); a second runner skips a booked run. Two runners on
one machine therefore share a study's work, and a committed ledger tells the next session
what is still under way elsewhere.

A booking is stale — taken over without asking — when its process is gone (same machine) or
when it is older than :data:`STALE_HOURS` (another machine, whose process cannot be asked).
"""

from __future__ import annotations

import csv
import io
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from filelock import FileLock

from multilab.files import write_text

LEDGER = "ledger.csv"
COLUMNS = ("study", "row", "seed", "by", "since")
#: a booking from another machine older than this is taken to be abandoned: a quick model
#: takes under an hour, a paper-profile one a few hours on a CPU
STALE_HOURS = 12


@dataclass(frozen=True)
class Booking:
    study: str
    row: str
    seed: int
    by: str  # "host pid N"
    since: str  # ISO time, UTC

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.study, self.row, self.seed)

    def stale(self, now: datetime | None = None) -> bool:
        """Its process is gone (this machine), or it is older than STALE_HOURS."""
        host, _, pid = self.by.rpartition(" pid ")
        if host == socket.gethostname() and pid.isdigit():
            return not _alive(int(pid))
        started = datetime.fromisoformat(self.since)
        return (now or datetime.now(UTC)) - started > timedelta(hours=STALE_HOURS)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def me() -> str:
    return f"{socket.gethostname()} pid {os.getpid()}"


def read_ledger(results: Path) -> list[Booking]:
    path = results / LEDGER
    if not path.is_file():
        return []
    with path.open(encoding="utf-8", newline="") as handle:
        return [Booking(row["study"], row["row"], int(row["seed"]), row["by"], row["since"])
                for row in csv.DictReader(handle)]


def _write(results: Path, bookings: list[Booking]) -> None:
    path = results / LEDGER
    if not bookings:
        path.unlink(missing_ok=True)
        return
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(COLUMNS)
    for b in sorted(bookings, key=lambda b: b.key):
        writer.writerow([b.study, b.row, b.seed, b.by, b.since])
    write_text(path, text.getvalue())


@contextmanager
def _locked(results: Path) -> Iterator[list[Booking]]:
    results.mkdir(parents=True, exist_ok=True)
    with FileLock(results / f".{LEDGER}.lock"):
        yield read_ledger(results)


def book(results: Path, study: str, row: str, seed: int) -> Booking | None:
    """Book a run for this process; the other holder's booking when it is live, else None."""
    with _locked(results) as bookings:
        held = next((b for b in bookings if b.key == (study, row, seed)), None)
        if held is not None and held.by != me() and not held.stale():
            return held
        kept = [b for b in bookings if b.key != (study, row, seed)]
        now = datetime.now(UTC).replace(microsecond=0).isoformat()
        _write(results, [*kept, Booking(study, row, seed, me(), now)])
    return None


def release(results: Path, study: str, row: str, seed: int) -> None:
    """Drop this process's booking of a run (done, or failed: someone may try again)."""
    with _locked(results) as bookings:
        _write(results, [b for b in bookings
                         if not (b.key == (study, row, seed) and b.by == me())])
