"""docs/findings.md, README's tally box and the study pages' compact tables: the effect
sizes and their intervals, the element map, and the formatting the pages are written in."""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from scipy import stats

from multilab.cli import main
from multilab.errors import UserError
from multilab.lab import cells
from multilab.studies.claims import ELEMENTS_FILE, load_claims
from multilab.studies.findings import (
    effect_text,
    lead,
    load_elements,
    summary_line,
    tally_lines,
    unassigned,
)
from multilab.studies.tables import (
    Cell,
    metric_group,
    metric_tables,
    shared_prefix,
    study_result,
    table_lines,
)
from multilab.studies.verdict import (
    Arm,
    Outcome,
    PaperValue,
    Verdict,
    compare_rows,
    compare_with_paper,
)
from tests.test_studies import CLAIMS, STUDIES, _spec, _toy_records

NBSP = cells.JOIN
A = (0.21, 0.25, 0.275, 0.26)
B = (0.05, 0.07, 0.09)


# ------------------------------------------------------------ effect sizes and intervals

def test_welch_interval_is_scipys() -> None:
    """The interval of a − b beside a Welch verdict is the Welch–Satterthwaite t interval
    (scipy's, computed independently from the raw values)."""
    outcome = compare_rows(Arm.of(A), Arm.of(B), "greater")
    expected = stats.ttest_ind(A, B, equal_var=False).confidence_interval(0.95)
    assert outcome.difference == pytest.approx(sum(A) / 4 - sum(B) / 3)
    assert outcome.interval == pytest.approx((expected.low, expected.high))


def test_paired_interval_is_scipys() -> None:
    a, b = (0.52, 0.61, 0.40), (0.01, 0.02, 0.015)
    outcome = compare_rows(Arm.of(a, seeds=(42, 43, 44)), Arm.of(b, seeds=(42, 43, 44)),
                           "greater", paired=True)
    expected = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert outcome.interval == pytest.approx((expected.low, expected.high))


def test_an_interval_for_every_kind_of_test() -> None:
    """Against the paper's mean (one-sample t), under a relative criterion, an exact
    difference (no spread: its own interval), and none on fewer than 3 seeds."""
    ours = Arm.of((0.20, 0.25, 0.30))
    one_sample = compare_with_paper(ours, PaperValue(0.70))
    expected = stats.ttest_1samp((0.20, 0.25, 0.30), 0.70).confidence_interval(0.95)
    assert one_sample.interval == pytest.approx((expected.low - 0.70, expected.high - 0.70))
    relative = compare_rows(Arm.of(B), Arm.of(A), "less", relative=(None, -0.5))
    welch = stats.ttest_ind(B, A, equal_var=False).confidence_interval(0.95)
    assert relative.interval == pytest.approx((welch.low, welch.high))
    exact = compare_rows(Arm.of((0.5,) * 3), Arm.of((0.2,) * 3), "greater")
    assert exact.interval == pytest.approx((0.3, 0.3))
    assert compare_rows(Arm.of((0.5, 0.6)), Arm.of(B), "greater").interval is None


def test_effect_text_is_compact_and_signed() -> None:
    assert effect_text(Outcome(Verdict.HELD, "", difference=-0.2361, interval=(-0.313, -0.158))
                       ) == f"-.236{NBSP}[-.313,{NBSP}-.158]"
    assert effect_text(Outcome(Verdict.INDICATIVE, "", difference=0.134)) == "+.134"
    assert effect_text(Outcome(Verdict.NOT_MEASURED, "")) == "–"
    assert effect_text(Outcome(Verdict.HELD, "", difference=130.4, interval=(104.0, 157.2))
                       ) == f"+130{NBSP}[+104,{NBSP}+157]"


# ------------------------------------------------------------------- compact cells

@pytest.mark.parametrize(("mean", "std", "text"), [
    (0.245, 0.032, ".245 ± .032"), (25.3, 0.8, "25.3 ± 0.8"), (4173.2, 58.1, "4,173 ± 58"),
    (0.006, 0.0001, ".006 ± < .001"), (-0.021, 0.014, "-.021 ± .014"), (0.5, None, ".500")])
