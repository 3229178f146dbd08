"""The CPU training step against its floor: how far each step is from its matrix products.

Four arms take turns step by step in one process (a change of load hits all alike), each on
the same quick-profile corpus, model and schedule:

* **floor**: only the matrix products of a fused step, at the shapes of its real batches
  (each piece's real tokens through the four products of every layer, the two batched
  attention products at the piece's padded width, the MLM head on the selected tokens; the
  backward pass's two products per forward product), on preallocated operands. No step can
  be faster than these products as they stand;
* **eager**: the trainer's CPU default (``train.step: eager``: 4 length pieces, the MLM head
  on the selected positions, SDPA, torch's dropout);
* **fused**: ``train.step: fused`` (training/fused_step.py): the same pieces, unpadded,
  counter-hash dropout, compiled by inductor (compiled before the timed rounds);
* **fused-before** (unless ``--no-before``): the fused step's earlier graph, which saved
  each dropout mask as a bool tensor for the backward pass instead of recomputing its hash
  (``FusedObjective(recompute_masks=False)``): the same bits and arithmetic, so its time
  against **fused**'s, in the same rounds, is what recomputing the masks gains;
* **fused-adamw** (``--fused-adamw``): the fused step with torch's fused AdamW (the same
  update to float rounding): what that lever gains, in the same run;
* **HF recipe**: ``BertForMaskedLM`` with ``DataCollatorForLanguageModeling`` (bench_train.py's
  baseline).

Then a profiler breakdown of the eager and fused steps: matrix products, inductor's compiled
loops, and the rest. Writes ``benchmarks/results/cpu-floor-<date>[-<suffix>].json``.

    .venv/bin/python benchmarks/bench_cpu_floor.py [--project DIR] [--steps 20] [--threads 2]
        [--fused-adamw] [--suffix b]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as multilab/threads.py sets it
import torch  # after the OpenMP setting, which is read once at load
from transformers import get_linear_schedule_with_warmup

from bench_train import BASELINE, MULTILAB, Arm, Data, Levers
from common import RESULTS, load_average, machine, op_seconds, project_config, write_json
from multilab.resolve import resolve_run
from multilab.training.fused_step import FusedObjective
from multilab.training.train import make_optimizer

FUSED = Levers(batches="random", pieces=4, step="fused")


class Floor:
    """The matrix products of a fused step at the real shapes of its batches, timed alone.

    It draws the batches of its own eager arm (not timed) and times only the products, so
    its rounds see the same kind of batches as the other arms."""

    def __init__(self, data: Data, seed: int, schedule_steps: int, threads: int) -> None:
        self.source = Arm("floor-batches", MULTILAB, data, seed, schedule_steps)
        config = self.source.model.config
        self.hidden, self.inner = config.hidden_size, config.intermediate_size
        self.heads, self.layers, self.vocab = (config.num_attention_heads,
                                               config.num_hidden_layers, config.vocab_size)
        self.threads = threads
        self.seconds: list[float] = []

    def _operands(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        arm = self.source
        inputs = arm._inputs(arm._next_rows())
        arm.step_number += 1
        attention = inputs.model["attention_mask"]
        h, f, size = self.hidden, self.inner, self.hidden // self.heads
        pairs: list[tuple[torch.Tensor, torch.Tensor]] = []

        def linear(tokens: int, into: int, out: int) -> None:  # forward, dX, dW
            pairs.extend([(torch.randn(tokens, into), torch.randn(into, out)),
                          (torch.randn(tokens, out), torch.randn(out, into)),
                          (torch.randn(into, tokens), torch.randn(tokens, out))])

        for piece in arm.pieces:
            if len(piece) == 0:
                continue
            rows_mask = attention[piece]
            width = int(rows_mask.sum(1).max())
            tokens = int(rows_mask.sum())
            chosen = int(inputs.selected[piece].sum())
            batch = len(piece) * self.heads
            for _ in range(self.layers):
                linear(tokens, h, 3 * h)
                linear(tokens, h, h)
                linear(tokens, h, f)
                linear(tokens, f, h)
                q, k = torch.randn(batch, width, size), torch.randn(batch, size, width)
                probs = torch.randn(batch, width, width)
                pairs += [(q, k), (probs, q)] * 3  # scores, context; each twice backward
            linear(chosen, h, h)
            linear(chosen, h, self.vocab)
        return pairs

    def step(self, record: bool = True) -> None:
        torch.set_num_threads(self.threads)
        pairs = self._operands()
        started = time.perf_counter()
        for a, b in pairs:
            torch.matmul(a, b)
        if record:
            self.seconds.append(time.perf_counter() - started)


def fused_before(levers: Levers, data: Data, seed: int, schedule_steps: int) -> Arm:
    """The fused arm with the earlier graph (dropout masks saved, not recomputed)."""
    arm = Arm("fused-before", levers, data, seed, schedule_steps)
    arm.fused = arm.objective = FusedObjective(arm.model, recompute_masks=False)
    return arm


def fused_adamw(levers: Levers, data: Data, seed: int, schedule_steps: int) -> Arm:
    """The fused arm with torch's fused AdamW in place of the per-parameter one."""
    arm = Arm("fused-adamw", levers, data, seed, schedule_steps)
    train, model_cfg = data.run.study.train, data.run.model
    arm.optimizer = make_optimizer(arm.model, model_cfg.lr, train.weight_decay,
                                   train.adam_eps, one_kernel=True)
    arm.scheduler = get_linear_schedule_with_warmup(arm.optimizer, train.warmup_steps,
                                                    schedule_steps)
    return arm


