"""`multilab translate`: Liu et al. 2020b's token translation wired to a trained lab model
(smoke)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from multilab import tracking
from multilab.config import Config
from multilab.errors import UserError
from multilab.evaluation.token_translation import pair_numbers, token_translation
from tests.helpers import run_statuses, tracked_model_cli, tracked_smoke_model

pytestmark = pytest.mark.slow  # every test reads a smoke model trained for the module


@pytest.fixture(scope="module")
def trained(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Config:
    """A smoke model of 128 sentences, tracked in the project's MLflow store."""
    return tracked_smoke_model(built_project, tmp_path_factory.mktemp("translate"))


def test_sweep_english_to_fake_english(trained: Config, one_thread: None) -> None:
    model = trained.paths.model_dir("original", 0)
    record = token_translation(trained, model, "3", "fake", 40, (1.0, 3.0))
    assert record["sentences"] == 40 and record["layers"] == list(range(1, 13))
    rates, bleu = np.array(record["convert_rate"]), np.array(record["bleu1"])
    assert rates.shape == bleu.shape == (2, 12)
    assert ((rates >= 0) & (rates <= 1)).all() and ((bleu >= 0) & (bleu <= 1)).all()
    assert record["best"]["convert_rate"] == rates.max()
    assert 0.0 <= record["unshifted"]["convert_rate"] <= 1.0
    # the reverse direction reads the same rows: its unshifted convert rate is the share of
    # English outputs where the forward one counted Fake-English ones
    back = token_translation(trained, model, "fake", "3", 40, (1.0,))
    assert back["sentences"] == 40 and np.array(back["convert_rate"]).shape == (1, 12)


def test_cli_writes_heat_maps_and_logs_to_the_finished_run(trained: Config, one_thread: None,
                                                          capsys, tmp_path: Path) -> None:
    model = str(trained.paths.model_dir("original", 0))
    out = tmp_path / "t"
    assert tracked_model_cli(trained, "translate", model, "--source", "3", "--target", "fake",
                "--sentences", "20", "--alphas", "2", "--out", str(out)) == 0
    assert "3 -> fake, 20 sentences: best convert rate" in capsys.readouterr().out
    record = json.loads((out / "translation.json").read_text())
    assert record["alphas"] == [2.0] and record["modification"] == "original"
    for name in ("convert_rate.png", "bleu1.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    client = MlflowClient(tracking.tracking_uri(trained.paths))
    run = client.get_run(record["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.metrics["translate.3-fake.convert_rate_best"] == pytest.approx(
        record["best"]["convert_rate"])
    logged = {a.path for a in client.list_artifacts(record["run_id"], "translation/3-fake")}
    assert "translation/3-fake/convert_rate.png" in logged


@pytest.mark.parametrize(("extra", "says"), [
    (["--source", "3", "--target", "s"], "language 's' is not in the study; valid: 3, fake"),
    (["--source", "3", "--target", "3"], "listed twice in [3, 3]"),
    (["--source", "3", "--target", "fake", "--alphas", "x"], "--alphas 'x': need numbers"),
    (["--source", "3", "--target", "fake", "--alphas", "0"], "need numbers > 0"),
    (["--source", "3", "--target", "fake", "--sentences", "0"], "--sentences 0: must be >= 1"),
])
def test_bad_inputs_are_one_line_exit_2(trained: Config, capsys, tmp_path: Path,
                                        extra: list[str], says: str) -> None:
    model = str(trained.paths.model_dir("original", 0))
    assert tracked_model_cli(trained, "translate", model, *extra, "--out", str(tmp_path / "t")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("multilab: error: ") and "\n" not in err and says in err, err
    assert not (tmp_path / "t").exists() and "RUNNING" not in run_statuses(trained)


def test_pair_numbers_follow_the_study(trained: Config) -> None:
    assert pair_numbers(trained, "fake", "3") == (1, 0)
    with pytest.raises(UserError, match="not in the study"):
        pair_numbers(trained, "3", "enfake:3")
