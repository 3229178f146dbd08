"""`multilab mrr`: seed 004's word retrieval wired to a trained lab model (smoke)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from multilab import tracking
from multilab.cli import main
from multilab.config import Config
from multilab.evaluation.lab_word_retrieval import exact_pairs, lab_word_retrieval, words_of
from tests.helpers import cli_args, run_statuses, tracked_smoke_model


@pytest.fixture(scope="module")
def trained(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Config:
    """A smoke model of 128 sentences, tracked in the project's MLflow store."""
    return tracked_smoke_model(built_project, tmp_path_factory.mktemp("mrr"))


def _cli(cfg: Config, *command: str) -> int:
    settings = ["profile=smoke", *(f"paths.{n}={getattr(cfg.paths, n)}" for n in
                                   ("data", "artifacts", "reports", "metrics", "mlruns")),
                "train.max_train_sentences=128", "train.eval_points=[]"]
    return main(cli_args(settings, *command))


def test_wordpieces_merge_into_words() -> None:
    assert words_of(["je", "##sus", "wept", ".", "##x"]) == (["jesus", "wept", ".x"],
                                                             [0, 0, 1, 2, 2])
    assert words_of(["##a", "b"]) == (["##a", "b"], [0, 1])  # a stray continuation: a word
    assert exact_pairs("fake", ["god", "wept"], ["wept", "lord"]) == [("wept", "wept")]
    assert exact_pairs("enfake", ["a"], ["\U00017061"]) == [("a", "\U00017061")]


def test_english_to_fake_english_per_layer_beside_the_untrained_twin(
        trained: Config, one_thread: None) -> None:
    model = trained.paths.model_dir("original", 0)
    record = lab_word_retrieval(trained, model, "3", "fake", 60)
    assert record["dictionary"] == "fake" and record["sentences"] == 60
    for name in ("trained", "untrained"):
        rows = record[name]
        assert [row["layer"] for row in rows] == list(range(13))
        assert all(0 < row["mrr"] <= 1 and 0 <= row["p1"] <= row["mrr"] for row in rows)
        assert all(row["queries"] == record["dictionary_pairs"] > 50 for row in rows)
    # layer 0 of the original setup: a word and its fake twin differ only in the (separate,
    # untied) word embedding, so the two models differ there too
    assert record["trained"] != record["untrained"]


def test_cli_writes_json_and_logs_to_the_finished_run(trained: Config, one_thread: None,
                                                     capsys, tmp_path: Path) -> None:
    model = str(trained.paths.model_dir("original", 0))
    out = tmp_path / "m"
    assert _cli(trained, "mrr", model, "--source", "3", "--target", "fake",
                "--sentences", "30", "--out", str(out)) == 0
    assert "3 -> fake, 30 sentences, fake dictionary" in capsys.readouterr().out
    record = json.loads((out / "word_retrieval.json").read_text())
    run = MlflowClient(tracking.tracking_uri(trained.paths)).get_run(record["run_id"])
    assert run.data.metrics["mrr.3-fake.l8"] == pytest.approx(record["trained"][8]["mrr"])
    assert run.info.status == "FINISHED" and "RUNNING" not in run_statuses(trained)
    assert _cli(trained, "mrr", model, "--source", "3", "--target", "xx") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("multilab: error: ") and "\n" not in err and "'xx'" in err
