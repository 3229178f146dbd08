"""Training throughput: multilab's step path vs the standard Hugging Face MLM recipe.

Both recipes train the same BERT-small (same initial weights) on the same examples (each
English training sentence and its Fake-English twin,
:func:`multilab.data.batches.training_examples`) with the same hyper-parameters (AdamW lr
2e-3, batch 256, 50 warm-up steps then linear decay, weight decay 0.01 except biases/LayerNorm,
eps 1e-6, gradient clipping 1.0).

* **baseline** — what a user would write: random batches, ``DataCollatorForLanguageModeling``
  (pads each batch to its longest sentence, masks 15% with 80/10/10), ``BertForMaskedLM(...,
  labels=...)`` (vocabulary head on every position, -100 labels elsewhere).
* **multilab** — the trainer's step: :func:`~multilab.data.batches.bucketed_batches`,
  :func:`~multilab.data.batches.mask_tokens`,
  :class:`~multilab.training.model.MaskedLMObjective` (head only on the 15% selected
  positions).

The machine is shared (other jobs run beside a benchmark), so the arms are never timed one
after the other: they take turns, one optimizer step each, and any change of load hits all of
them alike. Ratios are the meaningful numbers; absolute tokens/s depend on the load, which is
recorded. Peak memory is measured in fresh subprocesses (``VmHWM``).

Run from the project root: ``.venv/bin/python benchmarks/bench_train.py [--steps 200]``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from transformers import DataCollatorForLanguageModeling, get_linear_schedule_with_warmup

from common import (
    NO_KERNEL,
    RESULTS,
    load_average,
    machine,
    peak_rss_mib,
    project_config,
    project_root,
    write_json,
)
from multilab.config import Config, RunConfig
from multilab.data.batches import (
    MaskedBatch,
    bucketed_batches,
    gradient_pieces,
    mask_tokens,
    mix_seed,
    seeded_generator,
)
from multilab.data.vocab import BILINGUAL_DIR, load_tokenizer
from multilab.files import atomic_open
from multilab.resolve import resolve_run
from multilab.training.fused_step import FusedObjective
from multilab.training.model import MaskedLMObjective, build_model
from multilab.training.train import _accumulate, make_optimizer, train_model
from multilab.training.training_data import prepare_data

MODIFICATION = "original"


@dataclass(frozen=True)
class Levers:
    """One point of the ablation: which of multilab's choices are switched on."""

    batches: str = "bucketed"  # "bucketed" (length-sorted chunks) | "random"
    bucket_chunk: int = 50  # batches per length-sorted chunk ("bucketed" only)
    # >1: each batch sorted by length and run in this many gradient-accumulation pieces,
    # cut where the padding is least (the trainer's ``train.length_pieces``)
    pieces: int = 1
    masking: str = "vectorised"  # "vectorised" (mask_tokens) | "collator" (HF)
    head: str = "selected"  # "selected" (15% of positions) | "full" (every position)
    attention: str = "sdpa"  # "sdpa" | "eager"
    threads: int = 2
    compile: bool = False
    recompute: bool = True  # widest batches recompute activations (selected head only)
    # "batch": the loss is the mean over the batch's selected tokens (HF, multilab);
    # "expected": their sum over the expected count per batch, a constant, so a bucketed
    # batch of short sentences weighs its tokens as a random batch would
    normalise: str = "batch"
    step: str = "eager"  # the trainer's ``train.step``: "eager" | "fused" (pieces > 1 only)


#: the trainer's CPU default (params.yaml: bucket_chunk 1, length_pieces 4)
MULTILAB = Levers(batches="random", pieces=4)
#: the earlier CPU default: batches of one sentence length (bucket_chunk 50), one piece
BUCKETED = Levers(batches="bucketed")
BASELINE = Levers(batches="random", masking="collator", head="full", recompute=False)


def random_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[torch.Tensor]:
    """Plain shuffled batches, as the HF recipe's random sampler draws them (the baseline)."""
    order = torch.randperm(n, generator=seeded_generator(seed, epoch))
    return list(order.split(batch_size))


@dataclass
class Inputs:
    """One prepared step: model inputs, the selected positions and their true ids."""

    model: dict[str, torch.Tensor]
    selected: torch.Tensor  # bool [B, L]
    labels: torch.Tensor  # [N], row-major over ``selected``
    masked: MaskedBatch | None = None  # multilab's form (pieces)

    @property
    def tokens(self) -> int:
        return int(self.model["attention_mask"].sum())


