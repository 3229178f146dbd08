"""A row's parent run as MLflow's Compare and the experiment page show it: the row's recipe
(the settings it changes from `original`) as parameters, mean ± std as metrics, a Duration
that is its seeds' run times together, and the experiment's description (its table and the
commands that fill it), without training a model."""

from __future__ import annotations

from pathlib import Path

from mlflow.tracking import MlflowClient

from multilab import tracking
from multilab.resolve import row_recipe
from multilab.tracking.rows import NOTE_TAG
from tests.helpers import smoke_config

#: two seeds of a row: (seed, start ms, end ms, μ, ρ₈)
SEEDS = ((0, 1_000_000, 1_060_000, 0.20, 0.40), (1, 2_000_000, 2_090_000, 0.30, 0.50))


def _row(client: MlflowClient, experiment_id: str, parent: str, modification: str
         ) -> list[str]:
    """The row's seed runs, nested under ``parent``, finished at known times."""
    ids = []
    for seed, start, end, mu, rho in SEEDS:
        run = client.create_run(experiment_id, start_time=start,
                                run_name=f"{modification} s{seed}",
                                tags={"seed": str(seed), "modification": modification,
                                      "evaluated": "true", **tracking.parent_tags(parent)})
        client.log_metric(run.info.run_id, "mu", mu, step=10)
        client.log_metric(run.info.run_id, "retrieval_p1.l8", rho, step=10)
        client.set_terminated(run.info.run_id, status="FINISHED", end_time=end)
        ids.append(run.info.run_id)
    return ids


def test_a_parent_run_carries_its_recipe_its_spread_and_the_experiment_its_table(
        tmp_path: Path) -> None:
    cfg = smoke_config(tmp_path)
    experiment_id = tracking.connect(cfg.paths, cfg.experiment)
    client = MlflowClient()
    stats = {"mu": (0.25, 0.0707), "retrieval_p1.l8": (0.45, 0.0707)}
    parents = {}
    for modification in ("original", "lang-pos"):
        parent = tracking.group_run(experiment_id, modification, {"profile": "smoke"},
                                    params=row_recipe(cfg, modification))
        assert tracking.group_run(experiment_id, modification, {}, params=row_recipe(
            cfg, modification)) == parent  # found again, its parameters written once
        parents[modification] = tracking.summarise_row(
            cfg.paths, parent, _row(client, experiment_id, parent, modification), stats)
    tracking.baseline_first(cfg.paths, experiment_id)  # may replace the baseline's parent
    found = {run.data.tags["modification"]: run for run in tracking.rows.parents(
        client, experiment_id)}

    lang_pos, original = found["lang-pos"], found["original"]
    assert lang_pos.data.params == {"modification": "lang-pos",
                                    "recipe.language_positions": "True"}
    assert original.data.params == {"modification": "original"}  # kept when replaced
    assert lang_pos.data.metrics["mu"] == 0.25 and lang_pos.data.metrics["mu_std"] == 0.0707
    for run in found.values():  # the Duration column: 60 s + 90 s of its seeds
        assert run.info.end_time - run.info.start_time == 150_000, run.info.run_name

    note = client.get_experiment(experiment_id).tags[NOTE_TAG]
    lines = note.splitlines()
    assert lines[0].startswith(f"**{cfg.experiment}**: 2 row(s), original, lang-pos; mean ± std")
    block = lines[lines.index("```text") + 1:lines.index("```")]
    assert [line.split() for line in block] == [
        ["row", "settings", "seeds", "μ", "τ₀", "ρ₈", "ppl", "dev"],
        ["original", "the", "original", "setup", "0", "1", "0.250", "±", "0.071", "–",
         "0.450", "±", "0.071", "–"],
        ["lang-pos", "recipe.language_positions=True", "0", "1", "0.250", "±", "0.071", "–",
         "0.450", "±", "0.071", "–"]]
    assert len({len(line) for line in block[1:]}) == 1  # aligned: the last column's right edge
    assert "`dvc exp run -S modification=<name>`" in note and "`multilab exp`" in note


def test_a_seed_run_is_named_after_its_row(tmp_path: Path) -> None:
    """A sweep's rows share a modification and differ in settings: each seed run is named
    after its study row (``h32-l8 s0``), outside a study after its modification."""
    from multilab.resolve import resolve_run
    from multilab.training.run_tracking import seed_run_name

    plain = smoke_config(tmp_path)
    assert seed_run_name(resolve_run(plain, "lang-pos", 3)) == "lang-pos s3"
    sweep = smoke_config(tmp_path, rows={"original": "h32-l8"})
    assert seed_run_name(resolve_run(sweep, "original", 0)) == "h32-l8 s0"
