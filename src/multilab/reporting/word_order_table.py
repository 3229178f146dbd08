"""The report's word-order section: each edition's Kendall's tau beside Dufter & Schütze
2020's Table 4, and its correlation with the study's zero-shot accuracy (Dufter & Schütze 2020
App. B.2) and with its verse retrieval at layer 8.

Reads ``metrics/word_order.json`` (the ``word_order`` stage) and the downstream and retrieval
frames the report already built. Dufter & Schütze 2020 correlates mBERT's XNLI accuracy over 15
languages;
here the accuracy is the study's own model's (its first row, mean over seeds) on the book-group
task, so a correlation needs a study of at least three languages besides English (say so
otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from multilab.data.layout import metric_name
from multilab.evaluation.wordorder import Correlation, correlate
from multilab.lab.cells import cell, number
from multilab.lab.languages import Language
from multilab.labels import label_points
from multilab.reporting.figures import save_png

WORD_ORDER_JSON = "word_order.json"
WORD_ORDER_CHART = "word-order.png"
WORD_ORDER_SCATTER = "word-order-vs-zero-shot.png"
RETRIEVAL_SCATTER = "word-order-vs-retrieval.png"
#: The layer of Dufter & Schütze 2020's ρ₈, whose verse retrieval the lab correlates with tau.
RETRIEVAL_LAYER = 8
#: A uniformly random order's expected tau with Birch & Osborne's square root (1 − √½).
RANDOM_TAU = 0.29
#: Dufter & Schütze 2020, Table 4 (by ISO code): Kendall's tau against English and mBERT's zero-shot
#: XNLI accuracy (%). The languages the Bible DB lacks (th, ur, bg, el) are kept: the table shows
#: the paper's rows whole.
PAPER_TABLE4: dict[str, tuple[float, float]] = {
    "en": (1.0, 81.4), "ar": (0.72, 64.9), "de": (0.74, 71.1), "fr": (0.80, 73.8),
    "ru": (0.72, 69.0), "th": (0.71, 55.8), "ur": (0.59, 58.0), "zh": (0.68, 69.3),
    "bg": (0.75, 68.9), "el": (0.77, 66.4), "es": (0.76, 74.3), "hi": (0.58, 60.0),
    "sw": (0.73, 50.4), "tr": (0.47, 61.6), "vi": (0.78, 69.5),
}
#: Dufter & Schütze 2020's correlations (Pearson, in %, "46% when disregarding English and 64% when
#: including English").
PAPER_PEARSON = {"with English": 0.64, "without English": 0.46}
MIN_LANGUAGES = 3


def read_word_order(metrics_dir: Path) -> dict | None:
    """The stage's output, or None before the stage has run."""
    path = metrics_dir / WORD_ORDER_JSON
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def word_order_frame(data: Mapping) -> pd.DataFrame:
    """One row per edition, highest tau first, with the paper's tau of the same language."""
    rows = []
    for code, entry in data["editions"].items():
        # the paper's English row is the reference itself, not another English text
        same = entry["iso"] != "en" or code == data["reference"]
        paper = PAPER_TABLE4.get(entry["iso"]) if same else None
        rows.append({"edition": code, "iso": entry["iso"], "name": entry["name"],
                     "tau": entry["tau"], "tau_std": entry["tau_std"],
                     "tau_linked": entry.get("tau_linked", float("nan")),
                     "aligned_share": entry["aligned_share"], "verses": entry["verses"],
                     "paper_tau": paper[0] if paper else float("nan")})
    return pd.DataFrame.from_records(rows).sort_values(["tau", "edition"], ascending=[False, True])


