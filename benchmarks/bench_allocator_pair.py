"""Does a training age with glibc's dynamic mmap threshold? Two trainings read side by side.

Issue 56 item 6: a long training runs a tenth slower by its end, early, then flat
(bench_slowdown_logs.py). A candidate is glibc's allocator: its mmap threshold rises as large
blocks are freed, so a long run serves its tensors from a heap that fragments. The test: two
trainings of one row (two seeds: the same work per step on average) started together, one with
the default allocator, one with ``MALLOC_MMAP_THRESHOLD_`` fixed (which also stops the
threshold from moving). Both share the machine's minutes, so a load that comes and goes slows
both alike; what differs between them over time is the allocator.

This script times nothing itself. It reads both runs' per-step ``tokens_per_s`` from the MLflow
store the trainer logs to (timestamps are those of the logging windows), and writes, for the
minutes both ran, the median tokens/s of each arm per window and their ratio, and each run's
median per tenth of its steps:

    .venv/bin/python benchmarks/bench_allocator_pair.py --db mlruns/mlflow.db \\
        --run default=<run id> --run fixed-128k=<run id> --out benchmarks/results/x.json

Two trainings in two clones log to two stores: give ``--db`` twice, in the order of ``--run``.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
from pathlib import Path
from typing import Any

from common import machine
from multilab.files import write_json

PARTS = 10


def steps_of(db: Path, run_id: str) -> list[tuple[float, int, float]]:
    """(seconds since the epoch, step, tokens/s) of each logged training step of a run."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        rows = connection.execute(
            "select timestamp, step, value from metrics where run_uuid = ? and "
            "key = 'tokens_per_s' order by step", (run_id,)).fetchall()
    return [(timestamp / 1000, int(step), float(value)) for timestamp, step, value in rows]


def tenths(steps: list[tuple[float, int, float]]) -> list[float]:
    width = max(1, len(steps) // PARTS)
    return [round(statistics.median(speed for _, _, speed in steps[i * width:(i + 1) * width]), 1)
            for i in range(PARTS) if steps[i * width:(i + 1) * width]]


def windows(arms: dict[str, list[tuple[float, int, float]]], seconds: float
            ) -> list[dict[str, Any]]:
    """Median tokens/s of each arm per window of wall time, over the minutes both ran."""
    start = max(steps[0][0] for steps in arms.values())
    end = min(steps[-1][0] for steps in arms.values())
    out = []
    at = start
    while at < end:
        row: dict[str, Any] = {"minute": round((at - start) / 60, 1)}
        for name, steps in arms.items():
            speeds = [speed for when, _, speed in steps if at <= when < at + seconds]
            row[name] = round(statistics.median(speeds), 1) if speeds else None
        out.append(row)
        at += seconds
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, action="append", required=True,
                        help="the MLflow store (sqlite); twice: each arm's, in --run's order")
    parser.add_argument("--run", action="append", required=True, metavar="NAME=RUN_ID",
                        help="two arms: a name and the MLflow run id")
    parser.add_argument("--window", type=float, default=120.0, help="seconds per window")
    parser.add_argument("--load", default="not stated", help="what the runs ran beside")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if len(args.run) != 2 or not all("=" in item for item in args.run):
        parser.error("--run NAME=RUN_ID twice: the default arm and the other")
    if len(args.db) not in (1, 2):
        parser.error("--db once (both arms' store) or twice (each arm's, in --run's order)")
    stores = args.db * 2 if len(args.db) == 1 else args.db
    arms = {}
    for (name, run), db in zip((item.split("=", 1) for item in args.run), stores, strict=True):
        if name in arms:
            parser.error(f"--run {name}: two arms of one name")
        arms[name] = steps_of(db, run)
        if not arms[name]:
            parser.error(f"--run {name}: no tokens_per_s logged in {db}")
    first, second = arms
    paired = windows(arms, args.window)
    for row in paired:
        row[f"{first}/{second}"] = round(row[first] / row[second], 3) \
            if row[first] and row[second] else None
    ratios = [row[f"{first}/{second}"] for row in paired if row[f"{first}/{second}"]]
    record = {"what": "two trainings of one row started together, one allocator setting each: "
                      "median tokens/s per window of the minutes both ran, and per tenth of "
                      "each run's steps (MLflow's per-step tokens_per_s)",
              "machine": machine(), "load": args.load, "window_seconds": args.window,
              "arms": {name: {"steps": len(steps), "tenths": tenths(steps)}
                       for name, steps in arms.items()},
              "windows": paired,
              "ratio_first_third_last_third": [
                  round(statistics.median(ratios[:max(1, len(ratios) // 3)]), 3),
                  round(statistics.median(ratios[-max(1, len(ratios) // 3):]), 3)]
              if ratios else None}
    write_json(args.out, record)
    print({name: arm["tenths"] for name, arm in record["arms"].items()})
    print("ratio, first third → last third of the shared minutes:",
          record["ratio_first_third_last_third"])


if __name__ == "__main__":
    main()
