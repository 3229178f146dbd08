"""Verse retrieval P@1 for every ordered pair of N languages, and its averages."""

from __future__ import annotations

import pytest
import torch

from multilab.evaluation.metrics import retrieval_score
from multilab.evaluation.verse_retrieval import (
    matrix_table,
    overall,
    per_language,
    retrieval_matrix,
)


def test_every_ordered_pair_is_the_directed_p1() -> None:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(50, 16, generator=g)
    vectors = {
        "en": base,
        "de": base + 0.3 * torch.randn(50, 16, generator=g),
        "hi": torch.randn(50, 16, generator=g),  # unrelated: near chance
    }
    matrix = retrieval_matrix(vectors)
    assert set(matrix) == {(a, b) for a in vectors for b in vectors if a != b}
    pair = retrieval_score(vectors["en"], vectors["hi"], ks=(1,))
    assert matrix["en", "hi"] == pair.p1_forward and matrix["hi", "en"] == pair.p1_backward
    assert matrix["en", "de"] == 1.0 and matrix["de", "en"] == 1.0
    assert matrix["en", "hi"] < 0.2
    assert retrieval_matrix({"en": base, "copy": base.clone()}) == {
        ("en", "copy"): 1.0,
        ("copy", "en"): 1.0,
    }


def test_averages_and_table() -> None:
    matrix = {("a", "b"): 1.0, ("b", "a"): 0.5, ("a", "c"): 0.0, ("c", "a"): 0.5,
              ("b", "c"): 0.25, ("c", "b"): 0.75}  # fmt: skip
    assert per_language(matrix) == {"a": 0.5, "b": 0.625, "c": 0.375}
    assert overall(matrix) == pytest.approx(0.5)
    table = matrix_table(matrix, ["a", "b", "c"])
    assert "| a | – | 1.000 | 0.000 | 0.500 |" in table
    assert "| c | 0.500 | 0.750 | – | 0.375 |" in table


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="at least two languages"):
        retrieval_matrix({"en": torch.zeros(3, 4)})
    with pytest.raises(ValueError, match="same verses"):
        retrieval_matrix({"en": torch.zeros(3, 4), "de": torch.zeros(2, 4)})