def breakdown(arm: Arm, steps: int) -> dict[str, float]:
    """Seconds a step under the profiler: matrix products (aten), inductor's compiled C++
    loops, the rest of the aten ops (element-wise, dropout, norms, copies, the optimizer)."""
    kinds: dict[str, float] = defaultdict(float)
    for key, seconds in op_seconds(lambda: arm.step(record=False), steps).items():
        op = key.removeprefix("aten::")
        if key.startswith("aten::") and op in ("mm", "addmm", "bmm", "baddbmm", "matmul",
                                               "linear"):
            kinds["matrix products"] += seconds
        elif "CompiledFxGraph" in key or "cpp_fused" in key:
            kinds["compiled loops"] += seconds
        elif key.startswith("aten::"):
            kinds["other aten ops"] += seconds
    kinds["total"] = sum(kinds.values())
    return dict(kinds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, default=None,
                        help="a built project folder (default: the repository's, or a new one)")
    parser.add_argument("--steps", type=int, default=20, help="timed rounds")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--no-hf", action="store_true", help="leave out the HF recipe arm")
    parser.add_argument("--no-before", action="store_true",
                        help="leave out the fused step's earlier graph (fused-before)")
    parser.add_argument("--fused-adamw", action="store_true",
                        help="add the fused step with torch's fused AdamW (fused-adamw)")
    parser.add_argument("--suffix", default="", help="the record's name: cpu-floor-<date>-SUFFIX")
    args = parser.parse_args()

    cfg = project_config(args.project)
    run = resolve_run(cfg, "original", args.seed)
    data = Data(run)
    schedule = 2300
    threads = {"threads": args.threads}
    arms: dict[str, Any] = {
        "floor": Floor(data, args.seed, schedule, args.threads),
        "eager": Arm("eager", Levers(**{**vars(MULTILAB), **threads}), data, args.seed,
                     schedule),
        "fused": Arm("fused", Levers(**{**vars(FUSED), **threads}), data, args.seed,
                     schedule),
    }
    if not args.no_before:
        arms["fused-before"] = fused_before(Levers(**{**vars(FUSED), **threads}), data,
                                            args.seed, schedule)
    if args.fused_adamw:
        arms["fused-adamw"] = fused_adamw(Levers(**{**vars(FUSED), **threads}), data,
                                            args.seed, schedule)
    if not args.no_hf:
        arms["hf-recipe"] = Arm("hf-recipe", Levers(**{**vars(BASELINE), **threads}), data,
                                args.seed, schedule)
    torch.set_num_threads(args.threads)  # before machine(), which records the thread count
    record: dict[str, Any] = {"what": __doc__.splitlines()[0], "machine": machine(),
                              "cpu_flags": _cpu_flags(), "args": vars(args) | {
                                  "project": str(args.project)}}
    compile_started = time.perf_counter()
    arms["fused"].step(record=False)  # compiles forward and backward
    record["fused_compile_seconds"] = time.perf_counter() - compile_started
    for name in ("fused-before", "fused-adamw"):
        if name in arms:
            arms[name].step(record=False)
    loads = []
    for number in range(args.warmup + args.steps):
        for arm in arms.values():
            arm.step(record=number >= args.warmup)
        loads.append(load_average()[0])
        print(f"round {number + 1}/{args.warmup + args.steps} load {loads[-1]}",
              file=sys.stderr, flush=True)
    torch.set_num_threads(args.threads)
    medians = {name: statistics.median(arm.seconds) for name, arm in arms.items()}
    record["seconds_per_step"] = {
        name: {"median": medians[name], "min": min(arm.seconds), "max": max(arm.seconds)}
        for name, arm in arms.items()}
    record["ratio_to_floor"] = {name: medians[name] / medians["floor"] for name in arms}
    record["speedup_over"] = {
        "fused_vs_eager": medians["eager"] / medians["fused"],
        **({"fused_vs_hf_recipe": medians["hf-recipe"] / medians["fused"],
            "eager_vs_hf_recipe": medians["hf-recipe"] / medians["eager"]}
           if "hf-recipe" in medians else {}),
        **({"fused_adamw_vs_fused": medians["fused"] / medians["fused-adamw"]}
           if "fused-adamw" in medians else {}),
        **({"fused_vs_fused_before": medians["fused-before"] / medians["fused"],
            "fused_vs_fused_before_per_round": [
                before / now for before, now in zip(arms["fused-before"].seconds,
                                                    arms["fused"].seconds, strict=True)]}
           if "fused-before" in medians else {})}
    record["load_average_per_round"] = loads
    record["profile_seconds_per_step"] = {
        name: breakdown(arms[name], 3) for name in ("eager", "fused", "fused-before",
                                                    "fused-adamw")
        if name in arms}
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    suffix = f"-{args.suffix}" if args.suffix else ""
    path = write_json(RESULTS / f"cpu-floor-{date}{suffix}.json", record)
    for name in arms:
        print(f"{name:10s} {medians[name]:.3f} s/step  {record['ratio_to_floor'][name]:.2f}x "
              "the floor")
    print(f"wrote {path}")


def _cpu_flags() -> list[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return sorted(f for f in line.split(":", 1)[1].split()
                          if f.startswith(("avx", "amx", "fma")))
    return []


if __name__ == "__main__":
    main()
