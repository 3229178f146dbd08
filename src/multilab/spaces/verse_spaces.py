"""knn-replace spaces for N real languages (Dufter & Schütze 2020 §5, Table 3 row 30; App. A.3).

The sentence setup (English + Fake-English) has its own stage in :mod:`fasttext_spaces`,
unchanged. For a verse study (``languages: [3, s, i]``) the paper "trains static word
embeddings for each language using fastText, then maps the embedding spaces from each language
into the English embedding space with unsupervised VecMap", and replaces a masked token by
"one of the five nearest neighbours from another language ... in case more than one other
language is available we pick one randomly". Here:

1. fastText skipgram on each language's train verses, as its wordpieces (the model's tokens:
   a neighbour must be a token id), with the settings, the seeded random start and the one
   thread of the sentence setup (reasons in :mod:`fasttext_spaces`); the verse order of every
   language after the first is shuffled (an id copy such as ``fake`` would otherwise learn
   the first language's vectors exactly);
2. our unsupervised VecMap maps each language *i* ≥ 1 with the first language (N − 1 maps,
   each seeing no dictionary), as the paper maps every language to English;
3. neighbours by CSLS in each pair's shared space: first ↔ *i* directly; between two other
   languages *i* → *j* through the first one (the k neighbours in *j* of the first-language
   word nearest to the *i* word), so the cost stays N − 1 maps instead of N(N − 1)/2;
4. ``knn.pt`` is [V_total, (N − 1)·k]: the row of a token of language *a* holds k neighbour ids
   in each other language, in listed order, so one uniform draw of a column picks a language
   and a neighbour uniformly (what the masking does). A token without a trained vector
   (specials, words absent from the verses) points to itself: replacing it changes nothing.

Every output appears at once (a staging folder swapped into place). The mapping's quality is
measured against a *silver* wordpiece dictionary induced from the verse alignment (IBM Model 1,
:mod:`multilab.data.dictionary`): real languages have no gold dictionary here. Half of its
entries (seeded) score the mapping and are never seen by it; with
``spaces.seed_dictionary: silver`` the other half starts VecMap instead of its unsupervised
initialisation (a cross-lingual signal from parallel data that the paper's fully unsupervised
recipe does not use: on the Bible, that recipe finds no mapping between real languages,
docs/notes/reproduction-log.md).
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from multilab.config import Config, SpacesConfig
from multilab.data.batches import mix_seed
from multilab.data.dictionary import induce_dictionary
from multilab.data.layout import metric_name
from multilab.data.tokenizers import SPECIAL_TOKENS
from multilab.errors import UserError
from multilab.files import replace_dir, write_json
from multilab.spaces import vecmap
from multilab.spaces.fasttext_spaces import (
    KNN_TABLE,
    METRICS,
    _corpus_words,
    _train_fasttext,
    _vectors,
    _write_corpus,
    check_space_vocab,
    read_knn_table,
    read_vec_words,
    write_initial_vectors,
)

#: Every vocabulary token in its language's pair space (zeros where none): the words the knn
#: table indexes, checked against the tokenizer before training.
SHARED_VEC = "languages.mapped.vec"
#: Segments a silver dictionary entry's words must each occur in.
SILVER_MIN_COUNT = 5


@dataclass(frozen=True)
class LanguageText:
    """One language of the study: its key, its block of the vocabulary, its train verses as
    block-local token ids (verse i is row i in every language)."""

    key: str
    offset: int
    words: list[str]  # the block's tokens as the whole vocabulary spells them
    verses: list[list[int]]

    def sentences(self) -> list[list[str]]:
        """Verses as tokens, the shared specials ([UNK]) left out: they are no word."""
        special = len(SPECIAL_TOKENS)
        return [[self.words[i] for i in verse if i >= special] for verse in self.verses]


@dataclass
class _Space:
    vectors: Tensor  # [block size, dim], raw fastText
    rows: list[int]  # block-local ids fastText trained, most frequent first


def load_verse_knn_table(spaces_dir: Path, vocab_words: Sequence[str]) -> Tensor:
    """knn.pt of a verse study, after checking it was built for this vocabulary."""
    shared = spaces_dir / SHARED_VEC
    if not shared.exists():
        raise UserError(
            f"{shared} not found: the spaces stage built no knn table for these languages; "
            "run `dvc repro spaces` (vocab.mode 'separate')"
        )
    check_space_vocab(read_vec_words(shared), vocab_words, str(shared))
    table = read_knn_table(spaces_dir / KNN_TABLE)
    if table.ndim != 2 or table.shape[0] != len(vocab_words):
        raise UserError(
            f"{spaces_dir / KNN_TABLE} has shape {list(table.shape)}, expected "
            f"[{len(vocab_words)}, (languages - 1) x k]; rebuild it with `dvc repro spaces`"
        )
    return table


def build_verse_spaces(languages: Sequence[LanguageText], vocab_words: list[str],
                       out_dir: Path, cfg: SpacesConfig, aligned: bool = True
                       ) -> dict[str, Any]:
    """Train, map and write every output atomically into ``out_dir``; return the metrics.
    ``cfg.knn_k`` must be resolved (:attr:`multilab.config.Config.knn_neighbours`).
    ``aligned=False`` (user corpora: train rows are unrelated lines) skips the silver
    dictionary, which IBM-1 can only induce from aligned rows: no silver precision then."""
    if cfg.knn_k is None:
        raise ValueError("spaces.knn_k must be resolved before building (Config.knn_neighbours)")
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    staging.chmod(0o755)
    try:
        metrics = _build_in(staging, languages, vocab_words, cfg, cfg.knn_k, aligned)
        replace_dir(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return metrics


def train_language_spaces(languages: Sequence[LanguageText], workdir: Path,
                          cfg: SpacesConfig) -> list[_Space]:
    """fastText on each language's verses (later languages' verse order shuffled)."""
    generator = torch.Generator().manual_seed(cfg.fake_shuffle_seed)
    spaces = []
    for index, language in enumerate(languages):
        sentences = language.sentences()
        if index:
            random.Random(mix_seed(cfg.fake_shuffle_seed, index)).shuffle(sentences)
        corpus, initial = workdir / f"corpus.{index}.txt", workdir / f"init.{index}.vec"
        try:
            _write_corpus(corpus, sentences)
            write_initial_vectors(initial, _corpus_words(sentences, language.words), cfg.dim,
                                  generator)
            vectors, rows = _vectors(_train_fasttext(corpus, initial, cfg), language.words)
        finally:
            corpus.unlink(missing_ok=True)
            initial.unlink(missing_ok=True)
        if len(rows) < 2:
            raise UserError(f"spaces: language {language.key} has fewer than 2 words to map")
        spaces.append(_Space(vectors, rows))
    return spaces


@dataclass(frozen=True)
class SilverDictionary:
    """A language's silver dictionary with the first (IBM-1 over the aligned verses), as
    positions into both sides' trained rows, split in two seeded halves: ``seed`` may start
    VecMap (``spaces.seed_dictionary: silver``), ``held_out`` always scores the mapping."""

    seed: tuple[Tensor, Tensor]  # (first-language positions, other-language positions)
    held_out: tuple[Tensor, Tensor]


def silver_dictionary(first: LanguageText, other: LanguageText, first_rows: list[int],
                      other_rows: list[int], split_seed: int) -> SilverDictionary:
    """Mutual best IBM-1 matches between two languages' verse-aligned wordpieces, both words
    trained by fastText, halved by ``split_seed``."""
    entries = induce_dictionary(other.sentences(), first.sentences(), min_count=SILVER_MIN_COUNT)
    first_at = {first.words[row]: pos for pos, row in enumerate(first_rows)}
    other_at = {other.words[row]: pos for pos, row in enumerate(other_rows)}
    pairs = [(first_at[e.target], other_at[e.source]) for e in entries
             if e.target in first_at and e.source in other_at]
    random.Random(split_seed).shuffle(pairs)
    half = len(pairs) // 2

    def as_tensors(part: list[tuple[int, int]]) -> tuple[Tensor, Tensor]:
        return (torch.tensor([a for a, _ in part], dtype=torch.long),
                torch.tensor([b for _, b in part], dtype=torch.long))

    return SilverDictionary(as_tensors(pairs[:half]), as_tensors(pairs[half:]))


def silver_precision(pairs: tuple[Tensor, Tensor], to_first: Tensor) -> float:
    """P@1 of the top neighbour (other → first) on (first position, other position) pairs."""
    first_positions, other_positions = pairs
    if not len(other_positions):
        return 0.0
    return float((to_first[other_positions, 0] == first_positions).float().mean())


def knn_columns(languages: Sequence[LanguageText], spaces: Sequence[_Space],
                pairs: dict[int, tuple[Tensor, Tensor]], k: int, total: int) -> Tensor:
    """The [total, (N − 1)·k] table (see the module docstring) from the pair neighbours:
    ``pairs[i] = (first → i, i → first)``, rows indexing each side's trained words."""
    count = len(languages)
    table = torch.arange(total)[:, None].repeat(1, (count - 1) * k)

    def ids(language: int, positions: Tensor) -> Tensor:
        rows = torch.tensor(spaces[language].rows)
        return languages[language].offset + rows[positions]

    for source in range(count):
        own = languages[source].offset + torch.tensor(spaces[source].rows)
        others = [b for b in range(count) if b != source]
        for group, target in enumerate(others):
            if source == 0:
                found = pairs[target][0]
            elif target == 0:
                found = pairs[source][1]
            else:  # through the first language: its word nearest to the source word
                found = pairs[target][0][pairs[source][1][:, 0]]
            found = found[:, torch.arange(k) % found.shape[1]]  # fewer words than k: repeat
            table[own, group * k:(group + 1) * k] = ids(target, found)
    return table


