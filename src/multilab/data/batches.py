"""Corpus lines → examples → batches → gradient-accumulation pieces → masked MLM inputs.

Every decision about the shape of a training batch lives here: which examples form the
global batch of a step (:class:`BatchOrder`), the order they run in and the pieces they are
cut into (:func:`gradient_pieces`), and the masks (:func:`mask_tokens`). Everything random
takes an explicit ``torch.Generator`` seeded from (seed, epoch) or (seed, step)
(:func:`mix_seed`), so a resumed run draws exactly what an uninterrupted one would.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from multilab.data.inputs import Batch, InputEncoder, collate
from multilab.data.parallel import disjoint_shares
from multilab.data.tokenizers import SPECIAL_TOKENS
from multilab.data.transforms import (
    code_switch,
    next_sentence_pairs,
    permute_word_order,
    unigram_sentences,
)
from multilab.errors import UserError
from multilab.lab.enfake import bert_words
from multilab.lab.modifications import Recipe

log = logging.getLogger(__name__)


def tokenize_lines(
    lines: list[str], tokenizer: PreTrainedTokenizerBase, encoder: InputEncoder
) -> tuple[list[torch.Tensor], int]:
    """Wordpiece ids of each line (no specials), cut to fit; returns (ids, number truncated)."""
    ids = tokenizer(lines, add_special_tokens=False)["input_ids"]
    sentences, truncated = [], 0
    for row in ids:
        words, cut = encoder.truncate(torch.tensor(row, dtype=torch.long))
        sentences.append(words)
        truncated += cut
    if truncated:
        log.warning(
            "%d of %d sentences longer than max_length=%d wordpieces were truncated",
            truncated,
            len(lines),
            encoder.max_length,
        )
    return sentences, truncated


@dataclass
class Examples:
    """Pre-encoded training examples: each sentence (verse) in every language, or in one."""

    encoded: list[tuple[torch.Tensor, ...]]
    languages: list[int]
    lengths: torch.Tensor
    next_sentence: torch.Tensor | None = None  # nsp: 0 = true next, 1 = random (per example)
    attend_padding: bool = False  # attend-padding: batches show the model their padding

    def __len__(self) -> int:
        return len(self.encoded)

    def batch(self, indices: torch.Tensor) -> Batch:
        idx = indices.tolist()
        labels = None if self.next_sentence is None else self.next_sentence[indices]
        return collate([self.encoded[i] for i in idx], [self.languages[i] for i in idx],
                       labels, attend_padding=self.attend_padding)

    def tokens(self) -> int:
        return int(self.lengths.sum())


#: The seed of the no-parallel shares of real languages: a property of the data, the same for
#: every model seed (as the halves of the sentence setup are).
SHARES_SEED = 0


def training_examples(
    sentences: list[torch.Tensor], recipe: Recipe, encoder: InputEncoder,
    by_language: list[list[torch.Tensor]] | None = None, pretraining_seed: int | None = None,
) -> Examples:
    """Parallel: every sentence in every language. no-parallel (Dufter & Schütze 2020 §3.3): English
    the first half only, Fake-English the second half only; real languages a seeded disjoint share
    each (``parallel.disjoint_shares``: contiguous shares would split them by book).

    ``sentences`` are the ids of the sentence setup, the same in every language;
    ``by_language`` (real languages) each language's own ids of the same verses.
    ``pretraining_seed`` (the model seed; the trainer passes it, evaluation does not: it reads
    whole single sentences) turns on what changes the pretraining inputs only: ``window-<w>``
    slices every sentence into windows of w word-pieces (Liu et al. 2020b §3.2.3), ``nsp`` pairs
    them (:func:`next_sentence_examples`, drawn from that seed).
    """
    texts = by_language if by_language is not None else [sentences] * encoder.languages
    pretraining = pretraining_seed is not None
    if pretraining and recipe.next_sentence:
        windowed = [windows(rows, recipe.window) for rows in texts]
        return next_sentence_examples(windowed, encoder, pretraining_seed)
    count = len(texts[0])
    if recipe.parallel:
        pairs = [(texts[lang][i], lang) for i in range(count) for lang in range(len(texts))]
    elif sentences:  # the sentence setup (its languages' ids may differ: K et al. 2020 rewrites)
        half = count // 2
        pairs = [(s, 0) for s in texts[0][:half]] + [(s, 1) for s in texts[1][half:]]
    else:
        shares = disjoint_shares(list(range(count)), len(texts), SHARES_SEED)
        pairs = [(texts[lang][i], lang) for lang, share in enumerate(shares) for i in share]
    if pretraining and recipe.window:  # after the shares: a verse's windows stay together
        pairs = [(piece, lang) for s, lang in pairs for piece in windows([s], recipe.window)]
    pairs = [(s, lang) for s, lang in pairs if len(s) > 0]
    encoded = [encoder.encode(s, lang) for s, lang in pairs]
    return Examples(
        encoded=encoded,
        languages=[lang for _, lang in pairs],
        lengths=torch.tensor([len(e[0]) for e in encoded]),
        attend_padding=recipe.attend_padding,
    )


def windows(sentences: list[torch.Tensor], width: int) -> list[torch.Tensor]:
    """Liu et al. 2020b §3.2.3 / Liu et al. 2020a §3 (``window-<w>``): each sentence sliced into
    consecutive segments of at most ``width`` word-pieces, in order, every word-piece kept (the same
    tokens, shorter inputs); 0 leaves the sentences whole."""
    if not width:
        return sentences
    return [piece for sentence in sentences for piece in sentence.split(width)]


#: Keys of the random streams of K et al. 2020's pretraining-only rewrites (with the model seed
#: and the language index): each language and each rewrite draws its own stream.
PERMUTE_STREAM, UNIGRAM_STREAM, NEXT_SENTENCE_STREAM = 2002_2, 2002_3, 2002_5
CODE_SWITCH_STREAM = 2003_1
#: Verses a word must occur in to enter extra-anchors' silver dictionary (as mrr's).
SWITCH_MIN_COUNT = 5


def next_sentence_examples(texts: list[list[torch.Tensor]], encoder: InputEncoder, seed: int
                           ) -> Examples:
    """nsp: for every language, one pair per sentence that has a next one, both halves of
    that language (:func:`transforms.next_sentence_pairs`: half the time its true next, else a
    random other sentence), drawn once per model seed, each language its own stream. Empty
    sentences are left out before pairing, so "next" is the next non-empty one; the corpus is
    one running document (a pair may cross a chapter or a book)."""
    encoded, languages, labels = [], [], []
    for lang, rows in enumerate(texts):
        rows = [row for row in rows if len(row) > 0]
        try:
            pairs = next_sentence_pairs(len(rows), seeded_generator(seed, NEXT_SENTENCE_STREAM,
                                                                    lang))
        except ValueError as err:
            raise UserError(f"modification 'nsp' on language {lang}'s {len(rows)} non-empty "
                            f"training sentences: {err} (valid: a modification without nsp)"
                            ) from None
        for first, second in zip(pairs.first.tolist(), pairs.second.tolist(), strict=True):
            encoded.append(encoder.encode_pair(rows[first], rows[second], lang))
            languages.append(lang)
        labels.append(pairs.next_sentence_label)
    return Examples(encoded=encoded, languages=languages,
                    lengths=torch.tensor([len(e[0]) for e in encoded]),
                    next_sentence=torch.cat(labels),
                    attend_padding=encoder.recipe.attend_padding)


def permuted_corpus(by_language: list[list[torch.Tensor]], p: float, seed: int
                    ) -> list[list[torch.Tensor]]:
    """K et al. 2020 §3.2.2 (``permute-p``): every sentence of every language with p·L/2 random
    word-piece pairs swapped, drawn once per model seed (the same permutation every epoch,
    as a corpus rewritten once before pretraining). Pretraining only: callers never pass
    evaluation or fine-tuning data."""
    if p == 0:
        return by_language
    return [
        [permute_word_order(ids, p, generator) for ids in rows]
        for generator, rows in (
            (seeded_generator(seed, PERMUTE_STREAM, lang), rows)
            for lang, rows in enumerate(by_language)
        )
    ]


def unigram_lines(lines: list[str], seed: int, language: int) -> list[str]:
    """K et al. 2020 §3.2.3 (``unigram-target``): each line replaced by as many words drawn from
    the lines' own unigram distribution. Words are the BERT pipeline's (so Chinese counts
    characters, as its tokenizer does), drawn once per model seed and language."""
    words = [" ".join(bert_words(line)) for line in lines]
    return unigram_sentences(words, seeded_generator(seed, UNIGRAM_STREAM, language))


def code_switched_lines(texts: list[list[str]], seed: int) -> tuple[list[list[str]], list[int]]:
    """Conneau et al. 2020's extra anchors (``extra-anchors``): every language's verses (row i the
    same verse in each) with dictionary words switched (:func:`transforms.code_switch`), drawn
    once per model seed and language. The dictionaries are silver, induced from these
    verses (IBM-1 mutual best matches, words in >= 5 verses: benchmarks/RESULTS-dictionary.md
    measures their precision, 0.7-0.8 between two English editions), not PanLex's: the first
    language's words switch into any other language, the others' into the first.
    Returns the lines and each dictionary's size (0 for the first language)."""
    from multilab.data.dictionary import induce_dictionary

    words = [[bert_words(line) for line in lines] for lines in texts]
    forward = []
    for other in words[1:]:
        entries = induce_dictionary(words[0], other, min_count=SWITCH_MIN_COUNT)
        forward.append({e.source: e.target for e in entries})
    backward = [{target: source for source, target in d.items()} for d in forward]
    out = []
    for language, sentences in enumerate(words):
        translations = forward if language == 0 else [backward[language - 1]]
        switched = code_switch(sentences, translations,
                               seeded_generator(seed, CODE_SWITCH_STREAM, language))
        out.append([" ".join(sentence) for sentence in switched])
    return out, [0, *(len(d) for d in forward)]