class Data:
    """The training examples in both forms: multilab's pre-encoded ones and HF feature dicts."""

    def __init__(self, run: RunConfig) -> None:
        data, self.encoder = prepare_data(run)
        self.run = run
        self.examples = data.examples
        self.tokenizer = load_tokenizer(run.study.paths.vocab, BILINGUAL_DIR)
        if len(self.tokenizer) != 2 * self.encoder.vocab_size:
            raise RuntimeError(f"bilingual tokenizer has {len(self.tokenizer)} entries")
        # as run_mlm.py prepares a dataset: ids + special_tokens_mask, done once, not timed
        self.features = [
            {
                "input_ids": ids.tolist(),
                "special_tokens_mask": self.tokenizer.get_special_tokens_mask(
                    ids.tolist(), already_has_special_tokens=True
                ),
            }
            for ids, *_ in self.examples.encoded
        ]


class Arm:
    """A model + optimizer trained one step at a time with the chosen levers."""

    def __init__(self, name: str, levers: Levers, data: Data, seed: int, schedule_steps: int):
        self.name, self.levers, self.data, self.seed = name, levers, data, seed
        run = data.run
        train, model_cfg = run.study.train, run.model
        self.batch_size = model_cfg.batch_size
        self.model = build_model(model_cfg, 2 * data.encoder.vocab_size, seed)
        self.model.set_attn_implementation(levers.attention)
        self.model.train()
        self.optimizer = make_optimizer(self.model, model_cfg.lr, train.weight_decay,
                                        train.adam_eps)
        self.scheduler = get_linear_schedule_with_warmup(
            self.optimizer, train.warmup_steps, schedule_steps
        )
        self.collator = DataCollatorForLanguageModeling(
            data.tokenizer, mlm_probability=train.mask_prob, seed=seed
        )
        self.objective: Callable[..., torch.Tensor] = MaskedLMObjective(
            self.model, **({} if levers.recompute else {"checkpoint_positions": None})
        )
        self.fused = FusedObjective(self.model) if levers.step == "fused" else None
        if self.fused is not None:
            self.objective = self.fused
        self.full_model: Callable[..., Any] = self.model
        if levers.compile:
            if levers.head == "selected":
                self.objective = torch.compile(self.objective, dynamic=True)
            else:
                self.full_model = torch.compile(self.model, dynamic=True)
        self.step_number, self.epoch, self.queue = 0, -1, []
        self.pieces: list[torch.Tensor] = []  # of the current batch (gradient_pieces)
        self.losses: list[float] = []
        self.seconds: list[float] = []
        self.prep_seconds: list[float] = []  # index batch → masked model inputs (CPU side)
        self.tokens: list[int] = []
        self.selected: list[int] = []  # masked tokens per step (the loss is their mean)
        self.widths: list[int] = []
        self.held_out: list[tuple[int, float]] = []  # (step, loss on the fixed sample)
        self.piece_widths: list[list[int]] = []  # padded positions of each piece (pieces > 1)
        self.accelerator = Accelerator() if levers.pieces > 1 else None
        if levers.pieces > 1 and (levers.head != "selected" or levers.masking != "vectorised"):
            raise ValueError("pieces > 1 runs the trainer's step: selected head, vectorised")

    def _next_rows(self) -> torch.Tensor:
        if not self.queue:
            self.epoch += 1
            lengths = self.data.examples.lengths
            if self.levers.batches == "bucketed":
                self.queue = bucketed_batches(lengths, self.batch_size, self.seed, self.epoch,
                                              self.levers.bucket_chunk)
            else:
                self.queue = random_batches(len(lengths), self.batch_size, self.seed,
                                            self.epoch)
        rows, self.pieces = gradient_pieces(self.queue.pop(0), self.data.examples.lengths,
                                            self.levers.pieces)
        return rows

    def _inputs(self, rows: torch.Tensor) -> Inputs:
        run = self.data.run
        if self.levers.masking == "vectorised":
            masked = mask_tokens(
                self.data.examples.batch(rows), self.data.encoder, run.study.train.mask_prob,
                run.recipe.replacement, seeded_generator(self.seed, self.step_number, 1),
            )
            return Inputs(masked.inputs, masked.selected, masked.labels, masked)
        batch = self.collator([self.data.features[i] for i in rows.tolist()])
        labels = batch.pop("labels")
        selected = labels != -100
        return Inputs(dict(batch), selected, labels[selected])

    def _loss(self, inputs: Inputs) -> torch.Tensor:
        if self.levers.head == "selected":
            total = self.objective(inputs.selected, inputs.labels, **inputs.model)
            if self.levers.normalise == "expected":
                examples = self.data.examples
                per_example = (examples.tokens() - 2 * len(examples)) / len(examples)
                expected = self.data.run.study.train.mask_prob * per_example * self.batch_size
                self._batch_mean = float(total.detach()) / len(inputs.labels)
                return total / expected
            return total / len(inputs.labels)
        full_labels = torch.full_like(inputs.model["input_ids"], -100)
        full_labels[inputs.selected] = inputs.labels
        return self.full_model(**inputs.model, labels=full_labels).loss

    def step(self, record: bool = True) -> None:
        """One optimizer step, timed from index batch to zeroed gradients."""
        torch.set_num_threads(self.levers.threads)
        started = time.perf_counter()
        inputs = self._inputs(self._next_rows())
        prepared = time.perf_counter()
        torch.manual_seed(mix_seed(self.seed, self.step_number))  # dropout of this step
        if self.fused is not None:
            self.fused.seed_step(mix_seed(self.seed, self.step_number))
        if self.levers.pieces > 1:  # the trainer's own accumulation (backward inside)
            pieces = self.pieces
            loss = torch.tensor(_accumulate(self.objective, self.accelerator, inputs.masked,
                                            pieces, 1, len(inputs.labels)))
            self.piece_widths.append(
                [int(inputs.model["attention_mask"][p].sum(1).max()) * len(p) for p in pieces])
        else:
            loss = self._loss(inputs)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        elapsed = time.perf_counter() - started
        self.step_number += 1
        if record:
            # the logged loss is always the batch's per-token mean, whatever is optimised
            mean = getattr(self, "_batch_mean", None) if self.levers.normalise == "expected" \
                else None
            self.losses.append(float(loss.detach()) if mean is None else mean)
            self.seconds.append(elapsed)
            self.prep_seconds.append(prepared - started)
            self.tokens.append(inputs.tokens)
            self.selected.append(len(inputs.labels))
            rows = inputs.model["input_ids"].shape[0]
            # padded positions per row: one width, or the pieces' areas averaged
            self.widths.append(sum(self.piece_widths[-1]) / rows if self.levers.pieces > 1
                               else int(inputs.model["input_ids"].shape[1]))

    def summary(self) -> dict[str, Any]:
        seconds = sum(self.seconds)
        return {
            "levers": asdict(self.levers),
            "seed": self.seed,
            "timed_steps": len(self.seconds),
            "seconds": seconds,
            "seconds_per_step": seconds / max(len(self.seconds), 1),
            "input_prep_seconds_per_step": sum(self.prep_seconds) / max(len(self.seconds), 1),
            "tokens_per_s": sum(self.tokens) / seconds if seconds else math.nan,
            "mean_padded_width": sum(self.widths) / max(len(self.widths), 1),
            "mean_real_tokens_per_batch": sum(self.tokens) / max(len(self.tokens), 1),
        }


