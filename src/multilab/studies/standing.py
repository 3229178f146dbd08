"""Where a study stands: how many of its headline cells lie within the paper's spread, which
(row, seed) pairs it still lacks and what they cost in lane-hours, and README's results
preview. Everything is read from the study's cells, which the committed records fill, so
these lines say nothing that no record backs.

*Within the paper's spread*: our mean over a row's seeds lies inside the paper's mean ± its
std over its seeds, as the paper prints them: widened by half a unit of its last decimal
(:func:`~multilab.studies.tables.paper_rounding`; its .00 ± .00 is anything below .005), so a
value the paper could not tell from its own is not outside. A value the paper gives without
a std (Dufter & Schütze 2020's μ) has its rounding alone. Only rows with at least
:data:`~multilab.studies.verdict.MIN_SEEDS` of our seeds count: a one-seed mean against a
five-seed spread says little either way.
"""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from multilab.lab.cells import JOIN, compact_cell
from multilab.lab.metric_table import HEADLINE
from multilab.studies.document import unrecorded
from multilab.studies.lane_packing import (
    BESIDE_ANOTHER_LANE,
    DEFAULT_MEASURE_SECONDS,
    lane_seconds,
)
from multilab.studies.spec import Row, Study
from multilab.studies.tables import (
    MISSING,
    Cell,
    StudyResult,
    header_text,
    paper_rounding,
    paper_text,
)
from multilab.studies.verdict import MIN_SEEDS, PaperValue

#: a float's slack in the comparison with the spread's edge (.97 + .01 + .005 in binary)
EDGE = 1e-9


@dataclass(frozen=True)
class SpreadCell:
    """One headline cell of a row with enough seeds, against the paper's spread."""

    row: Row
    metric: str
    ours: float
    paper: PaperValue
    within: bool


@dataclass(frozen=True)
class Spread:
    """A study's headline cells against the paper's spread, and the rows not counted yet."""

    cells: tuple[SpreadCell, ...]
    rows_below: tuple[Row, ...]  # rows with a paper value but fewer than MIN_SEEDS seeds

    @property
    def within(self) -> int:
        return sum(cell.within for cell in self.cells)

    def line(self) -> str:
        """``k of n cells (p %) within the paper's mean ± std; m rows still below 3 seeds``."""
        rows = f"{len(self.rows_below)} row{'' if len(self.rows_below) == 1 else 's'} still " \
               f"below {MIN_SEEDS} seeds"
        if not self.cells:
            return f"no cell yet within or outside the paper's mean ± std; {rows}"
        share = 100 * self.within / len(self.cells)
        return (f"{self.within} of {len(self.cells)} cells ({share:.0f} %) within the paper's "
                f"mean ± std; {rows}")


def within_spread(ours: float, paper: PaperValue, rounding: float | None) -> bool:
    """Whether our mean lies within the paper's mean ± std widened by its ``rounding``."""
    return abs(ours - paper.mean) <= (paper.std or 0.0) + (rounding or 0.0) + EDGE


def spread(result: StudyResult) -> Spread:
    """The study's ``spread_metrics`` cells of the rows with ≥ MIN_SEEDS seeds, each within
    or outside the paper's spread; the rows with a paper value still below that."""
    study = result.study
    counted: list[SpreadCell] = []
    below: list[Row] = []
    for row in study.rows:
        metrics = [metric for metric in study.spread_metrics if metric in row.paper]
        if not metrics:
            continue
        if len(result.seeds_found.get(row.label, ())) < MIN_SEEDS:
            below.append(row)
            continue
        for metric in metrics:
            values = result.cells[(row.label, metric)].values
            if len(values) < MIN_SEEDS:
                continue
            ours, paper = statistics.fmean(values), row.paper[metric]
            counted.append(SpreadCell(row, metric, ours, paper, within_spread(
                ours, paper, paper_rounding(study, metric))))
    return Spread(tuple(counted), tuple(below))


def short_header(metric: str) -> str:
    """A headline metric's short name (μ, τ₀, ρ₈), else its table header."""
    return HEADLINE.get(metric) or header_text(metric)


def row_name(row: Row) -> str:
    """A row as the paper's table and ours name it: ``0 `original```."""
    return f"{row.paper_id} `{row.label}`" if row.paper_id else f"`{row.label}`"


