"""Benchmark of the spaces stage on the real corpus: fastText time, VecMap time, P@1.

Builds the real English / Fake-English spaces (params.yaml values: dim 300, 5 epochs, no
char n-grams, shuffled Fake corpus) with :func:`multilab.spaces.build_spaces`, then re-maps
the same two fastText spaces without the iteration cap to show what the cap costs. Reference
(artetxem/vecmap ``--unsupervised`` on the same spaces): P@1 0.22 NN / 0.28 CSLS, ~200 s.

Run from the project root: ``.venv/bin/python benchmarks/bench_vecmap.py [--out DIR]``.
Missing corpora / vocabulary are built first with ``multilab corpus build`` / ``multilab vocab``.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from multilab import spaces, vecmap
from multilab.config import load_config
from multilab.corpus import read_lines
from multilab.vocab import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = {"precision_at_1_nn": 0.22, "precision_at_1_csls": 0.28, "seconds": 200.0}


def ensure_inputs(corpus_path: Path, vocab_dir: Path) -> None:
    """Build the corpus and the vocabulary with the project's CLI if they are missing."""
    multilab = str(Path(sys.executable).parent / "multilab")
    if not corpus_path.exists():
        subprocess.run([multilab, "corpus", "build"], cwd=ROOT, check=True)
    if not (vocab_dir / "english" / "tokenizer.json").exists():
        subprocess.run([multilab, "vocab"], cwd=ROOT, check=True)


def remap_uncapped(out_dir: Path, vocab_words: list[str], seed: int, threads: int) -> dict:
    """Map the stage's fastText spaces again, this time until the schedule converges."""
    _, en_vectors = vecmap.read_vec(out_dir / spaces.ENGLISH_VEC)
    _, fake_vectors = vecmap.read_vec(out_dir / spaces.FAKE_VEC)
    en_mapped, _ = spaces.load_mapped_spaces(out_dir, vocab_words)
    trained = torch.nonzero(en_mapped.norm(dim=1) > 0).flatten()  # absent words are zero
    result = vecmap.map_unsupervised(
        en_vectors[trained], fake_vectors[trained], seed=seed, max_iterations=None,
        threads=threads, progress=False,
    )
    gold = torch.arange(len(trained))
    return {
        "precision_at_1_nn": vecmap.precision_at_1(result.src_mapped, result.trg_mapped, gold),
        "precision_at_1_csls": vecmap.precision_at_1(
            result.src_mapped, result.trg_mapped, gold, method="csls"
        ),
        "iterations": result.iterations,
        "objective": result.objective,
        "seconds_vecmap": result.seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="output folder (default: a temp folder)")
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    args = parser.parse_args()

    cfg = load_config(args.params)
    paths = cfg.paths.rebased(ROOT)
    ensure_inputs(paths.corpora / "train.txt", paths.vocab)
    tokenizer = load_tokenizer(paths.vocab)
    sentences = [tokenizer.tokenize(line) for line in read_lines(paths.corpora / "train.txt")]
    vocab_words = tokenizer.convert_ids_to_tokens(list(range(cfg.vocab.size)))

    with tempfile.TemporaryDirectory(prefix="bench-vecmap-") as tmp:
        out_dir = args.out or Path(tmp) / "spaces"
        started = time.perf_counter()
        stage = spaces.build_spaces(sentences, vocab_words, out_dir, cfg.spaces)
        stage["seconds_stage"] = time.perf_counter() - started
        uncapped = remap_uncapped(out_dir, vocab_words, cfg.spaces.vecmap_seed, cfg.spaces.threads)

    report = {
        "machine": f"{platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} torch threads available",
        "spaces_config": vars(cfg.spaces),
        "stage": stage,
        "uncapped": uncapped,
        "reference": REFERENCE,
        "ratios": {
            "stage_nn_vs_reference": stage["precision_at_1_nn"] / REFERENCE["precision_at_1_nn"],
            "stage_csls_vs_reference": stage["precision_at_1_csls"]
            / REFERENCE["precision_at_1_csls"],
            "uncapped_nn_vs_reference": uncapped["precision_at_1_nn"]
            / REFERENCE["precision_at_1_nn"],
            "uncapped_csls_vs_reference": uncapped["precision_at_1_csls"]
            / REFERENCE["precision_at_1_csls"],
            "reference_seconds_over_stage_vecmap": REFERENCE["seconds"] / stage["seconds_vecmap"],
            "reference_seconds_over_uncapped_vecmap": REFERENCE["seconds"]
            / uncapped["seconds_vecmap"],
        },
    }
    print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
