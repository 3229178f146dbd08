"""Which runs to train next: the claims nearest to a verdict, cheapest first.

A claim gets a verdict (held, did not hold, not separable) once every row it reads has
:data:`~multilab.studies.verdict.MIN_SEEDS` seeds with all their records. For each claim of a
study that is still *indicative* or *not measured* (and neither pending, not testable, nor a
comparison with a paper whose magnitude the study cannot match), this module lists the
(row, seed) runs missing to get there — the study's seeds in order, as ``study run`` would
take them — and their cost in models to train, a model that several claims (or studies)
share counted once. ``multilab study next`` prints them; the lab's background runs pick from
the top (issue 52: most claims per CPU hour first).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from multilab.studies.claims import Claim
from multilab.studies.spec import (
    Row,
    Study,
    bind_claim,
    claim_metrics,
    claim_row_names,
    group_rows,
)
from multilab.studies.tables import StudyResult, outcomes_of_record, superseded
from multilab.studies.verdict import MIN_SEEDS, Verdict

#: the verdicts a claim may still move from by training
OPEN = (Verdict.INDICATIVE, Verdict.NOT_MEASURED)


@dataclass(frozen=True)
class ClaimPlan:
    """One claim's way to a verdict: the runs it lacks and the models they train."""

    claim: str
    study: str
    runs: tuple[tuple[str, int], ...]  # (row label, seed)
    models: frozenset[tuple[str, int]]  # (model key, seed): a model shared is one
    #: runs whose records exist but lack a number the claim reads (written before the
    #: metric existed): ``study run --again``
    again: tuple[tuple[str, int], ...] = ()

    def commands(self) -> list[str]:
        """The ``study run`` commands that train them: one per set of rows that lack the
        same seeds (rows × seeds of a command is exactly the runs, never one more)."""
        out = []
        for runs, flag in ((tuple(r for r in self.runs if r not in self.again), ""),
                           (self.again, " --again")):
            seeds_of: dict[str, list[int]] = {}
            for label, seed in runs:
                seeds_of.setdefault(label, []).append(seed)
            by_seeds: dict[tuple[int, ...], list[str]] = {}
            for label, seeds in seeds_of.items():
                by_seeds.setdefault(tuple(sorted(seeds)), []).append(label)
            for seeds, labels in by_seeds.items():
                rows = ",".join(sorted(labels))
                out.append(f"multilab study run {self.study} --rows {shlex.quote(rows)} "
                           f"--seeds {','.join(map(str, seeds))}{flag}")
        return out


def claim_rows(study: Study, claim: Claim) -> list[Row]:
    """The rows a bound claim reads (both arms; every row of a curve or correlation)."""
    rows: dict[str, Row] = {}
    for name in claim_row_names(study, claim):
        try:
            _, group = group_rows(study, name)
        except KeyError:
            return []
        rows |= {row.label: row for row in group}
    return list(rows.values())


def _compared_with_paper(study: Study, claim: Claim) -> bool:
    """A paper claim whose magnitude the study cannot compare: no run makes it a verdict."""
    if claim.kind != "paper" or study.paper_comparable is None:
        return False
    row = study.row(str(claim.compare["row"]))
    return not (row and row.paper_comparable)


def claim_plans(results: Sequence[StudyResult], claims: Mapping[str, Claim]
                ) -> list[ClaimPlan]:
    """Every open claim's runs to a verdict, fewest models first (then most claims per
    study order). A claim whose study has fewer than 3 seeds, or whose rows already have
    their seeds (a record lacking a metric: ``study run --again``), or that another study
    has given a verdict, is left out."""
    plans = []
    replaced = superseded(results)
    decided = {claim_id for claim_id, (_, outcome) in outcomes_of_record(results).items()
               if outcome.verdict.counts}
    for result in results:
        study = result.study
        for entry in study.claims:
            if (study.name, entry.id) in replaced or entry.id in decided:
                continue  # its successor's runs decide it, or another study's verdict has
            outcome = result.outcomes.get(entry.id)
            if outcome is None or outcome.verdict not in OPEN or entry.pending or \
                    entry.not_testable or not claims[entry.id].testable:
                continue
            claim = bind_claim(claims[entry.id], entry)
            if _compared_with_paper(study, claim):
                continue
            rows = [row for row in claim_rows(study, claim) if not row.static]
            if not rows:
                continue
            metrics = claim_metrics(claim, study)
            runs: list[tuple[str, int]] = []
            for row in rows:
                # the seeds with a number in every column the claim reads (a record that
                # lacks one, written before its metric existed, does not count)
                have = set(study.seeds)
                for metric in metrics:
                    cell = result.cells.get((row.label, metric))
                    have &= set(cell.seeds) if cell is not None else set()
                wanted = max(0, MIN_SEEDS - len(have))
                missing = [seed for seed in study.seeds if seed not in have][:wanted]
                if len(missing) < wanted:
                    runs = []
                    break
                runs += [(row.label, seed) for seed in missing]
            if not runs:
                continue
            again = tuple(run for run in runs
                          if run[1] in result.seeds_found.get(run[0], ()))
            models = frozenset((result.model_keys.get(label, f"{study.name}/{label}"), seed)
                               for label, seed in runs)
            plans.append(ClaimPlan(entry.id, study.name, tuple(runs), models, again))
    return sorted(plans, key=lambda plan: len(plan.models))


