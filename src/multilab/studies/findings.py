"""docs/findings.md and README's tally box: the lab's answer, element by element, from the
records.

The papers ask which elements of multilingual BERT's setup make it multilingual.
``studies/claims/elements.yaml`` maps each element (shared positions, word order, anchors, …)
to the claims that test it; this module reads every claim by its outcome of record (the
study that speaks for it: :func:`~multilab.studies.tables.speakers`) and its Holm-adjusted p
(:func:`~multilab.studies.tables.multiplicity`), so the page says what the claims summary
says, by element. Every sentence is computed from the verdicts: nothing here is written by
hand but the elements' names and what each varies.
"""

from __future__ import annotations

import fnmatch
import math
import textwrap
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from multilab.errors import UserError
from multilab.files import parse_yaml
from multilab.lab.cells import JOIN, compact
from multilab.studies.claims import ELEMENTS_FILE, Claim, paper_name
from multilab.studies.document import fill
from multilab.studies.spec import Study, bind_claim
from multilab.studies.tables import (
    SUMMARY_COLUMNS,
    WIDE_PAGE,
    StudyResult,
    comparison_text,
    escape,
    multiplicity,
    speakers,
    test_key,
)
from multilab.studies.verdict import ALPHA, Outcome, Verdict

#: the fields of one element in the map
ELEMENT_FIELDS = ("key", "title", "varies", "claims")
#: the confidence of the effects' intervals (the verdicts' α)
CONFIDENCE = f"{1 - ALPHA:.0%}".replace("%", " %")
#: how many of the strongest and of the weakest findings the tally names
EXTREMES = 3
#: the longest a claim's cell in the tally box may be (the findings page has it whole)
BOX_CLAIM = 120
#: the verdicts a finding's table lists: a test was made (≥ 3 seeds), or fewer seeds read
LISTED = (Verdict.HELD, Verdict.NOT_HELD, Verdict.NOT_SEPARABLE, Verdict.INDICATIVE)


@dataclass(frozen=True)
class Element:
    """One element of the setup the papers test, and the ids of the claims that test it."""

    key: str
    title: str
    varies: str
    claims: tuple[str, ...]


def load_elements(source: Path, claims: Mapping[str, Claim]) -> list[Element]:
    """The element map: each element's claims (ids or globs of them, in the claim list's
    order); an unknown field, a missing one, a repeated key or a glob matching no claim is
    one line naming the file and the element."""
    try:
        data = parse_yaml(Path(source).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"{source}: not readable YAML ({first})") from None
    if not isinstance(data, dict) or set(data) != {"elements"} or \
            not isinstance(data["elements"], list) or not data["elements"]:
        raise UserError(f"{source}: one key, elements: a list of "
                        f"{', '.join(ELEMENT_FIELDS)}")
    elements: list[Element] = []
    for index, raw in enumerate(data["elements"]):
        elements.append(_element(raw, index, source, claims))
        if [e.key for e in elements].count(elements[-1].key) > 1:
            raise UserError(f"{source}: element {elements[-1].key!r} is listed twice")
    return elements


def _element(raw: Any, index: int, source: Path, claims: Mapping[str, Claim]) -> Element:
    where = f"{source}: element {index + 1}"
    if not isinstance(raw, dict):
        raise UserError(f"{where}: a mapping of {', '.join(ELEMENT_FIELDS)}")
    if isinstance(raw.get("key"), str):
        where = f"{source}: element {raw['key']!r}"
    unknown = sorted(set(raw) - set(ELEMENT_FIELDS))
    if unknown:
        raise UserError(f"{where}: unknown key {unknown[0]!r}; valid: "
                        f"{', '.join(ELEMENT_FIELDS)}")
    missing = [name for name in ELEMENT_FIELDS if not raw.get(name)]
    if missing:
        raise UserError(f"{where}: missing {', '.join(missing)}")
    patterns = raw["claims"]
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise UserError(f"{where}: claims is a list of claim ids or globs (dufter2020-t1-r2-*)")
    chosen: set[str] = set()
    for pattern in patterns:
        matched = [claim_id for claim_id in claims if fnmatch.fnmatchcase(claim_id, pattern)]
        if not matched:
            raise UserError(f"{where}: {pattern!r} names no claim of studies/claims/")
        chosen.update(matched)
    return Element(str(raw["key"]), str(raw["title"]), str(raw["varies"]),
                   tuple(claim_id for claim_id in claims if claim_id in chosen))


