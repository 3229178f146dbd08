"""Verse retrieval among N languages: P@1 for every ordered pair.

Real languages have no word-level gold, but their verses are aligned by id: row i of every
language's matrix is the same verse, so retrieving row i of language B for row i of language A
is the sentence retrieval of Dufter & Schütze 2020 (ρ) for the pair (A, B). With N languages there
are N·(N−1) ordered pairs; each language's score is the mean over the pairs it takes part in (as
query or as key), the overall score the mean over all pairs. Vectors are computed by the
caller (e.g. :func:`multilab.evaluation.metrics.mean_pool` of one layer), so this module is
the same at every layer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from statistics import mean

import torch

from multilab.evaluation.metrics import retrieval_score

Pair = tuple[str, str]  # (query language, key language)


def retrieval_matrix(vectors: Mapping[str, torch.Tensor]) -> dict[Pair, float]:
    """P@1 of every ordered pair (A, B): how often A's verse i finds B's verse i by cosine."""
    names = list(vectors)
    if len(names) < 2:
        raise ValueError(f"retrieval needs at least two languages, got {names}")
    shapes = {name: tuple(v.shape) for name, v in vectors.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"every language needs the same verses and width, got {shapes}")
    matrix: dict[Pair, float] = {}
    for a, b in combinations(names, 2):
        score = retrieval_score(vectors[a], vectors[b], ks=(1,))
        matrix[a, b], matrix[b, a] = score.p1_forward, score.p1_backward
    return matrix


def per_language(matrix: Mapping[Pair, float]) -> dict[str, float]:
    """Each language's mean P@1 over the ordered pairs it is in (as query or as key)."""
    names = list(dict.fromkeys(name for pair in matrix for name in pair))
    return {n: mean(v for (a, b), v in matrix.items() if n in (a, b)) for n in names}


def overall(matrix: Mapping[Pair, float]) -> float:
    """The mean P@1 over all ordered pairs."""
    return mean(matrix.values())


def matrix_table(matrix: Mapping[Pair, float], names: Sequence[str]) -> str:
    """Markdown: query languages as rows, key languages as columns, a mean column."""
    means = per_language(matrix)
    rows = [
        "| query \\ key | " + " | ".join(names) + " | mean |",
        "|---|" + "--:|" * (len(names) + 1),
    ]
    for a in names:
        cells = ["–" if a == b else f"{matrix[a, b]:.3f}" for b in names]
        rows.append(f"| {a} | " + " | ".join(cells) + f" | {means[a]:.3f} |")
    return "\n".join(rows)
