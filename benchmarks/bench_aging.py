"""Does a training process slow down as it ages (docs/PERFORMANCE.md,
"training slows down as it goes")?

A shared machine's load changes over a long run, so a falling tokens/s alone cannot tell a
process that ages from a host that got busier. This benchmark runs, at the same time:

- an *aged* process: ``train_model`` for many steps (MLflow on, as ``multilab train``), each
  step timed as the trainer times it, with the process's minor page faults, resident memory
  and (every ``--census`` steps) Python's live object count and tracemalloc-free counts;
- the same with MLflow off (``--arms``), to see whether the per-step logging ages a process;
- *fresh* probes: new processes, one after another, each timing ``--probe-steps`` steps of the
  same configuration from step 0 (the work per step is the same on average).

Per window of wall time, the aged arms' median step time over the fresh probes' median in the
same window is the aging, free of the host's load. Writes one JSON file.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import RESULTS, load_average, machine, write_json

HERE = Path(__file__).resolve().parent


def _rss_mib() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


def _config(project: Path, steps_epochs: float, layers: int):
    from common import project_config

    return project_config(project, {
        "profile": "smoke",
        "train": {"epochs": steps_epochs, "eval_points": [], "checkpoint_every": 10**6,
                  "log_every": 10},
        "models": {"small": {"num_hidden_layers": layers}},
        "evaluate": {"layers": [0, min(layers, 8)]},
    })


def train_and_time(args: argparse.Namespace) -> None:
    """One process: train, and append one JSON line per step to ``args.log``."""
    import torch

    from multilab import tracking
    from multilab.resolve import resolve_run
    from multilab.training import train as trainer

    torch.set_num_threads(1)
    cfg = _config(args.project, args.epochs, args.layers)
    run = resolve_run(cfg, "original", args.seed)
    handle = args.log.open("a", encoding="utf-8")
    real_call = trainer._Step.__call__

    def timed(self, step: int) -> dict[str, float]:
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        started = time.perf_counter()
        row = real_call(self, step)
        line: dict[str, Any] = {
            "t": time.time(), "step": step + 1, "seconds": time.perf_counter() - started,
            "tokens_per_s": row["tokens_per_s"],
            "minor_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults,
            "rss_mib": round(_rss_mib(), 1)}
        if args.census and (step + 1) % args.census == 0:
            line["python_objects"] = len(gc.get_objects())
        handle.write(json.dumps(line) + "\n")
        handle.flush()
        return row

    trainer._Step.__call__ = timed
    experiment = tracking.connect(cfg.paths, cfg.experiment) if args.mlflow else None
    model_dir = cfg.paths.models / f"aging-{args.name}"
    try:
        trainer.train_model(run, experiment_id=experiment, progress=False, model_dir=model_dir,
                            stop_after_step=args.stop_after)
    except Exception as err:  # StoppedEarly: the probes stop on purpose
        if type(err).__name__ != "StoppedEarly":
            raise


def _spawn(args: argparse.Namespace, name: str, log: Path, *extra: str) -> subprocess.Popen:
    command = [sys.executable, str(HERE / "bench_aging.py"), "--role", "train", "--name", name,
               "--project", str(args.project), "--layers", str(args.layers),
               "--epochs", str(args.epochs), "--log", str(log), *extra]
    return subprocess.Popen(command, cwd=HERE, stdout=subprocess.DEVNULL)


def _read(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def drive(args: argparse.Namespace) -> None:
    """The aged arms and the fresh probes side by side; then the windows."""
    work = args.project / "aging"
    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob("*.jsonl"):
        old.unlink()
    started = time.time()
    aged = {arm: _spawn(args, arm, work / f"{arm}.jsonl",
                        *(["--mlflow"] if arm == "mlflow-on" else []),
                        "--census", str(args.census))
            for arm in args.arms}
    probes = 0
    while any(p.poll() is None for p in aged.values()) and time.time() - started < args.seconds:
        probe = _spawn(args, f"fresh{probes}", work / "fresh.jsonl", "--stop-after",
                       str(args.probe_steps), "--seed", str(probes))
        while probe.poll() is None and time.time() - started < args.seconds:
            time.sleep(2)
        if probe.poll() is None:
            probe.terminate()
            probe.wait()
        probes += 1
    for process in aged.values():
        if process.poll() is None:
            process.terminate()
            process.wait()
    rows = {arm: _read(work / f"{arm}.jsonl") for arm in args.arms}
    fresh = [r for r in _read(work / "fresh.jsonl") if r["step"] > 2]  # warm-up steps out
    edges = [started + i * args.window for i in range(int(args.seconds // args.window) + 2)]
    windows = []
    for low, high in itertools.pairwise(edges):
        probe_times = [r["seconds"] for r in fresh if low <= r["t"] < high]
        row: dict[str, Any] = {"from_s": round(low - started), "to_s": round(high - started),
                               "fresh_median_s": _median(probe_times),
                               "fresh_steps": len(probe_times)}
        for arm, arm_rows in rows.items():
            mine = [r for r in arm_rows if low <= r["t"] < high]
            if not mine:
                continue
            median = _median([r["seconds"] for r in mine])
            row[arm] = {"steps": f"{mine[0]['step']}-{mine[-1]['step']}", "median_s": median,
                        "vs_fresh": round(median / row["fresh_median_s"], 3)
                        if median and row["fresh_median_s"] else None,
                        "minor_faults_per_step": _median([r["minor_faults"] for r in mine]),
                        "rss_mib": mine[-1]["rss_mib"],
                        "python_objects": next((r["python_objects"] for r in reversed(mine)
                                                if "python_objects" in r), None)}
        windows.append(row)
    write_json(args.out, {"what": __doc__.split("\n")[0], "machine": machine(),
                          "load_average_at_end": load_average(),
                          "args": {k: str(v) for k, v in vars(args).items()},
                          "fresh_probes": probes, "windows": windows})
    print(f"wrote {args.out}")


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--role", choices=("drive", "train"), default="drive")
    parser.add_argument("--project", type=Path, required=True,
                        help="a built project folder (corpora and vocabulary)")
    parser.add_argument("--out", type=Path, default=RESULTS / "aging-cpu.json")
    parser.add_argument("--arms", nargs="*", default=["mlflow-on", "mlflow-off"])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--epochs", type=float, default=400)
    parser.add_argument("--seconds", type=float, default=1800, help="how long the drive runs")
    parser.add_argument("--window", type=float, default=300, help="seconds per window")
    parser.add_argument("--probe-steps", type=int, default=30)
    parser.add_argument("--census", type=int, default=100, help="count Python objects every N")
    # the train role's own
    parser.add_argument("--name", default="aged")
    parser.add_argument("--log", type=Path)
    parser.add_argument("--mlflow", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stop-after", type=int, default=None)
    args = parser.parse_args()
    if args.role == "train":
        train_and_time(args)
    else:
        drive(args)


if __name__ == "__main__":
    main()
