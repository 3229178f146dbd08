"""The two labels as studies/README.md defines them, held on the committed claims and studies.

*not comparable*: the lab measures the claim, at another scale or on another task, so the
paper's magnitude is not set beside ours (the claim is ``testable: true``; its study says why
in ``paper_comparable``, naming both sides). *not testable*: the lab cannot measure it at all,
for a reason a reader can check (a file, a record, the lab's missing piece, or the paper's
own words).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from multilab.studies.claims import load_claims
from multilab.studies.spec import (
    Study,
    bind_claim,
    claim_metrics,
    claim_row_names,
    group_rows,
    load_studies,
)

ROOT = Path(__file__).resolve().parent.parent
STUDIES = ROOT / "studies"
#: a scale or task difference: the reason of *not comparable*, never of *not testable*
SCALE_WORDS = re.compile(r"another (task|scale)|on another scale|not comparable", re.I)
#: what makes a *not testable* reason checkable, besides a file of the repository it names
CHECKABLE = re.compile(r"\b(the lab|lab's|here|no shape|our copy|by construction)\b|'[^']+'",
                       re.I)
PATH = re.compile(r"[\w.-]+/[\w./<>-]*\w")


@pytest.fixture(scope="module")
def studies() -> dict[str, Study]:
    return load_studies(STUDIES, load_claims(STUDIES / "claims"))


def _reasons(studies: dict[str, Study]) -> list[tuple[str, str]]:
    """Every *not testable* reason: a claim's own, and a study's for a claim it binds."""
    claims = load_claims(STUDIES / "claims")
    return [(claim_id, claim.untestable_reason or "") for claim_id, claim in claims.items()
            if not claim.testable] + [
        (f"{name}: {entry.id}", entry.not_testable) for name, study in studies.items()
        for entry in study.claims if entry.not_testable]


def _measures(study: Study, claim_id: str) -> bool:
    """Whether the study has every row and metric the claim, as it binds it, reads."""
    claims = load_claims(STUDIES / "claims")
    entry = next(entry for entry in study.claims if entry.id == claim_id)
    claim = bind_claim(claims[claim_id], entry)
    if claim.kind not in ("rows", "paper"):
        return False
    try:
        for name in claim_row_names(study, claim):
            group_rows(study, name)
        metrics = claim_metrics(claim, study)
    except (KeyError, ValueError):
        return False
    return bool(metrics) and all(metric in study.metrics for metric in metrics)


def test_a_claim_a_study_measures_is_not_marked_not_testable(studies: dict[str, Study]
                                                             ) -> None:
    """A paper value or a comparison whose rows and metric a study has is measured by the
    lab: another scale makes it *not comparable*, never *not testable*."""
    claims = load_claims(STUDIES / "claims")
    wrong = sorted(f"{name}: {entry.id}" for name, study in studies.items()
                   for entry in study.claims
                   if not claims[entry.id].testable and _measures(study, entry.id))
    assert not wrong, f"measured by a study, yet testable: no (not comparable instead): {wrong}"


def test_a_not_testable_reason_is_no_scale_difference(studies: dict[str, Study]) -> None:
    wrong = [who for who, reason in _reasons(studies) if SCALE_WORDS.search(reason)]
    assert not wrong, f"a scale or task difference is *not comparable*: {wrong}"


def test_a_not_testable_reason_is_checkable(studies: dict[str, Study]) -> None:
    """It names the gap where a reader finds it: a file of the repository (which exists), the
    lab's missing piece, the paper's text we lack, or the paper's own words."""
    unchecked, missing = [], []
    for who, reason in _reasons(studies):
        paths = [path for path in PATH.findall(reason)
                 if "/" in path and not re.fullmatch(r"[\d./-]+", path)
                 and path.split("/")[0] in ("docs", "results", "src", "studies", "scripts")]
        missing += [f"{who}: {path}" for path in paths if "<" not in path and not
                    (ROOT / path).exists()]
        if not paths and not CHECKABLE.search(reason):
            unchecked.append(who)
    assert not missing, f"not-testable reasons naming files that do not exist: {missing}"
    assert not unchecked, f"not-testable reasons a reader cannot check: {unchecked}"


def test_a_not_comparable_study_names_both_sides(studies: dict[str, Study]) -> None:
    """``paper_comparable: "no: …"`` says what the paper ran and what the lab runs."""
    vague = sorted(name for name, study in studies.items() if study.paper_comparable and not (
        re.search(r"\bpaper", study.paper_comparable)
        and re.search(r"\blab\b|lab's|profile", study.paper_comparable)))
    assert not vague, f"paper_comparable must name the paper's side and the lab's: {vague}"


def test_the_fourteen_rows_of_another_scale_read_not_comparable(studies: dict[str, Study]
                                                                ) -> None:
    """Conneau et al. 2020's Table 1 and Dufter & Schütze 2020's Table 3 rows against the
    paper: measured by the lab on a Bible task, so testable, their study naming the scale."""
    claims = load_claims(STUDIES / "claims")
    rows = [claim_id for claim_id in claims if re.fullmatch(
        r"conneau2020-t1-.*-paper|dufter2020-t3-r\d+-paper", claim_id)]
    assert len(rows) == 14
    assert all(claims[claim_id].testable for claim_id in rows)
    for claim_id in rows:
        binding = [study for study in studies.values()
                   if any(entry.id == claim_id for entry in study.claims)]
        assert binding and all(study.paper_comparable for study in binding), claim_id
        assert any(_measures(study, claim_id) for study in binding), claim_id
