"""Vocabularies of N languages: one id block per language, or one shared block.

Dufter & Schütze 2020 §5: "each language has its own vocabulary". Generalising today's English +
Fake-English layout (``vocab.to_fake``: the fake block is the English block shifted by its
size) to N languages:

- **separate** (the default): every edition, and every text-transformed language, gets its
  own WordPiece trained on its own train verses; ``fake`` (an id transform) gets a copy of its
  base's block. The blocks are concatenated in the listed order, each starting with the five
  specials, so language k's id is its own tokenizer's id + ``offset_k``; specials stay shared
  (ids 0–4) unless shift-special gives each language its own. With ``[3, fake]`` this is
  exactly today's bilingual vocabulary: English at 0, Fake-English at ``vocab.size``.
- **joint** (K et al. 2020 / Conneau et al. 2020, mBERT-style): one WordPiece over the train verses
of every
  language, every language at offset 0, so words the languages spell alike share ids. The
  ``fake`` transform still gets its own shifted block: sharing nothing is its point.
- **union** (Conneau et al. 2020's ``default-anchors``): every language trains its own
WordPiece
  as in ``separate``; the vocabulary is their union (the first language's tokens, then each
  further language's tokens not yet in it, in order), every language at offset 0 as in
  ``joint``, so identical strings share one id and nothing else is shared. Each language's
  text is still cut by its own WordPiece: its tokenizer (:func:`tokenizer_tokens`) holds the
  union's ids, a token the language did not learn replaced by a placeholder no text can
  produce (:data:`UNREACHABLE`), so it yields exactly its own pieces, at their union ids.

Size: every language block must at least hold the specials and every character of its corpus
(a WordPiece without a character cannot spell words with it): :func:`minimum_size`. On the
New Testament that is 2,421 for Chinese, 1,750 for Japanese, 1,554 for Korean, against 114 for
English and 96 for Arabic: today's 2,048 cannot hold Chinese at all, and leaves Japanese and
Korean few merges. Sizing the blocks (one size for all, or ``max(size, c · minimum_size)``) is
the wiring's decision; docs/CORPORA.md has each edition's characters and types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

# the modes' one home is the config, which validates vocab.mode against them
from multilab.config import VOCAB_JOINT as JOINT
from multilab.config import VOCAB_MODES as MODES
from multilab.config import VOCAB_SEPARATE as SEPARATE
from multilab.config import VOCAB_UNION as UNION
from multilab.data.tokenizers import SPECIAL_TOKENS
from multilab.data.vocab import FAKE_PREFIX, train_tokens
from multilab.lab.languages import Language

#: A union-vocabulary token a language's own WordPiece did not learn, in that language's
#: tokenizer: it holds a space, and BERT's pre-tokenizer splits words on whitespace (and
#: ``[`` / ``]`` off as punctuation), so no piece of any text is ever looked up as it.
UNREACHABLE = "[not learned {}]"


def minimum_size(words: Sequence[str]) -> int:
    """The smallest WordPiece vocabulary that spells every word of a corpus: the specials,
    every word-initial character and every word-internal one (as ``##c``)."""
    initial = {w[0] for w in words if w}
    inside = {ch for w in words for ch in w[1:]}
    return len(SPECIAL_TOKENS) + len(initial) + len(inside)


@dataclass(frozen=True)
class Block:
    """Where one language's ids live in the concatenated vocabulary.

    ``tokens`` are the block's own tokens (specials at 0–4); language ``i`` of the study has
    ids ``offset`` … ``offset + len(tokens) - 1``. ``tokenizer_of`` names the language whose
    trained WordPiece tokenizes this language's text (itself for an edition, the base for
    ``fake``, the first language for every language of a joint vocabulary). ``learned``: in a
    union vocabulary, the tokens the language's own WordPiece learned (the only ones its
    tokenizer may produce); empty otherwise (every token of the block is its).
    """

    language: Language
    offset: int
    tokens: tuple[str, ...]
    tokenizer_of: Language
    learned: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return len(self.tokens)


def to_block(ids: torch.Tensor, offset: int, shift_special: bool = False) -> torch.Tensor:
    """A language's tokenizer ids → its ids in the concatenated vocabulary (``vocab.to_fake``
    for any block: the specials stay shared unless ``shift_special``)."""
    if offset == 0:
        return ids.clone()
    shifted = ids + offset
    if shift_special:
        return shifted
    return torch.where(ids < len(SPECIAL_TOKENS), ids, shifted)


def build_blocks(
    languages: Sequence[Language],
    train_texts: Mapping[Language, Sequence[str]],
    size: int,
    mode: str = SEPARATE,
    sizes: Mapping[Language, int] | None = None,
    unit: str = "wordpiece",
) -> tuple[Block, ...]:
    """Train the WordPiece vocabularies of a study and lay out their id blocks.

    ``train_texts`` holds each language's train verses as it writes them (a text transform
    already applied); an id-transformed language (``fake``) needs none. Each trained block has
    ``size`` tokens (``vocab.train_wordpiece``: deterministic, a UserError when the corpus is
    too small), a ``fake`` block the size of its base. ``sizes`` gives a language its own
    size instead (``layout.block_size``); such a block may come out smaller, when WordPiece has
    no merge left before it (Chinese: every ideograph is a word). ``unit`` (``vocab.unit``)
    picks word or character vocabularies instead (``vocab.train_tokens``). ``union``: trained
    as ``separate``, every language's block the union (:func:`union_tokens`) at offset 0.
    """
    if mode not in MODES:
        raise ValueError(f"unknown vocabulary mode {mode!r}; valid: {', '.join(MODES)}")
    trained: dict[Language, tuple[str, ...]] = {}

    def tokens_of(texts: list[str], own: int | None = None) -> tuple[str, ...]:
        return tuple(train_tokens(texts, own or size, unit, exact=own is None))

    own = [lang for lang in languages if not lang.id_copy]
    if mode == JOINT:
        joint = tokens_of([t for lang in own for t in train_texts[lang]])
        trained = dict.fromkeys(own, joint)
    else:
        trained = {lang: tokens_of(list(train_texts[lang]), (sizes or {}).get(lang))
                   for lang in own}

    if mode == UNION:
        union = union_tokens([trained[lang] for lang in own])
        blocks = [Block(lang, 0, union, lang, trained[lang]) for lang in own]
        offset = len(union)
        for lang in languages:
            if lang.id_copy:  # its own shifted block of the union, cut by its base's tokenizer
                blocks.append(Block(lang, offset, _copy(lang, union), Language(lang.edition)))
                offset += len(union)
        order = {lang: i for i, lang in enumerate(languages)}
        return tuple(sorted(blocks, key=lambda block: order[block.language]))

    blocks = []
    offset = 0
    for lang in languages:
        if lang.id_copy:
            owner = own[0] if mode == JOINT else Language(lang.edition)
            tokens = _copy(lang, trained[owner])
            blocks.append(Block(lang, offset, tokens, owner))
            offset += len(tokens)
        elif mode == JOINT:
            blocks.append(Block(lang, 0, trained[lang], own[0]))
            offset = max(offset, len(trained[lang]))
        else:
            blocks.append(Block(lang, offset, trained[lang], lang))
            offset += len(trained[lang])
    return tuple(blocks)


def _copy(lang: Language, tokens: Sequence[str]) -> tuple[str, ...]:
    """An id-transformed language's block: ``tokens`` prefixed (``::the``, ``fake_s::``…)."""
    prefix = FAKE_PREFIX if lang.transform == "fake" else f"{lang.transform}{FAKE_PREFIX}"
    return tuple(prefix + t for t in tokens)


def union_tokens(vocabularies: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """The union of the languages' vocabularies, each string once: the first vocabulary in its
    order (specials at 0–4), then each further one's strings not yet in it, in its order."""
    return tuple(dict.fromkeys(t for tokens in vocabularies for t in tokens))


def tokenizer_tokens(block: Block) -> list[str]:
    """The vocabulary of a block's own tokenizer: the block's tokens, in a union block those
    its language did not learn replaced by :data:`UNREACHABLE` placeholders (WordPiece looks
    up only substrings of whitespace-free words, so it never produces one): its text is cut
    exactly as its own WordPiece cuts it, into the union's ids."""
    if not block.learned:
        return list(block.tokens)
    learned = set(block.learned)
    if any(token.split() != [token] for token in block.tokens):
        raise ValueError(f"a token of {block.language.name}'s vocabulary holds whitespace")
    return [t if t in learned else UNREACHABLE.format(i) for i, t in enumerate(block.tokens)]


def vocabulary(blocks: Sequence[Block]) -> list[str]:
    """Every token of the concatenated vocabulary in id order (a shared block counted once)."""
    tokens: list[str] = []
    for block in blocks:
        if block.offset == len(tokens):
            tokens.extend(block.tokens)
        elif tuple(tokens[block.offset : block.offset + block.size]) != block.tokens:
            raise ValueError(f"block of {block.language.name} overlaps another block")
    return tokens

