"""What a researcher sees in MLflow (issues 22, 54): a model-training experiment, standard
tags, bookkeeping out of the research tags, constants as params, seed runs nested under a
parent per modification that carries their mean ± std and mean curves in the row's colour,
the spaces run elsewhere, corpora as datasets, the model as a transformers model named after
its row and seed, and metric histories without duplicate points however often a model is
evaluated."""

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
from multilab.tracking.colors import BASELINE_COLOR
from multilab.training.member import curve_steps
from multilab.training.model_dir import read_done
from multilab.training.train import train_model
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
                       train={"epochs": 1, "max_train_sentences": 128},
                       evaluate={"dev_sentences": 100, "curve_sentences": 50})
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
    assert {"mu", "ppl_dev", curve_key("mu")} <= set(run.data.metrics)
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
        # the done file (so the train record) keeps the same points: MLflow is not the
        # only place a curve lives
        kept = {int(point["step"]): point[key] for point in done["curve"]}
        assert kept == {m.step: pytest.approx(m.value) for m in curve}
    assert run.data.params["curve_sentences"] == str(evaluated.cfg.evaluate.curve_sentences)
    assert run.data.tags["eval_sentences"] == str(evaluated.cfg.evaluate.dev_sentences)


def test_constants_are_params_or_tags_not_metrics(evaluated: Evaluated) -> None:
    """A number that does not change during a run is no chart: Compare's parallel
    coordinates and the Chart view offer only what was measured."""
    run = evaluated.client.get_run(evaluated.run_id)
    done = read_done(evaluated.model_dir)
    constants = {"train_examples", "truncated_sentences", "total_steps", "world_size",
                 "eval_seconds", "eval_sentences", "curve_sentences"}
    assert not {key.removeprefix("curve/") for key in run.data.metrics} & constants
    assert run.data.params["total_steps"] == str(done["steps"])
    assert run.data.params["train_examples"] == str(done["train_examples"])
    assert run.data.params["world_size"] == "1"
    assert float(run.data.tags[tracking.SYS + "eval_seconds"]) > 0
    for key in run.data.metrics:  # every metric left is measured more than once, or a result
        assert not key.startswith(("eval_", "curve/eval_")), key


def test_a_changed_evaluation_is_logged_not_hidden(evaluated: Evaluated) -> None:
    """Only an unchanged value is skipped: a different one is a new measurement."""
    done = read_done(evaluated.model_dir)
    same = evaluated.client.get_run(evaluated.run_id).data.metrics["mu"]
    fresh = tracking.log_final_metrics(evaluated.cfg.paths, evaluated.run_id,
                                       {"ppl_train": 1.0, "mu": same}, done["steps"])
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
                                 "fingerprint", "study", "evaluated", "eval_sentences"}


def test_a_row_and_its_seeds_share_a_colour_the_baseline_its_own(evaluated: Evaluated) -> None:
    """The UI draws a run in the colour of its ``mlflow.runColor`` tag."""
    seed = evaluated.client.get_run(evaluated.run_id).data.tags
    parent = evaluated.client.get_run(seed[tracking.PARENT_TAG]).data.tags
    assert seed[tracking.RUN_COLOR_TAG] == parent[tracking.RUN_COLOR_TAG] == BASELINE_COLOR


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
    """The parent carries the mean and std of its seeds at their final step, the seed count,
    and the mean curve at the steps the seeds logged (here one seed: its own, rounded)."""
    cfg, client = evaluated.cfg, evaluated.client
    assert main(["--params", str(PARAMS), *_settings(cfg), "report"]) == 0
    parent_id = client.get_run(evaluated.run_id).data.tags[tracking.PARENT_TAG]
    assert main(["--params", str(PARAMS), *_settings(cfg), "report"]) == 0  # idempotent
    assert client.get_run(evaluated.run_id).data.tags[tracking.PARENT_TAG] == parent_id
    done = read_done(evaluated.model_dir)
    mine = client.get_run(evaluated.run_id).data.metrics
    parent = client.get_run(parent_id)
    assert parent.data.metrics["mu"] == pytest.approx(mine["mu"], rel=1e-3)
    assert parent.data.metrics["mu" + tracking.STD_SUFFIX] == 0  # one seed: no spread
    assert parent.data.tags["n_seeds"] == "1" and parent.data.tags["seeds"] == "0"
    for key in ("mu", "mu" + tracking.STD_SUFFIX, "ppl_dev"):  # at the real final step
        assert [m.step for m in client.get_metric_history(parent_id, key)] == [done["steps"]]
    for key in ("train_loss", curve_key("mu")):  # the mean curve, at the seeds' steps
        seed = {m.step: m.value for m in client.get_metric_history(evaluated.run_id, key)}
        mean = {m.step: m.value for m in client.get_metric_history(parent_id, key)}
        assert set(mean) == set(seed) and len(mean) > 0, key
        assert all(mean[step] == pytest.approx(seed[step], rel=1e-3) for step in seed), key


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
    assert model.name == "original-seed0"  # its row and seed, not "model"
    assert {key: model.tags.get(key) for key in ("modification", "seed", "profile",
                                                 "fingerprint")} == {
        "modification": "original", "seed": "0", "profile": "smoke",
        "fingerprint": read_done(evaluated.model_dir)["fingerprint"]}
    linked = {metric.key: metric.value for metric in model.metrics}
    assert linked["mu"] == pytest.approx(run.data.metrics["mu"])  # the model's own metrics
    assert len(evaluated.client.get_metric_history(evaluated.run_id, "mu")) == 1  # not twice
    pipeline = mlflow.transformers.load_model(f"models:/{model_id}")
    assert pipeline.task == "fill-mask" and pipeline.tokenizer is not None


def test_spaces_run_is_in_its_own_experiment(evaluated: Evaluated) -> None:
    """VecMap's iterations and objective never join the models' charts."""
    from multilab.cli.data import _log_spaces

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
