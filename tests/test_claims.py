"""The committed claim list (studies/claims/) and its strict loader."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from multilab.errors import UserError
from multilab.studies.claims import (
    PAPERS,
    load_claims,
    load_paper_claims,
    lock_text,
    read_lock,
)

CLAIMS = Path(__file__).resolve().parent.parent / "studies" / "claims"


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
