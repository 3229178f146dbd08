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

Run from the project root: ``.venv/bin/python benchmarks/bench_vecmap.py [--json FILE]``.
Missing corpora / vocabulary are built first with ``multilab corpus build`` / ``multilab vocab``.
The machine is usually shared: VecMap runs on one thread, and its CPU seconds are reported
beside the wall-clock seconds (CPU seconds ≈ wall seconds on an idle core).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from multilab import spaces
from multilab.config import SpacesConfig, load_config
from multilab.corpus import read_lines
from multilab.vocab import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = {"precision_at_1_nn": 0.22, "precision_at_1_csls": 0.28, "seconds_vecmap": 200.0}


def ensure_inputs(corpus_path: Path, vocab_dir: Path) -> None:
    """Build the corpus and the vocabulary with the project's CLI if they are missing."""
    multilab = str(Path(sys.executable).parent / "multilab")
    if not corpus_path.exists():
        subprocess.run([multilab, "corpus", "build"], cwd=ROOT, check=True)
    if not (vocab_dir / "english" / "tokenizer.json").exists():
        subprocess.run([multilab, "vocab"], cwd=ROOT, check=True)


def cpu_model() -> str:
    """The CPU's model name (Linux), else what the platform module knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine() -> dict:
    """What the numbers were measured on."""
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "nproc": len(os.sched_getaffinity(0)),
        "torch": torch.__version__,
        "fasttext": importlib.metadata.version("fasttext"),
        "python": platform.python_version(),
    }


def run_scenario(
    name: str, sentences: list[list[str]], vocab_words: list[str], cfg: SpacesConfig,
    seeds: list[int], random_start: bool = True,
) -> dict:
    """Train both spaces once, map them with every seed; timings and P@1 per seed."""
    with tempfile.TemporaryDirectory(prefix="bench-vecmap-") as workdir:
        trained = spaces.train_spaces(sentences, vocab_words, Path(workdir), cfg,
                                      random_start=random_start)
    runs = []
    for seed in seeds:
        cpu_started = time.process_time()
        _, metrics = spaces.map_spaces(trained, seed, cfg.vecmap_max_iterations, cfg.threads,
                                       progress=False)
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
    parser.add_argument("--json", type=Path, help="also write the report to this file")
    args = parser.parse_args()

    cfg = load_config(args.params)
    paths = cfg.paths.rebased(ROOT)
    ensure_inputs(paths.corpora / "train.txt", paths.vocab)
    tokenizer = load_tokenizer(paths.vocab)
    sentences = [tokenizer.tokenize(line) for line in read_lines(paths.corpora / "train.txt")]
    vocab_words = tokenizer.convert_ids_to_tokens(list(range(cfg.vocab.size)))

    report: dict = {"machine": machine(), "load_before": os.getloadavg(),
                    "reference": REFERENCE, "scenarios": {}}
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
    report["load_after"] = os.getloadavg()
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