def unassigned(elements: Iterable[Element], claims: Mapping[str, Claim]) -> list[str]:
    """The claims no element names (the page lists them under "Other claims")."""
    named = {claim_id for element in elements for claim_id in element.claims}
    return [claim_id for claim_id in claims if claim_id not in named]


@dataclass(frozen=True)
class Finding:
    """A claim read by its outcome of record."""

    claim: Claim  # bound to the speaking study's rows and metrics
    outcome: Outcome
    study: Study
    holm_p: float | None  # Holm-adjusted over the paper's distinct tests

    @property
    def seeds(self) -> int:
        """The seeds the outcome rests on: its smallest arm's."""
        return min(self.outcome.n) if self.outcome.n else 0

    @property
    def decided(self) -> bool:
        """Held or did not hold: a finding in the strict sense."""
        return self.outcome.verdict in (Verdict.HELD, Verdict.NOT_HELD)

    @property
    def strength(self) -> tuple[float, float, float]:
        """How firmly the finding stands, the smaller the firmer: its Holm-adjusted p, then
        its effect against its interval's half-width (a t-like ratio, larger first), then
        the effect's size."""
        ratio = _ratio(self.outcome)
        size = abs(self.outcome.difference) if self.outcome.difference is not None else 0.0
        return (1.0 if self.holm_p is None else self.holm_p, -ratio, -size)


def _ratio(outcome: Outcome) -> float:
    """The effect over its interval's half-width; infinite for an exact difference."""
    if outcome.difference is None or outcome.interval is None:
        return 0.0
    half = (outcome.interval[1] - outcome.interval[0]) / 2
    return math.inf if half == 0 else abs(outcome.difference) / half


def findings(results: Sequence[StudyResult], claims: Mapping[str, Claim]) -> dict[str, Finding]:
    """Every claim some study tests, by its outcome of record, with its Holm-adjusted p."""
    adjusted = multiplicity(results, claims).adjusted
    found = {}
    for claim_id, speaker in speakers(results).items():
        study = speaker.result.study
        entry = next(e for e in study.claims if e.id == claim_id)
        found[claim_id] = Finding(bind_claim(claims[claim_id], entry), speaker.outcome, study,
                                  adjusted.get(claim_id))
    return found


def verdict_of(claim: Claim, found: Mapping[str, Finding]) -> Verdict:
    """A claim's verdict: its outcome of record's, else not testable or not measured (as
    :func:`~multilab.studies.tables.claim_verdicts`)."""
    if claim.id in found:
        return found[claim.id].outcome.verdict
    return Verdict.NOT_MEASURED if claim.testable else Verdict.NOT_TESTABLE


def effect_text(outcome: Outcome) -> str:
    """The effect and its interval, compact: ``-.236 [-.305, -.167]``; ``–`` without one."""
    if outcome.difference is None:
        return "–"
    effect = compact(outcome.difference, sign=True)
    if outcome.interval is None:
        return effect
    low, high = (compact(bound, sign=True) for bound in outcome.interval)
    return f"{effect}{JOIN}[{low},{JOIN}{high}]"  # one unbroken cell


def _p_text(value: float | None) -> str:
    """A p-value in two digits; 0 is an exact difference (no spread on either side)."""
    if value is None:
        return ""
    return "0 (no spread)" if value == 0 else f"{value:.2g}"


def _where(claim: Claim) -> str:
    """Where the paper makes the claim, its first place only (``Table 1, rows 0 and 1``)."""
    return claim.where.split(";")[0].strip()


def claim_cell(finding: Finding, longest: int | None = None) -> str:
    """A claim in one cell: the paper, where, and what was tested (cut at ``longest``
    characters with "…")."""
    claim = finding.claim
    text = f"{paper_name(claim.paper)}, {_where(claim)}: {comparison_text(claim)}"
    if longest is not None and len(text) > longest:
        text = text[:longest].rsplit(" ", 1)[0].rstrip(",;:") + " …"
    return escape(text)


