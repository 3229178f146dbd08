"""Shared fixtures: one real smoke-profile project (corpora + vocab from the Bible DB), built
once per test session in a temp dir, and helpers to train smoke models into it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from multilab.config import Config
from multilab.data import bible, corpus
from multilab.data.vocab import build_vocab
from tests.helpers import smoke_config


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
