"""``multilab <stage>``: thin commands that parse, resolve the config and call the library.

Every command validates ``params.yaml`` first; a bad value ends in one line naming the bad
value and the valid ones, exit code 2, nothing written.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import logging
import os
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from multilab import stops
from multilab.config import Config, SpacesConfig
from multilab.devices import claim_gpu
from multilab.errors import Terminated, UserError
from multilab.files import atomic_open, print_copies, write_json, write_text
from multilab.lab.modifications import PAPER_IDS, describe
from multilab.lifeline import end_with_dvc
from multilab.threads import choose_threads, configure_threads, usable_cores

log = logging.getLogger("multilab")


def _config(args: argparse.Namespace) -> Config:
    from multilab.resolve import load_config, parse_overrides  # YAML and the task registry

    return load_config(args.params, parse_overrides(args.set))


def cmd_corpus(args: argparse.Namespace) -> None:
    from multilab.data import bible, corpus

    cfg = _config(args)
    if args.action == "editions":  # every edition of the DB (docs/CORPORA.md)
        from multilab.data.edition_stats import editions_table

        print(editions_table(args.edition or [], cfg.paths.data))
        return
    if args.action == "export":
        editions = args.edition or list(cfg.corpus.export_editions)
        for code in editions:
            bible.check_edition(code)
        for code in editions:
            print(f"exported {bible.export_edition(code, cfg.paths.data)}")
        return
    if args.action == "xnli-dev":  # the parallel dev text of user corpora (docs/GPU.md)
        from multilab.data.user_corpora import xnli_dev_text

        for path, count in xnli_dev_text(cfg, force=args.force).items():
            print(f"wrote {path}: {count} lines")
        return
    if cfg.verses and args.action in ("build", "stats"):
        from multilab.data.layout import build_verse_corpora, verse_stats

        verse = (build_verse_corpora if args.action == "build" else verse_stats)(cfg)
        write_json(cfg.paths.metrics / "corpus.json", verse)
        print(corpus.verse_stats_table(verse))
        return
    if args.action == "stats":
        stats = corpus.corpus_stats(cfg.paths.corpora)
    else:
        stats = corpus.build_corpora(cfg.corpus, cfg.paths.data, cfg.paths.corpora)
    write_json(
        cfg.paths.metrics / "corpus.json",
        {name: s.as_dict() for name, s in stats.items()} | {"paper": corpus.PAPER_STATS},
    )
    print(corpus.stats_table(stats))


def cmd_vocab(args: argparse.Namespace) -> None:
    from multilab.data.corpus import read_lines
    from multilab.data.vocab import build_vocab

    cfg = _config(args)
    if cfg.verses:  # one WordPiece per language, concatenated
        from multilab.data.layout import build_verse_vocab

        info = build_verse_vocab(cfg)
    else:
        info = build_vocab(read_lines(cfg.paths.corpora / "train.txt"), cfg.vocab.size,
                           cfg.paths.vocab, cfg.vocab.unit)
    print(f"vocabulary written to {cfg.paths.vocab}: {info}")


def cmd_spaces(args: argparse.Namespace) -> None:
    from dataclasses import replace

    from multilab import tracking
    from multilab.data.corpus import read_lines
    from multilab.data.vocab import load_tokenizer, vocabulary_words
    from multilab.spaces import fasttext_spaces, verse_spaces

    cfg = _config(args)
    if cfg.verses and cfg.vocab.shared:
        _skip_spaces(cfg)
        return
    # a dead server fails before any work; the VecMap objective is no model's metric, so the
    # spaces run lives in an experiment of its own
    experiment_id = tracking.connect(cfg.paths, tracking.spaces_experiment(cfg.experiment))
    spaces_cfg = replace(cfg.spaces, knn_k=cfg.knn_neighbours)
    if cfg.verses:
        languages, vocab_words = verse_spaces.study_languages(cfg)
        metrics = verse_spaces.build_verse_spaces(languages, vocab_words, cfg.paths.spaces,
                                                  spaces_cfg, aligned=cfg.aligned_train)
    else:
        tokenizer = load_tokenizer(cfg.paths.vocab)
        lines = read_lines(cfg.paths.corpora / "train.txt")
        words = [tokenizer.tokenize(line) for line in lines]
        metrics = fasttext_spaces.build_spaces(words, vocabulary_words(tokenizer),
                                               cfg.paths.spaces, spaces_cfg)
    _log_spaces(cfg, spaces_cfg, metrics, experiment_id)
    write_json(cfg.paths.metrics / "spaces.json", metrics)
    _record(cfg, "spaces", metrics, extra={f"spaces.{k}": v for k, v in vars(spaces_cfg).items()})
    shown = {k: v for k, v in metrics.items() if isinstance(v, int | float | str)}
    print("spaces: " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                 for k, v in shown.items()))
    for key, per_language in metrics.get("languages", {}).items():
        print(f"  {key}: " + ", ".join(f"{k} {v:.3g}" for k, v in per_language.items()))
    print(f"all: {cfg.paths.metrics / 'spaces.json'}")


def _skip_spaces(cfg: Config) -> None:
    """A shared vocabulary (joint or union): no spaces (knn-replace is refused with it by the
    config, since its languages share ids); the stage still writes its outputs, an empty knn
    table and why, so that DVC's graph holds."""
    import torch

    from multilab.spaces.fasttext_spaces import KNN_TABLE

    reason = (f"no fastText spaces for vocab.mode {cfg.vocab.mode!r} (languages "
              f"[{', '.join(cfg.languages)}] share ids, so a neighbour's language cannot be "
              "told by its id; knn-replace is refused with it)")
    with atomic_open(cfg.paths.spaces / KNN_TABLE, "wb") as handle:
        torch.save(torch.empty(0, 0, dtype=torch.long), handle)
    write_json(cfg.paths.metrics / "spaces.json", {"skipped": reason})
    print(f"spaces: skipped ({reason})")


def _log_spaces(cfg: Config, spaces_cfg: SpacesConfig, metrics: dict,
                experiment_id: str | None = None) -> None:
    """The spaces run, in the study's spaces experiment (connected already when given); a
    verse study's per-language mapping metrics as ``<key>.<metric>``."""
    from multilab import tracking
    from multilab.data.layout import metric_name

    if experiment_id is None:
        experiment_id = tracking.connect(cfg.paths, tracking.spaces_experiment(cfg.experiment))
    flat = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
    for key, per_language in metrics.get("languages", {}).items():
        flat.update({f"{metric_name(key)}.{k}": v for k, v in per_language.items()})
    with tracking.run(experiment_id, name="spaces",
                      tags={"stage": "spaces", **tracking.source_tags()}):
        tracking.log_params({f"spaces.{k}": v for k, v in vars(spaces_cfg).items()})
        tracking.log_metrics(flat)


