"""Dufter & Schütze 2020 App. B.2 / Table 4 on the Bible: how far each edition's word order is from
English.

For every edition, the New Testament verse pairs (reference English edition, edition) are
word-aligned, and each alignment is scored with Birch & Osborne's Kendall's tau
(:func:`multilab.evaluation.wordorder.kendall_tau`: 1 − √(D/Z), 1.0 = English order, 0 = fully
reversed, ≈ .29 for a random order). A language's score is the mean over a seeded sample of
verses (Dufter & Schütze 2020: 2,500 XNLI sentences), the *same* verse ids for every edition.

**Alignment weights: a deviation, measured.** Dufter & Schütze 2020 runs SimAlign's Match on mBERT
vectors; the lab's first design asked for our fastText spaces mapped by unsupervised VecMap.
On the Bible that mapping fails (held-out silver P@1 .000 German, .002 Hindi:
docs/notes/reproduction-log.md, "Row 30"), and a Match on unmapped vectors aligns by chance,
so tau would measure the mapping, not the language.
The weights here are IBM Model 1 association scores √(t(t|s) · t(s|t)), fitted on the edition
pair's own verses (:func:`multilab.data.dictionary.ibm1_word_scores`): an alignment learnt from
the parallel text, as Birch & Osborne (2011) score GIZA++ alignments. The matching is SimAlign's
Match unchanged (:func:`multilab.evaluation.wordorder.match_weights`), except that a link of
weight 0 (two words never seen in one verse) is dropped instead of forced.

Words are those of the lab's BERT pre-tokenizer (:func:`multilab.lab.enfake.bert_words`)
without tokens that hold no letter or digit: verse punctuation is an editor's choice and differs
between editions of one language. Chinese ideographs are words of their own (tau over
characters), Japanese kana runs are one word (docs/CORPORA.md).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import random
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial

import numpy as np

from multilab.data.dictionary import WordScores, ibm1_word_scores
from multilab.data.parallel import Verse, aligned_ids, book_of, has_text
from multilab.evaluation.wordorder import DEFAULT_TIE_BREAK, kendall_tau, match_weights
from multilab.lab.enfake import bert_words
from multilab.lab.languages import EDITIONS

#: Links not above this weight are dropped after the matching (IBM-1 scores are >= 0).
MIN_WEIGHT = 0.0


@dataclass(frozen=True)
class EditionWordOrder:
    """One edition's word order against the reference: the mean Kendall's tau of its scored
    verses (Birch's rule: an unaligned word moves with its left neighbour), their standard
    deviation, the mean tau over the aligned words only (a word that moves with its neighbour
    counts as no reordering, so fewer links raise ``tau``: the gap shows how much), how many
    verses scored, the share of reference words aligned (a low share means tau rests on few
    links), and the seconds of fitting IBM-1 on the pair's verses and of aligning + scoring."""

    edition: str
    iso: str
    name: str
    tau: float
    tau_std: float
    tau_linked: float  # the same alignments, unaligned words left out instead of filled
    verses: int
    aligned_share: float
    seconds_fit: float
    seconds_align: float


def content_words(text: str) -> list[str]:
    """The verse's words as the lab's BERT pipeline cuts them, punctuation left out."""
    return [word for word in bert_words(text) if has_text(word)]


def scored_verse_ids(verses_by_edition: Mapping[str, Sequence[Verse]], books: tuple[int, int],
                     count: int, seed: int) -> list[str]:
    """``count`` verse ids of ``books`` with text in *every* edition (a seeded sample, back in
    canonical order), so each language is scored on the same verses."""
    common = aligned_ids(verses_by_edition, books)
    if not common:
        raise ValueError(f"no verse of books {books[0]}-{books[1]} has text in every edition")
    if count >= len(common):
        return common
    return sorted(random.Random(seed).sample(common, count))


def ibm1_alignment(scores: WordScores, row: int, *, tie_break: float = DEFAULT_TIE_BREAK
                   ) -> np.ndarray:
    """Match on segment ``row``'s IBM-1 scores; word pairs never seen together stay unlinked."""
    source, target = scores.source_ids[row], scores.target_ids[row]
    return match_weights(scores.scores[source][:, target].toarray(), tie_break=tie_break,
                         min_weight=MIN_WEIGHT)


def verse_taus(scores: WordScores, rows: Sequence[int], *, square_root: bool = True,
               tie_break: float = DEFAULT_TIE_BREAK) -> tuple[np.ndarray, np.ndarray, float]:
    """Kendall's tau of the Match alignment of segments ``rows`` (reference = source side),
    the same over the aligned words only, and the share of source words aligned. A segment
    with no aligned word gets no tau (it has no order to compare); an empty one is skipped."""
    taus: list[float] = []
    linked_taus: list[float] = []
    aligned = words = 0
    for row in rows:
        source, target = scores.source_ids[row], scores.target_ids[row]
        if len(source) == 0 or len(target) == 0:
            continue
        alignment = ibm1_alignment(scores, row, tie_break=tie_break)
        linked = int((alignment >= 0).sum())
        words += len(source)
        aligned += linked
        if linked:
            taus.append(kendall_tau(alignment, square_root=square_root))
            linked_taus.append(kendall_tau(alignment[alignment >= 0], square_root=square_root))
    return (np.array(taus, dtype=np.float64), np.array(linked_taus, dtype=np.float64),
            aligned / words if words else 0.0)


def edition_word_order(reference: Sequence[Verse], other: Sequence[Verse], code: str,
                       scored_ids: Sequence[str], books: tuple[int, int], *,
                       ibm1_iterations: int = 5, square_root: bool = True) -> EditionWordOrder:
    """Fit IBM-1 on every verse of ``books`` the two editions share, then score
    ``scored_ids`` (which must be among them)."""
    started = time.perf_counter()
    pair = {"reference": reference, code: other}
    ids = aligned_ids(pair, books)
    text_of = [dict(verses) for verses in (reference, other)]
    source = [content_words(text_of[0][vid]) for vid in ids]
    target = [content_words(text_of[1][vid]) for vid in ids]
    row_of = {vid: row for row, vid in enumerate(ids)}
    missing = [vid for vid in scored_ids if vid not in row_of]
    if missing:
        raise ValueError(f"{len(missing)} scored verses are not shared by the pair, e.g. "
                         f"{missing[0]}")
    scores = ibm1_word_scores(source, target, ibm1_iterations)
    fitted = time.perf_counter()
    taus, linked_taus, aligned_share = verse_taus(scores, [row_of[vid] for vid in scored_ids],
                                     square_root=square_root)
    iso, name = EDITIONS[code]
    return EditionWordOrder(
        edition=code, iso=iso, name=name, tau=float(taus.mean()), tau_std=float(taus.std()),
        tau_linked=float(linked_taus.mean()), verses=len(taus), aligned_share=aligned_share,
        seconds_fit=fitted - started, seconds_align=time.perf_counter() - fitted)


def bible_word_order(verses_by_edition: Mapping[str, Sequence[Verse]], reference: str,
                     editions: Sequence[str], *, books: tuple[int, int], verses: int,
                     sample_seed: int, ibm1_iterations: int = 5, square_root: bool = True,
                     processes: int = 1,
                     progress: Callable[[EditionWordOrder], None] | None = None,
                     ) -> list[EditionWordOrder]:
    """Every edition's word order against ``reference`` (which may itself be listed: its
    score is the method's ceiling, 1.0 when it works).

    ``processes`` > 1 scores editions side by side in fresh (spawned) processes: each edition
    is independent and single-threaded NumPy, so 2 cores take half the time, with the same
    numbers. Results and ``progress`` calls come in the listed order either way."""
    for code in (reference, *editions):
        if code not in verses_by_edition:
            raise ValueError(f"edition {code!r} was not read")
    wanted = {code: verses_by_edition[code] for code in dict.fromkeys((reference, *editions))}
    scored = scored_verse_ids(wanted, books, verses, sample_seed)
    score = partial(_score_edition, verses_by_edition[reference], scored=scored, books=books,
                    ibm1_iterations=ibm1_iterations, square_root=square_root)
    jobs = [(verses_by_edition[code], code) for code in editions]
    results = []
    with contextlib.ExitStack() as stack:
        if processes > 1 and len(jobs) > 1:
            pool = stack.enter_context(ProcessPoolExecutor(
                max_workers=min(processes, len(jobs)),
                mp_context=multiprocessing.get_context("spawn")))
            outcomes = pool.map(score, jobs)
        else:
            outcomes = map(score, jobs)
        for result in outcomes:
            results.append(result)
            if progress is not None:
                progress(result)
    return results


def _score_edition(reference: Sequence[Verse], job: tuple[Sequence[Verse], str], *,
                   scored: Sequence[str], books: tuple[int, int], ibm1_iterations: int,
                   square_root: bool) -> EditionWordOrder:
    other, code = job
    return edition_word_order(reference, other, code, scored, books,
                              ibm1_iterations=ibm1_iterations, square_root=square_root)


def as_json(results: Sequence[EditionWordOrder], **settings: object) -> dict:
    """The stage's output: the settings, then one entry per edition (listed order)."""
    return {**settings, "editions": {r.edition: asdict(r) for r in results}}


def in_books(verses: Sequence[Verse], books: tuple[int, int]) -> list[Verse]:
    """The verses of ``books`` only (what the stage keeps in memory per edition)."""
    return [(vid, text) for vid, text in verses if books[0] <= book_of(vid) <= books[1]]
