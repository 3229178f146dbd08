"""A session's background lanes: which study runs fit in the hours left, lane by lane.

The lab trains in the background of every working session: a few processes of one
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

Lanes outlive a session (``bash scripts/lanes.sh resume`` restarts a stopped lane where it
stopped): every lane's ``multilab`` commands checkpoint every :data:`LANE_CHECKPOINT_EVERY`
steps, and with ``span`` each lane that has time left after the models that finish takes one
more that does not, *spanning sessions*: it goes on in the next session from its last
checkpoint. A model a lane's clone has a checkpoint of (:func:`lane_checkpoints`) is priced
by its remaining steps and planned on that lane, where its checkpoint is.
"""

from __future__ import annotations

import logging
import re
import shlex
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from multilab.studies.planning import ClaimPlan, run_command, schedule
from multilab.studies.records import Record
from multilab.studies.tables import cpu_training_seconds

log = logging.getLogger(__name__)

#: a training beside another lane against the fastest on record: the study runs of 2026-12
#: took 1.05-1.15x their row's fastest (Conneau et al. Table 1: 43-45 min against 39.8;
#: K et al. Table 1: 45.5-50.1 against 45.5)
BESIDE_ANOTHER_LANE = 1.15
#: the measurement time of a study without one on record (the median over the lab's studies
#: in 2026-12: 5-6 min; evaluation, the downstream fine-tune, MRR)
DEFAULT_MEASURE_SECONDS = 360.0
#: a lane's trainings checkpoint every this many steps (``train.checkpoint_every``, which
#: changes neither the fingerprint nor the weights: a resume is exact at any step), so that a
#: session's stop loses minutes of a model, not hours. By steps, not by the clock: where a
#: training checkpoints is then the same in every run of a command. 50 steps are 1.3 min of
#: the paper profile's step beside another lane (1.35 s alone, one piece a step; 13,524 steps,
#: ≈ 5.8 h) and 5.6 min of the slowest CPU step on record (6.7 s, the quick profile on a
#: loaded machine); a BERT-small checkpoint (≈ 12 MB with AdamW's moments) takes well under a
#: second to write, under 1 % of the time between two. A model whose step takes over 12 s on
#: a CPU (none on record: BERT-base rows train on a GPU) checkpoints less often than every
#: 10 minutes.
LANE_CHECKPOINT_EVERY = 50

_MULTILAB = re.compile(r"(^|[;&|]\s*)multilab (?!.*checkpoint_every)")


def lane_command(line: str, every: int = LANE_CHECKPOINT_EVERY) -> str:
    """A lane's shell line with ``--set=train.checkpoint_every=every`` after each command's
    ``multilab`` (a line that sets it already is left as it is)."""
    return _MULTILAB.sub(lambda m: f"{m.group(1)}multilab --set=train.checkpoint_every="
                                   f"{every} ", line)


@dataclass(frozen=True)
class LaneCheckpoint:
    """A model's latest checkpoint in a lane's clone: what a resume would start from."""

    lane: int
    step: int
    total_steps: int | None
    path: Path

    @property
    def left(self) -> float:
        """The share of the training still to do (1.0: unknown, an older checkpoint)."""
        if not self.total_steps:
            return 1.0
        return max(0.0, 1 - self.step / self.total_steps)


