"""Which runs to train next: the claims nearest to a verdict, cheapest first.

A claim gets a verdict (held, did not hold, not separable) once every row it reads has
:data:`~multilab.studies.verdict.MIN_SEEDS` seeds with all their records. For each claim of a
study that is still *indicative* or *not measured* (and neither pending, not testable, nor a
comparison with a paper whose magnitude the study cannot match), this module lists the
(row, seed) runs missing to get there — the study's seeds in order, as ``study run`` would
take them — and their cost in models to train, a model that several claims (or studies)
share counted once. ``multilab study next`` prints them; the lab's background runs pick from
the top (most claims per CPU hour first).
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

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
    #: the model each run trains, (model key, seed), in the order of ``runs``: two rows of
    #: one model are one training
    run_models: tuple[tuple[str, int], ...]
    #: runs whose records exist but lack a number the claim reads (written before the
    #: metric existed): ``study run --again``
    again: tuple[tuple[str, int], ...] = ()

    @property
    def models(self) -> frozenset[tuple[str, int]]:
        """The models it trains, a model shared counted once."""
        return frozenset(self.run_models)

    def model_rows(self) -> dict[tuple[str, int], tuple[str, str]]:
        """Each model's (study, row label) that prices it: two rows of one model, the
        first."""
        rows: dict[tuple[str, int], tuple[str, str]] = {}
        for (label, _), model in zip(self.runs, self.run_models, strict=True):
            rows.setdefault(model, (self.study, label))
        return rows

    def priced_models(self, run_seconds: Mapping[tuple[str, str], float | None]
                      ) -> dict[tuple[str, int], float | None]:
        """Each model's CPU seconds: its own row's price (:meth:`model_rows`); None where
        the row has none."""
        return {model: run_seconds.get(row) for model, row in self.model_rows().items()}

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
                out.append(run_command(self.study, ",".join(sorted(labels)), seeds, bool(flag)))
        return out


def run_command(study: str, rows: str, seeds: Sequence[int], again: bool = False) -> str:
    """The ``multilab study run`` line of some rows (labels joined by commas) and seeds."""
    return (f"multilab study run {study} --rows {shlex.quote(rows)} "
            f"--seeds {','.join(map(str, seeds))}" + (" --again" if again else ""))


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
                have = set(study.seeds_of(row))
                for metric in metrics:
                    cell = result.cells.get((row.label, metric))
                    have &= set(cell.seeds) if cell is not None else set()
                wanted = max(0, MIN_SEEDS - len(have))
                missing = [seed for seed in study.seeds_of(row) if seed not in have][:wanted]
                if len(missing) < wanted:
                    runs = []
                    break
                runs += [(row.label, seed) for seed in missing]
            if not runs:
                continue
            again = tuple(run for run in runs
                          if run[1] in result.seeds_found.get(run[0], ()))
            run_models = tuple((result.model_keys.get(label, f"{study.name}/{label}"), seed)
                               for label, seed in runs)
            plans.append(ClaimPlan(entry.id, study.name, tuple(runs), run_models, again))
    return sorted(plans, key=lambda plan: len(plan.models))


def _claim_groups(plans: Sequence[ClaimPlan]) -> list[list[ClaimPlan]]:
    """Claims that need the same runs of one study together."""
    groups: dict[tuple, list[ClaimPlan]] = {}
    for plan in plans:
        groups.setdefault((plan.study, plan.runs), []).append(plan)
    return list(groups.values())


@dataclass(frozen=True)
class Step:
    """One run set of a :func:`schedule`: the claims it brings to a verdict that no earlier
    step did, and the models it adds to the earlier steps' (their CPU seconds: None where a
    model has no price)."""

    plans: tuple[ClaimPlan, ...]
    models: frozenset[tuple[str, int]]
    seconds: float | None
    #: how many of ``models`` are priced only by a lower bound (:func:`lower_bound_rows`):
    #: ``seconds`` is then at least what they cost
    at_least: int = 0


def schedule(plans: Sequence[ClaimPlan],
             run_seconds: Mapping[tuple[str, str], float | None],
             lower_bounds: Collection[tuple[str, str]] = frozenset()) -> list[Step]:
    """The run sets in the order to train them: each time the one with the fewest CPU
    seconds per claim it newly decides, a model an earlier step trains counted as free
    (greedy weighted set cover: claims share models, ``original``'s seeds above all); run
    sets a CPU cannot price after those, fewest new models per claim first; a tie goes to
    the larger set. A claim two studies could test is decided once. A price that is a lower
    bound (``lower_bounds``: (study, row label)) is ranked as the bound and counted in the
    step's ``at_least``."""
    groups = _claim_groups(plans)
    price: dict[tuple[str, int], float | None] = {}
    bounded: set[tuple[str, int]] = set()
    for group in groups:
        for model, row in group[0].model_rows().items():
            if model not in price:
                price[model] = run_seconds.get(row)
                if row in lower_bounds:
                    bounded.add(model)

    def seconds_of(models: frozenset[tuple[str, int]]) -> float | None:
        prices = [price[model] for model in models]
        return None if None in prices else sum(prices)

    trained: set[tuple[str, int]] = set()
    reached: set[str] = set()
    steps: list[Step] = []
    while True:
        best, best_key = None, None
        for index, group in enumerate(groups):
            fresh = tuple(plan for plan in group if plan.claim not in reached)
            if not fresh:
                continue
            new = group[0].models - trained
            seconds = seconds_of(new)
            per_claim = (len(new) if seconds is None else seconds) / len(fresh)
            key = (seconds is None, per_claim, -len(fresh), index)
            if best_key is None or key < best_key:
                best, best_key = Step(fresh, new, seconds, len(new & bounded)), key
        if best is None:
            return steps
        steps.append(best)
        trained |= best.models
        reached |= {plan.claim for plan in best.plans}


def run_prices(results: Sequence[StudyResult], profile_seconds: Mapping[str, float]
               ) -> dict[tuple[str, str], float | None]:
    """(study, row label) → the CPU seconds of one more seed of the row
    (:meth:`StudyResult.run_seconds`), None where unknown."""
    return {(result.study.name, row.label): result.run_seconds(row.label, profile_seconds)
            for result in results for row in result.study.rows}


def lower_bound_rows(results: Sequence[StudyResult]) -> frozenset[tuple[str, str]]:
    """(study, row label) of the rows whose :func:`run_prices` is a lower bound only
    (:meth:`StudyResult.priced_at_least`): benchmarks/bench_row_steps.py measures one."""
    return frozenset((result.study.name, row.label) for result in results
                     for row in result.study.rows if result.priced_at_least(row.label))


class Cheapest(NamedTuple):
    """What :func:`cheapest_verdicts` finds."""

    reached: int  # claims brought to a verdict, at most the number wanted
    models: int  # models to train, a model shared counted once
    seconds: float  # the CPU seconds of those with a price
    unpriced: int  # models with none: a profile never trained on a CPU
    at_least: int  # models whose price is a lower bound only: ``seconds`` is at least that


def cheapest_verdicts(plans: Sequence[ClaimPlan],
                      run_seconds: Mapping[tuple[str, str], float | None],
                      wanted: int, lower_bounds: Collection[tuple[str, str]] = frozenset()
                      ) -> Cheapest:
    """The cheapest way to ``wanted`` more claims with a verdict, taking the run sets in
    :func:`schedule` order."""
    reached, models, spent, unpriced, at_least = 0, 0, 0.0, 0, 0
    for step in schedule(plans, run_seconds, lower_bounds):
        if reached >= wanted:
            break
        reached += min(len(step.plans), wanted - reached)
        models += len(step.models)
        if step.seconds is None:
            unpriced += len(step.models)
        else:
            spent += step.seconds
            at_least += step.at_least
    return Cheapest(reached, models, spent, unpriced, at_least)


def plan_lines(plans: Sequence[ClaimPlan], run_seconds: Mapping[tuple[str, str], float | None],
               limit: int, lower_bounds: Collection[tuple[str, str]] = frozenset()
               ) -> list[str]:
    """The first ``limit`` run sets of the :func:`schedule`, claims that need the same runs
    together: the models each adds to those above it, their CPU hours, its claims and
    commands; then what they need together. ``run_seconds``: (study, row label) → CPU
    seconds of one more seed of the row (:meth:`StudyResult.run_seconds`), None where
    unknown; ``lower_bounds``: the rows whose price is a lower bound (their hours get a
    "≥")."""
    if not plans:
        return ["No claim is a training away from a verdict."]
    steps = schedule(plans, run_seconds, lower_bounds)[:limit]
    lines = [f"{'models':>6}  {'CPU-h':>5}  claims (study: runs; models listed above not "
             "counted again)"]
    for step in steps:
        first = step.plans[0]
        hours = "    –" if step.seconds is None else \
            f"{'≥' if step.at_least else ' '}{step.seconds / 3600:4.1f}"
        runs = ", ".join(f"{label} s{seed}" + (" (again)" if (label, seed) in first.again
                                                else "") for label, seed in first.runs)
        lines.append(f"{len(step.models):>6}  {hours}  "
                     f"{', '.join(p.claim for p in step.plans)} ({first.study}: {runs})")
        lines += [f"{'':>14}{command}" for command in first.commands()]
    shown = sum(len(step.plans) for step in steps)
    models = sum(len(step.models) for step in steps)
    lines.append(f"These {shown} claims need {models} models (a model shared counted "
                 f"once); {len({plan.claim for plan in plans})} open claims can be reached "
                 "by training.")
    if any(step.at_least for step in steps):
        lines.append("≥: a lower bound, a model priced by a training of a cheaper step (fewer "
                     "heads, a cheaper vocabulary unit) or by its profile's fastest; "
                     "benchmarks/bench_row_steps.py measures its step.")
    return lines
