"""A study is a file: one paper table (or claim set) declared in ``studies/<name>.yaml``.

The spec says what to run (languages, profile, shared settings, rows as modification strings,
seeds), what the paper reports for each row and metric (mean, and std where the paper gives
it, over ``paper_seeds``), and which claims of ``studies/claims/`` the rows test. Everything
is strictly validated, as ``params.yaml`` is: an unknown key, an unknown modification, a
claim naming a row or metric the study does not have is one line naming the file and the
valid values.

Example (abridged)::

    name: dufter2020-table1
    paper: dufter2020
    table: Table 1
    title: Architectural modifications on English + Fake-English
    languages: ["3", fake]
    profile: quick
    seeds: [42, 43, 44]
    settings: {}                 # params every row shares, as --set keys
    paper_seeds: 5
    paper_comparable: "no: the quick profile trains 2,300 of the paper's 13,524 updates"
    metrics: [mu, retrieval_p1.l8]
    paper_decimals: 2            # the paper's rounding: its .00 is anything within ±.005
    rows:
      - {id: "0", modification: original, paper: {mu: 0.70, retrieval_p1.l8: [0.97, 0.01]}}
      - {id: "18", modification: untrained, paper_comparable: true}   # no budget involved
      - {label: enfake-es, aliases: ["[v, enfake:3] joint"], modification: original,
         settings: {languages: "[v, enfake:3]", vocab.mode: joint}}    # a row's own languages
    claims:
      - dufter2020-t1-r1-lang-pos
      - {id: dufter2020-t1-r5-7-two-modifications, pending: "a mean over three rows"}

``records_from`` (optional): read only records imported from under this path, e.g. one GPU
call (``benchmarks/results/gpu-h200-2026-11-27/``): GPU reruns of one configuration are not
bit-identical, so a study of one call must not take a rerun's record of the same model.

``device`` (study or row, optional): the kind of device a row's records must come from,
``cpu`` or ``cuda`` (a record's ``provenance.machine.device`` up to its colon, and its model's
``device`` where the record names one). A row then reads that kind only, so its seeds never
mix devices; a seed recorded on another kind counts as missing, and ``study run`` trains it
on this kind (refusing to start on a machine that would train on another). The other kind's
records stay under ``results/``, in their own folder (``seed43-<fingerprint>-cuda``), and the
study page names them as kept, not read.

``supersedes`` (optional): the name of a study whose verdicts this one's replace for the
claims both test, once this one's are verdicts too (Table 3 in a regime where transfer is
readable supersedes its first, barely multilingual runs); the superseded study keeps its
table and records.

``fine_tune`` (study or row, optional): the edition a downstream record's classifier was
fine-tuned on (``multilab downstream --languages``: the first one). A model fine-tuned in both
directions has two downstream records; without ``fine_tune`` a row takes the newest of them.
A record of ``downstream --mds`` is read only by the ``downstream.mds.*`` metrics.

``figures`` (optional): figures ``multilab study report`` draws from the table's cells, one
point per row (the mean over seeds, ± std where a cell has ≥ 2 seeds), one panel per y metric,
written beside the study's markdown (``figures/<study>-<name>.png`` and a PDF) and linked
from it::

    figures:
      - name: rho-vs-minutes              # the file's name after the study's
        title: "Retrieval and transfer against training time"   # optional
        x: train.minutes                  # a metric of the study
        y: [retrieval_p1.l4, downstream.ratio.s]   # one or more metrics of the study
        axis_titles: {train.minutes: "training minutes"}   # optional: words for an axis

``spread_metrics`` (optional): metrics of the study whose cells the page counts against
the paper's spread, "k of n cells (p %) within the paper's mean ± std", over the rows with ≥ 3
of our seeds (:mod:`multilab.studies.standing`). ``runs_left: true`` (optional): the page lists
the (row, seed) pairs without a record, each priced in lane-hours as ``study next --lanes``
prices it.

``pair`` (row): the language pair (``3-s``: source, target) that ``<pair>`` stands for in
the study's ``mrr.<pair>.…`` and ``translate.<pair>.…`` metrics, so rows of different pairs
share columns.

``script`` (row): the command that writes the row's records where ``study run`` cannot train
the row itself (a similarity record of two independently trained models), with ``{seed}`` in
it: ``study run`` runs it from the project root for each seed the row lacks, booked in the
run ledger as any run.

``seeds`` (row, optional): the seeds the row is measured at, some of the study's: a row that
is one measurement by design (English against a second English seed, the control of Conneau
et al. 2020 §5) is complete with its one record, not "1 of 3 seeds"; the runner, the run
counts and the table's seeds column read the row's seeds.

``static: true`` (row): the row is the static embeddings of the study's corpus (``multilab
static``, seeded by the row's seed, run by ``study run`` over the grid of the study's
``static.*`` metrics), not a lab model; it reads ``static.*`` metrics only and needs no
modification. A similarity record (two models) belongs to the row of its first
model.

A claim entry may bind the paper's comparison to the study (``compare``: the claim's compare
fields in the study's terms, e.g. ``{a: window-20, b: original, metric: mrr.3-fake.best}``);
the claim list keeps the paper's wording, the study says which rows and metric test it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from multilab.errors import UserError
from multilab.files import parse_yaml
from multilab.lab import modifications as mods
from multilab.lab.metric_table import LAYER_METRICS, evaluation_metric, evaluation_metric_names
from multilab.studies.claims import COMPARE_FIELDS, LAB, OPTIONAL_COMPARE, PAPERS, Claim
from multilab.studies.metrics import MINUS, metric_sources
from multilab.studies.records import safe_name
from multilab.studies.verdict import PaperValue

SPEC_FIELDS = ("name", "paper", "table", "title", "languages", "profile", "seeds", "settings",
               "paper_seeds", "paper_decimals", "paper_comparable", "metrics", "rows", "claims",
               "about", "records_from", "fine_tune", "figures", "supersedes", "spread_metrics",
               "runs_left", "device")
_REQUIRED = ("name", "paper", "table", "title", "languages", "profile", "seeds", "metrics",
             "rows")
ROW_FIELDS = ("id", "label", "aliases", "modification", "paper", "settings", "paper_comparable",
              "fine_tune", "static", "pair", "script", "seeds", "device")
#: ``device`` (study or row): the kind of device a row's records must come from (a record's
#: ``provenance.machine.device`` up to its colon, and its model's training device)
DEVICE_KINDS = ("cpu", "cuda")
CLAIM_ENTRY_FIELDS = ("id", "pending", "not_testable", "compare")
FIGURE_FIELDS = ("name", "title", "x", "y", "axis_titles")
PROFILES = ("smoke", "quick", "paper", "real", "real-quick")
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)+$")


def is_study_name(name: str) -> bool:
    """Whether ``name`` may name a study: lowercase words joined by ``-`` (a page's file name)."""
    return bool(_NAME.match(name))


@dataclass(frozen=True)
class Row:
    label: str
    modification: str
    paper_id: str | None
    paper: Mapping[str, PaperValue]
    settings: Mapping[str, Any] = field(default_factory=dict)
    # True: this row's magnitude is comparable with the paper's although the study's is not
    # (an untrained row does not depend on the training budget)
    paper_comparable: bool = False
    # other names the claim list uses for this row (a paper's own label: ``en-es``)
    aliases: tuple[str, ...] = ()
    fine_tune: str | None = None  # the downstream records' fine-tuning edition (None: any)
    static: bool = False  # the static embeddings of the corpus (multilab static), no model
    pair: str | None = None  # ``<pair>`` in the study's metrics: ``3-s`` (source-target)
    #: the command that writes the row's records, run from the project root with ``{seed}``
    #: filled in, for a row ``study run`` cannot train itself (a similarity of two models)
    script: str | None = None
    #: the seeds this row is measured at, where fewer than the study's: a row that is one
    #: measurement by design (a control pair of two seeds); None: the study's seeds
    seeds: tuple[int, ...] | None = None
    #: the kind of device (:data:`DEVICE_KINDS`) this row's records must come from, over the
    #: study's ``device``; None: the study's
    device: str | None = None

    def script_command(self, seed: int) -> str:
        """The row's ``script`` for one seed (``{seed}`` filled in)."""
        return str(self.script).format(seed=seed)


@dataclass(frozen=True)
class ClaimEntry:
    id: str
    pending: str | None = None  # the comparison is not expressed by the runner yet: why
    not_testable: str | None = None  # the study's own reason (e.g. the NSP head never learned)
    # the claim's compare fields bound to this study (rows, metric), over the claim list's
    compare: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FigureSpec:
    """A figure of the study's cells: ``y`` metrics (one panel each) against ``x``."""

    name: str
    x: str
    y: tuple[str, ...]
    title: str | None = None
    axis_titles: Mapping[str, str] = field(default_factory=dict)  # metric → words


@dataclass(frozen=True)
class Study:
    name: str
    paper: str
    table: str
    title: str
    languages: tuple[str, ...]
    profile: str
    seeds: tuple[int, ...]
    settings: Mapping[str, Any]
    paper_seeds: int | None
    paper_decimals: int | None  # the paper's rounding: .00 means within ±.005
    paper_comparable: str | None  # None: comparable; otherwise why the magnitude is not
    metrics: tuple[str, ...]
    rows: tuple[Row, ...]
    claims: tuple[ClaimEntry, ...]
    about: str | None
    source: Path
    records_from: str | None = None  # only records imported from under this path
    #: only the records whose file lies in this folder (the default study's: its experiment's,
    #: where ``dvc repro`` writes them); None: every record handed to the table builder
    records_under: Path | None = None
    fine_tune: str | None = None  # the downstream records' fine-tuning edition (None: any)
    figures: tuple[FigureSpec, ...] = ()
    # the study whose verdicts this one's replace for the claims both test (a regime that
    # makes the table readable: its records are the table's records of record)
    supersedes: str | None = None
    #: the metrics whose cells the page counts against the paper's mean ± std (the paper's
    #: headline columns); empty: no such count
    spread_metrics: tuple[str, ...] = ()
    #: whether the page lists the (row, seed) pairs without a record, priced in lane-hours
    runs_left: bool = False
    #: the kind of device (:data:`DEVICE_KINDS`) every row's records must come from, where a
    #: row names none of its own; None: any (a row of mixed devices is flagged)
    device: str | None = None

    def device_of(self, row: Row) -> str | None:
        """The kind of device a row's records must come from (its own, else the study's)."""
        return row.device or self.device

    def row(self, label: str) -> Row | None:
        """The row of this label or alias, else of this paper ID where one row has it (the
        table's ``ID`` column: ``--rows 4``)."""
        named = next((row for row in self.rows if label == row.label or label in row.aliases),
                     None)
        if named is not None:
            return named
        by_id = [row for row in self.rows if row.paper_id is not None and row.paper_id == label]
        return by_id[0] if len(by_id) == 1 else None

    def seeds_of(self, row: Row) -> tuple[int, ...]:
        """The seeds a row is measured at: its own where it names them, else the study's."""
        return self.seeds if row.seeds is None else row.seeds


def split_row_names(text: str, studies: Sequence[Study]) -> list[str]:
    """``--rows`` as row names: split at commas, but a label that has commas itself (``row 8
    model, [3, s, i]``) is one name where a study has that row; the longest such name wins."""
    parts = text.split(",")
    names: list[str] = []
    start = 0
    while start < len(parts):
        for end in range(len(parts), start, -1):
            name = ",".join(parts[start:end]).strip()  # the text as typed between the commas
            if end == start + 1 or any(study.row(name) is not None for study in studies):
                break
        if name:
            names.append(name)
        start = end
    return names


def _fail(source: Path, message: str) -> UserError:
    return UserError(f"{source}: {message}")


def _reject_unknown(keys: Any, valid: tuple[str, ...], source: Path, where: str) -> None:
    unknown = sorted(set(keys) - set(valid))
    if unknown:
        raise _fail(source, f"{where}unknown key {unknown[0]!r}; valid: {', '.join(valid)}")


def _unknown_metric(source: Path, metric: str) -> None:
    """A metric no record holds (``mu2``): refused, not shown as an empty column."""
    names = evaluation_metric_names()
    close = difflib.get_close_matches(metric, [*names, *(f"{family}.l{layer}" for family in
                                                         LAYER_METRICS for layer in range(13))],
                                      n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise _fail(source, f"metric {metric!r} is no metric of the metric table{hint}; valid: "
                f"{', '.join(names)}, or a metric of mrr., translate., similarity., static., "
                "downstream., curve., train.minutes")


def _paper_value(value: Any, paper_seeds: int | None, source: Path, where: str) -> PaperValue:
    """``0.70`` (mean only) or ``[0.97, 0.01]`` (mean, std)."""
    mean, std = (value, None) if not isinstance(value, list) else (
        value + [None] * (2 - len(value)) if len(value) in (1, 2) else (None, None))
    ok = isinstance(mean, int | float) and not isinstance(mean, bool) and (
        std is None or (isinstance(std, int | float) and std >= 0))
    if not ok:
        raise _fail(source, f"{where}: {value!r}; a paper value is a number or [mean, std]")
    return PaperValue(float(mean), None if std is None else float(std), paper_seeds)


def _row(raw: Any, index: int, metrics: tuple[str, ...], paper_seeds: int | None,
         source: Path, study_seeds: tuple[int, ...]) -> Row:
    if not isinstance(raw, dict):
        raise _fail(source, f"row {index + 1}: a mapping of {', '.join(ROW_FIELDS)}")
    _reject_unknown(raw, ROW_FIELDS, source, f"row {index + 1}: ")
    static = raw.get("static", False)
    if not isinstance(static, bool):
        raise _fail(source, f"row {index + 1}: static {static!r}: true or false")
    modification = raw.get("modification", "original" if static else None)
    if not isinstance(modification, str):
        raise _fail(source, f"row {index + 1}: modification (a name of `multilab ids`) needed")
    try:
        mods.resolve_recipe(modification)
    except (UserError, KeyError, ValueError) as err:
        raise _fail(source, f"row {index + 1}: {str(err).splitlines()[0]}") from None
    label = str(raw.get("label") or ("static" if static else modification))
    paper = raw.get("paper") or {}
    if not isinstance(paper, dict):
        raise _fail(source, f"row {label}: paper must map metrics to values")
    _reject_unknown(paper, metrics, source, f"row {label}: paper: ")
    settings = raw.get("settings") or {}
    if not isinstance(settings, dict):
        raise _fail(source, f"row {label}: settings must map --set keys to values")
    comparable = raw.get("paper_comparable", False)
    if not isinstance(comparable, bool):
        raise _fail(source, f"row {label}: paper_comparable {comparable!r}: true or false")
    aliases = raw.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise _fail(source, f"row {label}: aliases must be a list of names")
    fine_tune = raw.get("fine_tune")
    if fine_tune is not None and not isinstance(fine_tune, str):
        raise _fail(source, f"row {label}: fine_tune {fine_tune!r}: an edition code")
    pair = raw.get("pair")
    if pair is not None and (not isinstance(pair, str) or "-" not in pair):
        raise _fail(source, f"row {label}: pair {pair!r}: <source>-<target>, e.g. 3-s")
    script = raw.get("script")
    if script is not None and (not isinstance(script, str) or "{seed}" not in script):
        raise _fail(source, f"row {label}: script {script!r}: a command with {{seed}} in it, "
                    "e.g. 'bash scripts/seed003_similarity.sh --seed {seed} l'")
    seeds = raw.get("seeds")
    if seeds is not None and (not isinstance(seeds, list) or not seeds or not all(
            isinstance(seed, int) and not isinstance(seed, bool) and seed in study_seeds
            for seed in seeds) or len(set(seeds)) != len(seeds)):
        raise _fail(source, f"row {label}: seeds {seeds!r}: some of the study's seeds "
                    f"({', '.join(map(str, study_seeds))}), each once")
    device = _device_kind(raw.get("device"), source, f"row {label}: ")
    return Row(label=label, modification=modification, aliases=tuple(aliases),
               paper_comparable=comparable, fine_tune=fine_tune, static=static, pair=pair,
               script=script, seeds=None if seeds is None else tuple(seeds), device=device,
               paper_id=None if raw.get("id") is None else str(raw["id"]),
               paper={key: _paper_value(value, paper_seeds, source, f"row {label}: {key}")
                      for key, value in paper.items()},
               settings=settings)


def _claim_entry(raw: Any, source: Path) -> ClaimEntry:
    if isinstance(raw, str):
        return ClaimEntry(raw)
    if not isinstance(raw, dict) or "id" not in raw:
        raise _fail(source, f"claims: {raw!r}; an entry is a claim id or {{id: …, pending: "
                    "why}}")
    _reject_unknown(raw, CLAIM_ENTRY_FIELDS, source, f"claim {raw['id']}: ")
    compare = raw.get("compare") or {}
    if not isinstance(compare, dict):
        raise _fail(source, f"claim {raw['id']}: compare must map the claim's compare fields "
                    "to the study's rows and metric")
    return ClaimEntry(str(raw["id"]), raw.get("pending"), raw.get("not_testable"), compare)


def _figures(raw: Any, metrics: tuple[str, ...], source: Path) -> tuple[FigureSpec, ...]:
    """The ``figures`` list, each entry's keys and metrics checked against the study's."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _fail(source, "figures must be a list of {name, x, y, title, axis_titles}")
    figures: list[FigureSpec] = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise _fail(source, f"figure {index + 1}: a mapping of {', '.join(FIGURE_FIELDS)}")
        _reject_unknown(entry, FIGURE_FIELDS, source, f"figure {index + 1}: ")
        name = entry.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name):
            raise _fail(source, f"figure {index + 1}: name {name!r}: lowercase words joined "
                        "by '-' (the file's name after the study's)")
        if any(figure.name == name for figure in figures):
            raise _fail(source, f"figure {name}: two figures share this name")
        x, y = entry.get("x"), entry.get("y")
        ys = [y] if isinstance(y, str) else y
        if not isinstance(ys, list) or not ys or not all(isinstance(m, str) for m in ys):
            raise _fail(source, f"figure {name}: y {y!r}: a metric or a list of metrics of "
                        "the study")
        if len(set(ys)) != len(ys):
            raise _fail(source, f"figure {name}: y {ys!r} names a metric twice")
        for key, metric in [("x", x), *(("y", m) for m in ys)]:
            if not isinstance(metric, str) or metric not in metrics:
                raise _fail(source, f"figure {name}: {key} {metric!r} is not among the "
                            f"study's metrics: {', '.join(metrics)}")
        title = entry.get("title")
        if title is not None and (not isinstance(title, str) or not title.strip()):
            raise _fail(source, f"figure {name}: title {title!r}: words, or leave it out")
        axis_titles = entry.get("axis_titles") or {}
        if not isinstance(axis_titles, dict):
            raise _fail(source, f"figure {name}: axis_titles must map the figure's metrics "
                        "to words")
        _reject_unknown(axis_titles, (x, *ys), source, f"figure {name}: axis_titles: ")
        for metric, words in axis_titles.items():
            if not isinstance(words, str) or not words.strip():
                raise _fail(source, f"figure {name}: axis_titles: {metric}: {words!r}: words")
        figures.append(FigureSpec(name=name, x=x, y=tuple(ys), title=title,
                                  axis_titles=dict(axis_titles)))
    return tuple(figures)


def load_study(source: Path, claims: Mapping[str, Claim]) -> Study:
    """Read and validate one spec against the claim list."""
    source = Path(source)
    raw = _read_spec(source)
    name = _check_identity(raw, source)
    seeds = _check_spec_seeds(raw["seeds"], source)
    languages = raw["languages"]
    if not isinstance(languages, list) or not languages:
        raise _fail(source, f"languages {languages!r}: a list of edition codes")
    metrics = _check_metrics(raw["metrics"], source)
    paper_seeds, decimals, not_comparable = _paper_reporting(raw, source)
    settings = raw.get("settings") or {}
    if not isinstance(settings, dict):
        raise _fail(source, "settings must map --set keys to values")
    rows = _spec_rows(raw["rows"], metrics, paper_seeds, source, seeds, name)
    entries = tuple(_claim_entry(c, source) for c in raw.get("claims") or [])
    records_from, fine_tune, supersedes = _provenance(raw, source, name)
    study = Study(name=name, paper=raw["paper"], table=str(raw["table"]), title=str(raw["title"]),
                  languages=tuple(str(code) for code in languages), profile=raw["profile"],
                  seeds=seeds, settings=settings, paper_seeds=paper_seeds,
                  paper_decimals=decimals,
                  paper_comparable=not_comparable, metrics=metrics, rows=rows, claims=entries,
                  about=raw.get("about"), source=source, records_from=records_from,
                  fine_tune=fine_tune, figures=_figures(raw.get("figures"), metrics, source),
                  supersedes=supersedes,
                  spread_metrics=_spread_metrics(raw.get("spread_metrics"), metrics, source),
                  runs_left=_runs_left(raw.get("runs_left", False), source),
                  device=_device_kind(raw.get("device"), source, ""))
    for entry in entries:
        _check_claim(study, entry, claims)
    return study


def _read_spec(source: Path) -> dict[str, Any]:
    """The spec's YAML as a mapping with every required field and no unknown one."""
    try:
        raw = parse_yaml(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise _fail(source, f"not readable YAML ({first})") from None
    if not isinstance(raw, dict):
        raise _fail(source, "a study is a mapping of " + ", ".join(SPEC_FIELDS))
    _reject_unknown(raw, SPEC_FIELDS, source, "")
    missing = [key for key in _REQUIRED if key not in raw]
    if missing:
        raise _fail(source, f"missing {', '.join(missing)}")
    return raw


def _check_identity(raw: dict[str, Any], source: Path) -> str:
    """The study's name (its file's), paper and profile; returns the name."""
    name = raw["name"]
    if not isinstance(name, str) or not _NAME.match(name) or source.stem != name:
        raise _fail(source, f"name {name!r}: lowercase words joined by '-', the file's name")
    if raw["paper"] not in PAPERS and raw["paper"] != LAB:
        raise _fail(source, f"paper {raw['paper']!r}; valid: {', '.join([*PAPERS, LAB])}")
    if raw["paper"] == LAB and raw.get("claims"):
        raise _fail(source, f"paper {LAB!r} (the lab's own study) tests no paper's claims; "
                    "name the paper whose claims the rows test")
    if raw["profile"] not in PROFILES:
        raise _fail(source, f"profile {raw['profile']!r}; valid: {', '.join(PROFILES)}")
    return name


def _check_spec_seeds(seeds: Any, source: Path) -> tuple[int, ...]:
    """Integers >= 0, each once: one record counted as several seeds is a false verdict."""
    if not isinstance(seeds, list) or not seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise _fail(source, f"seeds {seeds!r}: a list of integers >= 0")
    if len(set(seeds)) != len(seeds):
        twice = next(seed for seed in seeds if seeds.count(seed) > 1)
        raise _fail(source, f"seeds {seeds!r}: seed {twice} is listed twice; each seed once, "
                    f"e.g. {sorted(set(seeds))}")
    return tuple(seeds)


def _check_metrics(metrics: Any, source: Path) -> tuple[str, ...]:
    """Metric keys of a known form, each evaluation part one the pipeline measures."""
    if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str)
                                                                for m in metrics):
        raise _fail(source, f"metrics {metrics!r}: a list of metric keys")
    for metric in metrics:
        try:
            found = metric_sources(metric.replace("<pair>", "a-b"))
        except ValueError:
            raise _fail(source, f"metric {metric!r}: not a form of its kind (see `multilab."
                        "studies.metrics.metric_source`: e.g. mrr.3-fake.best, translate."
                        "<pair>.bleu1.l11.a3, similarity.cka.floor_gap, static.skipgram.w5."
                        "rall.mrr, downstream.zero_shot.s)") from None
        for part, kind in zip(metric.split(MINUS), found, strict=True):
            if kind.kind == "evaluate" and not evaluation_metric(part.strip()):
                _unknown_metric(source, part.strip())
    return tuple(metrics)


def _paper_reporting(raw: dict[str, Any], source: Path
                     ) -> tuple[int | None, int | None, str | None]:
    """How the paper reports the table: its seed count, its decimals, and why it is not
    comparable (None: it is)."""
    paper_seeds = raw.get("paper_seeds")
    if paper_seeds is not None and (not isinstance(paper_seeds, int) or paper_seeds < 1):
        raise _fail(source, f"paper_seeds {paper_seeds!r}: the paper's seed count or null")
    decimals = raw.get("paper_decimals")
    if decimals is not None and (not isinstance(decimals, int) or isinstance(decimals, bool)
                                 or not 0 <= decimals <= 6):
        raise _fail(source, f"paper_decimals {decimals!r}: the decimals the paper reports, 0-6")
    comparable = raw.get("paper_comparable", True)
    if comparable is True:
        return paper_seeds, decimals, None
    if isinstance(comparable, str) and comparable.startswith("no:"):
        return paper_seeds, decimals, comparable[3:].strip()
    raise _fail(source, f"paper_comparable {comparable!r}: true, or 'no: <why>'")


def _spec_rows(entries: Any, metrics: tuple[str, ...], paper_seeds: int | None, source: Path,
               seeds: tuple[int, ...], name: str) -> tuple[Row, ...]:
    """The rows, each label and alias once and each its own data folder."""
    if not isinstance(entries, list) or not entries:
        raise _fail(source, "rows must be a non-empty list")
    rows = tuple(_row(r, i, metrics, paper_seeds, source, seeds) for i, r in enumerate(entries))
    labels = [label for row in rows for label in (row.label, *row.aliases)]
    if len(set(labels)) != len(labels):
        raise _fail(source, f"two rows share a label or alias: {labels}")
    folders: dict[str, str] = {}
    for row in rows:  # a row's own data folder is named after its label, sanitised
        other = folders.setdefault(safe_name(row.label), row.label)
        if other != row.label:
            raise _fail(source, f"rows {other!r} and {row.label!r} share the folder name "
                        f"{safe_name(row.label)!r} (row-<label> in artifacts/studies/{name}/: "
                        "the second would train on the first's data); labels that differ in "
                        "letters or digits, not only in spaces or punctuation")
    return rows


def _device_kind(value: Any, source: Path, where: str) -> str | None:
    """A ``device`` value: one of :data:`DEVICE_KINDS`, or absent."""
    if value is not None and value not in DEVICE_KINDS:
        raise _fail(source, f"{where}device {value!r}: the kind of device the records must "
                    f"come from, one of {', '.join(DEVICE_KINDS)} (or leave it out)")
    return value


def _provenance(raw: dict[str, Any], source: Path, name: str
                ) -> tuple[str | None, str | None, str | None]:
    """Where the records came from, the fine-tuning edition, the study this one replaces."""
    records_from = raw.get("records_from")
    if records_from is not None and (not isinstance(records_from, str) or not records_from):
        raise _fail(source, f"records_from {records_from!r}: a path the records were imported "
                    "from (provenance.imported_from), or null")
    fine_tune = raw.get("fine_tune")
    if fine_tune is not None and not isinstance(fine_tune, str):
        raise _fail(source, f"fine_tune {fine_tune!r}: an edition code, or null")
    supersedes = raw.get("supersedes")
    if supersedes is not None and (not isinstance(supersedes, str) or supersedes == name
                                   or not _NAME.match(supersedes)):
        raise _fail(source, f"supersedes {supersedes!r}: the name of another study, or null")
    return records_from, fine_tune, supersedes


def _spread_metrics(raw: Any, metrics: tuple[str, ...], source: Path) -> tuple[str, ...]:
    """``spread_metrics``: metrics of the study, each once (a cell counted twice would
    inflate the share)."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw or not all(isinstance(m, str) for m in raw) \
            or len(set(raw)) != len(raw):
        raise _fail(source, f"spread_metrics {raw!r}: a list of the study's metrics, each once")
    unknown = [metric for metric in raw if metric not in metrics]
    if unknown:
        raise _fail(source, f"spread_metrics: {unknown[0]!r} is not among the study's metrics: "
                    f"{', '.join(metrics)}")
    return tuple(raw)


def _runs_left(raw: Any, source: Path) -> bool:
    if not isinstance(raw, bool):
        raise _fail(source, f"runs_left {raw!r}: true or false")
    return raw


def bind_claim(claim: Claim, entry: ClaimEntry) -> Claim:
    """The claim as this study tests it: its compare fields with the study's bindings."""
    if not entry.compare:
        return claim
    return replace(claim, compare={**claim.compare, **entry.compare})


#: compare fields a study may not rebind: what the paper claims (its direction, shape, value)
PAPERS_OWN = ("direction", "shape", "paper", "over")
#: the claim kinds a study computes
COMPUTED_KINDS = ("rows", "paper", "curve", "similarity", "correlation")
#: a curve or correlation claim a study reads at two points, as a rows claim: arms ``a`` and
#: ``b`` on ``metric`` (and ``metric_b``), the direction the claim's own (a curve's shape:
#: "above the original curve at early steps" is knn-replace > original on ``curve.mu.at20``;
#: a positive correlation: the arm of higher x > the other)
TWO_ARM_KINDS = ("curve", "correlation")
TWO_ARM_FIELDS = ("a", "b", "metric")
#: a claim of two parts ("μ rises late, once the training perplexity has flattened") read as
#: several two-arm comparisons, each in the claim's direction, held only when all hold:
#: ``all: [{a, b, metric, metric_b}, …]``
ALL_OF = "all"


#: the claim kinds a study may read as ``all`` of several two-arm parts (a rows claim: a
#: paper-level aggregate, "overlap plays a negligible role" over Spanish, Hindi and Russian,
#: each part on its own language's rows and column, in the claim's direction)
ALL_OF_KINDS = ("rows", *TWO_ARM_KINDS)


def two_arm_parts(claim: Claim) -> list[Mapping[str, Any]]:
    """The two-arm comparisons a bound claim is read as, each in the claim's direction:
    its ``all`` parts, or a curve or correlation read at two points; none: the claim is read
    as its kind says."""
    compare = claim.compare
    if ALL_OF in compare and claim.kind in ALL_OF_KINDS:
        return list(compare[ALL_OF])
    return [compare] if claim.kind in TWO_ARM_KINDS and "a" in compare else []


def claim_row_names(study: Study, claim: Claim) -> list[str]:
    """The row names a bound claim reads, as written (``mean of A, B`` stays one name): both
    arms of each two-arm part, a rows claim's a and b, a paper claim's row, a similarity's
    row, or a curve's or correlation's rows (every row of the study where it names none)."""
    compare = claim.compare
    if parts := two_arm_parts(claim):
        return [str(part[key]) for part in parts for key in ("a", "b") if key in part]
    if named := {"rows": ("a", "b"), "paper": ("row",), "similarity": ("a",)}.get(claim.kind):
        return [str(compare[key]) for key in named if key in compare]
    if claim.kind in ("curve", "correlation"):
        return [str(name) for name in compare.get("rows") or [row.label for row in study.rows]]
    return []


def _check_claim(study: Study, entry: ClaimEntry, claims: Mapping[str, Claim]) -> None:
    source = study.source
    if entry.id not in claims:
        raise _fail(source, f"claim {entry.id!r} is not in studies/claims/ (ids.lock)")
    claim = claims[entry.id]
    if claim.paper != study.paper:
        raise _fail(source, f"claim {entry.id!r} is {claim.paper}'s, the study is {study.paper}'s")
    valid = (*COMPARE_FIELDS[claim.kind], *OPTIONAL_COMPARE,
             *(TWO_ARM_FIELDS if claim.kind in TWO_ARM_KINDS else ()),
             *((ALL_OF,) if claim.kind in ALL_OF_KINDS else ()))
    _reject_unknown(entry.compare, valid, source, f"claim {entry.id}: compare: ")
    fixed = sorted(set(entry.compare) & set(PAPERS_OWN))
    if fixed:
        raise _fail(source, f"claim {entry.id}: compare: {fixed[0]!r}: the claim's "
                    f"{fixed[0]} is the paper's; a study binds rows and metrics only")
    if entry.pending or entry.not_testable or not claim.testable:
        return
    claim = bind_claim(claim, entry)
    labels = ", ".join(row.label for row in study.rows)
    if ALL_OF in entry.compare:
        parts = entry.compare[ALL_OF]
        if not isinstance(parts, list) or not parts or not all(
                isinstance(part, Mapping) for part in parts):
            raise _fail(source, f"claim {entry.id}: compare: all: a list of two-arm readings "
                        f"({{{', '.join(TWO_ARM_FIELDS)}[, metric_b]}})")
        for part in parts:
            _reject_unknown(part, (*TWO_ARM_FIELDS, "metric_b"), source,
                            f"claim {entry.id}: compare: all: ")
    for part in entry.compare.get(ALL_OF, [entry.compare]):
        two_arms = claim.kind in TWO_ARM_KINDS and ("a" in part or "b" in part)
        missing = [key for key in TWO_ARM_FIELDS if key not in part]
        if (ALL_OF in entry.compare or two_arms) and missing:
            raise _fail(source, f"claim {entry.id}: compare: read as two arms, it needs "
                        f"{', '.join(TWO_ARM_FIELDS)} (missing {missing[0]!r})")
    for name in claim_row_names(study, claim):
        try:
            group_rows(study, name)
        except KeyError as missing_row:
            raise _fail(source, f"claim {entry.id}: row {missing_row.args[0]!r} is not a row of "
                        f"the study; rows: {labels} (or mark the claim pending: why)") from None
    metric_names = claim_metrics(claim, study)
    for metric in metric_names:
        if metric not in study.metrics:
            raise _fail(source, f"claim {entry.id}: metric {metric!r} is not among the "
                        f"study's metrics: {', '.join(study.metrics)}")
    if claim.kind not in COMPUTED_KINDS:
        raise _fail(source, f"claim {entry.id}: a {claim.kind} claim is not run by studies yet;"
                    " mark it pending: why")


#: how a claim names several rows at once: ``mean of A, B, C`` (one arm: each seed's mean
#: over the rows), ``difference of A, B`` (one arm: each seed's A minus B, the Δ between two
#: conditions) and ``each of IDs 1–8`` (every row of those paper IDs, one test each)
MEAN_OF, EACH_OF, DIFFERENCE_OF = "mean of ", "each of ", "difference of "
#: a downstream claim's baseline arm (``majority baseline``, ``majority class``): the majority
#: class accuracy of the other arm's own downstream records, seed by seed
MAJORITY = "majority"


def group_rows(study: Study, name: str) -> tuple[str, list[Row]]:
    """A claim's arm as ``(kind, rows)``: ``("row", [row])`` for one row (label or alias),
    ``("mean", rows)`` for ``mean of A, B``, ``("difference", [A, B])`` for ``difference of
    A, B``, ``("each", rows)`` for ``each of IDs 1–8`` or ``each of A, B``, ``("majority",
    [])`` for the majority-class baseline. KeyError names a row (or ID) the study lacks."""
    kind, text = "row", name
    if name.startswith(MAJORITY):
        return "majority", []
    if name.startswith(MEAN_OF):
        kind, text = "mean", name[len(MEAN_OF):]
    elif name.startswith(DIFFERENCE_OF):
        kind, text = "difference", name[len(DIFFERENCE_OF):]
    elif name.startswith(EACH_OF):
        kind, text = "each", name[len(EACH_OF):]
    if kind == "row":
        labels = [text]
    elif text.startswith("IDs "):
        first, _, last = text[4:].replace("–", "-").partition("-")
        wanted = [str(i) for i in range(int(first), int(last or first) + 1)]
        by_id = {row.paper_id: row.label for row in study.rows if row.paper_id}
        missing = [i for i in wanted if i not in by_id]
        if missing:
            raise KeyError(f"ID {missing[0]}")
        labels = [by_id[i] for i in wanted]
    else:
        labels = [part.strip() for part in text.split(",") if part.strip()]
    rows = []
    for label in labels:
        row = study.row(label)
        if row is None:
            raise KeyError(label)
        rows.append(row)
    if kind == "difference" and len(rows) != 2:
        raise KeyError(f"{name} (a difference needs two rows)")
    return kind, rows


def resolve_metric(metric: str, study: Study) -> str:
    """A claim's metric in the study's terms: a placeholder (``downstream.zero_shot.<lang>``,
    the claim's language left open) is the study's one metric of that prefix, where the study
    has exactly one (``downstream.zero_shot.l`` for an English–French study)."""
    if "<" not in metric or not metric.endswith(">"):
        return metric
    prefix = metric[:metric.index("<")]
    found = [m for m in study.metrics if m.startswith(prefix) and "." not in m[len(prefix):]]
    return found[0] if len(found) == 1 else metric


def claim_metrics(claim: Claim, study: Study) -> list[str]:
    """The study metrics a claim reads (a layer curve reads its first and last layer, or
    the two metrics a study binds: the earlier layers' and the later layers')."""
    compare = claim.compare
    if claim.kind in ALL_OF_KINDS and ALL_OF in compare:
        return list(dict.fromkeys(resolve_metric(str(part[key]), study)
                                  for part in compare[ALL_OF]
                                  for key in ("metric", "metric_b") if key in part))
    two_arms = claim.kind in TWO_ARM_KINDS and "a" in compare
    if (claim.kind == "rows" or two_arms) and "metric_b" in compare:
        return [resolve_metric(str(compare[key]), study) for key in ("metric", "metric_b")]
    if claim.kind in ("rows", "paper") or two_arms:
        return [resolve_metric(str(compare["metric"]), study)]
    if claim.kind == "curve" and compare["over"] == "layers":
        if isinstance(compare["metric"], list):  # bound as [earlier layers, later layers]
            return [resolve_metric(str(metric), study) for metric in compare["metric"]]
        layers = [m for m in study.metrics if m.startswith(f"{compare['metric']}.l")]
        return layers or [f"{compare['metric']}.l0"]
    if claim.kind == "curve" and isinstance(compare["metric"], list):  # one row, metric by metric
        return [resolve_metric(str(metric), study) for metric in compare["metric"]]
    if claim.kind == "curve":
        return [resolve_metric(str(compare["metric"]), study)]
    if claim.kind == "similarity":
        return [str(compare["measure"])]
    if claim.kind == "correlation":
        return [resolve_metric(str(compare[key]), study) for key in ("x", "y")]
    return []


def load_studies(folder: Path, claims: Mapping[str, Claim]) -> dict[str, Study]:
    """Every ``<name>.yaml`` directly in ``folder`` (the claims live in a subfolder)."""
    studies = {}
    for source in sorted(Path(folder).glob("*.yaml")):
        study = load_study(source, claims)
        studies[study.name] = study
    for study in studies.values():
        if study.supersedes is not None and study.supersedes not in studies:
            raise _fail(study.source, f"supersedes {study.supersedes!r}: no such study; "
                        f"studies: {', '.join(studies)}")
    return studies
