"""Word retrieval MRR and P@1 (Liu et al. 2020b §3.1.1, Liu et al. 2020a §2.1.1) and contextual word
vectors.

Liu et al. 2020b: given a bilingual dictionary D = {(x₁, y₁), …, (xₙ, yₙ)} with vectors (uᵢ, vᵢ),
the
source word xᵢ ranks every candidate y₁ … yₙ by cos(uᵢ, vⱼ) and MRR = 1/n Σᵢ 1/rank(yᵢ). No map is
learned: the two languages live in one jointly trained space. Contextual models represent a word
by the mean of its vectors over all its occurrences in the corpus.

Chance is not 1/n for contextual vectors of parallel corpora: w and ::w occur at the same
positions, so their averaged vectors share a position component even in an untrained model
(12 × 64, random weights, 400 English / Fake-English sentences, 485 silver pairs: MRR 0.14 where
1/n-chance is 0.014). Report the untrained model's MRR beside the trained one's.

How the paper's definition is read here, where it is silent:

* **candidates** are the distinct target words of the dictionary (the yⱼ; a word listed twice is
  one candidate). ``candidates="all"`` ranks among every target word that has a vector instead.
* **several translations**: the paper's MRR is a mean over *pairs*, so a source word with k
  translations is k queries, each ranking its own yᵢ while the other correct translations count
  as competitors (``multiple="pair"``, the default, the formula as printed). ``multiple="best"``
  makes one query per distinct source word, ranked by its best-placed translation (MUSE's
  convention for P@k).
* **ties** count against the query: rank = 1 + the number of *other* candidates scoring ≥ the
  gold one, so a degenerate space (all vectors equal) scores ≈ 1/n, not 1.
* pairs whose source or target word has no vector are skipped and counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

Multiple = Literal["pair", "best"]
Candidates = Literal["dictionary", "all"]


@dataclass(frozen=True)
class WordRetrieval:
    """MRR and P@1 over ``queries`` queries; ``skipped`` dictionary pairs had no vector;
    ``ranks``: each query's source word and rank (for MRR by a class of source words)."""

    mrr: float
    precision_at_1: float
    queries: int
    skipped: int
    ranks: tuple[tuple[str, int], ...] = ()

    def mrr_of(self, words: Iterable[str]) -> tuple[float | None, int]:
        """MRR over the queries whose source word is one of ``words``, and their count
        (None: no such query)."""
        wanted = set(words)
        found = [1.0 / rank for word, rank in self.ranks if word in wanted]
        return (float(np.mean(found)) if found else None), len(found)


def _unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def word_retrieval(
    source_words: Sequence[str],
    source_vectors: ArrayLike,
    target_words: Sequence[str],
    target_vectors: ArrayLike,
    dictionary: Iterable[tuple[str, str]],
    multiple: Multiple = "pair",
    candidates: Candidates = "dictionary",
) -> WordRetrieval:
    """MRR and P@1 of retrieving each dictionary translation by cosine similarity.

    ``*_vectors[i]`` is the vector of ``*_words[i]`` (one row per word, e.g. from
    :func:`contextual_word_vectors` or a static embedding table).
    """
    if multiple not in ("pair", "best"):
        raise ValueError(f"unknown multiple={multiple!r}; valid: pair, best")
    if candidates not in ("dictionary", "all"):
        raise ValueError(f"unknown candidates={candidates!r}; valid: dictionary, all")
    src = np.asarray(source_vectors, dtype=np.float64)
    trg = np.asarray(target_vectors, dtype=np.float64)
    if src.shape[0] != len(source_words) or trg.shape[0] != len(target_words):
        raise ValueError("each word needs exactly one vector row (words and vectors differ)")
    src_row = {w: i for i, w in enumerate(source_words)}
    trg_row = {w: i for i, w in enumerate(target_words)}
    pairs = list(dict.fromkeys(dictionary))  # a pair listed twice is one pair
    kept = [(src_row[s], trg_row[t]) for s, t in pairs if s in src_row and t in trg_row]
    skipped = len(pairs) - len(kept)
    if not kept:
        raise ValueError("no dictionary pair has vectors on both sides")

    if candidates == "dictionary":
        candidate_rows = np.array(sorted({t for _, t in kept}))
    else:
        candidate_rows = np.arange(len(target_words))
    column = {int(row): j for j, row in enumerate(candidate_rows)}
    query_rows = np.array(sorted({s for s, _ in kept}))
    query_index = {int(row): i for i, row in enumerate(query_rows)}
    scores = _unit_rows(src[query_rows]) @ _unit_rows(trg[candidate_rows]).T

    def rank(query: int, gold: int) -> int:
        row = scores[query_index[query]]
        return int((row >= row[column[gold]]).sum())  # itself + every candidate tying or above

    if multiple == "pair":
        queries = [(s, rank(s, t)) for s, t in kept]
    else:
        gold: dict[int, list[int]] = {}
        for s, t in kept:
            gold.setdefault(s, []).append(t)
        queries = [(s, min(rank(s, t) for t in ts)) for s, ts in gold.items()]
    ranks_array = np.asarray([r for _, r in queries], dtype=np.float64)
    return WordRetrieval(
        mrr=float(np.mean(1.0 / ranks_array)),
        precision_at_1=float(np.mean(ranks_array == 1)),
        queries=len(queries),
        skipped=skipped,
        ranks=tuple((source_words[s], r) for s, r in queries),
    )


