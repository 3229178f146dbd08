"""Word order between parallel sentences: SimAlign's Match alignment and Kendall's tau.

Dufter & Schütze 2020 (App. B.2, Table 4) measures how similar a language's word order is to
English: it
aligns the words of parallel sentences with the Match algorithm of SimAlign (Sabet et al.,
2020), turns each alignment into a permutation, scores it with Kendall's tau as Birch & Osborne
(2011) do, averages over 2,500 sentences per language and correlates the averages with mBERT's
zero-shot accuracy. This module is that measure as plain library code on precomputed vectors:

1. ``word_ids_from_pieces`` / ``merge_wordpieces``: wordpiece vectors → word vectors (mean);
2. ``match_alignment`` / ``match_weights``: maximum-weight bipartite matching of cosine
   similarities (or of any word-pair weights);
3. ``kendall_tau``: Birch & Osborne's Kendall reordering score of one alignment;
4. ``verse_taus`` / ``mean_tau`` and ``correlate`` / ``correlations``: the batch side.

Self-contained on purpose (torch, numpy, scipy only): the vectors may come from fastText
spaces mapped by VecMap or from a model's hidden layer; wiring them in is the caller's job.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from scipy import stats
from scipy.optimize import linear_sum_assignment

Vectors = np.ndarray | torch.Tensor
"""One sentence's vectors, shape (length, dim): a numpy array or a torch tensor."""

CONTINUATION_PREFIX = "##"  # WordPiece's mark of a piece inside a word
LANGUAGE_PREFIXES = ("::",)  # Fake-English pieces are ``::`` + the English piece (``::##e``)
SPECIAL_TOKENS = frozenset({"[PAD]", "[CLS]", "[SEP]", "[MASK]"})
"""Pieces that belong to no word. Not ``[UNK]``: WordPiece emits it for a whole word."""

DEFAULT_TIE_BREAK = 1e-6
CorrelationMethod = Literal["pearson", "spearman"]
CORRELATION_METHODS: tuple[CorrelationMethod, ...] = ("pearson", "spearman")


# --- 1. wordpieces → words -------------------------------------------------------------------


def word_ids_from_pieces(
    pieces: Sequence[str],
    *,
    prefixes: Sequence[str] = LANGUAGE_PREFIXES,
    special_tokens: Collection[str] = SPECIAL_TOKENS,
) -> list[int]:
    """The word index of every wordpiece (``-1`` for special tokens), counting words from 0.

    A piece starting with ``##`` (after removing a language prefix such as Fake-English's
    ``::``) continues the word before it; any other piece starts a new word. A ``##`` piece
    with no word before it (first piece, or right after a special token) starts a word, so a
    malformed sequence still gets one id per piece instead of an error.

    >>> word_ids_from_pieces(["[CLS]", "He", "ate", "hon", "##e", "##y", ".", "[SEP]"])
    [-1, 0, 1, 2, 2, 2, 3, -1]
    """
    ids: list[int] = []
    word = -1
    inside_word = False
    for piece in pieces:
        bare = _strip_prefix(piece, prefixes)
        if bare in special_tokens:
            ids.append(-1)
            inside_word = False
            continue
        if not (bare.startswith(CONTINUATION_PREFIX) and inside_word):
            word += 1
        ids.append(word)
        inside_word = True
    return ids


def _strip_prefix(piece: str, prefixes: Iterable[str]) -> str:
    for prefix in prefixes:
        if prefix and piece.startswith(prefix):
            return piece[len(prefix):]
    return piece