def _build_in(staging: Path, languages: Sequence[LanguageText], vocab_words: list[str],
              cfg: SpacesConfig, k: int, aligned: bool = True) -> dict[str, Any]:
    started = time.perf_counter()
    spaces = train_language_spaces(languages, staging, cfg)
    seconds_fasttext = time.perf_counter() - started
    first, first_space = languages[0], spaces[0]
    shared = torch.zeros(len(vocab_words), cfg.dim)
    metrics: dict[str, Any] = {"knn_k": k, "vocab_size": len(vocab_words),
                               "seconds_fasttext": seconds_fasttext, "languages": {}}
    pairs: dict[int, tuple[Tensor, Tensor]] = {}
    for index in range(1, len(languages)):
        language, space = languages[index], spaces[index]
        empty = (torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long))
        silver = (silver_dictionary(first, language, first_space.rows, space.rows,
                                    mix_seed(cfg.vecmap_seed, index)) if aligned
                  else SilverDictionary(empty, empty))
        result = vecmap.map_unsupervised(
            first_space.vectors[first_space.rows], space.vectors[space.rows],
            seed=cfg.vecmap_seed, max_iterations=cfg.vecmap_max_iterations, device="cpu",
            threads=cfg.threads,
            seed_dictionary=silver.seed if cfg.seed_dictionary == "silver" else None)
        first_unit, other_unit = vecmap.unit_length(result.src_mapped), vecmap.unit_length(
            result.trg_mapped)
        pairs[index] = (vecmap.csls_topk(first_unit, other_unit, k),
                        vecmap.csls_topk(other_unit, first_unit, k))
        shared[language.offset + torch.tensor(space.rows)] = result.trg_mapped
        if index == 1:  # the first language as mapped with the second (one row per word)
            shared[first.offset + torch.tensor(first_space.rows)] = result.src_mapped
        metrics["languages"][language.key] = {
            "iterations": result.iterations, "objective": result.objective,
            "seconds_vecmap": result.seconds, "words_mapped": len(space.rows),
        } | ({
            "silver_precision_at_1_csls": silver_precision(silver.held_out, pairs[index][1]),
            "silver_entries_held_out": len(silver.held_out[0]),
            "silver_entries_seeding": len(silver.seed[0]) if cfg.seed_dictionary == "silver"
            else 0,
        } if aligned else {})
    metrics["words_mapped"] = len(first_space.rows)
    table = knn_columns(languages, spaces, pairs, k, len(vocab_words))
    for language, space in zip(languages, spaces, strict=True):
        vecmap.write_vec(staging / f"{metric_name(language.key)}.vec", language.words,
                         space.vectors)
    vecmap.write_vec(staging / SHARED_VEC, vocab_words, shared)
    torch.save(table, staging / KNN_TABLE)
    write_json(staging / METRICS, metrics)
    load_verse_knn_table(staging, vocab_words)  # what training reads, read back now
    return metrics


def study_languages(cfg: Config) -> tuple[list[LanguageText], list[str]]:
    """The study's languages with their train verses (the whole train split, cut to
    ``train.max_length`` as the model sees them) and the vocabulary the table indexes."""
    from multilab.data.layout import layout, tokenized_verses
    from multilab.data.vocab import load_tokenizer, vocabulary_words

    lay = layout(cfg)
    vocab_words = vocabulary_words(load_tokenizer(cfg.paths.vocab, lay.saved))
    by_language, _ = tokenized_verses(cfg, lay, "train", None, cfg.train.max_length)
    languages = [
        LanguageText(key, offset, vocab_words[offset:offset + size],
                     [verse.tolist() for verse in verses])
        for key, offset, size, verses in zip(lay.keys, lay.offsets, lay.sizes, by_language,
                                             strict=True)
    ]
    return languages, vocab_words
