"""``report``, ``plots-page``, ``figures``, ``exp``: the default study's tables and figures
from its MLflow runs, the offline page of ``dvc plots show``, and DVC's experiments one line
each."""

from __future__ import annotations

import argparse
from pathlib import Path

from multilab.cli.common import AddCommand, add_wide, config_of, output_width

#: What ``multilab report --help`` says beyond its line in the command list.
REPORT_DESCRIPTION = (
    "Build reports/table1.md (and Table 2, the downstream and word-order sections, "
    "figures and the plot data of `dvc plots`) from the study's finished MLflow "
    "runs: mean ± std over seeds beside the paper's values.")


#: What ``multilab figures --help`` says beyond its line in the command list.
FIGURES_DESCRIPTION = (
    "Draw one model's figures (position similarity, token PCA, training curves) "
    "from its directory or its MLflow run id, as PNG with a PDF beside each.")


def cmd_report(args: argparse.Namespace) -> None:
    from multilab.reporting.report import build_report

    cfg = config_of(args)
    for path in build_report(cfg):
        print(f"wrote {path}")


#: What ``multilab exp --help`` says beyond its line in the command list.
EXP_DESCRIPTION = (
    "DVC's experiments one line each, within the terminal (120 columns when it says "
    "nothing): the experiment, its modification and seeds, and the variant's μ, τ₀, ρ₈ and "
    "dev perplexity at the paper's decimals, from `dvc exp show --json`. `dvc exp show` "
    "cannot fit them: it heads each column of metrics/variant.json with the file's name.")


def cmd_exp(args: argparse.Namespace) -> None:
    from multilab.reporting.experiments import (
        DEFAULT_WIDTH,
        dvc_experiments,
        experiments,
        table_lines,
    )

    cfg = config_of(args)
    variant_file = cfg.paths.metrics / "variant.json"  # DVC names it from the project root
    if variant_file.is_absolute() and variant_file.is_relative_to(Path.cwd()):
        variant_file = variant_file.relative_to(Path.cwd())
    found = experiments(dvc_experiments(["-A"] if args.all_commits else []),
                        variant_file.as_posix())
    width = None if args.wide else (output_width() or DEFAULT_WIDTH)
    for line in table_lines(found, width, markdown=args.md):
        print(line)


def cmd_plots_page(args: argparse.Namespace) -> None:
    from multilab.reporting.plots_page import write_plots_page

    config_of(args)  # validated as every command is
    path = Path(args.out)
    print(f"{'wrote' if write_plots_page(path) else 'up to date:'} {path} (the offline page of "
          "`dvc plots show`)")


def cmd_figures(args: argparse.Namespace) -> None:
    from multilab import tracking
    from multilab.reporting.figures import figures_for

    cfg = config_of(args)
    tracking.check_server(cfg.paths)  # a dead server: one line before any figure is drawn
    for path in figures_for(cfg, args.target):
        print(f"wrote {path}")


def add_report(add: AddCommand) -> None:
    add("report", help="tables (and figures) from the MLflow runs",
        description=REPORT_DESCRIPTION).set_defaults(func=cmd_report)


def add_plots_page(add: AddCommand) -> None:
    p = add("plots-page", help="the page `dvc plots show` fills, with Vega inlined: charts "
            "drawn offline (.dvc/config names it)")
    p.add_argument("out", help="the HTML file, e.g. artifacts/dvc-plots.html")
    p.set_defaults(func=cmd_plots_page)


def add_figures(add: AddCommand) -> None:
    p = add("figures", help="figures of one model (directory or MLflow run id)",
            description=FIGURES_DESCRIPTION)
    p.add_argument("target")
    p.set_defaults(func=cmd_figures)


def add_exp(add: AddCommand) -> None:
    p = add("exp", help="DVC's experiments one line each: modification, seeds, μ, τ₀, ρ₈, "
            "ppl", description=EXP_DESCRIPTION)
    p.add_argument("-A", "--all-commits", action="store_true",
                   help="the experiments of every commit (`dvc exp show -A`)")
    p.add_argument("--md", action="store_true", help="a Markdown table")
    add_wide(p)
    p.set_defaults(func=cmd_exp)