def merge_wordpieces(piece_vectors: Vectors, word_ids: Sequence[int] | torch.Tensor
                     ) -> torch.Tensor:
    """Word vectors as the mean of their pieces' vectors (SimAlign's word-level mode).

    ``word_ids[k]`` is the word of piece ``k`` (``-1``: belongs to no word, e.g. ``[CLS]`` or
    padding); words are numbered 0..W-1 and every number must occur. Returns (W, dim) in the
    input's floating dtype (float32 for integer input).
    """
    pieces = torch.as_tensor(piece_vectors)
    if not pieces.is_floating_point():
        pieces = pieces.float()
    ids = torch.as_tensor(word_ids, dtype=torch.long, device=pieces.device)
    if pieces.ndim != 2:
        raise ValueError(f"piece_vectors must be (pieces, dim), got shape {tuple(pieces.shape)}")
    if ids.ndim != 1 or ids.numel() != pieces.shape[0]:
        raise ValueError(
            f"word_ids has {ids.numel()} entries but piece_vectors has {pieces.shape[0]} rows"
        )
    if bool((ids < -1).any()):
        raise ValueError(f"word_ids must be -1 (no word) or >= 0, got {int(ids.min())}")
    keep = ids >= 0
    kept = ids[keep]
    words = int(kept.max()) + 1 if kept.numel() else 0
    counts = torch.bincount(kept, minlength=words)
    if bool((counts == 0).any()):
        missing = torch.nonzero(counts == 0).flatten().tolist()
        raise ValueError(f"word ids must cover 0..{words - 1}; no piece for word(s) {missing}")
    sums = torch.zeros(words, pieces.shape[1], dtype=pieces.dtype, device=pieces.device)
    sums.index_add_(0, kept, pieces[keep])
    return sums / counts.unsqueeze(1).to(pieces.dtype)


# --- 2. SimAlign's Match -----------------------------------------------------------------------


def _as_float64(vectors: Vectors, name: str) -> np.ndarray:
    if isinstance(vectors, torch.Tensor):
        vectors = vectors.detach().cpu().double().numpy()
    array = np.asarray(vectors, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty (words, dim) matrix, got {array.shape}")
    return array


def cosine_similarities(source: Vectors, target: Vectors) -> np.ndarray:
    """(len(source), len(target)) cosine similarities in float64; a zero vector scores 0.

    float64 so that identical vectors give exactly equal scores, which the tie-break of
    ``match_alignment`` relies on.
    """
    a = _as_float64(source, "source")
    b = _as_float64(target, "target")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"source dim {a.shape[1]} != target dim {b.shape[1]}")
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return a @ b.T


def match_alignment(
    source: Vectors, target: Vectors, *, tie_break: float = DEFAULT_TIE_BREAK
) -> np.ndarray:
    """SimAlign's Match: the maximum-weight matching of the words' cosine similarities.

    SimAlign (``mwmf``) builds the bipartite graph of the two sentences' words weighted by
    ``(cos + 1) / 2``, with no threshold, and takes networkx's maximum-weight matching among
    those of maximum cardinality: every word of the shorter sentence is aligned, ``|n - m|``
    words of the longer one stay unaligned, and each word has at most one link (a partial
    permutation). Every such matching has exactly ``min(n, m)`` edges, so the affine map of the
    cosine does not change which one is best, and SciPy's rectangular
    ``linear_sum_assignment(maximize)`` on the cosines solves the same problem.

    ``tie_break`` (>= 0) subtracts ``tie_break * ((i + ½)/n − (j + ½)/m)²`` from each weight
    (SimAlign's distortion prior, shrunk to a tie-breaker) so that among matchings of equal
    weight the one nearest the diagonal wins. Why: in a static space repeated words have
    identical vectors (the two "and" of a verse), so straight and crossed matchings of them
    tie exactly, and SciPy resolves such ties by its internal order. With the tie-break, a
    sentence against an identical copy (English vs English, vs Fake-English) always gets the
    identity; the squared distance (not the absolute one, which ties again whenever both
    words lie on one side of both partners) strictly prefers uncrossed pairs. The cost: when
    identical vectors make two orders indistinguishable, the one nearer the diagonal wins
    (e.g. a reversed sentence with a repeated word scores slightly above 0). It can only
    change a result whose summed cosines are within ``tie_break × min(n, m)`` of another
    (4e-5 for 40 words); 0 turns it off.

    Returns ``alignment`` of length ``n = len(source)``: ``alignment[i]`` is the target word
    matched to source word ``i`` or ``-1`` if ``i`` is unaligned.
    """
    return match_weights(cosine_similarities(source, target), tie_break=tie_break)


