"""A study's standing (src/multilab/studies/standing.py): its headline cells against the
paper's spread, its runs left priced in lane-hours, and README's results preview, all read
from the study's cells."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from multilab.cli import main
from multilab.errors import UserError
from multilab.lab.cells import JOIN
from multilab.studies.lane_packing import BESIDE_ANOTHER_LANE, lane_seconds
from multilab.studies.spec import load_study
from multilab.studies.standing import (
    PREVIEW,
    preview_lines,
    runs_left_lines,
    spread,
    spread_lines,
    within_spread,
)
from multilab.studies.tables import Cell, StudyResult, render_study, study_result
from multilab.studies.verdict import PaperValue
from tests.test_studies import CLAIMS, DROP, STUDIES, _spec, _toy_records

ROWS = [{"id": "0", "modification": "original", "paper": {"mu": 0.70}},
        {"id": "1", "modification": "lang-pos", "paper": {"mu": [0.30, 0.05]}},
        {"id": "3", "modification": "inv-order", "paper": {"mu": 0.01}}]


def _result(folder: Path, values: dict[str, tuple[float, ...]], **change: object
            ) -> StudyResult:
    """A toy study's result whose μ cells hold ``values`` (row label → one value a seed),
    seeds 0, 1, … of each row recorded."""
    folder.mkdir(exist_ok=True)
    study = load_study(_spec(folder, **({"rows": ROWS, "spread_metrics": ["mu"]} | change)),
                       CLAIMS)
    empty = study_result(study, iter(()), CLAIMS)
    cells = dict(empty.cells)
    for label, mus in values.items():
        cells[(label, "mu")] = Cell(tuple(mus), ("cpu",) * len(mus), tuple(range(len(mus))))
    return replace(empty, cells=cells, seeds_found={
        row.label: tuple(range(len(values.get(row.label, ())))) for row in study.rows})


@pytest.mark.parametrize(("ours", "paper", "rounding", "within"), [
    (0.985, PaperValue(0.97, 0.01), 0.005, True),  # the edge: .97 + .01 + .005
    (0.986, PaperValue(0.97, 0.01), 0.005, False),
    (0.955, PaperValue(0.97, 0.01), 0.005, True),
    (0.004, PaperValue(0.0, 0.0), 0.005, True),  # the paper's .00 ± .00
    (0.006, PaperValue(0.0, 0.0), 0.005, False),
    (0.704, PaperValue(0.70), 0.005, True),  # no std: the rounding alone
    (0.71, PaperValue(0.70), None, False),
    (0.70, PaperValue(0.70), None, True),
])
def test_within_the_papers_spread_as_it_prints_it(ours: float, paper: PaperValue,
                                                   rounding: float | None, within: bool) -> None:
    assert within_spread(ours, paper, rounding) is within


def test_the_share_counts_the_rows_with_three_seeds_only(tmp_path: Path) -> None:
    """Row 0's mean .700 is within the paper's .70 (no std), row 1's .400 is outside .30 ±
    .05; row 3, one seed, is not counted but named as still below 3 seeds."""
    result = _result(tmp_path, {"original": (0.69, 0.70, 0.71), "lang-pos": (0.40, 0.41, 0.39),
                                "inv-order": (0.01,)}, paper_decimals=2)
    found = spread(result)
    assert [(cell.row.label, cell.within) for cell in found.cells] == [
        ("original", True), ("lang-pos", False)]
    assert [row.label for row in found.rows_below] == ["inv-order"]
    assert found.line() == ("1 of 2 cells (50 %) within the paper's mean ± std; 1 row still "
                            "below 3 seeds")
    page = render_study(result, CLAIMS, standing=spread_lines(result))
    assert "## Against the paper's spread" in page and f"**{found.line()}.**" in page
    assert "Outside: 1 `lang-pos` μ .400 against .30" in page
    assert "Not counted yet: 3 (1 of 3)." in page
    assert spread(_result(tmp_path, {})).line() == (
        "no cell yet within or outside the paper's mean ± std; 3 rows still below 3 seeds")
    assert spread_lines(_result(tmp_path, {}, spread_metrics=DROP)) == []


@pytest.mark.parametrize(("change", "message"), [
    ({"spread_metrics": ["mu", "ppl_dev"]},
     "spread_metrics: 'ppl_dev' is not among the study's metrics: mu, "),
    ({"spread_metrics": ["mu", "mu"]}, "spread_metrics ['mu', 'mu']: a list of the study's "
                                       "metrics, each once"),
    ({"spread_metrics": "mu"}, "spread_metrics 'mu': a list"),
    ({"runs_left": "yes"}, "runs_left 'yes': true or false"),
])
def test_a_bad_standing_key_is_one_line(tmp_path: Path, change: dict, message: str) -> None:
    with pytest.raises(UserError, match=re.escape(message)):
        load_study(_spec(tmp_path, **change), CLAIMS)


def test_the_runs_left_are_priced_as_the_lanes_price_them(tmp_path: Path) -> None:
    """Each row's seeds without a record, at its measured CPU training × the lanes' factor
    plus the study's measurement time; a row priced by a lower bound, or not at all, is
    named, never added to the total."""
    result = replace(_result(tmp_path, {"original": (0.69, 0.70, 0.71), "lang-pos": (0.4,)},
                             runs_left=True),
                     train_seconds={"lang-pos": 7200.0, "inv-order": 3600.0},
                     lower_bounds=frozenset({"inv-order"}))
    measure = {"toy-study": 600.0}
    hours = lane_seconds(7200.0, ["toy-study"], measure) / 3600
    assert hours == pytest.approx((7200.0 * BESIDE_ANOTHER_LANE + 600.0) / 3600)
    lines = runs_left_lines(result, measure)
    assert lines[0] == "## Runs left"
    assert f"| 1 | lang-pos | 1, 2 | {hours:.1f} | {2 * hours:.1f} |" in lines
    assert "| 3 | inv-order | 0, 1, 2 | – (lower bound only) | – (lower bound only) |" in lines
    assert not any("| original |" in line for line in lines)  # complete
    assert f"|  | **total** | 5 runs |  | **≈{JOIN}{2 * hours:.1f}** (2 priced) |" in lines
    assert "its median on record, 10 min" in lines[-2]
    unpriced = runs_left_lines(replace(result, train_seconds={}, lower_bounds=frozenset()), {})
    assert "| 1 | lang-pos | 1, 2 | – (no CPU price) | – (no CPU price) |" in unpriced
    assert "none on record: 6 min assumed" in unpriced[-2]
    assert runs_left_lines(_result(tmp_path, {}), measure) == []  # runs_left not asked for


def test_study_report_states_the_share_and_the_runs_left(tmp_path: Path, capsys) -> None:
    """``study report`` prints the share its page states, and the page lists no run left
    where every row has its seeds' records."""
    folder = tmp_path / "studies"
    folder.mkdir()
    shutil.copytree(STUDIES / "claims", folder / "claims")
    _spec(folder, spread_metrics=["mu"], runs_left=True)
    _toy_records(tmp_path / "results")
    out = tmp_path / "docs" / "studies"
    assert main(["--set", f"paths.results={tmp_path / 'results'}", "study", "report",
                 "toy-study", "--out", str(out), "--studies", str(folder)]) == 0
    line = "0 of 2 cells (0 %) within the paper's mean ± std; 0 rows still below 3 seeds"
    assert f"toy-study: {line}" in capsys.readouterr().out.splitlines()
    page = (out / "toy-study.md").read_text()
    assert f"**{line}.**" in page
    assert "## Runs left\n\nNone: every row has its seeds' records.\n" in page


