"""``evaluate``, ``downstream``, ``variant``: the measurements of a trained model, and
params.yaml's modification trained and measured over the seeds."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from multilab.cli.common import AddCommand, config_of, record_result

#: What ``multilab evaluate --help`` says beyond its line in the command list.
EVALUATE_DESCRIPTION = (
    "Measure a model directory's multilinguality (word alignment, sentence "
    "retrieval, word translation at evaluate.layers) and its MLM perplexity; "
    "logged to the model's MLflow run and written as JSON.")


#: What ``multilab variant --help`` says beyond its line in the command list.
VARIANT_DESCRIPTION = (
    "Train and evaluate params.yaml's `modification` at every seed of `seeds` "
    "(reusing a study model of the same fingerprint), then write its means and name "
    "to metrics/variant.json: the stage `dvc exp run -S modification=NAME` reruns, "
    "before the report.")


def cmd_evaluate(args: argparse.Namespace) -> None:
    from multilab.evaluation.evaluate import evaluate_and_record

    cfg = config_of(args)
    if args.layers:
        from multilab.resolve import parse_layers

        cfg = replace(cfg, evaluate=replace(cfg.evaluate, layers=parse_layers(args.layers)))
    out = args.out and Path(args.out)
    record = evaluate_and_record(cfg, Path(args.model_dir), out)
    from multilab.lab.metric_table import short_table

    name = f"{record['modification']} s{record['seed']}"
    print(short_table({name: record["metrics"]}))
    print(f"all metrics: {out or cfg.paths.eval_file(record['modification'], record['seed'])}")
    record_result(cfg, "evaluate", record, Path(args.model_dir),
                  qualifier=f"layers-{args.layers}" if args.layers else "")


def cmd_downstream(args: argparse.Namespace) -> None:
    from multilab.evaluation.downstream import downstream_and_record, downstream_path
    from multilab.lab.languages import parse_languages
    from multilab.resolve import resolve_run

    cfg = config_of(args)
    languages = (parse_languages(args.languages, cfg.language_list[0].edition, cfg.corpus_isos)
                 if args.languages else None)
    out = args.out and Path(args.out)
    record = downstream_and_record(cfg, Path(args.model_dir), languages, out, mds=args.mds)
    qualifier = "-".join([*(["mds"] if args.mds else []),
                          *([args.languages.replace(",", "-")] if args.languages else [])])
    record_result(cfg, "downstream", record, Path(args.model_dir), qualifier=qualifier)
    shifted = record.get("mds", {}).get("languages", {})

    def score(label: str) -> str:
        plain = f"{label} {record['test'][label]['accuracy']:.3f}"
        if label not in shifted:
            return plain
        shift = shifted[label]
        return f"{plain} -> {shift['test_shifted']:.3f} shifted (alpha {shift['alpha']:g})"

    majority = record["majority"]
    frozen = f", frozen below layer {record['mds']['layer']}" if args.mds else ""
    print(f"{record['modification']} s{record['seed']}: accuracy "
          f"{', '.join(score(label) for label in record['labels'])} (majority "
          f"{majority['accuracy']:.3f}, epoch {record['epochs']['selected']}{frozen})")
    where = out or downstream_path(cfg, resolve_run(cfg, record["modification"], record["seed"]),
                                   args.mds)
    print(f"all results: {where}")


def cmd_variant(args: argparse.Namespace) -> None:
    from multilab.evaluation.variant import run_variant
    from multilab.lab.metric_table import short_table

    cfg = config_of(args)
    summary = run_variant(cfg)
    record_result(cfg, "variant", summary, qualifier=summary["modification"])
    n = summary["n_seeds"]
    name = f"{summary['modification']} ({'1 seed' if n == 1 else f'mean of {n} seeds'})"
    print(short_table({name: summary}))
    print(f"all metrics: {cfg.paths.metrics / 'variant.json'}, "
          f"{cfg.paths.variant / 'summary.json'} (std, per seed)")


def add_evaluate(add: AddCommand) -> None:
    p = add("evaluate", help="multilinguality + perplexity of a model directory",
            description=EVALUATE_DESCRIPTION)
    p.add_argument("model_dir")
    p.add_argument("--out", help="JSON file for the results (default: artifacts/eval/...)")
    p.add_argument("--layers", help="layers to evaluate: 'all' or e.g. 0,4,8 "
                   "(default: evaluate.layers of params.yaml)")
    p.set_defaults(func=cmd_evaluate)


def add_downstream(add: AddCommand) -> None:
    p = add("downstream", help="zero-shot downstream task (downstream.task) of a model "
            "directory: fine-tune on the first language, test on every language")
    p.add_argument("model_dir")
    p.add_argument("--languages", help="some of the study's languages as the study spells "
                   "them, the first fine-tuned on, e.g. 3,fake or s,3 or enfake:3,s (default: "
                   "the study's)")
    p.add_argument("--out", help="JSON file for the results (default: artifacts/downstream/...)")
    p.add_argument("--mds", action="store_true",
                   help="Liu et al. 2020b §4.3: fine-tune with the lower half frozen and test "
                        "every other language with the mean difference shift, alpha chosen on its "
                        "dev set (downstream.mds_layer, downstream.mds_alphas)")
    p.set_defaults(func=cmd_downstream)


def add_variant(add: AddCommand) -> None:
    add("variant", help="train + evaluate params.modification over the seeds",
        description=VARIANT_DESCRIPTION).set_defaults(func=cmd_variant)
