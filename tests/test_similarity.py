"""Similarity of two representations (Conneau et al. 2020 §5): CKA, Procrustes, retrieval
after a map."""

from __future__ import annotations

import re

import numpy as np
import pytest
from scipy.stats import ortho_group

from multilab.evaluation.similarity import (
    linear_cka,
    mean_pool,
    normalize_rows,
    paired_retrieval_precision_at_1,
    per_layer,
    procrustes_map,
    retrieval_scores,
    sentence_similarity_by_layer,
    split_rows,
    translation_precision_at_1,
)


def rotation(d: int, seed: int) -> np.ndarray:
    return ortho_group.rvs(d, random_state=seed)


def gram_cka(x: np.ndarray, y: np.ndarray) -> float:
    """CKA written the other way, with kernels and the centring matrix: tr(KHLH)/√(…)."""
    n = len(x)
    h = np.eye(n) - np.ones((n, n)) / n
    k, l_ = h @ x @ x.T @ h, h @ y @ y.T @ h
    return float(np.sum(k * l_) / np.sqrt(np.sum(k * k) * np.sum(l_ * l_)))


def test_cka_is_one_under_rotation_scaling_and_translation():
    x = np.random.default_rng(0).normal(size=(300, 16))
    y = 3.0 * x @ rotation(16, 1) + 5.0
    assert linear_cka(x, y) == pytest.approx(1.0, abs=1e-10)
    assert linear_cka(x, y, debiased=True) == pytest.approx(1.0, abs=1e-10)


def test_cka_of_independent_noise_is_near_zero_and_debiasing_removes_the_floor():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(2000, 16)), rng.normal(size=(2000, 16))
    plain, debiased = linear_cka(x, y), linear_cka(x, y, debiased=True)
    assert 0 < plain < 0.02
    assert abs(debiased) < abs(plain) / 2
    # few rows, many features: the plain estimator's floor (≈ d/n) is large, the debiased not
    x, y = rng.normal(size=(100, 50)), rng.normal(size=(100, 50))
    assert linear_cka(x, y) > 0.3
    assert abs(linear_cka(x, y, debiased=True)) < 0.05


def test_cka_matches_the_kernel_formula_and_orders_related_representations():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 8))
    close = x @ rng.normal(size=(8, 12)) + 0.1 * rng.normal(size=(200, 12))
    far = x @ rng.normal(size=(8, 12)) + 3.0 * rng.normal(size=(200, 12))
    assert linear_cka(x, close) == pytest.approx(gram_cka(x, close), rel=1e-10)
    assert linear_cka(x, far) < linear_cka(x, close) < 1.0


def test_cka_rejects_unpaired_or_constant_inputs():
    with pytest.raises(ValueError, match="same rows"):
        linear_cka(np.ones((5, 2)), np.ones((6, 2)))
    with pytest.raises(ValueError, match="constant"):
        linear_cka(np.ones((5, 2)), np.random.default_rng(0).normal(size=(5, 2)))


def test_procrustes_recovers_a_known_rotation():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(500, 32))
    w = rotation(32, 3)
    learned = procrustes_map(x, x @ w + 0.01 * rng.normal(size=(500, 32)))
    assert np.allclose(learned.T @ learned, np.eye(32), atol=1e-10)  # orthogonal
    assert np.abs(learned - w).max() < 0.01


def test_translation_retrieval_after_the_map_finds_held_out_words():
    rng = np.random.default_rng(4)
    source = rng.normal(size=(400, 16))
    target = source @ rotation(16, 5) + 0.05 * rng.normal(size=(400, 16))
    pairs = np.stack([np.arange(400), np.arange(400)], axis=1)
    train, test = pairs[:200], pairs[200:]
    for method in ("nn", "csls"):
        assert translation_precision_at_1(source, target, train, test, method=method) == 1.0
    # without a map (identity) the rotated space is unrelated: near chance (1/400)
    assert translation_precision_at_1(source, target, pairs[:1], test) < 0.1


def test_translation_retrieval_accepts_any_of_several_translations():
    source = np.eye(3)
    target = np.eye(3)
    # word 0 has translations 0 and 1; its nearest neighbour is 0, so it counts as correct
    test = [(0, 1), (0, 0), (2, 1)]
    p = translation_precision_at_1(source, target, [(0, 0), (1, 1), (2, 2)], test,
                                   normalize=False)
    assert p == pytest.approx(0.5)  # query 0 correct, query 2 retrieves 2 ≠ 1