def cmd_word_order(args: argparse.Namespace) -> None:
    """Every listed edition's Kendall's tau against the English reference (Dufter & Schütze
    2020 App. B.2)."""
    from multilab import tracking
    from multilab.data.parallel import read_edition
    from multilab.evaluation import bible_word_order as wo
    from multilab.reporting.word_order_table import WORD_ORDER_JSON, plot_word_order

    cfg = _config(args)
    settings = cfg.word_order
    editions = settings.edition_list()
    # one process per thread the lab may use (threads.py's rules: MULTILAB_THREADS, OMP, the
    # usable cores shared among parallel workers); each edition is single-threaded NumPy
    processes = choose_threads(os.environ, usable_cores(), Path.cwd()).threads
    experiment_id = tracking.connect(cfg.paths, tracking.word_order_experiment(cfg.profile))
    print(f"word order: {len(editions)} editions against {settings.reference}, "
          f"{settings.verses} verses each (IBM-1 + Match, Kendall's tau; {processes} "
          f"process{'es' if processes > 1 else ''})", flush=True)
    verses = {code: wo.in_books(read_edition(code, cfg.paths.data), settings.books)
              for code in dict.fromkeys((settings.reference, *editions))}

    def progress(result: wo.EditionWordOrder) -> None:
        print(f"  {result.edition} {result.iso}  tau {result.tau:.3f} ± {result.tau_std:.3f}"
              f"  aligned {result.aligned_share:.0%}  ({result.seconds_fit:.0f} s fit, "
              f"{result.seconds_align:.0f} s align)", flush=True)

    results = wo.bible_word_order(
        verses, settings.reference, editions, books=settings.books, verses=settings.verses,
        sample_seed=settings.sample_seed, ibm1_iterations=settings.ibm1_iterations,
        square_root=settings.square_root, processes=processes, progress=progress)
    data = wo.as_json(results, reference=settings.reference, books=list(settings.books),
                      verses=settings.verses, sample_seed=settings.sample_seed,
                      ibm1_iterations=settings.ibm1_iterations,
                      square_root=settings.square_root, alignment="ibm1-match")
    out = cfg.paths.metrics / WORD_ORDER_JSON
    with tempfile.TemporaryDirectory() as scratch, tracking.run(
            experiment_id, name="word-order", tags={"stage": "word_order",
                                                    **tracking.source_tags()}):
        tracking.log_params({f"word_order.{k}": v for k, v in vars(settings).items()})
        tracking.log_metrics({f"tau.{r.edition}": r.tau for r in results}
                             | {f"aligned.{r.edition}": r.aligned_share for r in results})
        tracking.log_artifact(plot_word_order(data, Path(scratch) / "word-order.png"),
                              "figures")
    write_json(out, data)
    _record(cfg, "word-order", data)
    print(f"all: {out} (the report draws the chart and the correlations)")


def _editions_and_verses(cfg: Config, text: str, pair: bool = False
                         ) -> tuple[list[str], dict[str, list]]:
    """``--languages 3,l``: the edition codes as written (checked; exactly two where ``pair``,
    model A's then model B's) and each one's verses."""
    from multilab.data.bible import check_edition
    from multilab.data.parallel import read_edition

    editions = [code.strip() for code in text.split(",") if code.strip()]
    if pair and len(editions) != 2:
        raise UserError(f"--languages {text}: name two editions, model A's then model B's, "
                        "e.g. 3,l")
    for code in editions:
        check_edition(code)
    twice = [code for code in dict.fromkeys(editions) if editions.count(code) > 1]
    if twice and not pair:  # a pair may be one edition (two models' vectors of it)
        raise UserError(f"--languages {text}: edition {twice[0]!r} is listed twice; name each "
                        "edition once, e.g. 3,s,i")
    return editions, {code: read_edition(code, cfg.paths.data)
                      for code in dict.fromkeys(editions)}


def cmd_probe(args: argparse.Namespace) -> None:
    """A Hugging Face masked LM from anywhere: retrieval and word alignment on Bible verses."""
    from multilab.evaluation.probe import probe_model

    cfg = _config(args)
    if args.verses < 1:
        raise UserError(f"--verses {args.verses}: must be >= 1 (Old Testament dev verses)")
    editions, verses = _editions_and_verses(cfg, args.languages)
    result = probe_model(Path(args.model_dir), verses, editions, layer=args.layer,
                         count=args.verses)
    print(f"verse retrieval P@1, layer {args.layer}, {result['verses']} verses: mean "
          f"{result['retrieval_p1_mean']:.3f}")
    for pair, p1 in result["retrieval_p1"].items():
        print(f"  {pair}: {p1:.3f}")
    print(f"word alignment with {editions[0]} (Match on the model's word vectors):")
    for code, entry in result["alignment"].items():
        print(f"  {code}: tau {entry['tau']:.3f} (IBM-1: {entry['ibm1_tau']:.3f}), "
              f"{entry['agreement']:.0%} of the IBM-1 links found")
    if args.out:
        write_json(Path(args.out), result)
        print(f"all: {args.out}")
    _record(cfg, "probe", result, qualifier=f"{Path(args.model_dir).name}-{'-'.join(editions)}"
            f"-l{args.layer}", extra={"model_dir": str(args.model_dir)})


