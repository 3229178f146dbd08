"""A study row's parent run as a user compares it in the MLflow UI: the mean ± std of its
seeds' final metrics, the mean curve of its seeds against the training step, its row's colour
(:mod:`~multilab.tracking.colors`, shared with its seeds), and the baseline (``original``)
listed first.

MLflow 3's UI shows the runs newest first and draws only the first 10 rows in its charts by
default: the baseline's parent is therefore kept the newest parent, so that it is among them
beside any variant. The UI has no setting for the precision it shows, so the parents' values,
which nothing reads back, are logged rounded (:data:`DIGITS` significant digits); the seeds
keep their measured values (the report reads them).

A study row's parent (``multilab study run``: one per row, :data:`~multilab.tracking.runs.
ROW_TAG`) is summarised by ``evaluate`` itself, each time one of its seeds is evaluated
(:func:`summarise_study_row`): a study's seeds may run in a DVC queue, with no report after
them.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterable

from filelock import FileLock
from mlflow.entities import Metric, Param, Run
from mlflow.tracking import MlflowClient

from multilab.config import Paths
from multilab.lab.metric_table import HEADLINE, METRICS, PLOTS, summarise
from multilab.lab.modifications import same_modification
from multilab.tracking.colors import BASELINE, RUN_COLOR_TAG, pick_color
from multilab.tracking.runs import FINISHED, GROUP, PARENT_TAG, ROLE_TAG, ROW_TAG
from multilab.tracking.store import local_store, point_at, server_call, tracking_uri

#: Significant digits of a parent's logged values (the UI shows what is stored, in full).
DIGITS = 4
#: Tags on a parent: how many seeds its numbers average, and which.
N_SEEDS_TAG, SEEDS_TAG = "n_seeds", "seeds"
#: ``<metric>_std`` beside each mean ``<metric>`` on a parent.
STD_SUFFIX = "_std"
#: The experiment tag MLflow's UI shows as the experiment's description (Markdown).
NOTE_TAG = "mlflow.note.content"


def parents(client: MlflowClient, experiment_id: str) -> list[Run]:
    """The experiment's parent runs (one per row), oldest first."""
    found = client.search_runs([experiment_id], filter_string=f"tags.`{ROLE_TAG}` = '{GROUP}'",
                               max_results=5000)
    return sorted(found, key=lambda run: (run.info.start_time, run.info.run_id))


