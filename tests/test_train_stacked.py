"""``train.stack``: the stacked trainer wired to the single-model path's modules
(training/train_stacked.py), on the smoke profile cut to two layers and 64 sentences (4
steps): each member is a model of its own (folder, done file, fingerprint, MLflow run,
record), independent of its neighbours, and a stopped stack resumes to the same members.

The kernels of tests/test_stacked.py prove the arithmetic; these tests prove the wiring.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from transformers import AutoModelForMaskedLM

from multilab import tracking
from multilab.cli import main
from multilab.config import Config
from multilab.errors import StoppedEarly
from multilab.resolve import resolve_run
from multilab.studies.records import iter_records
from multilab.training.model_dir import (
    checkpoint_steps,
    model_fingerprint,
    read_done,
    run_checkpoint_area,
)
from multilab.training.train_stacked import train_stack
from tests.helpers import PARAMS, link_project, one_torch_thread, saved_weights, smoke_config

#: cheap members: 64 sentences (128 examples, 2 steps an epoch, 4 steps), two layers
SMALL = {"train": {"max_train_sentences": 64, "eval_points": [], "checkpoint_every": 1},
         "models": {"small": {"num_hidden_layers": 2}}, "evaluate": {"layers": [0, 2]}}
STEPS = 4


def _project(built_project: Path, root: Path, **train: object) -> Config:
    overrides = {**SMALL, "train": {**SMALL["train"], **train}}
    return smoke_config(link_project(built_project, root), **overrides)


def _stack(cfg: Config, members: list[tuple[str, int]], **kwargs) -> list[Path]:
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    with one_torch_thread():
        return train_stack([resolve_run(cfg, mod, seed) for mod, seed in members],
                           experiment_id=experiment, progress=False, **kwargs)


def _settings(cfg: Config, stack: int) -> list[str]:
    values = {"profile": "smoke", "train.max_train_sentences": 64, "train.eval_points": "[]",
              "train.checkpoint_every": 1, "models.small.num_hidden_layers": 2,
              "evaluate.layers": "[0, 2]",
              "train.stack": stack,
              **{f"paths.{name}": getattr(cfg.paths, name)
                 for name in ("data", "artifacts", "reports", "metrics", "mlruns", "results")}}
    return ["--params", str(PARAMS), *(f"--set={k}={v}" for k, v in values.items())]


@pytest.mark.slow  # trains two small models (with MLflow) two or three times
def test_each_member_is_a_model_of_its_own(built_project: Path, tmp_path: Path,
                                           capsys) -> None:
    """``multilab train -m original -m no-random --seed 0`` with train.stack 2: two model
    folders loadable by transformers, two done files and records, two FINISHED MLflow runs
    with every step; the fingerprint says "stacked", not how many shared the stack."""
    cfg = _project(built_project, tmp_path, stack=2)
    with one_torch_thread():
        assert main([*_settings(cfg, 2), "train", "-m", "original", "-m", "no-random",
                     "--seed", "0"]) == 0
    dirs = [cfg.paths.model_dir(mod, 0) for mod in ("original", "no-random")]
    dones = [read_done(path) for path in dirs]
    assert [d["modification"] for d in dones] == ["original", "no-random"]
    assert all(d["steps"] == STEPS and d["trainer"] == "stacked" for d in dones)
    three = _project(built_project, tmp_path / "other", stack=3)
    alone = _project(built_project, tmp_path / "alone")
    for done in dones:
        run = resolve_run(cfg, done["modification"], 0)
        assert resolve_run(three, done["modification"], 0).fingerprint("x") == \
            run.fingerprint("x") != resolve_run(alone, done["modification"], 0).fingerprint("x")
    for path in dirs:
        loaded = AutoModelForMaskedLM.from_pretrained(path)
        for name, weight in saved_weights(path).items():
            assert torch.equal(loaded.state_dict()[name], weight), name
    assert not torch.equal(*(saved_weights(p)["bert.embeddings.word_embeddings.weight"]
                             for p in dirs))
    client = MlflowClient()
    for done in dones:
        run = client.get_run(done["run_id"])
        assert run.info.status == "FINISHED"
        assert run.data.tags["fingerprint"] == done["fingerprint"]
        assert run.data.params["train.stack"] == "2"
        losses = client.get_metric_history(done["run_id"], "train_loss")
        assert sorted(m.step for m in losses) == list(range(1, STEPS + 1))
    records = [r for r in iter_records(cfg.paths.results) if r.kind == "train"]
    assert sorted(r.model["modification"] for r in records) == ["no-random", "original"]
    assert "model in" in capsys.readouterr().out


@pytest.mark.slow  # trains two small models (with MLflow) two or three times
def test_a_stopped_stack_resumes_to_the_same_members(built_project: Path,
                                                     tmp_path: Path) -> None:
    """Stopped after step 2 (checkpointed, runs KILLED) and run again, the stack ends with
    the weights of an uninterrupted one, bit for bit (the same stack, the same kernels),
    each member's MLflow run resumed, its steps logged once."""
    members = [("original", 0), ("original", 1)]
    whole = _stack(_project(built_project, tmp_path / "whole"), members)
    cfg = _project(built_project, tmp_path / "stopped")
    with pytest.raises(StoppedEarly):
        _stack(cfg, members, stop_after_step=2)
    runs = [resolve_run(cfg, mod, seed) for mod, seed in members]
    assert [list(checkpoint_steps(run_checkpoint_area(run))) for run in runs] == [[2], [2]]
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    for run in runs:
        found = MlflowClient().search_runs(
            [experiment], f"tags.fingerprint = '{model_fingerprint(run)}'")
        assert [r.info.status for r in found] == ["KILLED"]
    resumed = _stack(cfg, members)
    for mine, theirs in zip(resumed, whole, strict=True):
        expected = saved_weights(theirs)
        for name, weight in saved_weights(mine).items():
            assert torch.equal(weight, expected[name]), name
        done = read_done(mine)
        run = MlflowClient().get_run(done["run_id"])
        assert run.info.status == "FINISHED"
        steps = [m.step for m in MlflowClient().get_metric_history(done["run_id"],
                                                                   "train_loss")]
        assert sorted(steps) == list(range(1, STEPS + 1))


