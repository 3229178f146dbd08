"""Benchmark of the word-order measure: Match alignment + Kendall's tau at full size.

Issue 20 asks that aligning every language of the Bible database against English for 2,500
verses takes at most 5 minutes on the 2-core CPU, given precomputed word vectors. This script
times exactly that on random vectors of realistic sizes: ``--languages`` (24) targets ×
``--verses`` (2,500) verse pairs, English verses of 10–40 words, each target verse 0.7–1.3×
its English length (at least 3 words), for each of ``--dims`` (64: a model's hidden layer; 300:
fastText). Vectors are float32, as a model or fastText gives them. It also times turning
wordpieces into words (``merge_wordpieces``; 1–3 pieces per word) for every verse of every
language plus English, which the integration does once per vector source.

Random vectors make the matching no easier than real ones: the solver's work depends on the
sizes, not on how clear the best matching is.

Run from the project root (queue behind other heavy jobs; one thread, the team default):

    OMP_NUM_THREADS=1 flock /tmp/multilab-heavy.lock .venv/bin/python benchmarks/bench_wordorder.py

The report goes to ``benchmarks/results/wordorder.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from common import RESULTS, load_average, machine, write_json
from multilab.evaluation.wordorder import (
    cosine_similarities,
    kendall_tau,
    match_alignment,
    merge_wordpieces,
    verse_taus,
)

BUDGET_SECONDS = 300.0  # the lab's budget: all languages, 2,500 verses, <= 5 min on the 2-core CPU


def verse_lengths(rng: np.random.Generator, verses: int, languages: int) -> np.ndarray:
    """(languages + 1, verses) word counts: row 0 English (10-40), then each target."""
    english = rng.integers(10, 41, size=verses)
    ratios = rng.uniform(0.7, 1.3, size=(languages, verses))
    targets = np.maximum(3, np.rint(english * ratios)).astype(int)
    return np.vstack([english, targets])


def make_verses(rng: np.random.Generator, lengths: np.ndarray, dim: int) -> list[np.ndarray]:
    return [rng.standard_normal((int(n), dim)).astype(np.float32) for n in lengths]


def time_alignment(lengths: np.ndarray, dim: int, seed: int) -> dict:
    """Seconds for verse_taus of every language against English, and a per-part split."""
    rng = np.random.default_rng(seed)
    english = make_verses(rng, lengths[0], dim)
    per_language = []
    taus = []
    start = time.perf_counter()
    cpu_start = time.process_time()
    for row in lengths[1:]:
        target = make_verses(rng, row, dim)  # generated outside the timed calls below
        t0 = time.perf_counter()
        taus.append(float(verse_taus(english, target).mean()))
        per_language.append(time.perf_counter() - t0)
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    aligned = float(sum(per_language))
    # where the time goes, on the first language's 2,500 pairs
    target = make_verses(np.random.default_rng(seed + 1), lengths[1], dim)
    t0 = time.perf_counter()
    for s, t in zip(english, target, strict=True):
        cosine_similarities(s, t)
    cosine = time.perf_counter() - t0
    t0 = time.perf_counter()
    alignments = [match_alignment(s, t) for s, t in zip(english, target, strict=True)]
    match = time.perf_counter() - t0
    t0 = time.perf_counter()
    for a in alignments:
        kendall_tau(a)
    kendall = time.perf_counter() - t0
    pairs = lengths.shape[1] * (lengths.shape[0] - 1)
    return {
        "dim": dim,
        "pairs": pairs,
        "seconds_aligning_all_languages": round(aligned, 2),
        "seconds_including_vector_generation": round(wall, 2),
        "cpu_seconds_including_vector_generation": round(cpu, 2),
        "microseconds_per_pair": round(1e6 * aligned / pairs, 1),
        "seconds_per_language": round(aligned / len(per_language), 3),
        "slowest_language_seconds": round(max(per_language), 3),
        "share_of_budget": round(aligned / BUDGET_SECONDS, 4),
        "one_language_split_seconds": {
            "cosine_similarities": round(cosine, 3),
            "match_alignment_incl_cosine": round(match, 3),
            "kendall_tau": round(kendall, 3),
        },
        "mean_tau_of_random_vectors": round(float(np.mean(taus)), 4),
    }


def time_merging(lengths: np.ndarray, dim: int, seed: int) -> dict:
    """Seconds for merge_wordpieces on every verse of every language (English included)."""
    rng = np.random.default_rng(seed)
    total = 0.0
    verses = 0
    pieces_total = 0
    for row in lengths:
        for words in row:
            pieces_per_word = rng.integers(1, 4, size=int(words))
            word_ids = np.repeat(np.arange(int(words)), pieces_per_word)
            ids = [-1, *word_ids.tolist(), -1]  # [CLS] ... [SEP]
            pieces = torch.randn(len(ids), dim)
            t0 = time.perf_counter()
            merge_wordpieces(pieces, ids)
            total += time.perf_counter() - t0
            verses += 1
            pieces_total += len(ids)
    return {
        "dim": dim,
        "verses": verses,
        "pieces": pieces_total,
        "seconds": round(total, 2),
        "microseconds_per_verse": round(1e6 * total / verses, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--languages", type=int, default=24)
    parser.add_argument("--verses", type=int, default=2500)
    parser.add_argument("--dims", type=int, nargs="+", default=[64, 300])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "wordorder.json")
    args = parser.parse_args()

    record = {"machine": machine(), "languages": args.languages, "verses": args.verses,
              "budget_seconds": BUDGET_SECONDS}
    lengths = verse_lengths(np.random.default_rng(args.seed), args.verses, args.languages)
    record["words_per_verse"] = {
        "english_mean": round(float(lengths[0].mean()), 1),
        "target_mean": round(float(lengths[1:].mean()), 1),
        "max": int(lengths.max()),
    }
    record["alignment"] = []
    record["merging"] = []
    for dim in args.dims:  # interleave the arms by dim so both see the same load
        result = time_alignment(lengths, dim, args.seed)
        print(f"dim {dim}: {result['seconds_aligning_all_languages']} s for "
              f"{result['pairs']} pairs ({result['microseconds_per_pair']} µs/pair)")
        record["alignment"].append(result)
        merged = time_merging(lengths, dim, args.seed)
        print(f"dim {dim}: merging {merged['verses']} verses {merged['seconds']} s")
        record["merging"].append(merged)
    record["load_average_at_end"] = load_average()
    print(write_json(args.out, record))


if __name__ == "__main__":
    main()
