"""``ids``, ``check``, ``records``: the paper-ID table, params.yaml validated as every command
does, and the committed records checked against their schema."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from multilab.cli.common import AddCommand, add_wide, config_of, fit_line, output_width
from multilab.errors import UserError
from multilab.lab.modifications import PAPER_IDS, describe

#: What ``multilab check --help`` says beyond its line in the command list.
CHECK_DESCRIPTION = (
    "Validate params.yaml (and any --set) as every command does, and print the study "
    "it describes. A bad value: one line naming it and the valid ones, exit code 2.")


#: What ``multilab ids --help`` says beyond its line in the command list.
IDS_DESCRIPTION = (
    "Print the paper-ID table: Dufter & Schütze 2020's model IDs and the modification "
    "each denotes (`-S modification=ID` and `train -m ID` take them).")


def cmd_ids(args: argparse.Namespace) -> None:
    width = output_width(args.wide)
    print(fit_line(f"{'ID':>4}  {'modification':45s} what it changes", width))
    for pid, mod in PAPER_IDS.items():
        print(fit_line(f"{pid:>4}  {mod:45s} {describe(mod)}", width))


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

        cfg = check_stage(Path(args.params), Path(args.stage), lambda: config_of(args), refuses)
    else:
        cfg = config_of(args)
    print(f"params OK: profile={cfg.profile} seeds={list(cfg.seeds)} study={list(cfg.study)} "
          f"modification={cfg.modification} languages=[{', '.join(cfg.languages)}]")


def add_ids(add: AddCommand) -> None:
    p = add("ids", help="the paper-ID table", description=IDS_DESCRIPTION)
    add_wide(p)
    p.set_defaults(func=cmd_ids)


def add_check(add: AddCommand) -> None:
    p = add("check", help="validate params.yaml", description=CHECK_DESCRIPTION)
    p.add_argument("--stage", metavar="MARKER",
                   help="the DVC pipeline's first stage: write MARKER when the parameters are "
                        "accepted; under `dvc exp run -S`, a refused value is taken back out of "
                        "params.yaml")
    p.set_defaults(func=cmd_check)


def cmd_records(args: argparse.Namespace) -> None:
    """``records check [ROOT]``: one line per bad file and field, exit 2 (record_schema.py)."""
    from multilab.studies.record_schema import check_records

    problems = [problem.line() for problem in check_records(args.root)]
    if problems:
        print("\n".join(problems), file=sys.stderr)
        raise SystemExit(2)
    print(f"{args.root}: every record names its provenance or says why not")


def add_records(add: AddCommand) -> None:
    p = add("records", help="check every file under results/ against the record schema")
    p.add_argument("action", choices=["check"])
    p.add_argument("root", nargs="?", type=Path, default=Path("results"))
    p.set_defaults(func=cmd_records)