def _one_per_test(ranked: Sequence[Finding]) -> list[Finding]:
    """``ranked`` with one finding per test: claims resting on the same comparison
    (:func:`~multilab.studies.tables.test_key`) are one finding, the first kept."""
    seen: set[Any] = set()
    kept = []
    for finding in ranked:
        # one comparison, or one part of a study's several-part claim read by the same
        # numbers (K et al.'s §1 and its Table 1 row): the same evidence
        keys = {test_key(finding.study, finding.claim),
                (finding.study.name, finding.outcome.difference, finding.outcome.interval)}
        if not keys & seen:
            kept.append(finding)
        seen |= keys
    return kept


def budget_cell(finding: Finding, link: str) -> str:
    """The profile the claim was read at and the study that read it, linked."""
    name = finding.study.name
    return f"`{finding.study.profile}`, [{name}]({link}studies/{name}.md)"


def finding_row(finding: Finding, link: str) -> str:
    outcome = finding.outcome
    return (f"| {claim_cell(finding)} | **{outcome.verdict}** | {effect_text(outcome)} | "
            f"{finding.seeds} | {_p_text(finding.holm_p)} | {budget_cell(finding, link)} |")


FINDING_HEADER = ["| claim (paper, where: what was tested) | verdict | effect [95 % CI] | seeds "
                  "| Holm p | read at |", "|---|---|---|---:|---:|---|"]


def _counts_text(counts: Mapping[Verdict, int], verdicts: Iterable[Verdict]) -> str:
    return ", ".join(f"{counts[v]} {v}" for v in verdicts if counts[v])


def lead(counts: Mapping[Verdict, int]) -> str:
    """The element's answer in words, from its verdicts alone: mostly held, mostly did not
    hold, mostly not separable, mixed, or no verdict yet."""
    decided = counts[Verdict.HELD] + counts[Verdict.NOT_HELD] + counts[Verdict.NOT_SEPARABLE]
    if not decided:
        return "No verdict yet"
    for verdict, words in ((Verdict.HELD, "Mostly held"),
                           (Verdict.NOT_HELD, "Mostly did not hold"),
                           (Verdict.NOT_SEPARABLE, "Mostly not separable from seed noise")):
        if 2 * counts[verdict] > decided:
            return words
    return "Mixed"


def summary_line(element_claims: Sequence[Claim], found: Mapping[str, Finding]) -> str:
    """One line computed from an element's verdicts: the lead (:func:`lead`), the verdicts,
    how many survive Holm, the budgets they were read at, and the claims still open."""
    counts = Counter(verdict_of(claim, found) for claim in element_claims)
    read = [found[c.id] for c in element_claims if c.id in found
            and found[c.id].outcome.verdict in LISTED]
    surviving = sum(1 for f in read if f.decided and f.holm_p is not None and f.holm_p < ALPHA)
    decided = sum(1 for f in read if f.decided)
    budgets = Counter(f.study.profile for f in read)
    parts = [f"**{lead(counts)}**"]
    rest = _counts_text(counts, [v for v in SUMMARY_COLUMNS if v not in LISTED])
    if not read:
        return f"{parts[0]} ({len(element_claims)} claims: {rest})."
    parts.append(f" ({len(read)} of {len(element_claims)} claims read): "
                 + _counts_text(counts, LISTED))
    if decided:
        parts.append(f"; {surviving} of the {decided} held or not held survive Holm's "
                     "correction")
    parts.append("; read at " + ", ".join(f"`{profile}` ({n})"
                                          for profile, n in budgets.most_common()))
    if rest:
        parts.append(f". The other {len(element_claims) - len(read)}: {rest}")
    return "".join(parts) + "."


def element_lines(element: Element, claims: Mapping[str, Claim],
                  found: Mapping[str, Finding], link: str = "") -> list[str]:
    """One element's section: what it varies, the summary line, the claims read."""
    mine = [claims[claim_id] for claim_id in element.claims]
    lines = [f"## {element.title}", "", f"*Varied*: {element.varies}.", "",
             summary_line(mine, found), ""]
    read = [found[c.id] for c in mine if c.id in found and found[c.id].outcome.verdict in LISTED]
    order = {verdict: index for index, verdict in enumerate(LISTED)}
    read.sort(key=lambda f: (order[f.outcome.verdict], f.strength))
    if read:
        lines += [*FINDING_HEADER, *(finding_row(f, link) for f in read), ""]
    return lines


