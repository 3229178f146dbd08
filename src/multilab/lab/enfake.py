"""K et al. 2020's unicode Fake-English (``enfake``, §3.2.1 and footnote 4): the text transform of
the languages registry (:mod:`multilab.lab.languages`).

Every character is moved to a script no other corpus uses, so the new language shares no
character, hence no word-piece, with any other, yet keeps every structural property of its
base. It is defined on the words the lab's BERT sees (:func:`bert_words`), which the data
pipeline reads through this module too. Pure functions of text, without torch: the registry,
and with it the config, imports them.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable
from functools import cache, lru_cache
from typing import Any

#: The enfake shift: printable ASCII (and everything up to U+17F7) lands in the Tangut block
#: (U+17000–U+187F7), a historic script that no corpus of the lab uses and that the BERT
#: normalizer keeps as letters. A Private Use Area would be the obvious choice but
#: ``BertNormalizer`` deletes Private Use (Co) and unassigned (Cn) characters as "control".
ENFAKE_SHIFT = 0x17000
#: The source code points :data:`ENFAKE_SHIFT` sends into Tangut (U+0021–U+17F7: Latin,
#: Greek, Cyrillic, Armenian, Hebrew, Arabic, the Indic scripts, Thai, Georgian, ...). Outside
#: it: Vietnamese's Latin Extended Additional, General Punctuation, CJK, Hangul syllables.
ENFAKE_SOURCE = (0x21, 0x17F7)



@cache
def _bert_pipeline() -> tuple[Any, Any]:
    """The normalizer and pre-tokenizer of the lab's BERT pipeline (``data/tokenizers.py``),
    made on first use: the config imports this module, and the ``tokenizers`` library would
    cost ``multilab --help`` a tenth of a second."""
    from tokenizers import normalizers, pre_tokenizers

    return (normalizers.BertNormalizer(lowercase=False, strip_accents=False),
            pre_tokenizers.BertPreTokenizer())


def bert_words(text: str) -> list[str]:
    """The words the lab's BERT pipeline sees (normalizer + pre-tokenizer of tokenizers.py).

    The normalizer works character by character and turns whitespace into spaces, at which
    the pre-tokenizer splits anyway: the normalized text's space-separated chunks are split
    one by one, each once (:func:`_chunk_words`), which halves the cost of an edition read
    again (the corpus, its statistics, the vocabulary, the probes read the same verses)."""
    normalizer, _ = _bert_pipeline()
    words: list[str] = []
    for chunk in normalizer.normalize_str(text).split(" "):
        if chunk:
            words.extend(_chunk_words(chunk))
    return words


def bert_word_counts(texts: Iterable[str]) -> Counter[str]:
    """How often each word of :func:`bert_words` occurs in ``texts``: as there, the normalized
    text's space-separated chunks are cut, each distinct one once, here without filling the
    cache (a vocabulary is built once per process; the chunks of the corpus are many)."""
    normalizer, pre_tokenizer = _bert_pipeline()
    chunks: Counter[str] = Counter()
    for text in texts:
        chunks.update(normalizer.normalize_str(text).split(" "))
    counts: Counter[str] = Counter()
    for chunk, count in chunks.items():
        for word, _ in pre_tokenizer.pre_tokenize_str(chunk):
            counts[word] += count
    return counts


@lru_cache(maxsize=1 << 18)  # ≈ 40 MB: the distinct chunks of a few editions
def _chunk_words(chunk: str) -> tuple[str, ...]:
    """The pre-tokenizer's words of one space-free chunk of normalized text."""
    _, pre_tokenizer = _bert_pipeline()
    return tuple(word for word, _ in pre_tokenizer.pre_tokenize_str(chunk))


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
    normalizer, pre_tokenizer = _bert_pipeline()
    if not ch.isprintable() or ch.isspace() or normalizer.normalize_str(ch) != ch:
        return False
    return len(pre_tokenizer.pre_tokenize_str(ch + ch)) == 1


def shift_code_points(text: str, shift: int = ENFAKE_SHIFT) -> str:
    """Add ``shift`` to the code point of every character except whitespace and controls.

    K et al. 2020 shifts "each character" (digits and punctuation included, so that there is
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
    """K et al. 2020's Fake-English (``enfake``) of one sentence: its BERT words, each shifted.

    The text is first cut into the words BERT sees (punctuation split off, as
    ``BertPreTokenizer`` does) and joined by single spaces, then shifted. Why: a shifted
    punctuation mark is a letter, so ``"Lord's"`` shifted as a whole would be one word
    where English has three (``Lord ' s``); splitting first gives the fake language exactly
    the words of its base, one for one. Deviation: spacing around punctuation is normalised
    (a no-op on the lab's corpora, which NLTK has already tokenised into spaced words), so
    ``unshift_code_points(unicode_fake(s)) == " ".join(bert_words(s))``.
    """
    return shift_code_points(" ".join(bert_words(text)), shift)