def lane_checkpoints(lanes_dir: Path, results: Sequence) -> dict[tuple[str, str, int],
                                                                  LaneCheckpoint]:
    """(study, row label, seed) → the latest checkpoint of its model in a lane's clone
    (``LANES_DIR/laneK/artifacts/studies/<study>/checkpoints/…``, with its ``progress.json``),
    if any."""
    from multilab.studies.runner import Step, study_model_dir
    from multilab.studies.settings import study_artifacts
    from multilab.training.checkpoints import PROGRESS, read_progress
    from multilab.training.model_dir import CHECKPOINTS, latest_checkpoint

    clones = sorted((int(m.group(1)), path) for path in lanes_dir.glob("lane*")
                    if path.is_dir() and (m := re.fullmatch(r"lane(\d+)", path.name)))
    found: dict[tuple[str, str, int], LaneCheckpoint] = {}
    if not clones:
        return found
    for result in results:
        study = result.study
        for row in study.rows:
            if row.static or row.script is not None:
                continue
            for seed in study.seeds_of(row):
                # as training puts them (model_dir.checkpoint_home): under the study's own
                # artifacts folder, which is the run's paths.artifacts
                base = study_artifacts(study, Path(), row)
                relative = study_model_dir(study, Path(), Step(row, seed)).relative_to(base)
                for number, clone in clones:
                    home = clone / base / CHECKPOINTS / relative
                    for area in home.glob("*") if home.is_dir() else ():
                        latest = latest_checkpoint(area)
                        progress = read_progress(latest) if latest else None
                        if latest is None or progress is None:
                            if latest is not None and (latest / PROGRESS).exists():
                                log.warning("%s: not a checkpoint's progress (a step and "
                                            "its total steps); its model planned as if "
                                            "it had none", latest / PROGRESS)
                            continue
                        here = LaneCheckpoint(number, int(progress["step"]),
                                              progress.get("total_steps"), latest)
                        key = (study.name, row.label, seed)
                        if key not in found or here.step > found[key].step:
                            found[key] = here
    return found


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


def lane_seconds(train_seconds: float, studies: Iterable[str], measure: Mapping[str, float],
                 left: float = 1.0) -> float:
    """A model's wall time in a lane: the share ``left`` of its fastest training on record
    (``train_seconds``) beside another lane, plus each study's measurement of it (its median
    on record, else :data:`DEFAULT_MEASURE_SECONDS`); what ``study next --lanes`` plans by."""
    return train_seconds * BESIDE_ANOTHER_LANE * left + sum(
        measure.get(study, DEFAULT_MEASURE_SECONDS) for study in set(studies))


