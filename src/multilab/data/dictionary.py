"""A silver bilingual dictionary induced from a verse-aligned parallel corpus.

The papers take their dictionaries from MUSE (Liu et al. 2020a / Liu et al. 2020b) and PanLex
(Conneau et al. 2020); neither is
here. The Bible is parallel verse by verse, so a dictionary can be *induced*: words that are
translations occur in the same verses. Two associations, both over the same aligned segments
(verses, or sentences of a parallel copy):

* ``dice`` — Dice coefficient of verse co-occurrence, Dice(s, t) = 2 c(s, t) / (c(s) + c(t)),
  c counting segments (a word repeated in one verse counts once).
* ``ibm1`` — a few EM iterations of IBM Model 1 in both directions (with a NULL word, started
  from uniform), scored by the geometric mean √(t(t|s) · t(s|t)). EM explains each target token
  by the source tokens of its own verse, so a frequent word (``the``, ``of``) stops claiming the
  rare words it merely co-occurs with — Dice cannot do that.

Measured on the New Testament (benchmarks/RESULTS-dictionary.md), ``ibm1`` is the default: at
the same number of entries it is 4–6 points more precise than ``dice`` (English ↔ English
editions), and it matches the frequent function words (the → der, of → des, to → zu, a → ein)
that Dice's mutual best match leaves out (English ↔ German token coverage 91 % against 64 %).

An entry is kept only for a **mutual unique best match**: t is the single best target of s and
s the single best source of t, both seen in at least ``min_count`` segments. A tie (two words
with exactly the same verses) gives no entry rather than an arbitrary one. The result is one
target per source word, so its precision is a precision@1. It is *silver*: say so wherever its
numbers are used; its precision against a gold dictionary comes from :func:`evaluate_dictionary`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import sparse

Association = Literal["dice", "ibm1"]
ASSOCIATIONS: tuple[str, ...] = ("dice", "ibm1")


@dataclass(frozen=True)
class DictionaryEntry:
    """One induced translation; counts are numbers of segments (verses) containing the word."""

    source: str
    target: str
    score: float
    source_count: int
    target_count: int
    cooccurrences: int


@dataclass(frozen=True)
class DictionaryQuality:
    """A silver dictionary against a gold one.

    ``precision_at_1`` = correct / evaluated, over the entries whose source word the gold
    dictionary lists; ``type_coverage`` = share of the source corpus's word types that got an
    entry; ``token_coverage`` = share of its running words whose type got one.
    """

    entries: int
    evaluated: int
    correct: int
    precision_at_1: float
    type_coverage: float
    token_coverage: float


class _Vocabulary:
    """Word ↔ index, in order of first occurrence, with segment counts."""

    def __init__(self, segments: Sequence[Sequence[str]]) -> None:
        self.index: dict[str, int] = {}
        for segment in segments:
            for word in segment:
                self.index.setdefault(word, len(self.index))
        self.words = list(self.index)
        self.ids = [np.fromiter((self.index[w] for w in s), np.int64, len(s)) for s in segments]
        rows = np.repeat(np.arange(len(segments)), [len(s) for s in segments])
        cols = np.concatenate(self.ids) if self.ids else np.zeros(0, np.int64)
        incidence = sparse.csr_matrix(
            (np.ones(len(cols), np.float64), (rows, cols)), shape=(len(segments), len(self.words))
        )
        incidence.sum_duplicates()
        incidence.data[:] = 1.0  # presence, not frequency
        self.incidence = incidence
        self.counts = np.asarray(incidence.sum(axis=0)).ravel().astype(np.int64)


def _check_corpus(source: Sequence[Sequence[str]], target: Sequence[Sequence[str]]) -> None:
    if len(source) != len(target):
        raise ValueError(
            f"a parallel corpus needs as many source as target segments: {len(source)} vs "
            f"{len(target)}"
        )
    if not source:
        raise ValueError("the parallel corpus is empty")
    for name, side in (("source", source), ("target", target)):
        if side and isinstance(side[0], str):
            raise ValueError(f"{name} segments must be token lists, not strings (split them first)")


def dice_matrix(cooccurrence: sparse.csr_matrix, source_counts: np.ndarray,
                target_counts: np.ndarray) -> sparse.csr_matrix:
    """Dice coefficients of every co-occurring pair (zero elsewhere, kept sparse)."""
    coo = cooccurrence.tocoo()
    dice = 2.0 * coo.data / (source_counts[coo.row] + target_counts[coo.col])
    return sparse.csr_matrix((dice, (coo.row, coo.col)), shape=cooccurrence.shape)


def ibm1_translation_table(
    source_ids: Sequence[np.ndarray],
    target_ids: Sequence[np.ndarray],
    source_size: int,
    target_size: int,
    iterations: int,
) -> sparse.csr_matrix:
    """t(target word | source word) after ``iterations`` EM steps of IBM Model 1.

    Source index ``source_size`` is the NULL word (present in every segment); the returned
    matrix drops it. Started uniform over co-occurring pairs, as Brown et al. (1993). Vectorised
    over every (segment, source token, target token) triple, so a New Testament takes seconds.
    """
    # one key per (segment, source token or NULL, target token) triple: source * |T| + target
    segments, shapes = [], []
    for s_ids, t_ids in zip(source_ids, target_ids, strict=True):
        if len(t_ids) == 0:
            continue
        s_with_null = np.append(np.asarray(s_ids, np.int64), source_size)
        keys = np.tile(s_with_null, len(t_ids)) * target_size + np.repeat(t_ids, len(s_with_null))
        segments.append(keys)
        shapes.append((len(t_ids), len(s_with_null)))
    if not segments:
        raise ValueError("no target token to align")
    triple_keys = np.concatenate(segments)
    del segments
    # the distinct pairs by one sort of every key: np.unique per segment and of their union
    # gave the same array at 20 times the cost (numpy's hashing unique on 15,000 small arrays)
    ordered = np.sort(triple_keys)
    pair_keys = ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]
    del ordered
    # int32 pair ids and target-token groups keep the triples at 8 bytes each (NT: ~6.6 M)
    pair_of_triple = np.searchsorted(pair_keys, triple_keys).astype(np.int32)
    del triple_keys
    grp = np.repeat(np.arange(sum(n for n, _ in shapes), dtype=np.int32),
                    np.concatenate([np.full(n, m) for n, m in shapes]))
    pair_source, pair_target = pair_keys // target_size, pair_keys % target_size
    # uniform start: every target co-occurring with a source word equally likely
    per_source = np.bincount(pair_source, minlength=source_size + 1)
    table = 1.0 / per_source[pair_source]
    for _ in range(iterations):
        weight = table[pair_of_triple]
        posterior = weight / np.bincount(grp, weights=weight)[grp]
        counts = np.bincount(pair_of_triple, weights=posterior, minlength=len(pair_keys))
        totals = np.bincount(pair_source, weights=counts, minlength=source_size + 1)
        table = counts / totals[pair_source]
    real = pair_source < source_size
    return sparse.csr_matrix(
        (table[real], (pair_source[real], pair_target[real])), shape=(source_size, target_size)
    )


def _unique_best(scores: sparse.csr_matrix) -> np.ndarray:
    """Per row, the column of its single largest positive score, or −1 (empty row or a tie)."""
    best = np.full(scores.shape[0], -1, dtype=np.int64)
    for row in range(scores.shape[0]):
        start, end = scores.indptr[row], scores.indptr[row + 1]
        values = scores.data[start:end]
        if values.size == 0:
            continue
        top = values.max()
        if top > 0 and np.count_nonzero(values == top) == 1:
            best[row] = scores.indices[start + int(values.argmax())]
    return best


def _ibm1_scores(src: _Vocabulary, trg: _Vocabulary, iterations: int) -> sparse.csr_matrix:
    """√(t(t|s) · t(s|t)): IBM Model 1 in both directions, zero for pairs never seen together."""
    forward = ibm1_translation_table(src.ids, trg.ids, len(src.words), len(trg.words), iterations)
    backward = ibm1_translation_table(trg.ids, src.ids, len(trg.words), len(src.words),
                                      iterations)
    return forward.multiply(backward.T.tocsr()).sqrt().tocsr()


@dataclass(frozen=True)
class WordScores:
    """IBM-1 association scores between every source and target word of a parallel corpus;
    ``source_ids[i]`` / ``target_ids[i]`` are segment ``i`` as row / column indices."""

    scores: sparse.csr_matrix
    source_ids: list[np.ndarray]
    target_ids: list[np.ndarray]


def ibm1_word_scores(source_segments: Sequence[Sequence[str]],
                     target_segments: Sequence[Sequence[str]],
                     iterations: int = 5) -> WordScores:
    """The scores :func:`induce_dictionary` matches on (``association='ibm1'``), for every
    word pair rather than the mutual best ones: what a word aligner needs per segment."""
    _check_corpus(source_segments, target_segments)
    if iterations < 1:
        raise ValueError(f"ibm1_iterations must be at least 1, got {iterations}")
    src, trg = _Vocabulary(source_segments), _Vocabulary(target_segments)
    return WordScores(_ibm1_scores(src, trg, iterations), src.ids, trg.ids)


def induce_dictionary(
    source_segments: Sequence[Sequence[str]],
    target_segments: Sequence[Sequence[str]],
    min_count: int = 5,
    association: Association = "ibm1",
    ibm1_iterations: int = 5,
    min_score: float = 0.0,
) -> list[DictionaryEntry]:
    """Mutual unique best matches between the words of two aligned corpora (see module doc).

    ``source_segments[i]`` and ``target_segments[i]`` are the tokens of the same verse. Words in
    fewer than ``min_count`` segments (on their side) take no part in the matching; matches
    scoring below ``min_score`` are dropped afterwards (the score ranks confidence: a cut trades
    coverage for precision). Entries come sorted by decreasing score.
    """
    _check_corpus(source_segments, target_segments)
    if association not in ASSOCIATIONS:
        raise ValueError(
            f"unknown association {association!r}; valid: {', '.join(ASSOCIATIONS)}"
        )
    if min_count < 1:
        raise ValueError(f"min_count must be at least 1, got {min_count}")
    if association == "ibm1" and ibm1_iterations < 1:
        raise ValueError(f"ibm1_iterations must be at least 1, got {ibm1_iterations}")
    src, trg = _Vocabulary(source_segments), _Vocabulary(target_segments)
    cooccurrence = (src.incidence.T @ trg.incidence).tocsr()
    if association == "dice":
        scores = dice_matrix(cooccurrence, src.counts, trg.counts)
    else:
        scores = _ibm1_scores(src, trg, ibm1_iterations)
    frequent = sparse.diags((src.counts >= min_count).astype(np.float64)) @ scores
    frequent = (frequent @ sparse.diags((trg.counts >= min_count).astype(np.float64))).tocsr()
    frequent.eliminate_zeros()
    best_target = _unique_best(frequent)
    best_source = _unique_best(frequent.T.tocsr())
    entries = []
    for s, t in enumerate(best_target):
        if t >= 0 and best_source[t] == s and frequent[s, t] >= min_score:
            entries.append(
                DictionaryEntry(
                    source=src.words[s],
                    target=trg.words[t],
                    score=float(frequent[s, t]),
                    source_count=int(src.counts[s]),
                    target_count=int(trg.counts[t]),
                    cooccurrences=int(cooccurrence[s, t]),
                )
            )
    entries.sort(key=lambda e: (-e.score, e.source))
    return entries


def evaluate_dictionary(
    entries: Sequence[DictionaryEntry],
    gold: Mapping[str, Collection[str]],
    source_segments: Iterable[Sequence[str]],
) -> DictionaryQuality:
    """Precision@1 of a silver dictionary against ``gold`` (source word → its translations),
    and its coverage of the source corpus."""
    evaluated = [e for e in entries if e.source in gold]
    correct = sum(e.target in gold[e.source] for e in evaluated)
    tokens = Counter(w for segment in source_segments for w in segment)
    if not tokens:
        raise ValueError("the source corpus is empty")
    covered = {e.source for e in entries}
    return DictionaryQuality(
        entries=len(entries),
        evaluated=len(evaluated),
        correct=correct,
        precision_at_1=correct / len(evaluated) if evaluated else float("nan"),
        type_coverage=len(covered & tokens.keys()) / len(tokens),
        token_coverage=sum(c for w, c in tokens.items() if w in covered) / sum(tokens.values()),
    )


def aligned_occurrences(
    source_segments: Sequence[Sequence[str]],
    target_segments: Sequence[Sequence[str]],
    entries: Iterable[DictionaryEntry],
) -> list[tuple[int, int, int]]:
    """Word occurrences aligned through a dictionary: (segment, source position, target
    position) wherever an entry's two words each occur exactly once in the same segment.

    The pairs for Conneau et al. 2020's contextual word-level alignment (§5.1.2), which takes them
    from a word aligner; one occurrence on each side makes the alignment unambiguous without one.
    """
    _check_corpus(source_segments, target_segments)
    translation = {e.source: e.target for e in entries}
    pairs = []
    for index, (src, trg) in enumerate(zip(source_segments, target_segments, strict=True)):
        src_counts, trg_counts = Counter(src), Counter(trg)
        trg_position = {w: i for i, w in enumerate(trg) if trg_counts[w] == 1}
        for i, word in enumerate(src):
            target = translation.get(word)
            if target in trg_position and src_counts[word] == 1:
                pairs.append((index, i, trg_position[target]))
    return pairs


def prefixed_copy(segments: Iterable[Sequence[str]], prefix: str = "::") -> list[list[str]]:
    """A parallel copy with every word prefixed (Fake-English at the word level: ``::word``)."""
    return [[prefix + w for w in segment] for segment in segments]


def prefixed_gold(words: Iterable[str], prefix: str = "::") -> dict[str, set[str]]:
    """The exact English ↔ Fake-English dictionary: w ↔ prefix + w."""
    return {w: {prefix + w} for w in words}
