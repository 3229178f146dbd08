"""The paper-budget step on a CPU: where its time goes, and what the levers left would buy.

Issue 24 asks for a paper-budget model (100 epochs = 9,200 steps) in ≤ 45 min on the
project's 2-core machine, i.e. ≤ 0.29 s a step. ``bench_train.py`` measured the levers that
got the step from the HF recipe's ≈ 1.6 s to ≈ 0.48 s (length pieces, the selected-positions
head, two threads). This benchmark takes the trainer's CPU default from there, at the paper
profile's schedule, and measures, with every arm taking turns step by step in one process (so
a change of load hits all alike):

* **trained vs fresh weights**: the same step from a checkpoint of a real paper-budget run
  (weights *and* AdamW state) against the initial weights; the trainer's own log shows the
  step slowing by ≈ 16 % over a run (docs/PERFORMANCE.md), and this says whether the model's
  state is the cause;
* **flush denormals** (``torch.set_flush_denormal``) on the trained state: the candidate fix;
* **eager attention** instead of SDPA;
* **dropout off**: *not* a lever (dropout is part of the paper's model) but its share of the
  step, which a faster dropout could at best win back; and a **hash dropout** (the hidden
  states' keep masks from a counter hash in a few integer ops instead of the CPU's Bernoulli
  generator) as a probe of what a custom kernel would buy;
* **bf16 autocast** (matrix products in bfloat16: AMX / AVX-512-BF16 where the CPU has them);
* all of them at once (except dropout off);
* AdamW's ``fused`` and ``foreach`` implementations instead of the per-tensor loop that
  ``torch.optim.AdamW`` runs on a CPU by default (hundreds of small ops a step);
* one thread vs two (with ``OMP_WAIT_POLICY=PASSIVE``, as the trainer sets it).

Then a profiler breakdown of the default step by kind of work (matrix products, dropout,
layer norm, optimizer, …): the matrix products are the floor that no overhead lever removes;
and what a paper run spends besides its steps (curve points, checkpoints).

Run from the project root, on a built project with a checkpoint of the original model, e.g. a
fresh clone in which ``dvc exp run -S profile=paper -S 'study=[original]'`` has run a while:
``.venv/bin/python benchmarks/bench_paper_step.py --project DIR --checkpoint CKPT``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

from multilab.resolve import resolve_run

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as multilab/threads.py sets it
import torch  # after the OpenMP setting, which is read once at load
from transformers import get_linear_schedule_with_warmup

from bench_train import BASELINE, MULTILAB, Arm, Data, Levers, take_turns
from common import RESULTS, load_average, machine, op_seconds, project_config, write_json
from multilab.training.checkpoints import load_checkpoint

MODIFICATION = "original"

#: leaf aten ops by the kind of work they do, first match wins (substring of the op's name);
#: self CPU time is summed per kind. AdamW's per-tensor updates land in "elementwise".
KINDS = (
    ("matrix products", ("mm", "matmul", "linear")),
    ("dropout masks", ("bernoulli", "native_dropout")),
    ("layer norm", ("layer_norm",)),
    ("softmax", ("softmax",)),
    ("gelu", ("gelu",)),
    ("loss", ("cross_entropy", "nll_loss")),
    ("embeddings, indexing", ("embedding", "index", "masked_select", "nonzero")),
    ("sums (bias gradients, norms)", ("sum", "norm")),
    ("copies, fills", ("copy_", "fill_", "zero_", "clone", "cat", "stack", "contiguous")),
    ("elementwise (mul, add, div, where, AdamW's updates)", ("",)),
)


class HashDropout(torch.nn.Module):
    """Dropout whose keep mask is a counter hash (a few integer ops on the whole tensor)
    instead of one draw of the CPU's Bernoulli generator per element, which is slow here.

    A speed probe for the "custom kernel" lever, not a replacement proven equivalent: each call
    takes one seed from torch's generator, so masks differ from call to call and from step to
    step, but their statistics beyond the keep rate were not checked.
    """

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p
        self.threshold = round(p * 65536)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return hidden
        seed = int(torch.randint(1, 2**31 - 1, (1,)))
        h = torch.arange(hidden.numel(), dtype=torch.int64).view(hidden.shape)
        h = (h * 0x9E3779B1 + seed) & 0xFFFFFFFF  # Weyl sequence, then a murmur3 finaliser
        h = ((h ^ (h >> 16)) * 0x85EBCA6B) & 0xFFFFFFFF
        h = ((h ^ (h >> 13)) * 0xC2B2AE35) & 0xFFFFFFFF
        keep = ((h ^ (h >> 16)) & 0xFFFF) >= self.threshold
        return hidden * keep.to(hidden.dtype) * (1.0 / (1.0 - self.p))


class CheckpointArm(Arm):
    """An arm that starts from a saved training state and may flush denormals in its step."""

    def __init__(self, name: str, levers: Levers, data: Data, seed: int, schedule_steps: int,
                 checkpoint: Path | None = None, flush_denormal: bool = False,
                 dropout: str = "native", optimizer: str = "default",
                 bf16: bool = False) -> None:
        super().__init__(name, levers, data, seed, schedule_steps)
        self.bf16 = bf16
        if optimizer != "default":  # AdamW's fused (one kernel) or foreach (batched) path
            groups = [{k: v for k, v in g.items() if k != "initial_lr"}
                      for g in self.optimizer.param_groups]
            self.optimizer = torch.optim.AdamW(groups, lr=data.run.model.lr, eps=groups[0]["eps"],
                                               **{optimizer: True})
            self.scheduler = get_linear_schedule_with_warmup(
                self.optimizer, data.run.study.train.warmup_steps, schedule_steps)
        self.flush_denormal = flush_denormal
        if checkpoint is not None:
            saved = load_checkpoint(checkpoint)  # the trainer's reader (checks state.sha256)
            self.model.load_state_dict(saved["model"])
            self.optimizer.load_state_dict(saved["optimizer"])
            self.scheduler.load_state_dict(saved["scheduler"])
            self.step_number = int(saved["state"]["step"])
        if dropout == "off":
            for module in self.model.modules():
                if isinstance(module, torch.nn.Dropout):
                    module.p = 0.0
        elif dropout == "hash":  # the hidden-state dropouts; attention's p goes to its kernel
            for name, module in list(self.model.named_modules()):
                if isinstance(module, torch.nn.Dropout) and not name.endswith("self.dropout"):
                    parent_name, _, child_name = name.rpartition(".")
                    setattr(self.model.get_submodule(parent_name), child_name,
                            HashDropout(module.p))

    def step(self, record: bool = True) -> None:
        # MXCSR flags are per thread: with one thread the whole step sees the setting
        torch.set_flush_denormal(self.flush_denormal)
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
                super().step(record)
        finally:
            torch.set_flush_denormal(False)


def denormal_share(arm: Arm) -> dict[str, float]:
    """Fraction of the weights and of AdamW's moments that are subnormal (denormal) floats."""
    tiny = torch.finfo(torch.float32).tiny

    def share(tensors: list[torch.Tensor]) -> float:
        total = sum(t.numel() for t in tensors)
        sub = sum(int(((t != 0) & (t.abs() < tiny)).sum()) for t in tensors)
        return sub / total if total else math.nan

    weights = [p.detach() for p in arm.model.parameters()]
    moments = [s[key] for s in arm.optimizer.state.values() for key in ("exp_avg", "exp_avg_sq")
               if key in s]
    return {"weights": share(weights), "adam_moments": share(moments)}


