"""Evaluation time: multilab's batched evaluation vs a straightforward per-sentence one.

The fast path is :func:`multilab.evaluation.evaluate.evaluate_model` with the default evaluate
config (10,000 dev sentences, layers 0 and 8, word translation over the 2,048-word vocabulary,
train and dev perplexity). The slow path is what one would write first: every sentence (and
every vocabulary word, and every perplexity example) through the model alone, then the
per-sentence metric loops the tests use as definitions (``multilab/evaluation/reference.py``:
``reference_alignment_counts``, ``reference_retrieval_p1``). It runs on a subset and is
extrapolated linearly to the full sizes — a lower bound, since one-query-at-a-time
retrieval grows with the square of the set.

Timing does not depend on the weights, so a randomly initialised BERT-small is used unless
``--model DIR`` names a trained one. The machine is shared: the load average is recorded, and
process CPU time is reported beside wall time.

Run from the project root: ``.venv/bin/python benchmarks/bench_eval.py [--subset 500]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from common import RESULTS, load_average, machine, project_config, write_json
from multilab.config import RunConfig
from multilab.data.batches import mask_tokens, seeded_generator, tokenize_lines, training_examples
from multilab.data.corpus import read_lines
from multilab.data.inputs import ENGLISH, FAKE, InputEncoder
from multilab.data.vocab import load_tokenizer
from multilab.evaluation import metrics, reference
from multilab.evaluation.evaluate import (
    PERPLEXITY_REPLACEMENT,
    evaluate_model,
    multilinguality,
    perplexity,
    translation,
)
from multilab.resolve import resolve_run
from multilab.training.model import build_model, hidden_layers, load_model

MODIFICATION = "original"


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, wall seconds, process CPU seconds)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


@torch.no_grad()
def slow_multilinguality(model, encoder: InputEncoder, sentences: list[torch.Tensor],
                         layers: tuple[int, ...]) -> dict[str, float]:
    """One sentence pair through the model at a time; per-sentence alignment loops."""
    vectors: dict[int, tuple[list, list]] = {layer: ([], []) for layer in layers}
    golds = []
    for words in sentences:
        n = len(words)
        for lang in (ENGLISH, FAKE):
            batch = encoder.batch([words], [lang])
            for layer, h in zip(layers, hidden_layers(model, batch.model_inputs(), list(layers)),
                                strict=True):
                vectors[layer][lang].append(h[0, 1 : 1 + n])
        golds.append(reference.gold_alignment(encoder.recipe, n))
    results = {}
    for layer in layers:
        english, fake = vectors[layer]
        align = metrics.alignment_score(reference.reference_alignment_counts(english, fake, golds))
        rho = reference.reference_retrieval_p1(
            torch.stack([e.mean(0) for e in english]), torch.stack([f.mean(0) for f in fake])
        )
        results |= {f"align_f1.l{layer}": align.f1, f"retrieval_p1.l{layer}": rho}
    return results


@torch.no_grad()
def slow_translation(model, encoder: InputEncoder, layers: tuple[int, ...],
                     words: int) -> dict[str, float]:
    """Each of the first ``words`` vocabulary entries alone through the model, per language."""
    vectors: dict[int, tuple[list, list]] = {layer: ([], []) for layer in layers}
    for word in range(words):
        for lang in (ENGLISH, FAKE):
            batch = encoder.batch([torch.tensor([word])], [lang])
            for layer, h in zip(layers, hidden_layers(model, batch.model_inputs(), list(layers)),
                                strict=True):
                vectors[layer][lang].append(h[0, 1])
    return {
        f"translation_p1.l{layer}": reference.reference_retrieval_p1(
            torch.stack(vectors[layer][0]), torch.stack(vectors[layer][1])
        )
        for layer in layers
    }


@torch.no_grad()
def slow_perplexity(model, encoder: InputEncoder, sentences: list[torch.Tensor],
                    run: RunConfig) -> float:
    """Each example alone, full-vocabulary head (``model(...).logits``), NLL of masked tokens."""
    examples = training_examples(sentences, run.recipe, encoder)
    total, count = 0.0, 0
    for number in range(len(examples)):
        masked = mask_tokens(
            examples.batch(torch.tensor([number])), encoder, run.study.train.mask_prob,
            PERPLEXITY_REPLACEMENT, seeded_generator(0, number),
        )
        logits = model(**masked.inputs).logits[masked.selected]
        nll, n = metrics.masked_nll(logits, masked.labels)
        total, count = total + nll, count + n
    return metrics.perplexity(total, count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subset", type=int, default=500,
                        help="dev sentences (and perplexity sentences) for the slow path")
    parser.add_argument("--subset-words", type=int, default=512,
                        help="vocabulary words for the slow word-translation path")
    parser.add_argument("--model", type=Path, help="a trained model dir (default: random init)")
    parser.add_argument("--project", type=Path,
                        help="built project folder (default: artifacts/ or a temp build)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS / "eval.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    cfg = project_config(args.project)
    run = resolve_run(cfg, MODIFICATION, 0)
    ev = cfg.evaluate
    model = load_model(args.model) if args.model else build_model(run.model, 4096, 0)
    model.eval()
    record: dict[str, Any] = {
        "machine": machine(),
        "model": str(args.model) if args.model else "randomly initialised BERT-small (seed 0)",
        "evaluate_config": vars(ev),
        "args": vars(args) | {"out": str(args.out)},
    }
    tokenizer = load_tokenizer(cfg.paths.vocab)
    encoder = InputEncoder(run.recipe, len(tokenizer), cfg.train.max_length)
    dev, _ = tokenize_lines(read_lines(cfg.paths.corpora / "dev.txt")[: ev.dev_sentences],
                            tokenizer, encoder)
    train, _ = tokenize_lines(read_lines(cfg.paths.corpora / "train.txt"), tokenizer, encoder)
    sizes = {"dev_sentences": len(dev), "train_sentences": len(train),
             "words": encoder.vocab_size}

    # 1. the whole evaluation as the evaluate stage runs it (includes tokenising both corpora)
    full, wall, cpu = timed(lambda: evaluate_model(model, run))
    record["fast_evaluate_model"] = {"wall_seconds": wall, "cpu_seconds": cpu,
                                     "eval_seconds_reported": full["eval_seconds"],
                                     "metrics": full, "load_average": load_average()}
    print(f"[fast] evaluate_model: {wall:.1f} s wall, {cpu:.1f} s CPU", file=sys.stderr)

    # 2. per component, fast then slow back to back (the load hits both alike)
    n, n_words = min(args.subset, len(dev)), min(args.subset_words, encoder.vocab_size)
    sub_dev, sub_train = dev[:n], train[:n]
    components: dict[str, Any] = {}

    def compare(name: str, fast_fn, slow_fn, fast_units: int, slow_units: int) -> None:
        fast_value, fast_wall, fast_cpu = timed(fast_fn)
        slow_value, slow_wall, slow_cpu = timed(slow_fn)
        scale = fast_units / slow_units
        components[name] = {
            "fast_units": fast_units, "slow_units_measured": slow_units,
            "fast_wall_seconds": fast_wall, "fast_cpu_seconds": fast_cpu,
            "slow_wall_seconds_measured": slow_wall, "slow_cpu_seconds_measured": slow_cpu,
            "slow_wall_seconds_extrapolated": slow_wall * scale,
            "slow_cpu_seconds_extrapolated": slow_cpu * scale,
            "speedup_wall": slow_wall * scale / fast_wall,
            "fast_value": fast_value, "slow_value_on_subset": slow_value,
            "load_average": load_average(),
        }
        print(f"[{name}] fast {fast_wall:.1f} s, slow {slow_wall:.1f} s on {slow_units} "
              f"→ {slow_wall * scale:.0f} s extrapolated", file=sys.stderr, flush=True)

    layers = tuple(ev.layers)
    compare("alignment+retrieval (dev)",
            lambda: multilinguality(model, encoder, dev, layers, ev.batch_size),
            lambda: slow_multilinguality(model, encoder, sub_dev, layers), len(dev), n)
    compare("word translation",
            lambda: translation(model, encoder, layers, ev.batch_size),
            lambda: slow_translation(model, encoder, layers, n_words),
            encoder.vocab_size, n_words)
    seed, prob = ev.mask_seed, cfg.train.mask_prob
    compare("perplexity (train)",
            lambda: perplexity(model, encoder, train, run.recipe, prob, seed, ev.batch_size),
            lambda: slow_perplexity(model, encoder, sub_train, run), len(train), n)
    compare("perplexity (dev)",
            lambda: perplexity(model, encoder, dev, run.recipe, prob, seed, ev.batch_size),
            lambda: slow_perplexity(model, encoder, sub_dev, run), len(dev), n)
    # the same metrics on the same subset, fast path: the two implementations must agree
    record["agreement_on_subset"] = {
        "fast": multilinguality(model, encoder, sub_dev, layers, ev.batch_size),
        "slow": components["alignment+retrieval (dev)"]["slow_value_on_subset"],
        "sentences": n,
    }
    fast_total = sum(c["fast_wall_seconds"] for c in components.values())
    slow_total = sum(c["slow_wall_seconds_extrapolated"] for c in components.values())
    record["sizes"] = sizes
    record["components"] = components
    record["totals"] = {
        "fast_components_wall_seconds": fast_total,
        "slow_extrapolated_wall_seconds": slow_total,
        "speedup_wall": slow_total / fast_total,
        "fast_components_cpu_seconds": sum(c["fast_cpu_seconds"] for c in components.values()),
        "slow_extrapolated_cpu_seconds": sum(
            c["slow_cpu_seconds_extrapolated"] for c in components.values()
        ),
    }
    record["load_average_at_end"] = load_average()
    write_json(args.out, record)
    print(json.dumps(record["totals"] | {"evaluate_model": record["fast_evaluate_model"][
        "wall_seconds"]}, indent=1))


if __name__ == "__main__":
    main()
