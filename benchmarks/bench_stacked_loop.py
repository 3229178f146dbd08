"""The stacked trainer's loop around the step (training/train_stacked.py), timed in-process:
``train_stack`` of k members on the smoke corpus (BERT-small cut to one layer, batches of 8,
MLflow on, ``log_every`` 10 as the quick profile sends), split into the trainer's calls and
``StepLog.add`` on the main thread (each member's MLflow window of step rows).

To compare two versions, run it once per checkout with that checkout's ``src`` on
PYTHONPATH (the arms taking turns), each appending its row to ``--out``:

    cd benchmarks && PYTHONPATH=../src ../.venv/bin/python bench_stacked_loop.py --label after
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch

from common import (
    PARAMS,
    PATH_KEYS,
    RESULTS,
    load_average,
    machine,
    write_json,
)
from multilab import tracking
from multilab.data.project import build_project_data
from multilab.resolve import load_config, resolve_run
from multilab.training import run_tracking, stacked, train_stacked


def _config(root: Path, corpus: Path):
    """The smoke profile in ``root``, sharing the corpus and vocabulary built in ``corpus``."""
    def paths(where: Path) -> dict[str, str]:
        return {k: str(where / k) for k in PATH_KEYS}

    base = load_config(PARAMS, {"profile": "smoke", "paths": paths(corpus)})
    if not base.paths.vocab.exists():
        build_project_data(base)
    (root / "artifacts").mkdir(parents=True)
    for name in ("corpora", "vocab"):
        (root / "artifacts" / name).symlink_to(base.paths.artifacts / name)
    (root / "data").symlink_to(base.paths.data)
    return load_config(PARAMS, {
        "profile": "smoke", "paths": paths(root),
        "train": {"max_train_sentences": 256, "eval_points": [], "checkpoint_every": 200,
                  "log_every": 10, "epochs": 2},
        "models": {"small": {"num_hidden_layers": 1, "batch_size": 8}},
        "evaluate": {"layers": [0, 1]}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--label", required=True, help="the arm's name (e.g. before, after)")
    parser.add_argument("--source", default="this checkout",
                        help="which src the PYTHONPATH points at (recorded with the row)")
    parser.add_argument("-k", type=int, default=8)
    parser.add_argument("--corpus", type=Path,
                        default=Path(tempfile.gettempdir()) / "bench-stacked-loop")
    parser.add_argument("--out", type=Path, default=RESULTS / "stacked-cpu-loop.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="stack-loop-"))
    cfg = _config(root, args.corpus)
    runs = [resolve_run(cfg, "original", seed) for seed in range(args.k)]
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    spent: dict[str, Any] = {"trainer_calls_s": 0.0, "step_log_add_s": 0.0, "steps": 0}

    def timed(owner: type, name: str, key: str, count: bool = False) -> None:
        original = getattr(owner, name)

        def wrapper(self, *a, **kw):
            started = time.perf_counter()
            result = original(self, *a, **kw)
            spent[key] += time.perf_counter() - started
            spent["steps"] += count
            return result

        setattr(owner, name, wrapper)

    timed(stacked.StackedTrainer, "__call__", "trainer_calls_s", count=True)
    timed(run_tracking.StepLog, "add", "step_log_add_s")
    started = time.perf_counter()
    train_stacked.train_stack(runs, experiment_id=experiment, progress=False)
    whole = time.perf_counter() - started
    row = {"label": args.label, "source": args.source, "k": args.k, "steps": spent["steps"],
           "whole_s": round(whole, 2),
           **{key: round(spent[key], 3) for key in ("trainer_calls_s", "step_log_add_s")},
           "step_log_add_ms_per_step": round(1000 * spent["step_log_add_s"] / spent["steps"], 2),
           "load_average": load_average(), "machine": machine()}
    record = json.loads(args.out.read_text()) if args.out.exists() else {
        "what": __doc__.split("\n")[0], "rows": []}
    record["rows"].append(row)
    write_json(args.out, record)
    print(row)


if __name__ == "__main__":
    main()