class HeldOut:
    """A fixed sample of examples with fixed masks: one loss both recipes can be compared on.

    The per-step training losses are not comparable as they stand: a bucketed batch holds
    sentences of one length, so its loss depends on that length, and each step weighs its
    tokens differently. This sample is the same for every arm (not timed).
    """

    def __init__(self, data: Data, size: int = 512, seed: int = 0) -> None:
        run, examples = data.run, data.examples
        rows = torch.randperm(len(examples), generator=seeded_generator(seed, 99))[:size]
        rows = rows[torch.argsort(examples.lengths[rows], stable=True)]
        self.batches = [
            mask_tokens(examples.batch(part), data.encoder, run.study.train.mask_prob,
                        run.recipe.replacement, seeded_generator(seed, 99, number))
            for number, part in enumerate(rows.split(128))
        ]

    @torch.no_grad()
    def loss(self, model: torch.nn.Module) -> float:
        model.eval()
        total, count = 0.0, 0
        for masked in self.batches:
            hidden = model.bert(**masked.inputs).last_hidden_state
            logits = model.cls(hidden[masked.selected])
            total += float(F.cross_entropy(logits, masked.labels, reduction="sum"))
            count += len(masked.labels)
        model.train()
        return total / count


def take_turns(arms: list[Arm], warmup: int, steps: int, label: str,
               held_out: HeldOut | None = None, every: int = 20) -> list[float]:
    """Every arm does one step per round; the first ``warmup`` rounds are not recorded.

    Returns the 1-minute load average sampled every 10 rounds (how shared the CPU was).
    """
    started, loads = time.perf_counter(), []
    for number in range(warmup + steps):
        for arm in arms:
            arm.step(record=number >= warmup)
            done = number + 1
            if held_out and (done % every == 0 or done == warmup + steps or number == 0):
                arm.held_out.append((done, held_out.loss(arm.model)))
        if (number + 1) % 10 == 0:
            loads.append(load_average()[0])
            print(f"[{label}] round {number + 1}/{warmup + steps} "
                  f"({time.perf_counter() - started:.0f} s, load {load_average()[0]})",
                  file=sys.stderr, flush=True)
    torch.set_num_threads(2)
    return loads


