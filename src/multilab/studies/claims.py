"""The papers' claims: the fixed list every count of the lab's findings is made over.

``studies/claims/<paper>.yaml`` holds one paper's claims, each with a stable id, where the
paper makes it, its wording (quoted), and the comparison that would test it (``compare``,
by ``kind``). Study specs name claims by id; :mod:`multilab.studies.verdict` turns a claim's
comparison and the records into a verdict. The list is strictly validated: an unknown key, a
missing field, an unknown kind or direction, a duplicate id is one line naming the file, the
claim and the valid values. ``studies/claims/ids.lock`` pins the ids: a claim may be added
(with the lock), never silently dropped or renamed, so the denominator stays fixed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from multilab.errors import UserError
from multilab.files import parse_yaml
from multilab.studies.verdict import DIRECTIONS, PaperValue

#: The five papers, by key: the authors and year users read.
PAPERS = {
    "dufter2020": "Dufter & Schütze 2020",
    "liu2020a": "Liu et al. 2020a",
    "k2020": "K et al. 2020",
    "conneau2020": "Conneau et al. 2020",
    "liu2020b": "Liu et al. 2020b",
}
#: A study of the lab's own (a sweep, not a paper's table): no claims, no paper values.
LAB = "lab"


def paper_name(key: str) -> str:
    """A study's ``paper`` as users read it: the paper's authors and year, or the lab."""
    return PAPERS.get(key, "multilab (no paper)")


#: What a claim compares, and the fields its ``compare`` has.
COMPARE_FIELDS: dict[str, tuple[str, ...]] = {
    "rows": ("metric", "a", "b", "direction"),
    "paper": ("row", "metric", "paper"),
    "correlation": ("x", "y", "over", "direction"),
    "curve": ("metric", "over", "shape", "rows"),
    "similarity": ("measure", "a", "b", "over", "shape"),
    "qualitative": (),
}
#: Optional ``compare`` fields: an equivalence margin for ``equal`` claims; ``metric_b``, the
#: metric of arm ``b`` where it is not arm ``a``'s (the same model shifted and unshifted);
#: ``rows``, the rows a correlation runs over (all of the study's by default).
OPTIONAL_COMPARE = ("margin", "metric_b", "rows")
CORRELATION_DIRECTIONS = ("positive", "negative")
SCALES = ("bert-small", "bert-base", "mbert", "xlm", "other")
CLAIM_FIELDS = ("id", "where", "wording", "kind", "compare", "setup", "scale", "testable",
                "lab", "today", "note", "criterion")
_OPTIONAL_FIELDS = ("lab", "today", "note", "criterion")
#: A claim of a size ("slight decreases", "drastically lowered", "stable", "similar"): the
#: bounds ``[low, high]`` (None: open) on the relative change a / b − 1 that the paper's own
#: words and numbers give it, and where they come from (``basis``); the verdict tests the
#: bounds instead of the direction alone (:func:`multilab.studies.verdict.compare_relative`).
#: ``relative_change: null`` states that no bound can be read (the paper gives no number, or
#: the word names no size of the compared effect), the basis saying why.
CRITERION_FIELDS = ("relative_change", "basis")
#: the kinds a criterion with bounds may bind: a comparison of two arms
CRITERION_KINDS = ("rows",)
#: A claim about a curve (over training steps, data sizes, layers) read at its own words:
#: ``criterion: {curve: <test>, basis: …}`` (``relative_change`` beside ``end-vs-start``).
#: ``trend`` — "X increases with training": per seed, Spearman's ρ of the metric against the
#: curve's order, the seeds' ρ tested against zero in the shape's direction; ``end-vs-start``
#: — "X largely improved from … to …": the curve's last point against its first, with
#: ``relative_change`` bounds where the words carry a size
#: (:func:`multilab.studies.tables.curve_criterion_outcome`).
CURVE_TESTS = ("trend", "end-vs-start")
CURVE_CRITERION_FIELDS = ("curve", "basis", "relative_change")
#: a curve's shape (its first word) → the direction its criterion's bounds agree with:
#: ``flat`` ("data did not largely improve X") is the rule's ``equal``, bounds around 0
CURVE_CRITERION_SHAPES = {"increasing": "greater", "rising": "greater", "decreasing": "less",
                          "flat": "equal"}
#: The words that give a claim a size, matched as whole words in its quoted wording (any
#: case): a claim that uses one carries a ``criterion`` (tests/test_claims.py checks it).
#: Left out on purpose, because the verdict's own test at α already reads them: words of
#: evidence ("significant(ly)", "clear", "obviously") and of importance ("crucial",
#: "integral", "key", "important").
SIZE_WORDS = (
    "slight", "slightly", "a little", "little effect", "minor", "negligible", "very small",
    "modest", "only around", "similar", "comparable", "almost the same", "stable",
    "drops to random", "satisfactory", "satisfactorily", "reasonably strong", "very well",
    "much better", "much more", "largely", "overwhelmingly", "dramatic", "drastic",
    "drastically", "very poor", "almost completely", "still a high degree",
    "strong correlation",
)
_SIZE_PATTERN = re.compile(r"\b(" + "|".join(re.escape(word) for word in SIZE_WORDS) + r")\b",
                           re.IGNORECASE)


def size_words(text: str) -> list[str]:
    """The :data:`SIZE_WORDS` a claim's wording uses, in order, lower-cased (why: a claim of a
    size is tested at its own strength, so it must state its criterion)."""
    return [match.group(1).lower() for match in _SIZE_PATTERN.finditer(text)]
PAPER_FIELDS = ("key", "citation", "counting")
_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)+$")
LOCK_FILE = "ids.lock"
#: the map of the elements the papers test to their claims (:mod:`multilab.studies.findings`),
#: beside the claims it names: no paper's file
ELEMENTS_FILE = "elements.yaml"


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str
    where: str
    wording: str
    kind: str
    compare: Mapping[str, Any]
    setup: str
    scale: str
    testable: bool
    untestable_reason: str | None
    lab: str | None
    today: str | None
    note: str | None
    #: the claim's size as relative-change bounds (:data:`CRITERION_FIELDS`), else None
    criterion: Mapping[str, Any] | None = None

    @property
    def relative_bounds(self) -> tuple[float | None, float | None] | None:
        """The criterion's bounds on the relative change a / b − 1, None without one (or
        with one that states why no bound can be read)."""
        if not self.criterion or self.criterion.get("relative_change") is None:
            return None
        low, high = self.criterion["relative_change"]
        return low, high

    @property
    def curve_test(self) -> str | None:
        """The criterion's test of a curve claim (:data:`CURVE_TESTS`), None without one."""
        return None if not self.criterion else self.criterion.get("curve")

    @property
    def paper_value(self) -> PaperValue | None:
        """The paper's mean (std, seed count where given) of a row-vs-paper claim."""
        if self.kind != "paper":
            return None
        value = self.compare["paper"]
        return PaperValue(float(value["mean"]), value.get("std"), value.get("n"))


