"""Language transforms of K et al. 2020: pure functions, no I/O, no config.

Each transform makes a new "language" out of an existing one while keeping some of its
properties and destroying others:

- :func:`permute_word_order` (§3.2.2): random swaps of word-piece pairs destroy word order;
- :func:`unigram_sentences` (§3.2.3): only the unigram frequencies and the sentence lengths
  survive;
- :func:`next_sentence_pairs` (§3.4.1): the sentence pairs of BERT's next-sentence prediction.

The text transform ``enfake`` (§3.2.1: every character moved to a script no other corpus
uses) is :func:`multilab.lab.enfake.unicode_fake`: the languages registry names it, so it
lives beside the registry, without torch.

Everything random takes an explicit seeded ``torch.Generator``: same generator state, same
output, in any process.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch


def swap_pair_count(length: int, p: float) -> int:
    """Number of word-piece pairs swapped in a sentence of ``length`` word-pieces.

    K et al. 2020 swaps p·L/2 pairs; we round half up (``floor(p·L/2 + 1/2)``) and cap at
    ``L // 2`` because the pairs are disjoint (the cap only bites for odd L and p near 1).
    Rounding instead of flooring keeps short sentences permuted at p = 0.25 (L = 4 → 1 pair).
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"permutation amount p={p} is outside the valid range [0, 1]")
    if length < 0:
        raise ValueError(f"sentence length {length} is negative; valid: >= 0")
    return min(length // 2, int(p * length / 2 + 0.5))


def permute_word_order(ids: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """Swap :func:`swap_pair_count` disjoint random pairs of positions of one sentence.

    ``ids`` are the word-pieces of one sentence (1-D, no [CLS]/[SEP]); a new tensor comes
    back. The 2k positions are a random subset and are paired in random order, so each
    word-piece keeps its context words but not their order; as the paper says, this is not
    a uniform distribution over permutations. Pretraining only (never fine-tuning or
    evaluation): that is the caller's business.
    """
    if ids.ndim != 1:
        raise ValueError(
            f"permute_word_order takes one sentence (1-D ids), got shape {list(ids.shape)}"
        )
    pairs = swap_pair_count(len(ids), p)
    out = ids.clone()
    if pairs == 0:
        return out
    chosen = torch.randperm(len(ids), generator=generator)[: 2 * pairs].view(pairs, 2)
    left, right = chosen[:, 0], chosen[:, 1]
    out[left], out[right] = ids[right], ids[left]
    return out


def unigram_sentences(sentences: Sequence[str], generator: torch.Generator) -> list[str]:
    """Each sentence replaced by as many words drawn i.i.d. from the corpus' unigram counts.

    K et al. 2020 §3.2.3: only the unigram frequency (and the sentence lengths, and the words'
    spelling) survives. Words are the whitespace-separated tokens of the lab's corpora
    (already word-tokenised); sentence lengths are kept in words. The vocabulary is ordered
    by first occurrence, so the draw depends only on the corpus and the generator.
    """
    counts = Counter(word for sentence in sentences for word in sentence.split())
    lengths = [len(sentence.split()) for sentence in sentences]
    if not counts:
        return ["" for _ in sentences]
    words = list(counts)
    weights = torch.tensor([counts[w] for w in words], dtype=torch.float64)
    draws = torch.multinomial(weights, sum(lengths), replacement=True, generator=generator)
    out, start = [], 0
    for length in lengths:
        out.append(" ".join(words[i] for i in draws[start : start + length].tolist()))
        start += length
    return out


#: Conneau et al. 2020 §4 (extra anchors, after Conneau & Lample's code-switching): a dictionary
#: word is replaced by its translation this often, and at most this share of a sentence's words.
SWITCH_RATE, SWITCH_CAP = 0.3, 0.15


def code_switch(sentences: Sequence[Sequence[str]], translations: Sequence[dict[str, str]],
                generator: torch.Generator, rate: float = SWITCH_RATE,
                cap: float = SWITCH_CAP) -> list[list[str]]:
    """Each word with a translation replaced by it with probability ``rate``, at most
    ``floor(cap · words)`` of a sentence's words (the first ones of a seeded order when more
    were drawn). ``translations``: the dictionaries a sentence's words may switch with (one
    chosen per word, uniformly). The paper caps a batch's words at 15 %; here each sentence
    is capped, which keeps every batch under it too."""
    out = []
    for words in sentences:
        words = list(words)
        limit = int(cap * len(words))
        candidates = [i for i, w in enumerate(words) if any(w in d for d in translations)]
        if not candidates or not limit:
            out.append(words)
            continue
        drawn = torch.rand(len(candidates), generator=generator) < rate
        order = torch.randperm(len(candidates), generator=generator).tolist()
        chosen = [candidates[i] for i in order if bool(drawn[i])][:limit]
        for i in chosen:
            options = [d[words[i]] for d in translations if words[i] in d]
            pick = int(torch.randint(len(options), (1,), generator=generator))
            words[i] = options[pick]
        out.append(words)
    return out


@dataclass(frozen=True)
class SentencePairs:
    """Index pairs for next-sentence prediction, in the label convention of Hugging Face's
    ``BertForPreTraining``: ``next_sentence_label`` 0 = B follows A, 1 = B is random."""

    first: torch.Tensor
    second: torch.Tensor
    next_sentence_label: torch.Tensor

    def __len__(self) -> int:
        return len(self.first)


def next_sentence_pairs(
    count: int, generator: torch.Generator, documents: Sequence[Hashable] | None = None
) -> SentencePairs:
    """One pair per sentence that has a next: with probability 1/2 its true next sentence
    (the next verse), else a uniformly random other sentence (neither itself nor its next).

    ``documents`` (e.g. the book of each verse) stops a true pair from crossing a document
    boundary: a sentence whose successor is in another document is not a first sentence.
    Labels are fair coin flips, as in BERT, so the share of true pairs is 1/2 in expectation.
    """
    if documents is not None and len(documents) != count:
        raise ValueError(f"documents has {len(documents)} entries for {count} sentences")
    if count < 3:
        raise ValueError(
            f"next-sentence prediction needs at least 3 sentences (a first, its next and a "
            f"random other), got {count}"
        )
    firsts = torch.arange(count - 1)
    if documents is not None:
        same = [documents[i] == documents[i + 1] for i in range(count - 1)]
        firsts = firsts[torch.tensor(same, dtype=torch.bool)]
        if len(firsts) == 0:
            raise ValueError("next-sentence prediction needs a document of at least 2 sentences")
    labels = (torch.rand(len(firsts), generator=generator) < 0.5).long()
    other = torch.randint(0, count - 2, (len(firsts),), generator=generator)
    other = torch.where(other < firsts, other, other + 2)  # skip the first and its next
    second = torch.where(labels == 1, other, firsts + 1)
    return SentencePairs(first=firsts, second=second, next_sentence_label=labels)
