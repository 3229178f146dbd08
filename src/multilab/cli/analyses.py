"""``translate``, ``mrr``, ``static``, ``model-order``: one lab model (or static embeddings)
between two study languages (Liu et al. 2020a/b; Dufter & Schütze 2020 App. B.2)."""

from __future__ import annotations

import argparse
from pathlib import Path

from multilab.cli.common import AddCommand, config_of, record_result
from multilab.errors import UserError


def cmd_translate(args: argparse.Namespace) -> None:
    """Liu et al. 2020b's unsupervised token translation of a finished lab model
    (α × layer sweep)."""
    from multilab.evaluation.token_translation import translate_and_record

    cfg = config_of(args)
    try:
        alphas = tuple(float(a) for a in args.alphas.split(",") if a.strip())
    except ValueError:
        raise UserError(f"--alphas {args.alphas!r}: need numbers > 0, e.g. 1,2,3") from None
    record, folder = translate_and_record(cfg, Path(args.model_dir), args.source, args.target,
                                          args.sentences, alphas,
                                          Path(args.out) if args.out else None)
    best, plain = record["best"], record["unshifted"]
    print(f"{record['source']} -> {record['target']}, {record['sentences']} sentences: best "
          f"convert rate {best['convert_rate']:.3f} (alpha {best['alpha']:g}, layer "
          f"{best['layer']}; BLEU-1 {best['bleu1']:.3f}); unshifted {plain['convert_rate']:.3f} "
          f"(BLEU-1 {plain['bleu1']:.3f})")
    record_result(cfg, "translate", record, Path(args.model_dir),
                  qualifier=f"{record['source']}-{record['target']}")
    print(f"heat maps and JSON: {folder}")


def cmd_mrr(args: argparse.Namespace) -> None:
    """Liu et al. 2020b's word retrieval MRR of a finished lab model, layer by layer."""
    from multilab.evaluation.lab_word_retrieval import mrr_and_record

    cfg = config_of(args)
    record, folder = mrr_and_record(cfg, Path(args.model_dir), args.source, args.target,
                                    args.sentences, Path(args.out) if args.out else None)
    best = max(record["trained"], key=lambda row: row["mrr"])
    floor = record["untrained"][best["layer"]]
    print(f"{record['source']} -> {record['target']}, {record['sentences']} sentences, "
          f"{record['dictionary']} dictionary ({best['queries']} queries): best MRR "
          f"{best['mrr']:.3f} (P@1 {best['p1']:.3f}) at layer {best['layer']}; untrained "
          f"{floor['mrr']:.3f}")
    record_result(cfg, "mrr", record, Path(args.model_dir),
                  qualifier=f"{record['source']}-{record['target']}")
    print(f"JSON: {folder}")


def cmd_static(args: argparse.Namespace) -> None:
    """Liu et al. 2020a/b: static wordpiece embeddings (fastText skipgram / CBOW) on the study's
    train rows, word retrieval MRR and the zero-shot task, over data sizes and windows."""
    from multilab.evaluation.static_embeddings import static_and_record, static_request

    cfg = config_of(args)
    request = static_request(cfg, args.source, args.target, args.models, args.rows,
                             args.windows, args.sentences, args.dim, args.epochs, args.seed)
    record, path = static_and_record(cfg, request, Path(args.out) if args.out else None)
    first = record["task_languages"][0]
    print(f"{record['source']} -> {record['target']}, {record['dictionary']} dictionary "
          f"({record['dictionary_pairs']} pairs), dim {record['dim']}, {record['epochs']} "
          f"epochs; zero-shot accuracy per language ({first} fine-tuned on):")
    for row in record["results"]:
        accuracy = ", ".join(f"{label} {score['accuracy']:.3f}"
                             for label, score in row["zero_shot"]["test"].items())
        print(f"  {row['model']:8s} rows {row['rows']:>6} window {row['window']:>3}: MRR "
              f"{row['mrr']:.3f} (P@1 {row['p1']:.3f}); {accuracy} ({row['seconds']:.0f} s)")
    # one record per seed: a second seed is another measurement, not a newer one of the first
    record_result(cfg, "static", record,
                  qualifier=f"{record['source']}-{record['target']}-seed{record['seed']}")
    print(f"JSON: {path}")


