"""Does a training slow down as it goes? Read it off finished trainings' own logs.

Every model folder holds the trainer's ``train_log.csv`` (tokens/s of each step, the step
alone). This script takes the median tokens/s of each tenth of a run's steps for every model
folder it is given (at least 500 steps), and the last tenth over the first: one row per
run, written to a JSON beside the other benchmark results. It times nothing itself; the
runs' load is whatever they ran beside (say so where the numbers are quoted).

    .venv/bin/python benchmarks/bench_slowdown_logs.py --out benchmarks/results/x.json \\
        /path/to/artifacts/studies/*/models/*/seed*
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path
from typing import Any

from common import machine
from multilab.files import write_json

MIN_STEPS = 500
PARTS = 10


def tenths(log: Path) -> dict[str, Any] | None:
    """The run's median tokens/s per tenth of its steps (None: under :data:`MIN_STEPS`)."""
    with log.open(encoding="utf-8") as handle:
        speeds = [float(row["tokens_per_s"]) for row in csv.DictReader(handle)]
    if len(speeds) < MIN_STEPS:
        return None
    width = len(speeds) // PARTS
    medians = [statistics.median(speeds[i * width:(i + 1) * width]) for i in range(PARTS)]
    return {"steps": len(speeds), "median_tokens_per_s_by_tenth": [round(m, 1) for m in medians],
            "last_over_first": round(medians[-1] / medians[0], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path, help="model folders (train_log.csv)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--load", default="not stated", help="what the runs ran beside")
    args = parser.parse_args()
    runs = {}
    for folder in args.models:
        log = folder / "train_log.csv"
        if log.is_file() and (row := tenths(log)) is not None:
            runs[str(folder)] = row
    ratios = sorted(row["last_over_first"] for row in runs.values())
    record = {"what": "median tokens/s per tenth of each finished training's steps "
                      "(the trainer's own train_log.csv)",
              "machine": machine(), "load": args.load, "runs": runs,
              "last_over_first": {"min": ratios[0], "median": statistics.median(ratios),
                                  "max": ratios[-1], "runs": len(ratios)} if ratios else None}
    write_json(args.out, record)
    print(record["last_over_first"])


if __name__ == "__main__":
    main()
