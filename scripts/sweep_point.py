"""One point of a lab sweep (issue 55: ``studies/real-regime.yaml``), start to finish, at one
thread and nice 19, its records under ``results/``.

``multilab study run <study> --rows <row> --seeds <seed>`` builds the row's corpora and
vocabulary (its own folder under ``artifacts/studies/<study>/``), trains and evaluates it
(booked in the run ledger, resumed from a checkpoint when killed and run again), and runs
``downstream`` (the zero-shot task, whose record the ratio column reads) and ``mrr`` (word
retrieval for the pair the metrics name). A step whose record already exists is not run
again, so the command can be given again after a kill.

    .venv/bin/python scripts/sweep_point.py h128-l6             # the profile's point
    .venv/bin/python scripts/sweep_point.py --list              # the rows
    nohup .venv/bin/python scripts/sweep_point.py h64-l4 > sweep-h64-l4.log 2>&1 &

Each row's CPU minutes at one thread are estimated in the spec's comments (measured by
benchmarks/bench_real_regime.py; benchmarks/RESULTS-real-regime.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from multilab.studies.claims import load_claims  # noqa: E402
from multilab.studies.spec import load_studies  # noqa: E402


def multilab(argv: list[str]) -> None:
    """One ``multilab`` command in a child process (one thread, nice 19 inherited)."""
    print("+ multilab " + " ".join(argv), flush=True)
    done = subprocess.run([sys.executable, "-m", "multilab.cli", *argv], cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"multilab {argv[-2] if len(argv) > 1 else argv} failed "
                         f"(exit {done.returncode}); run this script again to resume")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("row", nargs="?", help="the row's label (see --list)")
    parser.add_argument("--study", default="real-regime")
    parser.add_argument("--seed", type=int, help="default: the study's first")
    parser.add_argument("--list", action="store_true", help="the rows, and exit")
    args = parser.parse_args()
    claims = load_claims(ROOT / "studies" / "claims")
    studies = load_studies(ROOT / "studies", claims)
    if args.study not in studies:
        raise SystemExit(f"--study {args.study!r}; valid: {', '.join(studies)}")
    study = studies[args.study]
    labels = [row.label for row in study.rows]
    if args.list or args.row is None:
        print("\n".join(labels))
        return
    row = study.row(args.row)
    if row is None:
        raise SystemExit(f"row {args.row!r}; rows of {study.name}: {', '.join(labels)}")
    seed = study.seeds[0] if args.seed is None else args.seed
    os.nice(19 - os.nice(0))  # nice 19 for this process and every command it starts
    # Linux groups processes by session (autogroup): nice alone yields only inside this
    # terminal's group, so a test suite in another terminal would still share the cores
    with contextlib.suppress(OSError):
        Path("/proc/self/autogroup").write_text("19")
    os.environ["MULTILAB_THREADS"] = "1"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])

    # the study runner also runs the commands whose records the study's metrics read:
    # ``downstream`` (the ratio column) and ``mrr`` for the pair the metrics name
    multilab(["study", "run", study.name, "--rows", row.label, "--seeds", str(seed)])
    print(f"{study.name} {row.label} seed {seed}: done; `multilab study report {study.name}`")


if __name__ == "__main__":
    main()