def cmd_similarity(args: argparse.Namespace) -> None:
    """Seed 003 §5: two independently trained models, layer by layer, on parallel verses."""
    from multilab import tracking
    from multilab.evaluation.model_similarity import (
        MEASURES,
        compare_models,
        pairs_figure,
        similarity_figure,
    )
    from multilab.evaluation.probe import probe_verses
    from multilab.reporting.similarity_section import read_records

    cfg = _config(args)
    if args.verses < 4:
        raise UserError(f"--verses {args.verses}: must be >= 4 (half learn the map, half test)")
    editions, verses = _editions_and_verses(cfg, args.languages, pair=True)
    # a damaged done file or a dead server: one line before minutes of work (issue 53)
    identities = {"model_a": _identity_of(Path(args.model_a)),
                  "model_b": _identity_of(Path(args.model_b))}
    experiment_id = tracking.connect(cfg.paths, tracking.similarity_experiment(cfg.profile))
    ids = probe_verses(verses, list(dict.fromkeys(editions)), args.verses)
    texts = [[dict(verses[code])[vid] for vid in ids] for code in editions]
    record = compare_models(Path(args.model_a), Path(args.model_b), texts[0], texts[1],
                            same_edition=editions[0] == editions[1])
    record["editions"] = editions
    folder = Path(args.out) if args.out else (
        cfg.paths.reports / "similarity" / f"{editions[0]}-{editions[1]}")
    # Figure 2: one line per pair of editions measured in this reports folder, this run's
    # replacing an earlier one of the same pair (wherever --out puts this run's JSON)
    shared = cfg.paths.reports / "similarity"
    records = [other for other in read_records(cfg.paths.reports)
               if other["editions"] != editions] + [record]
    with tracking.run(experiment_id, name=f"{editions[0]}-vs-{editions[1]}",
                      tags={"model_a": args.model_a, "model_b": args.model_b,
                            **tracking.source_tags()}):
        tracking.log_params({"editions": ",".join(editions), "verses": record["verses"],
                             "dictionary": record["dictionary"]["kind"]})
        for measure in MEASURES:
            for layer, (trained, floor) in enumerate(zip(
                    record["trained"][measure], record["untrained"][measure], strict=True)):
                tracking.log_metrics({measure: trained, f"{measure}_untrained": floor},
                                     step=layer)
            tracking.log_artifact(similarity_figure(record, measure, folder / f"{measure}.png"),
                                  "figures")
            tracking.log_artifact(pairs_figure(records, measure,
                                               shared / f"figure2-{measure}.png"), "figures")
    write_json(folder / "similarity.json", record)
    fingerprints = "-".join(str((identity or {}).get("fingerprint") or "x")[:8]
                            for identity in identities.values())
    _record(cfg, "similarity", record, qualifier=f"{editions[0]}-{editions[1]}-{fingerprints}",
            extra=identities)
    for measure in MEASURES:
        values = " ".join(f"{v:.2f}" for v in record["trained"][measure])
        floor = " ".join(f"{v:.2f}" for v in record["untrained"][measure])
        print(f"{measure} by layer: {values}\n  untrained: {floor}")
    print(f"figures and JSON: {folder}")
    print(f"Figure 2 over {len(records)} pair(s), one line each: {shared}/figure2-*.png")


def cmd_translate(args: argparse.Namespace) -> None:
    """Seed 004's unsupervised token translation of a finished lab model (α × layer sweep)."""
    from multilab.evaluation.token_translation import translate_and_record

    cfg = _config(args)
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
    _record(cfg, "translate", record, Path(args.model_dir),
            qualifier=f"{record['source']}-{record['target']}")
    print(f"heat maps and JSON: {folder}")


def cmd_mrr(args: argparse.Namespace) -> None:
    """Seed 004's word retrieval MRR of a finished lab model, layer by layer."""
    from multilab.evaluation.lab_word_retrieval import mrr_and_record

    cfg = _config(args)
    record, folder = mrr_and_record(cfg, Path(args.model_dir), args.source, args.target,
                                    args.sentences, Path(args.out) if args.out else None)
    best = max(record["trained"], key=lambda row: row["mrr"])
    floor = record["untrained"][best["layer"]]
    print(f"{record['source']} -> {record['target']}, {record['sentences']} sentences, "
          f"{record['dictionary']} dictionary ({best['queries']} queries): best MRR "
          f"{best['mrr']:.3f} (P@1 {best['p1']:.3f}) at layer {best['layer']}; untrained "
          f"{floor['mrr']:.3f}")
    _record(cfg, "mrr", record, Path(args.model_dir),
            qualifier=f"{record['source']}-{record['target']}")
    print(f"JSON: {folder}")


def cmd_static(args: argparse.Namespace) -> None:
    """Seeds 001/004: static wordpiece embeddings (fastText skipgram / CBOW) on the study's
    train rows, word retrieval MRR and the zero-shot task, over data sizes and windows."""
    from multilab.evaluation.static_embeddings import static_and_record, static_request

    cfg = _config(args)
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
    _record(cfg, "static", record,
            qualifier=f"{record['source']}-{record['target']}-seed{record['seed']}")
    print(f"JSON: {path}")


def cmd_model_order(args: argparse.Namespace) -> None:
    """Kendall's tau of Match alignments on a lab model's own vectors (issue 20)."""
    from multilab.evaluation.model_word_order import model_order_and_record

    cfg = _config(args)
    record, path = model_order_and_record(cfg, Path(args.model_dir), args.source, args.target,
                                          args.sentences, args.layer,
                                          Path(args.out) if args.out else None)
    print(f"{record['source']} -> {record['target']}, {record['verses']} verses, layer "
          f"{record['layer']}: tau {record['tau']:.3f} ± {record['tau_std']:.3f}")
    _record(cfg, "model-order", record, Path(args.model_dir),
            qualifier=f"{record['source']}-{record['target']}-l{record['layer']}")
    print(f"JSON: {path}")


def cmd_train(args: argparse.Namespace) -> None:
    from multilab.resolve import check_seed, resolve_run

    cfg = _config(args)
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
        _record(cfg, "train", _train_result(model_dir), model_dir, once=True)
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


def cmd_evaluate(args: argparse.Namespace) -> None:
    from multilab.evaluation.evaluate import evaluate_and_record

    cfg = _config(args)
    if args.layers:
        from dataclasses import replace

        from multilab.resolve import parse_layers

        cfg = replace(cfg, evaluate=replace(cfg.evaluate, layers=parse_layers(args.layers)))
    out = args.out and Path(args.out)
    record = evaluate_and_record(cfg, Path(args.model_dir), out)
    from multilab.lab.metric_table import short_table

    name = f"{record['modification']} s{record['seed']}"
    print(short_table({name: record["metrics"]}))
    print(f"all metrics: {out or cfg.paths.eval_file(record['modification'], record['seed'])}")
    _record(cfg, "evaluate", record, Path(args.model_dir),
            qualifier=f"layers-{args.layers}" if args.layers else "")


def cmd_downstream(args: argparse.Namespace) -> None:
    from multilab.evaluation.downstream import downstream_and_record, downstream_path
    from multilab.lab.languages import parse_languages
    from multilab.resolve import resolve_run

    cfg = _config(args)
    languages = (parse_languages(args.languages, cfg.language_list[0].edition, cfg.corpus_isos)
                 if args.languages else None)
    out = args.out and Path(args.out)
    record = downstream_and_record(cfg, Path(args.model_dir), languages, out, mds=args.mds)
    qualifier = "-".join([*(["mds"] if args.mds else []),
                          *([args.languages.replace(",", "-")] if args.languages else [])])
    _record(cfg, "downstream", record, Path(args.model_dir), qualifier=qualifier)
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

    cfg = _config(args)
    summary = run_variant(cfg)
    _record(cfg, "variant", summary, qualifier=summary["modification"])
    n = summary["n_seeds"]
    name = f"{summary['modification']} ({'1 seed' if n == 1 else f'mean of {n} seeds'})"
    print(short_table({name: summary}))
    print(f"all metrics: {cfg.paths.metrics / 'variant.json'}, "
          f"{cfg.paths.variant / 'summary.json'} (std, per seed)")