def _fail(source: Path, where: str, message: str) -> UserError:
    return UserError(f"{source}: {where}: {message}")


def _claim(raw: Any, paper: str, source: Path, index: int) -> Claim:
    where = f"claim {index + 1}"
    if not isinstance(raw, dict):
        raise _fail(source, where, "a claim is a mapping of " + ", ".join(CLAIM_FIELDS))
    claim_id = raw.get("id")
    if isinstance(claim_id, str):
        where = f"claim {claim_id}"
    unknown = sorted(set(raw) - set(CLAIM_FIELDS))
    if unknown:
        raise _fail(source, where, f"unknown key {unknown[0]!r}; valid: {', '.join(CLAIM_FIELDS)}")
    missing = [key for key in CLAIM_FIELDS if key not in raw and key not in _OPTIONAL_FIELDS]
    if missing:
        raise _fail(source, where, f"missing {', '.join(missing)}")
    if not isinstance(claim_id, str) or not _ID.match(claim_id) or \
            not claim_id.startswith(f"{paper}-"):
        raise _fail(source, where, f"id {claim_id!r}: lowercase words joined by '-', starting "
                    f"with the paper key '{paper}-'")
    for key in ("where", "wording", "setup"):
        if not isinstance(raw[key], str) or not raw[key].strip():
            raise _fail(source, where, f"{key} must be non-empty text")
    kind = raw["kind"]
    if kind not in COMPARE_FIELDS:
        raise _fail(source, where, f"kind {kind!r}; valid: {', '.join(COMPARE_FIELDS)}")
    compare = raw["compare"] if raw["compare"] is not None else {}
    if not isinstance(compare, dict):
        raise _fail(source, where, "compare must be a mapping")
    _check_compare(compare, kind, source, where)
    if raw["scale"] not in SCALES:
        raise _fail(source, where, f"scale {raw['scale']!r}; valid: {', '.join(SCALES)}")
    testable = raw["testable"]
    if testable is True:
        reason = None
    elif isinstance(testable, str) and testable.startswith("no:") and testable[3:].strip():
        reason = testable[3:].strip()
    else:
        raise _fail(source, where, f"testable {testable!r}: true, or 'no: <the reason>'")
    for key in ("lab", "today", "note"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise _fail(source, where, f"{key} must be text or null")
    criterion = raw.get("criterion")
    if criterion is not None:
        _check_criterion(criterion, kind, compare, source, where)
    return Claim(id=claim_id, paper=paper, where=raw["where"], wording=raw["wording"],
                 kind=kind, compare=compare, setup=raw["setup"], scale=raw["scale"],
                 testable=reason is None, untestable_reason=reason, lab=raw.get("lab"),
                 today=raw.get("today"), note=raw.get("note"), criterion=criterion)


def _check_criterion(criterion: Any, kind: str, compare: Mapping[str, Any], source: Path,
                     where: str) -> None:
    """``criterion: {relative_change: [low, high], basis: <where the bounds come from>}``,
    bounds that agree with the claim's direction (less: high ≤ 0; greater: low ≥ 0; equal:
    0 inside)."""
    if isinstance(criterion, dict) and "curve" in criterion:
        _check_curve_criterion(criterion, kind, compare, source, where)
        return
    shape = ("criterion: {relative_change: [<low or null>, <high or null>], basis: <the "
             "paper's words and numbers the bounds come from>} (relative_change: null, the "
             "basis saying why no bound can be read)")
    if not isinstance(criterion, dict) or set(criterion) != set(CRITERION_FIELDS):
        raise _fail(source, where, shape)
    if not isinstance(criterion["basis"], str) or not criterion["basis"].strip():
        raise _fail(source, where, "criterion basis must be non-empty text")
    if criterion["relative_change"] is None:  # no bound: the basis says why
        return
    if kind not in CRITERION_KINDS:
        raise _fail(source, where, f"a criterion binds a claim of kind "
                    f"{', '.join(CRITERION_KINDS)}, not {kind}")
    _check_bounds(criterion["relative_change"], str(compare.get("direction")), source, where,
                  shape)


def _check_curve_criterion(criterion: dict[str, Any], kind: str, compare: Mapping[str, Any],
                           source: Path, where: str) -> None:
    """``criterion: {curve: trend | end-vs-start, basis: …, relative_change: [low, high]}``
    (the bounds only beside ``end-vs-start``, agreeing with the curve's shape)."""
    shape = ("criterion: {curve: " + " | ".join(CURVE_TESTS) + ", basis: <the paper's words "
             "the test comes from>, relative_change: [<low>, <high>] (end-vs-start only)}")
    unknown = sorted(set(criterion) - set(CURVE_CRITERION_FIELDS))
    if unknown or "basis" not in criterion:
        raise _fail(source, where, shape)
    if kind != "curve":
        raise _fail(source, where, f"a curve criterion binds a claim of kind curve, not {kind}")
    if criterion["curve"] not in CURVE_TESTS:
        raise _fail(source, where, f"curve {criterion['curve']!r}; valid: "
                    f"{', '.join(CURVE_TESTS)}")
    if not isinstance(criterion["basis"], str) or not criterion["basis"].strip():
        raise _fail(source, where, "criterion basis must be non-empty text")
    curve_shape = str(compare.get("shape", ""))
    direction = next((d for word, d in CURVE_CRITERION_SHAPES.items()
                      if curve_shape.startswith(word)), None)
    if direction is None:
        raise _fail(source, where, f"a curve criterion needs a shape increasing, rising, "
                    f"decreasing or flat, not {curve_shape!r}")
    if direction == "equal" and criterion["curve"] != "end-vs-start":
        raise _fail(source, where, "a flat curve's criterion is end-vs-start with "
                    "relative_change bounds (0 inside): a trend has no size; " + shape)
    if criterion.get("relative_change") is None:
        return
    if criterion["curve"] != "end-vs-start":
        raise _fail(source, where, "relative_change binds curve: end-vs-start only; " + shape)
    _check_bounds(criterion["relative_change"], direction, source, where, shape)


def _check_bounds(bounds: Any, direction: str, source: Path, where: str, shape: str) -> None:
    """Bounds ``[low, high]`` on a / b − 1 that agree with the claimed direction."""
    if not isinstance(bounds, list) or len(bounds) != 2 or not all(
            bound is None or _number(bound) for bound in bounds) or bounds == [None, None]:
        raise _fail(source, where, f"relative_change {bounds!r}: [low, high], numbers or null "
                    "(not both null); " + shape)
    low, high = bounds
    if low is not None and high is not None and not low < high:
        raise _fail(source, where, f"relative_change {bounds!r}: low < high")
    agrees = {"less": high is not None and high <= 0,
              "greater": low is not None and low >= 0,
              "equal": (low is None or low < 0) and (high is None or high > 0)}
    if not agrees.get(str(direction), False):
        raise _fail(source, where, f"relative_change {bounds!r} disagrees with direction "
                    f"{direction!r} (less: high ≤ 0; greater: low ≥ 0; equal: 0 inside)")


def _check_compare(compare: dict[str, Any], kind: str, source: Path, where: str) -> None:
    expected = COMPARE_FIELDS[kind]
    unknown = sorted(set(compare) - set(expected) - set(OPTIONAL_COMPARE))
    if unknown:
        raise _fail(source, where, f"compare has unknown key {unknown[0]!r} for kind {kind}; "
                    f"valid: {', '.join(expected + OPTIONAL_COMPARE)}")
    missing = [key for key in expected if key not in compare]
    if missing:
        raise _fail(source, where, f"compare of kind {kind} lacks {', '.join(missing)}")
    direction = compare.get("direction")
    if kind == "rows" and direction not in DIRECTIONS:
        raise _fail(source, where, f"direction {direction!r}; valid: {', '.join(DIRECTIONS)}")
    if kind == "correlation" and direction not in CORRELATION_DIRECTIONS:
        raise _fail(source, where, f"direction {direction!r}; valid: "
                    f"{', '.join(CORRELATION_DIRECTIONS)}")
    if kind == "paper":
        value = compare["paper"]
        if not isinstance(value, dict) or set(value) != {"mean", "std", "n"}:
            raise _fail(source, where, "paper must be {mean: <number>, std: <number or null>, "
                        "n: <seeds or null>}")
        if not _number(value["mean"]) or not (value["std"] is None or _number(value["std"])):
            raise _fail(source, where, f"paper mean/std must be numbers: {value}")
        if value["n"] is not None and (not isinstance(value["n"], int) or value["n"] < 1):
            raise _fail(source, where, f"paper n must be a seed count >= 1 or null: {value}")
    margin = compare.get("margin")
    if margin is not None and (not _number(margin) or margin <= 0):
        raise _fail(source, where, f"margin {margin!r}: a number > 0")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def load_paper_claims(source: Path) -> tuple[dict[str, str], list[Claim]]:
    """One paper's file: its header (key, citation, counting) and its claims."""
    try:
        data = parse_yaml(Path(source).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"{source}: not readable YAML ({first})") from None
    if not isinstance(data, dict) or set(data) != {"paper", "claims"}:
        raise UserError(f"{source}: a claims file has exactly two keys, paper and claims")
    header = data["paper"]
    if not isinstance(header, dict) or set(header) != set(PAPER_FIELDS):
        raise UserError(f"{source}: paper needs exactly {', '.join(PAPER_FIELDS)}")
    key = header["key"]
    if key not in PAPERS:
        raise UserError(f"{source}: paper key {key!r}; valid: {', '.join(PAPERS)}")
    if Path(source).stem != key:
        raise UserError(f"{source}: the file of paper {key!r} is named {key}.yaml")
    if not isinstance(data["claims"], list) or not data["claims"]:
        raise UserError(f"{source}: claims must be a non-empty list")
    return header, [_claim(raw, key, Path(source), i) for i, raw in enumerate(data["claims"])]


def load_claims(folder: Path) -> dict[str, Claim]:
    """Every claim of every paper in ``folder``, by id (ids unique across papers)."""
    claims: dict[str, Claim] = {}
    files = sorted(p for p in Path(folder).glob("*.yaml") if p.name != ELEMENTS_FILE)
    if not files:
        raise UserError(f"{folder}: no claims files (<paper>.yaml)")
    for source in files:
        for claim in load_paper_claims(source)[1]:
            if claim.id in claims:
                raise UserError(f"{source}: claim id {claim.id!r} is used twice")
            claims[claim.id] = claim
    return claims


def read_lock(folder: Path) -> list[str]:
    """The pinned ids (one a line, ``#`` comments)."""
    lines = (Path(folder) / LOCK_FILE).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def lock_text(claims: Mapping[str, Claim]) -> str:
    """The lock file's content for ``claims``: ids grouped by paper, in file order."""
    header = ("# The fixed list of claim ids (studies/claims/*.yaml): every count of verdicts is\n"
              "# made over these. Add ids with their claims; never drop or rename one.\n")
    return header + "".join(f"{claim_id}\n" for claim_id in claims)
