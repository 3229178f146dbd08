"""fastText spaces for English and Fake-English, mapped by unsupervised VecMap: the knn table.

knn-replace (paper ID 30, Dufter & Schütze 2020 §4 / A.3) replaces some masked tokens by their
nearest neighbour *in the other language* of a cross-lingual static space. The stage:

1. trains fastText skipgram on the English wordpiece corpus and on the Fake-English corpus
   (every token prefixed ``::``, sentence order shuffled with ``fake_shuffle_seed``);
2. maps the two spaces with our unsupervised VecMap (:mod:`multilab.spaces.vecmap`);
3. writes ``en.vec``, ``fake.vec`` (raw fastText), ``en.mapped.vec``, ``fake.mapped.vec``
   (shared space), ``knn.pt`` ([2V, k] neighbour ids in the other language) and
   ``metrics.json``.

Why it is built this way, in short: no character n-grams (the ``::`` prefix changes every
n-gram of a Fake word), a shuffled Fake corpus (otherwise one-threaded fastText learns two
identical spaces), our own seeded random start for every word (fastText 0.9.3 with one
thread leaves most rows uninitialised), one thread (reproducible byte for byte), 10 epochs
(5 leave these small spaces too noisy to map), only words that occur in the corpus mapped,
and the mapping on the CPU (``knn.pt`` is part of a model's data fingerprint). Each decision
is measured in ``benchmarks/RESULTS-vecmap.md``.

Every output appears at once: files are written to a staging folder next to ``out_dir`` and
swapped into place (:func:`multilab.files.replace_dir`), so a killed run leaves either the
old outputs or the new ones.
"""

from __future__ import annotations

import logging
import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from multilab.config import SpacesConfig
from multilab.data.tokenizers import SPECIAL_TOKENS
from multilab.data.vocab import fake_tokens
from multilab.errors import UserError
from multilab.files import replace_dir, write_json
from multilab.spaces import vecmap

ENGLISH_VEC = "en.vec"
FAKE_VEC = "fake.vec"
ENGLISH_MAPPED_VEC = "en.mapped.vec"
FAKE_MAPPED_VEC = "fake.mapped.vec"
KNN_TABLE = "knn.pt"
METRICS = "metrics.json"

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- vocabulary checks


def check_space_vocab(words: Sequence[str], vocab_words: Sequence[str], source: str = "space"
                      ) -> None:
    """Raise a one-line UserError unless ``words`` is exactly the tokenizer's vocabulary.

    A space built with another vocabulary would silently give neighbours for the wrong ids;
    the message names the first differing word and how to fix it.
    """
    hint = "rebuild it with `dvc repro spaces` (or `multilab spaces`)"
    for index, (word, expected) in enumerate(zip(words, vocab_words, strict=False)):
        if word != expected:
            raise UserError(
                f"{source}: word {index} is {word!r} but the tokenizer has {expected!r}; "
                f"the space was built with another vocabulary, {hint}"
            )
    if len(words) != len(vocab_words):
        raise UserError(
            f"{source} has {len(words)} words but the tokenizer has {len(vocab_words)}; {hint}"
        )


def read_vec_words(path: Path) -> list[str]:
    """The words of a .vec file, without parsing the vectors (cheap vocabulary check)."""
    if not path.exists():
        raise UserError(f"{path} not found; run `dvc repro spaces` first")
    with path.open(encoding="utf-8") as handle:
        handle.readline()
        return [line.split(" ", 1)[0] for line in handle]


def read_knn_table(path: Path) -> Tensor:
    """The tensor in ``path``, or one line when the file is damaged (truncated, overwritten):
    read before the training starts, never a traceback after it."""
    try:
        table = torch.load(path)
    except Exception as err:  # torch's zip reader, pickle or the OS: damaged either way
        reason = " ".join(str(err).split())[:160]
        raise UserError(f"{path} is damaged ({type(err).__name__}: {reason}); rebuild it "
                        "with `dvc repro spaces` (or `multilab spaces`)") from err
    if not isinstance(table, Tensor):
        raise UserError(f"{path} holds a {type(table).__name__}, not a tensor; rebuild it with "
                        "`dvc repro spaces` (or `multilab spaces`)")
    return table


