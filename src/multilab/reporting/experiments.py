"""``multilab exp``: DVC's experiments one line each, within a terminal's width.

``dvc exp show`` cannot fit them: the study's metrics files (``metrics/study/<row>.json``) and
the variant's (``metrics/variant.json``) share every key, so DVC heads each of the variant's
columns with its file (``metrics/variant.json:1.mu``, 25 characters a column), and the
modification and the seeds are among hundreds of parameters. This reads ``dvc exp show
--json`` and prints what tells experiments apart: the experiment, its modification and seeds,
and the variant's μ, τ₀, ρ₈ and dev perplexity (the mean over its seeds), at the paper's
table's decimals.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from multilab.errors import UserError
from multilab.lab.metric_table import HEADLINE, METRICS

#: The width the lines fit when the terminal says nothing (the README's promise).
DEFAULT_WIDTH = 120


@dataclass(frozen=True)
class Experiment:
    """One line: an experiment (or the workspace, or its baseline commit)."""

    name: str
    modification: str
    seeds: str
    values: Mapping[str, float | None]


def _data(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    return entry.get("data") or {}


def _experiment(name: str, data: Mapping[str, Any], variant_file: str) -> Experiment:
    params = (data.get("params") or {}).get("params.yaml", {}).get("data") or {}
    metrics = (data.get("metrics") or {}).get(variant_file, {}).get("data") or {}
    seeds = params.get("seeds")
    seeds_text = ",".join(map(str, seeds)) if isinstance(seeds, list) else str(seeds or "-")
    values = {}
    for key in HEADLINE:
        value = metrics.get(METRICS[key].dvc)
        values[key] = float(value) if isinstance(value, int | float) else None
    return Experiment(name, str(params.get("modification", "-")), seeds_text, values)


def experiments(shown: Sequence[Mapping[str, Any]], variant_file: str) -> list[Experiment]:
    """``dvc exp show --json``'s revisions as :class:`Experiment` lines, in DVC's order:
    the workspace, each baseline commit, then its experiments (queued or failed ones too,
    their metrics empty)."""
    out = []
    for entry in shown:
        rev = str(entry.get("rev", "?"))
        name = entry.get("name") or (rev if rev == "workspace" else rev[:7])
        out.append(_experiment(name, _data(entry), variant_file))
        for group in entry.get("experiments") or []:
            for revision in group.get("revs") or []:
                label = revision.get("name") or group.get("name") or \
                    str(revision.get("rev", "?"))[:7]
                out.append(_experiment(f"└ {label}", _data(revision), variant_file))
    return out


def _number(key: str, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.{METRICS[key].decimals}f}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def table_lines(found: Iterable[Experiment], width: int | None = DEFAULT_WIDTH,
                markdown: bool = False) -> list[str]:
    """The experiments as aligned lines no wider than ``width`` (None: as wide as they are;
    the experiment and modification names are cut with "…" first), or as a Markdown table."""
    header = ["experiment", "modification", "seeds", *HEADLINE.values()]
    rows = [[e.name, e.modification, e.seeds, *(_number(k, e.values[k]) for k in HEADLINE)]
            for e in found]
    if markdown:
        return ["| " + " | ".join(header) + " |",
                "|" + "|".join(["---"] * 3 + ["---:"] * len(HEADLINE)) + "|",
                *("| " + " | ".join(row) + " |" for row in rows)]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    if width is not None:
        for column in (1, 0, 2):  # the modification first, then the name, then the seeds
            over = sum(widths) + 2 * (len(widths) - 1) - width
            if over > 0:
                widths[column] = max(widths[column] - over, len(header[column]))
    numeric = set(range(3, len(header)))

    def line(cells: list[str]) -> str:
        return "  ".join(_cut(c, w).rjust(w) if i in numeric else _cut(c, w).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    lines = [line(header), *(line(row) for row in rows)]
    return lines if width is None else [_cut(text, width) for text in lines]


def dvc_experiments(extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    """``dvc exp show --json`` (with ``extra``: ``-A``, ``-n 3`` …) in the working folder,
    parsed; DVC's own error in one line when it fails."""
    done = subprocess.run([sys.executable, "-m", "dvc", "exp", "show", "--json", *extra],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"dvc exp show {' '.join(extra)}: {said}".replace("  ", " "))
    try:
        shown = json.loads(done.stdout)
    except json.JSONDecodeError as err:
        raise UserError(f"dvc exp show --json: not JSON ({err})") from None
    if not isinstance(shown, list):
        raise UserError("dvc exp show --json: not a list of revisions (a DVC this multilab "
                        "does not read)")
    return shown