def tally(claims: Mapping[str, Claim], found: Mapping[str, Finding]) -> Counter[Verdict]:
    return Counter(verdict_of(claim, found) for claim in claims.values())


def _surviving(decided: Iterable[Finding]) -> int:
    """How many held or not-held findings keep p < ALPHA after Holm's correction."""
    return sum(1 for f in decided if f.holm_p is not None and f.holm_p < ALPHA)


def tally_text(results: Sequence[StudyResult], claims: Mapping[str, Claim]) -> str:
    """``study report``'s closing line: the tally box's counts (:func:`tally_lines`) in one
    plain line, so a report in a terminal says what the records add up to."""
    found = findings(results, claims)
    counts = tally(claims, found)
    decided = [f for f in found.values() if f.decided]
    others = _counts_text(counts, [v for v in SUMMARY_COLUMNS if not v.counts])
    return (f"tally: {len(claims)} claims: {counts[Verdict.HELD]} held, "
            f"{counts[Verdict.NOT_HELD]} did not hold, {counts[Verdict.NOT_SEPARABLE]} not "
            f"separable from seed noise; {_surviving(decided)} of the {len(decided)} held or "
            f"not held survive Holm's correction" + (f"; the rest: {others}" if others else ""))


def tally_lines(results: Sequence[StudyResult], claims: Mapping[str, Claim],
                link: str = "docs/") -> list[str]:
    """The tally box: the verdicts over every claim, how many survive Holm, and the
    :data:`EXTREMES` strongest and weakest findings (held or did not hold, by
    :attr:`Finding.strength`, one per test), as short wrapped lines (README's first
    screen). ``link``: the docs folder as seen from the page (README: ``docs/``; a page
    inside docs: empty)."""
    found = findings(results, claims)
    counts = tally(claims, found)
    decided = sorted((f for f in found.values() if f.decided), key=lambda f: f.strength)
    surviving = _surviving(decided)
    with_verdict = sum(counts[v] for v in Verdict if v.counts)
    others = _counts_text(counts, [v for v in SUMMARY_COLUMNS if not v.counts])
    lines = [*_wrap(f"**What the lab found so far**, from the committed records: of the five "
                  f"papers' {len(claims)} claims, {with_verdict} have a verdict (a test over ≥ "
                  f"3 seeds in every arm): **{counts[Verdict.HELD]} held, "
                  f"{counts[Verdict.NOT_HELD]} did not hold, {counts[Verdict.NOT_SEPARABLE]} "
                  f"not separable from seed noise**; {surviving} of the {len(decided)} held or "
                  f"not held survive Holm's correction per paper. The rest: {others}. By "
                  f"element: [findings]({link}findings.md); by paper and study: "
                  f"[claims summary]({link}studies/index.md)."), ""]
    if not decided:
        return lines
    distinct = _one_per_test(decided)
    strongest = distinct[:EXTREMES]
    weakest = [f for f in reversed(distinct) if f not in strongest][:EXTREMES]
    strongest_words = (f"Strongest (smallest Holm-adjusted p, one per test; effect: a − b "
                       f"with its {CONFIDENCE} interval over seeds; the verdict links its study)")
    for label, chosen in ((strongest_words, strongest),
                          ("Weakest (largest Holm-adjusted p)", weakest)):
        if not chosen:
            continue
        lines += [*_wrap(f"{label}:"), ""]
        for finding in chosen:
            outcome = finding.outcome
            page = f"{link}studies/{finding.study.name}.md"
            lines += _wrap(f"- [**{outcome.verdict}**]({page}) at `{finding.study.profile}`: "
                           f"{claim_cell(finding, BOX_CLAIM)}: {effect_text(outcome)}, Holm p "
                           f"{_p_text(finding.holm_p)}{_holm_caveat(finding)}", indent="  ")
        lines.append("")
    return lines[:-1]


