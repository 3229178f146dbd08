"""What a researcher sees in MLflow (issue 22): a model-training experiment, standard tags,
bookkeeping out of the research tags, seed runs nested under a parent per modification, the
spaces run elsewhere, corpora as datasets, the model as a transformers model, and metric
histories without duplicate points however often a model is evaluated."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from multilab import tracking
from multilab.cli import main
from multilab.config import Config
from multilab.evaluation.evaluate import curve_hook, evaluate_and_record
from multilab.evaluation.variant import run_variant
from multilab.lab.metric_table import CURVE_KEYS, curve_key
from multilab.resolve import resolve_run
from multilab.tracking import orphans
from multilab.training.model_dir import read_done
from multilab.training.train import curve_steps, train_model
from tests.helpers import PARAMS, link_project, one_torch_thread, smoke_config

pytestmark = pytest.mark.slow  # a smoke model trained and evaluated three times


@dataclasses.dataclass(frozen=True)
class Evaluated:
    cfg: Config
    model_dir: Path
    run_id: str
    client: MlflowClient


def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection attempt fails the test: logging a model must never download."""
    def refuse(self, address, *args):
        raise AssertionError(f"network access to {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.fixture(scope="module")
def evaluated(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Evaluated:
    """One tiny model with a real curve point, evaluated, evaluated again, then reused by
    `multilab variant` (which evaluates it a third time)."""
    root = link_project(built_project, tmp_path_factory.mktemp("view"))
    cfg = smoke_config(root, seeds=[0], study=["original"],
                       train={"epochs": 1, "max_train_sentences": 128})
    run = resolve_run(cfg, "original", 0)
    with pytest.MonkeyPatch.context() as patch, one_torch_thread():
        _no_network(patch)
        experiment = tracking.connect(cfg.paths, cfg.experiment)
        model_dir = train_model(run, experiment_id=experiment, curve_hook=curve_hook(run),
                                progress=False)
        evaluate_and_record(cfg, model_dir)
        evaluate_and_record(cfg, model_dir)  # `dvc repro` after an unrelated code change
        run_variant(cfg)  # the variant of the study's model: reused, evaluated again
    client = MlflowClient(tracking.tracking_uri(cfg.paths))
    return Evaluated(cfg, model_dir, read_done(model_dir)["run_id"], client)


def test_metric_histories_have_no_duplicate_points(evaluated: Evaluated) -> None:
    """Three evaluations of one model leave one point per metric at the final step; the
    curve points are under curve/* at the curve steps only."""
    done = read_done(evaluated.model_dir)
    run = evaluated.client.get_run(evaluated.run_id)
    assert {"mu", "ppl_dev", "eval_seconds", curve_key("mu")} <= set(run.data.metrics)
    for key in run.data.metrics:
        steps = [m.step for m in evaluated.client.get_metric_history(evaluated.run_id, key)]
        assert len(steps) == len(set(steps)), f"{key}: duplicate points at {steps}"
    curve_at = curve_steps(done["steps"], evaluated.cfg.train.eval_points)
    assert curve_at  # a real curve point was taken
    for key in CURVE_KEYS:
        final = evaluated.client.get_metric_history(evaluated.run_id, key)
        curve = evaluated.client.get_metric_history(evaluated.run_id, curve_key(key))
        assert [m.step for m in final] == [done["steps"]]
        assert {m.step for m in curve} == curve_at
    sentences = evaluated.client.get_metric_history(evaluated.run_id, curve_key("eval_sentences"))
    assert {m.value for m in sentences} == {evaluated.cfg.evaluate.curve_sentences}
    assert run.data.metrics["eval_sentences"] == evaluated.cfg.evaluate.dev_sentences


def test_a_changed_evaluation_is_logged_not_hidden(evaluated: Evaluated) -> None:
    """Only an unchanged value is skipped: a different one is a new measurement."""
    done = read_done(evaluated.model_dir)
    fresh = tracking.log_final_metrics(evaluated.cfg.paths, evaluated.run_id,
                                       {"ppl_train": 1.0, "eval_seconds": 99.0}, done["steps"],
                                       once=("eval_seconds",))
    assert fresh == {"ppl_train": 1.0}
    assert evaluated.client.get_run(evaluated.run_id).data.metrics["ppl_train"] == 1.0


def test_experiment_is_a_model_training_experiment(evaluated: Evaluated) -> None:
    """Without mlflow.experimentKind the MLflow 3 UI opens a GenAI page (traces)."""
    experiment = evaluated.client.get_experiment_by_name(evaluated.cfg.experiment)
    assert experiment.tags[tracking.EXPERIMENT_KIND_TAG] == "custom_model_development"


def test_runs_carry_standard_tags_and_no_bookkeeping_among_research_tags(
        evaluated: Evaluated) -> None:
    tags = evaluated.client.get_run(evaluated.run_id).data.tags
    assert tags["mlflow.runName"] == "original s0" and tags["mlflow.user"]
    assert len(tags["mlflow.source.git.commit"]) in (40, len("unknown"))
    assert "git_commit" not in tags
    own = {key for key in tags if not key.startswith("mlflow.")}
    bookkeeping = {key for key in own if key.startswith(tracking.SYS)}
    assert bookkeeping >= {tracking.HOST_TAG, tracking.PID_TAG, tracking.PROCESS_START_TAG}
    assert own - bookkeeping == {"modification", "paper_id", "seed", "profile", "data_hash",
                                 "fingerprint", "study", "evaluated"}


def test_seed_runs_are_nested_under_one_parent_per_modification(evaluated: Evaluated) -> None:
    cfg, client = evaluated.cfg, evaluated.client
    parent_id = client.get_run(evaluated.run_id).data.tags[tracking.PARENT_TAG]
    parent = client.get_run(parent_id)
    assert parent.info.run_name == "original" and parent.info.status == "FINISHED"
    assert parent.data.tags[tracking.ROLE_TAG] == tracking.GROUP
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    # found again, not created again (a later seed, a variant of the same modification)
    assert tracking.group_run(experiment, "original", {}) == parent_id
    assert list(tracking.search_runs(cfg.paths, cfg.experiment)["run_id"]) == [evaluated.run_id]
    assert len(tracking.search_runs(cfg.paths, cfg.experiment, groups=True)) == 2


def test_report_puts_the_mean_over_seeds_on_the_parent(evaluated: Evaluated) -> None:
    cfg, client = evaluated.cfg, evaluated.client
    assert main(["--params", str(PARAMS), *_settings(cfg), "report"]) == 0
    assert main(["--params", str(PARAMS), *_settings(cfg), "report"]) == 0  # idempotent
    parent_id = client.get_run(evaluated.run_id).data.tags[tracking.PARENT_TAG]
    mine = client.get_run(evaluated.run_id).data.metrics
    assert client.get_run(parent_id).data.metrics["mu"] == pytest.approx(mine["mu"])
    assert [m.step for m in client.get_metric_history(parent_id, "mu")] == [1]  # one seed


def _settings(cfg: Config) -> list[str]:
    paths = {f"paths.{name}": getattr(cfg.paths, name)
             for name in ("data", "artifacts", "reports", "metrics", "mlruns", "results")}
    values = {"profile": "smoke", "seeds": "[0]", "study": "[original]",
              "train.epochs": 1, "train.max_train_sentences": 128, **paths}
    return [f"--set={key}={value}" for key, value in values.items()]


def test_corpora_are_logged_as_datasets_with_their_hashes(evaluated: Evaluated) -> None:
    inputs = evaluated.client.get_run(evaluated.run_id).inputs.dataset_inputs
    found = {i.dataset.name: (i.dataset.digest, {t.key: t.value for t in i.tags})
             for i in inputs}
    corpora = evaluated.cfg.paths.corpora
    assert found == {
        "train": (tracking.file_digest(corpora / "train.txt"),
                  {"mlflow.data.context": "training"}),
        "dev": (tracking.file_digest(corpora / "dev.txt"), {"mlflow.data.context": "eval"}),
    }


def test_the_model_is_logged_once_as_a_transformers_model(evaluated: Evaluated) -> None:
    """Logged by the first evaluation (offline: the fixture refuses any connection), not by
    the later ones; it loads back as a fill-mask pipeline with its tokenizer."""
    import mlflow.transformers

    run = evaluated.client.get_run(evaluated.run_id)
    assert len(run.outputs.model_outputs) == 1
    model_id = run.outputs.model_outputs[0].model_id
    model = evaluated.client.get_logged_model(model_id)
    assert model.source_run_id == evaluated.run_id and str(model.status) == "READY"
    pipeline = mlflow.transformers.load_model(f"models:/{model_id}")
    assert pipeline.task == "fill-mask" and pipeline.tokenizer is not None


def test_spaces_run_is_in_its_own_experiment(evaluated: Evaluated) -> None:
    """VecMap's iterations and objective never join the models' charts."""
    from multilab.cli import _log_spaces

    cfg, client = evaluated.cfg, evaluated.client
    _log_spaces(cfg, cfg.spaces, {"iterations": 7, "objective": 0.5, "precision_at_1_nn": 0.9})
    spaces = client.get_experiment_by_name(tracking.spaces_experiment(cfg.experiment))
    (run,) = client.search_runs([spaces.experiment_id])
    assert run.info.run_name == "spaces" and run.data.metrics["iterations"] == 7
    assert "mlflow.source.git.commit" in run.data.tags
    models = tracking.search_runs(cfg.paths, cfg.experiment, groups=True)
    assert "metrics.iterations" not in models and "spaces" not in set(models["tags.mlflow.runName"])


def test_orphans_of_runs_logged_before_the_rename_are_still_found() -> None:
    """Runs logged with multilab.host/pid (before multilab.sys.) stay decidable."""
    legacy = {"multilab.host": socket.gethostname(), "multilab.pid": "999999999"}
    assert orphans._is_orphan(legacy)
    assert not orphans._is_orphan({**legacy, "multilab.host": "elsewhere"})