def collator_facts(data: Data, seed: int, batches: int = 20) -> dict[str, Any]:
    """What DataCollatorForLanguageModeling actually does on our examples (checked, not assumed)."""
    collator = DataCollatorForLanguageModeling(data.tokenizer, mlm_probability=0.15, seed=seed)
    special = torch.tensor(sorted(data.tokenizer.all_special_ids))
    masked_on_special = selected_total = random_total = 0
    random_ids: list[torch.Tensor] = []
    mask_id = data.tokenizer.mask_token_id
    for rows in random_batches(len(data.features), 256, seed, 0)[:batches]:
        features = [data.features[i] for i in rows.tolist()]
        original = collator.tokenizer.pad(
            [{"input_ids": f["input_ids"]} for f in features], return_tensors="pt"
        )["input_ids"]
        batch = collator(features)
        selected = batch["labels"] != -100
        selected_total += int(selected.sum())
        masked_on_special += int(torch.isin(original[selected], special).sum())
        changed = selected & (batch["input_ids"] != original) & (batch["input_ids"] != mask_id)
        random_total += int(changed.sum())
        random_ids.append(batch["input_ids"][changed])
    drawn = torch.cat(random_ids)
    return {
        "tokenizer_length": len(data.tokenizer),
        "special_ids": special.tolist(),
        "selected_positions": selected_total,
        "selected_on_special_tokens": masked_on_special,
        "randomly_replaced": random_total,
        "random_ids_min": int(drawn.min()),
        "random_ids_max": int(drawn.max()),
        "random_ids_in_fake_half": float((drawn >= data.encoder.vocab_size).float().mean()),
        "unk_tokens_in_training_examples": int(
            sum(int((ids == 1).sum()) for ids, *_ in data.examples.encoded)
        ),
    }


