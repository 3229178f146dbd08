"""``multilab study run --executor ray``: a study's runs as tasks on a local Ray instance.

The Ray executor only chooses where the local runner's commands run, so a study run through it
must leave the records of the local runner (fingerprints, weights, metrics, the command that
made them), and a worker killed mid-training must be retried by Ray and resume from the run's
checkpoint to the same weights. Without Ray installed, asking for it is one line, exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from multilab.cli import main
from multilab.errors import UserError
from multilab.studies.ray_executor import INSTALL, RayExecutor, passed_environment
from multilab.studies.records import iter_records
from multilab.training.checkpoints import TRAIN_LOCK
from multilab.training.model_dir import CHECKPOINT_PREFIX
from tests.helpers import LAUNCH_TIMEOUT, PARAMS, one_torch_thread

ROOT = Path(__file__).resolve().parent.parent
STUDIES = ROOT / "studies"
STEPS = 8  # 128 sentences, a checkpoint every step: a kill lands between two of them
SPEC = {"name": "toy-ray", "paper": "dufter2020", "table": "Table 1", "title": "toy",
        "languages": ["3", "fake"], "profile": "smoke", "seeds": [0, 1], "paper_seeds": 5,
        "metrics": ["mu", "retrieval_p1.l0", "retrieval_p1.l8"],
        "rows": [{"id": "0", "modification": "original"}],
        "settings": {"train.max_train_sentences": 128, "train.checkpoint_every": 1,
                     "train.eval_points": "[]", "evaluate.dev_sentences": 50},
        "claims": ["dufter2020-t1-r0-retrieval-layer8"]}


def _project(built_project: Path, root: Path) -> list[str]:
    """A project folder with the toy study; the ``multilab`` arguments that run it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "data").symlink_to(built_project / "data")
    folder = root / "studies"
    folder.mkdir()
    shutil.copytree(STUDIES / "claims", folder / "claims")
    (folder / "toy-ray.yaml").write_text(yaml.safe_dump(SPEC))
    return ["--params", str(PARAMS), "study", "run", "toy-ray", "--studies", str(folder),
            "--out", str(root / "docs")]


def _run_in(root: Path, args: list[str]) -> int:
    """``main(args)`` from ``root`` (relative paths resolve there, as for a user), one thread."""
    here = Path.cwd()
    os.chdir(root)
    try:
        with one_torch_thread():
            return main(args)
    finally:
        os.chdir(here)


def _comparable(root: Path) -> dict[tuple, dict]:
    """Each record of ``root/results`` by (kind, modification, seed), less what differs
    between two runs of the same model: the MLflow run id, the date, the pid, timings."""
    out = {}
    for record in iter_records(root / "results"):
        data = json.loads(json.dumps(record.data))
        for block in ("model", "result"):
            data.get(block, {}).pop("run_id", None)
        data["provenance"] = {key: value for key, value in data["provenance"].items()
                              if key not in ("date", "pid")}
        out[(record.kind, record.model.get("modification"), record.model.get("seed"))] = \
            _untimed(data)
    return out


def _untimed(value: object) -> object:
    """``value`` without the timings (``…seconds``, ``tokens_per_s``), at any depth."""
    if isinstance(value, dict):
        return {key: _untimed(item) for key, item in value.items()
                if not key.endswith(("seconds", "tokens_per_s"))}
    if isinstance(value, list):
        return [_untimed(item) for item in value]
    return value


def _model_dir(root: Path, seed: int) -> Path:
    return root / "artifacts" / "studies" / "toy-ray" / "models" / "original" / f"seed{seed}"