def word_order_markdown(data: Mapping) -> str:
    """The table beside Dufter & Schütze 2020's Table 4."""
    frame = word_order_frame(data)
    lines = [
        "### Word order: Kendall's tau against English (Dufter & Schütze 2020 App. B.2, "
        "Table 4)", "",
        f"Each edition's New Testament aligned with edition {data['reference']} (IBM Model 1 "
        f"scores + SimAlign's Match; docs/notes/reproduction-log.md says why not VecMap'd "
        f"fastText), "
        f"tau = 1 − √(discordant / pairs) per verse (1 = English order, 0 = reversed, "
        f"≈ {RANDOM_TAU} random), mean ± std over the same {data['verses']} verses for every "
        "edition. Other English editions show the measure's own noise (alignment errors pull "
        "tau towards the random value); the paper's tau is mBERT-aligned XNLI. *Linked*: the "
        "same alignments scored over the aligned words only (an unaligned word otherwise moves "
        "with its left neighbour, which counts as no reordering: fewer links, higher tau).", "",
        "| edition | language | tau (ours) | linked | aligned | tau (paper) |",
        "|---|---|--:|--:|--:|--:|",
    ]
    for _, row in frame.iterrows():
        # the one precision rule (lab/cells.py), the paper's values too
        lines.append(f"| {row['edition']} | {row['name']} | {cell(row['tau'], row['tau_std'])} "
                     f"| {number(row['tau_linked'])} | {row['aligned_share']:.0%} | "
                     f"{number(row['paper_tau'])} |")
    return "\n".join(lines)


def study_points(data: Mapping, downstream: pd.DataFrame, languages: Sequence[Language],
                 labels: Sequence[str]) -> dict[str, tuple[float, float]]:
    """``label → (tau, zero-shot accuracy)`` for the study's languages that are editions
    scored by the stage, from the downstream frame's first row (the study's first model)."""
    if downstream.empty:
        return {}
    first = downstream.iloc[0]
    points = {}
    for language, label in zip(languages, labels, strict=True):
        entry = data["editions"].get(language.edition)
        accuracy = first.get(f"acc.{label}_mean")
        if language.is_edition and entry and accuracy is not None and not pd.isna(accuracy):
            points[label] = (float(entry["tau"]), float(accuracy))
    return points


def retrieval_points(data: Mapping, retrieval: pd.DataFrame, languages: Sequence[Language],
                     keys: Sequence[str], labels: Sequence[str], modification: str,
                     *, layer: int = RETRIEVAL_LAYER) -> dict[str, tuple[float, float]]:
    """``label → (tau, verse retrieval P@1)`` for the study's editions after the first:
    retrieval at ``layer`` between the first language (English) and the language, the mean
    of both directions (each a mean over seeds), of the row ``modification``. English has no
    point: retrieval of a language against itself is not measured."""
    if retrieval.empty:
        return {}
    mine = retrieval[(retrieval["modification"] == modification)
                     & (retrieval["layer"] == layer)]
    p1 = {(r.query, r.key): r.p1_mean for r in mine.itertuples()}
    english = metric_name(keys[0])
    points = {}
    for language, key, label in zip(languages[1:], keys[1:], labels[1:], strict=True):
        entry = data["editions"].get(language.edition)
        both = [p1.get((english, metric_name(key))), p1.get((metric_name(key), english))]
        if language.is_edition and entry and all(v is not None and not pd.isna(v) for v in both):
            points[label] = (float(entry["tau"]), float(np.mean(both)))
    return points


#: What each correlated measure is: section title, the sentence defining it, the plot's axis.
MEASURES = {
    "accuracy": ("Word order against zero-shot accuracy",
                 "accuracy = book-group test accuracy (in-language for English, zero-shot "
                 "otherwise).", "book-group accuracy"),
    "retrieval": ("Word order against verse retrieval",
                  f"P@1 = verse retrieval at layer {RETRIEVAL_LAYER} between English and the "
                  "language, mean of both directions. English has no retrieval against "
                  "itself, so only the correlation without English exists; Dufter & Schütze 2020 "
                  "correlates tau with accuracy only (its Pearson is shown for scale).",
                  f"verse retrieval P@1 (layer {RETRIEVAL_LAYER})"),
}


