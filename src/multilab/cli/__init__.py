"""``multilab <stage>``: thin commands that parse, resolve the config and call the library.

Every command validates ``params.yaml`` first; a bad value ends in one line naming the bad
value and the valid ones, exit code 2, nothing written. Each command group's parser and
handler live in a module of this package; this one only dispatches.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable

from multilab import stops
from multilab.cli import analyses, data, evaluate, params, report, study, train, verses
from multilab.cli.common import AddCommand, Parser, describe
from multilab.devices import claim_gpu
from multilab.errors import Terminated, UserError, storage_problem
from multilab.files import print_copies
from multilab.lifeline import end_with_dvc
from multilab.threads import configure_threads

#: The commands in the order ``multilab --help`` lists them, each added by its group.
COMMANDS: tuple[Callable[[AddCommand], None], ...] = (
    data.add_corpus, data.add_vocab, data.add_spaces, verses.add_word_order, train.add_train,
    evaluate.add_evaluate, verses.add_probe, verses.add_similarity, analyses.add_translate,
    analyses.add_mrr, analyses.add_static, analyses.add_model_order, evaluate.add_downstream,
    evaluate.add_variant, report.add_report, report.add_exp, report.add_plots_page,
    report.add_figures,
    lambda add: study.add_study(add, command_line=main), params.add_ids, params.add_check,
    params.add_records)
#: The commands that may use a GPU: one is claimed, and the cores shared, before they start.
GPU_COMMANDS = ("train", "evaluate", "variant", "downstream")


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

    def add(name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=describe(help, description),
                              parents=[after])

    for add_command in COMMANDS:
        add_command(add)
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
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    if not argv:  # a bare `multilab` asks what there is, as `--help` does: no bad value
        parser.print_help()
        return 0
    args = parser.parse_args(argv)
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
        if args.command in GPU_COMMANDS:
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
