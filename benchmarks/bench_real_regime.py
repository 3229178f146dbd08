"""Issue 55: the CPU cost of one point of the real-language sweep (``studies/real-regime.yaml``).

A point is a model shape (hidden size, heads, layers) trained on English + German verses,
then ``evaluate`` (every layer) and ``downstream``. The machine is shared (load averages of
10 on 2 cores are usual), so wall time says little: this measures **CPU seconds** of the
real commands (``multilab train``, ``evaluate``, ``downstream`` in child processes at one
thread, ``MULTILAB_THREADS=1``), which is what a point costs on an idle core at one thread.

- a training step: each shape trains ``--short`` and ``--long`` steps in two fresh runs; the
  CPU difference over the step difference is one step's cost, start-up and the final save
  cancelling out;
- evaluation and fine-tuning: measured in full once, on the ``--reference`` shape, and scaled
  to any other shape by the ratio of their step costs (both are forward/backward passes of
  the same model over verses).

The estimate of a point is then ``steps × step + (evaluate + downstream) × ratio``; see
``estimate_minutes`` and benchmarks/RESULTS-real-regime.md.

Run from the project root (≈ 10 CPU minutes; more wall time under load):
``PYTHONPATH=src .venv/bin/python benchmarks/bench_real_regime.py --project /tmp/rr``
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from common import RESULTS, ROOT, cpu_seconds, machine, train_record, write_json

#: (hidden, heads, layers): the sweep's shapes (intermediate size 4 × hidden)
SHAPES = ((64, 2, 4), (64, 2, 8), (64, 2, 12), (128, 2, 4), (128, 4, 8), (128, 4, 12),
          (256, 4, 4), (256, 4, 8), (256, 4, 12))
REFERENCE = (64, 2, 4)


def shape_settings(hidden: int, heads: int, layers: int) -> list[str]:
    """The ``--set`` values of one shape (BERT's 4 × hidden feed-forward)."""
    return [f"models.small.hidden_size={hidden}", f"models.small.intermediate_size={4 * hidden}",
            f"models.small.num_attention_heads={heads}",
            f"models.small.num_hidden_layers={layers}"]


def estimate_minutes(step_s: float, steps: int, reference_step_s: float,
                     evaluate_s: float, downstream_s: float) -> float:
    """CPU minutes of one point at one thread: its steps, and the reference shape's
    evaluation and fine-tuning scaled by the step-cost ratio."""
    ratio = step_s / reference_step_s
    return (steps * step_s + (evaluate_s + downstream_s) * ratio) / 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, required=True, help="a scratch folder")
    parser.add_argument("--scope", default="bible", help="corpus.train_scope")
    parser.add_argument("--short", type=int, default=2, help="steps of the short run")
    parser.add_argument("--long", type=int, default=8, help="steps of the long run")
    parser.add_argument("--shapes", nargs="*", help="hidden,heads,layers ... (default: all)")
    parser.add_argument("--out", type=Path, default=RESULTS / "real-regime-steps.json")
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes] if args.shapes \
        else list(SHAPES)
    root = args.project.resolve()
    env = {**os.environ, "MULTILAB_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    base = ["--set=languages=[3, s]", f"--set=corpus.train_scope={args.scope}",
            "--set=train.eval_points=[]", "--set=evaluate.layers=all",
            *(f"--set=paths.{key}={root / key}" for key in
              ("artifacts", "metrics", "mlruns", "results", "reports"))]
    if not (root / "artifacts" / "vocab").is_dir():
        cpu_seconds([*base, "corpus", "build"], env)
        cpu_seconds([*base, "vocab"], env)
    out: dict[str, Any] = {"machine": machine(), "scope": args.scope, "threads": 1,
                           "short": args.short, "long": args.long, "shapes": []}
    per_epoch = None
    for shape in shapes:
        costs = []
        for steps in (args.short, args.long):
            # epochs as a fraction that rounds to `steps` (steps per epoch read from a first run)
            epochs = steps / per_epoch if per_epoch else 0.01
            argv = [*base, *(f"--set={s}" for s in shape_settings(*shape)),
                    f"--set=train.epochs={epochs:.6f}", "train", "--seed", "0"]
            costs.append(cpu_seconds(argv, env))
            record = train_record(root / "results")
            per_epoch = record["steps_per_epoch"]
            costs[-1] = (record["steps"], costs[-1])
        (short_steps, short_s), (long_steps, long_s) = costs
        if long_steps <= short_steps:  # the first shape's first run only learnt per_epoch
            continue
        step_s = (long_s - short_s) / (long_steps - short_steps)
        entry = {"hidden": shape[0], "heads": shape[1], "layers": shape[2],
                 "cpu_s_per_step": round(step_s, 3), "steps_per_epoch": per_epoch,
                 "train_examples": record["train_examples"]}
        print(json.dumps(entry), flush=True)
        out["shapes"].append(entry)
        write_json(args.out, out)
    reference = next((e for e in out["shapes"]
                      if (e["hidden"], e["heads"], e["layers"]) == REFERENCE), None)
    if reference is not None:
        settings = [*(f"--set={s}" for s in shape_settings(*REFERENCE)),
                    f"--set=train.epochs={args.long / per_epoch:.6f}"]
        model = root / "artifacts" / "models" / "original" / "seed0"
        train = cpu_seconds([*base, *settings, "train", "--seed", "0"], env)  # trained: a check
        out["reference"] = {
            "shape": list(REFERENCE), "train_check_cpu_s": round(train, 1),
            "evaluate_cpu_s": round(cpu_seconds([*base, *settings, "evaluate", str(model)],
                                                env), 1),
            "downstream_cpu_s": round(cpu_seconds([*base, *settings, "downstream", str(model)],
                                                  env), 1)}
        print(json.dumps(out["reference"]), flush=True)
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    write_json(args.out, out)


if __name__ == "__main__":
    main()