@pytest.fixture(scope="module")
def local_ray() -> Iterator[object]:
    """A local Ray instance of 2 CPUs, as CI can start one (no dashboard)."""
    ray = pytest.importorskip("ray")
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def local_reference(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy study run by the local runner: the records the Ray executor must match."""
    root = tmp_path_factory.mktemp("local")
    assert _run_in(root, _project(built_project, root)) == 0
    return root


@pytest.mark.slow
def test_a_study_run_by_ray_leaves_the_local_runners_records(
        local_ray, local_reference: Path, built_project: Path, tmp_path: Path) -> None:
    root = tmp_path / "ray"
    args = _project(built_project, root)
    sys_argv = sys.argv
    assert _run_in(root, [*args, "--executor", "ray"]) == 0
    assert sys.argv == sys_argv
    local, by_ray = _comparable(local_reference), _comparable(root)
    assert sorted(local) == [(kind, "original", seed) for kind in ("evaluate", "train")
                             for seed in (0, 1)]
    assert by_ray == local  # fingerprints, weights' SHA-256, metrics, config, command
    for seed in (0, 1):
        assert (_model_dir(root, seed) / "model.safetensors").read_bytes() == \
            (_model_dir(local_reference, seed) / "model.safetensors").read_bytes()
    assert _run_in(root, [*args, "--executor", "ray"]) == 0  # nothing is missing: no task


class _Killer(threading.Thread):
    """SIGKILLs the process that trains ``area``'s model once its first checkpoint is there:
    the Ray worker itself (the training runs in it), as a lost node or the OOM killer would."""

    def __init__(self, artifacts: Path) -> None:
        super().__init__(daemon=True)
        self.artifacts, self.killed, self.at_step = artifacts, 0, 0

    def run(self) -> None:
        deadline = time.monotonic() + LAUNCH_TIMEOUT
        while time.monotonic() < deadline:
            for checkpoint in self.artifacts.rglob(f"{CHECKPOINT_PREFIX}*"):
                owner = checkpoint.parent.parent / f"{TRAIN_LOCK}.owner"
                words = owner.read_text().split() if owner.is_file() else []
                if checkpoint.name[len(CHECKPOINT_PREFIX):].isdigit() and len(words) > 1:
                    self.at_step = int(checkpoint.name[len(CHECKPOINT_PREFIX):])
                    self.killed = int(words[1])  # "pid N on HOST"
                    os.kill(self.killed, signal.SIGKILL)
                    return
            time.sleep(0.005)


@pytest.mark.slow
def test_a_worker_killed_mid_training_is_retried_and_resumes(
        local_ray, local_reference: Path, built_project: Path, tmp_path: Path) -> None:
    from multilab import tracking
    from multilab.resolve import load_config, parse_overrides

    root = tmp_path / "killed"
    args = _project(built_project, root)
    (root / "artifacts").mkdir()
    killer = _Killer(root / "artifacts")
    killer.start()
    assert _run_in(root, [*args, "--executor", "ray", "--seeds", "0"]) == 0
    killer.join(timeout=5)
    assert killer.killed and killer.killed != os.getpid()
    assert 1 <= killer.at_step < STEPS  # killed mid-training, after a checkpoint
    assert (_model_dir(root, 0) / "model.safetensors").read_bytes() == \
        (_model_dir(local_reference, 0) / "model.safetensors").read_bytes()
    ours = _comparable(root)
    assert ours[("evaluate", "original", 0)] == \
        _comparable(local_reference)[("evaluate", "original", 0)]
    # resumed, not restarted: the killed MLflow run is the one that finished (a restart from
    # step 0 leaves it KILLED beside a new one), continued by another process
    here = Path.cwd()
    os.chdir(root)
    try:
        cfg = load_config(PARAMS, parse_overrides([]))
        runs = tracking.search_runs(cfg.paths, "toy-ray")
    finally:
        os.chdir(here)
    assert runs["status"].tolist() == ["FINISHED"]
    assert runs[f"tags.{tracking.PID_TAG}"].tolist() != [str(killer.killed)]


def test_without_ray_the_executor_is_one_line_naming_the_install(
        built_project: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    args = _project(built_project, tmp_path)
    assert _run_in(tmp_path, [*args, "--executor", "ray"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and INSTALL in err, err
    assert not (tmp_path / "artifacts").exists()  # refused before any data was built


@pytest.mark.parametrize(("extra", "message"), [
    (["--executor", "dask"], "--executor 'dask'; valid: local, ray"),
    (["--address", "head:6379"], "--address needs --executor ray"),
    (["--executor", "ray", "--stack", "2"], "--stack 2 with --executor ray"),
    (["--executor", "ray", "--queue"], "--queue with --executor ray"),
])
def test_a_bad_executor_choice_is_one_line(built_project: Path, tmp_path: Path, capsys,
                                           extra: list[str], message: str) -> None:
    args = _project(built_project, tmp_path)
    assert _run_in(tmp_path, [*args, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_a_run_asks_for_what_the_cluster_has() -> None:
    executor = RayExecutor(main, Path())
    assert executor.resources({"CPU": 2.0}) == (1.0, 0.0)
    assert executor.resources({"CPU": 16.0, "GPU": 8.0}) == (1.0, 1.0)  # one GPU a run
    sharing = RayExecutor(main, Path(), gpus_per_run=0.25, cpus_per_run=2)
    assert sharing.resources({"CPU": 16.0, "GPU": 1.0}) == (2, 0.25)
    with pytest.raises(UserError, match="--gpus-per-run 1: the Ray cluster has 0 GPU"):
        RayExecutor(main, Path(), gpus_per_run=1).resources({"CPU": 2.0})
    with pytest.raises(UserError, match="--cpus-per-run 4: the Ray cluster has 2 CPU"):
        RayExecutor(main, Path(), cpus_per_run=4).resources({"CPU": 2.0})


def test_tasks_get_the_drivers_tracking_uri_and_the_labs_switches() -> None:
    environ = {"MLFLOW_TRACKING_URI": "http://head:5000", "MULTILAB_MIXED_PRECISION": "bf16",
               "HOME": "/root", "PATH": "/usr/bin"}
    assert passed_environment(environ) == {"MLFLOW_TRACKING_URI": "http://head:5000",
                                           "MULTILAB_MIXED_PRECISION": "bf16"}


def test_a_cluster_ray_cannot_find_is_one_line(tmp_path: Path, monkeypatch) -> None:
    """``--address auto`` where no cluster runs (its head is found by Ray's own search, so
    check_address lets it pass), or a head gone since it was checked: ``ray.init`` raised
    ConnectionError, a traceback after the study's data was built. One line now."""
    ray = pytest.importorskip("ray")

    def no_cluster(**_options):
        raise ConnectionError("Could not find any running Ray instance. Please specify the "
                              "one to connect to by setting `--address` flag or "
                              "`RAY_ADDRESS` environment variable.")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", no_cluster)
    with pytest.raises(UserError) as refused:
        RayExecutor(main, tmp_path, address="auto")([])
    assert str(refused.value) == (
        "--address auto: no Ray cluster to connect to (Could not find any running Ray "
        "instance. Please specify the one to connect to by setting `--address` flag or "
        "`RAY_ADDRESS` environment variable.); start one (`ray start --head`) or leave "
        "--address out (a local one)")
