"""The default study's tables, Table 1 and Table 2 of Dufter & Schütze 2020, as mean ± std over
seeds beside the paper, with the sections the report gathers around them.

The numbers are the records the study's finished, evaluated MLflow runs carry (the design
card's "query MLflow"; :mod:`multilab.studies.run_records`), turned into rows by the one
table builder that ``study report`` uses on the committed files
(:func:`multilab.studies.tables.study_result`, the spec of the default study generated from
params.yaml: :mod:`multilab.studies.default`). Exactly one record per (resolved configuration,
seed) is used — the latest — and missing seeds are listed in the table, never silently
dropped. A run the store lost comes back from its committed record first
(:mod:`multilab.studies.restore`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from multilab import tracking
from multilab.config import Config
from multilab.data.layout import metric_name
from multilab.errors import UserError
from multilab.evaluation import verse_retrieval
from multilab.evaluation.wordorder import Correlation
from multilab.files import write_json, write_text
from multilab.lab.cells import cell, number, spread
from multilab.lab.languages import language_label
from multilab.lab.metric_table import (
    METRICS,
    PAPER_VALUES,
    PLOTS,
    TABLE2_IDS,
    dvc_metrics,
    mean_std,
)
from multilab.lab.modifications import (
    canonical_name,
    describe,
    same_modification,
    slug,
    split_modification,
)
from multilab.reporting.downstream_table import downstream_frame, downstream_markdown
from multilab.reporting.figures import curve_stats, metric_frame, study_figures
from multilab.reporting.liu_sections import liu_sections
from multilab.reporting.similarity_section import similarity_section
from multilab.reporting.word_order_table import (
    RETRIEVAL_SCATTER,
    WORD_ORDER_CHART,
    WORD_ORDER_SCATTER,
    correlation_markdown,
    plot_correlation,
    plot_word_order,
    read_word_order,
    retrieval_points,
    study_points,
    word_order_markdown,
)
from multilab.resolve import resolve_run
from multilab.studies.default import default_configurations, default_study
from multilab.studies.records import Record
from multilab.studies.restore import import_records
from multilab.studies.run_records import carrying_run, committed_records, records_of_runs
from multilab.studies.tables import same_configuration, study_result
from multilab.training.model_dir import model_fingerprint

log = logging.getLogger(__name__)


@dataclass
class Row:
    modification: str
    paper_id: str | None
    seeds_found: list[int]
    seeds_missing: list[int]
    stats: dict[str, tuple[float, float]]
    other_configurations: int = 0  # finished runs of this row trained with other parameters
    unverified: bool = False  # corpus/vocab not at hand: fingerprints could not be checked
    run_ids: tuple[str, ...] = ()  # the MLflow runs behind the numbers, one per seed


def finished_runs(cfg: Config) -> pd.DataFrame:
    """One evaluated, finished run per (fingerprint, seed): the latest.

    Runs left RUNNING by killed processes of this host are ended KILLED first, so the
    experiment never shows a run as live whose process is gone (a later resume of the same
    model reopens its run).
    """
    experiment_id = tracking.connect(cfg.paths, cfg.experiment)
    for run_id in tracking.end_orphaned_runs(experiment_id, None):
        log.warning("run %s was RUNNING but its process is gone: ended KILLED", run_id)
    runs = tracking.search_runs(cfg.paths, cfg.experiment)
    if runs.empty or "tags.fingerprint" not in runs:
        return runs.iloc[0:0]
    runs = runs[(runs["status"] == tracking.FINISHED) & runs["tags.fingerprint"].notna()]
    if "tags.evaluated" in runs:
        runs = runs[runs["tags.evaluated"] == "true"]
    else:
        return runs.iloc[0:0]
    runs = runs[runs["tags.profile"] == cfg.profile]
    runs = runs.sort_values("end_time", ascending=False)
    return runs.drop_duplicates(subset=["tags.fingerprint"], keep="first")


def expected_fingerprint(cfg: Config, modification: str, seed: int) -> str | None:
    """The fingerprint a run of the current configuration has, or None if it cannot be known.

    It needs the built corpus and vocabulary (their hashes are part of it): a report made
    away from the DVC workspace (only a tracking server at hand) cannot check it.
    """
    run = resolve_run(cfg, modification, seed)
    try:
        return model_fingerprint(run)
    except UserError:
        return None


def table_rows(cfg: Config, records: Sequence[Record], modifications: list[str]) -> list[Row]:
    """The rows of ``modifications`` from ``records`` (either serialisation: the copies the
    runs carry or the committed files give the same rows), by the one table builder on the
    default study's spec: exactly one record per (modification, seed), the latest of the
    *current* configuration.

    Records of a model trained with other parameters (an experiment with ``-S
    train.epochs=5``, an older corpus: another fingerprint, or another configuration) share
    the experiment but not the rows; they are counted and ignored."""
    study = default_study(cfg, modifications)
    configurations = default_configurations(cfg, study)
    labels = [row.label for row in study.rows]
    current = {(label, seed): expected_fingerprint(cfg, label, seed)
               for label in labels for seed in cfg.seeds}
    kept, other = [], Counter[str]()
    for record in records:
        owner = _owner(record, labels, cfg.seeds)
        if owner is not None and current[owner] not in (None, record.model.get("fingerprint")):
            other[owner[0]] += int(record.kind == "evaluate")
            continue
        kept.append(record)
    result = study_result(study, kept, {}, configurations=configurations)
    read = set(result.sources)
    for record in kept:  # of a row's model, another configuration: no row's record
        if record.kind == "evaluate" and record.path not in read and (
                owner := _owner(record, labels, cfg.seeds)) is not None and \
                not same_configuration(record.data["config"], configurations[owner[0]]):
            other[owner[0]] += 1
    rows = []
    for row in study.rows:
        found = sorted(result.seeds_found[row.label])
        mine = sorted((r for r in kept if r.path in read and _owner(r, [row.label], found)),
                      key=lambda r: r.model["seed"])
        cells = {key: result.cells[(row.label, key)].values for key in METRICS}
        stats = {key: mean_std(list(values)) for key, values in cells.items()
                 if values and len(values) == len(found)}  # a metric every seed has
        rows.append(Row(row.label, row.paper_id, found, [s for s in cfg.seeds if s not in found],
                        stats, other[row.label],
                        any(current[(row.label, seed)] is None for seed in cfg.seeds),
                        tuple(run for r in mine if (run := carrying_run(r)))))
    return rows


def _owner(record: Record, names: Sequence[str], seeds: Sequence[int]) -> tuple[str, int] | None:
    """The (modification of ``names``, seed of ``seeds``) whose model a record measures."""
    model = record.model
    if model is None or model.get("seed") not in seeds:
        return None
    name = next((n for n in names if same_modification(str(model["modification"]), n)), None)
    return None if name is None else (name, int(model["seed"]))


def _seeds_cell(row: Row) -> str:
    seeds = f"{len(row.seeds_found)}"
    if row.seeds_missing:
        seeds += f" (missing {', '.join(map(str, row.seeds_missing))})"
    if row.other_configurations:
        seeds += f"; {row.other_configurations} run(s) of other parameters ignored"
    if row.unverified:
        seeds += "; configuration not verified (no corpus/vocab here)"
    return seeds


def markdown_table(rows: list[Row], title: str) -> str:
    """Our values, one cell per metric: ``mean ± std`` (one seed: the value alone)."""
    head = ["ID", "modification", *[metric.column for metric in METRICS.values()], "seeds"]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |",
             "|---|---|" + "--:|" * len(METRICS) + "---|"]
    for row in rows:
        cells = [row.paper_id or "–", row.modification]
        for key in METRICS:
            if key not in row.stats:
                cells.append("–")
                continue
            mean, std = row.stats[key]
            # one seed has no spread: "± 0.000" would claim a measured std of zero
            cells.append(cell(mean, std if len(row.seeds_found) > 1 else None))
        cells.append(_seeds_cell(row))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paper_table(rows: list[Row], title: str) -> str:
    """The paper's means of the same rows, in the same columns, by the one precision rule
    (lab/cells.py) like ours; empty when none of the rows is a paper model."""
    known = [(row, PAPER_VALUES[row.paper_id]) for row in rows
             if row.paper_id in PAPER_VALUES]
    if not known:
        return ""
    head = ["ID", "modification", *[metric.column for metric in METRICS.values()]]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |",
             "|---|---|" + "--:|" * len(METRICS)]
    for row, paper in known:
        cells = [row.paper_id or "–", row.modification]
        cells += [number(paper.get(key)) for key in METRICS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rows_frame(rows: list[Row]) -> pd.DataFrame:
    records = []
    for row in rows:
        record = {"paper_id": row.paper_id, "modification": row.modification,
                  "description": describe(row.modification), "n_seeds": len(row.seeds_found),
                  "missing_seeds": " ".join(map(str, row.seeds_missing))}
        paper = PAPER_VALUES.get(row.paper_id or "", {})
        for key in METRICS:
            mean, std = row.stats.get(key, (float("nan"), float("nan")))
            record[f"{key}_mean"], record[f"{key}_std"] = mean, std
            record[f"{key}_paper"] = paper.get(key, float("nan"))
        records.append(record)
    return pd.DataFrame.from_records(records)


def latex_table(frame: pd.DataFrame) -> str:
    """Booktabs table: mean with the std as subscript, the paper's mean in brackets below."""
    lines = [
        "% mean_{std} over seeds; [paper's mean] below; n = seeds found",
        r"\begin{tabular}{ll" + "r" * len(METRICS) + "r}", r"\toprule",
        "ID & description & " + " & ".join(m.column.replace("μ", r"$\mu$").replace(
            "ρ", r"$\rho$").replace("τ", r"$\tau$") for m in METRICS.values()) + r" & n \\",
        r"\midrule",
    ]
    for _, r in frame.iterrows():
        paper_id = "" if pd.isna(r["paper_id"]) else str(r["paper_id"])
        cells = [paper_id, r["modification"].replace("_", r"\_")]
        below = ["", ""]
        for key in METRICS:
            mean, std = number(r[key + "_mean"]), spread(r[key + "_mean"], r[key + "_std"])
            cells.append(f"{mean}$_{{{std}}}$" if r["n_seeds"] > 1 and std else mean)
            paper = r[key + "_paper"]
            below.append("" if pd.isna(paper) else f"[{number(paper)}]")
        lines.append(" & ".join([*cells, str(r["n_seeds"])]) + r" \\")
        if any(below):
            lines.append(" & ".join([*below, ""]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def legend(rows: list[Row]) -> str:
    """What each modification of the table changes (the table's description column is the
    paper's short string)."""
    names = dict.fromkeys(part for row in rows for part in split_modification(row.modification))
    return "\n".join(f"- `{name}`: {describe(name)}" for name in names)


#: where the report writes the variant's curves (dvc.yaml's plots draw them beside the rows)
VARIANT_PLOTS = "plots/variant"


def variant_column(cfg: Config) -> str:
    """The variant's column in its plot data: ``variant <modification as written>``, which
    dvc.yaml's ``variant ${modification}`` names."""
    return f"variant {cfg.modification}"


def write_plot_data(cfg: Config, runs: pd.DataFrame, columns: dict[str, str] | None = None,
                    folder: Path | None = None) -> list[Path]:
    """One CSV per quantity for `dvc plots` (``reports/plots/<quantity>.csv``): a ``step``
    column and one column per study entry, spelt as in params.yaml (dvc.yaml draws them with
    ``y: ${study}``), each the mean over the seeds. Every entry has its column, empty where
    it has no value (``untrained`` never trains: no curve), so DVC always finds the fields.
    ``columns`` (column → modification) and ``folder``: another set of lines, the variant's."""
    folder = folder or cfg.paths.reports / "plots"
    columns = columns or {entry: entry for entry in cfg.study}
    written = []
    for quantity, metric in PLOTS.items():
        series = {}
        for column, modification in columns.items():
            mine = tracking.runs_of(runs, canonical_name(modification), cfg.seeds)
            frames = [metric_frame(cfg.paths, run_id, {quantity: metric})
                      for run_id in mine["run_id"]] if len(mine) else []
            stats = curve_stats(frames, quantity)
            series[column] = stats.set_index("step")["mean"] if len(stats) else pd.Series(
                dtype=float)
        table = pd.DataFrame(series).rename_axis("step").reset_index()
        if table.empty:
            continue
        written.append(write_text(folder / f"{quantity}.csv",
                                  table.to_csv(index=False, float_format="%.6g")))
    return written


def variant_section(cfg: Config, records: Sequence[Record], rows: list[Row]
                    ) -> tuple[str, list[Row]]:
    """The variant (params.yaml's ``modification``, `dvc exp run -S modification=…`) in the
    report: its own table when the study does not have it, a sentence when it does; and its
    row (none without a finished run)."""
    (row,) = table_rows(cfg, records, [cfg.modification])
    if not row.seeds_found:
        return "", []
    if row.modification in {r.modification for r in rows}:
        return (f"The variant (`modification: {cfg.modification}` in params.yaml) is the study's "
                f"row `{row.modification}` above."), [row]
    return markdown_table([row], f"Variant: {row.modification} (`modification: "
                                 f"{cfg.modification}`, `dvc exp run -S modification=…`)"), [row]


def write_metrics(cfg: Config, rows: list[Row]) -> list[Path]:
    """``metrics/study/<modification>.json`` per study row: the mean over seeds of each
    table metric under its DVC key (as in ``metrics/variant.json``: :func:`dvc_metrics`) and
    the number of seeds. One file per row, so ``dvc metrics show`` prints a row per model."""
    folder = cfg.paths.metrics / "study"
    wanted = {folder / f"{slug(row.modification)}.json": dvc_metrics(row.stats,
                                                                      len(row.seeds_found))
              for row in rows}
    for stale in folder.glob("*.json") if folder.exists() else []:
        if stale not in wanted:
            stale.unlink()  # a row the study no longer has
    return [write_json(path, summary) for path, summary in wanted.items()]


def _write_table(stem: Path, markdown: str, frame: pd.DataFrame) -> list[Path]:
    """One table as ``<stem>.md``, ``.csv`` and ``.tex``."""
    return [
        write_text(stem.with_suffix(".md"), markdown),
        write_text(stem.with_suffix(".csv"), frame.to_csv(index=False)),
        write_text(stem.with_suffix(".tex"), latex_table(frame)),
    ]


#: What the report says of the metrics a real-language study does not have.
OMITTED_FOR_VERSES = (
    "Real languages have no word-level gold alignment: word alignment (F1), word translation "
    "(τ) and μ, which averages τ, are not computed for them (– in Table 1); the paper's Table 1 "
    "(English + Fake-English) is not shown beside them. ρ is verse retrieval P@1 (gold: the "
    "verse id) averaged over every ordered pair of languages; the pairs are in the retrieval "
    "tables below. Perplexities in Table 1 are over all languages' verses; per language "
    "below (MLflow: `ppl_dev.<code>`)."
)


def retrieval_frame(cfg: Config, rows: list[Row], runs: pd.DataFrame) -> pd.DataFrame:
    """Verse retrieval P@1 of every ordered pair of languages at each evaluated layer, mean
    and std over the seeds behind each row (MLflow ``retrieval_p1.l<n>.<query>-<key>``)."""
    names = [metric_name(key) for key in cfg.languages]
    records = []
    for row in rows:
        mine = runs[runs["run_id"].isin(row.run_ids)]
        for column in sorted(c for c in runs.columns if c.startswith("metrics.retrieval_p1.l")):
            parts = column.removeprefix("metrics.retrieval_p1.").split(".", 1)
            if len(parts) != 2 or parts[1].count("-") != 1:
                continue
            query, key = parts[1].split("-")
            values = [float(v) for v in mine[column] if pd.notna(v)]
            if values and query in names and key in names:
                mean, std = mean_std(values)
                records.append({"modification": row.modification, "layer": int(parts[0][1:]),
                                "query": query, "key": key, "p1_mean": mean, "p1_std": std,
                                "n_seeds": len(values)})
    return pd.DataFrame.from_records(
        records, columns=["modification", "layer", "query", "key", "p1_mean", "p1_std",
                          "n_seeds"])


def retrieval_markdown(cfg: Config, frame: pd.DataFrame) -> str:
    """One matrix per (row, layer): query languages as rows, keys as columns, mean column."""
    names = [metric_name(key) for key in cfg.languages]
    parts = ["## Verse retrieval P@1 between the languages (mean over seeds)"]
    for (modification, layer), group in frame.groupby(["modification", "layer"], sort=False):
        matrix = {(r.query, r.key): r.p1_mean for r in group.itertuples()}
        if len(matrix) != len(names) * (len(names) - 1):
            continue
        parts.append(f"### {modification}, layer {layer}\n\n"
                     + verse_retrieval.matrix_table(matrix, names))
    return "\n\n".join(parts)


def perplexity_frame(cfg: Config, rows: list[Row], runs: pd.DataFrame) -> pd.DataFrame:
    """Train and dev perplexity of each language, mean and std over the seeds behind each
    row (MLflow ``ppl_train.<code>``, ``ppl_dev.<code>``)."""
    records = []
    for row in rows:
        mine = runs[runs["run_id"].isin(row.run_ids)]
        for name in (metric_name(key) for key in cfg.languages):
            record: dict[str, object] = {"modification": row.modification, "language": name}
            for split in ("train", "dev"):
                column = f"metrics.ppl_{split}.{name}"
                values = [float(v) for v in mine.get(column, pd.Series(dtype=float))
                          if pd.notna(v)]
                mean, std = mean_std(values) if values else (float("nan"), float("nan"))
                record |= {f"ppl_{split}_mean": mean, f"ppl_{split}_std": std}
            records.append(record)
    return pd.DataFrame.from_records(
        records, columns=["modification", "language", "ppl_train_mean", "ppl_train_std",
                          "ppl_dev_mean", "ppl_dev_std"])


def perplexity_markdown(frame: pd.DataFrame) -> str:
    """One row per (row of the study, language): its train and dev perplexity."""
    lines = ["## Perplexity per language (mean over seeds)", "",
             "| modification | language | ppl train | ppl dev |", "|---|---|--:|--:|"]
    for r in frame.itertuples():
        lines.append(f"| {r.modification} | {r.language} | {r.ppl_train_mean:,.0f} | "
                     f"{r.ppl_dev_mean:,.0f} |")
    return "\n".join(lines)


#: What the report writes under reports/ (its tables, figures and plot data). Those an earlier
#: report wrote and this one did not are removed at the end, once the new ones exist, so that
#: nothing of an earlier study lingers and a report that fails half-way leaves the previous
#: one in place: the stage's out is ``persist``, as commands outside the pipeline (``multilab
#: static``, ``mrr``, ``translate``, ``model-order``, ``similarity``) leave their results in
#: folders of reports/ for the report to gather. Patterns, never the folder itself:
#: ``paths.reports`` may be any folder.
REPORT_OUTPUTS = ("table1.*", "table2.*", "retrieval.*", "perplexity.csv", "downstream.*",
                  "word_order.md", "word_order_correlation.json", "liu.md", "similarity.md",
                  "static_vs_bert.csv", "figures/*.png", "figures/*.pdf", "plots/*.csv",
                  "plots/*/*.csv")  # the last: the variant's curves (and older layouts)


def clear_own_outputs(reports: Path, keep: set[Path] | None = None) -> None:
    """Remove the files an earlier report wrote (:data:`REPORT_OUTPUTS`) except ``keep``
    (this report's): the one place that clears them, so a section the study no longer has
    leaves nothing behind."""
    kept = {path.resolve() for path in keep or set()}
    for pattern in REPORT_OUTPUTS:
        for path in reports.glob(pattern):
            if path.is_file() and path.resolve() not in kept:
                path.unlink()


@dataclass
class Draft:
    """The report being written: its markdown after the intro, and the files written so far
    (only this report's are kept when the earlier report's go: :func:`clear_own_outputs`)."""

    body: str = ""
    written: list[Path] = field(default_factory=list)

    def add(self, section: str, files: Sequence[Path] = ()) -> None:
        self.body += ("\n\n" if self.body else "") + section
        self.written += files


def build_report(cfg: Config) -> list[Path]:
    """Write reports/table1.{md,csv,tex}, table2.{md,csv,tex} (when runs of the
    non-parallel rows exist), downstream.{md,csv} (when downstream results exist), figures,
    plot data and metrics/study/<row>.json."""
    runs, records = study_records(cfg)
    rows = table_rows(cfg, records, list(cfg.study))
    rows2 = [r for r in table_rows(cfg, records, list(TABLE2_IDS)) if r.seeds_found]
    if not any(r.paper_id in TABLE2_IDS[1:] for r in rows2):
        rows2 = []  # no non-parallel run: the original row alone compares nothing
    intro = report_intro(cfg)
    draft = Draft()
    draft.add(_table_with_paper(cfg, rows, "Table 1", "Table 1 of the paper (Dufter & "
                                "Schütze 2020), same rows"))
    if rows2:
        table2 = _table_with_paper(cfg, rows2, "Table 2 (parallel vs non-parallel corpus)",
                                   "Table 2 of the paper, same rows")
        draft.add(table2, _write_table(cfg.paths.reports / "table2", intro.replace(
            "Table 1", "Table 2", 1) + table2 + "\n", rows_frame(rows2)))
    add_sections(cfg, draft, rows, runs)
    variant, variant_rows = variant_section(cfg, records, rows)
    if variant:
        draft.add(variant)
    draft.add("## Modifications\n\n" + legend(rows + rows2 + variant_rows))
    used = add_figures(cfg, draft, rows, runs)  # from exactly the runs behind the numbers
    written = draft.written
    written += _write_table(cfg.paths.reports / "table1", intro + draft.body + "\n",
                            rows_frame(rows))
    written += write_metrics(cfg, rows)
    (cfg.paths.metrics / "study.json").unlink(missing_ok=True)  # the layout of old versions
    if not used.empty:
        written += write_plot_data(cfg, used)
    if variant_rows:  # its curves beside the rows' in `dvc plots show`
        mine = runs[runs["run_id"].isin(variant_rows[0].run_ids)]
        written += write_plot_data(cfg, mine, {variant_column(cfg): cfg.modification},
                                   cfg.paths.reports / VARIANT_PLOTS)
    record_groups(cfg, rows)
    written += [png.with_suffix(".pdf") for png in written  # each figure's print copy
                if png.suffix == ".png" and png.with_suffix(".pdf").is_file()]
    clear_own_outputs(cfg.paths.reports, set(written))  # only now: the new files exist
    return written


def study_records(cfg: Config) -> tuple[pd.DataFrame, list[Record]]:
    """The study's finished, evaluated runs and the records they carry, after the committed
    records of runs the store lost (or that lack their copy) were imported into it."""
    for run_id in import_records(cfg, committed_records(cfg)):  # mlruns/ lost: runs back
        log.warning("re-created run %s from its model's committed records", run_id)
    runs = finished_runs(cfg)
    if runs.empty:
        raise UserError(
            f"no finished, evaluated runs of profile {cfg.profile!r} in MLflow experiment "
            f"{cfg.experiment!r} ({tracking.tracking_uri(cfg.paths)}): train and evaluate "
            "first (`dvc repro`); a model whose run the store lost and whose record under "
            f"{cfg.paths.results} is gone too gets it back from `multilab evaluate <model dir>`"
        )
    return runs, records_of_runs(cfg, runs)


def report_intro(cfg: Config) -> str:
    """Table 1's heading and what its cells are (Table 2's, with its name)."""
    steps = ("" if cfg.profile == "paper" else f"Profile `{cfg.profile}` trains far fewer "
             "steps than the paper: see docs/REPRODUCTION.md.")
    head = f"# multilab: Table 1 (profile `{cfg.profile}`, experiment `{cfg.experiment}`)\n\n"
    if cfg.verses:  # the paper's tables are English + Fake-English: nothing to compare
        return head + (
            f"Languages: {', '.join(cfg.languages)} (verses of each edition). Mean ± std over "
            f"seeds {list(cfg.seeds)} of finished MLflow runs (a row of one seed shows its "
            "value alone). " + OMITTED_FOR_VERSES + " " + steps + "\n\n")
    return head + (
        f"Mean ± std over seeds {list(cfg.seeds)} of finished MLflow runs (a row of one "
        "seed shows its value alone: one seed has no spread); the paper's means of the "
        "same rows follow in a table of their own. ρ = sentence retrieval P@1, τ = word "
        "translation P@1, F1 = word alignment, μ = (ρ0 + ρ8 + τ0 + τ8) / 4. " + steps
        + "\n\n")


def _table_with_paper(cfg: Config, rows: list[Row], title: str, paper_title: str) -> str:
    """Our table of ``rows``, and the paper's of the same rows (not beside real languages)."""
    ours = markdown_table(rows, title)
    return ours if cfg.verses else _with_paper(ours, paper_table(rows, paper_title))


def add_sections(cfg: Config, draft: Draft, rows: list[Row], runs: pd.DataFrame) -> None:
    """The sections after the tables, each where its results exist: verse retrieval and
    perplexity per language (real languages), downstream, word order, Liu et al. 2020a/b's
    measurements and the similarity of models."""
    reports = cfg.paths.reports
    retrieval = pd.DataFrame()
    if cfg.verses:
        retrieval = retrieval_frame(cfg, rows, runs)
        ppl = perplexity_frame(cfg, rows, runs)
        section = retrieval_markdown(cfg, retrieval) + "\n\n" + perplexity_markdown(ppl)
        draft.add(section, [write_text(reports / "retrieval.md", section + "\n"),
                            write_text(reports / "retrieval.csv", retrieval.to_csv(index=False)),
                            write_text(reports / "perplexity.csv", ppl.to_csv(index=False))])
    downstream = downstream_frame(runs, {row.modification: list(row.run_ids) for row in rows},
                                  {row.modification: row.paper_id for row in rows})
    if not downstream.empty:  # `multilab downstream` has run for some of the study's models
        table = downstream_markdown(downstream)
        draft.add(table, [write_text(reports / "downstream.md", table + "\n"),
                          write_text(reports / "downstream.csv", downstream.to_csv(index=False))])
    word_order = read_word_order(cfg.paths.metrics)
    if word_order is not None:  # the `word_order` stage has run
        section, correlation_files = word_order_section(cfg, word_order, downstream,
                                                        retrieval, rows)
        draft.add(section, [write_text(reports / "word_order.md", section + "\n"),
                            *correlation_files])
    liu, liu_files = liu_sections(cfg)  # `multilab static` / `mrr` / `translate` results
    if liu:
        draft.add(liu, [write_text(reports / "liu.md", liu + "\n"), *liu_files])
    similarity, similarity_files = similarity_section(cfg)  # `multilab similarity` results
    if similarity:
        draft.add(similarity, [write_text(reports / "similarity.md", similarity + "\n"),
                               *similarity_files])


def add_figures(cfg: Config, draft: Draft, rows: list[Row], runs: pd.DataFrame
                ) -> pd.DataFrame:
    """The study's figures, drawn from exactly the runs behind the table's numbers, and
    their section; returns those runs (the plot data reads them too)."""
    behind = {run_id for row in rows for run_id in row.run_ids}
    used = runs[runs["run_id"].isin(behind)] if len(runs) else runs
    if not used.empty:
        draft.written += study_figures(cfg, used)
    figures = sorted({path for path in draft.written  # this report's, not an earlier one's
                      if path.suffix == ".png" and path.parent == cfg.paths.figures})
    if figures:
        draft.add("## Figures\n\n" + "\n".join(f"![{p.stem}](figures/{p.name})"
                                                  for p in figures))
    return used


def word_order_section(cfg: Config, data: dict, downstream: pd.DataFrame,
                       retrieval: pd.DataFrame, rows: list[Row]) -> tuple[str, list[Path]]:
    """The tau table, its chart, and the correlations of tau with the study's zero-shot
    accuracy and with its layer-8 verse retrieval (the first row's model) when the study has
    enough languages; the scatter plots also go to that model's MLflow runs."""
    languages = cfg.language_list
    labels = [language_label(language, languages) for language in languages]
    modification = rows[0].modification if rows else "?"
    files = [plot_word_order(data, cfg.paths.figures / WORD_ORDER_CHART)]
    sections = [word_order_markdown(data)]
    found: dict[str, Correlation] = {}
    measured = {
        "accuracy": (study_points(data, downstream, languages, labels), WORD_ORDER_SCATTER),
        "retrieval": (retrieval_points(data, retrieval, languages, list(cfg.languages),
                                       labels, modification), RETRIEVAL_SCATTER),
    }
    for measure, (points, figure) in measured.items():
        text, correlations = correlation_markdown(points, labels[0], modification,
                                                  measure=measure)
        sections.append(text)
        if correlations:
            found |= {f"{name} ({measure})" if measure != "accuracy" else name: corr
                      for name, corr in correlations.items()}
            scatter = plot_correlation(points, cfg.paths.figures / figure, measure)
            files.append(scatter)
            for run_id in rows[0].run_ids if rows else ():
                tracking.log_artifact_to_run(cfg.paths, run_id, scatter, "word-order")
    if found:
        write_json(cfg.paths.reports / "word_order_correlation.json",
                   {name: vars(corr) for name, corr in found.items()})
        files.append(cfg.paths.reports / "word_order_correlation.json")
    return "\n\n".join(sections), files


def _with_paper(ours: str, paper: str) -> str:
    return ours + ("\n\n" + paper if paper else "")


def record_groups(cfg: Config, rows: list[Row]) -> None:
    """Each row's parent run (the MLflow UI's row of the modification) carries the mean and
    std over its seeds and their mean curves (:func:`multilab.tracking.summarise_row`); the
    baseline's parent is kept first in the UI's list."""
    if not any(row.run_ids for row in rows):
        return
    groups = tracking.search_runs(cfg.paths, cfg.experiment, groups=True)
    column = f"tags.{tracking.ROLE_TAG}"
    if groups.empty or column not in groups:
        return
    groups = groups[groups[column] == tracking.GROUP]
    for row in rows:
        parent = groups[groups["tags.modification"].map(
            lambda m, name=row.modification: same_modification(m, name))]
        if parent.empty or not row.stats:
            continue
        tracking.summarise_row(cfg.paths, parent["run_id"].iloc[0], row.run_ids, row.stats)
    tracking.baseline_first(cfg.paths, tracking.connect(cfg.paths, cfg.experiment))
