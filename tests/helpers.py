"""What several test modules share: paths, the smoke configuration, a CPU stand-in for the
Accelerator, and small helpers to set up and inspect projects. Fixtures live in conftest.py;
no test module imports another."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from multilab import tracking
from multilab.config import Config, load_config, parse_overrides
from multilab.data import bible, corpus
from multilab.data.vocab import build_vocab
from multilab.lab.metric_table import METRICS, TRAIN_LOSS

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params.yaml"
BIN = Path(sys.executable).parent  # the venv's dvc, multilab, mlflow
DVC = str(BIN / "dvc")


class CpuAccelerator:
    """What the trainer's ``_accumulate`` uses of an Accelerator, on one CPU process; counts
    the backward passes (each is a collective under DDP)."""

    device = "cpu"

    def __init__(self) -> None:
        self.backward_calls = 0

    def autocast(self):
        return contextlib.nullcontext()

    def no_sync(self, model):
        return contextlib.nullcontext()

    def backward(self, loss) -> None:
        self.backward_calls += 1
        loss.backward()


def smoke_config(tmp: Path, **overrides) -> Config:
    """The smoke profile with every path inside ``tmp``."""
    paths = {
        "data": str(tmp / "data"),
        "artifacts": str(tmp / "artifacts"),
        "reports": str(tmp / "reports"),
        "metrics": str(tmp / "metrics"),
        "mlruns": str(tmp / "mlruns"),
    }
    merged = {"profile": "smoke", "paths": paths}
    for key, value in overrides.items():
        merged[key] = value
    return load_config(PARAMS, merged)


def build_project_data(cfg: Config) -> None:
    """What `dvc repro corpus vocab` builds (after setup.sh's export), for a project in a
    temporary folder: Bible exports, corpora and vocabulary, for real."""
    for code in cfg.corpus.export_editions:
        bible.export_edition(code, cfg.paths.data)
    corpus.build_corpora(cfg.corpus, cfg.paths.data, cfg.paths.corpora)
    build_vocab(corpus.read_lines(cfg.paths.corpora / "train.txt"), cfg.vocab.size,
                cfg.paths.vocab)


# --------------------------------------------------------------------------- short runs
# A short, checkpointed smoke run: 128 sentences (256 examples, 4 steps an epoch × 2 epochs =
# 8 steps), a checkpoint every step and no curve points, so a `multilab` subprocess costs
# little more than its imports.

SENTENCES, STEPS = 128, 8
LAUNCH_TIMEOUT = 300  # seconds for any one subprocess: a hang fails the test, never blocks CI


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Evaluate and train in-process on one thread, as the subprocesses do: on 2 shared
    cores a second thread mostly spins (several times the CPU for the same result), and
    runs compared bit for bit must use the same number of threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def link_project(built_project: Path, root: Path) -> Path:
    """A project root sharing the session's corpora and vocabulary (as ``project`` does)."""
    (root / "artifacts").mkdir(parents=True)
    for name in ("corpora", "vocab"):
        (root / "artifacts" / name).symlink_to(built_project / "artifacts" / name)
    (root / "data").symlink_to(built_project / "data")
    return root


def tracked_smoke_model(built_project: Path, root: Path) -> Config:
    """A project in ``root`` with a finished smoke model (original, seed 0, 128 sentences)
    tracked in its MLflow store: what commands that read a trained model need."""
    from multilab.training.train import train_model

    cfg = smoke_config(link_project(built_project, root),
                       train={"max_train_sentences": 128, "eval_points": []})
    experiment = tracking.connect(cfg.paths, cfg.experiment)
    with one_torch_thread():
        train_model(cfg.run("original", 0), experiment_id=experiment, progress=False)
    return cfg


def tracked_model_cli(cfg: Config, *command: str) -> int:
    """``multilab <command>`` on a :func:`tracked_smoke_model` project (its paths and
    settings); the exit status."""
    from multilab.cli import main

    settings = ["profile=smoke", *(f"paths.{n}={getattr(cfg.paths, n)}" for n in
                                   ("data", "artifacts", "reports", "metrics", "mlruns")),
                "train.max_train_sentences=128", "train.eval_points=[]"]
    return main(cli_args(settings, *command))


def cli_settings(root: Path, **extra: object) -> list[str]:
    """``--set`` values: smoke profile, every path in ``root``, a short checkpointed run."""
    values: dict[str, object] = {
        "profile": "smoke",
        **{f"paths.{name}": root / name
           for name in ("data", "artifacts", "reports", "metrics", "mlruns")},
        "seeds": "[0, 1]",
        "study": "[original]",
        "train.max_train_sentences": SENTENCES,
        "train.checkpoint_every": 1,
        "train.eval_points": "[]",
        **extra,
    }
    return [f"{key}={value}" for key, value in values.items()]


def config_of(settings: list[str]) -> Config:
    return load_config(PARAMS, parse_overrides(settings))


def cli_args(settings: list[str], *command: str) -> list[str]:
    return ["--params", str(PARAMS), *(f"--set={s}" for s in settings), *command]


def subprocess_env(tracking_uri: str | None = None) -> dict[str, str]:
    """Subprocess environment: one thread (bit-identical runs, modest CPU), chosen store."""
    env = {k: v for k, v in os.environ.items() if k != tracking.URI_VARIABLE}
    env |= {"OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    if tracking_uri:
        env[tracking.URI_VARIABLE] = tracking_uri
    return env


def launch(settings: list[str], log: Path, env: dict[str, str], *command: str
            ) -> subprocess.Popen:
    with log.open("a") as handle:
        return subprocess.Popen(
            [str(BIN / "multilab"), "-v", *cli_args(settings, *command)],
            stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=log.parent,
        )


def finish(process: subprocess.Popen, log: Path) -> None:
    try:
        code = process.wait(timeout=LAUNCH_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail(f"{process.args[1:4]} hung for {LAUNCH_TIMEOUT}s:\n{log.read_text()[-3000:]}")
    if code != 0:
        pytest.fail(f"exit {code}:\n{log.read_text()[-4000:]}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def saved_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(model_dir / "model.safetensors"))


def evaluated_metrics(record: dict) -> dict[str, float]:
    return {k: v for k, v in record["metrics"].items() if k != "eval_seconds"}


def run_statuses(cfg: Config) -> list[str]:
    """Status of every run in the project's store (none if it was never created)."""
    if not (cfg.paths.mlruns / "mlflow.db").exists():
        return []
    return tracking.search_runs(cfg.paths, cfg.experiment)["status"].tolist()


def dead_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def fake_run(cfg: Config, experiment: str, mod: str, seed: int, value: float, *,
             fingerprint: str | None = None, evaluated: bool = True, fail: bool = False) -> None:
    """A run as train + evaluate leave it, with every table metric = ``value``."""
    tags = {"modification": mod, "seed": seed, "profile": cfg.profile,
            "fingerprint": fingerprint or f"{mod}-{seed}"}
    if evaluated:
        tags["evaluated"] = "true"
    try:
        with tracking.run(experiment, tags=tags):
            tracking.log_metrics(dict.fromkeys(METRICS, value))
            tracking.log_metrics({TRAIN_LOSS: 8.0 - value}, step=1)
            if fail:
                raise RuntimeError("crash")
    except RuntimeError:
        pass


def files_of_fresh_processes(script: str, args: list[str], out_of: list[Path]
                             ) -> list[dict[Path, bytes]]:
    """Run ``python -c script *args out`` in two fresh processes with different hash seeds
    (``out`` = ``out_of[i]``, appended to the arguments) and return every file each wrote,
    by relative path: what must be byte-identical for a build to be reproducible."""
    written = []
    for hash_seed, out in zip(("1", "2"), out_of, strict=True):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        subprocess.run([sys.executable, "-c", script, *args, str(out)], env=env, check=True)
        files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
        written.append({f: (out / f).read_bytes() for f in files})
    return written
