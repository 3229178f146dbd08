"""How similar are two models' representations? The measures of Conneau et al. 2020 §5 (Figure 2).

Conneau et al. (2020) compare independently trained monolingual BERTs layer by layer:

* **word level**: an orthogonal map learned by Procrustes on a seed dictionary, then precision@1
  of translation retrieval for held-out dictionary words (:func:`translation_precision_at_1`);
* **contextual word level** and **sentence level**: the same map learned on a training split of
  *paired rows* (aligned word occurrences, or pooled parallel sentences), precision@1 of
  retrieving the partner row among the held-out rows (:func:`paired_retrieval_precision_at_1`);
* **linear CKA** (Kornblith et al., 2019) between the two models' representations of the same
  sentences (:func:`linear_cka`), no map needed: CKA is invariant to orthogonal transforms and
  isotropic scaling.

The floor is not zero: parallel rows share their lengths and word positions, and an *untrained*
BERT carries those to every layer. With a randomly initialised 12 × 64 model on 400 English /
Fake-English sentences, CKA was 0.70 and sentence retrieval P@1 0.64 at every layer, so a curve
means something only against the untrained model's.

Everything here is pure numpy/scipy on matrices whose rows are items and whose columns are
features; the caller extracts the hidden states. One value per layer and language pair comes from
:func:`per_layer`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy.linalg import orthogonal_procrustes

Retrieval = Literal["nn", "csls"]
RETRIEVALS: tuple[str, ...] = ("nn", "csls")


def _matrix(x: ArrayLike, name: str) -> np.ndarray:
    """A float64 2-D array (tensors are accepted: anything ``np.asarray`` takes)."""
    array = np.asarray(x, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (items × features) matrix, got shape {array.shape}")
    return array


def _same_rows(x: np.ndarray, y: np.ndarray) -> None:
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"paired matrices need the same rows: {x.shape[0]} vs {y.shape[0]}")


# --------------------------------------------------------------------------- CKA


def _debiased_dot(xty: float, rows_x: np.ndarray, rows_y: np.ndarray, n: int) -> float:
    """Unbiased HSIC estimate (Song et al., 2012) for linear kernels, in feature space.

    ``rows_*`` are the squared row norms of the centred features, as in Kornblith et al.'s code.
    """
    return float(
        xty
        - n / (n - 2.0) * rows_x.dot(rows_y)
        + rows_x.sum() * rows_y.sum() / ((n - 1) * (n - 2))
    )


def linear_cka(x: ArrayLike, y: ArrayLike, debiased: bool = False) -> float:
    """Linear CKA of two representations of the same ``n`` items (rows paired).

    CKA = ||Yᵀ X||²_F / (||Xᵀ X||_F ||Yᵀ Y||_F) on column-centred X (n×d₁) and Y (n×d₂). It is 1
    for representations equal up to an orthogonal map and isotropic scaling, and near 0 for
    independent ones — but only *near*: the plain estimator is biased upwards by about d/n.
    ``debiased=True`` uses the unbiased HSIC estimator (Kornblith et al., 2019, appendix; needs
    n > 3), which removes that floor at the price of occasional small negative values.
    """
    x, y = _matrix(x, "x"), _matrix(y, "y")
    _same_rows(x, y)
    n = x.shape[0]
    if n < 2 or (debiased and n < 4):
        raise ValueError(f"CKA needs at least {4 if debiased else 2} rows, got {n}")
    x = x - x.mean(axis=0, keepdims=True)
    y = y - y.mean(axis=0, keepdims=True)
    cross = np.linalg.norm(y.T @ x) ** 2
    self_x = np.linalg.norm(x.T @ x) ** 2
    self_y = np.linalg.norm(y.T @ y) ** 2
    if debiased:
        rows_x = np.einsum("ij,ij->i", x, x)
        rows_y = np.einsum("ij,ij->i", y, y)
        cross = _debiased_dot(cross, rows_x, rows_y, n)
        self_x = _debiased_dot(self_x, rows_x, rows_x, n)
        self_y = _debiased_dot(self_y, rows_y, rows_y, n)
    denominator = np.sqrt(self_x * self_y)
    if denominator <= 0:
        raise ValueError("CKA is undefined for a constant representation (zero variance)")
    return float(cross / denominator)


# --------------------------------------------------------------------------- mapping


def normalize_rows(x: ArrayLike) -> np.ndarray:
    """Unit length, mean-centre, unit length again (the usual recipe before Procrustes).

    Centring removes the common direction every layer of a BERT has (its mean), which otherwise
    dominates cosine similarity; the unit lengths make the map fit directions, not norms.
    """
    x = _matrix(x, "x")
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    x = x - x.mean(axis=0, keepdims=True)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def procrustes_map(source: ArrayLike, target: ArrayLike) -> np.ndarray:
    """The orthogonal W minimising ||source @ W − target||_F over paired rows (d × d).

    Conneau et al. 2020 writes W* = argmin ||W X − Y|| = U Vᵀ with U Σ Vᵀ = SVD(Y Xᵀ) on column
    vectors; with
    row vectors that is scipy's ``orthogonal_procrustes(source, target)``. Both sides need the
    same width (two models of the same size).
    """
    source, target = _matrix(source, "source"), _matrix(target, "target")
    _same_rows(source, target)
    if source.shape[1] != target.shape[1]:
        raise ValueError(
            f"an orthogonal map needs equal widths: {source.shape[1]} vs {target.shape[1]}"
        )
    rotation, _ = orthogonal_procrustes(source, target)
    return rotation


# --------------------------------------------------------------------------- retrieval


def _cosine(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    q = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    k = keys / np.maximum(np.linalg.norm(keys, axis=1, keepdims=True), 1e-12)
    return q @ k.T


def _mean_top_k(similarities: np.ndarray, k: int) -> np.ndarray:
    """Mean of each row's k largest values (k capped at the row length)."""
    k = min(k, similarities.shape[1])
    return -np.mean(np.partition(-similarities, k - 1, axis=1)[:, :k], axis=1)


