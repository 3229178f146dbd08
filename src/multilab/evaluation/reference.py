"""Straightforward definitions the fast paths are tested (and benchmarked) against.

One sentence, one query or one position at a time, as the paper and the Hugging Face recipe
state them. Nothing in the pipeline may call them (``tests/test_layout.py`` checks it): the
tests hold the batched metrics and the MLM loss against them, and
``benchmarks/bench_eval.py`` times them as its slow path. They live in the package so that
both can import them without the benchmarks depending on the tests.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import BertForMaskedLM

from multilab.lab.modifications import Recipe


def reference_alignment_counts(
    english: list[torch.Tensor], fake: list[torch.Tensor], gold: list[list[int]]
) -> tuple[int, int, int]:
    """Per-sentence Python loop of the argmax alignment method."""
    n_pred = n_gold = n_correct = 0
    for e, f, g in zip(english, fake, gold, strict=True):
        sim = torch.stack([
            torch.stack([F.cosine_similarity(ei, fj, dim=0) for fj in f]) for ei in e
        ])
        for i in range(len(e)):
            j = int(sim[i].argmax())
            if int(sim[:, j].argmax()) == i:
                n_pred += 1
                n_correct += int(g[i] == j)
        n_gold += len(e)
    return n_pred, n_gold, n_correct


def reference_retrieval_p1(english: torch.Tensor, fake: torch.Tensor) -> float:
    """P@1 in both directions, one query at a time."""
    hits = 0
    for queries, keys in ((english, fake), (fake, english)):
        for i, query in enumerate(queries):
            sims = F.cosine_similarity(query[None, :], keys, dim=1)
            hits += int(int(sims.argmax()) == i)
    return hits / (2 * len(english))


def gold_alignment(recipe: Recipe, length: int) -> list[int]:
    """The Fake-English word aligned to each English word of one sentence: the same word
    position, or the mirrored one when the Fake-English word order is inverted."""
    return [length - 1 - i if recipe.invert_fake else i for i in range(length)]


def full_head_loss(
    model: BertForMaskedLM,
    inputs: dict[str, torch.Tensor],
    selected: torch.Tensor,
    labels: torch.Tensor,
) -> torch.Tensor:
    """The standard path: the MLM head on every position, -100 labels elsewhere (mean)."""
    full_labels = torch.full_like(inputs["input_ids"], -100)
    full_labels[selected] = labels
    return model(**inputs, labels=full_labels).loss
