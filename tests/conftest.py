"""Shared fixtures: one real smoke-profile project (corpora + vocab from the Bible DB), built
once per test session in a temp dir, and helpers to train smoke models into it."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import pytest

from multilab.config import Config, load_config
from multilab.data import bible, corpus
from multilab.data.vocab import build_vocab

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


@pytest.fixture(scope="session")
def built_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Exported editions, corpora and vocabulary, built for real once."""
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    tmp = tmp_path_factory.mktemp("project")
    cfg = smoke_config(tmp)
    for code in cfg.corpus.export_editions:
        bible.export_edition(code, cfg.paths.data)
    corpus.build_corpora(cfg.corpus, cfg.paths.data, cfg.paths.corpora)
    build_vocab(
        corpus.read_lines(cfg.paths.corpora / "train.txt"), cfg.vocab.size, cfg.paths.vocab
    )
    return tmp


@pytest.fixture
def project(built_project: Path, tmp_path: Path) -> Config:
    """A fresh smoke project per test, sharing the session's corpora and vocabulary."""
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    for name in ("corpora", "vocab"):
        (artifacts / name).symlink_to(built_project / "artifacts" / name)
    (tmp_path / "data").symlink_to(built_project / "data")
    return smoke_config(tmp_path)
