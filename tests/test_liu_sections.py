"""The report's seeds 001/004 sections: MRR against data size and window (static embeddings
and BERT), and the token-translation heat maps, from the JSON the commands leave."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure

from multilab.reporting.figures import save_png
from multilab.reporting.liu_sections import liu_sections, mrr_frame
from multilab.reporting.report import clear_own_outputs
from tests.helpers import smoke_config


def static_record(seed: int = 0) -> dict[str, Any]:
    results = [{"model": model, "rows": rows, "window": window, "mrr": mrr, "p1": mrr / 2}
               for model, rows, window, mrr in [("skipgram", 100, 5, 0.10),
                                                ("skipgram", 100, 20, 0.12),
                                                ("skipgram", 400, 5, 0.20),
                                                ("skipgram", 400, 20, 0.22)]]
    return {"source": "3", "target": "fake", "seed": seed, "results": results}


def bert_record(modification: str, rows: int | None, window: int, best: float, seed: int = 0
                ) -> dict[str, Any]:
    layers = [{"layer": k, "mrr": m, "p1": m / 2} for k, m in enumerate([0.1, best, 0.2])]
    record = {"source": "3", "target": "fake", "modification": modification, "seed": seed,
              "trained": layers, "untrained": layers, "window": window, "run_id": None}
    if rows is not None:
        record["train_rows"] = rows
    return record


def test_points_of_static_models_and_of_berts_at_their_best_layer() -> None:
    bert = [bert_record("original", 400, 0, 0.9), bert_record("original", 400, 0, 0.7, seed=1),
            bert_record("window-20", 400, 20, 0.5), bert_record("original", 100, 0, 0.3),
            bert_record("lang-pos", 400, 0, 0.99),  # not a data-size or window point
            bert_record("original", None, 0, 0.99)]  # written before train_rows was recorded
    frame = mrr_frame([static_record()], bert)
    berts = frame[frame["model"] == "BERT"].set_index(["rows", "window"])
    assert sorted(berts.index) == [(100, 0), (400, 0), (400, 20)]
    assert berts.loc[(400, 0), "mrr"] == pytest.approx(0.8)  # mean of two seeds
    assert berts.loc[(400, 0), "seeds"] == 2 and berts.loc[(400, 0), "layer"] == 1
    assert berts.loc[(400, 20), "p1"] == pytest.approx(0.25)
    static = frame[frame["model"] == "skipgram"]
    assert len(static) == 4 and static["layer"].isna().all()
    assert mrr_frame([], []).empty


def test_sections_figures_and_stale_files(tmp_path: Path) -> None:
    cfg = smoke_config(tmp_path)
    reports = cfg.paths.reports
    (reports / "static").mkdir(parents=True)
    (reports / "static" / "3-fake.json").write_text(json.dumps(static_record()))
    for name, record in (("original-seed0-3-fake", bert_record("original", 400, 0, 0.9)),
                         ("window-20-seed0-3-fake", bert_record("window-20", 400, 20, 0.5))):
        (reports / "word_retrieval" / name).mkdir(parents=True)
        (reports / "word_retrieval" / name / "word_retrieval.json").write_text(
            json.dumps(record))
    heat = reports / "translation" / "original-seed0-3-fake"
    heat.mkdir(parents=True)
    (heat / "translation.json").write_text(json.dumps({
        "modification": "original", "seed": 0, "source": "3", "target": "fake",
        "alphas": [1.0, 3.0], "layers": [11, 12],
        "convert_rate": [[0.1, 0.2], [0.5, 0.75]], "bleu1": [[0.03, 0.415], [0.12, 0.02]],
        "unshifted": {"convert_rate": 0.001, "bleu1": 0.002}}))
    for measure in ("convert_rate", "bleu1"):
        save_png(Figure(figsize=(1, 1)), heat / f"{measure}.png")
    stale = cfg.paths.figures / "translation-gone-bleu1.png"
    save_png(Figure(figsize=(1, 1)), stale)

    clear_own_outputs(reports)  # as the report does first: nothing of an earlier run lingers
    section, files = liu_sections(cfg)
    assert "MRR (Liu et al. 2020a/b)" in section and "token translation" in section
    assert "| 3-fake | BERT | 400 | 20 | 0.500 | 0.250 | 1 | 1 |" in section
    assert "| 3-fake | skipgram | 100 | whole |" not in section  # static rows keep windows
    # the best convert rate and the best BLEU-1 are different cells of the heat maps
    assert "| 3 → fake | 0.750 (3, 12) | 41.5 (1, 12) | 0.001 / 0.2 |" in section
    names = {path.name for path in files}
    assert {"mrr-by-train-rows-3-fake.png", "mrr-by-window-3-fake.png",
            "translation-original-seed0-3-fake-convert_rate.png",
            "translation-original-seed0-3-fake-bleu1.png", "static_vs_bert.csv"} <= names
    assert all(path.exists() and path.stat().st_size > 0 for path in files)
    assert not stale.exists()

    for folder in ("static", "word_retrieval", "translation"):  # results removed: no section
        for path in sorted((reports / folder).rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
    clear_own_outputs(reports)
    assert liu_sections(cfg) == ("", [])
    assert not list(cfg.paths.figures.glob("mrr-by-*.png"))
    assert not (reports / "static_vs_bert.csv").exists()
