"""``study``: the papers' tables as studies (studies/<name>.yaml), listed, planned, run and
reported from the records in results/ (the work itself: :mod:`multilab.studies.overview`,
:mod:`multilab.studies.run_studies`)."""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from multilab import stops
from multilab.cli.common import AddCommand, add_wide, config_of, fit_line, output_width
from multilab.files import write_text

if TYPE_CHECKING:  # the studies package is imported when a study command runs
    from multilab.studies.overview import NextRequest
    from multilab.studies.run_studies import RunRequest
    from multilab.studies.runner import Command

#: What ``multilab study --help`` says beyond its line in the command list.
STUDY_DESCRIPTION = (
    "The papers' tables as declarative studies (studies/<name>.yaml): list them, run "
    "the (row, seed) pairs without a record, or report their rows and claim verdicts "
    "from the records in results/.")


def cmd_study(args: argparse.Namespace, command_line: Command) -> None:
    """``study list | next | run | report``; ``command_line`` runs a command of a study's
    run in this process (``multilab``'s main)."""
    from multilab.studies.claims import load_claims
    from multilab.studies.figures import write_figures
    from multilab.studies.findings import tally_text
    from multilab.studies.overview import (
        every_result,
        every_study,
        list_lines,
        next_lines,
        pick_names,
        report_pages,
        uncommitted_warning,
    )
    from multilab.studies.records import profile_records, records_roots
    from multilab.studies.run_studies import run_studies
    from multilab.studies.standing import spread
    from multilab.studies.tables import study_result

    cfg = config_of(args)
    folder = Path(args.studies)
    claims = load_claims(folder / "claims")
    studies = every_study(folder, claims, cfg)
    names = pick_names(studies, args.names, args.all or (
        args.action in ("list", "next") and not args.names))
    # the folders of every study's profile (committed studies: results/ alone; a smoke
    # study's: the scratch folder); a damaged record: one line, no output
    profiles = {study.profile for study in studies.values()}
    records = profile_records(cfg.paths.results, profiles)
    if args.action == "run":
        # SIGTERM is a stop everywhere in the run, not only inside a training's MLflow run:
        # a runner killed while a command wrote its record left its booking behind, silently
        with stops.catching():
            run_studies(_run_request(args), cfg, [studies[name] for name in names], records,
                        command_line)
        records = profile_records(cfg.paths.results, profiles)
    overrides = args.set or []
    results = [study_result(studies[name], records, claims, Path(args.params), overrides)
               for name in names]
    width = output_width(args.wide)
    if args.action == "next":
        for line in next_lines(results, claims, records, _next_request(args)):
            # a command to copy (and a shell line) stays whole: cut, it would run wrong
            whole = args.shell or line.lstrip().startswith("multilab ")
            print(line if whole else fit_line(line, width))
        return
    if args.action in ("list", "run"):
        for line in list_lines(results):
            print(fit_line(line, width))
        return
    out = Path(args.out)
    every = results if args.all else every_result(studies, results, records, claims,
                                                  Path(args.params), overrides)
    # the document beside the studies folder: its prose kept, its tables regenerated
    reproduction = (Path(args.reproduction) if args.reproduction else
                    out.parent / "REPRODUCTION.md") if args.all else None
    for path, text in report_pages(results, every, claims, records, out, reproduction,
                                    folder / "claims").items():
        write_text(path, text)
        print(f"wrote {path}")
    for result in results:  # the figures the markdown links, from the same cells
        for path in write_figures(result, out):
            print(f"wrote {path} (and its .pdf)")
    for result in results:  # the share its page states, where a study counts one
        if result.study.spread_metrics:
            print(f"{result.study.name}: {spread(result).line()}")
    print(tally_text(every, claims))  # over every study, as the findings count them
    for root in records_roots(cfg.paths.results, profiles):
        warning = uncommitted_warning(root)
        if warning:
            print(warning, file=sys.stderr)


def _run_request(args: argparse.Namespace) -> RunRequest:
    from multilab.studies.run_studies import RunRequest

    return RunRequest(params=args.params, overrides=args.set or [], seeds=args.seeds,
                      rows=args.rows, again=args.again, plan=args.plan, prepare=args.prepare,
                      queue=args.queue, stack=args.stack, executor=args.executor,
                      address=args.address, cpus_per_run=args.cpus_per_run,
                      gpus_per_run=args.gpus_per_run)


def _next_request(args: argparse.Namespace) -> NextRequest:
    from multilab.studies.overview import NextRequest

    return NextRequest(limit=args.limit, lanes=args.lanes, hours=args.hours, shell=args.shell,
                       fit=args.fit, lanes_dir=args.lanes_dir, cpu=args.cpu)


def add_study(add: AddCommand, command_line: Command) -> None:
    p = add("study", help="the papers' tables as studies: list them, or report a "
            "study's rows and claim verdicts from the records in results/",
            description=STUDY_DESCRIPTION)
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
    p.add_argument("--executor", default="local", help="run: local (this process, the "
                   "default) or ray: each (row, seed) a Ray task (docs/ray.md)")
    p.add_argument("--address", help="run --executor ray: a running Ray cluster's address "
                   "(HOST:6379, auto); default: a new local Ray instance")
    p.add_argument("--cpus-per-run", type=float, default=1.0, help="run --executor ray: CPUs "
                   "a run's task asks for (default 1: its torch threads)")
    p.add_argument("--gpus-per-run", type=float, help="run --executor ray: GPUs a run's task "
                   "asks for (default 1 where the cluster has GPUs, else 0; 0.25 shares one)")
    add_wide(p)
    p.add_argument("names", nargs="*", help="study names (studies/<name>.yaml)")
    p.add_argument("--all", action="store_true", help="every study, and the claims summary")
    p.add_argument("--studies", default="studies", help="the folder of study specs")
    p.add_argument("--out", default="docs/studies", help="where report writes its tables "
                   "(--all: also the findings beside it, ../findings.md, and the tally and "
                   "results preview blocks of ../../README.md where it has them)")
    p.add_argument("--reproduction", help="report --all: the document whose generated blocks "
                   "are rewritten (default: REPRODUCTION.md beside the --out folder)")
    p.set_defaults(func=partial(cmd_study, command_line=command_line))