def cmd_report(args: argparse.Namespace) -> None:
    from multilab.reporting.report import build_report

    cfg = _config(args)
    for path in build_report(cfg):
        print(f"wrote {path}")


def cmd_plots_page(args: argparse.Namespace) -> None:
    from multilab.reporting.plots_page import write_plots_page

    _config(args)  # validated as every command is
    path = Path(args.out)
    print(f"{'wrote' if write_plots_page(path) else 'up to date:'} {path} (the offline page of "
          "`dvc plots show`)")


def cmd_figures(args: argparse.Namespace) -> None:
    from multilab import tracking
    from multilab.reporting.figures import figures_for

    cfg = _config(args)
    tracking.check_server(cfg.paths)  # a dead server: one line before any figure is drawn
    for path in figures_for(cfg, args.target):
        print(f"wrote {path}")


def cmd_study(args: argparse.Namespace) -> None:
    """``study list`` / ``study report NAME|--all``: the studies, their records and verdicts."""
    from multilab.studies.claims import load_claims, paper_name
    from multilab.studies.document import fill as fill_document
    from multilab.studies.document import new_document, render_index, reproduction_blocks
    from multilab.studies.figures import figure_lines, write_figures
    from multilab.studies.records import iter_records
    from multilab.studies.spec import load_studies
    from multilab.studies.tables import (
        claim_verdicts,
        multiplicity,
        render_study,
        speakers,
        study_result,
    )

    cfg = _config(args)
    folder = Path(args.studies)
    claims = load_claims(folder / "claims")
    studies = load_studies(folder, claims)
    names = list(studies) if args.all or (args.action in ("list", "next") and not args.names) \
        else args.names
    unknown = [name for name in names if name not in studies]
    if unknown or not names:
        raise UserError(f"study {unknown[0] if unknown else '(none)'!r}; name one of "
                        f"{', '.join(studies)} or --all")
    records = list(iter_records(cfg.paths.results))  # a damaged record: one line, no output
    if args.action == "run":
        # SIGTERM is a stop everywhere in the run, not only inside a training's MLflow run:
        # a runner killed while a command wrote its record left its booking behind, silently
        with stops.catching():
            _run_studies(args, cfg, [studies[name] for name in names], records)
        records = list(iter_records(cfg.paths.results))
    results = [study_result(studies[name], records, claims, Path(args.params), args.set or [])
               for name in names]
    if args.action == "next":
        from multilab.studies.document import run_costs
        from multilab.studies.planning import (
            claim_plans,
            lower_bound_rows,
            plan_lines,
            run_prices,
        )

        if args.limit < 1:
            raise UserError(f"--limit {args.limit}: must be >= 1")
        prices = run_prices(results, run_costs(records))
        plans = claim_plans(results, claims)
        if args.cpu:  # what a CPU can train: runs whose profile a CPU has trained before
            plans = [plan for plan in plans
                     if None not in plan.priced_models(prices).values()]
        if args.lanes is not None or args.hours is not None or args.shell or args.fit or \
                args.lanes_dir:
            print("\n".join(_lane_plan(args, plans, results, records, prices)))
            return
        print("\n".join(plan_lines(plans, prices, args.limit, lower_bound_rows(results))))
        return
    if args.action in ("list", "run"):
        lines = []
        for result in results:
            study = result.study
            recorded = sum(len(seeds) for seeds in result.seeds_found.values())
            counted = sum(1 for o in result.outcomes.values() if o.verdict.counts)
            lines.append((study.name, paper_name(study.paper), study.table,
                          f"runs {recorded}/{sum(len(study.seeds_of(row)) for row in study.rows)}",
                          f"claims {counted}/{len(result.outcomes)} with a verdict",
                          f"multilab study report {study.name}"))
        widths = [max(len(line[i]) for line in lines) for i in range(5)]  # columns line up
        for line in lines:
            cells = [f"{text:{width}s}" for text, width in zip(line[:5], widths, strict=True)]
            print("  ".join([*cells, line[5]]))
        return
    out = Path(args.out)
    # who speaks for a claim and its Holm-adjusted p are read over every study, so that a
    # page reported alone is the page `--all` writes
    every = results if args.all else [
        next((r for r in results if r.study.name == name), None)
        or study_result(study, records, claims, Path(args.params), args.set or [])
        for name, study in studies.items()]
    speaking, adjusted = speakers(every), multiplicity(every, claims).adjusted
    successors = {r.study.supersedes: r.study.name for r in every if r.study.supersedes}
    texts = {out / f"{r.study.name}.md": render_study(r, claims, figure_lines(r),
                                                      successors.get(r.study.name),
                                                      speaking, adjusted)
             for r in results}
    if args.all:
        verdicts = claim_verdicts(results, claims)
        texts[out / "index.md"] = render_index(results, claims, verdicts, records)
        # the document beside the studies folder: its prose kept, its tables regenerated
        document = Path(args.reproduction) if args.reproduction else \
            out.parent / "REPRODUCTION.md"
        blocks = reproduction_blocks(results, claims, verdicts, records)
        texts[document] = fill_document(document.read_text(encoding="utf-8"), blocks,
                                        str(document)) if document.is_file() else \
            new_document(blocks)
    for path, text in texts.items():
        write_text(path, text)
        print(f"wrote {path}")
    for result in results:  # the figures the markdown links, from the same cells
        for path in write_figures(result, out):
            print(f"wrote {path} (and its .pdf)")
    _warn_uncommitted_records(cfg.paths.results)


def _warn_uncommitted_records(results: Path) -> None:
    """One warning when the documents just written read records that git does not hold:
    the documents test regenerates them from the committed records on a fresh clone."""
    from multilab.source import uncommitted_files

    pending = uncommitted_files(results)
    if pending:
        shown = ", ".join(pending[:3]) + (f" and {len(pending) - 3} more" if len(pending) > 3
                                          else "")
        print(f"warning: {len(pending)} file(s) under {results} not committed ({shown}): "
              "commit them with the documents, which read them", file=sys.stderr)


