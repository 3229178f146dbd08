"""``report``, ``plots-page``, ``figures``: the default study's tables and figures from its
MLflow runs, and the offline page of ``dvc plots show``."""

from __future__ import annotations

import argparse
from pathlib import Path

from multilab.cli.common import AddCommand, config_of

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
