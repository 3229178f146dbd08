"""A project's data in one call: what ``dvc repro corpus vocab`` builds after ``setup.sh``'s
export, for a project in a folder of its own (the tests' smoke project, a benchmark's copy).

The DVC stages stay separate commands (each its own outputs and cache); this is the same work
for code that needs a built project and no DVC.
"""

from __future__ import annotations

from multilab.config import Config
from multilab.data import bible, corpus
from multilab.data.vocab import build_vocab


def build_project_data(cfg: Config) -> None:
    """Export the config's editions, build its corpora and its vocabulary (English and the
    Fake-English twin) under ``cfg.paths``, for real (about 10 s at the quick profile)."""
    for code in cfg.corpus.export_editions:
        bible.export_edition(code, cfg.paths.data)
    corpus.build_corpora(cfg.corpus, cfg.paths.data, cfg.paths.corpora)
    build_vocab(corpus.read_lines(cfg.paths.corpora / "train.txt"), cfg.vocab.size,
                cfg.paths.vocab, cfg.vocab.unit)
