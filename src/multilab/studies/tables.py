"""Study tables and verdicts, computed from the committed records alone.

For each study: which records belong to which (row, seed) — a record of one model belongs to a
row when its seed is one of the row's and its configuration is the row's resolved one (what
``multilab study run`` trains for the row) on every key that decides the model —, each
row's mean ± std per metric beside the paper's, and each claim's verdict by the one rule
(:mod:`multilab.studies.verdict`). A number without a record never appears; a (row, seed)
without one is counted as missing. The claims summary counts over the whole claim list, so a
claim no study tests yet is *not measured*, never dropped.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import itertools
import json
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from multilab.config import LEFT_OUT_AT_DEFAULT, NOT_IN_FINGERPRINT
from multilab.files import parse_yaml
from multilab.lab import cells
from multilab.lab import modifications as mods
from multilab.lab.metric_table import column_title
from multilab.studies.claims import LAB, Claim, paper_name
from multilab.studies.metrics import (
    MODEL_LESS,
    Source,
    metric_sources,
    record_variant,
)
from multilab.studies.records import Record
from multilab.studies.settings import row_configuration
from multilab.studies.spec import (
    Row,
    Study,
    bind_claim,
    claim_metrics,
    claim_row_names,
    group_rows,
    resolve_metric,
    two_arm_parts,
)
from multilab.studies.verdict import (
    ALPHA,
    Arm,
    Outcome,
    Verdict,
    compare_rows,
    compare_with_paper,
    device_kind,
    device_kinds,
    holm,
    trend_test,
)

#: the parameter file a table's rows are resolved from (the command line's default)
DEFAULT_PARAMS = Path("params.yaml")
#: in a study's metric, the row's language pair (a row's ``pair``: ``3-s``)
PAIR = "<pair>"


def row_metric(row: Row, metric: str) -> str:
    """A study metric as one row reads it: ``<pair>`` is the row's language pair."""
    return metric.replace(PAIR, row.pair) if row.pair and PAIR in metric else metric


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
            value = parse_yaml(value) if value.strip().startswith("[") else value
    if isinstance(value, list | tuple):
        return ",".join(str(v).strip() for v in value)
    return ",".join(part.strip() for part in str(value).split(","))


#: Keys of a row's configuration a record need not share: the seed (a row has several, each
#: record is one seed's), how many models shared the record's training stack (``study run
#: --stack``: how the runner scheduled the row's models, not which models; a stacked model is
#: another draw of the same configuration, as a GPU's is) and the modification (compared by
#: the registry, :func:`~multilab.lab.modifications.same_modification`, whatever its
#: spelling). The parameters that never change a model's weights are the fingerprint's own
#: list, :data:`~multilab.config.NOT_IN_FINGERPRINT` (curve points, checkpoint and log
#: cadence); paths, experiment, rows and threads are not in a configuration at all.
OPEN_KEYS = frozenset({"seed", "train.stack", "modification"})
#: The measurement settings a record's ``config`` block carries beside its model's (``cli``'s
#: ``_record``, every command): compared where the study or the row pins one (``evaluate.layers:
#: all``), and only on the records of the command that reads them. The ``train``, ``evaluate``
#: and ``mrr`` records of a model measured while the profile fine-tuned at another learning
#: rate are still that model's; only its ``downstream`` record measured something else.
READ_SECTIONS: Mapping[str, tuple[str, ...]] = {"evaluate": ("evaluate.",),
                                                "downstream": ("downstream.",)}


def record_devices(record: Record) -> list[str]:
    """The devices behind a record: where it was written (``provenance.machine.device``)
    and, where its model names one and it is another kind, the kind its model trained on
    (``model.device``: a GPU's model measured on a CPU is not a CPU's)."""
    devices = [record.device]
    trained = (record.model or {}).get("device")
    if trained and device_kind(str(trained)) != device_kind(record.device):
        devices.append(str(trained))
    return devices


def on_device(record: Record, kind: str) -> bool:
    """Whether every device behind ``record`` (:func:`record_devices`) is of ``kind``."""
    return all(device_kind(device) == kind for device in record_devices(record))


def _matches(record: Record, study: Study, row: Row, seed: int,
             configuration: Mapping[str, Any] | None, any_device: bool = False) -> bool:
    """Whether ``record`` is one of ``row``'s at ``seed``: a record of one model when its
    configuration is the row's (``configuration``: :func:`row_configuration`), a record of
    no single model by :func:`_matches_model_less`; and, where the row names the kind of
    device its records come from (``device``; ``any_device``: not asked), of that kind."""
    if study.records_from is not None and not str(
            record.data["provenance"].get("imported_from") or "").startswith(study.records_from):
        return False
    wanted_device = study.device_of(row)
    if wanted_device is not None and not any_device and not on_device(record, wanted_device):
        return False
    if record.kind in MODEL_LESS or row.static:
        return _matches_model_less(record, study, row, seed)
    model = record.model
    if configuration is None or model is None or model.get("seed") != seed:
        return False
    if not mods.same_modification(str(model["modification"]), row.modification):
        return False
    fine_tune = row.fine_tune or study.fine_tune
    if record.kind == "downstream" and fine_tune is not None:
        tuned = (record.data["result"].get("languages") or [None])[0]
        if tuned is not None and str(tuned) != fine_tune:
            return False
    config = record.data["config"]
    read = READ_SECTIONS.get(record.kind, ())
    measured = {key: value for key, value in {**study.settings, **row.settings}.items()
                if key.startswith(read)}
    return same_configuration(config, configuration) and all(
        _same(config.get(key), value) for key, value in measured.items())


def same_configuration(found: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether a record's configuration ``found`` is ``wanted`` (a row's resolved one) on
    every key ``wanted`` defines, but :data:`OPEN_KEYS` and the fingerprint's
    :data:`~multilab.config.NOT_IN_FINGERPRINT`. A key the record lacks was added after the
    record was written, so the record's model had the value the fingerprint leaves out
    (:data:`~multilab.config.LEFT_OUT_AT_DEFAULT`); a key the fingerprint never leaves out
    is one the record cannot be shown to share."""
    for key, value in wanted.items():
        if key in OPEN_KEYS or key in NOT_IN_FINGERPRINT:
            continue
        if key in found:
            have = found[key]
        elif key in LEFT_OUT_AT_DEFAULT:
            have = LEFT_OUT_AT_DEFAULT[key]
        else:
            return False
        if _plain(have) != _plain(value):
            return False
    return True


def _matches_model_less(record: Record, study: Study, row: Row, seed: int) -> bool:
    """A static record belongs to a static row of its languages, profile and seed; a
    similarity record to the row of its first model (modification and seed), its two
    editions being the row's languages. Settings are compared where the record has them."""
    config, result = record.data["config"], record.data["result"]
    if config.get("profile") != study.profile:
        return False
    if record.kind == "static":
        if not row.static or result.get("seed") != seed:
            return False
        languages = config.get("languages", "")
    elif record.kind == "similarity" and not row.static:
        first = config.get("model_a")
        if not isinstance(first, Mapping) or first.get("seed") != seed or not \
                mods.same_modification(str(first.get("modification")), row.modification):
            return False
        languages = ",".join(map(str, result.get("editions", ())))
    else:
        return False
    if _languages_text(languages) != row_languages(study, row):
        return False
    expected = {key: value for key, value in {**study.settings, **row.settings}.items()
                if key != "languages" and key in config}
    return all(_same(config[key], value) for key, value in expected.items())


def _same(found: Any, wanted: Any) -> bool:
    """A record's configuration value against a study's setting (written as on ``--set``:
    ``"[]"`` is the empty list, ``128`` equals ``128.0``)."""
    if isinstance(wanted, str):
        with contextlib.suppress(yaml.YAMLError):
            wanted = parse_yaml(wanted)
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


def joined_devices(devices: Iterable[str]) -> str:
    """One value's device from the records behind it: the one, or ``a + b`` where they
    differ (a Δ of a CPU and a GPU record), so that the kinds stay readable."""
    return " + ".join(sorted({part for device in devices for part in device.split(" + ")}))


@dataclass(frozen=True)
class Cell:
    """One row's values of one metric over the study's seeds."""

    values: tuple[float, ...]
    devices: tuple[str, ...]
    seeds: tuple[int, ...] = ()  # the seed of each value

    @property
    def arm(self) -> Arm:
        return Arm.of(self.values, self.devices, self.seeds)


