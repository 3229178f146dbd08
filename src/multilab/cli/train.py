"""``train``: one model, or every (modification, seed) pair asked for, one at a time or in
stacks of ``train.stack`` models."""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from multilab.cli.common import AddCommand, config_of, record_result
from multilab.errors import UserError

#: What ``multilab train --help`` says beyond its line in the command list.
TRAIN_DESCRIPTION = (
    "Train (or resume) one model of the study: the modification (a name, a `+` combo "
    "or a paper ID) at one seed. A model whose fingerprint is unchanged is never "
    "trained twice; a killed run resumes from its last checkpoint. Repeated -m and "
    "--seed train every pair, one at a time or, with train.stack = k, in stacks of "
    "up to k models as one batched computation.")


def cmd_train(args: argparse.Namespace) -> None:
    from multilab.resolve import check_seed, resolve_run

    cfg = config_of(args)
    # a bad value fails before seconds of imports
    modifications = args.modification or ["original"]
    seeds = [check_seed(seed, "--seed") for seed in args.seed]
    runs = [resolve_run(cfg, modification, seed) for modification in modifications
            for seed in seeds]
    stacks = _stacks(runs, cfg.train.stack, modifications, seeds)
    from multilab import tracking
    from multilab.evaluation.evaluate import curve_hook

    experiment_id = tracking.connect(cfg.paths, cfg.experiment)
    if stacks is None:
        from multilab.training.train import train_model

        model_dirs = [train_model(run, experiment_id=experiment_id, curve_hook=curve_hook(run))
                      for run in runs]
    else:
        from multilab.training.train_stacked import train_stack

        model_dirs = [path for stack in stacks for path in train_stack(
            stack, experiment_id=experiment_id, curve_hooks=[curve_hook(r) for r in stack])]
    for model_dir in model_dirs:
        record_result(cfg, "train", _train_result(model_dir), model_dir, once=True)
        print(f"model in {model_dir}")


def _stacks(runs: list, stack: int, modifications: list[str], seeds: list[int]
            ) -> list[list] | None:
    """``train.stack``'s stacks of ``runs`` (None: one model at a time), or one line naming
    what cannot be: a stack larger than the models on offer, models of two architectures."""
    from multilab.lab.modifications import check_stack

    if len({run.model_dir for run in runs}) < len(runs):
        raise UserError("train: a model is named twice (-m and --seed repeat one); valid: each "
                        "modification and seed once")
    if stack == 1:
        return None
    if stack > len(runs):
        raise UserError(
            f"train.stack = {stack}: only {len(runs)} model(s) on offer "
            f"({', '.join(modifications)} x seeds {', '.join(map(str, seeds))}); valid: 1 to "
            f"{len(runs)}, or more -m/--seed")
    check_stack([run.modification for run in runs])
    from multilab.lab.modifications import trains_stacked

    alone = next((run.modification for run in runs if not trains_stacked(run.modification)),
                 None)
    if alone is not None:
        raise UserError(f"train.stack = {stack} with {alone!r}: its models train one at a "
                        "time (valid: stack 1, or modifications without nsp and sep-L1-<n>)")
    return [runs[start:start + stack] for start in range(0, len(runs), stack)]


def _train_result(model_dir: Path) -> dict:
    """A training's record: its done file and its last logged step (loss, lr, tokens/s)."""
    from multilab.training.model_dir import read_done

    result = dict(read_done(model_dir) or {})
    log_file = model_dir / "train_log.csv"
    if log_file.is_file():
        with log_file.open(encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        if rows:
            result["last_log"] = {k: float(v) for k, v in rows[-1].items()
                                  if v not in ("", None) and _is_number(v)}
            result["log_rows"] = len(rows)
    return result


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def add_train(add: AddCommand) -> None:
    p = add("train", help="train (or resume) one model", description=TRAIN_DESCRIPTION)
    p.add_argument("--modification", "-m", action="append",
                   help="name, combo or paper ID (default original; repeatable)")
    p.add_argument("--seed", type=int, action="append", required=True, help="repeatable")
    p.set_defaults(func=cmd_train)