def retrieval_scores(
    queries: ArrayLike, keys: ArrayLike, method: Retrieval = "nn", csls_k: int = 10
) -> np.ndarray:
    """Query × key scores: cosine (``nn``) or CSLS (Lample et al., 2018).

    CSLS(q, k) = 2 cos(q, k) − r_K(q) − r_Q(k), r_K(q) being the mean cosine of q to its
    ``csls_k`` nearest keys and r_Q(k) that of k to its nearest queries: it penalises hubs. The
    neighbourhoods are taken within the given query and key sets.
    """
    queries, keys = _matrix(queries, "queries"), _matrix(keys, "keys")
    if method not in RETRIEVALS:
        raise ValueError(f"unknown retrieval method {method!r}; valid: {', '.join(RETRIEVALS)}")
    cos = _cosine(queries, keys)
    if method == "nn":
        return cos
    if csls_k < 1:
        raise ValueError(f"csls_k must be at least 1, got {csls_k}")
    return 2 * cos - _mean_top_k(cos, csls_k)[:, None] - _mean_top_k(cos.T, csls_k)[None, :]


def translation_precision_at_1(
    source: ArrayLike,
    target: ArrayLike,
    train_pairs: Sequence[tuple[int, int]] | np.ndarray,
    test_pairs: Sequence[tuple[int, int]] | np.ndarray,
    method: Retrieval = "nn",
    normalize: bool = True,
    csls_k: int = 10,
) -> float:
    """Word-level alignment (Conneau et al. 2020 §5.1.1): Procrustes on a seed dictionary, then P@1.

    ``source`` (n_s × d) and ``target`` (n_t × d) hold one row per word; a pair is (source row,
    target row). The map is learned on ``train_pairs``; every distinct source word of
    ``test_pairs`` then retrieves its nearest target row among *all* target rows, and counts as
    correct when that row is any of its test translations (MUSE's convention for words with
    several translations).
    """
    source, target = _matrix(source, "source"), _matrix(target, "target")
    train = _pairs(train_pairs, source.shape[0], target.shape[0], "train_pairs")
    test = _pairs(test_pairs, source.shape[0], target.shape[0], "test_pairs")
    if normalize:
        source, target = normalize_rows(source), normalize_rows(target)
    rotation = procrustes_map(source[train[:, 0]], target[train[:, 1]])
    queries = np.unique(test[:, 0])
    scores = retrieval_scores(source[queries] @ rotation, target, method, csls_k)
    retrieved = scores.argmax(axis=1)
    gold = {(int(s), int(t)) for s, t in test}
    hits = [(int(q), int(r)) in gold for q, r in zip(queries, retrieved, strict=True)]
    return float(np.mean(hits))


def _pairs(pairs: ArrayLike, n_source: int, n_target: int, name: str) -> np.ndarray:
    array = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if len(array) == 0:
        raise ValueError(f"{name} is empty")
    if (array < 0).any() or (array[:, 0] >= n_source).any() or (array[:, 1] >= n_target).any():
        raise ValueError(f"{name} holds a row index outside 0..{n_source - 1} / 0..{n_target - 1}")
    return array