def _lane_plan(args: argparse.Namespace, plans: list, results: list, records: list,
               prices: dict) -> list[str]:
    """``study next --lanes N --hours H``: the runs that fit in N background lanes of H hours,
    as lines to read, or (``--shell``) one command line per lane for scripts/lanes.sh."""
    from multilab.studies.lanes import lane_checkpoints, lane_lines, measure_seconds, pack_lanes

    lanes = 2 if args.lanes is None else args.lanes
    hours = 2.5 if args.hours is None else args.hours
    if lanes < 1:
        raise UserError(f"--lanes {lanes}: must be >= 1")
    if not hours > 0:
        raise UserError(f"--hours {hours:g}: must be > 0")
    # lanes rely on measured prices only, not on a profile's or another unit's lower bound
    measured = {(result.study.name, row.label): result.measured_seconds(row.label)
                for result in results for row in result.study.rows}
    checkpoints = lane_checkpoints(Path(args.lanes_dir), results) if args.lanes_dir else {}
    packed = pack_lanes(plans, measured, measure_seconds(records), lanes, hours,
                        span=not args.fit, checkpoints=checkpoints)
    if args.shell:  # lane K on line K (a checkpoint's lane is its clone): empty lines kept
        lines = [lane.shell() for lane in packed]
        while lines and not lines[-1]:
            lines.pop()
        return lines
    # rows a CPU could train whose time no record measures: they wait for a measurement
    bounded = sorted({f"{plan.study} {label}" for plan in plans for label, _ in plan.runs
                      if measured.get((plan.study, label)) is None
                      and prices.get((plan.study, label)) is not None})
    return lane_lines(packed, hours) + ([
        "left out, their time not measured (a lower bound only; benchmarks/bench_row_steps.py "
        "prices one, to run by hand): " + ", ".join(bounded)]
        if bounded else [])


def _as_int(text: str) -> int | str:
    """A command-line number as an int, or the text unchanged for the checker to name."""
    try:
        return int(text)
    except ValueError:
        return text


def _run_studies(args: argparse.Namespace, cfg: Config, studies: list, records: list
                 ) -> None:
    """``study run``: each study's missing (row, seed) pairs, through this command line."""
    from multilab.resolve import check_seed
    from multilab.studies.ledger import read_ledger
    from multilab.studies.runner import (
        check_seeds,
        check_stack_size,
        missing_runs,
        pick_rows,
        prepare_study,
        run_study,
        study_model_dir,
        trained_elsewhere,
    )
    from multilab.studies.spec import split_row_names

    seeds = [check_seed(_as_int(s.strip()), "--seeds") for s in args.seeds.split(",")
             if s.strip()] if args.seeds else None
    rows = split_row_names(args.rows, studies) if args.rows else None
    if args.again and not rows:
        raise UserError("--again needs --rows: the rows to measure again (e.g. --rows original "
                        "--seeds 43,44), never a whole study by accident")
    base = ["--params", args.params, *(f"--set={value}" for value in args.set or [])]
    resolved = (Path(args.params), args.set or [])  # what the runs will resolve to
    check_seeds(studies, seeds, rows)
    for study in studies:  # every study's --stack checked before anything runs
        check_stack_size(study, args.stack, seeds, rows)
    if args.prepare:
        for study in studies:
            for folder in prepare_study(study, pick_rows(study, rows),
                                        lambda argv: main(base + argv), Path.cwd()):
                print(f"study {study.name}: data in {folder}")
        return
    if args.queue and not args.plan:
        plans = [(s, missing_runs(s, records, seeds, rows, *resolved, again=args.again))
                 for s in studies]
        for study, steps in plans:  # a DVC experiment trains one workspace model
            for step in (step for step in steps if step.row.script):
                print(f"study {study.name}: {step.row.label} seed {step.seed} not queued: its "
                      f"script writes it (`multilab study run {study.name}` runs it)")
        _queue_studies(args, cfg, [(s, [step for step in steps if not step.row.script])
                                   for s, steps in plans])
        return
    for study in studies:
        steps = missing_runs(study, records, seeds, rows, *resolved, again=args.again)
        if args.plan or not steps:
            booked = {b.key: b for b in read_ledger(cfg.paths.results) if not b.stale()}
            lines = []
            for step in steps:
                held = booked.get((study.name, step.row.label, step.seed))
                here = Path()  # relative: the plan names the folder as a user would
                trained = trained_elsewhere(step, here, study_model_dir(study, here, step))
                lines.append(f"\n  {step.row.label} seed {step.seed}"
                             + (f" (by its script: {step.row.script_command(step.seed)})"
                                if step.row.script else "")
                             + (f" (under way: {held.by} since {held.since})" if held else "")
                             + (f" (measure only: trained in {trained})" if trained else ""))
            what = "to measure again (--again)" if args.again else "missing"
            print(f"study {study.name}: {len(steps)} run(s) {what}" + "".join(lines))
            continue
        run_study(study, steps, lambda argv: main(base + argv), Path.cwd(),
                  results=cfg.paths.results, stack=args.stack, params=resolved[0],
                  overrides=resolved[1], again=args.again,
                  fingerprint_of=lambda settings, modification, seed: _fingerprint_here(
                      args, settings, modification, seed))


def _fingerprint_here(args: argparse.Namespace, settings: list[str], modification: str,
                      seed: int) -> str:
    """The fingerprint ``train`` would give (modification, seed) under ``--params``, the
    command line's ``--set`` and a study's ``settings`` (the runner's order: the study's win)."""
    from multilab.resolve import load_config, parse_overrides, resolve_run
    from multilab.training.model_dir import model_fingerprint

    cfg = load_config(args.params, parse_overrides([*(args.set or []), *settings]))
    return model_fingerprint(resolve_run(cfg, modification, seed))


