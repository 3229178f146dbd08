"""A study's figures: its table's cells drawn as points, one per row, one panel per y metric.

A figure reads the very cells the study's markdown table shows (:class:`StudyResult`), so a
point without a record cannot appear: the point of a row is the mean of its x cell against
the mean of its y cell, with ± the standard deviation over seeds as error bars where a cell
has two seeds or more. The files are written beside the markdown (``figures/<study>-<name>``
as a PNG and a PDF, :func:`multilab.files.save_figure`); the same records give the same bytes
(no date in either file), so the generated docs stay a lockfile of the records. A figure
with no point yet writes no file and says so in the markdown.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from multilab.lab.metric_table import LAYER_METRICS, METRICS, split_layer_key
from multilab.studies.spec import FigureSpec, Study
from multilab.studies.tables import Cell, StudyResult

#: the folder beside a study's markdown that holds its figures
FIGURE_FOLDER = "figures"
POINT_COLOUR = "tab:blue"


@dataclass(frozen=True)
class Point:
    """One row in one panel: the means of its x and y cells and their std over seeds (None
    with fewer than two seeds)."""

    label: str
    x: float
    y: float
    x_err: float | None
    y_err: float | None


def figure_path(folder: Path, study: Study, figure: FigureSpec) -> Path:
    """The PNG of a figure (its PDF lies beside it) under a study markdown's folder."""
    return Path(folder) / FIGURE_FOLDER / f"{study.name}-{figure.name}.png"


def _spread(cell: Cell) -> float | None:
    return statistics.stdev(cell.values) if len(cell.values) >= 2 else None


def figure_points(result: StudyResult, figure: FigureSpec) -> dict[str, list[Point]]:
    """y metric → the points of the rows that have both an x and a y value."""
    panels: dict[str, list[Point]] = {}
    for metric in figure.y:
        points = []
        for row in result.study.rows:
            x_cell, y_cell = result.cells[(row.label, figure.x)], result.cells[(row.label, metric)]
            if x_cell.values and y_cell.values:
                points.append(Point(row.label, statistics.fmean(x_cell.values),
                                    statistics.fmean(y_cell.values), _spread(x_cell),
                                    _spread(y_cell)))
        panels[metric] = points
    return panels


#: words for the position embeddings of lang-pos models (metrics.position_diagonal)
_POSITIONS = {
    "position.diagonal": "position embeddings: diagonal (same − other position cosine)",
    "position.cos.same": "position embeddings: cosine of position p with p",
    "position.cos.other": "position embeddings: cosine of p with q ≠ p",
    "position.cos.same.frequent": "position embeddings: cosine of p with p, p < 90",
    "position.cos.same.rare": "position embeddings: cosine of p with p, p ≥ 90",
}


def metric_words(metric: str, figure: FigureSpec | None = None) -> str:
    """An axis title in words: the figure's own (``axis_titles``), the metric table's label,
    or words for the study metrics' forms; the key itself where none is known."""
    if figure is not None and metric in figure.axis_titles:
        return figure.axis_titles[metric]
    if metric in METRICS:
        return METRICS[metric].label
    parts = metric.split(".")
    if metric == "train.minutes":
        return "training minutes (wall time of the steps)"
    if split := split_layer_key(metric):
        name, layer = split
        return f"{LAYER_METRICS[name].words}, layer {layer}"
    if parts[0] == "downstream" and len(parts) == 3:
        words = {"zero_shot": "zero-shot accuracy on", "ratio": "zero-shot ratio (accuracy on",
                 "mds": "accuracy after the shift on"}.get(parts[1])
        if words:
            return f"{words} {parts[2]}" + (" over in-language)" if parts[1] == "ratio" else "")
    if metric in _POSITIONS:
        return _POSITIONS[metric]
    if parts[0] == "ppl_dev" and len(parts) == 2:
        return f"MLM perplexity, dev, {parts[1]}"
    if parts[0] == "mrr" and len(parts) == 3 and parts[2].startswith("l"):
        return f"word retrieval MRR {parts[1]}, layer {parts[2][1:]}"
    return metric


def figure_lines(result: StudyResult) -> list[str]:
    """The markdown of a study's figures: an image link, or "no points yet"."""
    study = result.study
    if not study.figures:
        return []
    lines = ["## Figures", ""]
    for figure in study.figures:
        points = figure_points(result, figure)
        title = figure_title(figure)
        if not any(points.values()):
            lines += [f"**{title}**: no points yet (no row has a record of both "
                      f"`{figure.x}` and any of {', '.join(f'`{m}`' for m in figure.y)}).", ""]
            continue
        png = Path(FIGURE_FOLDER) / f"{study.name}-{figure.name}.png"
        lines += [f"![{title}]({png.as_posix()})", "",
                  f"One point per row: the mean over seeds of `{figure.x}` against "
                  + ", ".join(f"`{m}`" for m in figure.y)
                  + " (± std where a row has two seeds or more), from the cells of the table "
                  f"above ([PDF]({png.with_suffix('.pdf').as_posix()})).", ""]
    return lines


def figure_title(figure: FigureSpec) -> str:
    return figure.title or (", ".join(metric_words(m, figure) for m in figure.y)
                            + f" against {metric_words(figure.x, figure)}")


def write_figures(result: StudyResult, folder: Path) -> list[Path]:
    """Draw each figure with points into ``folder``/figures/ (PNG and PDF); a figure with no
    point writes nothing and removes what an earlier report wrote for it."""
    written = []
    for figure in result.study.figures:
        path = figure_path(folder, result.study, figure)
        points = figure_points(result, figure)
        if not any(points.values()):
            for stale in (path, path.with_suffix(".pdf")):
                stale.unlink(missing_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        written.append(draw(figure, points, path))
    return written


def draw(figure: FigureSpec, points: dict[str, list[Point]], path: Path) -> Path:
    """One panel per y metric, side by side, sharing the x metric; every point labelled with
    its row (matplotlib is imported here: reading a study needs no plotting)."""
    from matplotlib.figure import Figure

    from multilab.files import save_figure
    from multilab.labels import label_points

    count = len(points)
    canvas = Figure(figsize=(5.2 * count, 4.4), layout="constrained")
    panels = canvas.subplots(1, count, squeeze=False).ravel()
    for panel, (metric, found) in zip(panels, points.items(), strict=True):
        panel.set_xlabel(metric_words(figure.x, figure))
        panel.set_ylabel(metric_words(metric, figure))
        panel.grid(alpha=0.3)
        if not found:
            panel.text(0.5, 0.5, "no points yet", ha="center", va="center",
                       transform=panel.transAxes, color="grey")
            continue
        panel.errorbar([p.x for p in found], [p.y for p in found],
                       xerr=[p.x_err or 0.0 for p in found], yerr=[p.y_err or 0.0 for p in found],
                       fmt="o", color=POINT_COLOUR, ecolor=POINT_COLOUR, elinewidth=1,
                       capsize=3, markersize=5)
        panel.margins(0.15)
    canvas.suptitle(figure_title(figure) + "\none point per row: mean over seeds, ± std where "
                    "a row has two seeds or more", fontsize=11)
    for panel, found in zip(panels, points.values(), strict=True):
        if found:
            label_points(panel, [(p.x, p.y) for p in found], [p.label for p in found],
                         ["black"] * len(found))
    return save_figure(canvas, path)
