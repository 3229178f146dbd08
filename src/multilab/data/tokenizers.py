"""The lab's tokenization units: the BERT pipeline and special tokens every vocabulary shares,
and the character- and word-level tokenizers (K et al. 2020 §3.4.3, Table 10) beside the WordPiece
one of :mod:`multilab.data.vocab`, which builds on this module.

All use the lab's BERT normalizer and pre-tokenizer (cased, accents kept), so the three
tokenizations cut a sentence into the same words and differ only in the unit below the word:

- ``word``: the most frequent words of the corpus, every other word ``[UNK]``
  (a ``WordLevel`` model);
- ``char``: every character of the corpus, as a WordPiece vocabulary made only of single
  characters: a word-initial ``J`` and word-internal ``##e``, so "Jesus" is
  ``J ##e ##s ##u ##s``. Why not a pre-tokenizer that isolates every character: that loses
  the word boundaries the other two tokenizations keep. Cost: as in BERT's WordPiece, a word
  with a character outside the vocabulary becomes one ``[UNK]``.

Vocabularies are built in Python from counts sorted by (count descending, token), never by
a trainer iterating a hash map, so two processes write byte-identical files.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

from multilab.lab.enfake import bert_word_counts

#: [PAD], [UNK], [CLS], [SEP], [MASK]: ids 0–4 of every vocabulary of the lab
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
CONTINUATION_PREFIX = "##"  # WordPiece's mark of a piece inside a word
#: K et al. 2020 §3.4.3: "the most frequent 100000 words", beside a 60,000 word-piece vocabulary
#: (§3.1.2): the word vocabulary is 5/3 the size of the word-piece one.
PAPER_WORD_VOCAB = 100_000
PAPER_WORDPIECE_VOCAB = 60_000


def bert_pipeline(tokenizer: Tokenizer) -> Tokenizer:
    """Cased BERT normalisation and pre-tokenisation (no lowercasing, no accent stripping)."""
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    return tokenizer


def _ranked(counts: Counter[str]) -> list[str]:
    """Tokens by count descending, ties in code-point order: independent of hash seeds."""
    return sorted(counts, key=lambda token: (-counts[token], token))


def _with_specials(tokens: list[str]) -> dict[str, int]:
    clash = sorted(set(tokens) & set(SPECIAL_TOKENS))
    if clash:
        raise ValueError(f"corpus tokens {clash} collide with the special tokens")
    return {token: i for i, token in enumerate([*SPECIAL_TOKENS, *tokens])}


def build_word_tokenizer(sentences: Iterable[str], size: int) -> Tokenizer:
    """Word-level tokenizer: the specials at ids 0–4, then the ``size - 5`` most frequent
    words; any other word is ``[UNK]``."""
    counts = bert_word_counts(sentences)
    largest = len(SPECIAL_TOKENS) + len(counts)
    if not len(SPECIAL_TOKENS) < size <= largest:
        raise ValueError(
            f"word vocabulary size {size} is not possible on a corpus of {len(counts)} "
            f"distinct words; valid sizes: {len(SPECIAL_TOKENS) + 1}–{largest}"
        )
    vocab = _with_specials(_ranked(counts)[: size - len(SPECIAL_TOKENS)])
    return bert_pipeline(Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")))


def build_char_tokenizer(sentences: Iterable[str]) -> Tokenizer:
    """Character-level tokenizer: every word-initial character and, as ``##c``, every
    word-internal one of the corpus (each group by count), after the specials."""
    counts = bert_word_counts(sentences)
    initial: Counter[str] = Counter()
    inside: Counter[str] = Counter()
    for word, n in counts.items():
        initial[word[0]] += n
        for ch in word[1:]:
            inside[CONTINUATION_PREFIX + ch] += n
    if not initial:
        raise ValueError("a character vocabulary needs a corpus with at least one word")
    vocab = _with_specials(_ranked(initial) + _ranked(inside))
    model = models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##")
    tokenizer = bert_pipeline(Tokenizer(model))
    tokenizer.decoder = decoders.WordPiece()
    return tokenizer


def paper_word_vocab_size(wordpiece_size: int) -> int:
    """The word vocabulary that stands to ``wordpiece_size`` as the paper's 100k to its 60k.

    Why this scaling: the paper gives both sizes, and nothing else about its Wikipedia word
    distribution (its 100k words' token coverage is unknown), so the ratio is the one number
    we can carry over. On the lab's 2,048-piece vocabulary: 3,413 words. Measure the
    resulting coverage with :func:`token_coverage` and report it.
    """
    if wordpiece_size < 1:
        raise ValueError(f"wordpiece_size={wordpiece_size} must be >= 1")
    return round(wordpiece_size * PAPER_WORD_VOCAB / PAPER_WORDPIECE_VOCAB)


def token_coverage(counts: Counter[str], words: int) -> float:
    """Share of running words that the ``words`` most frequent ones cover (1 − [UNK] rate)."""
    total = sum(counts.values())
    if total == 0:
        return 0.0
    return sum(counts[w] for w in _ranked(counts)[:words]) / total


def words_for_coverage(counts: Counter[str], coverage: float) -> int:
    """The fewest most-frequent words that cover at least ``coverage`` of running words
    (the alternative scaling, when a coverage target is known)."""
    if not 0.0 < coverage <= 1.0:
        raise ValueError(f"coverage={coverage} is outside the valid range (0, 1]")
    total, covered = sum(counts.values()), 0
    for rank, word in enumerate(_ranked(counts), start=1):
        covered += counts[word]
        if covered >= coverage * total:
            return rank
    return len(counts)