def test_the_readme_preview_shows_the_recorded_rows_of_both_budgets(tmp_path: Path) -> None:
    """The paper-budget study's rows with a record and the quick study's named rows, ours /
    the paper's, each part linking its page, the paper's budget first."""
    mu_only = {"metrics": ["mu"], "claims": []}  # the preview's columns the toy has: μ
    paper = _result(tmp_path / "paper", {"original": (0.669,), "inv-order": (0.01, 0.012, 0.011)},
                    name=PREVIEW[0].study, profile="paper", paper_decimals=2, **mu_only)
    quick = _result(tmp_path / "quick", {"original": (0.24, 0.28, 0.21)}, name=PREVIEW[1].study,
                    profile="quick", paper_comparable="no: a quick budget", spread_metrics=DROP,
                    **mu_only)
    lines = preview_lines([quick, paper])
    text = "\n".join(lines)
    words = " ".join(text.split())
    assert words.index("[dufter2020-table1-paper](docs/studies/dufter2020-table1-paper.md") < \
        words.index("[dufter2020-table1](docs/studies/dufter2020-table1.md")
    assert "1 of 1 cells (100 %) within the paper's mean ± std; 2 rows still below 3 seeds" \
        in words
    sep = f"{JOIN}/{JOIN}"
    assert f"| 0 `original` | .669{sep}.70 | 1/3 |" in lines
    assert f"| 3 `inv-order` | .011{JOIN}±{JOIN}.001{sep}.01 | 3/3 |" in lines
    assert not any(line.startswith("| 1 `lang-pos`") for line in lines[:lines.index(
        f"| 3 `inv-order` | .011{JOIN}±{JOIN}.001{sep}.01 | 3/3 |")])  # no record: not shown
    quick_part = text[text.index("**At the quick budget**"):]
    assert f"| 1 `lang-pos` | –{sep}.30{JOIN}±{JOIN}.05 | 0/3 |" in quick_part  # named: shown
    assert "magnitudes not compared" in " ".join(quick_part.split())
    assert all(len(line) <= 100 for line in lines if not line.startswith("|"))
    assert preview_lines([]) == lines[:lines.index("")]  # no such study: the intro alone
