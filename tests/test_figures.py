"""Figures of one smoke lang-pos model: the numbers behind them, valid PNGs, MLflow artefacts."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import matplotlib.colors
import matplotlib.image
import pandas as pd
import pytest
import torch
from mlflow.tracking import MlflowClient

from multilab import tracking
from multilab.config import Config
from multilab.data.vocab import load_tokenizer, saved_words, vocabulary_words
from multilab.errors import UserError
from multilab.files import PRINT_VARIABLE
from multilab.lab.metric_table import CURVE_KEYS, curve_key
from multilab.reporting.figures import (
    CurveGroup,
    curve_stats,
    figures_for,
    final_values,
    plot_curves,
    position_similarity,
    run_curves,
    saved_embeddings,
    study_figures,
    token_pca,
)
from multilab.reporting.report import finished_runs
from multilab.resolve import resolve_run
from multilab.training.member import curve_steps
from multilab.training.model import load_model
from multilab.training.model_dir import read_done
from multilab.training.train import train_model
from tests.helpers import link_project, smoke_config

pytestmark = pytest.mark.slow  # every test reads a smoke model trained for the module

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
KINDS = ("positions", "pca", "curves")


@dataclasses.dataclass(frozen=True)
class Trained:
    cfg: Config
    model_dir: Path
    run_id: str


@pytest.fixture(scope="module")
def trained(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Trained:
    """One lang-pos smoke model with curve points, trained once for the whole module."""
    root = link_project(built_project, tmp_path_factory.mktemp("figures"))
    tiny = smoke_config(root, seeds=[0], train={"epochs": 1, "max_train_sentences": 128})
    cfg = dataclasses.replace(tiny, study=("lang-pos",))
    run = resolve_run(cfg, "lang-pos", 0)
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    model_dir = train_model(run, experiment_id=experiment, curve_hook=_scripted_curve,
                            progress=False)
    return Trained(cfg, model_dir, read_done(model_dir)["run_id"])


def _scripted_curve(step: int, model) -> dict[str, float]:
    """Known curve values (figures only draw what MLflow holds; evaluate has its own tests)."""
    scores = {key: step / 100 for key in CURVE_KEYS if not key.startswith("ppl")}
    return scores | {"ppl_train": 1000 / step, "ppl_dev": 3000 / step}


def _assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG_MAGIC
    height, width = matplotlib.image.imread(path).shape[:2]
    assert height >= 400 and width >= 500


def _artifact_names(trained: Trained) -> set[str]:
    client = MlflowClient(tracking.tracking_uri(trained.cfg.paths))
    return {Path(a.path).name for a in client.list_artifacts(trained.run_id, "figures")}


def test_position_similarity_is_a_cosine_matrix(trained: Trained) -> None:
    """Also: the tables read from the safetensors (no transformers) are the loaded model's,
    and the English words read with the tokenizers library are the transformers tokenizer's."""
    model = load_model(trained.model_dir)
    saved = saved_embeddings(trained.model_dir)
    assert torch.equal(saved.words, model.bert.embeddings.word_embeddings.weight.detach())
    assert torch.equal(saved.positions,
                       model.bert.embeddings.position_embeddings.weight.detach())
    assert saved_words(trained.cfg.paths.vocab) == vocabulary_words(
        load_tokenizer(trained.cfg.paths.vocab))
    sim = position_similarity(saved.positions)
    assert sim.shape == (256, 256)
    assert torch.equal(sim, sim.T)
    assert torch.allclose(sim.diagonal(), torch.ones(256), atol=1e-5)
    assert sim.abs().max() <= 1 + 1e-5


def test_token_pca_covers_both_languages_deterministically(trained: Trained) -> None:
    words = saved_embeddings(trained.model_dir).words
    first, again = token_pca(words, 2048), token_pca(words, 2048)
    assert first.coords.shape == (4096, 2)
    assert torch.equal(first.coords, again.coords)
    assert first.explained[0] >= first.explained[1] > 0 and first.explained.sum() <= 1
    # centred projections: variance along PC1 ≥ PC2, and the axes are uncorrelated
    variances = first.coords.double().var(dim=0)
    assert variances[0] >= variances[1]
    covariance = (first.coords.double().T @ first.coords.double())[0, 1] / 4095
    assert abs(covariance) < 1e-4 * variances[0]


