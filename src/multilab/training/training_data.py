"""What a model is trained on: the examples of a run, assembled from the built corpora and
vocabularies under its modification, and the knn table of knn-replace.

K et al. 2020's corpus rewrites (``unigram-target``, ``permute-p``), ``nsp``'s sentence pairs and
Liu et al. 2020b's ``window-<w>`` happen here and only here: the pretraining corpus, never the dev
set or the downstream task. Evaluation reads :func:`study_encoder` from here too, without
importing the training loop.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from multilab.config import Config, RunConfig
from multilab.data.batches import (
    Examples,
    code_switched_lines,
    permuted_corpus,
    tokenize_lines,
    training_examples,
    unigram_lines,
    windows,
)
from multilab.data.corpus import training_lines
from multilab.data.inputs import InputEncoder
from multilab.data.layout import layout, read_verse_table, tokenized_verses
from multilab.data.vocab import load_tokenizer, vocabulary_words
from multilab.spaces import fasttext_spaces, verse_spaces


@dataclass
class TrainingData:
    """A run's training examples, and how many sentences were cut to ``max_length``."""

    examples: Examples
    truncated: int  # training sentences longer than max_length, cut


def study_encoder(run: RunConfig) -> InputEncoder:
    """The input encoder of ``run``'s languages and built vocabulary."""
    lay = layout(run.study)
    return InputEncoder(run.recipe, lay.sizes[0], run.study.train.max_length, lay.offsets,
                        lay.total)


def prepare_data(run: RunConfig) -> tuple[TrainingData, InputEncoder]:
    """The training examples of ``run`` (every language of each sentence, or shares).

    K et al. 2020's corpus rewrites (``unigram-target``, ``permute-p``), ``nsp``'s sentence pairs
    and Liu et al. 2020b's ``window-<w>`` happen here and only here: the pretraining corpus, never
    the dev set or the downstream task.
    """
    encoder = study_encoder(run)
    cfg, recipe = run.study, run.recipe

    def unigram(language: int, lines: list[str]) -> list[str]:
        return unigram_lines(lines, run.seed, language) if language else lines

    rewrite = unigram if recipe.unigram_target else None
    if recipe.code_switch:  # extra-anchors: needs every language's verses at once
        switched = _code_switched(cfg, run.seed)

        def rewrite(language: int, lines: list[str]) -> list[str]:
            return switched[language][:len(lines)]
    if cfg.verses:
        whole = cfg.user_corpora  # a user corpus's line is a document: cut, not truncated
        by_language, truncated = tokenized_verses(
            cfg, layout(cfg), "train", cfg.train.max_train_sentences,
            DOCUMENT_LENGTH if whole else cfg.train.max_length, rewrite)
        if whole:
            by_language = document_pieces(by_language, cfg.train.max_length,
                                          cfg.train.max_train_sentences)
            recipe = replace(recipe, parallel=True)  # unrelated lines already: no-parallel is
            # what they are (Dufter & Schütze 2020 §5's row 8 on Wikipedia), so every line is kept
        by_language = permuted_corpus(by_language, recipe.permute, run.seed)
        examples = training_examples([], recipe, encoder, by_language, run.seed)
        return TrainingData(examples, truncated), encoder
    tokenizer = load_tokenizer(cfg.paths.vocab)
    lines = training_lines(cfg)
    sentences, truncated = tokenize_lines(lines, tokenizer, encoder)
    by_language = None
    if rewrite is not None or recipe.permute:
        by_language = [sentences] + [
            tokenize_lines(rewrite(lang, lines), tokenizer, encoder)[0] if rewrite else sentences
            for lang in range(1, encoder.languages)
        ]
        by_language = permuted_corpus(by_language, recipe.permute, run.seed)
    examples = training_examples(sentences, recipe, encoder, by_language, run.seed)
    return TrainingData(examples, truncated), encoder


def _code_switched(cfg: Config, seed: int) -> list[list[str]]:
    """extra-anchors' rewritten train verses of every language (batches.code_switched_lines)."""
    _, texts = read_verse_table(cfg.paths.corpora / "train.txt")
    columns = layout(cfg).columns
    limit = cfg.train.max_train_sentences
    lines = [texts[column][:limit] if limit else texts[column] for column in columns]
    return code_switched_lines(lines, seed)[0]


#: A user corpus line's word-pieces are read whole (no line of a Wikipedia extract is longer)
#: and then cut into inputs by :func:`document_pieces`.
DOCUMENT_LENGTH = 1 << 30


def document_pieces(by_language: list[list[torch.Tensor]], max_length: int,
                    limit: int | None = None) -> list[list[torch.Tensor]]:
    """Each language's lines (documents or paragraphs of a user corpus) cut into consecutive
    inputs of at most ``max_length - 2`` word-pieces, every piece kept (BERT's own
    pretraining data packs a document into full-length inputs; truncating a Wikipedia
    paragraph at 126 pieces would drop most of the text), then the first ``limit``
    (``train.max_train_sentences``) inputs of each language: the cap counts inputs, as it
    does for verses, since one long line makes thousands (a 10 MB line made 19,915 inputs
    and 3.7 GB on the smoke profile). The languages' lists are padded with empty rows to
    one length (rows are not parallel; empty rows are no example)."""
    pieces = [windows(rows, max_length - 2)[:limit] for rows in by_language]
    longest = max(len(rows) for rows in pieces)
    empty = torch.empty(0, dtype=torch.long)
    return [rows + [empty] * (longest - len(rows)) for rows in pieces]


def load_knn_table(run: RunConfig) -> torch.Tensor | None:
    """The knn table, checked against the tokenizer: a space of another vocabulary is refused.

    Neighbours are token ids; a table built with another vocabulary would silently replace
    tokens by the wrong words.
    """
    if not run.recipe.needs_knn:
        return None
    cfg = run.study
    if cfg.verses:
        words = vocabulary_words(load_tokenizer(cfg.paths.vocab, layout(cfg).saved))
        return verse_spaces.load_verse_knn_table(cfg.paths.spaces, words)
    tokenizer = load_tokenizer(cfg.paths.vocab)
    return fasttext_spaces.load_knn_table(cfg.paths.spaces, vocabulary_words(tokenizer))