def ranked_groups(plans: Sequence[ClaimPlan]) -> list[list[ClaimPlan]]:
    """Claims that need the same runs of one study together, fewest models per claim first
    (then the larger group)."""
    groups: dict[tuple, list[ClaimPlan]] = {}
    for plan in plans:
        groups.setdefault((plan.study, plan.runs), []).append(plan)
    return sorted(groups.values(),
                  key=lambda group: (len(group[0].models) / len(group), -len(group)))


def run_prices(results: Sequence[StudyResult], profile_seconds: Mapping[str, float]
               ) -> dict[tuple[str, str], float | None]:
    """(study, row label) → the CPU seconds of one more seed of the row
    (:meth:`StudyResult.run_seconds`), None where unknown."""
    return {(result.study.name, row.label): result.run_seconds(row.label, profile_seconds)
            for result in results for row in result.study.rows}


def model_seconds(plan: ClaimPlan, run_seconds: Mapping[tuple[str, str], float | None]
                  ) -> float | None:
    """A plan's CPU seconds per model: its runs' mean price (two rows of one model are one
    training, so a plan is priced per model, not per run); None where a run has none."""
    prices = [run_seconds.get((plan.study, label)) for label, _ in plan.runs]
    known = [price for price in prices if price is not None]
    return sum(known) / len(known) if known and len(known) == len(prices) else None


def cheapest_verdicts(plans: Sequence[ClaimPlan],
                      run_seconds: Mapping[tuple[str, str], float | None],
                      wanted: int) -> tuple[int, int, float, int]:
    """The cheapest way to ``wanted`` more claims with a verdict, taking the run sets in
    :func:`ranked_groups` order (a claim two studies could test counted once): (claims
    reached, at most ``wanted``; models to train, a model shared counted once; the CPU
    seconds of those with a price; how many have none: a profile never trained on a CPU)."""
    reached: set[str] = set()
    price: dict[tuple[str, int], float | None] = {}
    for group in ranked_groups(plans):
        if len(reached) >= wanted:
            break
        fresh = [plan for plan in group if plan.claim not in reached]
        if not fresh:
            continue
        first = group[0]
        each = model_seconds(first, run_seconds)
        for model in first.models:
            price.setdefault(model, each)
        reached |= {plan.claim for plan in fresh[:wanted - len(reached)]}
    known = [seconds for seconds in price.values() if seconds is not None]
    return len(reached), len(price), sum(known), len(price) - len(known)


def plan_lines(plans: Sequence[ClaimPlan], run_seconds: Mapping[tuple[str, str], float | None],
               limit: int) -> list[str]:
    """The cheapest ``limit`` run sets, claims that need the same runs together, fewest
    models per claim first: their cost and commands; then what they need together (a model
    shared counted once). ``run_seconds``: (study, row label) → CPU seconds of one more seed
    of the row (:meth:`StudyResult.run_seconds`), None where unknown."""
    if not plans:
        return ["No claim is a training away from a verdict."]
    ranked = ranked_groups(plans)
    lines = [f"{'models':>6}  {'CPU-h':>5}  claims (study: runs)"]
    for group in ranked[:limit]:
        first = group[0]
        each = model_seconds(first, run_seconds)
        hours = "    –" if each is None else f"{each * len(first.models) / 3600:5.1f}"
        runs = ", ".join(f"{label} s{seed}" + (" (again)" if (label, seed) in first.again
                                                else "") for label, seed in first.runs)
        lines.append(f"{len(first.models):>6}  {hours}  {', '.join(p.claim for p in group)} "
                     f"({first.study}: {runs})")
        lines += [f"{'':>14}{command}" for command in first.commands()]
    shown = [plan for group in ranked[:limit] for plan in group]
    models = {model for plan in shown for model in plan.models}
    lines.append(f"These {len(shown)} claims need {len(models)} models (a model shared "
                 f"counted once); {len(plans)} open claims can be reached by training.")
    return lines
