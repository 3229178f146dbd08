"""Benchmark of the knn-replace spaces on the real corpus: fastText, our VecMap, P@1.

Scenarios (all on the English / ``::``Fake-English wordpiece corpus of ``params.yaml``):

* ``stage``: the ``spaces`` settings of ``params.yaml``, mapped with each of ``--seeds``
  (the stage itself uses ``vecmap_seed``), to show the spread over VecMap's dropout draws;
* ``epochs5``: the same with fastText's default 5 epochs (what the reference figures were
  measured on, as far as we know);
* ``fasttext_start``: the stage's settings without our random initial vectors, i.e. with
  fastText 0.9.3's own initialisation that leaves 90% of the rows at zero with one thread.

Reference (artetxem/vecmap ``--unsupervised`` at the paper's commit on this machine kind,
/work/shared/NOTES.md): P@1 0.22 NN / 0.28 CSLS, about 200 s.

Run from the project root: ``.venv/bin/python benchmarks/bench_vecmap.py``; the report goes
to ``benchmarks/results/vecmap.json`` (``--out`` to change) and is summarised in
``benchmarks/RESULTS-vecmap.md``.
Missing corpora / vocabulary are built first with ``multilab corpus build`` / ``multilab vocab``.
The machine is usually shared: VecMap runs on one thread, and its CPU seconds are reported
beside the wall-clock seconds (CPU seconds ≈ wall seconds on an idle core).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import RESULTS, load_average, machine, write_json
from multilab.config import SpacesConfig
from multilab.data.corpus import read_lines
from multilab.data.vocab import load_tokenizer, vocabulary_words
from multilab.resolve import load_config
from multilab.spaces import fasttext_spaces

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = {"precision_at_1_nn": 0.22, "precision_at_1_csls": 0.28, "seconds_vecmap": 200.0}


def ensure_inputs(corpus_path: Path, vocab_dir: Path) -> None:
    """Build the corpus and the vocabulary with the project's CLI if they are missing."""
    multilab = str(Path(sys.executable).parent / "multilab")
    if not corpus_path.exists():
        subprocess.run([multilab, "corpus", "build"], cwd=ROOT, check=True)
    if not (vocab_dir / "english" / "tokenizer.json").exists():
        subprocess.run([multilab, "vocab"], cwd=ROOT, check=True)


def run_scenario(
    name: str, sentences: list[list[str]], vocab_words: list[str], cfg: SpacesConfig,
    seeds: list[int], random_start: bool = True,
) -> dict:
    """Train both spaces once, map them with every seed; timings and P@1 per seed.

    fastText's own initialisation may abort training ("Encountered NaN." from uninitialised
    rows); that outcome is recorded, not raised, since it is one of the things measured.
    """
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-vecmap-") as workdir:
            trained = fasttext_spaces.train_spaces(sentences, vocab_words, Path(workdir), cfg,
                                          random_start=random_start)
    except RuntimeError as err:
        print(f"{name}: fastText failed: {err}", file=sys.stderr)
        return {"spaces": dataclasses.asdict(cfg), "random_start": random_start,
                "fasttext_error": str(err), "seconds_fasttext": time.perf_counter() - started}
    runs = []
    for seed in seeds:
        cpu_started = time.process_time()
        _, metrics = fasttext_spaces.map_spaces(trained, seed, cfg.vecmap_max_iterations,
                                                cfg.threads, progress=False)
        metrics["cpu_seconds_vecmap"] = time.process_time() - cpu_started
        runs.append({"seed": seed, **metrics})
        print(f"{name} seed {seed}: " + json.dumps(
            {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}),
            file=sys.stderr)
    mean = {
        key: sum(run[key] for run in runs) / len(runs)
        for key in ("precision_at_1_nn", "precision_at_1_csls", "iterations",
                    "seconds_vecmap", "cpu_seconds_vecmap")
    }
    return {
        "spaces": dataclasses.asdict(cfg),
        "random_start": random_start,
        "seconds_fasttext": trained.seconds,
        "words_mapped": len(trained.en_rows),
        "runs": runs,
        "mean": mean,
        "ratio_to_reference": {
            "nn": mean["precision_at_1_nn"] / REFERENCE["precision_at_1_nn"],
            "csls": mean["precision_at_1_csls"] / REFERENCE["precision_at_1_csls"],
            "reference_seconds_over_ours": REFERENCE["seconds_vecmap"] / mean["seconds_vecmap"],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                        help="VecMap seeds for the stage's spaces (default: 0 1 2)")
    parser.add_argument("--only-stage", action="store_true",
                        help="skip the epochs5 and fasttext_start scenarios")
    parser.add_argument("--out", type=Path, default=RESULTS / "vecmap.json",
                        help="where the JSON report goes (default: benchmarks/results/vecmap.json)")
    args = parser.parse_args()

    cfg = load_config(args.params)
    paths = cfg.paths.rebased(ROOT)
    ensure_inputs(paths.corpora / "train.txt", paths.vocab)
    tokenizer = load_tokenizer(paths.vocab)
    sentences = [tokenizer.tokenize(line) for line in read_lines(paths.corpora / "train.txt")]
    vocab_words = vocabulary_words(tokenizer)

    report: dict = {
        "machine": machine() | {"fasttext": importlib.metadata.version("fasttext")},
        "reference": REFERENCE,
        "scenarios": {},
    }
    started = time.perf_counter()
    report["scenarios"]["stage"] = run_scenario("stage", sentences, vocab_words, cfg.spaces,
                                                args.seeds)
    if not args.only_stage:
        report["scenarios"]["epochs5"] = run_scenario(
            "epochs5", sentences, vocab_words, dataclasses.replace(cfg.spaces, epochs=5),
            [cfg.spaces.vecmap_seed],
        )
        report["scenarios"]["fasttext_start"] = run_scenario(
            "fasttext_start", sentences, vocab_words, cfg.spaces, [cfg.spaces.vecmap_seed],
            random_start=False,
        )
    report["seconds_total"] = time.perf_counter() - started
    report["load_average_at_end"] = load_average()
    print(json.dumps(report, indent=2, default=str))
    print(f"written to {write_json(args.out, report)}", file=sys.stderr)


if __name__ == "__main__":
    main()
