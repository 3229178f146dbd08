"""A session's background lanes: which study runs fit in the hours left, lane by lane.

The lab trains in the background of every working session (issue 52): a few processes of one
thread each ("lanes"), each in its own clone, for as long as the session lasts. A checkout
keeps only committed records, so a model still training when the session stops is lost. This
module packs :func:`~multilab.studies.planning.schedule`'s run sets, in its order, into lanes
of a given length: a run set whose models all fit goes in whole, then single models of the
run sets that did not fit fill what is left (a model brings its claims nearer to a verdict even
alone). One job is one model with every study run that reads it, in one lane: the first run
trains it, the others measure it where it lies (another clone would train it again).

A model's wall time is estimated from the records: its row's CPU training price where the
records measure it (:meth:`~multilab.studies.tables.StudyResult.measured_seconds`, the
fastest training on record; never a lower bound) times :data:`BESIDE_ANOTHER_LANE`, plus
its study's measurement time (:func:`measure_seconds`).
"""

from __future__ import annotations

import shlex
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from multilab.studies.planning import ClaimPlan, run_command, schedule
from multilab.studies.records import Record
from multilab.studies.tables import cpu_training_seconds

#: a training beside another lane against the fastest on record: the study runs of 2026-12
#: took 1.05-1.15x their row's fastest (Conneau et al. Table 1: 43-45 min against 39.8;
#: K et al. Table 1: 45.5-50.1 against 45.5)
BESIDE_ANOTHER_LANE = 1.15
#: the measurement time of a study without one on record (the median over the lab's studies
#: in 2026-12: 5-6 min; evaluation, the downstream fine-tune, MRR)
DEFAULT_MEASURE_SECONDS = 360.0


def measure_seconds(records: Iterable[Record]) -> dict[str, float]:
    """Study (the records' experiment folder) → the median seconds from a model's CPU training
    record to the last record that the same process wrote of it: its evaluation, fine-tune
    and other measurements in ``study run``."""
    trained: dict[tuple, tuple[datetime, str]] = {}
    last: dict[tuple, datetime] = {}
    for record in records:
        if record.model is None:
            continue
        provenance = record.data["provenance"]
        try:
            when = datetime.fromisoformat(str(provenance.get("date")))
        except ValueError:
            continue
        key = (record.path.parent, provenance.get("pid"))
        if cpu_training_seconds(record) is not None:
            trained[key] = (when, record.path.parts[-4])
        else:
            last[key] = max(when, last.get(key, when))
    spans: dict[str, list[float]] = {}
    for key, (start, study) in trained.items():
        if key in last and last[key] >= start:
            spans.setdefault(study, []).append((last[key] - start).total_seconds())
    return {study: statistics.median(values) for study, values in spans.items()}


@dataclass
class Job:
    """One model and the study runs that read it, (study, row label, seed, --again)."""

    model: tuple[str, int]
    runs: list[tuple[str, str, int, bool]]
    seconds: float
    claims: list[str] = field(default_factory=list)

    def commands(self) -> list[str]:
        """One ``study run`` a run: the first trains the model, the rest measure it."""
        return [run_command(study, label, [seed], again)
                for study, label, seed, again in self.runs]


@dataclass
class Lane:
    """One background process's jobs, one after another, and their estimated seconds."""

    jobs: list[Job] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(job.seconds for job in self.jobs)

    def shell(self) -> str:
        """The lane as one shell command line: each run in turn, the next also after a failure
        (``study run`` releases its booking and leaves no half-written record)."""
        return "; ".join(command for job in self.jobs for command in job.commands())


def _jobs_of(plans: Sequence[ClaimPlan], models: frozenset[tuple[str, int]]
             ) -> dict[tuple[str, int], list[tuple[str, str, int, bool]]]:
    """Each model of ``models`` → the runs of ``plans`` that read it, first seen first."""
    runs: dict[tuple[str, int], list[tuple[str, str, int, bool]]] = {}
    for plan in plans:
        for (label, seed), model in zip(plan.runs, plan.run_models, strict=True):
            if model in models:
                run = (plan.study, label, seed, (label, seed) in plan.again)
                if run not in runs.setdefault(model, []):
                    runs[model].append(run)
    return runs