def _holm_caveat(finding: Finding) -> str:
    """The words a finding needs when its own test decided it but Holm's correction over
    its paper's tests does not keep it below ALPHA: its verdict stands on p alone."""
    if finding.holm_p is None or finding.holm_p < ALPHA:
        return ""
    alone = f"p {_p_text(finding.outcome.p)} on its own, " if finding.outcome.p is not None \
        else ""
    return f" ({alone}does not survive Holm's correction)"


#: the width the box's lines are wrapped at (the README's own)
BOX_WIDTH = 100


def _wrap(text: str, indent: str = "") -> list[str]:
    """Markdown text as lines of at most :data:`BOX_WIDTH`, broken at spaces only (a link
    is never cut), continued with ``indent``."""
    return textwrap.wrap(text, BOX_WIDTH, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False)


def render_findings(results: Sequence[StudyResult], claims: Mapping[str, Claim],
                    elements: Sequence[Element]) -> str:
    """docs/findings.md: the tally, then one section per element (:func:`element_lines`),
    then the claims no element names."""
    found = findings(results, claims)
    lines = [*WIDE_PAGE, "# What makes multilingual BERT multilingual: the lab's findings", "",
             "Generated by `multilab study report --all` from `studies/` (the element map: "
             "`studies/claims/elements.yaml`) and the records under `results/`. Each claim is "
             "read by its outcome of record, the study that speaks for it (`studies/README.md`, "
             "\"Which study speaks\"). *Effect*: the difference a − b of the claim's comparison "
             "(against the paper's value: ours − the paper's; a claim of several parts: the "
             f"part its verdict rests on) with its {CONFIDENCE} confidence interval over seeds "
             "by the verdict's own test (Welch's or the paired t). *Seeds*: its smallest "
             "arm's. *Holm p*: adjusted over the paper's distinct tests. *Read at*: the "
             "profile (training budget) and the study.", "",
             *tally_lines(results, claims, link=""), "",
             "Elements: " + " · ".join(f"[{e.title}](#{_anchor(e.title)})" for e in elements)
             + ".", ""]
    for element in elements:
        lines += element_lines(element, claims, found)
    rest = unassigned(elements, claims)
    if rest:
        lines += element_lines(Element("other", "Other claims", "what no element above names",
                                       tuple(rest)), claims, found)
    return "\n".join(lines).rstrip("\n") + "\n"


def _anchor(title: str) -> str:
    """The heading's anchor as MkDocs' toc writes it (lowercase words joined by '-')."""
    words = "".join(ch if ch.isalnum() or ch in " -" else "" for ch in title.lower())
    return "-".join(words.split())


#: README's generated blocks: the tally box (between ``<!-- generated:tally -->`` and its
#: closing marker, as REPRODUCTION.md's blocks) and the results preview
#: (:data:`multilab.studies.standing.PREVIEW_BLOCK`)
TALLY_BLOCK = "tally"


def findings_documents(claims_folder: Path, out: Path, results: Sequence[StudyResult],
                       claims: Mapping[str, Claim]) -> dict[Path, str]:
    """What ``study report --all`` writes besides the study pages: the findings beside the
    studies folder (``out``'s parent: docs/findings.md) and, where the README above it
    holds a tally block or a results preview block, that README with those blocks
    regenerated (its prose kept). A README without them (a studies folder outside the
    repository) is left alone."""
    from multilab.studies.standing import PREVIEW_BLOCK, preview_lines

    texts: dict[Path, str] = {}
    elements_file = claims_folder / ELEMENTS_FILE
    elements = load_elements(elements_file, claims) if elements_file.is_file() else []
    texts[out.parent / "findings.md"] = render_findings(results, claims, elements)
    readme = out.parent.parent / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    blocks = {TALLY_BLOCK: lambda: tally_lines(results, claims, link="docs/"),
              PREVIEW_BLOCK: lambda: preview_lines(results, link="docs/studies/")}
    held = {name: lines() for name, lines in blocks.items()
            if f"<!-- generated:{name} -->" in text}
    if held:
        texts[readme] = fill(text, held, str(readme))
    return texts