def correlation_markdown(points: Mapping[str, tuple[float, float]], english: str,
                         modification: str, *, measure: str = "accuracy",
                         ) -> tuple[str, dict[str, Correlation]]:
    """Pearson and Spearman of tau against ``measure`` (``accuracy`` or ``retrieval``), with
    English (when it has a point) and without, or why there are none."""
    title, definition, _ = MEASURES[measure]
    taus = {label: tau for label, (tau, _) in points.items()}
    values = {label: value for label, (_, value) in points.items()}
    others = [label for label in points if label != english]
    head = [f"### {title}", ""]
    if len(others) < MIN_LANGUAGES:
        return "\n".join([*head,
            f"Not computed: the study has {len(others)} zero-shot language(s) with a tau "
            f"({', '.join(others) or 'none'}); a correlation needs at least {MIN_LANGUAGES} "
            "besides English (Dufter & Schütze 2020 uses 14), e.g. `dvc exp run -S "
            "'languages=[3,s,i,r,c,y,t,9,l,h,7]'`."]), {}
    found: dict[str, Correlation] = {}
    for method in ("pearson", "spearman"):
        if english in taus:
            found[f"{method} with English"] = correlate(taus, values, method=method)
        found[f"{method} without English"] = correlate(
            taus, values, method=method, exclude=(english,) if english in taus else ())
    lines = [*head,
        f"Model: the study's `{modification}` (mean over its seeds); {definition}", "",
        "| correlation | r | p | languages | paper (Pearson) |", "|---|--:|--:|--:|--:|"]
    for name, corr in found.items():
        paper = PAPER_PEARSON.get(name.split(" ", 1)[1]) if name.startswith("pearson") else None
        lines.append(f"| {name} | {number(corr.r)} | {number(corr.p)} | {corr.n} | "
                     f"{number(paper)} |")
    return "\n".join(lines), found


def plot_word_order(data: Mapping, path: Path) -> Path:
    """Bar chart of every edition's tau (paper's tau as dots where it has the language)."""
    frame = word_order_frame(data)
    figure = Figure(figsize=(max(6.0, 0.32 * len(frame) + 2), 3.6))
    axes = figure.add_subplot()
    positions = range(len(frame))
    colours = ["tab:blue" if iso == "en" else "tab:gray" for iso in frame["iso"]]
    axes.bar(positions, frame["tau"], yerr=frame["tau_std"], color=colours, capsize=2,
             label="ours (IBM-1 + Match, Bible)")
    axes.scatter(positions, frame["paper_tau"], color="tab:red", zorder=3, s=14,
                 label="Dufter & Schütze 2020 (mBERT + Match, XNLI)")
    axes.axhline(RANDOM_TAU, color="black", linewidth=0.8, linestyle=":", label="random order")
    axes.set_xticks(list(positions), [f"{e} {i}" for e, i in zip(frame["edition"], frame["iso"],
                                                                   strict=True)],
                    rotation=90, fontsize=7)
    axes.set_ylabel("Kendall's tau vs English")
    axes.set_ylim(0, 1.05)
    axes.legend(fontsize=7, loc="upper right")
    axes.set_title(f"Word order against edition {data['reference']}", fontsize=9)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_png(figure, path)


def plot_correlation(points: Mapping[str, tuple[float, float]], path: Path,
                     measure: str = "accuracy") -> Path:
    """Scatter of tau against ``measure`` (zero-shot accuracy or verse retrieval), one
    labelled point per language."""
    figure = Figure(figsize=(4.5, 3.6), layout="constrained")
    axes = figure.add_subplot()
    for tau, accuracy in points.values():
        axes.scatter(tau, accuracy, color="tab:blue")
    axes.margins(x=0.12, y=0.08)  # room for the outermost labels inside the frame
    axes.set_xlabel("Kendall's tau vs English")
    axes.set_ylabel(MEASURES[measure][2])
    label_points(axes, list(points.values()), list(points), ["black"] * len(points))
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_png(figure, path)