def test_csls_penalises_a_hub():
    # key 0 is close to every query (a hub); CSLS should prefer each query's own key
    keys = np.array([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    queries = np.array([[1.0, 0.4, 0.4], [0.4, 1.0, 0.4], [0.4, 0.4, 1.0]])
    nn = retrieval_scores(queries, keys, "nn").argmax(axis=1)
    csls = retrieval_scores(queries, keys, "csls", csls_k=2).argmax(axis=1)
    assert nn.tolist() == [0, 0, 0]
    assert csls.tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="valid: nn, csls"):
        retrieval_scores(queries, keys, "cosine")


def test_sentence_retrieval_learns_the_map_on_train_rows_only():
    rng = np.random.default_rng(6)
    source = rng.normal(size=(300, 16))
    target = source @ rotation(16, 7) + 0.05 * rng.normal(size=(300, 16))
    train, test = split_rows(300, 0.5, seed=0)
    assert len(train) == 150 and len(np.intersect1d(train, test)) == 0
    assert paired_retrieval_precision_at_1(source, target, train, test) == 1.0
    shuffled = target[rng.permutation(300)]  # rows no longer paired: nothing to learn
    assert paired_retrieval_precision_at_1(source, shuffled, train, test) < 0.1
    with pytest.raises(ValueError, match="overlap"):
        paired_retrieval_precision_at_1(source, target, train, train)


def test_normalize_rows_gives_unit_centred_rows():
    x = normalize_rows(np.random.default_rng(0).normal(loc=4.0, size=(50, 8)))
    assert np.allclose(np.linalg.norm(x, axis=1), 1.0)
    assert np.abs(x.mean(axis=0)).max() < 0.2  # the shared offset is gone


def test_mean_pool_ignores_dropped_tokens():
    hidden = np.array([[[1.0, 0.0], [3.0, 2.0], [100.0, 100.0]]])
    assert mean_pool(hidden, [[True, True, False]]).tolist() == [[2.0, 1.0]]
    with pytest.raises(ValueError, match="keeps no token"):
        mean_pool(hidden, [[False, False, False]])


def test_by_layer_gives_one_value_per_layer():
    rng = np.random.default_rng(8)
    base = rng.normal(size=(120, 8))
    source_layers = [base, base, rng.normal(size=(120, 8))]
    target_layers = [base @ rotation(8, 9), rng.normal(size=(120, 8)), base]
    curves = sentence_similarity_by_layer(source_layers, target_layers)
    assert set(curves) == {"sentence_retrieval", "cka"}
    assert curves["cka"][0] == pytest.approx(1.0)
    assert curves["cka"][1] < 0.2 and curves["cka"][2] < 0.2
    assert curves["sentence_retrieval"][0] == 1.0 and curves["sentence_retrieval"][1] < 0.2
    assert per_layer(linear_cka, source_layers, target_layers) == curves["cka"]
    with pytest.raises(ValueError, match="same layers"):
        per_layer(linear_cka, source_layers, target_layers[:2])


_ROWS = np.arange(24, dtype=np.float64).reshape(6, 4) % 5


@pytest.mark.parametrize(("call", "message"), [
    (lambda: linear_cka(np.ones(6), _ROWS), "must be a 2-D (items × features) matrix"),
    (lambda: linear_cka(_ROWS[:3], _ROWS[:3], debiased=True), "CKA needs at least 4 rows, got 3"),
    (lambda: procrustes_map(_ROWS, _ROWS[:, :3]), "an orthogonal map needs equal widths: 4 vs 3"),
    (lambda: retrieval_scores(_ROWS, _ROWS, "csls", csls_k=0), "csls_k must be at least 1"),
    (lambda: translation_precision_at_1(_ROWS, _ROWS, [], [(0, 0)]), "train_pairs is empty"),
    (lambda: translation_precision_at_1(_ROWS, _ROWS, [(0, 0), (1, 9)], [(2, 2)]),
     "train_pairs holds a row index outside 0..5 / 0..5"),
    (lambda: split_rows(6, train_fraction=1.0), "strictly between 0 and 1, got 1.0"),
    (lambda: split_rows(2, train_fraction=0.1), "2 rows cannot be split 0.1/0.9"),
    (lambda: paired_retrieval_precision_at_1(_ROWS, _ROWS, [0, 1], []),
     "train_rows and test_rows must both be non-empty"),
    (lambda: mean_pool(np.ones((2, 3)), np.ones((2, 3))), "hidden must be (batch, tokens, d)"),
])
def test_bad_shapes_and_settings_are_named(call, message: str) -> None:
    """Each measure refuses what would make its number meaningless, saying which input."""
    with pytest.raises(ValueError, match=re.escape(message)):
        call()
