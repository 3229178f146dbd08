"""The report's sections for Liu et al. 2020a/b: word retrieval MRR of static
embeddings and of the study's BERTs against data size and context window, and the heat maps of
unsupervised token translation.

Reads what the commands left in ``reports/``: ``static/<pair>.json`` (``multilab static``),
``word_retrieval/<model>-<pair>/word_retrieval.json`` (``multilab mrr``) and
``translation/<model>-<pair>/`` (``multilab translate``). Nothing there, no section: these are
commands a researcher runs on chosen models, not stages of every study.

A BERT point is its best layer's MRR, with the layer named, since a static model has one
layer and the question is whether BERT aligns words *at all* better; the per-layer values are
in each JSON and in the model's MLflow run. Only ``original`` and ``window-<w>`` models are
points: another modification changes more than the data size or the window. The data size of
a BERT is the number of train rows its project pretrained on (``train.max_train_sentences``
applied), recorded by ``multilab mrr``; a JSON written before that was recorded is left out of
the figures, not guessed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from multilab import tracking
from multilab.config import Config
from multilab.files import copy_file, write_text
from multilab.reporting.figures import save_png

MRR_BY_ROWS = "mrr-by-train-rows"
MRR_BY_WINDOW = "mrr-by-window"
TRANSLATION_PREFIX = "translation-"
WHOLE = 0  # window 0: whole sentences (verses), no cut
MEASURES = ("convert_rate", "bleu1")


def _read(paths: Iterable[Path]) -> list[dict[str, Any]]:
    return [json.loads(path.read_text(encoding="utf-8")) for path in sorted(paths)]


def _is_point(modification: str) -> bool:
    return modification == "original" or modification.startswith("window-")


def mrr_frame(static: list[dict[str, Any]], bert: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per (pair, model, train rows, window): MRR and P@1, the mean over seeds; the
    BERT rows at their best layer (module doc)."""
    rows = []
    for record in static:
        pair = f"{record['source']}-{record['target']}"
        rows += [{"pair": pair, "model": result["model"], "rows": result["rows"],
                  "window": result["window"], "mrr": result["mrr"], "p1": result["p1"],
                  "layer": None, "seed": record["seed"]} for result in record["results"]]
    for record in bert:
        if not _is_point(record["modification"]) or record.get("train_rows") is None:
            continue
        best = max(record["trained"], key=lambda layer: layer["mrr"])
        rows.append({"pair": f"{record['source']}-{record['target']}", "model": "BERT",
                     "rows": record["train_rows"], "window": record.get("window", WHOLE),
                     "mrr": best["mrr"], "p1": best["p1"], "layer": best["layer"],
                     "seed": record["seed"]})
    columns = ["pair", "model", "rows", "window", "mrr", "p1", "layer", "seeds"]
    if not rows:
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame(rows)
    keys = ["pair", "model", "rows", "window"]
    grouped = frame.groupby(keys, sort=True, dropna=False).agg(
        mrr=("mrr", "mean"), p1=("p1", "mean"),
        layer=("layer", lambda values: values.mode().iloc[0] if values.notna().any() else None),
        seeds=("seed", "nunique")).reset_index()
    return grouped[columns]


def _window_label(window: int) -> str:
    return "whole" if window == WHOLE else str(window)


def mrr_markdown(frame: pd.DataFrame) -> str:
    """The points of both figures as one table."""
    lines = ["## Static embeddings against BERT: word retrieval MRR (Liu et al. 2020a/b)", "",
             "`multilab static` and `multilab mrr` results found in `reports/`; BERT at its "
             "best layer (named), mean over the seeds found.", "",
             "| pair | model | train rows | window | MRR | P@1 | BERT layer | seeds |",
             "|---|---|--:|--:|--:|--:|--:|--:|"]
    for row in frame.itertuples(index=False):
        layer = "–" if pd.isna(row.layer) else str(int(row.layer))
        lines.append(f"| {row.pair} | {row.model} | {row.rows:,} | {_window_label(row.window)} "
                     f"| {row.mrr:.3f} | {row.p1:.3f} | {layer} | {row.seeds} |")
    return "\n".join(lines)


