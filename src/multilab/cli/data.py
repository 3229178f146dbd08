"""``corpus``, ``vocab``, ``spaces``: the study's data, from the Bible editions to the knn
table of fastText spaces mapped by VecMap."""

from __future__ import annotations

import argparse
from dataclasses import replace

from multilab.cli.common import AddCommand, config_of, record_result
from multilab.config import Config, SpacesConfig
from multilab.files import atomic_open, write_json


def cmd_corpus(args: argparse.Namespace) -> None:
    from multilab.data import bible, corpus

    cfg = config_of(args)
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

    cfg = config_of(args)
    if cfg.verses:  # one WordPiece per language, concatenated
        from multilab.data.layout import build_verse_vocab

        info = build_verse_vocab(cfg)
    else:
        info = build_vocab(read_lines(cfg.paths.corpora / "train.txt"), cfg.vocab.size,
                           cfg.paths.vocab, cfg.vocab.unit)
    print(f"vocabulary written to {cfg.paths.vocab}: {info}")


def cmd_spaces(args: argparse.Namespace) -> None:
    from multilab import tracking
    from multilab.data.corpus import read_lines
    from multilab.data.vocab import load_tokenizer, vocabulary_words
    from multilab.spaces import fasttext_spaces, verse_spaces

    cfg = config_of(args)
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
    record_result(cfg, "spaces", metrics,
                  extra={f"spaces.{k}": v for k, v in vars(spaces_cfg).items()})
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


def add_corpus(add: AddCommand) -> None:
    p = add("corpus", help="export Bible editions / build corpora / print stats")
    p.add_argument("action", choices=["export", "build", "stats", "editions", "xnli-dev"],
                   help="xnli-dev: write each user corpus's dev file from XNLI's parallel dev "
                        "split (downstream.task_path)")
    p.add_argument("--edition", action="append", help="edition code (repeatable): export, editions")
    p.add_argument("--force", action="store_true",
                   help="xnli-dev: overwrite a dev file that holds other text")
    p.set_defaults(func=cmd_corpus)


def add_vocab(add: AddCommand) -> None:
    add("vocab", help="train the WordPiece vocabulary").set_defaults(func=cmd_vocab)


def add_spaces(add: AddCommand) -> None:
    add("spaces", help="fastText spaces + unsupervised VecMap + knn table"
        ).set_defaults(func=cmd_spaces)
