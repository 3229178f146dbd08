"""Stacked training (training/stacked.py) against one model at a time: the launch proxy and
the aggregate throughput, side by side.

1. **Kernel-like aten ops per model-step** (the CPU proxy of GPU time): one
   profiled optimizer step of a stack of k members, divided by k, for k = 1, 4, 16, against
   one model's step on the single-model arithmetic (``SoloTrainer`` with ``nn.Dropout``: the
   trainer's step without Accelerate). BERT-small at a GPU's settings: one piece a step
   (``train.length_pieces=1``, the faster one on a GPU, docs/GPU.md). Goal: at most
   4,100 / k × 1.2 per model-step.
2. **Aggregate model-steps/s** for k = 1, 2, 4 on this device: a stack of k against the same
   k models trained one after the other, the arms taking turns step by step (a change of
   load hits both alike). On the shared 2-core CPU this is brief and noisy; the load average
   is recorded.

Data: the built corpus of the quick profile (``--data corpus``, built in a temporary folder
if the project has none), or verse-like synthetic sentences (``--data synthetic``: lengths
drawn uniformly from 8-60 word-pieces, for a machine without the Bible database; the GPU
script uses it).

    cd benchmarks && PYTHONPATH=../src ../.venv/bin/python bench_stacked.py
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as multilab/threads.py sets it
import torch  # after the OpenMP setting, which is read once at load

from common import NO_KERNEL, RESULTS, load_average, machine, project_config, write_json
from multilab.data.batches import training_examples
from multilab.data.inputs import InputEncoder
from multilab.resolve import resolve_run
from multilab.training import stacked

#: the measured step of one BERT-small process (docs/GPU.md, one piece)
SINGLE_STEP_KERNELS = 4100


def members_and_settings(args: argparse.Namespace, count: int
                         ) -> tuple[list[stacked.Member], stacked.Settings]:
    """``count`` members of ``original`` (seeds 0, 1, …) at the quick profile, one piece."""
    overrides: dict[str, Any] = {"profile": args.profile, "train": {"length_pieces": 1}}
    if args.batch:
        overrides["models"] = {"small": {"batch_size": args.batch}}
    if args.data == "corpus":
        cfg = project_config(args.project, overrides)
    else:
        tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "bench-stacked"
        cfg = _synthetic_config(tmp, overrides)
    members = []
    for seed in range(count):
        run = resolve_run(cfg, "original", seed)
        if args.data == "corpus":
            member = stacked.Member.of(run)
        else:
            member = _synthetic_member(run, seed, args.sentences)
        members.append(member)
    run = resolve_run(cfg, "original", 0)
    return members, stacked.settings_of(run, members[0].encoder)


def _synthetic_config(tmp: Path, overrides: dict[str, Any]):
    from common import PARAMS, PATH_KEYS
    from multilab.resolve import load_config

    return load_config(PARAMS, overrides | {"paths": {k: str(tmp / k) for k in PATH_KEYS}})


def _synthetic_member(run, seed: int, sentences: int) -> stacked.Member:
    """Verse-like sentences (8-60 word-pieces) of the study's vocabulary size, per seed."""
    encoder = InputEncoder(run.recipe, run.study.vocab.size, run.study.train.max_length)
    generator = torch.Generator().manual_seed(10_000 + seed)
    lengths = torch.randint(8, 61, (sentences,), generator=generator).tolist()
    lines = [torch.randint(5, run.study.vocab.size, (n,), generator=generator) for n in lengths]
    examples = training_examples(lines, run.recipe, encoder)
    steps = -(-len(examples) // run.model.global_batch) * 1000
    return stacked.Member(seed, examples, encoder, run.model.lr, steps,
                          run.study.train.mask_prob, run.recipe.replacement)


def kernel_ops(trainer) -> dict[str, int]:
    """Leaf aten ops of the device's part of one step (``trainer.update``, after one
    unprofiled step; the CPU's batch and masks are made before), and those that launch a
    kernel on a GPU (common.NO_KERNEL: views and metadata do not)."""
    from torch.profiler import ProfilerActivity, profile

    trainer(0)
    batch = trainer.batch(1)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        trainer.update(1, batch)
    leaves = [e for e in prof.events() if e.name.startswith("aten::") and not e.cpu_children]
    kernels = [e for e in leaves if e.name.removeprefix("aten::") not in NO_KERNEL]
    return {"leaf_aten_ops": len(leaves), "kernel_like_ops": len(kernels)}


def launch_proxy(args: argparse.Namespace, device: str) -> dict[str, Any]:
    members, settings = members_and_settings(args, max(args.kernel_ks))
    solo = stacked.SoloTrainer(members[0], settings, device, counter_dropout=False)
    single = kernel_ops(solo)
    rows = [{"arm": "one model (nn.Dropout, torch AdamW)", "k": 1, **single,
             "kernel_like_per_model_step": single["kernel_like_ops"]}]
    counter = kernel_ops(stacked.SoloTrainer(members[0], settings, device))
    rows.append({"arm": "one model, counter dropout", "k": 1, **counter,
                 "kernel_like_per_model_step": counter["kernel_like_ops"]})
    for k in args.kernel_ks:
        fresh, _ = members_and_settings(args, k)
        ops = kernel_ops(stacked.StackedTrainer(fresh, settings, device))
        per = ops["kernel_like_ops"] / k
        rows.append({"arm": f"stack of {k}", "k": k, **ops,
                     "kernel_like_per_model_step": round(per, 1),
                     "goal_per_model_step": round(SINGLE_STEP_KERNELS / k * 1.2, 1),
                     "vs_one_model": round(single["kernel_like_ops"] / per, 2)})
    return {"rows": rows}


def throughput(args: argparse.Namespace, device: str, report) -> dict[str, Any]:
    """Aggregate model-steps/s of a stack of k and (for k in ``--separate-ks``) of the same k
    models one after another. The stack's time is also split into the CPU's part (batches,
    masks, padding: a data loader's work, which worker processes could do ahead) and the
    device's part (forward, backward, update); ``report`` is called after each k."""
    out: dict[str, Any] = {"rows": [], "load_average_samples": [load_average()]}
    for k in args.time_ks:
        members, settings = members_and_settings(args, k)
        stack = stacked.StackedTrainer(members, settings, device)
        separate = k in args.separate_ks
        solos = [stacked.SoloTrainer(m, settings, device, counter_dropout=False)
                 for m in members_and_settings(args, k)[0]] if separate else []
        seconds = {"stack_cpu_part": 0.0, "stack_device_part": 0.0, "separate": 0.0}
        for step in range(args.warmup + args.steps):
            timed = step >= args.warmup
            started = time.perf_counter()
            batch = stack.batch(step)
            _sync(device)
            prepared = time.perf_counter()
            stack.update(step, batch)
            _sync(device)
            done = time.perf_counter()
            for solo in solos:
                solo(step)
            _sync(device)
            if timed:
                seconds["stack_cpu_part"] += prepared - started
                seconds["stack_device_part"] += done - prepared
                seconds["separate"] += time.perf_counter() - done
        out["load_average_samples"].append(load_average())
        model_steps = k * args.steps
        whole = seconds["stack_cpu_part"] + seconds["stack_device_part"]
        row = {"k": k, "steps_each": args.steps,
               "stacked_model_steps_per_s": round(model_steps / whole, 3),
               "stacked_device_part_model_steps_per_s":
                   round(model_steps / seconds["stack_device_part"], 3),
               "stack_cpu_part_share": round(seconds["stack_cpu_part"] / whole, 3),
               "peak_gpu_mib": _peak_gpu(device)}
        if separate:
            row["separate_model_steps_per_s"] = round(model_steps / seconds["separate"], 3)
            row["stacked_vs_separate"] = round(seconds["separate"] / whole, 3)
        out["rows"].append(row)
        report(out)
        print(row, flush=True)
        del stack, solos
    return out


def cpu_part(args: argparse.Namespace, report) -> dict[str, Any]:
    """Seconds of the stack's CPU part alone (``StackedTrainer.batch``, on the CPU) at each k
    in ``--time-ks``: the vectorised batch against the member-by-member one
    (``batch_member_by_member``, what ``batch`` was before), taking turns step by step, and
    with ``--profile-cpu-part`` the cProfile of each arm's top functions."""
    out: dict[str, Any] = {"rows": [], "load_average_samples": [load_average()]}
    for k in args.time_ks:
        members, settings = members_and_settings(args, k)
        stack = stacked.StackedTrainer(members, settings, "cpu")
        arms = {"member_by_member": stack.batch_member_by_member, "vectorised": stack.batch}
        seconds = dict.fromkeys(arms, 0.0)
        for step in range(args.warmup + args.steps):
            for name, arm in arms.items():
                started = time.perf_counter()
                arm(step)
                if step >= args.warmup:
                    seconds[name] += time.perf_counter() - started
        out["load_average_samples"].append(load_average())
        row: dict[str, Any] = {
            "k": k, "steps": args.steps,
            **{f"{name}_ms_per_step": round(1000 * s / args.steps, 2)
               for name, s in seconds.items()},
            **{f"{name}_ms_per_member": round(1000 * s / args.steps / k, 3)
               for name, s in seconds.items()},
            "speedup": round(seconds["member_by_member"] / seconds["vectorised"], 2)}
        if args.profile_cpu_part:
            row["profile"] = {name: _top_functions(arm, args.warmup + args.steps, args.steps)
                              for name, arm in arms.items()}
        out["rows"].append(row)
        report(out)
        print({key: value for key, value in row.items() if key != "profile"}, flush=True)
    return out


def prefetch_overlap(args: argparse.Namespace, report) -> dict[str, Any]:
    """Whole stacked steps on the CPU at each k in ``--time-ks``: the batch built before
    the device's part (``batch`` then ``update``) against the next step's batch built in a
    worker thread meanwhile (``trainer(step, prefetch=True)``); two stacks of the same
    members, taking turns step by step. The batch's own time is timed apart first."""
    out: dict[str, Any] = {"rows": [], "load_average_samples": [load_average()]}
    for k in args.time_ks:
        members, settings = members_and_settings(args, k)
        plain = stacked.StackedTrainer(members, settings, "cpu")
        ahead = stacked.StackedTrainer(members_and_settings(args, k)[0], settings, "cpu")
        seconds = {"batch_alone": 0.0, "in_turn": 0.0, "prefetched": 0.0}
        for step in range(args.warmup + args.steps):
            timed = step >= args.warmup
            started = time.perf_counter()
            batch = plain.batch(step)
            built = time.perf_counter()
            plain.update(step, batch)
            done = time.perf_counter()
            ahead(step, prefetch=True)
            if timed:
                seconds["batch_alone"] += built - started
                seconds["in_turn"] += done - started
                seconds["prefetched"] += time.perf_counter() - done
        ahead.close()
        out["load_average_samples"].append(load_average())
        row = {"k": k, "steps": args.steps,
               **{f"{name}_s_per_step": round(s / args.steps, 3) for name, s in seconds.items()},
               "batch_share_in_turn": round(seconds["batch_alone"] / seconds["in_turn"], 3),
               "prefetched_vs_in_turn": round(seconds["in_turn"] / seconds["prefetched"], 3)}
        out["rows"].append(row)
        report(out)
        print(row, flush=True)
    return out


def _top_functions(arm, first_step: int, steps: int, top: int = 8) -> list[dict[str, Any]]:
    """cProfile of ``steps`` calls of ``arm``: the functions with the most own time."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for step in range(first_step, first_step + steps):
        arm(step)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in stats.values())
    ranked = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:top]
    return [{"function": f"{Path(file).name}:{line}({name})", "calls": entry[1],
             "own_share": round(entry[2] / total, 3)}
            for (file, line, name), entry in ranked]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _peak_gpu(device: str) -> float | None:
    if not device.startswith("cuda"):
        return None
    peak = torch.cuda.max_memory_allocated() / 2**20
    torch.cuda.reset_peak_memory_stats()
    return round(peak, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "stacked-cpu.json")
    parser.add_argument("--project", type=Path, default=None)
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--data", choices=("corpus", "synthetic"), default="corpus")
    parser.add_argument("--sentences", type=int, default=2048, help="synthetic sentences")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--kernel-ks", type=int, nargs="*", default=[1, 4, 16])
    parser.add_argument("--time-ks", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--separate-ks", type=int, nargs="*", default=[1, 2, 4],
                        help="the k at which k separate models are timed too")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--cpu-part-only", action="store_true",
                        help="time only the stack's CPU part (its batches, on the CPU) at "
                             "--time-ks, vectorised against member by member")
    parser.add_argument("--profile-cpu-part", action="store_true",
                        help="with --cpu-part-only: the top functions of each arm (cProfile)")
    parser.add_argument("--prefetch-only", action="store_true",
                        help="time whole steps at --time-ks on the CPU, the next batch "
                             "built in a worker thread against in turn")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--tf32", action="store_true",
                        help="float32 matrix products on the GPU's TF32 tensor cores (another "
                             "arithmetic: an arm to measure, not the trainer's setting)")
    parser.add_argument("--batch", type=int, default=None,
                        help="BERT-small's batch instead of the profile's (the op count does "
                             "not depend on it; the CPU's time does)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    record: dict[str, Any] = {
        "what": "stacked training (training/stacked.py) vs one model at a time: kernel-like "
                "aten ops per model-step and aggregate model-steps/s",
        "machine": machine(),
        "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(),
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    def reporter(key: str):
        """Keep a part's partial results under ``key`` and rewrite the file (a run cut
        short keeps what finished)."""
        def report(partial: dict[str, Any]) -> None:
            record[key] = partial
            write_json(args.out, record)
        return report

    if args.prefetch_only:
        record["what"] = ("the stacked trainer's step with the next batch prefetched in a "
                          "worker thread against in turn")
        prefetch_overlap(args, reporter("prefetch"))
        return
    if args.cpu_part_only:
        record["what"] = ("the stacked trainer's CPU part (StackedTrainer.batch): vectorised "
                          "over members against member by member")
        cpu_part(args, reporter("cpu_part"))
        return
    if args.kernel_ks:
        record["launch_proxy"] = launch_proxy(args, args.device)
        write_json(args.out, record)
        print(record["launch_proxy"])
    if args.time_ks:
        throughput(args, args.device, reporter("throughput"))

if __name__ == "__main__":
    main()