def spread_lines(result: StudyResult) -> list[str]:
    """A study page's section on its headline cells against the paper's spread (none for a
    study without ``spread_metrics``)."""
    study = result.study
    if not study.spread_metrics:
        return []
    found = spread(result)
    names = ", ".join(f"{short_header(m)} (`{m}`)" for m in study.spread_metrics)
    lines = ["## Against the paper's spread", "", f"**{found.line()}.**", "",
             f"Cells: our mean of {names} for each row with ≥ {MIN_SEEDS} of our seeds, "
             f"against the paper's mean ± std over {study.paper_seeds or 'its'} seeds as it "
             "prints them, widened by half a unit of its last decimal (its .00 ± .00 is "
             "anything below .005); a value it gives without a std, by that alone."]
    outside = [cell for cell in found.cells if not cell.within]
    if outside:
        lines[-1] += " Outside: " + "; ".join(
            f"{row_name(c.row)} {short_header(c.metric)} {compact_cell(c.ours)} against "
            f"{paper_text(study, c.row, c.metric)}" for c in outside) + "."
    if found.rows_below:
        lines[-1] += " Not counted yet: " + ", ".join(
            f"{row.paper_id or row.label} ({len(result.seeds_found.get(row.label, ()))} of "
            f"{len(study.seeds_of(row))})" for row in found.rows_below) + "."
    return [*lines, ""]


def runs_left(result: StudyResult) -> dict[str, list[int]]:
    """Row label → its seeds without every record the row reads, in the study's order."""
    left: dict[str, list[int]] = {}
    for row, seed in unrecorded(result):
        left.setdefault(row.label, []).append(seed)
    return left


def runs_left_lines(result: StudyResult, measure: Mapping[str, float]) -> list[str]:
    """A study page's table of the runs it lacks, each priced in lane-hours as ``study next
    --lanes`` prices it (:func:`~multilab.studies.lane_packing.lane_seconds`, ``measure``:
    :func:`~multilab.studies.lane_packing.measure_seconds`); none without ``runs_left``."""
    study = result.study
    if not study.runs_left:
        return []
    left = runs_left(result)
    if not left:
        return ["## Runs left", "", "None: every row has its seeds' records.", ""]
    lines = ["## Runs left", "", "| ID | row | seeds left | lane-h a run | lane-h |",
             "|---|---|---|---:|---:|"]
    priced_runs, total = 0, 0.0
    for label, seeds in left.items():
        row = study.row(label)
        assert row is not None
        seconds = result.measured_seconds(label)
        if seconds is None:
            why = "lower bound only" if label in result.train_seconds else "no CPU price"
            each = whole = f"{MISSING} ({why})"
        else:
            hours = lane_seconds(seconds, [study.name], measure) / 3600
            each, whole = f"{hours:.1f}", f"{hours * len(seeds):.1f}"
            priced_runs += len(seeds)
            total += hours * len(seeds)
        lines.append(f"| {row.paper_id or ''} | {label} | {', '.join(map(str, seeds))} | "
                     f"{each} | {whole} |")
    runs = sum(len(seeds) for seeds in left.values())
    measured = measure.get(study.name)
    measuring = (f"its median on record, {measured / 60:.0f} min" if measured is not None
                 else f"none on record: {DEFAULT_MEASURE_SECONDS / 60:.0f} min assumed")
    lines += [f"|  | **total** | {runs} runs |  | **≈{JOIN}{total:.1f}** ({priced_runs} "
              "priced) |",
              "", "*Lane-hours*: hours of one background lane (one thread, `scripts/lanes.sh`), "
              "priced as `multilab study next --lanes` prices a run: the row's fastest CPU "
              "training on record (its train record's `step_seconds`; else one of the same "
              f"shape, step cost and steps) × {BESIDE_ANOTHER_LANE:g} beside another lane, "
              f"plus the study's measurement time ({measuring}). *No CPU price*: no CPU "
              "training of the row's shape is on record (a GPU's row, or a shape not trained "
              "yet); *lower bound only*: only a cheaper step's training is, which a lane plan "
              "does not rely on. A model under way in a lane's clone counts whole here: "
              "`study next --lanes --lanes-dir` prices its remaining steps.", ""]
    return lines


