"""WordPiece vocabulary (2048, cased) and the bilingual English + Fake-English vocabulary (4096).

Fake-English (Dufter & Schütze 2020 Fig. 2) shifts every token id by the vocabulary size; the
shifted token is the original prefixed with ``::``. Both vocabularies are saved as Hugging Face
tokenizer folders, so ``AutoTokenizer.from_pretrained`` loads them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tokenizers import Tokenizer, models, processors, trainers

from multilab.data.tokenizers import (
    CONTINUATION_PREFIX,
    SPECIAL_TOKENS,
    bert_pipeline,
    build_char_tokenizer,
    build_word_tokenizer,
    paper_word_vocab_size,
)
from multilab.errors import UserError
from multilab.files import replace_dir
from multilab.lab.enfake import bert_word_counts

if TYPE_CHECKING:  # transformers is imported where a tokenizer is made or loaded: a command
    # that only reads vocabulary files (`multilab report`) does not pay its seconds
    from transformers import PreTrainedTokenizerBase

FAKE_PREFIX = "::"
ENGLISH_DIR = "english"
BILINGUAL_DIR = "bilingual"


def continuation_pieces(sentences: list[str]) -> list[str]:
    """``##c`` for every character that occurs inside a word, sorted.

    Why: tokenizers' WordPiece trainer (0.23) creates these tokens while iterating a hash
    map of word counts, so their ids, and with them the tie-breaking between merges of equal
    count, change from process to process (huggingface/tokenizers#1794): two fresh processes
    learned different vocabularies from one corpus. Registering exactly these tokens up front,
    in sorted order, fixes their ids and makes the vocabulary byte-identical across processes.
    """
    inside = {ch for word in bert_word_counts(sentences) for ch in word[1:]}
    return [CONTINUATION_PREFIX + ch for ch in sorted(inside)]


def train_wordpiece(sentences: list[str], size: int, exact: bool = True) -> Tokenizer:
    """WordPiece trained on the corpus, with the BERT specials at ids 0-4; deterministic.

    ``exact``: exactly ``size`` tokens, else a UserError; otherwise fewer are accepted (the
    corpus has no merge left: a per-language block of Chinese)."""
    tokenizer = bert_pipeline(Tokenizer(models.WordPiece(unk_token="[UNK]")))
    pinned = continuation_pieces(sentences)
    trainer = trainers.WordPieceTrainer(
        vocab_size=size, special_tokens=[*SPECIAL_TOKENS, *pinned], show_progress=False
    )
    tokenizer.train_from_iterator(sentences, trainer=trainer)
    learned = tokenizer.get_vocab_size()
    if learned > size or (exact and learned != size):
        raise UserError(
            f"WordPiece learned {tokenizer.get_vocab_size()} tokens, not vocab.size={size}: "
            "the corpus is too small for this size"
        )
    return tokenizer


def train_tokens(sentences: list[str], size: int, unit: str = "wordpiece",
                 exact: bool = True) -> list[str]:
    """A vocabulary of the corpus in id order, specials at 0–4, for ``vocab.unit``.

    - ``wordpiece``: :func:`train_wordpiece` of ``size`` tokens;
    - ``word`` (K et al. 2020 Table 10): the most frequent words, as many as the paper's 100k word
      vocabulary stands to its 60k word-pieces (5/3 × ``size``), at most every word of the
      corpus (Basic English's New Testament has fewer: then every train word is in and only
      unseen words are ``[UNK]``; Spanish's has more);
    - ``char``: every character of the corpus, word-initial and ``##``-internal (``size`` is
      not used: the corpus fixes it).

    Every one is saved as a WordPiece vocabulary (:func:`_save_bert_tokenizer`): a word list
    without ``##`` pieces is a word-level tokenizer there (an unknown word is one ``[UNK]``).
    """
    if unit == "wordpiece":
        tokenizer = train_wordpiece(sentences, size, exact)
    elif unit == "word":
        words = len(bert_word_counts(sentences)) + len(SPECIAL_TOKENS)
        tokenizer = build_word_tokenizer(sentences, min(paper_word_vocab_size(size), words))
    elif unit == "char":
        tokenizer = build_char_tokenizer(sentences)
    else:
        raise UserError(f"vocab.unit = {unit!r}; valid: wordpiece, word, char")
    return [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]


def _save_bert_tokenizer(tokens: list[str], out_dir: Path) -> None:
    """A fast tokenizer over exactly ``tokens`` (ids = positions), saved for AutoTokenizer."""
    vocab = {token: i for i, token in enumerate(tokens)}
    save_tokenizer(bert_pipeline(Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))), out_dir)


def save_tokenizer(tokenizer: Tokenizer, out_dir: Path) -> None:
    """Save as a Hugging Face tokenizer folder (``AutoTokenizer.from_pretrained`` loads it)
    with ``[CLS] A [SEP] (B [SEP])`` templates, plus ``vocab.txt`` (one token a line, id =
    line number). The specials must sit at ids 0–4, as every vocabulary of the lab has them."""
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.__getitem__)
    if tuple(tokens[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
        raise ValueError(f"special tokens not at ids 0-4: {tokens[: len(SPECIAL_TOKENS)]}")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    # written beside the folder and swapped in whole: a stop mid-save never leaves a
    # tokenizer.json of one vocabulary beside the vocab.txt of another, or cut short
    from transformers import PreTrainedTokenizerFast  # before the staging folder: a failed
    # import (a broken environment) must not leave one behind

    staging = out_dir.with_name(f".{out_dir.name}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        PreTrainedTokenizerFast(
            tokenizer_object=tokenizer,
            pad_token="[PAD]",
            unk_token="[UNK]",
            cls_token="[CLS]",
            sep_token="[SEP]",
            mask_token="[MASK]",
        ).save_pretrained(str(staging))
        (staging / "vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
        replace_dir(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def build_vocab(sentences: list[str], size: int, out_dir: Path, unit: str = "wordpiece"
                ) -> dict[str, int]:
    """Train the English vocabulary (:func:`train_tokens`) and write both tokenizer folders
    under ``out_dir``."""
    english = train_tokens(sentences, size, unit)
    if tuple(english[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
        raise UserError(f"special tokens not at ids 0-4: {english[:5]}")
    _save_bert_tokenizer(english, out_dir / ENGLISH_DIR)
    _save_bert_tokenizer(english + fake_tokens(english), out_dir / BILINGUAL_DIR)
    return {"english_size": len(english), "bilingual_size": 2 * len(english)}


def fake_tokens(english: list[str]) -> list[str]:
    """The Fake-English twin of every English token (specials included: ``::[CLS]``)."""
    return [FAKE_PREFIX + t for t in english]


def load_tokenizer(vocab_dir: Path, which: str = ENGLISH_DIR) -> PreTrainedTokenizerBase:
    path = vocab_dir / which
    if not (path / "tokenizer.json").exists():
        raise UserError(f"tokenizer not found in {path}; run `dvc repro vocab` first")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path))
    except Exception as err:  # JSON, the tokenizers library's parser or the OS: damaged
        raise UserError(f"the tokenizer in {path} is damaged ({type(err).__name__}: "
                        f"{' '.join(str(err).split())[:160]}); rebuild it with `dvc repro "
                        "vocab` (or `multilab vocab`)") from err


def saved_words(vocab_dir: Path, which: str = ENGLISH_DIR) -> list[str]:
    """Every token of a saved tokenizer in id order, as :func:`load_tokenizer` +
    :func:`vocabulary_words` give them, read with the tokenizers library alone: a command that
    needs only the words (the report's PCA figure) imports no transformers (≈ 4.5 CPU s)."""
    path = vocab_dir / which / "tokenizer.json"
    if not path.exists():
        raise UserError(f"tokenizer not found in {path.parent}; run `dvc repro vocab` first")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:  # JSON or the tokenizers library's parser: damaged
        raise UserError(f"the tokenizer in {path.parent} is damaged ({type(err).__name__}: "
                        f"{' '.join(str(err).split())[:160]}); rebuild it with `dvc repro "
                        "vocab` (or `multilab vocab`)") from err
    return [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]


def vocabulary_words(tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """Every token of ``tokenizer`` in id order (what the spaces and the knn table index)."""
    return tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))


def to_fake(ids: torch.Tensor, vocab_size: int, shift_special: bool = False) -> torch.Tensor:
    """English ids → Fake-English ids: +vocab_size, specials only under shift-special."""
    shifted = ids + vocab_size
    if shift_special:
        return shifted
    return torch.where(ids < len(SPECIAL_TOKENS), ids, shifted)