def pack_lanes(plans: Sequence[ClaimPlan], run_seconds: Mapping[tuple[str, str], float | None],
               measure: Mapping[str, float], lanes: int, hours: float) -> list[Lane]:
    """The schedule's models packed into ``lanes`` lanes of ``hours`` each: whole run sets in
    schedule order while they fit (each model on the lane that is free soonest), then single
    models of the sets that did not fit. Models without a CPU price are left out."""
    budget = hours * 3600
    packed = [Lane() for _ in range(lanes)]
    placed: dict[tuple[str, int], Job] = {}
    left_over: list[Job] = []

    def cost(runs: list[tuple[str, str, int, bool]], model_price: float) -> float:
        studies = {study for study, *_ in runs}
        return model_price * BESIDE_ANOTHER_LANE + sum(
            measure.get(study, DEFAULT_MEASURE_SECONDS) for study in studies)

    def fit(jobs: Sequence[Job]) -> list[tuple[Job, Lane]] | None:
        """Each job and its lane (longest first onto the emptiest lane), or None."""
        load = {id(lane): lane.seconds for lane in packed}
        where: list[tuple[Job, Lane]] = []
        for job in sorted(jobs, key=lambda j: -j.seconds):
            lane = min(packed, key=lambda lane: load[id(lane)])
            if load[id(lane)] + job.seconds > budget:
                return None
            load[id(lane)] += job.seconds
            where.append((job, lane))
        return where

    for step in schedule(plans, run_seconds):
        claims = [plan.claim for plan in step.plans]
        needed = frozenset().union(*(plan.models for plan in step.plans))
        runs = _jobs_of(step.plans, needed - placed.keys())
        prices = {model: _model_price(model_runs, run_seconds)
                  for model, model_runs in runs.items()}
        if None in prices.values():
            continue  # a model no CPU has a price for: a GPU's
        jobs = [Job(model, model_runs, cost(model_runs, prices[model] or 0.0), list(claims))
                for model, model_runs in runs.items()]
        where = fit(jobs)
        if where is None:
            left_over += jobs
            continue
        for job, lane in where:
            lane.jobs.append(job)
            placed[job.model] = job
        for model, model_runs in _jobs_of(step.plans, needed - {j.model for j in jobs}).items():
            job = placed[model]  # a model placed above, read by more runs here
            for run in model_runs:
                if run not in job.runs:
                    if run[0] not in {study for study, *_ in job.runs}:
                        job.seconds += measure.get(run[0], DEFAULT_MEASURE_SECONDS)
                    job.runs.append(run)
            job.claims += [claim for claim in claims if claim not in job.claims]
    for job in left_over:
        if job.model in placed:
            continue
        if (where := fit([job])) is not None:
            where[0][1].jobs.append(job)
            placed[job.model] = job
    return packed


def _model_price(runs: list[tuple[str, str, int, bool]],
                 run_seconds: Mapping[tuple[str, str], float | None]) -> float | None:
    """The first run's row price (the run that trains the model); None: unknown."""
    study, label, *_ = runs[0]
    return run_seconds.get((study, label))


def lane_lines(packed: Sequence[Lane], hours: float) -> list[str]:
    """What each lane runs, its estimated minutes and the claims it serves, and the command
    that starts it in the background (scripts/lanes.sh starts them all in clones)."""
    lines = []
    for number, lane in enumerate(packed, 1):
        lines.append(f"lane {number}: ≈ {lane.seconds / 3600:.1f} of {hours:g} h")
        for job in lane.jobs:
            runs = ", ".join(f"{study} {label} s{seed}" + (" (again)" if again else "")
                             for study, label, seed, again in job.runs)
            lines.append(f"  ≈ {job.seconds / 60:3.0f} min  {runs}  [{', '.join(job.claims)}]")
        if lane.jobs:
            lines.append(f"  bash scripts/background.sh lane{number}.log bash -c "
                         f"{shlex.quote(lane.shell())}")
    return lines