def _queue_studies(args: argparse.Namespace, cfg: Config, plans: list) -> None:
    """``study run --queue``: the missing (row, seed) pairs as queued DVC experiments, every
    one checked before the first is queued; then the command that runs them."""
    from multilab.resolve import load_config, parse_overrides
    from multilab.studies.queue import check_queueable, queue_study

    if args.stack != 1:
        raise UserError(f"--stack {args.stack} with --queue: a queued experiment trains one "
                        "model; `dvc queue start -j N` runs N of them at once (valid: --stack 1)")
    if not (Path(".dvc").is_dir() and Path("dvc.yaml").is_file()):
        raise UserError(f"--queue needs the DVC project's root (.dvc/ and dvc.yaml); "
                        f"{Path.cwd()} is not one")
    if Path(args.params).resolve() != Path("params.yaml").resolve():
        raise UserError(f"--params {args.params} with --queue: DVC's experiments read the "
                        "project's params.yaml (valid: --params params.yaml)")
    for study, steps in plans:  # a refusal anywhere queues nothing
        check_queueable(study, steps, lambda settings: load_config(
            args.params, parse_overrides([*(args.set or []), *settings])))
    results = cfg.paths.results if cfg.paths.results.is_absolute() else \
        Path.cwd() / cfg.paths.results
    queued = []
    for study, steps in plans:
        if not steps:
            print(f"study {study.name}: 0 run(s) missing")
        queued += queue_study(study, steps, results, args.set or [])
    if queued:
        print(f"{len(queued)} experiment(s) queued; run them N at a time with `dvc queue start "
              "-j N` (`dvc queue status` shows them), then `multilab study report "
              f"{' '.join(study.name for study, _ in plans)}`")


def cmd_records(args: argparse.Namespace) -> None:
    """``records check [ROOT]``: one line per bad file and field, exit 2 (record_schema.py)."""
    from multilab.studies.record_schema import check_records

    problems = [problem.line() for problem in check_records(args.root)]
    if problems:
        print("\n".join(problems), file=sys.stderr)
        raise SystemExit(2)
    print(f"{args.root}: every record names its provenance or says why not")


def cmd_ids(args: argparse.Namespace) -> None:
    for pid, mod in PAPER_IDS.items():
        print(f"{pid:>4}  {mod:45s} {describe(mod)}")


def _record(cfg: Config, kind: str, result: dict, model_dir: Path | None = None,
            qualifier: str = "", extra: dict | None = None, once: bool = False) -> None:
    """Leave the command's result as a record in ``results/`` (studies/records.py): the
    lasting form of a number, whatever happens to MLflow or the machine. ``once``: keep an
    existing record (a training skipped as done keeps its first provenance)."""
    from multilab.resolve import resolve_run
    from multilab.studies.records import model_identity, record_path, write_record
    from multilab.training.model_dir import read_done

    config: dict = {"profile": cfg.profile, "languages": ",".join(cfg.languages),
                    "vocab.mode": cfg.vocab.mode, "vocab.unit": cfg.vocab.unit}
    model = None
    if model_dir is not None and (done := read_done(model_dir)) is not None:
        model = model_identity(done)
        config = resolve_run(cfg, done["modification"], done["seed"]).as_params()
    config |= {f"evaluate.{k}": v for k, v in asdict(cfg.evaluate).items()}
    config |= {f"downstream.{k}": v for k, v in asdict(cfg.downstream).items()}
    config |= extra or {}
    if once and record_path(cfg.paths.results, cfg.experiment, kind, model, qualifier).exists():
        return
    path = write_record(cfg.paths.results, cfg.experiment, kind, result, model=model,
                        config=config, qualifier=qualifier)
    print(f"record: {path}")


def _identity_of(model_dir: Path) -> dict | None:
    from multilab.studies.records import model_identity
    from multilab.training.model_dir import read_done

    done = read_done(model_dir)
    return model_identity(done) if done is not None else None


def _train_result(model_dir: Path) -> dict:
    """A training's record: its done file and its last logged step (loss, lr, tokens/s)."""
    import csv

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


def cmd_check(args: argparse.Namespace) -> None:
    if args.stage:  # the pipeline's first stage (params_guard.py)
        from multilab.params_guard import check_stage
        from multilab.resolve import config_from_dict, parse_overrides

        def refuses(tree: dict) -> bool:
            try:
                config_from_dict(tree, parse_overrides(args.set))
            except UserError:
                return True
            return False

        cfg = check_stage(Path(args.params), Path(args.stage), lambda: _config(args), refuses)
    else:
        cfg = _config(args)
    print(f"params OK: profile={cfg.profile} seeds={list(cfg.seeds)} study={list(cfg.study)} "
          f"modification={cfg.modification} languages=[{', '.join(cfg.languages)}]")


#: errno → what to do; the message of :func:`storage_problem`
STORAGE_ERRORS = {
    errno.ENOSPC: "free some space (or point paths.* in params.yaml elsewhere) and run the "
                  "same command again; complete files and checkpoints are kept",
    errno.EDQUOT: "free some of your quota and run the same command again",
    errno.EROFS: "the file system is read-only: point paths.* in params.yaml at a writable "
                 "folder",
    errno.EACCES: "make it writable or point paths.* in params.yaml at a writable folder",
    errno.EPERM: "make it writable or point paths.* in params.yaml at a writable folder",
    errno.EFBIG: "the file is larger than this process may write (a file-size limit, "
                 "`ulimit -f`, or the file system's largest file): raise the limit or point "
                 "paths.* in params.yaml elsewhere and run the same command again",
}
_STORAGE_TEXT = {"No space left on device": errno.ENOSPC, "database or disk is full": errno.ENOSPC,
                 "Read-only file system": errno.EROFS, "readonly database": errno.EROFS,
                 "Permission denied": errno.EACCES, "File too large": errno.EFBIG}


