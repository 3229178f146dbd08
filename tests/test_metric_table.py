"""The one table of metrics: complete paper rows, and dvc.yaml's plots naming its keys."""

from __future__ import annotations

import pytest
import yaml

from multilab.lab import metric_table
from multilab.lab.metric_table import METRICS, PAPER_VALUES, PLOTS, summarise
from multilab.lab.modifications import PAPER_IDS
from tests.helpers import ROOT


def test_every_paper_row_has_every_table_metric() -> None:
    assert set(PAPER_VALUES) <= set(PAPER_IDS)
    for paper_id, values in PAPER_VALUES.items():
        assert list(values) == list(METRICS), paper_id
    assert set(metric_table.TABLE2_IDS) <= set(PAPER_VALUES)
    # spot checks against the paper (Dufter & Schütze 2020, Table 1): ID 0 and ID 18
    assert PAPER_VALUES["0"]["mu"] == 0.70 and PAPER_VALUES["0"]["ppl_dev"] == 217
    assert PAPER_VALUES["18"]["align_f1.l0"] == 0.97 and PAPER_VALUES["18"]["ppl_train"] == 3484


def test_curves_and_mu_are_table_metrics() -> None:
    assert set(metric_table.CURVE_KEYS) <= set(METRICS)
    assert set(metric_table.MU_PARTS) <= set(METRICS)
    assert metric_table.PERPLEXITY_KEYS == ("ppl_train", "ppl_dev")


def test_dvc_plots_draw_the_table_keys() -> None:
    """dvc.yaml draws one chart per quantity the report writes, every study entry overlaid."""
    plots = yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"]
    declared = {}
    for entry in plots:
        ((name, spec),) = entry.items()
        declared[name] = spec["y"]
    # the study's rows from the report's CSV, the variant's curve beside them
    assert declared == {key: {f"reports/plots/{key}.csv": "${study}",
                              f"reports/plots/variant/{key}.csv": "variant ${modification}"}
                        for key in PLOTS}
    assert PLOTS["mu"] == "curve/mu" and PLOTS["train_loss"] == "train_loss"


def test_short_table_is_a_few_aligned_lines() -> None:
    text = metric_table.short_table({"original s42": {"mu": 0.0312, "ppl_dev": 217.4},
                                     "untrained s42": {}})
    lines = text.splitlines()
    assert len(lines) == 3 and len({len(line) for line in lines}) == 1
    assert "0.031" in lines[1] and "217" in lines[1] and "–" in lines[2]
    assert max(map(len, lines)) <= 100


def test_summary_over_seeds_keeps_only_metrics_every_seed_has() -> None:
    per_seed = [{"mu": 0.2, "ppl_dev": 100.0, "other": 1.0}, {"mu": 0.4}]
    summary = summarise(per_seed)
    assert list(summary) == ["mu"]
    assert summary["mu"] == pytest.approx((0.3, 0.1414213562))
    assert summarise([{"mu": 0.5}]) == {"mu": (0.5, 0.0)}  # one seed: no spread
    assert summarise([]) == {}


def test_a_layer_beyond_table_1_is_headed_as_table_1_heads_its_layers() -> None:
    assert metric_table.column_title("retrieval_p1.l8") == "L8 ρ"
    assert metric_table.column_title("retrieval_p1.l12") == "L12 ρ"
    assert metric_table.column_title("align_f1.l4") == "L4 F1"
    assert metric_table.column_title("mrr.3-s.l4") == "mrr.3-s.l4"  # no Table 1 symbol
    assert metric_table.column_title("downstream.ratio.s") == "downstream.ratio.s"
    assert metric_table.split_layer_key("retrieval_p1.l12") == ("retrieval_p1", 12)
    assert metric_table.split_layer_key("retrieval_p1.l4.3-s") is None  # a language pair's