def head_to_head(data: Data, steps: int, seeds: list[int], schedule_steps: int,
                 threads: int = 2, baseline_seeds: int = 1,
                 random_batches_arm: bool = False, bucketed_arm: bool = False) -> dict:
    """Baseline and multilab take turns for ``steps`` steps; extra seeds show seed noise.

    ``baseline_seeds`` baselines run on the first seeds (seed noise of the recipe itself).
    ``bucketed_arm`` adds multilab with length-bucketed batches (faster, but a batch holds
    one sentence length). ``random_batches_arm`` adds multilab's random batches in one piece
    and bucketing with a constant loss normaliser: they tell where a difference of the loss
    curves comes from, and whether the normaliser undoes it.
    """
    base, fast = replace(BASELINE, threads=threads), replace(MULTILAB, threads=threads)
    bucketed = replace(BUCKETED, threads=threads)
    arms = [Arm("baseline" if number == 0 else f"baseline-s{seed}", base, data, seed,
                schedule_steps) for number, seed in enumerate(seeds[:baseline_seeds])]
    arms += [Arm(f"multilab-s{seed}", fast, data, seed, schedule_steps) for seed in seeds]
    if bucketed_arm:
        arms.append(Arm(f"multilab-bucketed-s{seeds[0]}", bucketed, data, seeds[0],
                        schedule_steps))
    if random_batches_arm:
        arms.append(Arm(f"multilab-random-batches-s{seeds[0]}",
                        replace(fast, pieces=1, recompute=False), data, seeds[0],
                        schedule_steps))
        arms.append(Arm(f"multilab-expected-norm-s{seeds[0]}",
                        replace(bucketed, normalise="expected"), data, seeds[0],
                        schedule_steps))
    loads = take_turns(arms, warmup=0, steps=steps, label="head-to-head",
                       held_out=HeldOut(data))
    result: dict[str, Any] = {
        arm.name: arm.summary() | {"losses": arm.losses, "selected": arm.selected,
                                   "held_out": arm.held_out}
        for arm in arms
    }
    # the first steps include one-off warm-up costs (allocator, oneDNN primitives): skip 5
    skip = min(5, steps - 1)
    result["tokens_per_s_after_warmup"] = {
        arm.name: sum(arm.tokens[skip:]) / sum(arm.seconds[skip:]) for arm in arms
    }
    result["threads"] = threads
    result["load_average_samples"] = loads
    first_multilab = f"multilab-s{seeds[0]}"
    result["speedup"] = (result[first_multilab]["tokens_per_s"]
                         / result["baseline"]["tokens_per_s"])
    after = result["tokens_per_s_after_warmup"]
    result["speedup_after_warmup"] = after[first_multilab] / after["baseline"]
    tail = max(10, steps // 4)
    result["final_loss_window"] = tail
    result["final_loss"] = {  # token-weighted, as the held-out loss
        arm.name: sum(loss * n for loss, n in zip(arm.losses[-tail:], arm.selected[-tail:],
                                                  strict=True)) / sum(arm.selected[-tail:])
        for arm in arms
    }
    result["final_held_out_loss"] = {arm.name: arm.held_out[-1][1] for arm in arms}
    return result


def ablation(data: Data, steps: int, warmup: int, seed: int, schedule_steps: int,
             with_compile: bool) -> dict:
    """Each lever switched on from the baseline, and off from multilab, all taking turns."""
    points = {
        "baseline (HF recipe)": BASELINE,
        "baseline + length-sorted pieces (4)": replace(BASELINE, pieces=4, head="selected",
                                                       masking="vectorised"),
        "baseline + bucketed batches": replace(BASELINE, batches="bucketed"),
        "baseline + selected-positions head": replace(BASELINE, head="selected"),
        "baseline + vectorised masking": replace(BASELINE, masking="vectorised"),
        "baseline, eager attention": replace(BASELINE, attention="eager"),
        "multilab": MULTILAB,
        # one piece: random batches padded to their longest row (the GPU setting)
        "multilab in one piece": replace(MULTILAB, pieces=1, recompute=False),
        "multilab, 2 pieces": replace(MULTILAB, pieces=2),
        "multilab, 3 pieces": replace(MULTILAB, pieces=3),
        "multilab, 6 pieces": replace(MULTILAB, pieces=6),
        "multilab, 8 pieces": replace(MULTILAB, pieces=8),
        "multilab with bucketed batches (one piece)": BUCKETED,
        "multilab - recompute of wide pieces": replace(MULTILAB, recompute=False),
        "multilab, eager attention": replace(MULTILAB, attention="eager"),
        "multilab, 1 thread": replace(MULTILAB, threads=1),
    }
    compile_error = None
    if with_compile:
        points["multilab + torch.compile"] = replace(MULTILAB, compile=True)
    arms = [Arm(name, levers, data, seed, schedule_steps) for name, levers in points.items()]
    if with_compile:
        try:  # compilation (and any failure) happens on the first step, before timing
            started = time.perf_counter()
            arms[-1].step(record=False)
            arms[-1].step(record=False)
            compile_seconds = time.perf_counter() - started
        except Exception as err:  # inductor needs a C++ toolchain; record why it failed
            compile_error = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
            arms.pop()
    loads = take_turns(arms, warmup=warmup, steps=steps, label="ablation")
    table = {arm.name: arm.summary() for arm in arms}
    reference = table["baseline (HF recipe)"]["tokens_per_s"]
    for row in table.values():
        row["vs_baseline"] = row["tokens_per_s"] / reference
    out: dict[str, Any] = {"rows": table, "load_average_samples": loads}
    if with_compile:
        out["compile"] = ({"error": compile_error} if compile_error
                          else {"first_two_steps_seconds": compile_seconds})
    return out


def kernel_count(data: Data, seed: int) -> dict[str, Any]:
    """Leaf aten ops of one multilab training step: ~ the CUDA kernels it would launch.

    BERT-small is too small to keep a GPU busy, so its GPU step time is bounded by launches
    (~5-10 µs each, plus Python): this count grounds the GPU estimate in docs/GPU.md.
    """
    from torch.profiler import ProfilerActivity, profile

    arm = Arm("count", MULTILAB, data, seed, 100)
    arm.step(record=False)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        arm.step(record=False)
    leaves = [e for e in prof.events() if e.name.startswith("aten::") and not e.cpu_children]
    kernels = [e for e in leaves if e.name.removeprefix("aten::") not in NO_KERNEL]
    return {"leaf_aten_ops": len(leaves), "kernel_like_ops": len(kernels)}


def child(kind: str, project: Path, steps: int) -> None:
    """Runs in a fresh subprocess: one training job, then prints its peak RSS as JSON."""
    if kind.startswith("levers="):  # throughput of one arm alone (3 untimed warm-up steps)
        run = resolve_run(project_config(project), MODIFICATION, 42)
        levers = Levers(**json.loads(kind.removeprefix("levers=")))
        data = Data(run)
        schedule = round(run.epochs * math.ceil(len(data.examples) / run.model.batch_size))
        arm = Arm("alone", levers, data, 42, schedule)
        for number in range(3 + steps):
            arm.step(record=number >= 3)
        report = arm.summary()
    elif kind == "baseline":
        cfg = project_config(project)
        data = Data(resolve_run(cfg, MODIFICATION, 42))
        arm = Arm("baseline", BASELINE, data, 42, steps)
        for _ in range(steps):
            arm.step()
        report = arm.summary()
    else:  # the real trainer, end to end; "trainer+eval" also runs one curve evaluation
        from functools import partial

        import multilab.training.train
        from multilab.evaluation.evaluate import curve_hook

        if kind == "trainer-no-recompute":  # every batch keeps its activations
            multilab.training.train.MaskedLMObjective = partial(MaskedLMObjective,
                                                       checkpoint_positions=None)

        cfg = project_config(project)
        steps_per_epoch = math.ceil(
            len(prepare_data(resolve_run(cfg, MODIFICATION, 42))[0].examples)
            / cfg.models["small"].batch_size
        )
        cfg = project_config(project, {"train": {
            "epochs": steps / steps_per_epoch, "eval_points": [0.5], "checkpoint_every": 10**9,
        }})
        run = resolve_run(cfg, MODIFICATION, 42)
        out = Path(tempfile.mkdtemp(prefix="multilab-bench-model-")) / kind
        started = time.perf_counter()
        hook = curve_hook(run) if kind == "trainer+eval" else None
        train_model(run, model_dir=out, curve_hook=hook, progress=False)
        seconds = time.perf_counter() - started
        done = json.loads((out / "multilab.json").read_text())
        rows = (out / "train_log.csv").read_text().splitlines()[1:]
        report = {
            "steps": done["steps"],
            "seconds_including_setup_and_save": seconds,
            "logged_tokens_per_s": [float(r.split(",")[4]) for r in rows],
            "train_examples": done["train_examples"],
        }
    report["peak_rss_mib"] = peak_rss_mib()
    print(json.dumps(report))


def memory(project: Path, steps: dict[str, int]) -> dict[str, Any]:
    """Peak RSS of each kind of training job, each in its own fresh process."""
    results = {}
    for kind, count in steps.items():
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, __file__, "--child", kind, "--project", str(project),
             "--steps", str(count)],
            capture_output=True, text=True,
        )
        if proc.returncode:
            results[kind] = {"error": proc.stderr[-2000:]}
            continue
        results[kind] = json.loads(proc.stdout.strip().splitlines()[-1])
        results[kind]["wall_seconds"] = time.perf_counter() - started
        print(f"[memory] {kind}: {results[kind]['peak_rss_mib']:.0f} MiB", file=sys.stderr)
    return results