def mix_seed(*keys: int) -> int:
    """One seed from several keys (seed, step, rank, …): a fixed polynomial mix, so each
    combination gets its own stream and the same combination always the same one."""
    mixed = 0
    for key in keys:
        mixed = (mixed * 1_000_003 + int(key)) % (2**63 - 1)
    return mixed


def seeded_generator(*keys: int) -> torch.Generator:
    """A CPU generator seeded with :func:`mix_seed` of ``keys`` (e.g. seed, epoch)."""
    return torch.Generator().manual_seed(mix_seed(*keys))


def bucketed_batches(
    lengths: torch.Tensor, batch_size: int, seed: int, epoch: int, chunk_batches: int = 50
) -> list[torch.Tensor]:
    """Shuffle, sort by length inside chunks of ``chunk_batches`` batches, shuffle batches.

    Batches hold sentences of similar length (little padding) yet every epoch sees a
    different random grouping and order.
    """
    gen = seeded_generator(seed, epoch)
    order = torch.randperm(len(lengths), generator=gen)
    chunk = batch_size * max(1, chunk_batches)
    batches = []
    for start in range(0, len(order), chunk):
        part = order[start : start + chunk]
        part = part[torch.argsort(lengths[part], stable=True)]
        batches.extend(part.split(batch_size))
    shuffle = torch.randperm(len(batches), generator=gen).tolist()
    return [batches[i] for i in shuffle]