def storage_problem(err: BaseException) -> str | None:
    """One line for an exception caused by a full, read-only or forbidden output, wherever
    in its chain the ``OSError`` is (torch, safetensors, SQLite wrap it); None otherwise."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in STORAGE_ERRORS:
            where = f"{current.filename}: " if current.filename else ""
            return (f"{where}{current.strerror or os.strerror(current.errno)}; "
                    f"{STORAGE_ERRORS[current.errno]}")
        for text, code in _STORAGE_TEXT.items():
            if text in str(current):
                return f"{text}; {STORAGE_ERRORS[code]}"
        current = current.__cause__ or current.__context__
    return None


class Parser(argparse.ArgumentParser):
    """argparse with a "did you mean" for a mistyped choice (a command, a corpus action)."""

    def _check_value(self, action: argparse.Action, value: object) -> None:
        if action.choices is not None and value not in action.choices:
            names = [str(choice) for choice in action.choices]
            close = difflib.get_close_matches(str(value), names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise argparse.ArgumentError(
                action, f"invalid choice: {value!r} (choose from {', '.join(names)}){hint}")
        super()._check_value(action, value)


#: What ``multilab <command> --help`` says beyond the one line of the command list.
DESCRIPTIONS = {
    "train": "Train (or resume) one model of the study: the modification (a name, a `+` combo "
             "or a paper ID) at one seed. A model whose fingerprint is unchanged is never "
             "trained twice; a killed run resumes from its last checkpoint. Repeated -m and "
             "--seed train every pair, one at a time or, with train.stack = k, in stacks of "
             "up to k models as one batched computation.",
    "evaluate": "Measure a model directory's multilinguality (word alignment, sentence "
                "retrieval, word translation at evaluate.layers) and its MLM perplexity; "
                "logged to the model's MLflow run and written as JSON.",
    "variant": "Train and evaluate params.yaml's `modification` at every seed of `seeds` "
               "(reusing a study model of the same fingerprint), then write its means and name "
               "to metrics/variant.json: the stage `dvc exp run -S modification=NAME` reruns, "
               "before the report.",
    "report": "Build reports/table1.md (and Table 2, the downstream and word-order sections, "
              "figures and the plot data of `dvc plots`) from the study's finished MLflow "
              "runs: mean ± std over seeds beside the paper's values.",
    "check": "Validate params.yaml (and any --set) as every command does, and print the study "
             "it describes. A bad value: one line naming it and the valid ones, exit code 2.",
    "study": "The papers' tables as declarative studies (studies/<name>.yaml): list them, run "
             "the (row, seed) pairs without a record, or report their rows and claim verdicts "
             "from the records in results/.",
    "ids": "Print the paper-ID table: Dufter & Schütze 2020's model IDs and the modification "
           "each denotes (`-S modification=ID` and `train -m ID` take them).",
    "figures": "Draw one model's figures (position similarity, token PCA, training curves) "
               "from its directory or its MLflow run id, as PNG with a PDF beside each.",
}


def _description(name: str, help_text: str) -> str:
    text = DESCRIPTIONS.get(name) or help_text[:1].upper() + help_text[1:]
    return text if text.endswith(".") else text + "."


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="multilab", description=(
        "What makes multilingual BERT multilingual: the controlled experiments of five papers "
        "(Dufter & Schütze 2020; Liu et al. 2020a/b; K et al. 2020; Conneau et al. 2020). "
        "Every command validates params.yaml first."))
    parser.add_argument("--params", default="params.yaml", help="parameter file")
    parser.add_argument(
        "--set", action="append", metavar="KEY=VALUE",
        help="override a parameter, e.g. --set profile=smoke --set train.epochs=3 (before or "
             "after the command)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    # --set after the command too (`multilab train --seed 42 --set profile=smoke`): its own
    # dest, as a subcommand's default would replace the values given before the command
    after = argparse.ArgumentParser(add_help=False)
    after.add_argument("--set", action="append", metavar="KEY=VALUE", dest="set_after",
                       help="override a parameter (as before the command)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="<command>")

    def add(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=_description(name, help),
                              parents=[after])

    p = add("corpus", help="export Bible editions / build corpora / print stats")
    p.add_argument("action", choices=["export", "build", "stats", "editions", "xnli-dev"],
                   help="xnli-dev: write each user corpus's dev file from XNLI's parallel dev "
                        "split (downstream.task_path)")
    p.add_argument("--edition", action="append", help="edition code (repeatable): export, editions")
    p.add_argument("--force", action="store_true",
                   help="xnli-dev: overwrite a dev file that holds other text")
    p.set_defaults(func=cmd_corpus)

    add("vocab", help="train the WordPiece vocabulary").set_defaults(func=cmd_vocab)
    add("spaces", help="fastText spaces + unsupervised VecMap + knn table"
        ).set_defaults(func=cmd_spaces)

    add("word-order", help="each Bible edition's word order against English: Kendall's tau "
        "of IBM-1 + Match word alignments (Dufter & Schütze 2020 App. B.2)"
        ).set_defaults(func=cmd_word_order)

    p = add("train", help="train (or resume) one model")
    p.add_argument("--modification", "-m", action="append",
                   help="name, combo or paper ID (default original; repeatable)")
    p.add_argument("--seed", type=int, action="append", required=True, help="repeatable")
    p.set_defaults(func=cmd_train)

    p = add("evaluate", help="multilinguality + perplexity of a model directory")
    p.add_argument("model_dir")
    p.add_argument("--out", help="JSON file for the results (default: artifacts/eval/...)")
    p.add_argument("--layers", help="layers to evaluate: 'all' or e.g. 0,4,8 "
                   "(default: evaluate.layers of params.yaml)")
    p.set_defaults(func=cmd_evaluate)

    p = add("probe", help="any Hugging Face masked LM (with its fast tokenizer) on "
            "Bible verses: verse retrieval and word alignment between editions")
    p.add_argument("model_dir")
    p.add_argument("--languages", required=True, help="edition codes, the first aligned with "
                   "each other, e.g. 3,s,i")
    p.add_argument("--layer", type=int, default=8, help="hidden layer (0 = embeddings)")
    p.add_argument("--verses", type=int, default=1000, help="dev verses (Old Testament)")
    p.add_argument("--out", help="JSON file for the results")
    p.set_defaults(func=cmd_probe)

    p = add("similarity", help="Conneau et al. 2020 §5: two models on parallel verses, layer "
            "by layer (verse retrieval after an orthogonal map, linear CKA)")
    p.add_argument("model_a")
    p.add_argument("model_b")
    p.add_argument("--languages", required=True, help="model A's edition, then model B's, "
                   "e.g. 3,l")
    p.add_argument("--verses", type=int, default=1000, help="Old Testament verses (default 1000)")
    p.add_argument("--out", help="folder for the JSON and figures (default: "
                   "reports/similarity/<a>-<b>/)")
    p.set_defaults(func=cmd_similarity)

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

    p = add("mrr", help="Liu et al. 2020b's word retrieval: MRR and P@1 of a model's "
            "contextual word vectors per layer (exact or silver dictionary)")
    p.add_argument("model_dir")
    p.add_argument("--source", required=True, help="a study language, e.g. 3")
    p.add_argument("--target", required=True, help="another, e.g. fake or s")
    p.add_argument("--sentences", type=int, default=2000, help="dev sentences (verses)")
    p.add_argument("--out", help="folder for the JSON (default: "
                   "reports/word_retrieval/<model>-<source>-<target>/)")
    p.set_defaults(func=cmd_mrr)

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

    add("variant", help="train + evaluate params.modification over the seeds"
        ).set_defaults(func=cmd_variant)
    add("report", help="tables (and figures) from the MLflow runs").set_defaults(func=cmd_report)
    p = add("plots-page", help="the page `dvc plots show` fills, with Vega inlined: charts "
            "drawn offline (.dvc/config names it)")
    p.add_argument("out", help="the HTML file, e.g. artifacts/dvc-plots.html")
    p.set_defaults(func=cmd_plots_page)
    p = add("figures", help="figures of one model (directory or MLflow run id)")
    p.add_argument("target")
    p.set_defaults(func=cmd_figures)
    p = add("study", help="the papers' tables as studies: list them, or report a "
            "study's rows and claim verdicts from the records in results/")
    p.add_argument("action", choices=["list", "report", "run", "next"],
                   help="run: train and evaluate the (row, seed) pairs without a record; "
                        "next: the runs that bring claims to a verdict, most claims per CPU "
                        "hour first")
    p.add_argument("--limit", type=int, default=15, help="next: how many run sets (default 15)")
    p.add_argument("--lanes", type=int, help="next: pack the runs into N background lanes "
                   "(one thread each) of --hours each, in the order to train (default 2)")
    p.add_argument("--hours", type=float, help="next: the hours a lane has (default 2.5): "
                   "the runs whose model is estimated to finish in them, then one a lane that "
                   "does not (spanning sessions; --fit: none)")
    p.add_argument("--shell", action="store_true",
                   help="next --lanes: one shell command line per lane (scripts/lanes.sh)")
    p.add_argument("--fit", action="store_true",
                   help="next --lanes: only models that finish in --hours (default: each lane "
                        "with time left also takes one that spans sessions, resumed from its "
                        "checkpoints by `bash scripts/lanes.sh resume`)")
    p.add_argument("--lanes-dir", help="next --lanes: the lanes' folder (LANES_DIR): a model "
                   "a lane's clone has a checkpoint of is planned on that lane, priced by its "
                   "remaining steps")
    p.add_argument("--cpu", action="store_true",
                   help="next: only runs with a CPU price (their profile has trained on a CPU; "
                        "the paper's budget is a GPU's)")
    p.add_argument("--seeds", help="run: only these seeds, e.g. 42,43")
    p.add_argument("--rows", help="run: only these rows (labels or the table's IDs; a label "
                                  "with commas as written), e.g. original,lang-pos or 0,1")
    p.add_argument("--plan", action="store_true", help="run: say what is missing, run nothing")
    p.add_argument("--prepare", action="store_true",
                   help="run: build only the rows' data (corpora, vocabulary, knn spaces), "
                        "train nothing (for a machine that trains without the Bible)")
    p.add_argument("--again", action="store_true",
                   help="run: measure the --rows again although their records exist "
                        "(records written before a metric existed: position embeddings, MRR "
                        "by part of speech, curve points), training a model not on disk; "
                        "each new record replaces the old one of its model and kind (git "
                        "keeps the old in its history)")
    p.add_argument("--queue", action="store_true",
                   help="run: queue the missing runs as DVC experiments (`dvc exp run "
                        "--queue`), to run with `dvc queue start -j N` (a GPU server)")
    p.add_argument("--stack", type=int, default=1, metavar="K",
                   help="run: train the rows that may share a stack (one architecture, one "
                        "data folder) in stacks of up to K models (default 1: one at a time)")
    p.add_argument("names", nargs="*", help="study names (studies/<name>.yaml)")
    p.add_argument("--all", action="store_true", help="every study, and the claims summary")
    p.add_argument("--studies", default="studies", help="the folder of study specs")
    p.add_argument("--out", default="docs/studies", help="where report writes its tables")
    p.add_argument("--reproduction", help="report --all: the document whose generated blocks "
                   "are rewritten (default: REPRODUCTION.md beside the --out folder)")
    p.set_defaults(func=cmd_study)

    add("ids", help="the paper-ID table").set_defaults(func=cmd_ids)
    p = add("records", help="check every file under results/ against the record schema")
    p.add_argument("action", choices=["check"])
    p.add_argument("root", nargs="?", type=Path, default=Path("results"))
    p.set_defaults(func=cmd_records)
    p = add("check", help="validate params.yaml")
    p.add_argument("--stage", metavar="MARKER",
                   help="the DVC pipeline's first stage: write MARKER when the parameters are "
                        "accepted; under `dvc exp run -S`, a refused value is taken back out of "
                        "params.yaml")
    p.set_defaults(func=cmd_check)
    return parser


def quiet_libraries() -> None:
    """No per-file bars of Hugging Face libraries ("Writing model shards" at every checkpoint,
    "Loading weights" at every load): multilab's own training bar says what happens."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when they are imported
    if "transformers" in sys.modules:  # imported already (in-process callers, tests)
        sys.modules["transformers"].utils.logging.disable_progress_bar()


