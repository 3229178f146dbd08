"""Language transforms of seed 002 (K et al., ICLR 2020): pure functions, no I/O, no config.

Each transform makes a new "language" out of an existing one while keeping some of its
properties and destroying others:

- :func:`unicode_fake` (``enfake``, §3.2.1 and footnote 4): every character moved to a script
  no other corpus uses, so the new language shares no character, hence no word-piece, with
  any other, yet keeps every structural property of its base;
- :func:`permute_word_order` (§3.2.2): random swaps of word-piece pairs destroy word order;
- :func:`unigram_sentences` (§3.2.3): only the unigram frequencies and the sentence lengths
  survive;
- :func:`next_sentence_pairs` (§3.4.1): the sentence pairs of BERT's next-sentence prediction.

Everything random takes an explicit seeded ``torch.Generator``: same generator state, same
output, in any process.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch
from tokenizers import normalizers, pre_tokenizers

#: The enfake shift: printable ASCII (and everything up to U+17F7) lands in the Tangut block
#: (U+17000–U+187F7), a historic script that no corpus of the lab uses and that the BERT
#: normalizer keeps as letters. A Private Use Area would be the obvious choice but
#: ``BertNormalizer`` deletes Private Use (Co) and unassigned (Cn) characters as "control".
ENFAKE_SHIFT = 0x17000
#: The source code points :data:`ENFAKE_SHIFT` sends into Tangut (U+0021–U+17F7: Latin,
#: Greek, Cyrillic, Armenian, Hebrew, Arabic, the Indic scripts, Thai, Georgian, ...). Outside
#: it: Vietnamese's Latin Extended Additional, General Punctuation, CJK, Hangul syllables.
ENFAKE_SOURCE = (0x21, 0x17F7)

_NORMALIZER = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
_PRE_TOKENIZER = pre_tokenizers.BertPreTokenizer()


def bert_words(text: str) -> list[str]:
    """The words the lab's BERT pipeline sees (normalizer + pre-tokenizer of vocab.py)."""
    return [word for word, _ in _PRE_TOKENIZER.pre_tokenize_str(_NORMALIZER.normalize_str(text))]


def _kept(ch: str) -> bool:
    """Whitespace and control/format characters are not shifted (they are not letters)."""
    return ch.isspace() or unicodedata.category(ch).startswith("C")


@lru_cache(maxsize=65536)
def _is_bert_letter(ch: str) -> bool:
    """True when the BERT pipeline keeps ``ch`` unchanged and never splits a word at it.

    Rejects what ``BertNormalizer`` drops (control, format, private use, unassigned) or
    isolates (CJK ideographs) and what ``BertPreTokenizer`` splits at (whitespace,
    punctuation): ``ch + ch`` must stay one word.
    """
    if not ch.isprintable() or ch.isspace() or _NORMALIZER.normalize_str(ch) != ch:
        return False
    return len(_PRE_TOKENIZER.pre_tokenize_str(ch + ch)) == 1


def shift_code_points(text: str, shift: int = ENFAKE_SHIFT) -> str:
    """Add ``shift`` to the code point of every character except whitespace and controls.

    Seed 002 shifts "each character" (digits and punctuation included, so that there is
    strictly no character overlap); whitespace is kept so that words stay words. Every
    shifted character must be a letter that survives the BERT normalizer and pre-tokenizer
    (so never a surrogate, private-use, unassigned or CJK code point), else ValueError; at
    the default shift the characters must also lie in :data:`ENFAKE_SOURCE`, so that every
    fake character is a Tangut letter. Exactly invertible by :func:`unshift_code_points`
    (shifted characters are letters, kept ones are not, so nothing is ambiguous).
    """
    targets = {}
    for ch in set(text):
        if _kept(ch):
            continue
        code = ord(ch) + shift
        in_source = shift != ENFAKE_SHIFT or ENFAKE_SOURCE[0] <= ord(ch) <= ENFAKE_SOURCE[1]
        if not (in_source and 0 <= code <= 0x10FFFF and _is_bert_letter(chr(code))):
            raise ValueError(
                f"unicode shift {shift:#x} sends {ch!r} (U+{ord(ch):04X}) to code point "
                f"{code:#x}, which is not a letter the BERT normalizer keeps; with the default "
                f"shift {ENFAKE_SHIFT:#x} the valid characters are "
                f"U+{ENFAKE_SOURCE[0]:04X}–U+{ENFAKE_SOURCE[1]:04X} and whitespace"
            )
        targets[ord(ch)] = code
    return text.translate(targets)


def unshift_code_points(text: str, shift: int = ENFAKE_SHIFT) -> str:
    """Inverse of :func:`shift_code_points`; ValueError when ``text`` is not a shifted text."""
    sources = {}
    for ch in set(text):
        if _kept(ch):
            continue
        code = ord(ch) - shift
        if code < 0 or _kept(chr(code)):
            raise ValueError(
                f"{ch!r} (U+{ord(ch):04X}) is not a character shifted by {shift:#x}: "
                f"its source would be code point {code:#x}"
            )
        sources[ord(ch)] = code
    return text.translate(sources)


def unicode_fake(text: str, shift: int = ENFAKE_SHIFT) -> str:
    """Seed 002's Fake-English (``enfake``) of one sentence: its BERT words, each shifted.

    The text is first cut into the words BERT sees (punctuation split off, as
    ``BertPreTokenizer`` does) and joined by single spaces, then shifted. Why: a shifted
    punctuation mark is a letter, so ``"Lord's"`` shifted as a whole would be one word
    where English has three (``Lord ' s``); splitting first gives the fake language exactly
    the words of its base, one for one. Deviation: spacing around punctuation is normalised
    (a no-op on the lab's corpora, which NLTK has already tokenised into spaced words), so
    ``unshift_code_points(unicode_fake(s)) == " ".join(bert_words(s))``.
    """
    return shift_code_points(" ".join(bert_words(text)), shift)


def swap_pair_count(length: int, p: float) -> int:
    """Number of word-piece pairs swapped in a sentence of ``length`` word-pieces.

    Seed 002 swaps p·L/2 pairs; we round half up (``floor(p·L/2 + 1/2)``) and cap at
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

    Seed 002 §3.2.3: only the unigram frequency (and the sentence lengths, and the words'
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


#: Seed 003 §4 (extra anchors, after Conneau & Lample's code-switching): a dictionary word is
#: replaced by its translation this often, and at most this share of a sentence's words.
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