def test_compact_cells_drop_a_scores_leading_zero_and_never_wrap(mean: float, std: float | None,
                                                                  text: str) -> None:
    assert cells.compact_cell(mean, std) == \
        text.replace(" ± ", f"{NBSP}±{NBSP}").replace("< ", f"<{NBSP}")


@pytest.mark.parametrize(("mean", "std", "decimals", "text"), [
    (0.7, None, None, ".70"), (0.392, None, None, ".392"), (0.97, 0.01, 2, ".97 ± .01"),
    (9.0, 0.2, 2, "9 ± 0.2"), (3484.0, 44.1, None, "3,484 ± 44.1"), (72.3, None, 2, "72.3")])
def test_the_papers_values_read_as_the_paper_writes_them(mean: float, std: float | None,
                                                         decimals: int | None, text: str) -> None:
    assert cells.reported_cell(mean, std, decimals) == text.replace(" ± ", f"{NBSP}±{NBSP}")


# ------------------------------------------------------------------- study tables

def test_metric_groups_keep_multilinguality_apart_from_fit_and_positions() -> None:
    assert metric_group("mu") == metric_group("retrieval_p1.l8") == "Multilinguality"
    assert metric_group("ppl_dev") == "Model fit"
    assert metric_group("position.cos.same") == "Position embeddings"
    assert metric_group("downstream.zero_shot.en-enfake minus downstream.zero_shot.r") == \
        "Zero-shot transfer"
    assert metric_group("static.skipgram.w5.rall.zero_shot.en-fake") == "Zero-shot transfer"
    table1 = ["mu", "align_f1.l0", "retrieval_p1.l0", "translation_p1.l0", "align_f1.l8",
              "retrieval_p1.l8", "translation_p1.l8", "ppl_train", "ppl_dev", "position.diagonal"]
    assert metric_tables(table1) == [
        ("Multilinguality (1 of 2)", table1[:4]), ("Multilinguality (2 of 2)", table1[4:7]),
        ("Model fit", table1[7:9]), ("Position embeddings", table1[9:])]


def test_a_shared_key_prefix_is_said_once() -> None:
    zero_shot = ["downstream.zero_shot.en-enfake", "downstream.zero_shot.r",
                 "downstream.zero_shot.en-enfake minus downstream.zero_shot.r"]
    assert shared_prefix(zero_shot) == "downstream.zero_shot."
    assert shared_prefix(["mu", "retrieval_p1.l8"]) == ""  # titled metrics keep their titles
    assert shared_prefix(["position.diagonal"]) == ""
    assert shared_prefix(["similarity.cka.best", "similarity.cka.floor_gap"]) == "similarity.cka."


def test_a_study_page_drops_empty_columns_and_puts_prose_below(tmp_path: Path) -> None:
    """A column no record and no paper value fills is left out (and named); ours and the
    paper's share a cell; the ``about`` comes after the tables; settings read as on the
    command line, not as a Python dict."""
    from multilab.studies.spec import load_study
    from multilab.studies.tables import render_study

    spec = _spec(tmp_path, metrics=["mu", "retrieval_p1.l0", "retrieval_p1.l8",
                                    "position.diagonal"],
                 about="Prose about the toy.", settings={"train.length_pieces": 4})
    study = load_study(spec, CLAIMS)
    result = study_result(study, iter(()), CLAIMS)
    cells_ = dict(result.cells)
    cells_[("original", "mu")] = Cell((0.21, 0.25, 0.275), ("cpu",) * 3, (0, 1, 2))
    result = replace(result, cells=cells_)
    lines = table_lines(result)
    text = "\n".join(lines)
    assert "position.diagonal" not in text.split("Not shown")[0]
    assert "`position.diagonal`." in text.split("Not shown, no record has them yet: ")[1]
    assert f"| 0 | original | .245{NBSP}±{NBSP}.033{NBSP}/{NBSP}.70 |" in text
    page = render_study(result, CLAIMS)
    assert page.index("## Multilinguality") < page.index("## Claims") < \
        page.index("Prose about the toy.")
    assert "settings `train.length_pieces=4`" in page and "{'" not in page


# ------------------------------------------------------------------ the element map

