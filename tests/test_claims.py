"""The committed claim list (studies/claims/) and its strict loader."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from multilab.errors import UserError
from multilab.studies.claims import (
    PAPERS,
    SIZE_WORDS,
    load_claims,
    load_paper_claims,
    lock_text,
    read_lock,
    size_words,
)

CLAIMS = Path(__file__).resolve().parent.parent / "studies" / "claims"
STUDIES_README = CLAIMS.parent / "README.md"


def test_the_committed_claims_validate_and_match_the_lock() -> None:
    claims = load_claims(CLAIMS)
    assert {claim.paper for claim in claims.values()} == set(PAPERS)
    assert list(claims) == read_lock(CLAIMS), "ids.lock is the fixed denominator: update both"
    assert (CLAIMS / "ids.lock").read_text() == lock_text(claims)


def test_user_text_names_papers_by_authors() -> None:
    for source in CLAIMS.glob("*.yaml"):
        assert "seed 00" not in source.read_text().lower(), source


def test_row_zero_of_dufter_table_1_carries_its_seed_count() -> None:
    """The paper's Table 1 is a mean of 5 seeds (and gives stds for row 0's components)."""
    claims = load_claims(CLAIMS)
    row0 = [c for c in claims.values() if c.paper == "dufter2020" and c.kind == "paper"
            and c.compare["row"] == "original" and c.where.startswith("Table 1")]
    assert row0 and all(c.paper_value is not None and c.paper_value.n == 5 for c in row0)


GOOD = {"id": "k2020-t1-x", "where": "Table 1", "wording": "w", "kind": "rows",
        "compare": {"metric": "mu", "a": "x", "b": "y", "direction": "less"}, "setup": "s",
        "scale": "bert-base", "testable": True, "lab": None, "today": None, "note": None}


def _write(tmp_path: Path, *claims: dict, key: str = "k2020") -> Path:
    path = tmp_path / f"{key}.yaml"
    path.write_text(yaml.safe_dump({"paper": {"key": key, "citation": "c", "counting": "n"},
                                    "claims": list(claims)}))
    return path


@pytest.mark.parametrize(("change", "message"), [
    ({"colour": "red"}, "unknown key 'colour'; valid: id, where"),
    ({"kind": "vibes"}, "kind 'vibes'; valid: rows, paper"),
    ({"compare": {"metric": "mu", "a": "x", "b": "y", "direction": "lower"}},
     "direction 'lower'; valid: less, greater, equal"),
    ({"compare": {"metric": "mu", "a": "x"}}, "compare of kind rows lacks b, direction"),
    ({"id": "dufter2020-t1-x"}, "starting with the paper key 'k2020-'"),
    ({"testable": False}, "testable False: true, or 'no: <the reason>'"),
    ({"scale": "huge"}, "scale 'huge'; valid"),
    ({"kind": "paper", "compare": {"row": "r", "metric": "m", "paper": {"mean": "high",
                                                                        "std": None, "n": 1}}},
     "paper mean/std must be numbers"),
    ({"kind": "paper", "compare": {"row": "r", "metric": "m", "paper": {"mean": 0.5}}},
     "paper must be {mean: <number>, std: <number or null>, n: <seeds or null>}"),
    ({"kind": "paper", "compare": {"row": "r", "metric": "m", "paper": {"mean": 0.5,
                                                                        "std": None, "n": 0}}},
     "paper n must be a seed count >= 1 or null"),
    ({"compare": {"metric": "mu", "a": "x", "b": "y", "direction": "less", "colour": 1}},
     "compare has unknown key 'colour' for kind rows; valid: metric, a, b, direction, margin"),
    ({"compare": {"metric": "mu", "a": "x", "b": "y", "direction": "equal", "margin": 0}},
     "margin 0: a number > 0"),
    ({"kind": "correlation", "compare": {"x": "a", "y": "b", "over": "rows",
                                         "direction": "less"}},
     "direction 'less'; valid: positive, negative"),
    ({"compare": ["mu"]}, "compare must be a mapping"),
    ({"wording": "  "}, "wording must be non-empty text"),
    ({"note": 3}, "note must be text or null"),
    ({"criterion": {"relative_change": [-0.3, 0]}}, "criterion: {relative_change: [<low or "
     "null>, <high or null>], basis:"),
    ({"criterion": {"relative_change": [None, None], "basis": "b"}}, "not both null"),
    ({"criterion": {"relative_change": [0, -0.3], "basis": "b"}}, "low < high"),
    ({"criterion": {"relative_change": [-0.3, 0], "basis": " "}}, "basis must be non-empty"),
    ({"criterion": {"relative_change": [0, 0.3], "basis": "b"}},
     "disagrees with direction 'less' (less: high ≤ 0"),
    ({"kind": "qualitative", "compare": {},
      "criterion": {"relative_change": [-0.3, 0], "basis": "b"}},
     "a criterion binds a claim of kind rows, not qualitative"),
])
def test_a_bad_claim_is_one_line_naming_it(tmp_path: Path, change: dict, message: str
                                           ) -> None:
    path = _write(tmp_path, GOOD | change)
    with pytest.raises(UserError, match=re.escape(message)) as caught:
        load_paper_claims(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_missing_field_duplicate_id_and_wrong_file_name(tmp_path: Path) -> None:
    missing = {k: v for k, v in GOOD.items() if k != "wording"}
    with pytest.raises(UserError, match="missing wording"):
        load_paper_claims(_write(tmp_path, missing))
    _write(tmp_path, GOOD, GOOD)
    with pytest.raises(UserError, match="used twice"):
        load_claims(tmp_path)
    renamed = tmp_path / "other" / "liu.yaml"
    renamed.parent.mkdir()
    renamed.write_text((tmp_path / "k2020.yaml").read_text())
    with pytest.raises(UserError, match=re.escape("is named k2020.yaml")):
        load_paper_claims(renamed)


def test_untestable_claims_keep_their_reason(tmp_path: Path) -> None:
    _, [claim] = load_paper_claims(_write(tmp_path, GOOD | {"testable": "no: needs XNLI"}))
    assert not claim.testable and claim.untestable_reason == "needs XNLI"


@pytest.mark.parametrize(("text", "message"), [
    ("paper: [unclosed", "not readable YAML"),
    ("paper: {key: k2020, citation: c, counting: n}\n", "exactly two keys, paper and claims"),
    ("paper: {key: k2020}\nclaims: [x]\n", "paper needs exactly key, citation, counting"),
    ("paper: {key: k2021, citation: c, counting: n}\nclaims: [x]\n",
     "paper key 'k2021'; valid: dufter2020, liu2020a, k2020"),
    ("paper: {key: k2020, citation: c, counting: n}\nclaims: []\n",
     "claims must be a non-empty list"),
    ("paper: {key: k2020, citation: c, counting: n}\nclaims: [a claim]\n",
     "claim 1: a claim is a mapping of id, where, wording"),
])
def test_a_bad_claims_file_is_one_line_naming_it(tmp_path: Path, text: str, message: str
                                                 ) -> None:
    path = tmp_path / "k2020.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=re.escape(message)) as caught:
        load_paper_claims(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_a_folder_without_claims_files_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=re.escape(f"{tmp_path}: no claims files")):
        load_claims(tmp_path)


def test_only_a_row_vs_paper_claim_has_a_paper_value(tmp_path: Path) -> None:
    _, [claim] = load_paper_claims(_write(tmp_path, GOOD))
    assert claim.paper_value is None


def test_a_claim_of_a_size_carries_its_criterion(tmp_path: Path) -> None:
    """"Medium to slight decreases": a slight decrease is at most −31 %, and shown below 0."""
    slight = GOOD | {"criterion": {"relative_change": [-0.31, 0], "basis": "the paper's IDs"}}
    _, (claim,) = load_paper_claims(_write(tmp_path, slight))
    assert claim.relative_bounds == (-0.31, 0)
    _, (plain,) = load_paper_claims(_write(tmp_path, GOOD))
    assert plain.relative_bounds is None and plain.criterion is None


def test_every_claim_whose_words_carry_a_size_states_its_criterion() -> None:
    """A claim quoting "slight", "drastically", "similar", "very small", … (SIZE_WORDS, one
    list) is tested at its own strength: its entry states bounds, or why none can be read;
    and studies/README.md documents each one."""
    claims = load_claims(CLAIMS)
    sized = {claim_id: size_words(claim.wording) for claim_id, claim in claims.items()
             if size_words(claim.wording)}
    assert len(sized) >= 50, "the size words stopped matching the papers' quotes"
    missing = sorted(claim_id for claim_id in sized if claims[claim_id].criterion is None)
    assert not missing, f"sized claims without a criterion: {missing}"
    assert {claims[claim_id].paper for claim_id in sized} == set(PAPERS)
    readme = STUDIES_README.read_text(encoding="utf-8")
    undocumented = sorted(claim_id for claim_id, claim in claims.items()
                          if claim.criterion is not None and f"`{claim_id}`" not in readme)
    assert not undocumented, f"criteria missing from studies/README.md: {undocumented}"


def test_a_criterion_without_bounds_says_why_and_binds_nothing(tmp_path: Path) -> None:
    """``relative_change: null``: the paper gives no number for its word; the basis says so,
    and the verdict reads the claim's direction alone."""
    figure_only = {"relative_change": None, "basis": "Figure 3 gives bars without values"}
    for kind, compare in (("rows", GOOD["compare"]), ("qualitative", {})):
        _, (claim,) = load_paper_claims(_write(tmp_path, GOOD | {
            "kind": kind, "compare": compare, "criterion": figure_only}))
        assert claim.criterion == figure_only and claim.relative_bounds is None
    with pytest.raises(UserError, match="criterion basis must be non-empty"):
        load_paper_claims(_write(tmp_path, GOOD | {
            "criterion": {"relative_change": None, "basis": ""}}))