@dataclass(frozen=True)
class PreviewPart:
    """One study's rows in README's results preview; ``rows``: their paper IDs or labels,
    None for every row with a record."""

    study: str
    rows: tuple[str, ...] | None
    heading: str


#: README's results preview (Dufter & Schütze 2020 Table 1): the paper-budget rows with a
#: record, then the quick-budget study's rows that the default study trains (0, 1, 3) and
#: the untrained baseline (18)
PREVIEW = (PreviewPart("dufter2020-table1-paper", None, "At the paper's budget"),
           PreviewPart("dufter2020-table1", ("0", "1", "3", "18"), "At the quick budget"))
#: the preview's columns: Table 1's headline μ, τ₀ and ρ₈
PREVIEW_METRICS = ("mu", "translation_p1.l0", "retrieval_p1.l8")
#: README's generated block of the preview
PREVIEW_BLOCK = "preview"


#: the preview's prose is wrapped as README's tally box is
PROSE_WIDTH = 100


def _prose(text: str) -> list[str]:
    """A paragraph of README prose, wrapped (a link or code span never broken)."""
    return textwrap.wrap(text, PROSE_WIDTH, break_long_words=False, break_on_hyphens=False)


def preview_cell(study: Study, row: Row, metric: str, cell: Cell) -> str:
    """Our mean ± std over the seeds / the paper's (``.669 / .70``)."""
    ours = MISSING if not cell.values else compact_cell(
        statistics.fmean(cell.values),
        statistics.stdev(cell.values) if len(cell.values) > 1 else None)
    paper = paper_text(study, row, metric)
    return ours if paper is None else f"{ours}{JOIN}/{JOIN}{paper}"


def _preview_rows(result: StudyResult, part: PreviewPart, metrics: Sequence[str]
                  ) -> list[Row]:
    """The part's rows: those named, in the study's order, or every row with a record."""
    study = result.study
    if part.rows is None:
        return [row for row in study.rows
                if any(result.cells[(row.label, m)].values for m in metrics)]
    return [row for row in study.rows if row.paper_id in part.rows or row.label in part.rows]


def preview_lines(results: Sequence[StudyResult], link: str = "docs/studies/") -> list[str]:
    """README's results preview from the committed records: each :data:`PREVIEW` part's
    rows, ours / the paper's, linking its study page (``link``: the pages' folder from the
    README); a part whose study is not among ``results`` is left out."""
    by_name = {result.study.name: result for result in results}
    lines = [*_prose("Dufter & Schütze 2020, Table 1, generated by `multilab study report "
                     "--all` from the committed records. Each cell: our mean ± std over our "
                     "seeds / the paper's (mean ± std over its seeds; μ without a std); "
                     "*seeds*: ours with a record, of the row's."), ""]
    for part in PREVIEW:
        result = by_name.get(part.study)
        if result is None:
            continue
        study = result.study
        page = f"[{study.name}]({link}{study.name}.md)"
        about = f"profile `{study.profile}`" + (
            "; a smaller budget than the paper's, so rows can be ordered, magnitudes not "
            "compared" if study.paper_comparable else "")
        lines += [*_prose(f"**{part.heading}** ({page}, {about}):"), ""]
        if study.spread_metrics:
            line = spread(result).line()
            lines += [*_prose(f"{line[0].upper()}{line[1:]} ([how]({link}{study.name}.md"
                              "#against-the-papers-spread))."), ""]
        metrics = [metric for metric in PREVIEW_METRICS if metric in study.metrics]
        rows = _preview_rows(result, part, metrics)
        if not rows:
            lines += ["No row has a record yet.", ""]
            continue
        lines += ["| row | " + " | ".join(map(short_header, metrics)) + " | seeds |",
                  "|---|" + "---:|" * len(metrics) + "---:|"]
        for row in rows:
            found = len(result.seeds_found.get(row.label, ()))
            lines.append(f"| {row_name(row)} | " + " | ".join(
                preview_cell(study, row, m, result.cells[(row.label, m)])
                for m in metrics) + f" | {found}/{len(study.seeds_of(row))} |")
        lines.append("")
    return lines[:-1]