def split_rows(n: int, train_fraction: float = 0.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random split of ``n`` paired rows into (train, test) index arrays."""
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must lie strictly between 0 and 1, got {train_fraction}")
    order = np.random.default_rng(seed).permutation(n)
    cut = round(n * train_fraction)
    if cut < 1 or cut >= n:
        raise ValueError(f"{n} rows cannot be split {train_fraction:g}/{1 - train_fraction:g}")
    return np.sort(order[:cut]), np.sort(order[cut:])


def paired_retrieval_precision_at_1(
    source: ArrayLike,
    target: ArrayLike,
    train_rows: ArrayLike,
    test_rows: ArrayLike,
    method: Retrieval = "nn",
    normalize: bool = True,
    csls_k: int = 10,
) -> float:
    """Sentence-level (and contextual word-level) alignment, Conneau et al. 2020 §5.1.2–5.1.3.

    Row i of ``source`` and row i of ``target`` are translations (the pooled representations of
    parallel verses, or the contextual vectors of an aligned word occurrence). The orthogonal map
    is learned on ``train_rows``; each held-out source row retrieves among the held-out target
    rows only, and is correct when it finds its own partner.
    """
    source, target = _matrix(source, "source"), _matrix(target, "target")
    _same_rows(source, target)
    train = np.asarray(train_rows, dtype=np.int64)
    test = np.asarray(test_rows, dtype=np.int64)
    if len(train) == 0 or len(test) == 0:
        raise ValueError("train_rows and test_rows must both be non-empty")
    if np.intersect1d(train, test).size:
        raise ValueError("train_rows and test_rows overlap: the map would see the test rows")
    if normalize:
        source, target = normalize_rows(source), normalize_rows(target)
    rotation = procrustes_map(source[train], target[train])
    scores = retrieval_scores(source[test] @ rotation, target[test], method, csls_k)
    return float(np.mean(scores.argmax(axis=1) == np.arange(len(test))))


def mean_pool(hidden: ArrayLike, keep: ArrayLike) -> np.ndarray:
    """Sentence vectors: the mean of each row's kept token vectors.

    ``hidden`` is batch × tokens × d, ``keep`` batch × tokens (true for the tokens to pool:
    the caller drops padding and, usually, [CLS]/[SEP]). Conneau et al. 2020 pools without saying
    how; the mean is the common choice for models without a sentence-level objective.
    """
    hidden = np.asarray(hidden, dtype=np.float64)
    keep = np.asarray(keep, dtype=bool)
    if hidden.ndim != 3 or keep.shape != hidden.shape[:2]:
        raise ValueError(f"hidden must be (batch, tokens, d) and keep (batch, tokens); got "
                         f"{hidden.shape} and {keep.shape}")
    counts = keep.sum(axis=1, keepdims=True)
    if (counts == 0).any():
        raise ValueError("a row keeps no token: nothing to pool")
    return (hidden * keep[..., None]).sum(axis=1) / counts


def per_layer(
    measure: Callable[..., float],
    source_layers: Sequence[ArrayLike],
    target_layers: Sequence[ArrayLike],
    **kwargs: object,
) -> list[float]:
    """One value per layer: ``measure(source_layers[l], target_layers[l], **kwargs)``.

    The x-axis of Figure 2; ``kwargs`` carries what every layer shares (pairs, splits, method).
    """
    if len(source_layers) != len(target_layers):
        raise ValueError(
            f"both models need the same layers: {len(source_layers)} vs {len(target_layers)}"
        )
    return [measure(s, t, **kwargs) for s, t in zip(source_layers, target_layers, strict=True)]


def sentence_similarity_by_layer(
    source_layers: Sequence[ArrayLike],
    target_layers: Sequence[ArrayLike],
    train_fraction: float = 0.5,
    seed: int = 0,
    method: Retrieval = "nn",
    debiased_cka: bool = False,
) -> Mapping[str, list[float]]:
    """Figure 2's two sentence-level curves for one language pair: retrieval P@1 and CKA.

    ``*_layers[l]`` are the pooled representations (parallel rows) of layer ``l``. Retrieval
    uses one seeded split for every layer, so the curve shows layers, not split noise.
    """
    n = _matrix(source_layers[0], "source_layers[0]").shape[0]
    train, test = split_rows(n, train_fraction, seed)
    return {
        "sentence_retrieval": per_layer(
            paired_retrieval_precision_at_1, source_layers, target_layers,
            train_rows=train, test_rows=test, method=method,
        ),
        "cka": per_layer(linear_cka, source_layers, target_layers, debiased=debiased_cka),
    }
