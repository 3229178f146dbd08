"""Study tables and verdicts, computed from the committed records alone.

For each study: which records belong to which (row, seed) — the record's modification, seed
and configuration (profile, languages, the study's and the row's settings) must match —,
each row's mean ± std per metric beside the paper's, and each claim's verdict by the one rule
(:mod:`multilab.studies.verdict`). A number without a record never appears; a (row, seed)
without one is counted as missing. The claims summary counts over the whole claim list, so a
claim no study tests yet is *not measured*, never dropped.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from multilab.lab import cells
from multilab.lab import modifications as mods
from multilab.lab.cells import number
from multilab.lab.metric_table import METRICS
from multilab.studies.claims import LAB, Claim, paper_name
from multilab.studies.records import Record
from multilab.studies.spec import Row, Study, claim_metrics, group_rows, resolve_metric
from multilab.studies.verdict import (
    Arm,
    Outcome,
    Verdict,
    compare_rows,
    compare_with_paper,
)

#: Study metrics computed from a record rather than read from one number of it (issue 55's
#: sweep): the zero-shot accuracy over the fine-tuning language's own, a model's training
#: minutes, and word retrieval MRR at one layer (``mrr.l8``).
RATIO, MINUTES, MRR = "downstream.ratio.", "train.minutes", "mrr.l"


def metric_source(metric: str) -> tuple[str, str]:
    """Which record kind holds a study metric, under which dotted path. Claims name a
    downstream language by its edition code (``downstream.zero_shot.s``), a downstream
    record keys its test sets by ISO code (``test.de``): the edition's code is translated.
    The derived metrics (:data:`RATIO`, :data:`MINUTES`, :data:`MRR`) name their record
    kind and the metric itself (:func:`metric_value` computes them)."""
    if metric.startswith("downstream.zero_shot."):
        return "downstream", f"test.{_test_key(metric.split('.', 2)[2])}.accuracy"
    if metric.startswith(RATIO):
        return "downstream", metric
    if metric == MINUTES:
        return "train", metric
    if metric.startswith(MRR) and metric[len(MRR):].isdigit():
        return "mrr", metric
    return "evaluate", f"metrics.{metric}"


def metric_value(record: Record, metric: str) -> float | None:
    """A study metric's value in its record (:func:`metric_source`), None where absent."""
    kind, path = metric_source(metric)
    result = record.data.get("result", {})
    if metric.startswith(RATIO):  # zero-shot / in-language accuracy (labels[0] fine-tuned)
        tests, labels = result.get("test", {}), result.get("labels") or [None]
        own = tests.get(labels[0], {}).get("accuracy")
        other = tests.get(_test_key(metric[len(RATIO):]), {}).get("accuracy")
        return other / own if own and other is not None else None
    if metric == MINUTES:
        seconds = result.get("step_seconds")
        return seconds / 60 if isinstance(seconds, int | float) else None
    if kind == "mrr":
        layer = int(metric[len(MRR):])
        return next((row["mrr"] for row in result.get("trained", [])
                     if row.get("layer") == layer), None)
    return record.metrics.get(path)


def _test_key(language: str) -> str:
    """``s`` → ``de``, ``enfake:3`` → ``en-enfake``; an ISO code (or anything that is no
    edition) stays as written."""
    from multilab.lab.languages import LanguageError, parse_languages

    try:
        (parsed,) = parse_languages([language])
    except (LanguageError, ValueError):
        return language
    return parsed.iso


def row_languages(study: Study, row: Row) -> str:
    """The languages a row trains on, joined by ',' as a record's configuration has them:
    the row's ``languages`` setting where it has one, else the study's."""
    if "languages" in row.settings:
        return _languages_text(row.settings["languages"])
    return ",".join(study.languages)


def _languages_text(value: Any) -> str:
    """``"[v, enfake:3]"``, ``["v", "enfake:3"]`` and ``"v,enfake:3"`` → ``v,enfake:3``."""
    if isinstance(value, str):
        with contextlib.suppress(yaml.YAMLError):
            value = yaml.safe_load(value) if value.strip().startswith("[") else value
    if isinstance(value, list | tuple):
        return ",".join(str(v).strip() for v in value)
    return ",".join(part.strip() for part in str(value).split(","))


def _matches(record: Record, study: Study, row: Row, seed: int) -> bool:
    model = record.model
    if model is None or model.get("seed") != seed:
        return False
    if not mods.same_modification(str(model["modification"]), row.modification):
        return False
    if study.records_from is not None and not str(
            record.data["provenance"].get("imported_from") or "").startswith(study.records_from):
        return False
    config = record.data["config"]
    if _languages_text(config.get("languages", "")) != row_languages(study, row):
        return False
    expected: dict[str, Any] = {"profile": study.profile}
    expected |= {key: value for key, value in {**study.settings, **row.settings}.items()
                 if key != "languages"}
    return all(_same(_config_value(config, key), value) for key, value in expected.items())