def test_every_claim_is_in_an_element() -> None:
    elements = load_elements(STUDIES / "claims" / ELEMENTS_FILE, CLAIMS)
    assert unassigned(elements, CLAIMS) == []
    keys = [element.key for element in elements]
    for wanted in ("shared-positions", "shared-special-tokens", "random-replacement",
                   "word-order", "parallel-text", "word-piece-overlap", "model-size",
                   "objectives", "anchors", "parameter-sharing", "language-specific"):
        assert wanted in keys
    assert load_claims(STUDIES / "claims") == CLAIMS  # the map is no paper's claims file


@pytest.mark.parametrize(("text", "message"), [
    ("elements: []\n", "one key, elements"),
    ("elements:\n  - {key: a, title: A, varies: x, claims: [nope-*]}\n",
     "element 'a': 'nope-*' names no claim"),
    ("elements:\n  - {key: a, title: A, varies: x, claims: [k2020-t8-*], colour: red}\n",
     "element 'a': unknown key 'colour'"),
    ("elements:\n  - {key: a, title: A, claims: [k2020-t8-*]}\n", "element 'a': missing varies"),
    ("elements:\n  - {key: a, title: A, varies: x, claims: [k2020-t8-*]}\n"
     "  - {key: a, title: B, varies: y, claims: [k2020-t9-*]}\n", "element 'a' is listed twice"),
])
def test_a_bad_element_map_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    source = tmp_path / ELEMENTS_FILE
    source.write_text(text)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace("*", r"\*")):
        load_elements(source, CLAIMS)


def test_the_summary_line_is_computed_from_the_verdicts() -> None:
    held = {Verdict.HELD: 3, Verdict.NOT_HELD: 1, Verdict.NOT_SEPARABLE: 1}
    assert lead(_counter(held)) == "Mostly held"
    assert lead(_counter({Verdict.HELD: 1, Verdict.NOT_HELD: 1})) == "Mixed"
    assert lead(_counter({Verdict.NOT_SEPARABLE: 2, Verdict.HELD: 1})) == \
        "Mostly not separable from seed noise"
    assert lead(_counter({Verdict.INDICATIVE: 2})) == "No verdict yet"
    untested = [CLAIMS["conneau2020-s4-1-domain-ner"], CLAIMS["k2020-t8-nsp-es"]]
    assert summary_line(untested, {}) == \
        "**No verdict yet** (2 claims: 1 not testable, 1 not measured)."


def _counter(counts: dict[Verdict, int]) -> Counter[Verdict]:
    return Counter(counts)


# ---------------------------------------------------------- the page and the box

def test_the_claims_summary_and_the_tally_count_the_paper_budgets_verdict(
        tmp_path: Path) -> None:
    """One claim with a verdict at the quick budget (not separable) and another at the
    paper's (held): the claims summary (docs/studies/index.md), README's tally box and its
    closing line count the paper's alone, the outcome of record (studies/README.md, "Which
    study speaks", step 2), whichever study is listed first."""
    from multilab.studies.document import render_index
    from multilab.studies.findings import tally_text
    from multilab.studies.spec import load_study
    from multilab.studies.tables import claim_verdicts

    claim = "dufter2020-t1-r1-lang-pos"

    def result(name: str, outcome: Outcome, profile: str):
        study = replace(load_study(_spec(tmp_path, name=name, claims=[claim]), CLAIMS),
                        profile=profile)
        return replace(study_result(study, iter(()), CLAIMS), outcomes={claim: outcome})

    quick = result("toy-a-quick", Outcome(Verdict.NOT_SEPARABLE, "3 seeds", p=0.4,
                                          difference=-0.01, n=(3, 3),
                                          interval=(-0.05, 0.03)), "quick")
    paper = result("toy-b-paper", Outcome(Verdict.HELD, "3 seeds", p=0.001, difference=-0.2,
                                          n=(3, 3), interval=(-0.25, -0.15)), "paper")
    for order in ([quick, paper], [paper, quick]):
        index = render_index(order, CLAIMS, claim_verdicts(order, CLAIMS), [])
        assert "\n| held | 1 | 0 | 0 | 0 | 0 | 1 |\n" in index
        assert "\n| not separable from seed noise | 0 | 0 | 0 | 0 | 0 | 0 |\n" in index
        box = " ".join(" ".join(tally_lines(order, CLAIMS)).split())
        assert "**1 held, 0 did not hold, 0 not separable from seed noise**" in box
        assert "[**held**](docs/studies/toy-b-paper.md) at `paper`" in box
        assert "toy-a-quick" not in box
        assert tally_text(order, CLAIMS).startswith(
            f"tally: {len(CLAIMS)} claims: 1 held, 0 did not hold, 0 not separable")