@dataclass(frozen=True)
class StudyResult:
    study: Study
    cells: Mapping[tuple[str, str], Cell]  # (row label, metric) → values over seeds
    seeds_found: Mapping[str, tuple[int, ...]]  # row label → seeds with every record it reads
    outcomes: Mapping[str, Outcome]  # claim id → verdict
    sources: tuple[Path, ...]  # the records read
    #: row label → what the row trains (:func:`model_key`): rows of several studies with one
    #: key and seed are one model, trained once
    model_keys: Mapping[str, str] = field(default_factory=dict)
    #: row label → the seconds of one more of its CPU trainings, from the records: its own
    #: fastest (any seed), else one of the same shape's (:func:`_train_seconds`)
    train_seconds: Mapping[str, float] = field(default_factory=dict)
    #: the labels of ``train_seconds`` that are a lower bound only: a training of the same
    #: shape with another vocabulary unit (a character row priced by a word-piece training)
    lower_bounds: frozenset[str] = frozenset()
    #: row label → seed → the devices of the row's records left unread because they are not
    #: of the kind the row's ``device`` names (kept under results/, labelled by device)
    other_devices: Mapping[str, Mapping[int, str]] = field(default_factory=dict)

    def run_seconds(self, label: str, profile_seconds: Mapping[str, float]) -> float | None:
        """What training one more seed of a row costs on the CPU: from its own or a
        same-shape training on record (:func:`_train_seconds`), else its profile's
        fastest (``profile_seconds``; a lower bound), else unknown."""
        return self.train_seconds.get(label, profile_seconds.get(self.study.profile))

    def priced_at_least(self, label: str) -> bool:
        """Whether :meth:`run_seconds` of a row is only a lower bound: a training of a
        cheaper step (fewer heads, a cheaper unit) or its profile's fastest prices it."""
        return label in self.lower_bounds or label not in self.train_seconds

    def measured_seconds(self, label: str) -> float | None:
        """:meth:`run_seconds` where the records measure it — the row's own training or one
        of the same shape, unit and steps — and None where it would be a lower bound: what a
        plan that must finish in time may rely on."""
        return None if self.priced_at_least(label) else self.train_seconds[label]


Chosen = dict[tuple[str, int, str, str], Record]