def isolated_throughput(project: Path, arms: dict[str, Levers], steps: int,
                        rounds: int) -> dict[str, Any]:
    """Tokens/s of each arm alone in a fresh process, the arms taking turns ``rounds`` times.

    Why besides the interleaved head-to-head: arms sharing one process share its allocator
    and caches (the baseline frees ~0.3 GB of logits every step), which slowed the piecewise
    arm by up to 40 % there. Alone, each arm runs as ``multilab train`` or a user's script
    would. Turn-taking still spreads any change of load over all arms; the median block counts.
    """
    blocks: dict[str, list[dict[str, Any]]] = {name: [] for name in arms}
    for number in range(rounds):
        for name, levers in arms.items():
            proc = subprocess.run(
                [sys.executable, __file__, "--child", "levers=" + json.dumps(asdict(levers)),
                 "--project", str(project), "--steps", str(steps)],
                capture_output=True, text=True,
            )
            if proc.returncode:
                raise RuntimeError(f"{name}: {proc.stderr[-2000:]}")
            blocks[name].append(json.loads(proc.stdout.strip().splitlines()[-1])
                                | {"load_average": load_average()[0]})
            print(f"[alone] round {number + 1}/{rounds} {name}: "
                  f"{blocks[name][-1]['tokens_per_s']:,.0f} tokens/s", file=sys.stderr)
    out: dict[str, Any] = {"steps_per_block": steps, "rounds": rounds, "blocks": blocks}
    median = {name: sorted(b["tokens_per_s"] for b in runs)[len(runs) // 2]
              for name, runs in blocks.items()}
    reference = median[next(iter(arms))]
    out["median_tokens_per_s"] = median
    out["vs_first"] = {name: value / reference for name, value in median.items()}
    return out


def plot_losses(result: dict, path: Path, steps: int) -> None:
    """Left: per-step training loss (faint) and its 10-step mean. Right: the held-out loss."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (train_ax, held_ax) = plt.subplots(1, 2, figsize=(12, 4.8), dpi=120)
    names = [k for k, v in result.items() if isinstance(v, dict) and "losses" in v]
    palettes = {"baseline": iter(["tab:red", "tab:orange", "tab:brown"]),
                "multilab-r": iter(["tab:purple", "tab:gray"]),
                "multilab-e": iter(["tab:pink", "tab:gray"]),
                "multilab-b": iter(["tab:gray", "black"]),
                "multilab": iter(["tab:blue", "tab:green", "tab:cyan", "tab:olive"])}
    for name in names:
        family = next(key for key in palettes if name.startswith(key))
        colour = next(palettes[family])
        arm = result[name]
        losses = torch.tensor(arm["losses"])
        window = min(10, len(losses))
        smooth = losses.unfold(0, window, 1).mean(1)
        x = torch.arange(1, len(losses) + 1)
        label = ("baseline (HF recipe), seed " + str(arm["seed"]) if name.startswith("baseline")
                 else name.replace("-random-batches", " random batches, one piece")
                 .replace("-bucketed", " bucketed (one length per batch)")
                 .replace("-expected-norm", " loss / expected count").replace("-s", ", seed "))
        label += f": {arm['tokens_per_s']:,.0f} tokens/s"
        train_ax.plot(x, losses, color=colour, alpha=0.2, linewidth=0.8)
        train_ax.plot(x[window - 1 :], smooth, color=colour, linewidth=2, label=label)
        held = list(zip(*arm["held_out"], strict=True))
        held_ax.plot(held[0], held[1], color=colour, linewidth=2, marker="o", markersize=3,
                     label=label)
    train_ax.set_title("training loss of each step (line: 10-step mean)")
    held_ax.set_title("loss on a fixed sample (512 examples, fixed masks)")
    for ax in (train_ax, held_ax):
        ax.set_xlabel("optimizer step (batch 256)")
        ax.set_ylabel("MLM cross-entropy (nats per masked token)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=9)
    loads = result["load_average_samples"] or [math.nan]
    fig.suptitle(f"BERT-small, same initial weights and hyper-parameters, {steps} steps, "
                 f"{result['threads']} thread(s) per arm, mean load {sum(loads) / len(loads):.1f}"
                 f"\nmultilab {result['speedup']:.1f}× the baseline's tokens/s with all arms "
                 "taking turns in one process (each alone in its own process: train-alone.json)")
    fig.tight_layout()
    with atomic_open(path, "wb") as handle:
        fig.savefig(handle, format="png")
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="head-to-head steps per arm")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43],
                        help="multilab seeds (the first also seeds the baseline)")
    parser.add_argument("--baseline-seeds", type=int, default=1,
                        help="how many of --seeds also train a baseline (its seed noise)")
    parser.add_argument("--random-batches-arm", action="store_true",
                        help="add two diagnostic arms: multilab with shuffled (not bucketed) "
                             "batches, and multilab with its loss sum over the expected "
                             "selected count (why would the loss curves differ?)")
    parser.add_argument("--bucketed-arm", action="store_true",
                        help="add multilab with length-bucketed batches (bucket_chunk 50)")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads of both arms in the head-to-head")
    parser.add_argument("--ablation-steps", type=int, default=20)
    parser.add_argument("--ablation-warmup", type=int, default=3)
    parser.add_argument("--memory-steps", type=int, default=0,
                        help="trainer steps for the peak-RSS runs (0 = one full epoch)")
    parser.add_argument("--skip", nargs="*", default=[],
                        choices=["head-to-head", "alone", "ablation", "compile", "kernels",
                                 "memory"])
    parser.add_argument("--alone-steps", type=int, default=30,
                        help="timed steps per block of the isolated throughput runs")
    parser.add_argument("--alone-rounds", type=int, default=3)
    parser.add_argument("--project", type=Path,
                        help="built project folder (default: artifacts/ or a temp build)")
    parser.add_argument("--out", type=Path, default=RESULTS / "train.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.project, args.steps)
        return

    torch.set_num_threads(2)
    record: dict[str, Any] = {"machine": machine(), "args": vars(args) | {"out": str(args.out)}}
    cfg: Config = project_config(args.project)
    run = resolve_run(cfg, MODIFICATION, args.seeds[0])
    data = Data(run)
    steps_per_epoch = math.ceil(len(data.examples) / run.model.batch_size)
    # the schedule of a real quick-profile run: these steps are its first ones
    schedule_steps = round(run.epochs * steps_per_epoch)
    record["setup"] = {
        "modification": MODIFICATION, "profile": cfg.profile, "examples": len(data.examples),
        "tokens_per_epoch": data.examples.tokens(), "steps_per_epoch": steps_per_epoch,
        "schedule_steps": schedule_steps, "batch_size": run.model.batch_size,
    }
    record["collator"] = collator_facts(data, args.seeds[0])
    out = args.out
    if "head-to-head" not in args.skip:
        result = head_to_head(data, args.steps, args.seeds, schedule_steps, args.threads,
                              args.baseline_seeds, args.random_batches_arm,
                              args.bucketed_arm)
        record["head_to_head"] = result
        plot_losses(result, out.with_name(out.stem + "-loss.png"), args.steps)
        write_json(out, record)
    if "alone" not in args.skip:
        record["alone"] = isolated_throughput(project_root(cfg), {
            "baseline (HF recipe)": BASELINE,
            "multilab (random batches, 4 length pieces)": MULTILAB,
            "multilab, random batches in one piece": replace(MULTILAB, pieces=1,
                                                             recompute=False),
            "multilab, bucketed batches": BUCKETED,
        }, args.alone_steps, args.alone_rounds)
        write_json(out, record)
    if "ablation" not in args.skip:
        record["ablation"] = ablation(data, args.ablation_steps, args.ablation_warmup,
                                      args.seeds[0], schedule_steps,
                                      with_compile="compile" not in args.skip)
        write_json(out, record)
    if "kernels" not in args.skip:
        record["kernels_per_step"] = kernel_count(data, args.seeds[0])
        write_json(out, record)
    if "memory" not in args.skip:
        trainer_steps = args.memory_steps or steps_per_epoch
        record["memory"] = memory(project_root(cfg), {
            "trainer": trainer_steps, "trainer-no-recompute": trainer_steps,
            "trainer+eval": trainer_steps, "baseline": 20,
        })
    record["load_average_at_end"] = load_average()
    write_json(out, record)
    print(json.dumps({k: v for k, v in record.items() if k != "head_to_head"}, indent=1,
                     default=str)[:6000])


if __name__ == "__main__":
    main()