def _config_value(config: Mapping[str, Any], key: str) -> Any:
    """A study setting's value in a record's configuration. ``models.<size>.<key>`` (how
    ``--set`` names a model setting) is the record's ``model.<key>`` when the record trained
    that size (``recipe.model_size``), else absent."""
    if key in config or not key.startswith("models."):
        return config.get(key)
    parts = key.split(".", 2)
    if len(parts) < 3:
        return None
    _, size, rest = parts
    return config.get(f"model.{rest}") if config.get("recipe.model_size") == size else None


def _same(found: Any, wanted: Any) -> bool:
    """A record's configuration value against a study's setting (written as on ``--set``:
    ``"[]"`` is the empty list, ``128`` equals ``128.0``)."""
    if isinstance(wanted, str):
        with contextlib.suppress(yaml.YAMLError):
            wanted = yaml.safe_load(wanted)
    return _plain(found) == _plain(wanted)


def _plain(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


@dataclass(frozen=True)
class Cell:
    """One row's values of one metric over the study's seeds."""

    values: tuple[float, ...]
    devices: tuple[str, ...]
    seeds: tuple[int, ...] = ()  # the seed of each value

    @property
    def arm(self) -> Arm:
        return Arm.of(self.values, self.devices)


@dataclass(frozen=True)
class StudyResult:
    study: Study
    cells: Mapping[tuple[str, str], Cell]  # (row label, metric) → values over seeds
    seeds_found: Mapping[str, tuple[int, ...]]  # row label → seeds with an evaluate record
    outcomes: Mapping[str, Outcome]  # claim id → verdict
    sources: tuple[Path, ...]  # the records read


def collect(study: Study, records: Iterable[Record]) -> dict[tuple[str, int, str], Record]:
    """(row label, seed, kind) → the newest matching record."""
    chosen: dict[tuple[str, int, str], Record] = {}
    for record in records:
        for row in study.rows:
            for seed in study.seeds:
                if not _matches(record, study, row, seed):
                    continue
                key = (row.label, seed, record.kind)
                older = chosen.get(key)
                if older is None or record.data["provenance"].get("date", "") >= \
                        older.data["provenance"].get("date", ""):
                    chosen[key] = record
    return chosen


def study_kinds(study: Study) -> tuple[str, ...]:
    """The record kinds a (row, seed) needs to count as recorded: those of its metrics
    (``evaluate``; ``downstream`` for a table of zero-shot accuracies)."""
    return tuple(dict.fromkeys(metric_source(metric)[0] for metric in study.metrics))


def study_result(study: Study, records: Iterable[Record], claims: Mapping[str, Claim]
                 ) -> StudyResult:
    chosen = collect(study, list(records))
    cells: dict[tuple[str, str], Cell] = {}
    for row in study.rows:
        for metric in study.metrics:
            kind, _ = metric_source(metric)
            values, devices, seeds = [], [], []
            for seed in study.seeds:
                record = chosen.get((row.label, seed, kind))
                value = None if record is None else metric_value(record, metric)
                if value is not None:
                    values.append(value)
                    devices.append(record.device)
                    seeds.append(seed)
            cells[(row.label, metric)] = Cell(tuple(values), tuple(devices), tuple(seeds))
    if "downstream" in study_kinds(study):  # the baseline a downstream claim may compare with
        for row in study.rows:
            values, devices, seeds = [], [], []
            for seed in study.seeds:
                record = chosen.get((row.label, seed, "downstream"))
                if record is not None and "majority.accuracy" in record.metrics:
                    values.append(record.metrics["majority.accuracy"])
                    devices.append(record.device)
                    seeds.append(seed)
            cells[(row.label, MAJORITY_CELL)] = Cell(tuple(values), tuple(devices), tuple(seeds))
    kinds = study_kinds(study)
    seeds_found = {row.label: tuple(seed for seed in study.seeds
                                    if all((row.label, seed, kind) in chosen for kind in kinds))
                   for row in study.rows}
    outcomes = {entry.id: claim_outcome(study, claims[entry.id], cells, entry.pending,
                                        entry.not_testable)
                for entry in study.claims}
    # the records the table reads: a row's model may also have records of other kinds
    # (mrr, translate, …) that no metric of the study reads
    sources = tuple(sorted({record.path for (_, _, kind), record in chosen.items()
                            if kind in kinds}))
    return StudyResult(study, cells, seeds_found, outcomes, sources)


def claim_outcome(study: Study, claim: Claim, cells: Mapping[tuple[str, str], Cell],
                  pending: str | None = None, not_testable: str | None = None) -> Outcome:
    """The verdict of one claim on the study's cells."""
    if not claim.testable:
        return Outcome(Verdict.NOT_TESTABLE, claim.untestable_reason or "")
    if not_testable:
        return Outcome(Verdict.NOT_TESTABLE, not_testable)
    if pending:
        return Outcome(Verdict.NOT_MEASURED, f"not run by the study yet: {pending}")
    compare = claim.compare
    margin = compare.get("margin")

    def label(name: Any) -> str:  # a row named by its label or an alias
        row = study.row(str(name))
        return row.label if row is not None else str(name)

    if claim.kind == "rows":
        metric = resolve_metric(str(compare["metric"]), study)
        return _compare_groups(study, cells, metric, str(compare["a"]), str(compare["b"]),
                               str(compare["direction"]), margin)
    if claim.kind == "paper":
        row = study.row(str(compare["row"]))
        metric = resolve_metric(str(compare["metric"]), study)
        # the study's table carries the paper's std where the claim list quotes the mean only
        value = (row.paper.get(metric) if row else None) or claim.paper_value
        assert value is not None
        ours = cells[(label(compare["row"]), metric)].arm
        comparable = study.paper_comparable is None or bool(row and row.paper_comparable)
        if margin is None and study.paper_decimals is not None:
            # the paper's .00 is anything below .005; its perplexities are whole numbers
            digits = 0 if metric.startswith("ppl") else study.paper_decimals
            margin = 0.5 * 10 ** -digits
        outcome = compare_with_paper(ours, value, margin=margin, comparable=comparable)
        if outcome.verdict is Verdict.NOT_COMPARABLE and study.paper_comparable:
            return replace(outcome, reason=study.paper_comparable)
        return outcome
    if claim.kind == "curve" and compare["over"] == "layers":
        first, *_, last = claim_metrics(claim, study)
        row = label(compare["rows"][0])
        shape = str(compare["shape"])
        direction = "greater" if shape.startswith("increasing") else "less"
        return compare_rows(cells[(row, last)].arm, cells[(row, first)].arm, direction,
                            margin=margin)
    return Outcome(Verdict.NOT_MEASURED, f"a {claim.kind} claim is not computed yet")


#: the cell of a row's majority-class accuracy (from its downstream records)
MAJORITY_CELL = "downstream.majority"


def _group_arm(study: Study, cells: Mapping[tuple[str, str], Cell], rows: list[Row],
               metric: str) -> Arm:
    """Several rows as one arm: per seed, the mean over the rows (a seed counts where every
    row has it), so the seed stays the unit of replication."""
    if len(rows) == 1:
        return cells[(rows[0].label, metric)].arm
    group = [cells[(row.label, metric)] for row in rows]
    per_row = [dict(zip(cell.seeds, zip(cell.values, cell.devices, strict=True), strict=True))
               for cell in group]
    values, devices = [], []
    for seed in study.seeds:
        if all(seed in found for found in per_row):
            values.append(statistics.fmean(found[seed][0] for found in per_row))
            kinds = {found[seed][1] for found in per_row}
            devices.append(kinds.pop() if len(kinds) == 1 else "mixed")
    return Arm.of(values, devices)


def _compare_groups(study: Study, cells: Mapping[tuple[str, str], Cell], metric: str,
                    a: str, b: str, direction: str, margin: Any) -> Outcome:
    """Row against row, a group mean against a group mean, or each of several rows against
    one (all must hold for *held*; one significant failure is *did not hold*)."""
    kind_a, rows_a = group_rows(study, a)
    kind_b, rows_b = group_rows(study, b)
    if kind_b == "majority":  # the majority class of a's own downstream test, per seed
        if not metric.startswith("downstream."):
            return Outcome(Verdict.NOT_TESTABLE, f"a majority baseline needs a downstream "
                           f"metric, not {metric}")
        arm_b = _group_arm(study, cells, rows_a, MAJORITY_CELL)
    else:
        arm_b = _group_arm(study, cells, rows_b, metric)
    if kind_a != "each":
        return compare_rows(_group_arm(study, cells, rows_a, metric), arm_b, direction,
                            margin=margin)
    each = {row.label: compare_rows(cells[(row.label, metric)].arm, arm_b, direction,
                                    margin=margin) for row in rows_a}
    order = (Verdict.NOT_HELD, Verdict.NOT_MEASURED, Verdict.INDICATIVE,
             Verdict.NOT_SEPARABLE, Verdict.HELD)
    worst = min((o.verdict for o in each.values()), key=order.index)
    named = [label for label, o in each.items() if o.verdict is worst]
    p_values = [o.p for o in each.values() if o.p is not None]
    reason = (f"{worst} for {', '.join(named)} of the {len(each)} rows"
              + ("" if worst is Verdict.HELD else
                 f" ({each[named[0]].reason})"))
    return Outcome(worst, reason, p=max(p_values) if worst is Verdict.HELD and p_values
                   else (min(p_values) if worst is Verdict.NOT_HELD and p_values else None),
                   n=tuple(o.n[0] for o in each.values() if o.n))


# ------------------------------------------------------------------------------- rendering


def _cell_text(cell: Cell, metric: str) -> str:
    """The mean ± std of the seeds by the one precision rule (lab/cells.py), and how many."""
    if not cell.values:
        return "–"
    mean = statistics.fmean(cell.values)
    if len(cell.values) == 1:
        return f"{number(mean)} (1)"
    return f"{cells.cell(mean, statistics.stdev(cell.values))} ({len(cell.values)})"


def _paper_text(row: Row, metric: str) -> str:
    value = row.paper.get(metric)
    if value is None:
        return "–"
    return cells.cell(value.mean, value.std)


def render_study(result: StudyResult, claims: Mapping[str, Claim]) -> str:
    study = result.study
    lines = [f"# {study.name}: {paper_name(study.paper)}, {study.table}", "",
             f"{study.title}. Languages [{', '.join(study.languages)}], profile `{study.profile}`"
             f", seeds {', '.join(map(str, study.seeds))}"
             + (f", settings {dict(study.settings)}" if study.settings else "") + ".", ""]
    if study.about:
        lines += [study.about.strip(), ""]
    if study.records_from:
        lines += [f"Only records imported from `{study.records_from}` are read (one run's "
                  "models: a rerun of the same configuration elsewhere is another draw).", ""]
    lines += ["Ours: mean ± std over seeds (number of seeds); paper: mean ± std over "
              f"{study.paper_seeds or 'an unstated number of'} seeds as it reports them. "
              "Every value comes from a record under `results/`.", ""]
    if study.paper_comparable:
        lines += [f"Magnitudes are not comparable with the paper's: {study.paper_comparable}.",
                  ""]
    header = ["ID", "row", *(METRICS[m].column if m in METRICS else m for m in study.metrics),
              "seeds"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in study.rows:
        cells = [_cell_text(result.cells[(row.label, m)], m)
                 + ("" if study.paper == LAB else f"<br>paper {_paper_text(row, m)}")
                 for m in study.metrics]
        found = result.seeds_found[row.label]
        lines.append(f"| {row.paper_id or ''} | {row.label} | " + " | ".join(cells)
                     + f" | {len(found)}/{len(study.seeds)} |")
    lines += ["", "## Claims", "", "| claim | where | comparison | verdict | p | why |",
              "|---|---|---|---|---|---|"]
    for entry in study.claims:
        claim, outcome = claims[entry.id], result.outcomes[entry.id]
        p = "" if outcome.p is None else f"{outcome.p:.3g}"
        flag = " (mixed devices)" if outcome.mixed_devices else ""
        lines.append(f"| `{claim.id}` | {claim.where} | {comparison_text(claim)} | "
                     f"**{outcome.verdict}**{flag} | {p} | {escape(outcome.reason)} |")
    lines += ["", f"{len(result.sources)} records read.", ""]
    return "\n".join(lines)


def escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def comparison_text(claim: Claim) -> str:
    compare = claim.compare
    if claim.kind == "rows":
        sign = {"less": "<", "greater": ">", "equal": "="}[str(compare["direction"])]
        return f"{compare['a']} {sign} {compare['b']} on {compare['metric']}"
    if claim.kind == "paper":
        return f"{compare['row']} {compare['metric']} = paper's"
    if claim.kind == "curve":
        return f"{compare['metric']} over {compare['over']}: {compare['shape']}"
    return claim.kind


SUMMARY_COLUMNS = (Verdict.HELD, Verdict.NOT_HELD, Verdict.NOT_SEPARABLE, Verdict.INDICATIVE,
                   Verdict.NOT_COMPARABLE, Verdict.NOT_TESTABLE, Verdict.NOT_MEASURED)


def claim_verdicts(results: Iterable[StudyResult], claims: Mapping[str, Claim]
                   ) -> dict[str, Verdict]:
    """Every claim's verdict: a study's where one tests it (the first counting verdict
    wins), *not testable* where the claim says so, else *not measured*."""
    verdicts: dict[str, Verdict] = {}
    for claim in claims.values():
        verdicts[claim.id] = Verdict.NOT_MEASURED if claim.testable else Verdict.NOT_TESTABLE
    for result in results:
        for claim_id, outcome in result.outcomes.items():
            current = verdicts[claim_id]
            if current is Verdict.NOT_MEASURED or (outcome.verdict.counts
                                                   and not current.counts):
                verdicts[claim_id] = outcome.verdict
    return verdicts