def rounded(value: float, digits: int = DIGITS) -> float:
    """``value`` to ``digits`` significant digits (0.023370361328125 → 0.02337)."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


@server_call
def summarise_row(paths: Paths, parent_id: str, run_ids: Iterable[str],
                  stats: dict[str, tuple[float, float]]) -> str:
    """Put on a row's parent run what its seed runs ``run_ids`` say together: each metric of
    ``stats`` (mean, std over the seeds) as ``<metric>`` and ``<metric>_std`` at the seeds'
    final step, the mean curve of ``train_loss`` and of each ``curve/*`` metric at the steps
    the seeds logged, the seed count and the seeds as tags, and the row's colour on the parent
    and its seeds. Returns the parent's id: a parent holding points the row no longer has
    (another set of seeds, a parent of an older multilab that logged at step = seeds) is
    replaced by a fresh one, since MLflow cannot delete a metric's points.
    """
    point_at(tracking_uri(paths))
    client = MlflowClient()
    seeds = [client.get_run(run_id) for run_id in run_ids]
    if not seeds:
        return parent_id
    wanted = _summary(client, seeds, stats)
    parent = client.get_run(parent_id)
    have = {key: client.get_metric_history(parent_id, key) for key in parent.data.metrics}
    if any(not _agrees(points, wanted.get(key, {})) for key, points in have.items()):
        parent_id, have = replace_parent(client, parent, seeds), {}
    now = int(time.time() * 1000)
    fresh = [Metric(key, value, now, step) for key, points in wanted.items()
             for step, value in points.items()
             if not any(m.step == step for m in have.get(key, []))]
    for start in range(0, len(fresh), 1000):
        client.log_batch(parent_id, metrics=fresh[start : start + 1000], synchronous=True)
    numbers = sorted(int(run.data.tags["seed"]) for run in seeds if "seed" in run.data.tags)
    client.set_tag(parent_id, N_SEEDS_TAG, str(len(seeds)))
    client.set_tag(parent_id, SEEDS_TAG, " ".join(map(str, numbers)))
    parent = client.get_run(parent_id)
    _color_row(client, parent, seeds)
    # its Duration: the seeds' run times together (created FINISHED, it had none of its own)
    client.set_terminated(parent_id, status=FINISHED,
                          end_time=parent.info.start_time + seeds_duration(seeds))
    describe_experiment(client, parent.info.experiment_id)
    return parent_id


def seeds_duration(seeds: Iterable[Run]) -> int:
    """Milliseconds the finished seed runs took, summed (a run still open counts nothing)."""
    return sum(max(run.info.end_time - run.info.start_time, 0) for run in seeds
               if run.info.end_time and run.info.start_time)


@server_call
def summarise_study_row(paths: Paths, run_id: str) -> str | None:
    """The parent of ``run_id`` when it is a study row's (:data:`ROW_TAG`): summarised over
    the latest finished, evaluated run of each seed nested under it
    (:func:`summarise_row`). Returns its id (None: not nested under a study row). Seeds
    evaluated at once (``dvc queue start -j N``) take turns: a summary may replace the
    parent, and two replacing it at once would split its seeds."""
    point_at(tracking_uri(paths))
    client = MlflowClient()
    with FileLock(local_store(paths) / ".parents.lock"):
        parent_id = client.get_run(run_id).data.tags.get(PARENT_TAG)
        if parent_id is None:
            return None
        parent = client.get_run(parent_id)
        if ROW_TAG not in parent.data.tags or parent.info.lifecycle_stage != "active":
            return None
        nested = client.search_runs(
            [parent.info.experiment_id],
            filter_string=f"tags.`{PARENT_TAG}` = '{parent_id}' and attributes.status = "
                          f"'{FINISHED}' and tags.evaluated = 'true'",
            order_by=["attributes.end_time DESC"], max_results=5000)
        latest = {run.data.tags.get("seed"): run for run in reversed(nested)}  # newest wins
        seeds = list(latest.values())
        stats = summarise([{key: run.data.metrics[key] for key in METRICS
                            if key in run.data.metrics} for run in seeds])
        return summarise_row(paths, parent_id, [run.info.run_id for run in seeds], stats)


def _summary(client: MlflowClient, seeds: list[Run], stats: dict[str, tuple[float, float]]
             ) -> dict[str, dict[int, float]]:
    """metric → {step: value} a parent should hold (see :func:`summarise_row`)."""
    final = max((point.step for run in seeds for key in stats if key in run.data.metrics
                 for point in client.get_metric_history(run.info.run_id, key)), default=0)
    wanted: dict[str, dict[int, float]] = {}
    for key, (mean, std) in stats.items():
        wanted[key] = {final: rounded(mean)}
        wanted[key + STD_SUFFIX] = {final: rounded(std)}
    for key in dict.fromkeys(PLOTS.values()):
        curve = _mean_curve(client, seeds, key)
        if curve:
            wanted[key] = curve
    return wanted


def _mean_curve(client: MlflowClient, seeds: list[Run], key: str) -> dict[int, float]:
    """The mean over seeds of ``key`` at each step (a step only some seeds reached: the mean
    of those; a step a resumed run logged twice counts once, as its mean)."""
    at: dict[int, list[float]] = {}
    for run in seeds:
        own: dict[int, list[float]] = {}
        for point in client.get_metric_history(run.info.run_id, key):
            own.setdefault(point.step, []).append(point.value)
        for step, values in own.items():
            at.setdefault(step, []).append(statistics.fmean(values))
    return {step: rounded(statistics.fmean(values)) for step, values in sorted(at.items())}


def _agrees(points: list[Metric], wanted: dict[int, float]) -> bool:
    """Whether a parent's history of one metric is part of what it should hold: one point per
    step, each at a step and value it should have."""
    steps = [point.step for point in points]
    return len(steps) == len(set(steps)) and all(
        point.step in wanted and math.isclose(point.value, wanted[point.step], rel_tol=1e-9,
                                              abs_tol=1e-12)
        for point in points)


def replace_parent(client: MlflowClient, parent: Run, seeds: Iterable[Run] = (), *,
                   copy_metrics: bool = False) -> str:
    """A new parent run with ``parent``'s name and tags (and, with ``copy_metrics``, its
    metric histories), every run nested under ``parent`` moved under it, ``parent`` deleted.
    Returns the new parent's id."""
    old = parent.info.run_id
    tags = {key: value for key, value in parent.data.tags.items() if key != "mlflow.runName"}
    made = client.create_run(parent.info.experiment_id, run_name=parent.info.run_name,
                             tags=tags).info
    created = made.run_id
    if parent.data.params:  # the row's recipe (tracking.group_run)
        client.log_batch(created, params=[Param(key, value)
                                          for key, value in parent.data.params.items()],
                         synchronous=True)
    if copy_metrics:
        points = [point for key in parent.data.metrics
                  for point in client.get_metric_history(old, key)]
        for start in range(0, len(points), 1000):
            client.log_batch(created, metrics=[
                Metric(p.key, p.value, p.timestamp, p.step) for p in points[start:start + 1000]],
                synchronous=True)
    took = (parent.info.end_time or 0) - (parent.info.start_time or 0)  # its Duration kept
    client.set_terminated(created, status=FINISHED, end_time=made.start_time + max(took, 0))
    nested = client.search_runs([parent.info.experiment_id],
                                filter_string=f"tags.`{PARENT_TAG}` = '{old}'", max_results=50000)
    for run_id in {run.info.run_id for run in nested} | {run.info.run_id for run in seeds}:
        client.set_tag(run_id, PARENT_TAG, created)
    client.delete_run(old)
    return created


def _color_row(client: MlflowClient, parent: Run, seeds: Iterable[Run]) -> None:
    """The parent's colour (given one if it has none, as parents of an older multilab) on
    the parent and on each of its seeds."""
    color = parent.data.tags.get(RUN_COLOR_TAG)
    if color is None:
        others = parents(client, parent.info.experiment_id)
        color = pick_color(parent.data.tags.get("modification", ""),
                           (run.data.tags.get(RUN_COLOR_TAG) for run in others))
        client.set_tag(parent.info.run_id, RUN_COLOR_TAG, color)
    for run in seeds:
        if run.data.tags.get(RUN_COLOR_TAG) != color:
            client.set_tag(run.info.run_id, RUN_COLOR_TAG, color)


@server_call
def baseline_first(paths: Paths, experiment_id: str) -> None:
    """Keep the baseline's parent the newest parent of the experiment: the UI lists runs
    newest first and draws the first 10 rows, so the baseline stays beside any variant
    (its parent is replaced by an identical newer one when another parent is newer)."""
    point_at(tracking_uri(paths))
    client = MlflowClient()
    found = parents(client, experiment_id)
    baseline = [run for run in found
                if same_modification(run.data.tags.get("modification", ""), BASELINE)]
    if baseline and found[-1].info.run_id != baseline[0].info.run_id:
        replace_parent(client, baseline[0], copy_metrics=True)


def _mean_std(run: Run, key: str) -> str:
    """A parent's ``key`` as ``mean ± std`` at the table's decimals; "–" where it has none."""
    metrics = run.data.metrics
    if key not in metrics:
        return "–"
    decimals = METRICS[key].decimals
    std = metrics.get(key + STD_SUFFIX)
    return f"{metrics[key]:.{decimals}f}" + (f" ± {std:.{decimals}f}" if std is not None
                                              else "")


def _settings(run: Run) -> str:
    """The row's recipe (the parameters :func:`~multilab.tracking.runs.group_run` logs)."""
    settings = [f"{key}={value}" for key, value in sorted(run.data.params.items())
                if key != "modification"]
    return ", ".join(settings) or "the original setup"


def experiment_note(name: str, rows: Iterable[Run]) -> str:
    """The experiment's description (Markdown): what its rows are, their table (settings,
    seeds, mean ± std of μ, τ₀, ρ₈ and dev perplexity, aligned in a fixed-width block) and the
    commands that fill it."""
    rows = list(rows)
    study = any(ROW_TAG in run.data.tags for run in rows)
    names = ", ".join(run.info.run_name or "?" for run in rows)
    table = [["row", "settings", "seeds", *HEADLINE.values()]] + [
        [run.info.run_name or "?", _settings(run), run.data.tags.get(SEEDS_TAG) or "–",
         *(_mean_std(run, key) for key in HEADLINE)] for run in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    # a fixed-width block, not a Markdown table: the UI draws a table's cells unpadded
    lines = [f"**{name}**: {len(rows)} row(s), {names}; mean ± std over each row's seeds "
             "(expand: the table and the commands).", "", "```text",
             *("  ".join(cell.ljust(width) if i < 3 else cell.rjust(width)
                         for i, (cell, width) in enumerate(zip(line, widths, strict=True)))
               .rstrip() for line in table), "```"]
    lines += ["", "Each row is a parent run with its seeds nested under it: its metrics the mean "
              "(`mu`) and standard deviation (`mu_std`) over them, its parameters the settings "
              "it changes from `original`, its Duration their run times together.", ""]
    if study:
        lines += [f"Commands: `multilab study run {name}` trains the seeds it lacks; "
                  f"`multilab study report {name}` writes its table and claim verdicts "
                  f"(docs/studies/{name}.md)."]
    else:
        lines += ["Commands: `dvc repro` runs the default study (params.yaml's `study` and "
                  "`seeds`); `dvc exp run -S modification=<name>` adds a variant's row; "
                  "`multilab report` writes reports/table1.md; `multilab exp` lists DVC's "
                  "experiments, `dvc metrics show` their metrics."]
    return "\n".join(lines) + "\n"


def describe_experiment(client: MlflowClient, experiment_id: str) -> None:
    """Write the experiment's description (:data:`NOTE_TAG`, :func:`experiment_note`) from
    its parent runs, baseline first, as the runs table lists them; unchanged text is not
    written again."""
    experiment = client.get_experiment(experiment_id)
    rows = sorted(parents(client, experiment_id), key=lambda run: (
        not same_modification(run.data.tags.get("modification", ""), BASELINE),
        run.info.run_name or ""))
    note = experiment_note(experiment.name, rows)
    if experiment.tags.get(NOTE_TAG) != note:
        client.set_experiment_tag(experiment_id, NOTE_TAG, note)
