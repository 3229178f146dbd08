"""How much of a test process's CPU goes to Python's cycle collector, at its default
thresholds (700, 10, 10) and at the test suite's (``tests/conftest.py``:
``COLLECTOR_THRESHOLDS``).

Runs the fast loop (``pytest -m "not slow"``, two workers, as README says) once per arm and
round, arms taking turns; in every pytest process a plugin (this file, loaded with ``-p``)
times each collection by generation with ``gc.callbacks`` and writes the sums at the end. The
collector's seconds are process CPU time, so background load changes them little; the wall
and total CPU of each run are noted beside them, not compared.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_collector.py --rounds 2

Results: ``benchmarks/results/collector-<date>.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARMS = {"python-default": "700,10,10", "suite": "suite"}
OUT_VARIABLE = "BENCH_COLLECTOR_OUT"  # the folder each pytest process writes its sums into
ARM_VARIABLE = "BENCH_COLLECTOR_THRESHOLDS"  # "a,b,c", or "suite": the conftest's own

_seconds = {0: 0.0, 1: 0.0, 2: 0.0}
_counts = {0: 0, 1: 0, 2: 0}
_started = [0.0]


def _timed(phase: str, info: dict) -> None:
    if phase == "start":
        _started[0] = time.process_time()
    else:
        generation = info["generation"]
        _seconds[generation] += time.process_time() - _started[0]
        _counts[generation] += 1


# --------------------------------------------------------------------- the pytest plugin

@pytest.hookimpl(trylast=True)  # after the conftest's, which sets the suite's thresholds
def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(OUT_VARIABLE):
        gc.callbacks.append(_timed)
        if (arm := os.environ.get(ARM_VARIABLE, "suite")) != "suite":
            gc.set_threshold(*map(int, arm.split(",")))


def pytest_sessionfinish(session: pytest.Session) -> None:
    if folder := os.environ.get(OUT_VARIABLE):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "controller")
        usage = resource.getrusage(resource.RUSAGE_SELF)
        Path(folder, f"{worker}.json").write_text(json.dumps({
            "thresholds": list(gc.get_threshold()),
            "collector_s": {f"gen{g}": round(s, 2) for g, s in _seconds.items()},
            "collections": {f"gen{g}": n for g, n in _counts.items()},
            "process_cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "max_rss_mib": round(usage.ru_maxrss / 1024)}))


# --------------------------------------------------------------------- the benchmark

def run_arm(thresholds: str) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ, **{OUT_VARIABLE: folder, ARM_VARIABLE: thresholds})
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "benchmarks")])
        start = time.monotonic()
        done = subprocess.run([str(ROOT / ".venv/bin/pytest"), "-m", "not slow", "-q",
                               "-p", "no:cacheprovider", "-p", "bench_collector"],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.monotonic() - start
        summary = next((line for line in reversed(done.stdout.splitlines())
                        if " passed" in line or " failed" in line), "(no summary line)")
        processes = {p.stem: json.loads(p.read_text()) for p in Path(folder).glob("*.json")}
    collector = sum(sum(p["collector_s"].values()) for p in processes.values())
    cpu = sum(p["process_cpu_s"] for p in processes.values())
    return {"thresholds": thresholds, "pytest": summary, "wall_s": round(wall),
            "collector_s": round(collector, 1), "process_cpu_s": round(cpu, 1),
            "collector_share": round(collector / cpu, 3) if cpu else None,
            "processes": processes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path,
                        default=ROOT / "benchmarks" / "results"
                        / f"collector-{dt.date.today().isoformat()}.json")
    args = parser.parse_args()
    runs = []
    for round_ in range(args.rounds):
        for arm, thresholds in ARMS.items():
            result = run_arm(thresholds) | {"arm": arm, "round": round_ + 1}
            print(f"{arm} round {round_ + 1}: collector {result['collector_s']} s of "
                  f"{result['process_cpu_s']} CPU s; {result['pytest']}", flush=True)
            runs.append(result)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    args.out.write_text(json.dumps({
        "what": "CPU seconds of Python's cycle collector in the fast loop's pytest processes "
                "(two workers), default thresholds against the suite's",
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "date": dt.date.today().isoformat(), "commit": commit,
        "load_average_at_end": os.getloadavg(), "python": sys.version.split()[0],
        "runs": runs}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