@pytest.mark.slow  # trains two small models (with MLflow) two or three times
def test_members_at_different_steps_regroup(built_project: Path, tmp_path: Path) -> None:
    """A member ahead of the other (checkpoints of different steps, as a kill between two
    members' writes leaves) waits until the other catches up; a member does not depend on
    who it is stacked with: the ends equal the uninterrupted stack's to float rounding."""
    members = [("original", 0), ("no-random", 1)]
    whole = _stack(_project(built_project, tmp_path / "whole"), members)
    cfg = _project(built_project, tmp_path / "staggered")
    with pytest.raises(StoppedEarly):
        _stack(cfg, members[:1], stop_after_step=1)  # original s0 alone, to step 1
    with pytest.raises(StoppedEarly):
        _stack(cfg, members[1:], stop_after_step=3)  # no-random s1 alone, to step 3
    resumed = _stack(cfg, members)
    for mine, theirs in zip(resumed, whole, strict=True):
        expected = saved_weights(theirs)
        for name, weight in saved_weights(mine).items():
            torch.testing.assert_close(weight, expected[name], rtol=1e-5, atol=1e-5,
                                       msg=name)
        assert read_done(mine)["steps"] == STEPS


@pytest.mark.parametrize(("stack", "extra", "message"), [
    (0, ["--seed", "1"], "train.stack = 0: must be an integer >= 1"),
    (3, ["--seed", "1"], "train.stack = 3: only 2 model(s) on offer (original x seeds 0, 1); "
                         "valid: 1 to 2"),
    (2, ["-m", "original", "-m", "overparam"], "cannot share a stack: overparam changes the "
                                               "architecture"),
    (2, ["-m", "nsp", "--seed", "1"], "nsp"),
])
def test_bad_stacks_are_one_line(built_project: Path, tmp_path: Path, capsys, stack: int,
                                 extra: list[str], message: str) -> None:
    cfg = _project(built_project, tmp_path)
    assert main([*_settings(cfg, stack), "train", "--seed", "0", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not cfg.paths.models.exists() and not cfg.paths.mlruns.exists()


@pytest.mark.slow  # trains and evaluates four small models
def test_study_run_trains_a_stack_and_books_each_member(built_project: Path, tmp_path: Path,
                                                        monkeypatch, capsys) -> None:
    """``multilab study run --stack 4``: two rows x two seeds in one ``train`` command, each
    member evaluated and recorded, the ledger empty afterwards; a second run trains nothing."""
    import shutil

    import yaml

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").symlink_to(built_project / "data")
    artifacts = tmp_path / "artifacts" / "studies" / "toy-stack"  # the smoke corpora: shared
    artifacts.mkdir(parents=True)
    for name in ("corpora", "vocab"):
        (artifacts / name).symlink_to(built_project / "artifacts" / name)
    folder = tmp_path / "studies"
    folder.mkdir()
    shutil.copytree(Path(__file__).resolve().parents[1] / "studies" / "claims",
                    folder / "claims")
    spec = {"name": "toy-stack", "paper": "dufter2020", "table": "Table 1", "title": "toy",
            "languages": ["3", "fake"], "profile": "smoke", "seeds": [0, 1], "paper_seeds": 5,
            "metrics": ["mu"], "claims": [],
            "rows": [{"id": "0", "modification": "original"},
                     {"id": "x", "modification": "no-random"}],
            "settings": {"train.max_train_sentences": 64, "train.eval_points": "[]",
                         "models.small.num_hidden_layers": 2, "evaluate.layers": "[0, 2]",
                         "evaluate.dev_sentences": 100, "evaluate.curve_sentences": 100}}
    (folder / "toy-stack.yaml").write_text(yaml.safe_dump(spec))
    args = ["--params", str(PARAMS), "study", "run", "toy-stack", "--studies", str(folder),
            "--stack", "4"]
    with one_torch_thread():
        assert main(args) == 0
    out = capsys.readouterr().out
    assert "original, no-random seeds 0, 1: 4 model(s) in stacks of up to 4" in out, out
    records = list(iter_records(tmp_path / "results"))
    trained = sorted((r.model["modification"], r.model["seed"]) for r in records
                     if r.kind == "train" and r.data["result"].get("trainer") == "stacked")
    assert trained == [("no-random", 0), ("no-random", 1), ("original", 0), ("original", 1)]
    assert len([r for r in records if r.kind == "evaluate"]) == 4
    assert not (tmp_path / "results" / "ledger.csv").exists()
    with one_torch_thread():
        assert main(args) == 0
    assert "model(s) in stacks" not in capsys.readouterr().out


def test_the_fingerprint_says_stacked_not_how_many(tmp_path: Path) -> None:
    """Any k > 1 gives a member one fingerprint (who shared its stack does not enter); k = 1
    is the single-model path's, unchanged (tests/test_fingerprint.py pins it)."""
    from multilab.errors import UserError

    prints = {k: resolve_run(smoke_config(tmp_path, train={"stack": k}), "lang-pos", 3)
              .fingerprint("data") for k in (1, 2, 16)}
    assert prints[2] == prints[16] != prints[1]
    assert prints[1] == resolve_run(smoke_config(tmp_path), "lang-pos", 3).fingerprint("data")
    with pytest.raises(UserError, match=r"train\.compile = true with train\.stack = 2"):
        smoke_config(tmp_path, train={"stack": 2, "compile": True})
