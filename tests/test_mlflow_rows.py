"""A study row's parent run as the MLflow UI shows it: the mean ± std of its seeds
at their final step, their mean curve at the steps they logged, the seed count, one colour
per row (the baseline's its own), and the baseline's parent kept first in the UI's list.
Seed runs are written directly to a store in a temp folder: no training."""

from __future__ import annotations

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from multilab import tracking
from multilab.config import Config
from multilab.lab.metric_table import curve_key, mean_std
from multilab.tracking.colors import BASELINE_COLOR, PALETTE, pick_color
from multilab.tracking.rows import parents, rounded
from tests.helpers import smoke_config

STEPS = 3


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Config:
    """One store for the module (creating its tables takes seconds), an experiment a test."""
    return smoke_config(tmp_path_factory.mktemp("rows"))


@pytest.fixture
def store(project: Config, request: pytest.FixtureRequest) -> tuple[Config, str, MlflowClient]:
    experiment = tracking.connect(project.paths, request.node.name)
    return project, experiment, MlflowClient(tracking.tracking_uri(project.paths))


def _seed(client: MlflowClient, experiment: str, parent: str, modification: str, seed: int,
          losses: list[float], mu: float) -> str:
    """A finished seed run as train + evaluate leave it: a loss per step, one curve point
    at step 2, the final μ at the last step."""
    run_id = client.create_run(experiment, run_name=f"{modification} s{seed}", tags={
        "modification": modification, "seed": str(seed), **tracking.parent_tags(parent),
    }).info.run_id
    points = [Metric("train_loss", loss, 0, step) for step, loss in enumerate(losses, 1)]
    points += [Metric(curve_key("mu"), mu / 2, 0, 2), Metric("mu", mu, 0, len(losses))]
    client.log_batch(run_id, metrics=points, synchronous=True)
    client.set_terminated(run_id, "FINISHED")
    return run_id


def _row(client: MlflowClient, experiment: str, modification: str, seeds: dict[int, float]
         ) -> tuple[str, list[str]]:
    parent = tracking.group_run(experiment, modification, {})
    runs = [_seed(client, experiment, parent, modification, seed, [4.0 + seed * 2,
                                                                   3.0 + seed * 2,
                                                                   2.0 + seed * 2], mu)
            for seed, mu in seeds.items()]
    return parent, runs


def test_the_parent_carries_mean_std_seed_count_and_the_mean_curve(store) -> None:
    cfg, experiment, client = store
    parent, runs = _row(client, experiment, "lang-pos", {0: 0.2, 1: 0.4})
    stats = {"mu": mean_std([0.2, 0.4])}
    assert tracking.summarise_row(cfg.paths, parent, runs, stats) == parent
    run = client.get_run(parent)
    assert run.data.metrics["mu"] == pytest.approx(0.3)
    assert run.data.metrics["mu" + tracking.STD_SUFFIX] == rounded(0.2 / 2 ** 0.5)
    assert run.data.tags["n_seeds"] == "2" and run.data.tags["seeds"] == "0 1"
    assert [m.step for m in client.get_metric_history(parent, "mu")] == [STEPS]  # final step
    loss = sorted((m.step, m.value) for m in client.get_metric_history(parent, "train_loss"))
    assert loss == [(1, 5.0), (2, 4.0), (3, 3.0)]  # the mean curve, at the real steps
    curve = client.get_metric_history(parent, curve_key("mu"))
    assert [(m.step, m.value) for m in curve] == [(2, pytest.approx(0.15))]
    # again, the same seeds: nothing new, the same parent
    assert tracking.summarise_row(cfg.paths, parent, runs, stats) == parent
    assert len(client.get_metric_history(parent, "train_loss")) == STEPS


def test_a_parent_holding_other_points_is_replaced_with_its_seeds_moved(store) -> None:
    """MLflow cannot delete a metric's points: a parent summarised over other seeds (or one
    of an older multilab, its mean at step = the number of seeds) is replaced."""
    cfg, experiment, client = store
    parent, runs = _row(client, experiment, "lang-pos", {0: 0.2})
    client.log_metric(parent, "mu", 0.2, step=1)  # the old layout: step = one seed
    fresh = tracking.summarise_row(cfg.paths, parent, runs, {"mu": mean_std([0.2])})
    assert fresh != parent
    assert client.get_run(parent).info.lifecycle_stage == "deleted"
    assert client.get_run(runs[0]).data.tags[tracking.PARENT_TAG] == fresh
    assert [m.step for m in client.get_metric_history(fresh, "mu")] == [STEPS]
    assert tracking.group_run(experiment, "lang-pos", {}) == fresh  # found, not created
    replaced = client.get_run(fresh)
    assert replaced.info.run_name == "lang-pos" and replaced.info.status == "FINISHED"
    assert replaced.data.tags["modification"] == "lang-pos"


def test_rows_have_distinct_colours_shared_by_their_seeds(store) -> None:
    _, experiment, client = store
    rows = {mod: _row(client, experiment, mod, {0: 0.1})
            for mod in ("original", "lang-pos", "inv-order", "no-random")}
    colors = {mod: client.get_run(parent).data.tags[tracking.RUN_COLOR_TAG]
              for mod, (parent, _) in rows.items()}
    assert colors["original"] == BASELINE_COLOR
    assert len(set(colors.values())) == len(colors)
    for mod, (_, runs) in rows.items():
        assert client.get_run(runs[0]).data.tags[tracking.RUN_COLOR_TAG] == colors[mod]
    assert pick_color("lang-pos", PALETTE) in PALETTE  # more rows than colours: cycled


def test_the_baseline_parent_is_kept_the_newest(store) -> None:
    """The UI lists runs newest first and draws the first 10: the baseline stays among them
    beside a variant made after it."""
    cfg, experiment, client = store
    original, seeds = _row(client, experiment, "original", {0: 0.5})
    tracking.summarise_row(cfg.paths, original, seeds, {"mu": mean_std([0.5])})
    variant, _ = _row(client, experiment, "lang-pos", {0: 0.1})
    tracking.baseline_first(cfg.paths, experiment)
    newest = parents(client, experiment)[-1]
    assert newest.data.tags["modification"] == "original" and newest.info.run_id != original
    assert newest.data.metrics["mu"] == 0.5  # its summary came along
    assert len(client.get_metric_history(newest.info.run_id, "train_loss")) == STEPS
    assert client.get_run(seeds[0]).data.tags[tracking.PARENT_TAG] == newest.info.run_id
    tracking.baseline_first(cfg.paths, experiment)  # already first: left as it is
    assert parents(client, experiment)[-1].info.run_id == newest.info.run_id
    assert {run.info.run_id for run in parents(client, experiment)} == {
        newest.info.run_id, variant}


def test_values_are_rounded_to_four_significant_digits() -> None:
    assert rounded(0.023370361328125) == 0.02337
    assert rounded(1848.25) == 1848.0 and rounded(0.0) == 0.0
