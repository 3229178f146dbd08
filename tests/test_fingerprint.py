"""A model's identity must not change by accident.

A fingerprint names a trained model: ``multilab train`` skips a model whose ``multilab.json``
holds the same fingerprint and resumes only checkpoints of the same fingerprint. A change of
its definition (the hashed fields, their spelling, the JSON dump, the data files hashed)
silently orphans every trained model and every running training. These values were computed
before the package was regrouped; change them only on purpose, and say so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from multilab.resolve import config_from_dict, resolve_run
from multilab.training.model_dir import data_fingerprint

#: The paper's values of params.yaml as of the regrouping, written out in full so that an edit of
#: params.yaml does not move this test; only a change of the fingerprint's definition does.
PINNED_PARAMS = {
    "profile": "pinned",
    "profiles": {"pinned": {}},
    "seeds": [0],
    "modification": "original",
    "study": ["original"],
    "experiment": None,
    "corpus": {"train_edition": "3", "train_books": [40, 66], "dev_edition": "k",
               "dev_books": [1, 39], "dev_sentences": 10000, "split_colons": True,
               "export_editions": ["3", "k"]},
    "vocab": {"size": 2048},
    "spaces": {"dim": 300, "epochs": 10, "min_count": 1, "window": 5, "char_ngrams": False,
               "threads": 1, "fake_shuffle_seed": 1, "knn_k": 1, "vecmap_seed": 0,
               "vecmap_max_iterations": 1000},
    "train": {"epochs": 100, "warmup_steps": 50, "weight_decay": 0.01, "adam_eps": 1.0e-6,
              "max_length": 128, "mask_prob": 0.15, "replacement_override": None,
              "checkpoint_every": 200, "log_every": 10, "max_train_sentences": None,
              "eval_points": [0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 0.95], "compile": False,
              "bucket_chunk": 1, "length_pieces": 1},
    "models": {
        "small": {"hidden_size": 64, "intermediate_size": 256, "num_attention_heads": 1,
                  "num_hidden_layers": 12, "max_position_embeddings": 256, "lr": 2.0e-3,
                  "batch_size": 256, "grad_accum": 1},
        "base": {"hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12,
                 "num_hidden_layers": 12, "max_position_embeddings": 256, "lr": 1.0e-4,
                 "batch_size": 16, "grad_accum": 16},
    },
    "evaluate": {"dev_sentences": 10000, "curve_sentences": 1000, "layers": [0, 8],
                 "mask_seed": 0, "batch_size": 512},
}

#: modification → (data fingerprint of the files below, fingerprint with it, fingerprint with
#: the data hash "0123456789abcdef"), seed 42; computed on main at 63a7742.
PINNED = {
    "original": ("f931b7b6fa9ad11e", "9c7360c0598a398a", "ec3325cd6c31f9ab"),
    "knn-replace": ("daa9a0a1d62a8fab", "34f9b7e3fe0b4530", "58cace4d96908a1c"),
    "lang-pos;shift-special;no-random;overparam": (
        "f931b7b6fa9ad11e", "68a74b654858c489", "95dab1aa40227d98"),
    "untrained": ("f931b7b6fa9ad11e", "dea0b2100caaac43", "e55c599e107cc0c7"),
}


def _pinned_project(root: Path):
    """The pinned configuration with fixed bytes in every file the data fingerprint hashes."""
    paths = {name: str(root / name) for name in ("data", "artifacts", "reports", "metrics",
                                                 "mlruns", "results")}
    cfg = config_from_dict({**PINNED_PARAMS, "paths": paths})
    files = {
        cfg.paths.corpora / "train.txt": b"In the beginning was the Word .\n",
        cfg.paths.vocab / "english" / "vocab.txt": b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n",
        cfg.paths.spaces / "knn.pt": b"knn table bytes",
    }
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return cfg


@pytest.mark.parametrize("modification", list(PINNED))
def test_fingerprints_are_pinned(modification: str, tmp_path: Path) -> None:
    run = resolve_run(_pinned_project(tmp_path), modification, 42)
    data_hash, with_data, with_fixed_hash = PINNED[modification]
    assert data_fingerprint(run) == data_hash
    assert run.fingerprint(data_hash) == with_data
    assert run.fingerprint("0123456789abcdef") == with_fixed_hash


def test_train_scope_changes_the_fingerprint_only_when_used(tmp_path: Path) -> None:
    """``corpus.train_scope`` came later: at its default (the New Testament) a model keeps the
    fingerprint it had before the option existed; the whole Bible is another model."""
    def fingerprint(corpus: dict) -> str:
        params = {**PINNED_PARAMS, "languages": ["3", "s"],
                  "corpus": {**PINNED_PARAMS["corpus"], **corpus}}
        return resolve_run(config_from_dict(params), "original", 42).fingerprint("0" * 16)

    before = fingerprint({})
    assert fingerprint({"train_scope": "nt"}) == before
    assert fingerprint({"train_scope": "bible"}) != before
