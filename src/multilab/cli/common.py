"""What every command group shares: the parser class, the way a command is added, the
configuration every command validates first, and the record a command leaves."""

from __future__ import annotations

import argparse
import difflib
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Protocol

from multilab.config import Config


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


#: the width of output that is no terminal's (a pipe, a file, a test's capture)
DEFAULT_COLUMNS = 100


def output_width(wide: bool = False) -> int | None:
    """The columns a listing fits: ``$COLUMNS``, else the terminal's, else
    :data:`DEFAULT_COLUMNS`; ``--wide`` (``None``): the full lines."""
    return None if wide else shutil.get_terminal_size((DEFAULT_COLUMNS, 24)).columns


def fit_line(line: str, width: int | None) -> str:
    """``line`` cut to ``width`` with "…" where it is longer, so a listing does not wrap."""
    if width is None or len(line) <= width:
        return line
    return line[:max(width - 1, 0)] + "…"


def add_wide(parser: argparse.ArgumentParser) -> None:
    """The ``--wide`` of a listing that fits the terminal otherwise."""
    parser.add_argument("--wide", action="store_true",
                        help="full lines (default: cut to $COLUMNS with …)")


class AddCommand(Protocol):
    """Adds one subcommand: its one line in the command list (``help``) and what ``multilab
    <command> --help`` says beyond it (``description``; default: the line as a sentence)."""

    def __call__(self, name: str, help: str, description: str | None = None
                 ) -> argparse.ArgumentParser: ...


def describe(help_text: str, description: str | None = None) -> str:
    """A command's ``--help`` description: its own, or its one line as a sentence."""
    text = description or help_text[:1].upper() + help_text[1:]
    return text if text.endswith(".") else text + "."


def config_of(args: argparse.Namespace) -> Config:
    """``--params`` with every ``--set``, validated (a bad value: one line, exit 2)."""
    from multilab.resolve import load_config, parse_overrides  # YAML and the task registry

    return load_config(args.params, parse_overrides(args.set))


def record_result(cfg: Config, kind: str, result: dict, model_dir: Path | None = None,
                  qualifier: str = "", extra: dict | None = None, once: bool = False) -> None:
    """Leave the command's result as a record in ``results/`` (studies/records.py; a smoke
    run's in the ignored ``results-scratch/``: :func:`~multilab.studies.records.records_root`): the
    lasting form of a number, whatever happens to MLflow or the machine. ``once``: keep an
    existing record (a training skipped as done keeps its first provenance)."""
    from multilab.resolve import resolve_run
    from multilab.studies.records import model_identity, record_path, records_root, write_record
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
    root = records_root(cfg.paths.results, cfg.profile)  # smoke: the ignored scratch folder
    if once and record_path(root, cfg.experiment, kind, model, qualifier).exists():
        return
    path = write_record(root, cfg.experiment, kind, result, model=model,
                        config=config, qualifier=qualifier)
    print(f"record: {path}")