def test_size_words_match_whole_words_in_any_case() -> None:
    assert size_words("Slightly better, but drastically hurt") == ["slightly", "drastically"]
    assert size_words("structural similarity is crucial; drops significantly") == []
    assert size_words("performance drops to random") == ["drops to random"]
    assert len(set(SIZE_WORDS)) == len(SIZE_WORDS)


def test_a_curve_criterion_names_its_test_and_agrees_with_the_shape(tmp_path: Path) -> None:
    """``criterion: {curve: trend | end-vs-start, basis}``: only on a curve claim of a rising
    or falling shape; bounds only beside end-vs-start, agreeing with the shape; an unknown
    test is one line naming the valid ones."""
    curve = GOOD | {"kind": "curve", "compare": {"metric": "mu", "over": "steps",
                                                 "shape": "increasing", "rows": ["original"]}}
    trend = {"curve": "trend", "basis": "the longer, the more"}
    _, (claim,) = load_paper_claims(_write(tmp_path, curve | {"criterion": trend}))
    assert claim.curve_test == "trend" and claim.relative_bounds is None
    sized = {"curve": "end-vs-start", "relative_change": [0.066, None], "basis": "largely"}
    _, (claim,) = load_paper_claims(_write(tmp_path, curve | {"criterion": sized}))
    assert claim.curve_test == "end-vs-start" and claim.relative_bounds == (0.066, None)
    for criterion, refusal in (
            ({**trend, "curve": "slope"}, "curve 'slope'; valid: trend, end-vs-start"),
            ({**trend, "relative_change": [0.1, None]}, "binds curve: end-vs-start only"),
            ({**sized, "relative_change": [None, -0.1]}, "disagrees with direction 'greater'")):
        with pytest.raises(UserError, match=re.escape(refusal)):
            load_paper_claims(_write(tmp_path, curve | {"criterion": criterion}))
    with pytest.raises(UserError, match="binds a claim of kind curve, not rows"):
        load_paper_claims(_write(tmp_path, GOOD | {"criterion": trend}))
    wavy = curve | {"compare": {**curve["compare"], "shape": "wavy"}}
    with pytest.raises(UserError, match="needs a shape increasing, rising, decreasing or flat"):
        load_paper_claims(_write(tmp_path, wavy | {"criterion": trend}))


def test_a_flat_curve_criterion_bounds_its_change_around_zero(tmp_path: Path) -> None:
    """"Data did not largely improve X" (Liu et al. 2020a, static embeddings): a flat curve
    read end against start, its relative change shown below a size; a trend has no size, and
    bounds that leave 0 outside are a rise, not flatness."""
    flat = GOOD | {"kind": "curve", "compare": {"metric": "mrr", "over": "data-size",
                                                "shape": "flat (no large improvement)",
                                                "rows": ["static"]}}
    below = {"curve": "end-vs-start", "relative_change": [None, 0.066], "basis": "largely"}
    _, (claim,) = load_paper_claims(_write(tmp_path, flat | {"criterion": below}))
    assert claim.curve_test == "end-vs-start" and claim.relative_bounds == (None, 0.066)
    for criterion, refusal in (
            ({"curve": "trend", "basis": "no rise"}, "a flat curve's criterion is end-vs-start"),
            ({**below, "relative_change": [0.066, None]}, "disagrees with direction 'equal'")):
        with pytest.raises(UserError, match=re.escape(refusal)):
            load_paper_claims(_write(tmp_path, flat | {"criterion": criterion}))