def least_padding_cuts(sorted_lengths: torch.Tensor, pieces: int) -> list[int]:
    """Sizes of ``pieces`` consecutive groups of length-sorted rows with the least padding.

    Why: a random batch sorted by length and run as a few gradient-accumulation pieces,
    each padded only to its own longest row, has the exact gradient of the whole random
    batch at a fraction of its padding. The cut points minimise the padded area
    (rows × width summed over pieces) by dynamic programming over the sorted lengths,
    vectorised (one [n+1, n+1] table per piece); ties go to the earliest cut, so the
    cuts are deterministic. Fewer than ``pieces`` groups only when there are fewer rows.
    """
    n = len(sorted_lengths)
    if pieces <= 1:  # nothing to cut: one group, sorted or not
        return [n] if n else []
    lengths = sorted_lengths.to(torch.float64)
    if n and bool((lengths[1:] < lengths[:-1]).any()):
        raise ValueError("least_padding_cuts needs lengths in ascending order")
    count = max(1, min(pieces, n))
    if n == 0:
        return []
    position = torch.arange(n + 1, dtype=torch.float64)
    width = torch.cat([lengths.new_zeros(1), lengths])  # width[i]: a group ending at row i
    area = (position[None, :] - position[:, None]) * width[None, :]  # [start m, end i]
    area[position[:, None] >= position[None, :]] = torch.inf  # a group holds >= 1 row
    best = torch.full((n + 1,), torch.inf, dtype=torch.float64)
    best[0] = 0.0
    starts = []
    for _ in range(count):
        best, start = (best[:, None] + area).min(0)
        starts.append(start)
    sizes, end = [], n
    for start in reversed(starts):
        begin = int(start[end])
        sizes.append(end - begin)
        end = begin
    return sizes[::-1]