def match_weights(
    weights: np.ndarray, *, tie_break: float = DEFAULT_TIE_BREAK, min_weight: float | None = None
) -> np.ndarray:
    """Match on a precomputed (source words, target words) weight matrix (see
    :func:`match_alignment`, which calls it on cosines).

    ``min_weight``: links whose weight is not above it are dropped *after* the matching, so
    the source word stays unaligned (``-1``). For association scores such as IBM Model 1's,
    where 0 means "never seen together", the full matching would otherwise pair leftover
    words arbitrarily (near the diagonal, by the tie-break) and pull tau towards 1.
    """
    if tie_break < 0:
        raise ValueError(f"tie_break must be >= 0, got {tie_break}")
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim != 2 or 0 in weights.shape:
        raise ValueError(f"weights must be a non-empty 2-d matrix, got shape {weights.shape}")
    n, m = weights.shape
    ranked = weights
    if tie_break:
        rel_source = (np.arange(n) + 0.5) / n
        rel_target = (np.arange(m) + 0.5) / m
        ranked = weights - tie_break * (rel_source[:, None] - rel_target[None, :]) ** 2
    rows, cols = linear_sum_assignment(ranked, maximize=True)
    if min_weight is not None:
        kept = weights[rows, cols] > min_weight
        rows, cols = rows[kept], cols[kept]
    alignment = np.full(n, -1, dtype=np.int64)
    alignment[rows] = cols
    return alignment


# --- 3. Kendall's tau (Birch & Osborne 2011) ------------------------------------------------------


def kendall_tau(alignment: Sequence[int] | np.ndarray, *, square_root: bool = True) -> float:
    r"""Birch & Osborne's Kendall reordering score of one alignment: 1 = source order.

    ``alignment[i]`` is the target position aligned to source word ``i`` (``-1``: unaligned);
    the source is the reference order (English). The score follows Birch's reference code
    for LRscore (Moses ``mert/Permutation.cpp``), which is the metric Dufter & Schütze 2020 cites:

    1. target positions ``p_i``: the aligned position; an unaligned source word takes the
       position of the nearest aligned source word before it (0 if there is none), so it
       moves with its left neighbour instead of being dropped;
    2. the permutation ``π`` ranks the source words by ``p``, ties by source order (so ties,
       e.g. an unaligned word and its neighbour, never count as a reordering);
    3. with ``n`` source words, ``D = |{(i, j) : i < j, p_i > p_j}|`` discordant pairs out of
       ``Z = n(n-1)/2``:

       .. math:: K = 1 - \sqrt{D / Z} \qquad (\text{``square_root=False``: } K = 1 - D / Z)

    ``K`` is in [0, 1]: 1.0 when the target keeps the source order (identity), 0.0 when it
    reverses it completely. The square root is Birch & Osborne's ("adjusted Kendall's tau
    correlates better with human judgements"); it spreads out scores near 1. A uniformly
    random order gives ``E[D/Z] = 1/2``: about 0.29 with the root, 0.5 without. Sentences
    with fewer than two source words have no pair to invert and score 1.0.
    """
    positions = np.asarray(alignment, dtype=np.int64)
    if positions.ndim != 1 or positions.size == 0:
        raise ValueError(f"alignment must be a non-empty 1-d sequence, got {positions.shape}")
    if bool((positions < -1).any()):
        raise ValueError(f"alignment entries must be -1 (unaligned) or >= 0: {positions}")
    aligned = positions >= 0
    if not aligned.any():
        raise ValueError("no source word is aligned: Kendall's tau of nothing is undefined")
    n = positions.size
    if n < 2:
        return 1.0
    # forward fill: index of the last aligned word at or before i (-1 before the first)
    last_aligned = np.maximum.accumulate(np.where(aligned, np.arange(n), -1))
    filled = np.where(last_aligned >= 0, positions[np.maximum(last_aligned, 0)], 0)
    discordant = int(np.count_nonzero(np.triu(filled[:, None] > filled[None, :], k=1)))
    ratio = discordant / (n * (n - 1) / 2)
    return float(1.0 - (np.sqrt(ratio) if square_root else ratio))


