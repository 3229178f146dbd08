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
from collections.abc import Iterable, Iterator
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


def release_host(results: Path, host: str, keep: Iterable[Booking] = ()) -> list[Booking]:
    """Drop every booking by ``host`` but those of ``keep`` (the committed ledger's): a
    stopped lane's own bookings before it is restarted, all of whose processes are gone
    (a recycled pid would make them look live), or a lost machine's. Returns those dropped."""
    kept_keys = {(b.key, b.by) for b in keep}
    with _locked(results) as bookings:
        dropped = [b for b in bookings if b.by.rpartition(" pid ")[0] == host
                   and (b.key, b.by) not in kept_keys]
        if dropped:
            _write(results, [b for b in bookings if b not in dropped])
    return dropped


def _parse(text: str) -> list[Booking]:
    return [Booking(row["study"], row["row"], int(row["seed"]), row["by"], row["since"])
            for row in csv.DictReader(io.StringIO(text))]


def main(argv: list[str] | None = None) -> int:
    """``python -m multilab.studies.ledger release RESULTS HOST [COMMITTED]``: what
    scripts/lanes.sh runs before restarting a lane (COMMITTED: a ledger file whose
    bookings stay, the clone's commit's); one line per booking dropped."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (3, 4) or args[0] != "release":
        print("usage: python -m multilab.studies.ledger release RESULTS HOST [COMMITTED]",
              file=sys.stderr)
        return 2
    keep = _parse(Path(args[3]).read_text(encoding="utf-8")) if len(args) == 4 and \
        Path(args[3]).is_file() else []
    for booking in release_host(Path(args[1]), args[2], keep):
        print(f"released {booking.study} {booking.row} seed {booking.seed} "
              f"(booked by {booking.by} since {booking.since})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