def plot_mrr(frame: pd.DataFrame, axis: str, pair: str, path: Path) -> Path:
    """MRR against ``axis`` (``rows`` or ``window``) for one pair: one line per model and
    value of the other axis; the whole-sentence window drawn rightmost."""
    other = "window" if axis == "rows" else "rows"
    data = frame[frame["pair"] == pair]
    windows = sorted(data["window"].unique(), key=lambda w: (w == WHOLE, w))
    position = {w: i for i, w in enumerate(windows)}
    figure = Figure(figsize=(5.0, 3.6))
    axes = figure.add_subplot()
    for (model, fixed), line in data.groupby(["model", other], sort=True):
        line = line.sort_values(axis, key=lambda s: s.map(position) if axis == "window" else s)
        xs = line["window"].map(position) if axis == "window" else line["rows"]
        held = f"window {_window_label(fixed)}" if other == "window" else f"{fixed:,} rows"
        label = f"{model}, {held}"
        axes.plot(list(xs), list(line["mrr"]), marker="o", label=label)
    if axis == "window":
        axes.set_xticks(range(len(windows)), [_window_label(w) for w in windows])
        axes.set_xlabel("context window (word-pieces)")
    else:
        axes.set_xscale("log")
        sizes = sorted(data["rows"].unique())
        axes.set_xticks(sizes, [f"{size:,}" for size in sizes])
        axes.minorticks_off()
        axes.set_xlabel("train rows per language")
    axes.set_ylabel("word retrieval MRR")
    axes.set_title(f"{pair}: static embeddings against BERT", fontsize=9)
    axes.legend(fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_png(figure, path)


def best_cell(record: dict[str, Any], measure: str) -> tuple[float, float, int]:
    """(value, α, layer) of the highest cell of a translation heat map (the first on ties)."""
    grid = np.asarray(record[measure], dtype=float)  # alphas × layers
    row, column = np.unravel_index(int(np.nanargmax(grid)), grid.shape)
    return float(grid[row, column]), record["alphas"][row], record["layers"][column]


def translation_markdown(records: list[tuple[str, dict[str, Any]]]) -> str:
    """One row per translated pair: the best convert rate and the best BLEU-1, each with its
    (α, layer) (the two need not coincide: a full conversion can decode nonsense), and the
    unshifted model's values. BLEU-1 (in [0, 1] in the JSON) × 100, the paper's scale."""
    lines = ["## Unsupervised token translation by the mean difference shift "
             "(Liu et al. 2020b §4)", "",
             "| model | pair | best convert rate (α, layer) | best BLEU-1 × 100 (α, layer) | "
             "unshifted convert rate / BLEU-1 × 100 | heat maps |", "|---|---|---|---|---|---|"]
    for name, record in records:
        plain = record["unshifted"]
        rate, rate_alpha, rate_layer = best_cell(record, "convert_rate")
        bleu, bleu_alpha, bleu_layer = best_cell(record, "bleu1")
        maps = ", ".join(f"`{TRANSLATION_PREFIX}{name}-{m}.png`" for m in MEASURES)
        lines.append(
            f"| {record['modification']} s{record['seed']} | {record['source']} → "
            f"{record['target']} | {rate:.3f} ({rate_alpha:g}, {rate_layer}) | {100 * bleu:.1f} "
            f"({bleu_alpha:g}, {bleu_layer}) | {plain['convert_rate']:.3f} / "
            f"{100 * plain['bleu1']:.1f} | {maps} |")
    return "\n".join(lines)


def liu_sections(cfg: Config) -> tuple[str, list[Path]]:
    """The report's MRR section with its two figures per pair (also logged to the static
    run and the BERTs' runs behind them), and the translation section with its heat maps
    copied into the report's figures; ``("", [])`` when no command has left results."""
    reports, figures = cfg.paths.reports, cfg.paths.figures  # cleared by the report
    sections, files = [], []
    static = _read(reports.glob("static/*.json"))
    bert = _read(reports.glob("word_retrieval/*/word_retrieval.json"))
    frame = mrr_frame(static, bert)
    if not frame.empty:
        sections.append(mrr_markdown(frame))
        files.append(write_text(reports / "static_vs_bert.csv", frame.to_csv(index=False)))
        for pair in sorted(frame["pair"].unique()):
            stem = pair.replace(":", "_")
            run_ids = {r["run_id"] for r in static + bert if r.get("run_id")
                       and f"{r['source']}-{r['target']}" == pair}
            for axis, name in (("rows", MRR_BY_ROWS), ("window", MRR_BY_WINDOW)):
                path = plot_mrr(frame, axis, pair, figures / f"{name}-{stem}.png")
                files.append(path)
                for run_id in sorted(run_ids):
                    if tracking.run_exists(cfg.paths, run_id):
                        tracking.log_artifact_to_run(cfg.paths, run_id, path, "word-retrieval")
    translated = [(path.parent.name, json.loads(path.read_text(encoding="utf-8")))
                  for path in sorted(reports.glob("translation/*/translation.json"))]
    if translated:
        sections.append(translation_markdown(translated))
        for name, _ in translated:
            for measure in MEASURES:
                source = reports / "translation" / name / f"{measure}.png"
                if source.exists():
                    target = figures / f"{TRANSLATION_PREFIX}{name}-{measure}.png"
                    copy_file(source, target)
                    if source.with_suffix(".pdf").exists():  # the print copy beside it
                        copy_file(source.with_suffix(".pdf"), target.with_suffix(".pdf"))
                    files.append(target)
    return "\n\n".join(sections), files