def test_figures_for_model_dir_and_run_id(trained: Trained,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Drawn without transformers (the model's tables read from its safetensors): a report's
    process never imports it."""
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` fails
    cfg = trained.cfg
    from_dir = figures_for(cfg, str(trained.model_dir))
    expected = [cfg.paths.figures / f"lang-pos-seed0-{kind}.png" for kind in KINDS]
    assert from_dir == expected
    for path in from_dir:
        _assert_png(path)
        path.unlink()
    from_run = figures_for(cfg, trained.run_id)
    assert from_run == expected
    for path in from_run:
        _assert_png(path)
    assert _artifact_names(trained) >= {p.name for p in expected}


def test_curve_points_equal_the_logged_metrics(trained: Trained) -> None:
    """Curve points live under ``curve/<key>`` (curve_sentences); the final evaluation under
    ``<key>`` (dev_sentences) is another measurement and never joins the curve."""
    cfg, run_id = trained.cfg, trained.run_id
    done = read_done(trained.model_dir)
    tracking.log_final_metrics(cfg.paths, run_id, {"mu": 0.5}, step=done["steps"])
    frame = run_curves(cfg.paths, run_id)
    assert set(CURVE_KEYS) <= set(frame.columns)
    for key in CURVE_KEYS:
        history = pd.DataFrame(tracking.metric_history(cfg.paths, run_id, curve_key(key)),
                               columns=["step", "value"])
        expected = history.groupby("step")["value"].mean()
        stats = curve_stats([frame], key).set_index("step")
        assert list(stats.index) == list(expected.index)
        assert set(stats.index) == curve_steps(done["steps"], cfg.train.eval_points)
        assert stats["mean"].tolist() == pytest.approx(expected.tolist())
        assert (stats["std"] == 0).all() and (stats["seeds"] == 1).all()
    assert tracking.metric_history(cfg.paths, run_id, "mu") == [(done["steps"], 0.5)]
    assert final_values(cfg.paths, run_id, ("mu", "ppl_dev")) == {"mu": (done["steps"], 0.5)}


def test_curve_stats_over_seeds_aligns_steps() -> None:
    seed_a = pd.DataFrame({"step": [10, 20, 30], "mu": [0.1, 0.2, 0.3]})
    seed_b = pd.DataFrame({"step": [10, 20], "mu": [0.3, 0.4]})
    stats = curve_stats([seed_a, seed_b], "mu")
    assert stats["step"].tolist() == [10, 20, 30]
    assert stats["mean"].tolist() == pytest.approx([0.2, 0.3, 0.3])
    assert stats["std"].tolist() == pytest.approx([0.1414214, 0.1414214, 0.0])
    assert stats["seeds"].tolist() == [2, 2, 1]
    assert curve_stats([seed_a], "ppl_dev").empty


def test_study_figures_compare_modifications(trained: Trained,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PRINT_VARIABLE, "yes")  # the default (the suite draws PNG only)
    cfg = trained.cfg
    tracking.set_tags(cfg.paths, trained.run_id, {"evaluated": "true"})
    written = study_figures(cfg, finished_runs(cfg))
    names = [p.name for p in written]
    assert names == ["lang-pos-seed0-positions.png", "lang-pos-seed0-pca.png",
                     "study-curves.png"]
    for path in written:
        _assert_png(path)
        assert path.with_suffix(".pdf").read_bytes()[:5] == b"%PDF-"  # for print
    assert "study-curves.png" in _artifact_names(trained)
    assert study_figures(cfg, finished_runs(cfg).iloc[0:0]) == []


@pytest.mark.parametrize("target", ["no/such/dir", "0123456789abcdef0123456789abcdef"])
def test_bad_target_is_one_clear_error(trained: Trained, target: str, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"neither a model directory|no run"):
        figures_for(trained.cfg, target)
    with pytest.raises(UserError, match="neither a model directory"):
        figures_for(trained.cfg, str(tmp_path))  # an existing but empty directory


def test_equal_curves_stay_visible_and_the_paper_is_a_reference_line(tmp_path: Path) -> None:
    """Issue 22: two models with the same curve (untrained and inv-order both at 0) are both
    seen, and the paper's final value is drawn as a line in the model's colour."""
    frame = pd.DataFrame({"step": [1, 2, 3], "mu": [0.0, 0.0, 0.0]})
    groups = {"a": CurveGroup([frame]), "b": CurveGroup([frame])}
    path = plot_curves(groups, ("mu",), tmp_path / "equal.png", "equal")
    pixels = matplotlib.image.imread(path)[..., :3]
    for colour in ("tab:blue", "tab:orange"):
        rgb = matplotlib.colors.to_rgb(colour)
        assert (abs(pixels - rgb).sum(axis=2) < 0.05).sum() > 50, colour
    final = [{"mu": (4, 0.1)}]
    plain, with_paper = (matplotlib.image.imread(plot_curves(
        {"a": CurveGroup([frame], final, paper), "b": CurveGroup([frame])},
        ("mu",), tmp_path / f"{name}.png", "equal")) for name, paper in (
            ("plain", None), ("paper", {"mu": 0.7})))
    assert plain.shape == with_paper.shape
    changed = (plain != with_paper).any(axis=2)
    rows = changed.sum(axis=1)
    assert rows.max() > 150 and (rows > 0).sum() < 8  # one thin line across the panel


def test_legends_and_titles_name_rows_in_the_papers_words(trained: Trained, monkeypatch) -> None:
    """Issue 54: a row is its modification's name (the paper's words), never "1: lang-pos"
    or "lang-pos (ID 1)"."""
    from multilab.reporting import figures

    drawn = {}
    real = figures.plot_curves

    def spy(groups, *args, **kwargs):
        drawn.update(groups)
        return real(groups, *args, **kwargs)

    cfg = trained.cfg
    tracking.set_tags(cfg.paths, trained.run_id, {"evaluated": "true"})
    monkeypatch.setattr(figures, "plot_curves", spy)
    monkeypatch.setattr(figures, "model_figures", lambda *a, **k: [])
    figures.study_figures(cfg, finished_runs(cfg))
    assert list(drawn) == ["lang-pos"]
    assert figures.resolve_target(cfg, str(trained.model_dir)).title == "lang-pos, seed 0"