def model_key(configuration: Mapping[str, Any]) -> str:
    """What a row trains, as a short hash of its resolved configuration without the seed and
    the measurement settings (``evaluate.*``, ``downstream.*``): equal keys at one seed are
    one model (the fingerprint adds the data's hash, which the configuration determines)."""
    trained = {key: value for key, value in configuration.items()
               if not key.startswith(("evaluate.", "downstream."))
               and key not in NOT_IN_FINGERPRINT and key not in ("seed", "train.stack")}
    text = json.dumps(trained, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def row_configurations(study: Study, params: Path = DEFAULT_PARAMS,
                       overrides: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """Row label → its resolved configuration, for the rows that read a model."""
    return {row.label: row_configuration(study, row, params, overrides)
            for row in study.rows if _reads_a_model(study, row)}


def collect(study: Study, records: Iterable[Record], params: Path = DEFAULT_PARAMS,
            overrides: Sequence[str] = (),
            configurations: Mapping[str, Mapping[str, Any]] | None = None) -> Chosen:
    """(row label, seed, kind, variant) → the newest matching record.

    A record of one model belongs to every row whose resolved configuration (``params`` +
    ``overrides`` + the study's profile, languages and settings + the row's settings, the
    row's modification resolved: what ``multilab study run`` trains for it) it agrees with
    (:func:`same_configuration`): the record of a 4-layer model is the 4-layer row's, not
    also the base row's, and a record whose model differs from every row in one setting is
    no row's. ``configurations``: :func:`row_configurations`, where the caller has them."""
    if configurations is None:
        configurations = row_configurations(study, params, overrides)
    if study.records_under is not None:
        records = [r for r in records if r.path.is_relative_to(study.records_under)]
    chosen: Chosen = {}
    for record in records:
        for row in study.rows:
            for seed in study.seeds_of(row):
                if not _matches(record, study, row, seed, configurations.get(row.label)):
                    continue
                key = (row.label, seed, record.kind, record_variant(record))
                older = chosen.get(key)
                if older is None or record.data["provenance"].get("date", "") >= \
                        older.data["provenance"].get("date", ""):
                    chosen[key] = record
    return chosen


def _reads_a_model(study: Study, row: Row) -> bool:
    """Whether a row's metrics read records of one lab model (not a static row, nor a row
    of similarities only, whose two editions need not be a model's languages: ``[3, 3]``)."""
    return not row.static and any(kind not in MODEL_LESS for kind, _ in row_sources(study, row))


def row_sources(study: Study, row: Row) -> list[tuple[str, str]]:
    """The (kind, variant) records a (row, seed) needs to count as recorded: those of the
    study's metrics a row of its sort reads (a static row: static metrics only)."""
    found = []
    for metric in study.metrics:
        for source in metric_sources(row_metric(row, metric)):
            if (source.kind == "static") == row.static:
                found.append((source.kind, source.variant))
    return list(dict.fromkeys(found))


def study_kinds(study: Study) -> tuple[str, ...]:
    """The record kinds of a study's metrics (``evaluate``; ``downstream`` for a table of
    zero-shot accuracies; ``mrr`` …)."""
    return tuple(dict.fromkeys(source.kind for metric in study.metrics
                               for source in metric_sources(metric)))


def _cell(study: Study, chosen: Chosen, row: Row, metric: str) -> Cell:
    """One row's values of one metric over the seeds (a Δ: per seed, where both exist)."""
    values, devices, seeds = [], [], []
    for seed in study.seeds_of(row):
        numbers, kinds = [], set()
        for source in metric_sources(row_metric(row, metric)):
            if (source.kind == "static") != row.static:
                break
            record = chosen.get((row.label, seed, source.kind, source.variant))
            number = source.read(record) if record is not None else None
            if number is None:
                break
            numbers.append(number)
            kinds.update(record_devices(record))
        else:
            values.append(numbers[0] - sum(numbers[1:]) if len(numbers) > 1 else numbers[0])
            devices.append(joined_devices(kinds))
            seeds.append(seed)
    return Cell(tuple(values), tuple(devices), tuple(seeds))


def study_result(study: Study, records: Iterable[Record], claims: Mapping[str, Claim],
                 params: Path = DEFAULT_PARAMS, overrides: Sequence[str] = (),
                 configurations: Mapping[str, Mapping[str, Any]] | None = None
                 ) -> StudyResult:
    """The study's table and verdicts from ``records`` (which belong to which row:
    :func:`collect`, the rows resolved from ``params`` and ``overrides``, or given as
    ``configurations``: the default study's, resolved from its own configuration). The one
    table builder: ``study report`` hands it the committed records, the report stage the
    records its MLflow runs carry (:mod:`multilab.studies.run_records`)."""
    records = list(records)
    if configurations is None:
        configurations = row_configurations(study, params, overrides)
    chosen = collect(study, records, params, overrides, configurations)
    cells: dict[tuple[str, str], Cell] = {}
    for row in study.rows:
        for metric in study.metrics:
            cells[(row.label, metric)] = _cell(study, chosen, row, metric)
    if "downstream" in study_kinds(study):  # the baseline a downstream claim may compare with
        majority = Source("downstream", "", lambda r: r.metrics.get("majority.accuracy"))
        for row in study.rows:
            values, devices, seeds = [], [], []
            for seed in study.seeds_of(row):
                record = chosen.get((row.label, seed, "downstream", ""))
                if record is not None and (value := majority.read(record)) is not None:
                    values.append(value)
                    devices.append(joined_devices(record_devices(record)))
                    seeds.append(seed)
            cells[(row.label, MAJORITY_CELL)] = Cell(tuple(values), tuple(devices), tuple(seeds))
    needed = {row.label: row_sources(study, row) for row in study.rows}
    seeds_found = {row.label: tuple(seed for seed in study.seeds_of(row)
                                    if needed[row.label] and all(
                                        (row.label, seed, *key) in chosen
                                        for key in needed[row.label]))
                   for row in study.rows}
    outcomes = {entry.id: claim_outcome(study, bind_claim(claims[entry.id], entry), cells,
                                        entry.pending, entry.not_testable)
                for entry in study.claims}
    # the records the table reads: a row's model may also have records of other kinds
    # (mrr, translate, …) that no metric of the study reads
    wanted = {key for keys in needed.values() for key in keys}
    sources = tuple(sorted({record.path for (_, _, kind, variant), record in chosen.items()
                            if (kind, variant) in wanted}))
    trainings = [record for record in records if cpu_training_seconds(record) is not None]
    seconds, lower_bounds = _train_seconds(chosen, configurations, trainings)
    return StudyResult(study, cells, seeds_found, outcomes, sources,
                       {label: model_key(c) for label, c in configurations.items()},
                       seconds, lower_bounds,
                       left_out_by_device(study, records, configurations, needed))


def left_out_by_device(study: Study, records: Iterable[Record],
                       configurations: Mapping[str, Mapping[str, Any]],
                       needed: Mapping[str, Sequence[tuple[str, str]]]
                       ) -> dict[str, dict[int, str]]:
    """Row label → seed → the devices of the records a row would read but for its
    ``device`` (records of the kinds it reads, of another kind of device): what its page
    names as kept and not read. Empty for a study that names no device."""
    pinned = [row for row in study.rows if study.device_of(row) is not None]
    if not pinned:
        return {}
    if study.records_under is not None:
        records = [r for r in records if r.path.is_relative_to(study.records_under)]
    found: dict[str, dict[int, set[str]]] = {}
    for record in records:
        for row in pinned:
            if on_device(record, str(study.device_of(row))) or \
                    (record.kind, record_variant(record)) not in needed.get(row.label, ()):
                continue
            for seed in study.seeds_of(row):
                if _matches(record, study, row, seed, configurations.get(row.label),
                            any_device=True):
                    found.setdefault(row.label, {}).setdefault(seed, set()).update(
                        record_devices(record))
    return {label: {seed: joined_devices(devices) for seed, devices in sorted(seeds.items())}
            for label, seeds in found.items()}


#: what a training's cost follows besides its number of languages: the model's shape and
#: the steps per language (the profile's text, epochs and batches)
SHAPE_KEYS = ("profile", "model.hidden_size", "model.intermediate_size",
              "model.num_hidden_layers", "model.batch_size", "corpus.train_scope",
              "train.epochs", "train.max_train_sentences", "train.max_length")
#: ... and what a step costs at that shape: the attention heads (16 heads of 4 dimensions:
#: 2.7 times one head's step) and the tokens per sentence (a character vocabulary fills
#: ``max_length``: three times a word's step; benchmarks/RESULTS-row-steps.md)
COST_KEYS = (*SHAPE_KEYS, "model.num_attention_heads", "vocab.unit")
#: the vocabulary units from the cheapest step to the dearest (the same benchmark: CPU
#: seconds a step 0.81 word, 1.01 word piece, 3.03 character)
UNIT_COST_ORDER = ("word", "wordpiece", "char")


def cpu_training_seconds(record: Record) -> float | None:
    """A CPU training record's ``step_seconds`` (None: another kind, a GPU's, or older)."""
    spent = record.data.get("result", {}).get("step_seconds")
    device = str(record.data["provenance"].get("machine", {}).get("device", "cpu"))
    if record.kind == "train" and isinstance(spent, int | float) and spent > 0 and \
            device.startswith("cpu"):
        return float(spent)
    return None


def _language_count(configuration: Mapping[str, Any]) -> int:
    languages = configuration.get("languages") or ()
    return len(languages.split(",") if isinstance(languages, str) else languages) or 1


def _no_dearer_step(found: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether a training's step costs no more than the row's at the same shape: no more
    heads, no dearer vocabulary unit (:data:`UNIT_COST_ORDER`): its time is a lower bound."""
    def unit(config: Mapping[str, Any]) -> int:
        name = config.get("vocab.unit") or UNIT_COST_ORDER[1]  # older records: word pieces
        return UNIT_COST_ORDER.index(name) if name in UNIT_COST_ORDER else len(UNIT_COST_ORDER)

    heads = found.get("model.num_attention_heads"), wanted.get("model.num_attention_heads")
    return None not in heads and float(heads[0]) <= float(heads[1]) and unit(found) <= unit(wanted)


def _train_seconds(chosen: Chosen, configurations: Mapping[str, Mapping[str, Any]],
                   trainings: Sequence[Record]) -> tuple[dict[str, float], frozenset[str]]:
    """Row label → the CPU seconds of one more of its trainings: its own fastest on record,
    else the fastest of the same shape, step cost and steps per language (:data:`COST_KEYS`,
    any modification or study) scaled by the number of languages (a three-language model has
    half again the steps of a two-language one), else — a lower bound — the fastest of the
    same shape whose step is no dearer (fewer heads, a cheaper unit: :func:`_no_dearer_step`;
    a character row priced by a word piece's training). GPU trainings are left out: CPU
    hours. Second: the labels priced by that lower bound."""
    fastest: dict[str, float] = {}
    bounded: set[str] = set()
    for (label, _, kind, _), record in chosen.items():
        if kind == "train" and (spent := cpu_training_seconds(record)) is not None:
            fastest[label] = min(spent, fastest.get(label, spent))
    for label, configuration in configurations.items():
        for keys in (COST_KEYS, SHAPE_KEYS):
            if label in fastest:
                break
            similar = [spent * _language_count(configuration) / _language_count(config)
                       for record in trainings
                       if (spent := cpu_training_seconds(record)) is not None
                       and all(_same((config := record.data["config"]).get(key),
                                     configuration.get(key)) for key in keys)
                       and (keys is COST_KEYS or _no_dearer_step(config, configuration))]
            if similar:
                fastest[label] = min(similar)
                if keys is SHAPE_KEYS:
                    bounded.add(label)
    return fastest, frozenset(bounded)


def paper_rounding(study: Study, metric: str) -> float | None:
    """Half a unit of the paper's last printed decimal of ``metric``: its .00 is anything
    below .005, its perplexities are whole numbers; None where the study states no
    decimals (``paper_decimals``)."""
    if study.paper_decimals is None:
        return None
    digits = 0 if metric.startswith("ppl") else study.paper_decimals
    return 0.5 * 10 ** -digits


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

    if claim.kind == "rows" and not two_arm_parts(claim):
        metric = resolve_metric(str(compare["metric"]), study)
        metric_b = resolve_metric(str(compare.get("metric_b", metric)), study)
        return _compare_groups(study, cells, metric, str(compare["a"]), str(compare["b"]),
                               str(compare["direction"]), margin, metric_b,
                               claim.relative_bounds)
    if claim.kind == "paper":
        row = study.row(str(compare["row"]))
        metric = resolve_metric(str(compare["metric"]), study)
        # the study's table carries the paper's std where the claim list quotes the mean only
        value = (row.paper.get(metric) if row else None) or claim.paper_value
        assert value is not None
        ours = cells[(label(compare["row"]), metric)].arm
        comparable = study.paper_comparable is None or bool(row and row.paper_comparable)
        if margin is None:
            margin = paper_rounding(study, metric)
        outcome = compare_with_paper(ours, value, margin=margin, comparable=comparable)
        if outcome.verdict is Verdict.NOT_COMPARABLE and study.paper_comparable:
            return replace(outcome, reason=study.paper_comparable)
        return outcome
    if parts := two_arm_parts(claim):  # a against b, part by part
        direction = two_arm_direction(claim)
        if direction is None:
            return Outcome(Verdict.NOT_MEASURED, f"a {claim.kind} of {_claimed(claim)!r} read "
                           f"as two arms is not computed (a curve: {', '.join(TWO_ARM_SHAPES)}"
                           f" or {COMPUTED_SHAPES}; a correlation: positive or negative)")
        each = {}
        for part in parts:
            metric = resolve_metric(str(part["metric"]), study)
            metric_b = resolve_metric(str(part.get("metric_b", metric)), study)
            each[_part_text(part)] = _compare_groups(
                study, cells, metric, str(part["a"]), str(part["b"]), direction, margin,
                metric_b, claim.relative_bounds)
        return next(iter(each.values())) if len(each) == 1 else _worst(each, "parts")
    if claim.kind == "curve" and compare["over"] == "layers":
        first, *_, last = claim_metrics(claim, study)
        row = label(compare["rows"][0])
        shape = str(compare["shape"])
        direction = curve_direction(shape)
        if direction is None:
            return Outcome(Verdict.NOT_MEASURED, f"a layer curve of shape {shape!r} is not "
                           f"computed ({COMPUTED_SHAPES})")
        # one row's models at two layers: a paired test over seeds
        return compare_rows(cells[(row, last)].arm, cells[(row, first)].arm, direction,
                            margin=margin, paired=True)
    if claim.kind == "curve":
        return _curve_over_rows(study, cells, claim, margin)
    if claim.kind == "similarity":
        return _above_floor(study, cells, claim)
    if claim.kind == "correlation":
        return _correlation(study, cells, claim)
    return Outcome(Verdict.NOT_MEASURED, f"a {claim.kind} claim is not computed yet")


#: a curve's shape (its first word) → the direction every step of it is tested in
CURVE_DIRECTIONS = {"increasing": "greater", "rising": "greater", "decreasing": "less",
                    "flat": "equal"}
COMPUTED_SHAPES = "increasing, rising, decreasing or flat only"
#: a correlation's direction → arm a (the higher x) against arm b, when read as two arms
CORRELATION_ARMS = {"positive": "greater", "negative": "less"}
#: shapes only a two-arm reading computes: one curve ``above`` / ``below`` another (arm a the
#: first named), a curve that ``rises late`` (arm a: the later window's gain)
TWO_ARM_SHAPES = {"above": "greater", "below": "less", "rises late": "greater"}
SIGNS = {"less": "<", "greater": ">", "equal": "="}


def _part_text(part: Mapping[str, Any], sign: str = "vs") -> str:
    """One two-arm reading in words: ``a on m`` against ``b on m_b``."""
    if "metric_b" in part:
        return f"{part['a']} on {part['metric']} {sign} {part['b']} on {part['metric_b']}"
    return f"{part['a']} {sign} {part['b']} on {part['metric']}"


def _claimed(claim: Claim) -> str:
    """The claim's own words for its direction: a curve's shape, else its direction."""
    return str(claim.compare["shape" if claim.kind == "curve" else "direction"])


def two_arm_direction(claim: Claim) -> str | None:
    """The direction of a claim a study reads as two-arm parts (spec.py,
    :func:`two_arm_parts`): a rows claim's own, a curve's shape word, a correlation's sign
    with arm a the higher x. None: a shape no two-arm test can stand for."""
    if claim.kind == "rows":
        return str(claim.compare["direction"])
    if claim.kind == "curve":
        shape = _claimed(claim)
        return next((direction for words, direction in TWO_ARM_SHAPES.items()
                     if shape.startswith(words)), None) or curve_direction(shape)
    return CORRELATION_ARMS.get(_claimed(claim))


def curve_direction(shape: str) -> str | None:
    """A curve's claimed direction, later against earlier (deeper layers, later rows):
    ``increasing (l8 > l0)`` and ``rising into the last few layers`` are ``greater``,
    ``decreasing`` is ``less``, ``flat`` is the rule's ``equal``; another shape is not
    computed."""
    return next((direction for word, direction in CURVE_DIRECTIONS.items()
                 if shape.startswith(word)), None)


#: rows a correlation needs in a seed before its r is read
MIN_ROWS = 3


def _correlation(study: Study, cells: Mapping[tuple[str, str], Cell], claim: Claim
                 ) -> Outcome:
    """A correlation over rows (depths, languages): per seed, Pearson's r of x and y over
    the rows measured in that seed (at least :data:`MIN_ROWS`); the seeds' r are one arm,
    tested against zero in the claimed direction by the one rule (so ≥ 3 seeds for a
    verdict, the seed being the unit of replication)."""
    compare = claim.compare
    x, y = (resolve_metric(str(compare[key]), study) for key in ("x", "y"))
    labels = [study.row(str(name)).label for name in compare.get("rows", ())] or \
        [row.label for row in study.rows]  # type: ignore[union-attr]
    values, devices, too_few = [], [], []
    for seed in study.seeds:
        points, kinds = [], set()
        for label in labels:
            cx, cy = cells[(label, x)], cells[(label, y)]
            if seed in cx.seeds and seed in cy.seeds:
                points.append((cx.values[cx.seeds.index(seed)], cy.values[cy.seeds.index(seed)]))
                kinds.add(cx.devices[cx.seeds.index(seed)])
        if len(points) < MIN_ROWS:
            too_few.append(seed)
            continue
        xs, ys = zip(*points, strict=True)
        if len(set(xs)) < 2 or len(set(ys)) < 2:
            too_few.append(seed)
            continue
        values.append(statistics.correlation(xs, ys))
        devices.append(joined_devices(kinds))
    if not values:
        return Outcome(Verdict.NOT_MEASURED, f"fewer than {MIN_ROWS} rows with both {x} and "
                       f"{y} in every seed (of {', '.join(labels)})")
    direction = "greater" if compare["direction"] == "positive" else "less"
    outcome = compare_rows(Arm.of(values, devices), Arm.of([0.0] * len(values), devices),
                           direction)
    r = ", ".join(f"{v:+.2f}" for v in values)
    return replace(outcome, reason=f"Pearson's r over {len(labels)} rows per seed: {r}; "
                   + outcome.reason)


def _curve_over_rows(study: Study, cells: Mapping[tuple[str, str], Cell], claim: Claim,
                     margin: Any) -> Outcome:
    """A curve over rows in order (data sizes, windows, depths): each step from one row to
    the next must go the claimed way (``increasing`` / ``decreasing``; ``flat``: no step
    differs, the rule's ``equal``, so without a margin it reads *not separable* at best);
    the worst step is the verdict, as for ``each of``."""
    compare = claim.compare
    shape = str(compare["shape"])
    direction = curve_direction(shape)
    if direction is None:
        return Outcome(Verdict.NOT_MEASURED, f"a curve of shape {shape!r} is not computed "
                       f"({COMPUTED_SHAPES})")
    if claim.curve_test is not None:
        return curve_criterion_outcome(study, cells, claim, direction)
    if isinstance(compare["metric"], list):  # one row, metric by metric (α = 1, 2, 3)
        row = study.row(str(compare["rows"][0]))
        assert row is not None
        metrics = [resolve_metric(str(m), study) for m in compare["metric"]]
        steps = {f"{before} → {after}": compare_rows(cells[(row.label, after)].arm,
                                                     cells[(row.label, before)].arm,
                                                     direction, margin=margin, paired=True)
                 for before, after in itertools.pairwise(metrics)}
        return _worst(steps, "steps")
    metric = resolve_metric(str(compare["metric"]), study)
    labels = [study.row(str(name)).label for name in compare["rows"]]  # type: ignore[union-attr]
    steps = {f"{before} → {after}": compare_rows(cells[(after, metric)].arm,
                                                 cells[(before, metric)].arm, direction,
                                                 margin=margin)
             for before, after in itertools.pairwise(labels)}
    return _worst(steps, "steps")


def curve_points(study: Study, cells: Mapping[tuple[str, str], Cell], claim: Claim
                 ) -> tuple[list[tuple[str, Cell]], bool]:
    """A curve's points in order, each named, and whether they are one row's models (a
    metric list of one row: curve points over training, α = 1, 2, 3) or several rows'."""
    compare = claim.compare
    if isinstance(compare["metric"], list):
        row = study.row(str(compare["rows"][0]))
        assert row is not None
        metrics = [resolve_metric(str(m), study) for m in compare["metric"]]
        return [(metric, cells[(row.label, metric)]) for metric in metrics], True
    metric = resolve_metric(str(compare["metric"]), study)
    labels = [study.row(str(name)).label for name in compare["rows"]]  # type: ignore[union-attr]
    return [(label, cells[(label, metric)]) for label in labels], False


def curve_criterion_outcome(study: Study, cells: Mapping[tuple[str, str], Cell],
                            claim: Claim, direction: str) -> Outcome:
    """A curve claim read by its criterion's test (claims.py, ``CURVE_TESTS``), so that
    "X increases with training" is its trend and "largely improved" its end against its
    start, each over seeds by the one rule."""
    points, one_row = curve_points(study, cells, claim)
    if claim.curve_test == "end-vs-start":
        (first_name, first), *_, (last_name, last) = points
        outcome = compare_rows(last.arm, first.arm, direction, paired=one_row,
                               relative=claim.relative_bounds)
        return replace(outcome, reason=f"end against start, {first_name} → {last_name}: "
                       + outcome.reason)
    owner = study.row(str(claim.compare["rows"][0])) if one_row else None
    return _trend(study, points, direction, owner.label if owner else "its rows")


def _trend(study: Study, points: list[tuple[str, Cell]], direction: str, owner: str
           ) -> Outcome:
    """``trend``: per seed, the curve's values in order (at least :data:`MIN_ROWS` points in
    the seed), tested by :func:`~multilab.studies.verdict.trend_test` (Spearman's ρ per seed,
    the mean's exact permutation p; ≥ 3 seeds for a verdict)."""
    curves, devices = [], []
    for seed in study.seeds:
        found = [(cell.values[cell.seeds.index(seed)], cell.devices[cell.seeds.index(seed)])
                 for _, cell in points if seed in cell.seeds]
        if len(found) < MIN_ROWS:
            continue
        curves.append([value for value, _ in found])
        devices.append(joined_devices({device for _, device in found}))
    names = " → ".join(name for name, _ in points)
    if not curves:
        return Outcome(Verdict.NOT_MEASURED, f"no seed of {owner} has {MIN_ROWS} or more "
                       f"of the curve's points {names}: the records that hold them are "
                       "missing", n=(0,))
    outcome = trend_test(curves, devices, direction)
    return replace(outcome, reason=f"trend of {names}: {outcome.reason}")


def _above_floor(study: Study, cells: Mapping[tuple[str, str], Cell], claim: Claim
                 ) -> Outcome:
    """``shape: above-untrained-floor``: the row's metric (a ``floor_gap``: the trained
    models' similarity minus that of two untrained models, at the worst layer) is above
    zero, tested over seeds against a zero arm of the same size."""
    compare = claim.compare
    shape = str(compare["shape"])
    if shape != "above-untrained-floor":
        return Outcome(Verdict.NOT_MEASURED, f"a similarity of shape {shape!r} is not "
                       "computed (above-untrained-floor only)")
    row = study.row(str(compare["a"]))
    assert row is not None
    ours = cells[(row.label, str(compare["measure"]))].arm
    floor = Arm.of([0.0] * ours.n, ours.devices)
    return compare_rows(ours, floor, "greater")


def _worst(each: Mapping[str, Outcome], what: str) -> Outcome:
    """Several tests as one verdict: *held* only when all hold; the worst one otherwise,
    named (its p: the largest of all when held, the smallest when one failed); a single
    test is its own outcome, named."""
    if len(each) == 1:
        ((name, only),) = each.items()
        return replace(only, reason=f"{name}: {only.reason}")
    order = (Verdict.NOT_HELD, Verdict.NOT_MEASURED, Verdict.INDICATIVE,
             Verdict.NOT_SEPARABLE, Verdict.HELD)
    worst = min((o.verdict for o in each.values()), key=order.index)
    named = [label for label, o in each.items() if o.verdict is worst]
    p_values = [o.p for o in each.values() if o.p is not None]
    reason = (f"{worst} for {', '.join(named)} of the {len(each)} {what}"
              + ("" if worst is Verdict.HELD else f" ({each[named[0]].reason})"))
    if worst is Verdict.INDICATIVE and len(each) > 1:
        one = what[:-1] if what.endswith("s") else what
        reason = (f"fewer than 3 seeds in an arm; each {one}: "
                  + "; ".join(f"{name} {o.reason.split(' (seeds')[0]}"
                              for name, o in each.items()))
    deciding = _deciding_part([each[name] for name in named], worst)
    return Outcome(worst, reason, p=max(p_values) if worst is Verdict.HELD and p_values
                   else (min(p_values) if worst is Verdict.NOT_HELD and p_values else None),
                   n=tuple(o.n[0] for o in each.values() if o.n),
                   mixed_devices=any(o.mixed_devices for o in each.values()),
                   difference=deciding.difference, interval=deciding.interval)


def _deciding_part(parts: Sequence[Outcome], verdict: Verdict) -> Outcome:
    """The part a several-part verdict rests on, whose effect it reports: held, the
    weakest part (largest p); did not hold, the clearest failure (smallest p); else the
    first part named."""
    with_p = [o for o in parts if o.p is not None]
    if verdict is Verdict.HELD and with_p:
        return max(with_p, key=lambda o: o.p or 0.0)
    if verdict is Verdict.NOT_HELD and with_p:
        return min(with_p, key=lambda o: o.p or 0.0)
    return parts[0]


#: the cell of a row's majority-class accuracy (from its downstream records)
MAJORITY_CELL = "downstream.majority"


def _group_arm(study: Study, cells: Mapping[tuple[str, str], Cell], rows: list[Row],
               metric: str) -> Arm:
    """Several rows as one arm: per seed, the mean over the rows (a seed counts where every
    row has it), so the seed stays the unit of replication."""
    if len(rows) == 1:
        return cells[(rows[0].label, metric)].arm
    return _per_seed(study, [cells[(row.label, metric)] for row in rows], statistics.fmean)


def _per_seed(study: Study, group: list[Cell],
              combine: Callable[[list[float]], float]) -> Arm:
    """Several rows' cells as one arm: per seed, ``combine`` of the rows' values (a seed
    counts where every row has it), so the seed stays the unit of replication."""
    per_row = [dict(zip(cell.seeds, zip(cell.values, cell.devices, strict=True), strict=True))
               for cell in group]
    values, devices, seeds = [], [], []
    for seed in study.seeds:
        if all(seed in found for found in per_row):
            values.append(combine([found[seed][0] for found in per_row]))
            kinds = {found[seed][1] for found in per_row}
            devices.append(joined_devices(kinds))
            seeds.append(seed)
    return Arm.of(values, devices, seeds)


def _difference_arm(study: Study, cells: Mapping[tuple[str, str], Cell], rows: list[Row],
                    metric: str) -> Arm:
    """``difference of A, B``: per seed, A's value minus B's (a Δ between two conditions)."""
    first, second = (cells[(row.label, metric)] for row in rows)
    return _per_seed(study, [first, second], lambda pair: pair[0] - pair[1])


def same_models(study: Study, a: str, b: str, metric: str, metric_b: str | None) -> bool:
    """Whether two arms are measurements of the same models: the same row (or the same
    group of rows) read on two metrics — layer 0 and layer 8 of one row, its open- and
    closed-class words —, or a row against its own majority-class baseline. Their seeds
    are then matched, and the test is the paired t (:func:`~multilab.studies.verdict.
    compare_rows`, ``paired``)."""
    kind_a, rows_a = group_rows(study, a)
    kind_b, rows_b = group_rows(study, b)
    if kind_b == "majority":
        return True
    return (kind_a == kind_b and kind_a != "each" and metric != (metric_b or metric)
            and [row.label for row in rows_a] == [row.label for row in rows_b])


def _compare_groups(study: Study, cells: Mapping[tuple[str, str], Cell], metric: str,
                    a: str, b: str, direction: str, margin: Any,
                    metric_b: str | None = None,
                    relative: tuple[float | None, float | None] | None = None) -> Outcome:
    """Row against row, a group mean against a group mean, or each of several rows against
    one (all must hold for *held*; one significant failure is *did not hold*). Arms of the
    same models (:func:`same_models`) are compared paired; ``relative``: the claim's
    criterion, bounds on the relative change a / b − 1."""
    kind_a, rows_a = group_rows(study, a)
    kind_b, rows_b = group_rows(study, b)
    paired = same_models(study, a, b, metric, metric_b)
    if kind_b == "majority":  # the majority class of a's own downstream test, per seed
        if not metric.startswith("downstream."):
            return Outcome(Verdict.NOT_TESTABLE, f"a majority baseline needs a downstream "
                           f"metric, not {metric}")
        arm_b = _group_arm(study, cells, rows_a, MAJORITY_CELL)
    elif kind_b == "difference":
        arm_b = _difference_arm(study, cells, rows_b, metric_b or metric)
    else:
        arm_b = _group_arm(study, cells, rows_b, metric_b or metric)
    if kind_a == "each" and kind_b == "each":
        return Outcome(Verdict.NOT_MEASURED, "'each of' on both arms is not computed")
    if kind_b == "each":  # one arm against each of several rows ("both are better")
        arm_a = (_difference_arm(study, cells, rows_a, metric) if kind_a == "difference"
                 else _group_arm(study, cells, rows_a, metric))
        return _worst({row.label: compare_rows(arm_a, cells[(row.label, metric_b or metric)]
                                               .arm, direction, margin=margin,
                                               relative=relative)
                       for row in rows_b}, "rows")
    if kind_a != "each":
        arm_a = (_difference_arm(study, cells, rows_a, metric) if kind_a == "difference"
                 else _group_arm(study, cells, rows_a, metric))
        return compare_rows(arm_a, arm_b, direction, margin=margin, paired=paired,
                            relative=relative)
    each = {row.label: compare_rows(cells[(row.label, metric)].arm, arm_b, direction,
                                    margin=margin, relative=relative) for row in rows_a}
    return _worst(each, "rows")


# ------------------------------------------------------------------------------- rendering


#: A study table's metric groups, in order, each metric in the first whose patterns match it
#: (a Δ ``A minus B`` by A): so that no table is wider than a page, and a reader finds the
#: multilinguality scores apart from the model's fit
METRIC_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Multilinguality", ("mu", "align_f1.*", "retrieval_p1.*", "translation_p1.*", "mrr.*",
                         "similarity.*", "translate.*", "static.*.mrr")),
    ("Zero-shot transfer", ("downstream.*", "static.*.zero_shot.*")),
    ("Model fit", ("ppl_*",)),
    ("Position embeddings", ("position.*",)),
    ("Over training", ("curve.*",)),
    ("Training cost", ("train.*",)),
)
OTHER_GROUP = "Other metrics"
#: the most metric columns one table holds; a larger group is split evenly
MAX_METRIC_COLUMNS = 6
#: a study page's front matter: the site leaves out its table of contents, so the tables
#: have the width of the page (MkDocs Material's ``hide``; GitHub shows it as a small table)
WIDE_PAGE = ("---", "hide:", "  - toc", "---", "")
#: a header longer than this many characters may break after its dots
WRAP_HEADER = 16
#: what a cell reads where no record has the value
MISSING = cells.MISSING


def metric_group(metric: str) -> str:
    """The group of :data:`METRIC_GROUPS` a study metric is shown in."""
    first = metric.split(" minus ")[0].strip()
    return next((title for title, patterns in METRIC_GROUPS
                 if any(fnmatch.fnmatchcase(first, pattern) for pattern in patterns)),
                OTHER_GROUP)


def metric_tables(metrics: Sequence[str]) -> list[tuple[str, list[str]]]:
    """The study's metrics as (title, metrics) tables: by :func:`metric_group` in the
    groups' order, the study's order within one, a group of more than
    :data:`MAX_METRIC_COLUMNS` split into even parts (titled "1 of 2", …)."""
    grouped: dict[str, list[str]] = {}
    for metric in metrics:
        grouped.setdefault(metric_group(metric), []).append(metric)
    order = [title for title, _ in METRIC_GROUPS] + [OTHER_GROUP]
    tables = []
    for title in sorted(grouped, key=order.index):
        members = grouped[title]
        parts = -(-len(members) // MAX_METRIC_COLUMNS)
        size = -(-len(members) // parts)
        for index in range(parts):
            chunk = members[index * size:(index + 1) * size]
            tables.append((title if parts == 1 else f"{title} ({index + 1} of {parts})",
                           chunk))
    return tables


def shared_prefix(metrics: Sequence[str]) -> str:
    """The dotted key prefix all of several metrics share (``downstream.zero_shot.``),
    said once above their table so that the headers are short; none for a single
    metric or where any metric has a title of its own (``μ``, ``L8 ρ``)."""
    if len(metrics) < 2 or any(column_title(m) != m for m in metrics):
        return ""
    operands = [part.strip().split(".") for m in metrics for part in m.split(" minus ")]
    common: list[str] = []
    for pieces in zip(*operands, strict=False):
        if len(set(pieces)) != 1:
            break
        common.append(pieces[0])
    common = common[:min(len(p) for p in operands) - 1]  # every header keeps a word
    return ".".join(common) + "." if common else ""


def header_text(metric: str, prefix: str = "") -> str:
    """A metric's column header: its title, the table's shared prefix left out."""
    title = column_title(metric)
    if prefix:
        title = " minus ".join(part.strip().removeprefix(prefix)
                               for part in metric.split(" minus "))
    # a long key may break after its dots (``<wbr>``), so that its column is no wider
    # than its cells
    text = escape(title).replace("<", "&lt;")
    return text.replace(".", ".<wbr>") if len(title) > WRAP_HEADER else text


def ours_text(cell: Cell, expected: int) -> str:
    """Our mean ± std over the seeds, compact (``.245 ± .032``); ``(n)`` where fewer seeds
    than the row's ``expected`` have the value."""
    if not cell.values:
        return MISSING
    mean = statistics.fmean(cell.values)
    std = statistics.stdev(cell.values) if len(cell.values) > 1 else None
    text = cells.compact_cell(mean, std)
    if len(cell.values) < expected:
        text += f"{cells.JOIN}({len(cell.values)})"
    return text


def paper_text(study: Study, row: Row, metric: str) -> str | None:
    """The paper's value as it writes it (its decimals), None where it gives none."""
    value = row.paper.get(metric)
    if value is None:
        return None
    return cells.reported_cell(value.mean, value.std, study.paper_decimals)


def study_cell(result: StudyResult, row: Row, metric: str) -> str:
    """One cell: ours, then the paper's after a slash (``.245 ± .032 / .70``)."""
    ours = ours_text(result.cells[(row.label, metric)], len(result.study.seeds_of(row)))
    paper = None if result.study.paper == LAB else paper_text(result.study, row, metric)
    return ours if paper is None else f"{ours}{cells.JOIN}/{cells.JOIN}{paper}"


def settings_text(settings: Mapping[str, Any]) -> str:
    """A study's shared settings as the command line writes them: ```vocab.mode=joint```."""
    return ", ".join(f"`{key}={value}`" for key, value in settings.items())


def table_lines(result: StudyResult) -> list[str]:
    """The study's tables, one per metric group (:func:`metric_tables`), the columns
    without any value (ours or the paper's) left out and named."""
    study = result.study
    empty = [m for m in study.metrics
             if all(study_cell(result, row, m) == MISSING for row in study.rows)]
    shown = [m for m in study.metrics if m not in empty]
    ids = any(row.paper_id for row in study.rows)
    lines: list[str] = []
    for title, metrics in metric_tables(shown):
        prefix = shared_prefix(metrics)
        lines += [f"## {title}", ""]
        if prefix:
            lines += [f"Metrics `{prefix}…`:", ""]
        header = [*(["ID"] if ids else []), "row", *(header_text(m, prefix) for m in metrics),
                  "seeds"]
        lines += ["| " + " | ".join(header) + " |",
                  "|" + "---|" * (len(header) - len(metrics) - 1) + "---:|" * len(metrics)
                  + "---:|"]
        for row in study.rows:
            found = result.seeds_found[row.label]
            cells_ = [*([str(row.paper_id or "")] if ids else []), row.label,
                      *(study_cell(result, row, m) for m in metrics),
                      f"{len(found)}/{len(study.seeds_of(row))}"]
            lines.append("| " + " | ".join(cells_) + " |")
        lines.append("")
    if empty:
        lines += ["Not shown, no record has them yet: "
                  + ", ".join(f"`{m}`" for m in empty) + ".", ""]
    return lines


def render_study(result: StudyResult, claims: Mapping[str, Claim],
                 figures: Iterable[str] = (), superseded_by: str | None = None,
                 speaking: Mapping[str, Speaker] | None = None,
                 adjusted: Mapping[str, float] | None = None,
                 standing: Iterable[str] = ()) -> str:
    """A study's markdown: its tables (:func:`table_lines`), ``standing`` (markdown lines:
    its cells against the paper's spread, its runs left: :mod:`multilab.studies.standing`),
    ``figures`` (markdown lines,
    drawn from the same cells: :mod:`multilab.studies.figures`), its claims with their
    verdicts, then the study's prose (``about``); ``superseded_by``: the study that
    declares it supersedes this one; ``speaking``: each claim's outcome of record
    (:func:`speakers`, over every study: this one alone where not given); ``adjusted``:
    the Holm-adjusted p of the claims of record (:func:`multiplicity`)."""
    if speaking is None:
        speaking = speakers([result])
    if adjusted is None:
        adjusted = {}
    study = result.study
    lines = [*WIDE_PAGE, f"# {study.name}: {paper_name(study.paper)}, {study.table}", "",
             f"{study.title}. Languages [{', '.join(study.languages)}], profile `{study.profile}`"
             f", seeds {', '.join(map(str, study.seeds))}"
             + (f", settings {settings_text(study.settings)}" if study.settings else "") + ".",
             ""]
    if study.supersedes:
        lines += [f"Supersedes [{study.supersedes}]({study.supersedes}.md): for the claims "
                  "both test, this study speaks where the rule's budget, seeds and languages "
                  "tie (column *speaks*); that study keeps its table.", ""]
    if superseded_by:
        lines += [f"Superseded by [{superseded_by}]({superseded_by}.md): for the claims both "
                  "test, that study speaks where the rule's budget, seeds and languages tie "
                  "(column *speaks*); this table stays as what it measured.", ""]
    paper = "" if study.paper == LAB else (
        " / the paper's mean ± std over "
        f"{study.paper_seeds or 'an unstated number of'} seeds")
    lines += [f"Each cell: our mean ± std over the row's seeds{paper}; *(n)*: a value with "
              "fewer seeds than the row's. *Seeds*: the seeds with every record the row reads, "
              "of those it needs. Every value comes from a record under `results/`.", ""]
    if study.paper_comparable:
        lines += [f"Magnitudes are not comparable with the paper's: {study.paper_comparable}.",
                  ""]
    lines += table_lines(result)
    lines += device_lines(result)
    lines += [*standing]
    lines += [*figures]
    lines += claim_lines(result, claims, speaking, adjusted)
    if study.about or study.records_from:
        lines += ["## About this study", ""]
    if study.about:
        lines += [study.about.strip(), ""]
    if study.records_from:
        lines += [f"Only records imported from `{study.records_from}` are read (one run's "
                  "models: a rerun of the same configuration elsewhere is another draw).", ""]
    lines += [f"{len(result.sources)} records read.", ""]
    return "\n".join(lines)


def claim_lines(result: StudyResult, claims: Mapping[str, Claim],
                speaking: Mapping[str, Speaker], adjusted: Mapping[str, float]) -> list[str]:
    """A study page's claims with their verdicts (a study of no claim, the default study:
    one line saying so, not an empty table)."""
    study = result.study
    if not study.claims:
        return ["## Claims", "", "This study tests no claim: it is a table to read.", ""]
    lines = ["## Claims", "", "| claim | where | comparison | verdict | p | Holm p | speaks "
             "| why |", "|---|---|---|---|---|---|---|---|"]
    for entry in study.claims:
        claim, outcome = bind_claim(claims[entry.id], entry), result.outcomes[entry.id]
        p = "" if outcome.p is None else f"{outcome.p:.3g}"
        where = claim_device_note(result, claim) if outcome.mixed_devices else ""
        flag = f" (mixed devices: {where})" if where else \
            " (mixed devices)" if outcome.mixed_devices else ""
        speaker = speaking.get(entry.id)
        ours = speaker is None or speaker.result.study.name == study.name
        holm_p = f"{adjusted[entry.id]:.3g}" if ours and entry.id in adjusted else ""
        lines.append(f"| `{claim.id}` | {claim.where} | {comparison_text(claim)} | "
                     f"**{outcome.verdict}**{flag} | {p} | {holm_p} | "
                     f"{escape(speaks_text(speaker, study.name))} | "
                     f"{escape(outcome.reason)} |")
    return [*lines, "", "*Holm p*: the p adjusted by Holm's method over the paper's distinct "
                    "tests (the outcomes of record; claims resting on one comparison are one "
                    "test). *Speaks*: which study's outcome is the claim's (studies/README.md, "
                    "\"Which study speaks\").", ""]


def row_devices(result: StudyResult, row: Row) -> dict[int, str]:
    """Each seed of the row → the device its records ran on (the record's
    ``provenance.machine.device``; ``a + b`` where the row's records of one seed differ)."""
    found: dict[int, set[str]] = {}
    for (label, _), cell in result.cells.items():
        if label == row.label:
            for seed, device in zip(cell.seeds, cell.devices, strict=True):
                found.setdefault(seed, set()).add(device)
    return {seed: joined_devices(devices) for seed, devices in sorted(found.items())}


def seeds_by_device(devices: Mapping[int, str], kinds_only: bool = False) -> str:
    """``seed 42 on cpu (Intel Xeon); seeds 43, 44 on cuda (NVIDIA H100)``: which seeds ran
    where, a device's seeds together in the order of their first seed."""
    def named(device: str) -> str:
        kind, _, name = device.partition(":")
        return device_kind(device) if kinds_only or not name.strip() else \
            f"{kind.strip()} ({name.strip()})"

    groups: dict[str, list[int]] = {}
    for seed, device in devices.items():
        text = " + ".join(dict.fromkeys(named(part) for part in device.split(" + ")))
        groups.setdefault(text, []).append(seed)
    return "; ".join(f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))} on "
                     f"{device}" for device, seeds in groups.items())


def row_device_kinds(devices: Mapping[int, str]) -> set[str]:
    """The kinds of device (``cpu``, ``cuda``) a row's seeds ran on."""
    return {kind for device in devices.values() for kind in device_kinds(device)}


def device_lines(result: StudyResult) -> list[str]:
    """Where each row's seeds ran: one sentence when every record ran on one device and the
    study names no device, else a table of every row, a row whose seeds ran on several kinds
    of device (CPU and GPU runs are not bit-identical) marked; where the study names the kind
    of device a row's records come from (``device``), that kind per row and the records of
    another kind kept but not read."""
    study = result.study
    per_row = {row.label: row_devices(result, row) for row in study.rows}
    every = {device for devices in per_row.values() for device in devices.values()}
    pinned = any(study.device_of(row) is not None for row in study.rows)
    if not every and not pinned:
        return []
    lines = ["## Devices", ""]
    if len(every) == 1 and not pinned:
        where = seeds_by_device({0: every.pop()}).split(" on ", 1)[1]
        return [*lines, f"Every record of this table ran on {where}.", ""]
    ids = any(row.paper_id for row in study.rows)
    reads = " reads |" if pinned else ""
    lines += [("| ID " if ids else "") + f"| row |{reads} where its seeds ran |",
              "|---" * (2 + ids + pinned) + "|"]
    mixed = False
    for row in study.rows:
        devices = per_row[row.label]
        several = len(row_device_kinds(devices)) > 1
        mixed |= several
        flag = " **(mixed devices)**" if several else ""
        kind = f" {study.device_of(row) or 'any'} |" if pinned else ""
        lines.append(("| " + (row.paper_id or "") + " " if ids else "") + f"| {row.label} |"
                     f"{kind} {escape(seeds_by_device(devices))}{flag} |")
    if pinned:
        lines += ["", "*Reads*: the kind of device a row's records must come from (the "
                  "study's `device`): a row never mixes devices among its seeds, and a seed "
                  "whose records ran elsewhere is missing until it is run on that kind "
                  "(`multilab study run` runs it; studies/README.md, \"Devices\")."]
        left = [f"{row.paper_id or row.label} ({row.label}): "
                f"{seeds_by_device(result.other_devices[row.label])}"
                for row in study.rows if result.other_devices.get(row.label)]
        if left:
            lines += ["", "Kept under `results/`, not read (another kind of device): "
                      f"{escape('; '.join(left))}."]
    if mixed:
        lines += ["", "A verdict that reads a row of *mixed devices* is marked so and names "
                  "which seeds ran where: it stands as a test over seeds whose spread then "
                  "includes the devices' difference, which it does not test (studies/README.md, "
                  "\"The verdict rule\")."]
    return [*lines, ""]


def claim_device_note(result: StudyResult, claim: Claim) -> str:
    """For a verdict of mixed devices: each row it reads whose seeds ran on several kinds of
    device, with which seeds ran where (``original: seed 42 on cpu; seeds 43, 44 on cuda``)."""
    rows: dict[str, Row] = {}
    for name in claim_row_names(result.study, claim):
        try:
            rows.update({row.label: row for row in group_rows(result.study, name)[1]})
        except KeyError:
            continue
    notes = []
    for label, row in rows.items():
        devices = row_devices(result, row)
        if len(row_device_kinds(devices)) > 1:
            notes.append(f"{label}: {seeds_by_device(devices, kinds_only=True)}")
    return ", ".join(notes)


def speaks_text(speaker: Speaker | None, study: str) -> str:
    """Who speaks for a claim, seen from ``study``'s page: this study (and why, where
    another also tests it) or the study that does, and why."""
    if speaker is None:
        return "this study"
    if speaker.result.study.name == study:
        return "this study" + (f" ({speaker.why})" if speaker.why else "")
    return f"{speaker.result.study.name} speaks" + (f" ({speaker.why})" if speaker.why
                                                    else "")


def escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def comparison_text(claim: Claim) -> str:
    """A bound claim's comparison in words, with its criterion's bounds where it has one."""
    text = _comparison_words(claim)
    bounds = claim.relative_bounds
    low, high = ("open" if b is None else f"{b * 100:+.0f} %" for b in bounds or (0, 0))
    if claim.curve_test == "trend":
        text += "; criterion: trend, Spearman's ρ per seed (exact permutation p)"
    elif claim.curve_test == "end-vs-start":
        text += "; criterion: end against start" + (
            f", last / first − 1 in [{low}, {high}]" if bounds else "")
    elif bounds is not None:
        text += f"; criterion: a / b − 1 in [{low}, {high}]"
    return text


def _comparison_words(claim: Claim) -> str:
    compare = claim.compare
    if parts := two_arm_parts(claim):
        sign = SIGNS.get(two_arm_direction(claim) or "", "?")
        return " and ".join(_part_text(part, sign) for part in parts) + \
            f" ({_claimed(claim)})"
    if claim.kind == "rows":
        sign = SIGNS[str(compare["direction"])]
        if "metric_b" in compare:
            return (f"{compare['a']} on {compare['metric']} {sign} {compare['b']} on "
                    f"{compare['metric_b']}")
        return f"{compare['a']} {sign} {compare['b']} on {compare['metric']}"
    if claim.kind == "paper":
        return f"{compare['row']} {compare['metric']} = paper's"
    if claim.kind == "curve" and isinstance(compare["metric"], list):
        return (f"{compare['rows'][0]}: {' → '.join(map(str, compare['metric']))}: "
                f"{compare['shape']}")
    if claim.kind == "curve" and compare["over"] != "layers":
        path = " → ".join(map(str, compare["rows"]))
        return f"{compare['metric']} over {compare['over']} ({path}): {compare['shape']}"
    if claim.kind == "curve":
        return f"{compare['metric']} over {compare['over']}: {compare['shape']}"
    if claim.kind == "similarity":
        return f"{compare['a']}: {compare['measure']} {compare['shape']}"
    if claim.kind == "correlation":
        over = " over " + ", ".join(map(str, compare["rows"])) if compare.get("rows") else (
            f" over {compare['over']}")
        return f"r({compare['x']}, {compare['y']}){over}: {compare['direction']}"
    return claim.kind


SUMMARY_COLUMNS = (Verdict.HELD, Verdict.NOT_HELD, Verdict.NOT_SEPARABLE, Verdict.INDICATIVE,
                   Verdict.NOT_COMPARABLE, Verdict.NOT_TESTABLE, Verdict.NOT_MEASURED)


def superseded(results: Iterable[StudyResult]) -> set[tuple[str, str]]:
    """``(study, claim id)`` outcomes that a superseding study's replace: every claim the
    study that ``supersedes`` it has measured, once its outcome is a verdict (≥ 3 seeds in
    every arm: then it is the claim's, whatever it says) or where the first study's is not
    one either. A one-seed reading does not displace a three-seed verdict; until then the
    first study's stands."""
    results = list(results)
    by_name = {result.study.name: result for result in results}
    replaced: set[tuple[str, str]] = set()
    for result in results:
        first = by_name.get(result.study.supersedes) if result.study.supersedes else None
        if first is None:
            continue
        for claim_id, outcome in result.outcomes.items():
            before = first.outcomes.get(claim_id)
            if outcome.verdict is not Verdict.NOT_MEASURED and (
                    outcome.verdict.counts or before is None or not before.verdict.counts):
                replaced.add((first.study.name, claim_id))
    return replaced


#: a profile's training budget against the paper's: 0 the paper's own (``paper``: its 13,500
#: updates; ``real``: its §5 scale), 1 a CPU budget (``quick``, ``real-quick``), 2 a smoke test
BUDGET_TIERS = {"paper": 0, "real": 0, "quick": 1, "real-quick": 1, "smoke": 2}
BUDGET_WORDS = ("the paper's budget", "a CPU budget", "a smoke budget")
#: a language code that is a stand-in, not a real language of the paper (Fake-English,
#: K et al.'s English with shifted indices ``enfake:3``)
STAND_IN = "fake"


@dataclass(frozen=True)
class Speaker:
    """The study whose outcome is a claim's outcome of record, and why it speaks."""

    result: StudyResult
    outcome: Outcome
    why: str


def stand_in_languages(study: Study) -> bool:
    """Whether a study trains on a stand-in language (Fake-English) rather than only real
    languages of the paper: its languages or any row's."""
    codes = [*study.languages, *(row_languages(study, row) for row in study.rows)]
    return any(STAND_IN in str(code) for code in codes)


def _seeds(outcome: Outcome) -> int:
    """The seeds an outcome rests on: its smallest arm's."""
    return min(outcome.n) if outcome.n else 0


def speakers(results: Iterable[StudyResult]) -> dict[str, Speaker]:
    """Each claim's outcome of record, by one rule over the studies that measured it:

    1. a verdict (≥ 3 seeds in every arm) before a reading without one (a one-seed reading
       never displaces a three-seed verdict);
    2. the paper's budget before a smaller one (:data:`BUDGET_TIERS`: ``paper`` beats
       ``quick``);
    3. more seeds (the smallest arm's);
    4. the paper's real languages before a stand-in (Fake-English);
    5. a study that declares it ``supersedes`` the other;
    6. the first by name.

    A claim no study has measured has the first study's outcome (*not measured*). The rule
    reads the outcomes' kind and seeds only, never their p or direction."""
    results = list(results)
    tested: dict[str, list[tuple[int, StudyResult, Outcome]]] = {}
    for order, result in enumerate(results):
        for claim_id, outcome in result.outcomes.items():
            tested.setdefault(claim_id, []).append((order, result, outcome))
    chosen: dict[str, Speaker] = {}
    for claim_id, candidates in tested.items():
        measured = [c for c in candidates if c[2].verdict is not Verdict.NOT_MEASURED]
        if not measured:
            _, result, outcome = candidates[0]
            chosen[claim_id] = Speaker(result, outcome, "" if len(candidates) == 1 else
                                       "no study has measured it")
            continue
        names = {result.study.name for _, result, _ in measured}
        successors = {result.study.supersedes for _, result, _ in measured}

        def key(candidate: tuple[int, StudyResult, Outcome],
                successors: set[str | None] = successors) -> tuple:
            order, result, outcome = candidate
            return (not outcome.verdict.counts, BUDGET_TIERS.get(result.study.profile, 1),
                    -_seeds(outcome), stand_in_languages(result.study),
                    result.study.name in successors, result.study.name, order)

        ranked = sorted(measured, key=key)
        _, result, outcome = ranked[0]
        if len(ranked) == 1:
            why = "" if len(candidates) == 1 else "the only study with a record"
        else:
            why = _why(key(ranked[0]), key(ranked[1]), ranked[1][1].study.name,
                       result.study.supersedes in names)
        chosen[claim_id] = Speaker(result, outcome, why)
    return chosen


def _why(best: tuple, next_best: tuple, other: str, supersedes: bool) -> str:
    """The first key of :func:`speakers` on which the speaking study beats the next."""
    if best[0] != next_best[0]:
        return f"a verdict on ≥ 3 seeds every arm, {other} none"
    if best[1] != next_best[1]:
        return f"{BUDGET_WORDS[best[1]]}, {other} {BUDGET_WORDS[next_best[1]]}"
    if best[2] != next_best[2]:
        return f"more seeds: {-best[2]}, {other} {-next_best[2]}"
    if best[3] != next_best[3]:
        return f"the paper's real languages, {other} a stand-in (Fake-English)"
    if best[4] != next_best[4] and supersedes:
        return f"supersedes {other}; budget, seeds and languages tie"
    return f"ties {other} on budget, seeds and languages: first by name"


def outcomes_of_record(results: Iterable[StudyResult]
                       ) -> dict[str, tuple[StudyResult, Outcome]]:
    """Each claim's outcome of record and its study (:func:`speakers`)."""
    return {claim_id: (speaker.result, speaker.outcome)
            for claim_id, speaker in speakers(results).items()}


def test_key(study: Study, claim: Claim) -> str:
    """What a bound claim's test compares, so that claims resting on the very same
    comparison — one study, the same arms and metrics, the same criterion — are one test
    (``dufter2020-t1-r0-original-multilingual`` and ``-r18-r19-untrained-poor`` both test
    original against untrained on μ). The claimed direction is left out (a < b and b > a
    are one two-sided test); rows are named by label, whatever alias the claim uses."""
    def name(text: Any) -> str:
        row = study.row(str(text))
        return row.label if row is not None else str(text)

    compare = {key: value for key, value in claim.compare.items()
               if key not in ("direction", "shape")}
    if "a" in compare and "b" in compare:
        arms = sorted([(name(compare.pop("a")), str(compare.get("metric"))),
                       (name(compare.pop("b")), str(compare.pop("metric_b", None)
                                                    or compare.get("metric")))])
        compare["arms"] = arms
        compare.pop("metric", None)
    if claim.kind == "paper":
        compare["row"] = name(compare["row"])
    text = json.dumps({"kind": claim.kind, "compare": compare,
                       "criterion": claim.relative_bounds, "curve": claim.curve_test},
                      sort_keys=True, default=str)
    return f"{study.name}: {text}"


@dataclass(frozen=True)
class Multiplicity:
    """Holm's correction per paper over the distinct tests of its outcomes of record."""

    adjusted: Mapping[str, float]  # claim id → Holm-adjusted p (claims of record with a p)
    tests: Mapping[str, int]  # paper → distinct tests (Holm's m)
    significant: Mapping[str, int]  # paper → verdicts held or did not hold
    surviving: Mapping[str, int]  # paper → ... of which Holm-adjusted p < α
    shared: Mapping[str, tuple[str, ...]]  # claim id → other claims resting on its test


def multiplicity(results: Iterable[StudyResult], claims: Mapping[str, Claim],
                 alpha: float = ALPHA) -> Multiplicity:
    """Holm-adjusted p-values per paper: over every distinct test (:func:`test_key`) that
    an outcome of record with a p rests on, each test once however many claims share it;
    a claim's adjusted p is its test's. A held or did-not-hold verdict *survives* when its
    adjusted p is below the same α (a not-separable one reads the same either way)."""
    by_test: dict[str, dict[str, float]] = {}  # paper → test key → p
    keys: dict[str, str] = {}
    significant: Counter[str] = Counter()
    for claim_id, speaker in speakers(results).items():
        outcome, study = speaker.outcome, speaker.result.study
        entry = next((e for e in study.claims if e.id == claim_id), None)
        if outcome.p is None or entry is None or not outcome.verdict.counts:
            continue
        paper = claims[claim_id].paper
        key = test_key(study, bind_claim(claims[claim_id], entry))
        keys[claim_id] = key
        by_test.setdefault(paper, {}).setdefault(key, outcome.p)
    adjusted_by_key: dict[str, float] = {}
    for tests in by_test.values():
        adjusted_by_key.update(zip(tests, holm(list(tests.values())), strict=True))
    adjusted = {claim_id: adjusted_by_key[key] for claim_id, key in keys.items()}
    surviving: Counter[str] = Counter()
    for claim_id, speaker in speakers(results).items():
        if speaker.outcome.verdict in (Verdict.HELD, Verdict.NOT_HELD):
            paper = claims[claim_id].paper
            significant[paper] += 1
            surviving[paper] += claim_id in adjusted and adjusted[claim_id] < alpha
    shared = {claim_id: tuple(other for other, k in keys.items() if k == key and
                              other != claim_id) for claim_id, key in keys.items()}
    return Multiplicity(adjusted, {paper: len(tests) for paper, tests in by_test.items()},
                        dict(significant), dict(surviving),
                        {claim_id: others for claim_id, others in shared.items() if others})


def claim_verdicts(results: Iterable[StudyResult], claims: Mapping[str, Claim]
                   ) -> dict[str, Verdict]:
    """Every claim's verdict: its outcome of record's (:func:`outcomes_of_record`), *not
    testable* where the claim says so, else *not measured*."""
    verdicts = {claim.id: Verdict.NOT_MEASURED if claim.testable else Verdict.NOT_TESTABLE
                for claim in claims.values()}
    for claim_id, (_, outcome) in outcomes_of_record(results).items():
        verdicts[claim_id] = outcome.verdict
    return verdicts
