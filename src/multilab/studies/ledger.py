"""The run ledger: which study runs are under way, by whom, since when (``results/ledger.csv``).

Planned and done need no ledger — a (row, seed) without an ``evaluate`` record is planned, one
with it is done. What the records cannot say is that someone is training it right now, in
another process or in another session of the lab whose results arrive by git. So
``multilab study run`` books a (row, seed) here before training it and releases it once its
records exist (or its command failed); a second runner skips a booked run. Two runners on
one machine therefore share a study's work, and a committed ledger tells the next session
what is still under way elsewhere.

A booking is stale — taken over without asking — when its process is gone (same machine) or
when it is older than :data:`STALE_HOURS` (on any machine: a pid of this machine may be alive
and belong to another program, the booking's runner long gone).

The ledger is committed, so git may merge two sessions' copies: the lines of a merge
conflict's markers are passed over (both sides' bookings are read; the next booking writes
the file whole again), and a line that is no booking is one line naming the file and the line.
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

from multilab import stops
from multilab.errors import UserError
from multilab.files import write_text

LEDGER = "ledger.csv"
#: the empty file FileLock holds while the ledger changes (git-ignored)
LEDGER_LOCK = f".{LEDGER}.lock"
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
        """It is older than STALE_HOURS (any machine), or its process is gone (this one)."""
        started = datetime.fromisoformat(self.since)
        if started.tzinfo is None:
            started = started.replace(tzinfo=UTC)
        if (now or datetime.now(UTC)) - started > timedelta(hours=STALE_HOURS):
            return True
        host, _, pid = self.by.rpartition(" pid ")
        return host == socket.gethostname() and pid.isdigit() and not _alive(int(pid))


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


#: the lines git writes around a merge conflict
CONFLICT_MARKERS = ("<<<<<<<", "=======", ">>>>>>>", "|||||||")


def read_ledger(results: Path, name: str = LEDGER) -> list[Booking]:
    """The bookings of ``results/ledger.csv`` (or another ledger file of ``results``);
    blank lines, repeated header lines and merge conflict markers are passed over; any other
    line that is no booking is one line."""
    path = results / name
    if not path.is_file():
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not readable as the run ledger ({err}); delete it: a lost "
                        "booking only lets another runner start that run too") from None
    bookings = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(CONFLICT_MARKERS) or \
                [cell.strip() for cell in stripped.split(",")] == list(COLUMNS):
            continue
        bookings.append(_booking(path, number, line))
    return bookings


def _booking(path: Path, number: int, line: str) -> Booking:
    cells = next(csv.reader([line]))
    try:
        study, row, seed, by, since = (cell.strip() for cell in cells)
        booking = Booking(study, row, int(seed), by, since)
        booking.stale()  # its time parses
    except ValueError:
        raise UserError(f"{path} line {number}: {line[:80]!r} is not a booking "
                        f"({','.join(COLUMNS)}); mend or delete the line (a lost booking only "
                        "lets another runner start that run too)") from None
    return booking


def _write(results: Path, bookings: list[Booking]) -> None:
    path = results / LEDGER
    if not bookings:
        with stops.deferred():
            path.unlink(missing_ok=True)
        return
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(COLUMNS)
    for b in sorted(dict((b.key, b) for b in bookings).values(), key=lambda b: b.key):
        writer.writerow([b.study, b.row, b.seed, b.by, b.since])
    with stops.deferred():  # a stop waits for the ledger: a booking is written or not
        write_text(path, text.getvalue())


@contextmanager
def _locked(results: Path) -> Iterator[list[Booking]]:
    results.mkdir(parents=True, exist_ok=True)
    with FileLock(results / LEDGER_LOCK):
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


def _release_command(args: list[str]) -> list[Booking]:
    """``release RESULTS HOST [COMMITTED]``, its inputs checked: a bad one is a UserError."""
    results, host = Path(args[1]), args[2]
    if not host.strip() or " pid " in host:
        raise UserError(f"HOST {host!r}: must be a machine's name (as a booking's "
                        "'HOST pid N' has it)")
    if results.exists() and not results.is_dir():
        raise UserError(f"RESULTS {results}: not a folder (a checkout's results/)")
    keep: list[Booking] = []
    if len(args) == 4:
        committed = Path(args[3])
        if not committed.is_file():
            raise UserError(f"COMMITTED {committed}: no such file (a ledger whose bookings "
                            "stay; an empty file keeps none)")
        keep = read_ledger(committed.parent, committed.name)
    if not (results / LEDGER).is_file():
        return []  # nothing booked (a clone without a ledger): no folder made for it
    return release_host(results, host, keep)


def main(argv: list[str] | None = None) -> int:
    """``python -m multilab.studies.ledger release RESULTS HOST [COMMITTED]``: what
    scripts/lanes.sh runs before restarting a lane (COMMITTED: a ledger file whose
    bookings stay, the clone's commit's); one line per booking dropped. A ledger that
    cannot be read, or a bad argument, is one line and exit 2, nothing released."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (3, 4) or args[0] != "release":
        print("usage: python -m multilab.studies.ledger release RESULTS HOST [COMMITTED]",
              file=sys.stderr)
        return 2
    try:
        dropped = _release_command(args)
    except (UserError, OSError) as err:
        print(f"ledger release: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    for booking in dropped:
        print(f"released {booking.study} {booking.row} seed {booking.seed} "
              f"(booked by {booking.by} since {booking.since})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