@dataclass
class Job:
    """One model and the study runs that read it, (study, row label, seed, --again)."""

    model: tuple[str, int]
    runs: list[tuple[str, str, int, bool]]
    seconds: float
    claims: list[str] = field(default_factory=list)
    #: the checkpoint in a lane it resumes from (its seconds are the remaining steps')
    checkpoint: LaneCheckpoint | None = None
    #: it does not finish in the hours planned: it goes on in the next sessions
    spans: bool = False

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
        return lane_command("; ".join(command for job in self.jobs
                                      for command in job.commands()))


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
               measure: Mapping[str, float], lanes: int, hours: float, *, span: bool = False,
               checkpoints: Mapping[tuple[str, str, int], LaneCheckpoint] | None = None
               ) -> list[Lane]:
    """The schedule's models packed into ``lanes`` lanes of ``hours`` each: whole run sets in
    schedule order while they fit (each model on the lane that is free soonest), then single
    models of the sets that did not fit. Models without a CPU price are left out. ``span``:
    then each lane with time left takes one model that does not finish in it (a model with a
    checkpoint first), marked :attr:`Job.spans`. A model with one of ``checkpoints`` costs
    its remaining steps and goes on its checkpoint's lane."""
    checkpoints = checkpoints or {}
    budget = hours * 3600
    packed = [Lane() for _ in range(lanes)]
    placed: dict[tuple[str, int], Job] = {}
    left_over: list[Job] = []

    def cost(runs: list[tuple[str, str, int, bool]], model_price: float) -> float:
        left = checkpoint.left if (checkpoint := checkpoint_of(runs)) else 1.0
        return lane_seconds(model_price, [study for study, *_ in runs], measure, left)

    def checkpoint_of(runs: list[tuple[str, str, int, bool]]) -> LaneCheckpoint | None:
        study, label, seed, _ = runs[0]  # the run that trains the model
        return checkpoints.get((study, label, seed))

    def lane_of(job: Job, load: Mapping[int, float]) -> Lane:
        """The job's checkpoint's lane, else the one free soonest."""
        if job.checkpoint is not None and job.checkpoint.lane <= lanes:
            return packed[job.checkpoint.lane - 1]
        return min(packed, key=lambda lane: load[id(lane)])

    def fit(jobs: Sequence[Job]) -> list[tuple[Job, Lane]] | None:
        """Each job and its lane (longest first onto the emptiest lane), or None."""
        load = {id(lane): lane.seconds for lane in packed}
        where: list[tuple[Job, Lane]] = []
        for job in sorted(jobs, key=lambda j: (j.checkpoint is None, -j.seconds)):
            lane = lane_of(job, load)
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
        jobs = [Job(model, model_runs, cost(model_runs, prices[model] or 0.0), list(claims),
                    checkpoint_of(model_runs))
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
    if span:
        _add_spanning(packed, [job for job in left_over if job.model not in placed], budget)
    return packed


def _add_spanning(packed: Sequence[Lane], waiting: Sequence[Job], budget: float) -> None:
    """One job that does not finish in ``budget`` onto each lane with time left, in schedule
    order (one with a checkpoint first, on its lane)."""
    waiting = sorted(waiting, key=lambda job: job.checkpoint is None)  # stable: schedule order
    taken: set[tuple[str, int]] = set()
    for job in waiting:
        if job.model in taken:
            continue
        if job.checkpoint is not None and job.checkpoint.lane <= len(packed):
            free = [packed[job.checkpoint.lane - 1]]
        else:
            free = sorted(packed, key=lambda lane: lane.seconds)
        lane = next((lane for lane in free if lane.seconds < budget
                     and not any(j.spans for j in lane.jobs)), None)
        if lane is None:
            continue
        job.spans = True
        lane.jobs.append(job)
        taken.add(job.model)


def _model_price(runs: list[tuple[str, str, int, bool]],
                 run_seconds: Mapping[tuple[str, str], float | None]) -> float | None:
    """The first run's row price (the run that trains the model); None: unknown."""
    study, label, *_ = runs[0]
    return run_seconds.get((study, label))


def lane_lines(packed: Sequence[Lane], hours: float) -> list[str]:
    """What each lane runs, its estimated minutes and the claims it serves, and the command
    that starts it in the background (scripts/lanes.sh starts them all in clones)."""
    lines = []
    budget = hours * 3600
    for number, lane in enumerate(packed, 1):
        head = f"lane {number}: ≈ {min(lane.seconds, budget) / 3600:.1f} of {hours:g} h"
        if lane.seconds > budget:
            head += (f", then ≈ {(lane.seconds - budget) / 3600:.1f} h more in later sessions "
                     "(bash scripts/lanes.sh resume)")
        lines.append(head)
        for job in lane.jobs:
            runs = ", ".join(f"{study} {label} s{seed}" + (" (again)" if again else "")
                             for study, label, seed, again in job.runs)
            lines.append(f"  ≈ {job.seconds / 60:3.0f} min  {runs}  [{', '.join(job.claims)}]"
                         + _span_note(job))
        if lane.jobs:
            lines.append(f"  bash scripts/background.sh lane{number}.log bash -c "
                         f"{shlex.quote(lane.shell())}")
    return lines


def _span_note(job: Job) -> str:
    """What a job's line adds: where it resumes from, and that it spans sessions."""
    notes = []
    if (checkpoint := job.checkpoint) is not None:
        of = f"/{checkpoint.total_steps:,}" if checkpoint.total_steps else ""
        notes.append(f"from step {checkpoint.step:,}{of} (lane {checkpoint.lane}'s checkpoint)")
    if job.spans:
        notes.append("spans sessions: the fastest training on record x "
                     f"{BESIDE_ANOTHER_LANE:g}, plus its measurement")
    return "  " + "; ".join(notes) if notes else ""
