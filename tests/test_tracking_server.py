"""A real ``mlflow server`` (SQLite store, proxied local artefacts): two concurrent training
processes lose nothing, and train → evaluate → report work against it (issue 8).

The server and the two runs are session fixtures of conftest.py (``tracking_server``,
``served``); the resume tests compare their killed run with the same uninterrupted one.
"""

from __future__ import annotations

import pandas as pd
import pytest

from tests.helpers import STEPS, evaluated_metrics

slow = pytest.mark.slow


@slow
def test_different_seeds_give_different_metrics(served) -> None:
    first, second = evaluated_metrics(served["records"][0]), evaluated_metrics(served["records"][1])
    assert first.keys() == second.keys()
    assert first["ppl_train"] != second["ppl_train"] and first != second


@slow
def test_two_writers_on_a_tracking_server_lose_nothing(served) -> None:
    """Both concurrent runs are FINISHED with every param, every step and their artefact."""
    cfg, runs = served["cfg"], served["runs"]
    assert sorted(runs["tags.seed"]) == ["0", "1"]
    assert set(runs["status"]) == {"FINISHED"}
    for run_id, run in served["full"].items():
        seed = int(run.data.tags["seed"])
        expected = {k: str(v)[:6000] for k, v in cfg.run("original", seed).as_params().items()}
        assert run.data.params == expected
        assert {"train_examples", "truncated_sentences", "total_steps", "mu",
                "ppl_dev"} <= run.data.metrics.keys()
        assert sorted(point.step for point in served["history"][run_id]) == list(
            range(1, STEPS + 1))
        assert run.data.tags["evaluated"] == "true"
        assert "train_log.csv" in served["artifacts"][run_id]
        assert run.info.artifact_uri.startswith("mlflow-artifacts:")  # through the server


@slow
def test_report_against_the_server_uses_both_seeds(served) -> None:
    assert served["report"] == 0
    table = pd.read_csv(served["cfg"].paths.reports / "table1.csv", keep_default_na=False)
    assert table["modification"].tolist() == ["original"]
    row = table.iloc[0]
    assert row["n_seeds"] == 2 and row["missing_seeds"] == ""
    mean = (served["records"][0]["metrics"]["mu"] + served["records"][1]["metrics"]["mu"]) / 2
    assert float(row["mu_mean"]) == pytest.approx(mean)