class BatchOrder:
    """The global batch of every step: :func:`bucketed_batches` drawn when an epoch starts.

    ``steps_per_epoch`` is the number of batches of an epoch (the last one may be smaller).
    """

    def __init__(self, lengths: torch.Tensor, batch_size: int, seed: int, chunk_batches: int
                 ) -> None:
        self.lengths, self.batch_size = lengths, batch_size
        self.seed, self.chunk_batches = seed, chunk_batches
        self.steps_per_epoch = math.ceil(len(lengths) / batch_size)
        self._epoch: int | None = None
        self._batches: list[torch.Tensor] = []

    def __call__(self, step: int) -> torch.Tensor:
        """The example indices of the global batch of optimizer step ``step`` (0-based)."""
        epoch, index = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            self._epoch = epoch
            self._batches = bucketed_batches(
                self.lengths, self.batch_size, self.seed, epoch, self.chunk_batches
            )
        return self._batches[index]


def gradient_pieces(
    indices: torch.Tensor, lengths: torch.Tensor, length_pieces: int = 1, accum: int = 1,
    world: int = 1, rank: int = 0,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A global batch in the order it runs, and this process's pieces of it.

    Returns (``indices`` reordered, pieces as row positions in that order). With
    ``length_pieces`` > 1 the batch is sorted by length (ties keep their random order); this
    process's share (every ``world``-th row from ``rank``) is cut into ``accum`` equal groups
    (memory: none holds more rows than ``batch_size``) and each group again where the
    padding is least (:func:`least_padding_cuts`), so each piece is padded only to its own
    longest row: the whole batch's gradient with a fraction of its padding. Every rank gets
    exactly ``accum * length_pieces`` pieces, empty ones included: each piece is a DDP
    collective, and a rank that ran fewer would leave the others waiting.
    """
    if length_pieces > 1:
        indices = indices[torch.argsort(lengths[indices], stable=True)]
    row_lengths = lengths[indices]
    pieces: list[torch.Tensor] = []
    for group in torch.arange(len(indices))[rank::world].tensor_split(accum):
        cuts = least_padding_cuts(row_lengths[group], length_pieces)
        parts = list(group.split(cuts)) if cuts else [group]
        pieces += parts + [group[:0]] * (length_pieces - len(parts))
    return indices, pieces


@dataclass
class MaskedBatch:
    """MLM inputs: corrupted ids, which positions are predicted, and their true ids."""

    inputs: dict[str, torch.Tensor]
    selected: torch.Tensor  # bool [B, L]
    labels: torch.Tensor  # [N] true ids of the selected positions, row-major order
    #: 1 at real tokens (``inputs["attention_mask"]`` is all ones under attend-padding)
    token_mask: torch.Tensor
    next_sentence: torch.Tensor | None = None  # nsp labels [B] (the batch's), else None


def mask_tokens(
    batch: Batch,
    encoder: InputEncoder,
    mask_prob: float,
    replacement: tuple[float, ...],
    generator: torch.Generator,
    knn_table: torch.Tensor | None = None,
) -> MaskedBatch:
    """Select ``mask_prob`` of the wordpieces and replace them by (mask, keep, random, knn).

    Random tokens come from the whole vocabulary (any language, as BERT), or under
    ``recipe.random_in_language`` from the row's own language's block
    (:func:`random_replacement_ids`).
    knn tokens are drawn uniformly from the k cross-lingual neighbours of ``knn_table``.
    """
    ids = batch.input_ids
    probs = replacement_probs(replacement)
    selected = (torch.rand(ids.shape, generator=generator) < mask_prob) & batch.word_mask
    if not selected.any():  # never an empty loss
        first = batch.word_mask.nonzero()[0]
        selected[first[0], first[1]] = True
    labels = ids[selected]
    n = len(labels)
    choice = torch.multinomial(probs, n, replacement=True, generator=generator)
    mask_ids = torch.tensor([encoder.mask_id(lang) for lang in range(encoder.languages)])
    mask_ids = mask_ids[batch.languages]
    row_of = selected.nonzero()[:, 0]
    replaced = labels.clone()
    replaced = torch.where(choice == 0, mask_ids[row_of], replaced)
    random_ids = random_replacement_ids(encoder, batch.languages[row_of], generator)
    replaced = torch.where(choice == 2, random_ids, replaced)
    if probs[3] > 0:
        neighbours = knn_neighbours(labels, encoder, knn_table, generator)
        replaced = torch.where(choice == 3, neighbours, replaced)
    corrupted = ids.clone()
    corrupted[selected] = replaced
    inputs = batch.model_inputs()
    inputs["input_ids"] = corrupted
    return MaskedBatch(inputs=inputs, selected=selected, labels=labels,
                       token_mask=batch.real_tokens(), next_sentence=batch.next_sentence)


def replacement_probs(replacement: tuple[float, ...]) -> torch.Tensor:
    """(mask, keep, random, knn) as the tensor the replacement choices are drawn from (a
    three-way replacement: no knn)."""
    return torch.tensor(list(replacement) + [0.0] * (4 - len(replacement)))


def random_replacement_ids(encoder: InputEncoder, language: torch.Tensor,
                           generator: torch.Generator) -> torch.Tensor:
    """The random replacement of each selected position, ``language`` its row's language:
    any id of the vocabulary (BERT's: any language), or under ``recipe.random_in_language``
    (lang-random, sep-emb) an id of the row's own language's block. The one place that
    field is read: the single-model and the stacked trainer both draw here."""
    n = len(language)
    if encoder.recipe.random_in_language:
        starts = torch.tensor(encoder.offsets)
        sizes = torch.tensor([*encoder.offsets[1:], encoder.total_size]) - starts
        return starts[language] + (torch.rand(n, generator=generator) * sizes[language]).long()
    return torch.randint(0, encoder.total_size, (n,), generator=generator)


def knn_neighbours(
    labels: torch.Tensor,
    encoder: InputEncoder,
    knn_table: torch.Tensor | None,
    generator: torch.Generator,
) -> torch.Tensor:
    """One of the cross-lingual neighbours of every label, drawn uniformly (one gather).

    The table is indexed by the token id as it stands in the input: row i holds k neighbours
    in every other language (English + Fake-English: k in the other one), so a uniform column
    picks a language and a neighbour. In the sentence setup the table sends special tokens to
    their twin (``[UNK]`` ↔ ``::[UNK]``); without shift-special both languages share the
    specials, so a shifted special maps back to the shared one instead of an id the model
    never sees otherwise (a verse study's table sends them to themselves).
    """
    if knn_table is None:
        raise ValueError("knn replacement needs a neighbour table (run the spaces stage)")
    if knn_table.ndim != 2 or knn_table.shape[0] != encoder.total_size:
        raise ValueError(
            f"knn table of shape {list(knn_table.shape)} does not fit a vocabulary of "
            f"{encoder.total_size} (expected [{encoder.total_size}, k]); "
            "rebuild it with `dvc repro spaces`"
        )
    pick = torch.randint(0, knn_table.shape[1], (len(labels),), generator=generator)
    neighbours = knn_table[labels, pick]
    if not encoder.recipe.shift_special:
        shifted = encoder.vocab_size + len(SPECIAL_TOKENS)
        is_shifted_special = (neighbours >= encoder.vocab_size) & (neighbours < shifted)
        neighbours = torch.where(is_shifted_special, neighbours - encoder.vocab_size, neighbours)
    return neighbours