def _close_progress_bars() -> None:
    """End a bar the failed command left open, so the message starts a line of its own
    (it used to follow the training bar on its line, or a library bar's newline)."""
    if "tqdm" in sys.modules:
        from tqdm import tqdm

        for bar in list(getattr(tqdm, "_instances", ())):
            bar.close()


def _quiet_stdout() -> None:
    """Point standard output at the null device: Python flushes it at exit, and a closed
    pipe would raise there again, as a traceback after the command has ended."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture)
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, fd)
    os.close(null)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.set = [*(args.set or []), *(getattr(args, "set_after", None) or [])] or None
    quiet_libraries()
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:  # each retry of a dead tracking server: noise before our one line
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
        # MLflow logs every SQLite error with its traceback before raising it (a full disk:
        # 90 lines before our one); the raised error still says all, and -v shows both
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    end_with_dvc()  # a stage of a DVC run that is stopped (SIGTERM) stops too
    try:
        print_copies()  # a bad MULTILAB_PRINT_FIGURES: one line before any work
        if args.command in ("train", "evaluate", "variant", "downstream"):
            claim_gpu()  # several GPUs: one per process, before CUDA starts (devices.py)
            configure_threads()  # cores shared by parallel workers, before torch starts
        args.func(args)
    except UserError as err:  # ModificationError is one
        message = " ".join(str(err).split())  # always one line, whatever the cause says
        _close_progress_bars()
        print(f"multilab: error: {message}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `multilab study list | head`: the reader has what it wanted
        _quiet_stdout()
        return 128 + 13  # what a shell reports for a command that SIGPIPE stopped
    except (KeyboardInterrupt, Terminated) as err:  # the MLflow run is already ended KILLED
        how = "SIGTERM" if isinstance(err, Terminated) else "interrupted"
        _close_progress_bars()
        if not stops.said(err):  # a command `study run` ran in-process said it already
            print(f"multilab: {how}: stopped; run the same command again to resume from the "
                  "last checkpoint", file=sys.stderr)
        return stops.exit_status(err)
    except Exception as err:  # a full or read-only disk under some library's own error type
        problem = storage_problem(err)
        if problem is None:
            raise
        _close_progress_bars()
        print(f"multilab: error: {problem}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