def test_report_all_writes_the_findings_and_the_readme_box(tmp_path: Path, capsys) -> None:
    """``study report --all`` writes docs/findings.md beside the studies folder and fills
    the README's tally block, keeping its prose; a README without the block is left as it
    is."""
    folder = tmp_path / "studies"
    folder.mkdir()
    shutil.copytree(STUDIES / "claims", folder / "claims")
    _spec(folder)
    _toy_records(tmp_path / "results")
    readme = tmp_path / "README.md"
    readme.write_text("# Toy\n\nMine.\n\n<!-- generated:tally -->\nold\n"
                      "<!-- /generated:tally -->\n\nMore prose.\n")
    args = ["--set", f"paths.results={tmp_path / 'results'}", "study", "report", "--all",
            "--out", str(tmp_path / "docs" / "studies"), "--studies", str(folder)]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    # the tally after the "wrote" lines: the box's counts in one line
    assert out[-1].startswith("tally: 282 claims: ") and "wrote" in out[-2]
    assert "survive Holm's correction" in out[-1]
    text = readme.read_text()
    assert text.startswith("# Toy\n\nMine.\n\n<!-- generated:tally -->\n**What the lab found")
    assert text.endswith("<!-- /generated:tally -->\n\nMore prose.\n") and "\nold\n" not in text
    words = " ".join(text.split())
    assert "282 claims, 3 have a verdict" in words and "[findings](docs/findings.md)" in words
    assert "Weakest" not in words  # three findings: all of them the strongest
    assert max(len(line) for line in text.splitlines()) <= 100
    findings = (tmp_path / "docs" / "findings.md").read_text()
    assert "## Shared position embeddings" in findings and "[findings](findings.md)" in findings
    assert "| **held** |" in findings or "| **did not hold** |" in findings
    assert "[toy-study](studies/toy-study.md)" in findings
    readme.write_text("# No box here\n")
    assert main(args) == 0
    assert readme.read_text() == "# No box here\n"


def test_the_box_names_the_strongest_and_weakest_findings_once_per_test() -> None:
    from multilab.studies.records import iter_records
    from multilab.studies.spec import load_studies

    studies = load_studies(STUDIES, CLAIMS)
    records = list(iter_records(STUDIES.parent / "results"))
    results = [study_result(study, records, CLAIMS) for study in studies.values()]
    lines = tally_lines(results, CLAIMS)
    text = "\n".join(lines)
    strongest, weakest = text.split("Weakest")
    assert strongest.count("\n- [**") == 3 and weakest.count("\n- [**") == 3
    items = [line for line in lines if line.startswith("- [**")]
    assert len(set(items)) == 6


def test_a_finding_that_does_not_survive_holm_says_so() -> None:
    """README's weakest findings held (or did not hold) by their own test, yet Holm's
    correction over the paper's tests lifts their p above .05: the box says so beside the
    Holm p, and only there."""
    from multilab.studies.findings import findings
    from multilab.studies.records import iter_records
    from multilab.studies.spec import load_studies
    from multilab.studies.verdict import ALPHA

    studies = load_studies(STUDIES, CLAIMS)
    records = list(iter_records(STUDIES.parent / "results"))
    results = [study_result(study, records, CLAIMS) for study in studies.values()]
    found = [f for f in findings(results, CLAIMS).values() if f.decided]
    assert any(f.holm_p >= ALPHA for f in found) and any(f.holm_p < ALPHA for f in found)
    box = " ".join(" ".join(tally_lines(results, CLAIMS)).split())
    entries = [entry.split(" Weakest (")[0] for entry in box.split("- [**")[1:]]
    said = "does not survive Holm's correction"
    for words in entries:
        holm = words.split("Holm p ")[1].split()[0]
        survives = holm == "0" or float(holm) < ALPHA
        assert (said in words) is not survives, words
        if not survives:
            assert " on its own, " in words  # the test's own p beside the adjusted one
    assert sum(said in entry for entry in entries) >= 1
