"""The report's Conneau et al. 2020 §5 section (Figure 2): how similar two independently
trained models are, layer by layer.

Reads what ``multilab similarity A B --languages X,Y`` left in
``reports/similarity/<X>-<Y>/similarity.json``; nothing there, no section (a command run on
chosen models, not a stage of every study). Each measure gets a table row per pair (its best
layer against the untrained models' value at that layer: parallel verses share lengths and
positions, so the floor is not zero and the gap is what to read) and Figure 2's panel, one line
per pair, in the report's figures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from multilab.config import Config
from multilab.evaluation.model_similarity import MEASURE_LABELS, MEASURES, pairs_figure

FIGURE_PREFIX = "figure2-"


def read_records(reports: Path) -> list[dict[str, Any]]:
    """Every pair `multilab similarity` measured into this reports folder, by folder name."""
    return [json.loads(path.read_text(encoding="utf-8"))
            for path in sorted(reports.glob("similarity/*/similarity.json"))]


def similarity_markdown(records: list[dict[str, Any]]) -> str:
    """One table: per pair and measure, the best layer's value beside the untrained floor."""
    lines = ["## Similarity of two independently trained models (Conneau et al. 2020 §5, "
             "Figure 2)", "",
             "Each pair: model A reads edition A, model B edition B, the same Old Testament "
             "verses (`multilab similarity`). Best layer of the trained models, then the "
             "untrained models of the same shapes at that layer (the floor: parallel verses "
             "share lengths and positions) and the gap. Word translation uses a dictionary "
             "(identity for one edition, else silver IBM-1 matches: not PanLex), contextual "
             "words its pairs' aligned occurrences (not fast_align).", "",
             "| A–B | verses | dictionary (pairs) | aligned occurrences | measure | best layer "
             "| trained | untrained | gap |", "|---|---|---|---|---|---|---|---|---|"]
    for record in records:
        pair = "–".join(record["editions"])
        dictionary = f"{record['dictionary']['kind']} ({record['dictionary']['pairs']})"
        occurrences = record.get("aligned_occurrences", "–")
        for measure in MEASURES:
            if measure not in record["trained"]:
                continue  # measured before this measure existed
            trained, floor = record["trained"][measure], record["untrained"][measure]
            best = max(range(len(trained)), key=trained.__getitem__)
            lines.append(f"| {pair} | {record['verses']} | {dictionary} | {occurrences} | "
                         f"{MEASURE_LABELS[measure]} | {record['layers'][best]} | "
                         f"{trained[best]:.3f} | {floor[best]:.3f} | "
                         f"{trained[best] - floor[best]:+.3f} |")
    return "\n".join(lines)


def similarity_section(cfg: Config) -> tuple[str, list[Path]]:
    """The section and Figure 2's panels (``figure2-<measure>.png`` in the report's figures);
    ``("", [])`` when no pair was measured."""
    records = read_records(cfg.paths.reports)
    if not records:
        return "", []
    figures = [pairs_figure(records, measure, cfg.paths.figures / f"{FIGURE_PREFIX}{measure}.png")
               for measure in MEASURES if any(measure in r["trained"] for r in records)]
    return similarity_markdown(records), figures