def breakdown(arm: Arm, steps: int) -> dict[str, Any]:
    """Self CPU time of the step's leaf ops, summed by kind of work (:data:`KINDS`)."""
    by_kind: dict[str, float] = defaultdict(float)
    by_op: dict[str, float] = defaultdict(float)
    for key, seconds in op_seconds(lambda: arm.step(record=False), steps).items():
        if not key.startswith("aten::"):
            continue
        op = key.removeprefix("aten::")
        by_op[op] += seconds
        kind = next(k for k, names in KINDS if any(n in op for n in names))
        by_kind[kind] += seconds
    total = sum(by_kind.values())
    top = sorted(by_op.items(), key=lambda item: -item[1])[:15]
    return {
        "steps": steps,
        "aten_self_seconds_per_step": total,
        "by_kind_seconds_per_step": dict(sorted(by_kind.items(), key=lambda i: -i[1])),
        "by_kind_share": {k: v / total for k, v in sorted(by_kind.items(), key=lambda i: -i[1])},
        "top_ops_seconds_per_step": dict(top),
    }


def side_costs(arm: Arm, schedule_steps: int, rounds: int = 2) -> dict[str, float]:
    """Seconds of what a paper run does besides its steps: one curve point (the trainer's
    ``curve_hook`` on ``curve_sentences`` dev and train sentences) and one checkpoint's
    ``state.pt`` (weights + AdamW state, flushed to disk as the trainer does), and their
    minutes over a run of ``schedule_steps``."""
    import tempfile
    import time

    from multilab.evaluation.evaluate import curve_hook

    hook = curve_hook(arm.data.run)
    arm.model.eval()
    started = time.perf_counter()
    for _ in range(rounds):
        hook(arm.step_number, arm.model)
    curve = (time.perf_counter() - started) / rounds
    arm.model.train()
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        for number in range(rounds):
            with open(Path(folder) / f"state{number}.pt", "wb") as handle:
                torch.save({"model": arm.model.state_dict(),
                            "optimizer": arm.optimizer.state_dict()}, handle)
                handle.flush()
                os.fsync(handle.fileno())
        checkpoint = (time.perf_counter() - started) / rounds
    train = arm.data.run.study.train
    curve_points, checkpoints = len(train.eval_points), schedule_steps // train.checkpoint_every
    return {"curve_point_seconds": curve, "checkpoint_state_seconds": checkpoint,
            "curve_points": curve_points, "checkpoints": checkpoints,
            "minutes_per_paper_model": (curve_points * curve + checkpoints * checkpoint) / 60}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, required=True,
                        help="a project folder with the corpus and vocabulary built")
    parser.add_argument("--checkpoint", type=Path, required=True,
                        help="a checkpoint-N folder of that project's original model")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--steps", type=int, default=20, help="timed rounds")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "paper-step.json")
    args = parser.parse_args()

    if not (args.checkpoint / "state.pt").is_file():
        print(f"bench_paper_step: {args.checkpoint} has no state.pt; valid: a checkpoint-N "
              "folder of a training run (artifacts/checkpoints/…/checkpoint-N)", file=sys.stderr)
        sys.exit(2)
    cfg = project_config(args.project, {"profile": "paper"})  # the repository's params.yaml
    run = resolve_run(cfg, MODIFICATION, args.seed)
    data = Data(run)
    steps_per_epoch = math.ceil(len(data.examples) / run.model.batch_size)
    schedule_steps = round(run.epochs * steps_per_epoch)
    one = replace(MULTILAB, threads=1)
    ckpt = args.checkpoint
    arms = [
        CheckpointArm("fresh weights, 2 threads (the CPU default)", MULTILAB, data, args.seed,
                      schedule_steps),
        CheckpointArm("before: the HF recipe (padded batch, head on every position)", BASELINE,
                      data, args.seed, schedule_steps),
        CheckpointArm("before: one piece (the paper profile's length_pieces: 1)",
                      replace(MULTILAB, pieces=1, recompute=False), data, args.seed,
                      schedule_steps),
        CheckpointArm("trained state, 2 threads", MULTILAB, data, args.seed, schedule_steps,
                      ckpt),
        CheckpointArm("fresh weights, 1 thread", one, data, args.seed, schedule_steps),
        CheckpointArm("trained state, 1 thread", one, data, args.seed, schedule_steps, ckpt),
        CheckpointArm("trained state, 1 thread, flush denormals", one, data, args.seed,
                      schedule_steps, ckpt, flush_denormal=True),
        CheckpointArm("trained state, 2 threads, eager attention",
                      replace(MULTILAB, attention="eager"), data, args.seed, schedule_steps,
                      ckpt),
        CheckpointArm("trained state, 2 threads, fused AdamW", MULTILAB, data, args.seed,
                      schedule_steps, ckpt, optimizer="fused"),
        CheckpointArm("trained state, 2 threads, foreach AdamW", MULTILAB, data, args.seed,
                      schedule_steps, ckpt, optimizer="foreach"),
        CheckpointArm("trained state, 2 threads, dropout off (its share, not a lever)",
                      MULTILAB, data, args.seed, schedule_steps, ckpt, dropout="off"),
        CheckpointArm("trained state, 2 threads, hash dropout", MULTILAB, data, args.seed,
                      schedule_steps, ckpt, dropout="hash"),
        CheckpointArm("trained state, 2 threads, bf16 autocast", MULTILAB, data, args.seed,
                      schedule_steps, ckpt, bf16=True),
        CheckpointArm("trained state, 2 threads, all: eager, hash dropout, fused AdamW, bf16",
                      replace(MULTILAB, attention="eager"), data, args.seed, schedule_steps,
                      ckpt, dropout="hash", optimizer="fused", bf16=True),
    ]
    trained = next(arm for arm in arms if arm.name == "trained state, 2 threads")
    record: dict[str, Any] = {
        "machine": machine(), "args": {k: str(v) for k, v in vars(args).items()},
        "setup": {"profile": cfg.profile, "examples": len(data.examples),
                  "steps_per_epoch": steps_per_epoch, "schedule_steps": schedule_steps,
                  "checkpoint_step": trained.step_number},
        "denormals": {"fresh": denormal_share(arms[0]), "trained": denormal_share(trained)},
    }
    loads = take_turns(arms, warmup=args.warmup, steps=args.steps, label="paper-step")
    rows = {arm.name: arm.summary() for arm in arms}
    reference = rows[arms[0].name]["seconds_per_step"]
    for row in rows.values():
        row["vs_default_speed"] = reference / row["seconds_per_step"]
        row["minutes_per_paper_model"] = row["seconds_per_step"] * schedule_steps / 60
    record["rows"] = rows
    record["load_average_samples"] = loads
    write_json(args.out, record)
    torch.set_num_threads(2)
    record["profile_trained_2_threads"] = breakdown(trained, args.profile_steps)
    record["side_costs_2_threads"] = side_costs(trained, schedule_steps)
    record["load_average_at_end"] = load_average()
    write_json(args.out, record)
    for name, row in rows.items():
        print(f"{row['seconds_per_step']:.3f} s/step  {row['vs_default_speed']:.2f}x  "
              f"{row['minutes_per_paper_model']:.0f} min/model  {name}")
    print(record["profile_trained_2_threads"]["by_kind_share"])
    print(record["side_costs_2_threads"])


if __name__ == "__main__":
    main()