def cmd_model_order(args: argparse.Namespace) -> None:
    """Kendall's tau of Match alignments on a lab model's own vectors (Dufter &
    Schütze 2020 App. B.2)."""
    from multilab.evaluation.model_word_order import model_order_and_record

    cfg = config_of(args)
    record, path = model_order_and_record(cfg, Path(args.model_dir), args.source, args.target,
                                          args.sentences, args.layer,
                                          Path(args.out) if args.out else None)
    print(f"{record['source']} -> {record['target']}, {record['verses']} verses, layer "
          f"{record['layer']}: tau {record['tau']:.3f} ± {record['tau_std']:.3f}")
    record_result(cfg, "model-order", record, Path(args.model_dir),
                  qualifier=f"{record['source']}-{record['target']}-l{record['layer']}")
    print(f"JSON: {path}")


def add_translate(add: AddCommand) -> None:
    p = add("translate", help="Liu et al. 2020b's unsupervised token translation: the "
            "mean difference shift added at each layer, convert rate and BLEU-1")
    p.add_argument("model_dir")
    p.add_argument("--source", required=True, help="a study language, e.g. 3")
    p.add_argument("--target", required=True, help="another, e.g. fake or s")
    p.add_argument("--sentences", type=int, default=1000, help="dev sentences (verses)")
    p.add_argument("--alphas", default="1,2,3", help="shift scales (default 1,2,3)")
    p.add_argument("--out", help="folder for the JSON and the heat maps (default: "
                   "reports/translation/<model>-<source>-<target>/)")
    p.set_defaults(func=cmd_translate)


def add_mrr(add: AddCommand) -> None:
    p = add("mrr", help="Liu et al. 2020b's word retrieval: MRR and P@1 of a model's "
            "contextual word vectors per layer (exact or silver dictionary)")
    p.add_argument("model_dir")
    p.add_argument("--source", required=True, help="a study language, e.g. 3")
    p.add_argument("--target", required=True, help="another, e.g. fake or s")
    p.add_argument("--sentences", type=int, default=2000, help="dev sentences (verses)")
    p.add_argument("--out", help="folder for the JSON (default: "
                   "reports/word_retrieval/<model>-<source>-<target>/)")
    p.set_defaults(func=cmd_mrr)


def add_static(add: AddCommand) -> None:
    p = add("static", help="Liu et al. 2020a/b: static wordpiece embeddings (fastText "
            "skipgram/CBOW) on the study's train rows: word retrieval MRR and the "
            "zero-shot task per model, data size and window")
    p.add_argument("--models", default="skipgram,cbow", help="skipgram and/or cbow")
    p.add_argument("--rows", default="all", help="train rows: counts, fractions in (0, 1) or "
                   "all, e.g. 2000,all (the first rows, as train.max_train_sentences cuts)")
    p.add_argument("--windows", default="5", help="fastText ws (word2vec's window), e.g. 5,20")
    p.add_argument("--source", required=True, help="a study language, e.g. 3")
    p.add_argument("--target", required=True, help="another, e.g. fake or s")
    p.add_argument("--sentences", type=int, default=2000, help="dev sentences for the MRR "
                   "(multilab mrr's default)")
    p.add_argument("--dim", type=int, help="vector size (default: the study BERT's hidden size)")
    p.add_argument("--epochs", type=int, default=10, help="fastText epochs (default 10)")
    p.add_argument("--seed", type=int, help="seed (default: the study's first)")
    p.add_argument("--out", help="JSON file (default: reports/static/<source>-<target>.json)")
    p.set_defaults(func=cmd_static)


def add_model_order(add: AddCommand) -> None:
    p = add("model-order", help="word order from a model's own vectors: Kendall's "
            "tau of Match alignments on its layer-l word vectors (Dufter & Schütze "
            "2020 App. B.2)")
    p.add_argument("model_dir")
    p.add_argument("--source", required=True, help="the reference order, e.g. 3")
    p.add_argument("--target", required=True, help="another study language, e.g. s or fake")
    p.add_argument("--sentences", type=int, default=2500, help="dev verse pairs "
                   "(Dufter & Schütze 2020: 2,500)")
    p.add_argument("--layer", type=int, default=8, help="the vectors' layer "
                   "(Dufter & Schütze 2020: 8)")
    p.add_argument("--out", help="JSON file (default: reports/model_word_order/...)")
    p.set_defaults(func=cmd_model_order)