def load_knn_table(spaces_dir: Path, vocab_words: Sequence[str]) -> Tensor:
    """knn.pt, after checking that the spaces were built for this tokenizer's vocabulary."""
    check_space_vocab(
        read_vec_words(spaces_dir / ENGLISH_MAPPED_VEC), vocab_words,
        str(spaces_dir / ENGLISH_MAPPED_VEC),
    )
    path = spaces_dir / KNN_TABLE
    if not path.exists():
        raise UserError(f"{path} not found; run `dvc repro spaces` first")
    table = read_knn_table(path)
    if table.ndim != 2 or table.shape[0] != 2 * len(vocab_words):
        raise UserError(
            f"{path} has shape {list(table.shape)}, expected [{2 * len(vocab_words)}, k]; "
            "rebuild it with `dvc repro spaces`"
        )
    return table


# --------------------------------------------------------------------------- fastText


def _write_corpus(path: Path, sentences: Sequence[Sequence[str]]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for sentence in sentences:
            if sentence:
                out.write(" ".join(sentence) + "\n")


def fake_corpus(sentences: Sequence[Sequence[str]], shuffle_seed: int) -> list[list[str]]:
    """Fake-English sentences: every token prefixed ``::``, sentence order shuffled.

    Without the shuffle, single-threaded fastText would see the same token stream and learn
    the same vectors for both languages.
    """
    fake = [fake_tokens(list(sentence)) for sentence in sentences]
    random.Random(shuffle_seed).shuffle(fake)
    return fake


def write_initial_vectors(path: Path, words: Sequence[str], dim: int,
                          generator: torch.Generator) -> None:
    """fastText's own initialisation, U(-1/dim, 1/dim), for every word, as a .vec file.

    fastText 0.9.3 initialises the input matrix in ten blocks, one per training thread, so
    with ``thread=1`` only the first tenth of the rows (the most frequent words) is drawn; the
    rest keeps whatever the allocator returns: zeros from fresh pages (90% of the words then
    start at the same point and the space collapses onto a few directions) or stale memory
    (small dimensions abort with "Encountered NaN."). Passing this file as
    ``pretrainedVectors`` gives every word a proper random start. Drawing both languages from
    one generator also keeps fastText's fixed seed from giving a word and its Fake twin the
    same start (same frequency rank → same row → same init), which would correlate the two
    spaces before any mapping.
    """
    vectors = (torch.rand(len(words), dim, generator=generator) * 2 - 1) / dim
    vecmap.write_vec(path, words, vectors)


def _train_fasttext(corpus: Path, initial_vectors: Path | None, cfg: SpacesConfig) -> Any:
    """fastText skipgram with the stage's settings (no n-grams unless ``char_ngrams``).

    Without n-grams the hash buckets are useless, so ``bucket=0`` (as fastText's own CLI
    does) instead of allocating 2M x dim floats. fastText's seed is not exposed by
    ``train_unsupervised``; our initial vectors carry the randomness instead. Without
    ``initial_vectors`` fastText keeps its own (broken) initialisation: benchmark only.
    """
    import fasttext

    ngrams = {"minn": 3, "maxn": 6} if cfg.char_ngrams else {"minn": 0, "maxn": 0, "bucket": 0}
    start = {"pretrainedVectors": str(initial_vectors)} if initial_vectors else {}
    return fasttext.train_unsupervised(
        str(corpus),
        model="skipgram",
        dim=cfg.dim,
        epoch=cfg.epochs,
        minCount=cfg.min_count,
        ws=cfg.window,
        thread=cfg.threads,
        verbose=0,
        **start,
        **ngrams,
    )


def _corpus_words(sentences: Sequence[Sequence[str]], words: Sequence[str]) -> list[str]:
    """The vocabulary words that occur in the corpus, in vocabulary order."""
    seen = {token for sentence in sentences for token in sentence}
    return [w for w in words if w in seen]


def _vectors(model: Any, words: Sequence[str]) -> tuple[Tensor, list[int]]:
    """A vector for every word, and the words fastText trained, most frequent first."""
    vectors = torch.from_numpy(np.stack([model.get_word_vector(w) for w in words])).float()
    index = {word: i for i, word in enumerate(words)}
    special = set(range(len(SPECIAL_TOKENS)))
    trained = [index[w] for w in model.words if w in index and index[w] not in special]
    return vectors, trained


# --------------------------------------------------------------------------- knn table


def knn_table(
    en_mapped: Tensor, fake_mapped: Tensor, en_rows: list[int], fake_rows: list[int],
    vocab_size: int, k: int,
) -> Tensor:
    """[2V, k] ids of each token's k CSLS neighbours in the other language.

    ``en_mapped`` / ``fake_mapped`` hold the mapped vectors of the trained words ``en_rows`` /
    ``fake_rows`` (English ids). Every other id (special tokens, absent words) points to its
    twin, i ↔ i + V.
    """
    english_ids = torch.arange(vocab_size)
    table = torch.cat([english_ids + vocab_size, english_ids])[:, None].repeat(1, k)
    if not en_rows or not fake_rows:
        return table
    en_unit, fake_unit = vecmap.unit_length(en_mapped), vecmap.unit_length(fake_mapped)
    en_ids, fake_ids = torch.tensor(en_rows), torch.tensor(fake_rows)
    to_fake = vecmap.csls_topk(en_unit, fake_unit, k)
    to_english = vecmap.csls_topk(fake_unit, en_unit, k)
    # Fewer trained words than k: repeat the neighbours found so every row has k entries.
    to_fake = to_fake[:, torch.arange(k) % to_fake.shape[1]]
    to_english = to_english[:, torch.arange(k) % to_english.shape[1]]
    table[en_ids] = fake_ids[to_fake] + vocab_size
    table[fake_ids + vocab_size] = en_ids[to_english]
    return table


# --------------------------------------------------------------------------- the stage


def build_spaces(
    train_wordpiece_sentences: list[list[str]],
    vocab_words: list[str],
    out_dir: Path,
    cfg: SpacesConfig,
) -> dict:
    """Train both fastText spaces, map them, write every output atomically; return metrics."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would otherwise become the published folder's mode
    try:
        metrics = _build_in(staging, train_wordpiece_sentences, vocab_words, cfg)
        replace_dir(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return metrics


@dataclass
class TrainedSpaces:
    """Both fastText spaces before mapping. Rows of both matrices are English ids (row i of
    ``fake_vectors`` is ``::word_i``); ``*_rows`` are the ids fastText trained, most
    frequent first (the order VecMap sees, as with a fastText ``.vec`` file)."""

    en_vectors: Tensor
    fake_vectors: Tensor
    en_rows: list[int]
    fake_rows: list[int]
    seconds: float


def train_spaces(
    sentences: Sequence[Sequence[str]], vocab_words: list[str], workdir: Path,
    cfg: SpacesConfig, random_start: bool = True,
) -> TrainedSpaces:
    """fastText on the English corpus and on the shuffled ``::`` corpus (files in ``workdir``).

    ``random_start=False`` leaves fastText's own (broken, see
    :func:`write_initial_vectors`) initialisation in place; only the benchmark uses it, to
    show what the random start is worth.
    """
    started = time.perf_counter()
    fake_words = fake_tokens(vocab_words)
    corpora = {"en": workdir / "corpus.en.txt", "fake": workdir / "corpus.fake.txt"}
    fake_sentences = fake_corpus(sentences, cfg.fake_shuffle_seed)
    _write_corpus(corpora["en"], sentences)
    _write_corpus(corpora["fake"], fake_sentences)
    # Initial vectors only for words in the corpus: fastText adds every word of the file to
    # its dictionary, and absent words must stay absent (see the module docstring).
    generator = torch.Generator().manual_seed(cfg.fake_shuffle_seed)
    initial = {"en": workdir / "init.en.vec", "fake": workdir / "init.fake.vec"}
    write_initial_vectors(initial["en"], _corpus_words(sentences, vocab_words), cfg.dim,
                          generator)
    write_initial_vectors(initial["fake"], _corpus_words(fake_sentences, fake_words), cfg.dim,
                          generator)
    try:
        en_model = _train_fasttext(corpora["en"], initial["en"] if random_start else None, cfg)
        en_vectors, en_rows = _vectors(en_model, vocab_words)
        fake_model = _train_fasttext(corpora["fake"], initial["fake"] if random_start else None,
                                     cfg)
        fake_vectors, fake_rows = _vectors(fake_model, fake_words)
    finally:
        for path in [*corpora.values(), *initial.values()]:
            path.unlink(missing_ok=True)
    if len(en_rows) < 2 or len(fake_rows) < 2:
        raise UserError("spaces: the corpus has fewer than 2 vocabulary words to map")
    return TrainedSpaces(en_vectors, fake_vectors, en_rows, fake_rows,
                         time.perf_counter() - started)


def map_spaces(
    trained: TrainedSpaces, seed: int, max_iterations: int | None, threads: int | None,
    progress: bool = True,
) -> tuple[vecmap.MappingResult, dict[str, Any]]:
    """Our unsupervised VecMap on the trained words, scored against the gold identity
    dictionary (English word i ↔ ``::``word i), which the mapping itself never sees."""
    en_rows, fake_rows = trained.en_rows, trained.fake_rows
    src, trg = trained.en_vectors[en_rows], trained.fake_vectors[fake_rows]
    result = vecmap.map_unsupervised(
        src, trg, seed=seed, max_iterations=max_iterations, device="cpu", threads=threads,
        progress=progress,
    )
    fake_position = {word_id: pos for pos, word_id in enumerate(fake_rows)}
    gold = torch.tensor([fake_position.get(word_id, -1) for word_id in en_rows])
    before = vecmap.normalize_embeddings(src), vecmap.normalize_embeddings(trg)
    metrics = {
        "precision_at_1_nn": vecmap.precision_at_1(result.src_mapped, result.trg_mapped, gold),
        "precision_at_1_csls": vecmap.precision_at_1(
            result.src_mapped, result.trg_mapped, gold, method="csls"
        ),
        "precision_at_1_identity_before_mapping": vecmap.precision_at_1(*before, gold),
        "iterations": result.iterations,
        "objective": result.objective,
        "seconds_vecmap": result.seconds,
        "words_mapped": len(en_rows),
    }
    return result, metrics


def _build_in(
    staging: Path, sentences: list[list[str]], vocab_words: list[str], cfg: SpacesConfig
) -> dict:
    vocab_size = len(vocab_words)
    fake_words = fake_tokens(vocab_words)
    trained = train_spaces(sentences, vocab_words, staging, cfg)
    result, mapping_metrics = map_spaces(
        trained, cfg.vecmap_seed, cfg.vecmap_max_iterations, cfg.threads
    )
    metrics = {
        **mapping_metrics,
        "seconds_fasttext": trained.seconds,
        "vocab_size": vocab_size,
        "knn_k": cfg.knn_k,
    }
    en_rows, fake_rows = trained.en_rows, trained.fake_rows
    en_mapped = torch.zeros(vocab_size, result.src_mapped.shape[1])
    fake_mapped = torch.zeros(vocab_size, result.trg_mapped.shape[1])
    en_mapped[en_rows] = result.src_mapped.cpu()
    fake_mapped[fake_rows] = result.trg_mapped.cpu()

    vecmap.write_vec(staging / ENGLISH_VEC, vocab_words, trained.en_vectors)
    vecmap.write_vec(staging / FAKE_VEC, fake_words, trained.fake_vectors)
    vecmap.write_vec(staging / ENGLISH_MAPPED_VEC, vocab_words, en_mapped)
    vecmap.write_vec(staging / FAKE_MAPPED_VEC, fake_words, fake_mapped)
    table = knn_table(
        result.src_mapped.cpu(), result.trg_mapped.cpu(), en_rows, fake_rows,
        vocab_size, cfg.knn_k,
    )
    torch.save(table, staging / KNN_TABLE)
    write_json(staging / METRICS, metrics)
    # Read back what later stages read, so a broken file fails here and not in training.
    load_knn_table(staging, vocab_words)
    check_space_vocab(read_vec_words(staging / FAKE_MAPPED_VEC), fake_words,
                      str(staging / FAKE_MAPPED_VEC))
    return metrics