def occurrence_means(hidden: ArrayLike, word_ids: ArrayLike, n_words: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """One vector per word occurrence of a sentence: the mean of its pieces' vectors.

    ``hidden[i]`` is token i's vector (trailing dimensions kept), ``word_ids[i]`` the index of
    its word, negative for [CLS], [SEP], padding. Returns the positions of the words that have
    a piece and their vectors, in order."""
    hidden = np.asarray(hidden, dtype=np.float64)
    ids = np.asarray(word_ids, dtype=np.int64)
    keep = ids >= 0
    sums = np.zeros((n_words, *hidden.shape[1:]))
    np.add.at(sums, ids[keep], hidden[keep])
    pieces = np.bincount(ids[keep], minlength=n_words)
    positions = np.flatnonzero(pieces)
    return positions, sums[positions] / pieces[positions].reshape(-1, *[1] * (hidden.ndim - 1))


class ContextualWordVectors:
    """Accumulates a word's contextual vectors over a corpus; :meth:`result` averages them.

    Per sentence, the vectors of a word's wordpieces are first merged by their mean (one vector
    per word occurrence); a word type's vector is then the mean over its occurrences, each
    occurrence weighing the same whatever its number of pieces. Trailing dimensions are kept, so
    a (tokens × layers × d) input gives every layer in one pass.
    """

    def __init__(self) -> None:
        self._index: dict[str, int] = {}
        self._sums: list[np.ndarray] = []
        self._counts: list[int] = []

    def add(self, hidden: ArrayLike, word_ids: Sequence[int | None], words: Sequence[str]) -> None:
        """One sentence: ``hidden[i]`` is token i's vector, ``word_ids[i]`` the index in
        ``words`` of the word it belongs to, or None / a negative number for [CLS], [SEP],
        padding (as a fast tokenizer's ``word_ids()``)."""
        hidden = np.asarray(hidden, dtype=np.float64)
        if hidden.shape[0] != len(word_ids):
            raise ValueError(f"{hidden.shape[0]} token vectors but {len(word_ids)} word ids")
        ids = np.array([-1 if w is None else int(w) for w in word_ids], dtype=np.int64)
        if (ids >= len(words)).any():
            raise ValueError(f"a word id is ≥ the sentence's {len(words)} words")
        positions, means = occurrence_means(hidden, ids, len(words))
        for position, occurrence in zip(positions.tolist(), means, strict=True):
            word = words[position]
            if word not in self._index:
                self._index[word] = len(self._sums)
                self._sums.append(np.zeros_like(occurrence))
                self._counts.append(0)
            self._sums[self._index[word]] += occurrence
            self._counts[self._index[word]] += 1

    def result(self, min_count: int = 1) -> tuple[list[str], np.ndarray]:
        """(words in order of first occurrence, their mean vectors), for words seen
        ``min_count`` times or more."""
        words = [w for w, i in self._index.items() if self._counts[i] >= min_count]
        if not words:
            return [], np.zeros((0,))
        vectors = np.stack([self._sums[self._index[w]] / self._counts[self._index[w]]
                            for w in words])
        return words, vectors


def contextual_word_vectors(
    hidden: Iterable[ArrayLike],
    word_ids: Iterable[Sequence[int | None]],
    words: Iterable[Sequence[str]],
    min_count: int = 1,
) -> tuple[list[str], np.ndarray]:
    """Mean contextual vector of every word type over a corpus (see :class:`ContextualWordVectors`).

    The three iterables run over the same sentences: per-token vectors, per-token word ids, the
    sentence's words.
    """
    accumulator = ContextualWordVectors()
    for h, ids, ws in zip(hidden, word_ids, words, strict=True):
        accumulator.add(h, ids, ws)
    return accumulator.result(min_count)
