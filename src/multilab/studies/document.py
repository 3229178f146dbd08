"""docs/REPRODUCTION.md and docs/studies/index.md: the claims summary, the study list and the
findings, generated from the studies and their records.

REPRODUCTION.md mixes hand-written prose ("what is the same, what is not", "why it differs")
with generated blocks. A generated block sits between ``<!-- generated:NAME -->`` and
``<!-- /generated:NAME -->``; ``multilab study report --all`` rewrites the blocks and keeps the
prose, so the committed file is a lockfile of the records (tests/test_studies.py regenerates
it and compares bytes). A block the document lacks is an error, never silently dropped.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence

from multilab.errors import UserError
from multilab.studies.claims import PAPERS, Claim, paper_name
from multilab.studies.planning import (
    cheapest_verdicts,
    claim_plans,
    lower_bound_rows,
    run_prices,
)
from multilab.studies.records import Record
from multilab.studies.spec import Row, bind_claim
from multilab.studies.tables import (
    SUMMARY_COLUMNS,
    Multiplicity,
    StudyResult,
    comparison_text,
    cpu_training_seconds,
    escape,
    multiplicity,
    speakers,
)
from multilab.studies.verdict import Verdict

#: the blocks REPRODUCTION.md holds, in the order they are written into a new document
BLOCKS = ("summary", "studies", "findings")
_BLOCK = re.compile(r"(<!-- generated:(?P<name>[a-z-]+) -->\n).*?(<!-- /generated:(?P=name) -->)",
                    re.DOTALL)


def is_unbacked(claim: Claim, verdict: Verdict) -> bool:
    """An earlier document gave this claim a number (the claim list's ``today``), and no
    record backs any verdict now: the number is *unbacked* until migrated or re-run."""
    return verdict is Verdict.NOT_MEASURED and bool(claim.today)


def summary_block(verdicts: Mapping[str, Verdict], claims: Mapping[str, Claim],
                  corrected: Multiplicity | None = None) -> list[str]:
    """Per paper, one column each (and one for all): claims, with a verdict (≥ 3 seeds in
    every arm), each verdict, unbacked; with ``corrected``
    (:func:`~multilab.studies.tables.multiplicity`) also the verdicts held or not held,
    those of them that survive Holm's correction, and the distinct tests it runs over. The
    papers are the columns, so the table is as wide as five papers, not fourteen counts."""
    lines_of = [("claims", "claims"), ("verdict", "**with a verdict** (≥ 3 seeds every arm)")]
    lines_of += [(str(v), str(v)) for v in SUMMARY_COLUMNS[:3]]
    if corrected is not None:
        lines_of += [("significant", "held or did not hold"),
                     ("surviving", "… of which survive Holm (α .05)"),
                     ("tests", "distinct tests (Holm's m)")]
    lines_of += [(str(v), str(v)) for v in SUMMARY_COLUMNS[3:]]
    lines_of += [("unbacked", "… of which unbacked")]
    columns: list[Mapping[str, int]] = []
    totals: Counter[str] = Counter()
    for key in PAPERS:
        mine = [c for c in claims.values() if c.paper == key]
        counts = Counter(verdicts[c.id] for c in mine)
        column = {"claims": len(mine), "verdict": sum(n for v, n in counts.items() if v.counts),
                  "unbacked": sum(is_unbacked(c, verdicts[c.id]) for c in mine),
                  **{str(v): counts[v] for v in SUMMARY_COLUMNS}}
        if corrected is not None:
            column |= {"significant": corrected.significant.get(key, 0),
                       "surviving": corrected.surviving.get(key, 0),
                       "tests": corrected.tests.get(key, 0)}
        totals.update(column)
        columns.append(column)
    columns.append(totals)
    header = ["", *PAPERS.values(), "**all**"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for name, words in lines_of:
        lines.append(f"| {words} | " + " | ".join(str(column[name]) for column in columns)
                     + " |")
    lines += ["", "*With a verdict*: held, did not hold, or not separable from seed noise, each "
              "from a test over at least 3 seeds in every arm; *indicative* rests on fewer seeds "
              "and is not a verdict. *Unbacked*: not measured here, although an earlier version "
              "of this document gave a number, whose raw file is not in the repository (or not "
              "yet migrated into a record); it counts as not measured until re-run."]
    if corrected is not None:
        lines[-1] += (" *Survive Holm*: held or did not hold with the Holm-adjusted p below the "
                      "same α, the correction run per paper over its *distinct tests* (claims "
                      "that rest on one comparison — one study, the same arms and metric — are "
                      "one test); a verdict that does not survive reads *not separable* once "
                      "corrected.")
    return lines


def run_costs(records: Iterable[Record]) -> dict[str, float]:
    """Seconds of a model's training steps per profile on the CPU: the fastest CPU training
    on record (``step_seconds``; older records do not carry it). The fastest, not the median:
    the lab trains beside its own tests and helpers, and a loaded machine only ever makes a
    training slower, so the fastest is the nearest to what an unloaded machine takes. GPU
    records are left out (the column counts CPU hours)."""
    seconds: dict[str, list[float]] = {}
    for record in records:
        if (spent := cpu_training_seconds(record)) is not None:
            seconds.setdefault(str(record.model.get("profile")), []).append(spent)
    return {profile: min(values) for profile, values in seconds.items()}


def unrecorded(result: StudyResult) -> Iterator[tuple[Row, int]]:
    """The (row, seed) pairs of a study without every record its metrics read."""
    for row in result.study.rows:
        for seed in result.study.seeds_of(row):
            if seed not in result.seeds_found.get(row.label, ()):
                yield row, seed


def runs_missing(result: StudyResult) -> int:
    """How many (row, seed) pairs of a study lack a record its metrics read."""
    return sum(1 for _ in unrecorded(result))


def models_to_train(results: Sequence[StudyResult], costs: Mapping[str, float],
                    claims: int | None = None) -> str:
    """One line: the runs missing in all studies and the models they need trained, a model
    that several studies read (Liu et al. 2020b Tables 2 and 4 shift and fine-tune one)
    counted once; ``study run`` measures it where it lies once one of them has trained it.

    A run that lacks only a measurement is priced as a training too: a checkout holds the
    records, not the weights, so on a fresh one its model is trained again (where the weights
    do lie on disk, ``study run --plan`` says "measure only")."""
    missing = sum(runs_missing(result) for result in results)
    models: dict[tuple[str, int], tuple[float | None, bool]] = {}
    for result in results:
        for row, seed in unrecorded(result):
            if (key := result.model_keys.get(row.label)) is not None:
                models[(key, seed)] = (result.run_seconds(row.label, costs),
                                       result.priced_at_least(row.label))
    priced = [seconds for seconds, _ in models.values() if seconds is not None]
    bounded = sum(1 for seconds, at_least in models.values()
                  if seconds is not None and at_least)
    bound = f", {bounded} of them priced by a lower bound only" if bounded else ""
    cost = (f" ({'≥' if bounded else '≈'} {sum(priced) / 3600:.1f} CPU-h for the "
            f"{len(priced)} whose profile has a measured CPU cost{bound})") if priced else ""
    outside = None if claims is None else \
        claims - len({e.id for r in results for e in r.study.claims})
    unbound = "" if outside is None else (
        f" Every one of the {claims} claims is in a study." if outside == 0 else
        f" {outside} of the {claims} claims are in no study yet: their runs are not counted "
        "here.")
    return (f"In all: {missing} runs missing; they need {len(models)} models trained{cost}, a "
            "model that several studies read counted once (`study run` measures a model "
            f"another study has trained where it lies).{unbound}")


def studies_block(results: Sequence[StudyResult], costs: Mapping[str, float],
                  link: str = "studies/", claims: int | None = None) -> list[str]:
    """One line per study: paper, table, the command, runs recorded and still needed (with
    their training cost where measured: see :func:`models_to_train`), claims with a
    verdict."""
    lines = ["| study | paper | table | profile | runs recorded | runs needed | claims with a "
             "verdict |", "|---|---|---|---|---:|---|---:|"]
    for result in results:
        study = result.study
        recorded = sum(len(seeds) for seeds in result.seeds_found.values())
        needed = runs_missing(result)
        rows = [row for row, _ in unrecorded(result) if not row.static]
        prices = [result.run_seconds(row.label, costs) for row in rows]
        cost = sum(price for price in prices if price is not None)
        bound = "≥" if any(price is not None and result.priced_at_least(row.label)
                           for row, price in zip(rows, prices, strict=True)) else "≈"
        need = str(needed) if not needed or not cost else \
            f"{needed} ({bound} {cost / 3600:.1f} CPU-h of training)"
        counted = sum(1 for o in result.outcomes.values() if o.verdict.counts)
        lines.append(f"| [{study.name}]({link}{study.name}.md) | {paper_name(study.paper)} | "
                     f"{study.table} | `{study.profile}` | {recorded}/{recorded + needed} | "
                     f"{need} | {counted}/{len(result.outcomes)} |")
    lines += ["", "Each study's runs: `multilab study run <study>` (`--plan`: what it would "
              "run).", "", models_to_train(results, costs, claims)]
    if costs:
        lines += ["", "Training cost per model: the fastest recorded CPU training of the "
                  "row (another seed), else of its shape and steps per language (another row "
                  "or study; scaled by its number of languages), else — a lower bound — of "
                  "its shape with a cheaper step (fewer attention heads; a word piece for a "
                  "character vocabulary), else of its profile (" +
                  ", ".join(f"`{profile}` {seconds / 60:.0f} min"
                            for profile, seconds in sorted(costs.items()))
                  + ": a lower bound for a row larger than the profile's smallest); one "
                  "thread on the machine that ran them, evaluation not included. A cost "
                  "with a lower bound in it is marked ≥ (`benchmarks/bench_row_steps.py` "
                  "measures such a row's step)."]
    return lines


def findings_block(results: Sequence[StudyResult], claims: Mapping[str, Claim],
                   link: str = "studies/") -> list[str]:
    """Every claim a study measured (a verdict or indicative), by paper: wording, the
    comparison, the verdict with its p-value and the study it comes from."""
    lines: list[str] = []
    of_record = speakers(results)
    adjusted = multiplicity(results, claims).adjusted
    for key, name in PAPERS.items():
        rows = []
        for claim_id, speaker in of_record.items():
            result, outcome = speaker.result, speaker.outcome
            entry = next(e for e in result.study.claims if e.id == claim_id)
            claim = bind_claim(claims[claim_id], entry)
            if claim.paper != key or outcome.verdict not in (
                    *(v for v in Verdict if v.counts), Verdict.INDICATIVE):
                continue
            p = "" if outcome.p is None else f"{outcome.p:.3g}"
            holm_p = f"{adjusted[claim_id]:.3g}" if claim_id in adjusted else ""
            wording = claim.wording if len(claim.wording) <= 160 else \
                claim.wording[:157].rstrip() + "…"
            why = f" ({escape(speaker.why)})" if speaker.why else ""
            rows.append(f"| {escape(wording)} ({claim.where}) | "
                        f"{escape(comparison_text(claim))} | **{outcome.verdict}** | {p} | "
                        f"{holm_p} | [{result.study.name}]({link}{result.study.name}.md){why} |")
        if rows:
            lines += [f"### {name}", "", "| claim (the paper's words) | comparison | verdict "
                      "| p | Holm p | study (why it speaks) |", "|---|---|---|---:|---:|---|",
                      *rows, ""]
    return lines[:-1] if lines else ["No claim is measured yet."]


def fill(document: str, blocks: Mapping[str, list[str]], source: str) -> str:
    """``document`` with each generated block replaced; a missing block is one-line error."""
    found = {match.group("name") for match in _BLOCK.finditer(document)}
    missing = [name for name in blocks if name not in found]
    if missing:
        raise UserError(f"{source}: no generated block {missing[0]!r} (a line "
                        f"`<!-- generated:{missing[0]} -->` and its closing "
                        f"`<!-- /generated:{missing[0]} -->`); blocks: {', '.join(blocks)}")
    return _BLOCK.sub(lambda m: m.group(1) + "\n".join(blocks[m.group("name")]) + "\n"
                      + m.group(3) if m.group("name") in blocks else m.group(0), document)


def new_document(blocks: Mapping[str, list[str]]) -> str:
    """A REPRODUCTION.md with the generated blocks only (a fresh folder has none yet)."""
    parts = ["# Reproduction: where the lab stands on the papers' claims", ""]
    for name in BLOCKS:
        parts += [f"<!-- generated:{name} -->", *blocks[name], f"<!-- /generated:{name} -->",
                  ""]
    return "\n".join(parts)


#: the lab's goal for claims with a verdict (issue "the lab at work": 80 of the papers'
#: claims, each on ≥ 3 seeds in every arm)
VERDICT_GOAL = 80


def goal_line(results: Sequence[StudyResult], claims: Mapping[str, Claim],
              verdicts: Mapping[str, Verdict], costs: Mapping[str, float],
              goal: int = VERDICT_GOAL) -> str:
    """How far the claims with a verdict are from ``goal`` and what the cheapest runs to it
    cost on the CPU (:func:`multilab.studies.planning.cheapest_verdicts`)."""
    have = sum(1 for verdict in verdicts.values() if verdict.counts)
    if have >= goal:
        return f"**{have} claims have a verdict**, the goal of {goal} reached."
    reached, models, spent, unpriced, at_least = cheapest_verdicts(
        claim_plans(results, claims), run_prices(results, costs), goal - have,
        lower_bound_rows(results))
    bound = f", {at_least} of them priced by a lower bound only" if at_least else ""
    cost = f" ({'≥' if at_least else '≈'} {spent / 3600:.0f} CPU-h of training" + (
        f" for {models - unpriced}{bound}; {unpriced} of a profile never trained on a CPU, a "
        "GPU's)" if unpriced else f"{bound})")
    head = f"**{have} claims have a verdict**; the goal is {goal}."
    if reached < goal - have:
        return (f"{head} Training can give {reached} more: {models} models{cost}, "
                "`multilab study next` lists them; the rest need a GPU's budget, a "
                "measurement not built, or are not testable.")
    return (f"{head} The cheapest {reached} more need {models} models trained{cost}; "
            "`multilab study next` lists them, cheapest first.")


def reproduction_blocks(results: Sequence[StudyResult], claims: Mapping[str, Claim],
                        verdicts: Mapping[str, Verdict], records: Iterable[Record]
                        ) -> dict[str, list[str]]:
    costs = run_costs(records)
    return {"summary": [*summary_block(verdicts, claims, multiplicity(results, claims)), "",
                        goal_line(results, claims, verdicts, costs)],
            "studies": studies_block(results, costs, claims=len(claims)),
            "findings": findings_block(results, claims)}


def render_index(results: Sequence[StudyResult], claims: Mapping[str, Claim],
                 verdicts: Mapping[str, Verdict], records: Iterable[Record]) -> str:
    """docs/studies/index.md: the summary and the study list, linked from inside the folder."""
    lines = ["# Claims of the five papers: where the lab stands", "",
             "Generated by `multilab study report --all` from `studies/` and the records under "
             "`results/`; the verdict rule is in `studies/README.md`, the prose beside these "
             "numbers in [REPRODUCTION.md](../REPRODUCTION.md).", "",
             *summary_block(verdicts, claims, multiplicity(results, claims)), "",
             "## Studies", "",
             *studies_block(results, run_costs(records), link="", claims=len(claims))]
    return "\n".join(lines) + "\n"
