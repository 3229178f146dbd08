"""``word-order``, ``probe``, ``similarity``: editions and models on parallel Bible verses
(Dufter & Schütze 2020 App. B.2; any Hugging Face masked LM; Conneau et al. 2020 §5)."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from multilab.cli.common import AddCommand, config_of, record_result
from multilab.config import Config
from multilab.errors import UserError
from multilab.files import write_json
from multilab.threads import choose_threads, usable_cores


def cmd_word_order(args: argparse.Namespace) -> None:
    """Every listed edition's Kendall's tau against the English reference (Dufter & Schütze
    2020 App. B.2)."""
    from multilab import tracking
    from multilab.data.parallel import read_edition
    from multilab.evaluation import bible_word_order as wo
    from multilab.reporting.word_order_table import WORD_ORDER_JSON, plot_word_order

    cfg = config_of(args)
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
    record_result(cfg, "word-order", data)
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

    cfg = config_of(args)
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
    record_result(cfg, "probe", result,
                  qualifier=f"{Path(args.model_dir).name}-{'-'.join(editions)}-l{args.layer}",
                  extra={"model_dir": str(args.model_dir)})


def cmd_similarity(args: argparse.Namespace) -> None:
    """Conneau et al. 2020 §5: two independently trained models, layer by layer, on
    parallel verses."""
    from multilab import tracking
    from multilab.evaluation.model_similarity import (
        MEASURES,
        compare_models,
        pairs_figure,
        similarity_figure,
    )
    from multilab.evaluation.probe import probe_verses
    from multilab.reporting.similarity_section import read_records

    cfg = config_of(args)
    if args.verses < 4:
        raise UserError(f"--verses {args.verses}: must be >= 4 (half learn the map, half test)")
    editions, verses = _editions_and_verses(cfg, args.languages, pair=True)
    # a damaged done file or a dead server: one line before minutes of work
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
    record_result(cfg, "similarity", record,
                  qualifier=f"{editions[0]}-{editions[1]}-{fingerprints}", extra=identities)
    for measure in MEASURES:
        values = " ".join(f"{v:.2f}" for v in record["trained"][measure])
        floor = " ".join(f"{v:.2f}" for v in record["untrained"][measure])
        print(f"{measure} by layer: {values}\n  untrained: {floor}")
    print(f"figures and JSON: {folder}")
    print(f"Figure 2 over {len(records)} pair(s), one line each: {shared}/figure2-*.png")


def _identity_of(model_dir: Path) -> dict | None:
    from multilab.studies.records import model_identity
    from multilab.training.model_dir import read_done

    done = read_done(model_dir)
    return model_identity(done) if done is not None else None


def add_word_order(add: AddCommand) -> None:
    add("word-order", help="each Bible edition's word order against English: Kendall's tau "
        "of IBM-1 + Match word alignments (Dufter & Schütze 2020 App. B.2)"
        ).set_defaults(func=cmd_word_order)




def add_probe(add: AddCommand) -> None:
    p = add("probe", help="any Hugging Face masked LM (with its fast tokenizer) on "
            "Bible verses: verse retrieval and word alignment between editions")
    p.add_argument("model_dir")
    p.add_argument("--languages", required=True, help="edition codes, the first aligned with "
                   "each other, e.g. 3,s,i")
    p.add_argument("--layer", type=int, default=8, help="hidden layer (0 = embeddings)")
    p.add_argument("--verses", type=int, default=1000, help="dev verses (Old Testament)")
    p.add_argument("--out", help="JSON file for the results")
    p.set_defaults(func=cmd_probe)


def add_similarity(add: AddCommand) -> None:
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
