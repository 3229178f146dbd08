"""A new user's first run, timed from a fresh clone: set-up, then the README's commands.

Why: README promises a first look in minutes (`dvc exp run -S profile=smoke`) and states what
the default study (`dvc repro`) costs; those figures must come from a record of exactly what a
user types, on a clean clone of the commit, not from the sum of the parts. Each phase is timed
as a whole process; the record keeps the machine, the load before and after each phase and the
commit (the clone is of HEAD: commit first).

    .venv/bin/python benchmarks/bench_first_run.py                 # set-up + smoke (≈ 10 min)
    .venv/bin/python benchmarks/bench_first_run.py --default       # + `dvc repro` (hours)
    .venv/bin/python benchmarks/bench_first_run.py --note "lanes paused"

`dvc repro` is timed in a second fresh clone (set up again): `dvc exp run -S profile=smoke`
leaves `profile: smoke` in the workspace's params.yaml, so a `dvc repro` after it in the same
clone reproduces the smoke study (up to date, seconds), not the default one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from common import RESULTS, ROOT, load_average, machine, write_json

#: What README tells a user to type, in order, after cloning.
PHASES = {
    "setup": "bash scripts/setup.sh",
    "smoke": ". .venv/bin/activate && dvc exp run -S profile=smoke",
    "default": ". .venv/bin/activate && dvc repro",
}


def timed_phase(clone: Path, command: str, log: Path) -> dict[str, object]:
    """Run one README command in the clone as a user's shell would; its wall seconds."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    before = load_average()
    start = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(["bash", "-c", command], cwd=clone, env=env, stdout=out,
                              stderr=subprocess.STDOUT)
    return {"command": command, "seconds": round(time.monotonic() - start, 1),
            "exit": done.returncode, "load_before": before, "load_after": load_average()}


def run_in_fresh_clone(clone: Path, commit: str, phases: list[str], record: dict) -> bool:
    """Clone ``commit`` into ``clone`` and time ``phases`` there; False once a phase fails."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", commit], check=True)
    for name in phases:
        key = name if name not in record["phases"] else f"{name} ({clone.name} clone)"
        print(f"{key}: {PHASES[name]}", flush=True)
        log = clone.parent / f"{clone.name}-{name}.log"
        phase = timed_phase(clone, PHASES[name], log)
        record["phases"][key] = phase
        print(f"{key}: {phase['seconds']} s, exit {phase['exit']}", flush=True)
        if phase["exit"] != 0:
            print(log.read_text()[-3000:])
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--default", action="store_true", help="also time `dvc repro`")
    parser.add_argument("--note", default="", help="what else ran (e.g. 'lanes paused')")
    parser.add_argument("--out", type=Path, default=None, help="the record (JSON)")
    args = parser.parse_args()
    record = {"what": "README's first run from a fresh clone, phase by phase",
              "machine": machine(), "note": args.note, "phases": {}}
    out = args.out or RESULTS / f"first-run-{record['machine']['date_utc'][:10]}.json"
    work = Path(tempfile.mkdtemp(prefix="multilab-first-run-"))
    # both clones are of the commit HEAD was at the start, whatever lands meanwhile
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()
    record["commit"] = commit
    runs = [("first", ["setup", "smoke"])] + ([("second", ["setup", "default"])]
                                                if args.default else [])
    try:
        for clone_name, phases in runs:
            if not run_in_fresh_clone(work / clone_name, commit, phases, record):
                break
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"record: {write_json(out, record)}")


if __name__ == "__main__":
    main()