# --- 4. batches and correlations ---------------------------------------------------------------


def verse_taus(
    source_verses: Sequence[Vectors],
    target_verses: Sequence[Vectors],
    *,
    square_root: bool = True,
    tie_break: float = DEFAULT_TIE_BREAK,
) -> np.ndarray:
    """Kendall's tau of the Match alignment of every verse pair (source = reference order)."""
    if len(source_verses) != len(target_verses):
        raise ValueError(
            f"{len(source_verses)} source verses but {len(target_verses)} target verses"
        )
    return np.array(
        [
            kendall_tau(match_alignment(s, t, tie_break=tie_break), square_root=square_root)
            for s, t in zip(source_verses, target_verses, strict=True)
        ],
        dtype=np.float64,
    )


def mean_tau(
    source_verses: Sequence[Vectors],
    target_verses: Sequence[Vectors],
    *,
    square_root: bool = True,
    tie_break: float = DEFAULT_TIE_BREAK,
) -> float:
    """One language's word-order score: the mean tau over its verse pairs (Dufter & Schütze
    2020: 2,500)."""
    if not source_verses:
        raise ValueError("no verse pairs to average")
    taus = verse_taus(source_verses, target_verses, square_root=square_root, tie_break=tie_break)
    return float(taus.mean())


@dataclass(frozen=True)
class Correlation:
    """A correlation coefficient, its two-sided p-value and the number of languages."""

    r: float
    p: float
    n: int
    languages: tuple[str, ...]


def correlate(
    x: Mapping[str, float],
    y: Mapping[str, float],
    *,
    method: CorrelationMethod = "pearson",
    exclude: Collection[str] = (),
) -> Correlation:
    """Pearson or Spearman correlation of two per-language scores (SciPy), minus ``exclude``.

    ``x`` and ``y`` must have the same languages (a language missing from one is an error,
    not silently dropped); at least three must remain. A constant input gives NaN (SciPy
    warns).
    """
    if method not in CORRELATION_METHODS:
        raise ValueError(f"method={method!r}; valid: {', '.join(CORRELATION_METHODS)}")
    if set(x) != set(y):
        raise ValueError(
            f"languages differ: only in x {sorted(set(x) - set(y))}, "
            f"only in y {sorted(set(y) - set(x))}"
        )
    unknown = sorted(set(exclude) - set(x))
    if unknown:
        raise ValueError(f"exclude={unknown} not among the languages; valid: {sorted(x)}")
    languages = tuple(sorted(set(x) - set(exclude)))
    if len(languages) < 3:
        raise ValueError(f"need at least 3 languages to correlate, got {list(languages)}")
    xs = np.array([x[lang] for lang in languages], dtype=np.float64)
    ys = np.array([y[lang] for lang in languages], dtype=np.float64)
    result = stats.pearsonr(xs, ys) if method == "pearson" else stats.spearmanr(xs, ys)
    return Correlation(
        r=float(result.statistic), p=float(result.pvalue), n=len(languages), languages=languages
    )


def correlations(
    x: Mapping[str, float], y: Mapping[str, float], *, without: str = "en"
) -> dict[str, Correlation]:
    """Dufter & Schütze 2020's report: Pearson and Spearman, with all languages and without
    ``without``.

    Keys: ``pearson``, ``spearman``, ``pearson_without_<lang>``, ``spearman_without_<lang>``.
    """
    out: dict[str, Correlation] = {}
    for method in CORRELATION_METHODS:
        out[method] = correlate(x, y, method=method)
        out[f"{method}_without_{without}"] = correlate(x, y, method=method, exclude=(without,))
    return out
