"""Static word embeddings against BERT (Liu et al. 2020a / Liu et al. 2020b: static
embeddings and their part in word retrieval).

Liu et al. compare word2vec (and GloVe) with BERT trained on the *same* wordpiece-tokenized
data: with little data the static embeddings align words across languages better (word
retrieval MRR), with more data BERT wins, and word2vec needs no long context window while
BERT does. ``multilab static`` measures the static side in the lab:

* **training**: fastText skipgram or CBOW (word2vec's two objectives; ``maxn=0``, so no
  character n-grams: a wordpiece is a word), one thread and a seeded start (byte-for-byte
  reproducible), **jointly** on the study's train rows, every language's row tokenized by
  that language's own tokenizer exactly as pretraining reads it (:func:`train_sentences`).
  Each piece is written ``<block>:<piece>``, the block being the first language whose
  vocabulary block starts where this language's does (:func:`piece_blocks`), so the static
  model shares a piece exactly where BERT shares its id: separate blocks keep a language's
  pieces its own (Fake-English's ``the`` is ``1:the``, English's ``0:the``), a shared
  vocabulary (``vocab.mode`` joint or union: every block at offset 0) writes English's and
  German's ``##en`` as one word, ``0:##en``, the anchor Liu et al.'s joint wordpiece data
  gives word2vec. The rows are the first ``rows`` of the train table (as
  ``train.max_train_sentences`` cuts them for BERT), every row in every language (the
  ``original`` recipe), lines shuffled with the seed (BERT reads shuffled batches).
  fastText's ``ws`` is word2vec's window: the context of a word is drawn uniformly from
  1 … ``ws`` pieces on each side, within the line (a verse).
* **word retrieval**: the words and dictionary of ``multilab mrr``
  (:mod:`.lab_word_retrieval`: the first ``sentences`` dev rows, exact for ``fake`` /
  ``enfake``, silver IBM-1 otherwise), a word's static vector the mean of its wordpieces'
  vectors (the contextual side also merges pieces by their mean), scored by
  :func:`.word_retrieval.word_retrieval`. A piece the training rows never contained has no
  vector; a word with none of its pieces gets the zero vector, so the word set stays the
  contextual one and such a word loses its ties (counted in ``words_without_vector``).
* **zero-shot task**: the task and splits of ``multilab downstream`` (``downstream.task``,
  :func:`.downstream.task_data`), a verse as the mean of its pieces' static vectors (a
  sentence pair: the two means side by side), standardized on the first language's train
  split; a logistic regression (scikit-learn, deterministic L-BFGS) fitted on that split and
  tested on every language's test split, beside the majority baseline.

GloVe is not built: no maintained GloVe trainer exists as a Python package (the packages
named glove, glove-python, glove-python-binary and glove-py had their last releases in
2016–2020; gensim, maintained, loads GloVe vectors but does not train them), and a
hand-written co-occurrence factorization would be a second, unchecked implementation.

Numbers of the English + Fake-English study need one caution: the two languages share no
piece, so nothing in the joint static objective ties ``0:w`` to ``1:w`` except the shared
negative-sampling table; BERT ties them through shared positions and layers. The static MRR
there is the "no anchors" floor of Conneau et al. 2020, not a property of word2vec on real languages
(whose joint wordpiece vocabulary shares pieces: ``vocab.mode = joint``).
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from multilab import tracking
from multilab.config import Config
from multilab.data.classification import classification_scores, majority_baseline
from multilab.data.layout import layout, tokenized_verses
from multilab.errors import UserError
from multilab.evaluation.lab_word_retrieval import (
    dictionary_of,
    exact_pairs,
    language_tokenizers,
    words_of,
)
from multilab.evaluation.token_translation import dev_rows, pair_numbers
from multilab.evaluation.word_retrieval import word_retrieval
from multilab.files import write_json
from multilab.progress import progress_bar
from multilab.resolve import resolve_run
from multilab.spaces.fasttext_spaces import write_initial_vectors

MODELS = ("skipgram", "cbow")
DEFAULT_EPOCHS = 10  # the spaces stage's choice: 5 epochs leave these small corpora noisy
ALL_ROWS = "all"


@dataclass(frozen=True)
class StaticSettings:
    """One static training: objective, data size (train rows), window and shape."""

    model: str
    rows: int
    window: int
    dim: int
    epochs: int
    seed: int


def piece(block: int, token: str) -> str:
    """A wordpiece as the static corpus writes it: its vocabulary block's number first."""
    return f"{block}:{token}"


def piece_blocks(cfg: Config) -> list[int]:
    """Each language's prefix in the static corpus: the number of the first language whose
    vocabulary block starts at the same id (its own number where the blocks are apart).
    Why: a piece is one word for fastText exactly where it is one id for BERT, so a shared
    vocabulary's anchors reach the static model too, and separate blocks stay apart."""
    offsets = layout(cfg).offsets
    return [offsets.index(offset) for offset in offsets]


# --------------------------------------------------------------------------- the corpus


def train_sentences(cfg: Config) -> list[list[list[str]]]:
    """Each language's train rows as wordpiece strings, exactly as pretraining cuts them:
    ``[language][row] -> pieces`` (row i the same verse in every language where aligned)."""
    from multilab.data.batches import tokenize_lines
    from multilab.data.corpus import training_lines
    from multilab.data.vocab import load_tokenizer
    from multilab.training.training_data import DOCUMENT_LENGTH, study_encoder

    tokenizers = language_tokenizers(cfg)
    if cfg.verses:
        length = DOCUMENT_LENGTH if cfg.user_corpora else cfg.train.max_length
        rows, _ = tokenized_verses(cfg, layout(cfg), "train", cfg.train.max_train_sentences,
                                   length)
    else:  # [3, fake]: the English lines, Fake-English the same pieces in its own block
        encoder = study_encoder(resolve_run(cfg, "original", cfg.seeds[0]))
        ids, _ = tokenize_lines(training_lines(cfg), load_tokenizer(cfg.paths.vocab), encoder)
        rows = [ids, ids]
    return [[tokenizers[lang].convert_ids_to_tokens(row.tolist()) for row in language_rows]
            for lang, language_rows in enumerate(rows)]


def corpus_lines(sentences: Sequence[Sequence[Sequence[str]]], rows: int, seed: int,
                 blocks: Sequence[int] | None = None) -> list[str]:
    """The joint corpus: the first ``rows`` rows of every language, pieces prefixed with the
    language's block (:func:`piece_blocks`; None: each language its own), lines shuffled by
    ``seed`` (empty rows left out)."""
    prefixes = list(blocks) if blocks is not None else list(range(len(sentences)))
    lines = [" ".join(piece(prefixes[lang], token) for token in row)
             for lang, language_rows in enumerate(sentences) for row in language_rows[:rows]
             if len(row)]
    random.Random(seed).shuffle(lines)
    return lines


def train_static(lines: Sequence[str], settings: StaticSettings) -> dict[str, np.ndarray]:
    """fastText ``settings.model`` on ``lines``: every trained piece's vector.

    One thread and ``maxn=0`` / ``bucket=0`` (pieces are words); every piece starts from our
    seeded U(-1/dim, 1/dim) (:func:`~multilab.spaces.fasttext_spaces.write_initial_vectors`:
    fastText 0.9.3 with one thread leaves most rows uninitialised). That start and the
    corpus's shuffle carry the seed (0.9.3's Python binding takes none; its own is fixed), so
    the same settings give the same vectors.
    """
    import fasttext

    if settings.model not in MODELS:
        raise UserError(f"static model {settings.model!r}; valid: {', '.join(MODELS)}")
    vocabulary = list(dict.fromkeys(token for line in lines for token in line.split()))
    generator = torch.Generator().manual_seed(settings.seed)
    with tempfile.TemporaryDirectory(prefix="multilab-static-") as scratch:
        corpus, start = Path(scratch) / "corpus.txt", Path(scratch) / "start.vec"
        corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
        write_initial_vectors(start, vocabulary, settings.dim, generator)
        model = fasttext.train_unsupervised(
            str(corpus), model=settings.model, dim=settings.dim, ws=settings.window,
            epoch=settings.epochs, minCount=1, minn=0, maxn=0, bucket=0, thread=1,
            pretrainedVectors=str(start), verbose=0)
    return {word: np.asarray(model.get_word_vector(word), dtype=np.float64)
            for word in model.words if word != "</s>"}


def mean_vector(pieces: Sequence[str], vectors: dict[str, np.ndarray], dim: int
                ) -> tuple[np.ndarray, bool]:
    """The mean of the pieces' vectors that exist, and whether any did (else zeros)."""
    found = [vectors[p] for p in pieces if p in vectors]
    return (np.mean(found, axis=0), True) if found else (np.zeros(dim), False)


# --------------------------------------------------------------------------- word retrieval


@dataclass(frozen=True)
class WordSet:
    """The words of one language in the dev rows ``multilab mrr`` reads, with their pieces
    (the language-prefixed strings of the static corpus)."""

    words: list[str]
    pieces: list[list[str]]


def dev_words(rows: Sequence[torch.Tensor], block: int, tokenizer: Any) -> WordSet:
    """Every word of ``rows`` in order of first occurrence, as :func:`words_of` merges
    pieces (the contextual side's words), and its pieces (prefixed with ``block``)."""
    pieces: dict[str, list[str]] = {}
    for row in rows:
        tokens = tokenizer.convert_ids_to_tokens(row.tolist())
        words, ids = words_of(tokens)
        grouped: list[list[str]] = [[] for _ in words]
        for token, index in zip(tokens, ids, strict=True):
            grouped[index].append(piece(block, token))
        for word, parts in zip(words, grouped, strict=True):
            pieces.setdefault(word, parts)
    return WordSet(list(pieces), list(pieces.values()))


@dataclass(frozen=True)
class RetrievalData:
    """What word retrieval needs, read once for every static training: both languages'
    dev words and the dictionary (``multilab mrr``'s)."""

    source: WordSet
    target: WordSet
    pairs: list[tuple[str, str]]
    kind: str
    sentences: int


def retrieval_data(cfg: Config, src: int, tgt: int, sentences: int, seed: int
                   ) -> RetrievalData:
    """The dev words and dictionary of ``multilab mrr`` for the pair (its module doc)."""
    tokenizers = language_tokenizers(cfg)
    pairs, kind = dictionary_of(cfg, src, tgt, tokenizers)
    _, rows, _ = dev_rows(cfg, resolve_run(cfg, "original", seed), sentences)
    keep = [i for i in range(len(rows[src])) if len(rows[src][i]) and len(rows[tgt][i])]
    blocks = piece_blocks(cfg)
    source = dev_words([rows[src][i] for i in keep], blocks[src], tokenizers[src])
    target = dev_words([rows[tgt][i] for i in keep], blocks[tgt], tokenizers[tgt])
    return RetrievalData(source, target, pairs or exact_pairs(kind, source.words, target.words),
                         kind, len(keep))


def static_retrieval(data: RetrievalData, vectors: dict[str, np.ndarray], dim: int
                     ) -> dict[str, Any]:
    """MRR and P@1 of the static word vectors on ``data``'s words and dictionary."""
    def table(words: WordSet) -> tuple[np.ndarray, int]:
        found = [mean_vector(parts, vectors, dim) for parts in words.pieces]
        return np.stack([v for v, _ in found]), sum(not ok for _, ok in found)

    source_vectors, source_missing = table(data.source)
    target_vectors, target_missing = table(data.target)
    score = word_retrieval(data.source.words, source_vectors, data.target.words,
                           target_vectors, data.pairs)
    return {"mrr": score.mrr, "p1": score.precision_at_1, "queries": score.queries,
            "skipped": score.skipped,
            "words_without_vector": {"source": source_missing, "target": target_missing}}


# --------------------------------------------------------------------------- zero-shot task


@dataclass(frozen=True)
class TaskFeatures:
    """The downstream task's verses as token lists per language (first language: train
    split too), with labels; featurized per static training."""

    labels: list[str]
    num_labels: int
    train: list[list[list[str]]]  # first language: each example's pieces (one or two texts)
    train_labels: list[int]
    tests: dict[str, tuple[list[list[list[str]]], list[int]]]


def task_features(cfg: Config) -> TaskFeatures:
    """``downstream.task``'s splits (``multilab downstream``'s, capped the same way), each
    text cut into its language's pieces as the fine-tune reads it."""
    from multilab.data.tasks import get_task
    from multilab.evaluation.downstream import (
        language_inputs,
        language_label,
        study_languages,
        task_data,
    )

    languages = study_languages(cfg)
    blocks = piece_blocks(cfg)
    inputs = language_inputs(cfg, languages)
    data = task_data(cfg, languages)
    limit = cfg.downstream.max_length - 2

    def pieces(examples: Sequence[Any], how: Any) -> list[list[list[str]]]:
        def cut(texts: list[str]) -> list[list[str]]:
            ids = how.tokenizer(texts, add_special_tokens=False)["input_ids"]
            return [[piece(blocks[how.number], t) for t in how.tokenizer.convert_ids_to_tokens(
                row[:limit])] for row in ids]

        first = cut([e.text for e in examples])
        paired = any(e.text_pair is not None for e in examples)
        if not paired:
            return [[text] for text in first]
        second = cut([e.text_pair or "" for e in examples])
        return [[a, b] for a, b in zip(first, second, strict=True)]

    first = inputs[0]
    train = data["train"][first.language]
    labels = [language_label(how.language, languages) for how in inputs]
    return TaskFeatures(
        labels=labels, num_labels=len(get_task(cfg.downstream.task).labels),
        train=pieces(train, first), train_labels=[e.label for e in train],
        tests={label: (pieces(data["test"][how.language], how),
                       [e.label for e in data["test"][how.language]])
               for label, how in zip(labels, inputs, strict=True)})


def verse_matrix(examples: Sequence[Sequence[Sequence[str]]], vectors: dict[str, np.ndarray],
                 dim: int) -> np.ndarray:
    """One row per example: the mean static vector of each of its texts, side by side."""
    return np.stack([np.concatenate([mean_vector(text, vectors, dim)[0] for text in example])
                     for example in examples])


def zero_shot(task: TaskFeatures, vectors: dict[str, np.ndarray], dim: int, seed: int
              ) -> dict[str, Any]:
    """Logistic regression on the first language's mean-pooled verses, tested on every
    language (module doc): accuracy and macro-F1 per language, and the majority baseline."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    train = verse_matrix(task.train, vectors, dim)
    scaler = StandardScaler().fit(train)
    classifier = LogisticRegression(max_iter=2000, random_state=seed)
    classifier.fit(scaler.transform(train), task.train_labels)
    scores = {}
    for label, (examples, gold) in task.tests.items():
        predicted = classifier.predict(scaler.transform(verse_matrix(examples, vectors, dim)))
        score = classification_scores([int(p) for p in predicted], gold, task.num_labels)
        scores[label] = {"accuracy": score.accuracy, "macro_f1": score.macro_f1}
    first_gold = task.tests[task.labels[0]][1]
    baseline = majority_baseline(task.train_labels, first_gold, task.num_labels)
    return {"test": scores, "majority_accuracy": baseline.accuracy}


# --------------------------------------------------------------------------- the grid


def parse_rows(text: str, available: int) -> list[int]:
    """``--rows``: comma-separated row counts (1 … available), fractions in (0, 1) of the
    train rows, or ``all``; one line naming the bad value otherwise."""
    counts = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item == ALL_ROWS:
            counts.append(available)
            continue
        try:
            value = float(item) if "." in item else int(item)
        except ValueError:
            value = None
        if isinstance(value, float) and 0 < value < 1:
            counts.append(max(1, round(value * available)))
        elif isinstance(value, int) and 1 <= value <= available:
            counts.append(value)
        else:
            raise UserError(f"--rows {item!r}: valid: whole numbers 1 … {available} (the "
                            f"study's train rows), fractions in (0, 1), or {ALL_ROWS}")
    if not counts:
        raise UserError(f"--rows {text!r}: name at least one, e.g. 2000,{ALL_ROWS}")
    return list(dict.fromkeys(counts))


def parse_models(text: str) -> list[str]:
    """``--models``: skipgram and/or cbow; one line naming the bad value otherwise."""
    models = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in models if m not in MODELS]
    if bad or not models:
        raise UserError(f"--models {bad[0] if bad else text!r}: valid: {', '.join(MODELS)}")
    return list(dict.fromkeys(models))


def parse_positive(text: str, option: str) -> list[int]:
    """``--windows`` and the like: comma-separated whole numbers ≥ 1."""
    values = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if not item.isdigit() or int(item) < 1:
            raise UserError(f"{option} {item!r}: valid: whole numbers >= 1, e.g. 5,20")
        values.append(int(item))
    if not values:
        raise UserError(f"{option} {text!r}: name at least one, e.g. 5,20")
    return list(dict.fromkeys(values))


@dataclass(frozen=True)
class StaticRequest:
    """A checked ``multilab static`` request and the data every combination reads."""

    source: str
    target: str
    src: int
    tgt: int
    models: list[str]
    counts: list[int]
    windows: list[int]
    sentences: int
    dim: int
    epochs: int
    seed: int
    train: list[list[list[str]]]


def static_request(cfg: Config, source: str, target: str, models: str, rows: str,
                   windows: str, sentences: int = 2000, dim: int | None = None,
                   epochs: int = DEFAULT_EPOCHS, seed: int | None = None) -> StaticRequest:
    """Every value checked (one line naming the bad one and the valid ones) and the train
    rows read, before anything is trained, logged or written."""
    chosen_models = parse_models(models)
    chosen_windows = parse_positive(windows, "--windows")
    for option, value in (("--sentences", sentences), ("--epochs", epochs), ("--dim", dim)):
        if value is not None and value < 1:
            raise UserError(f"{option} {value}: must be >= 1")
    src, tgt = pair_numbers(cfg, source, target)
    seed = cfg.seeds[0] if seed is None else seed
    train = train_sentences(cfg)
    return StaticRequest(source, target, src, tgt, chosen_models,
                         parse_rows(rows, len(train[0])), chosen_windows, sentences,
                         dim or resolve_run(cfg, "original", seed).model.hidden_size, epochs, seed,
                         train)


def static_grid(cfg: Config, request: StaticRequest, progress: bool = True) -> dict[str, Any]:
    """Every (model, rows, window) combination: its MRR / P@1 and zero-shot accuracies."""
    data = retrieval_data(cfg, request.src, request.tgt, request.sentences, request.seed)
    task = task_features(cfg)
    blocks = piece_blocks(cfg)
    dim, seed = request.dim, request.seed
    combos = [StaticSettings(m, r, w, dim, request.epochs, seed)
              for m in request.models for r in request.counts for w in request.windows]
    results = []
    for settings in progress_bar(combos, desc="static embeddings", unit="model",
                                 disable=not progress):
        started = time.perf_counter()
        vectors = train_static(corpus_lines(request.train, settings.rows, seed, blocks),
                               settings)
        trained = time.perf_counter() - started
        results.append({
            "model": settings.model, "rows": settings.rows, "window": settings.window,
            "pieces": len(vectors), **static_retrieval(data, vectors, dim),
            "zero_shot": zero_shot(task, vectors, dim, seed),
            "seconds_train": trained, "seconds": time.perf_counter() - started})
    return {"source": request.source, "target": request.target,
            "languages": list(cfg.languages), "dictionary": data.kind,
            "dictionary_pairs": len(data.pairs), "sentences": data.sentences,
            "train_rows": len(request.train[0]), "piece_blocks": blocks,
            "models": request.models,
            "rows": request.counts, "windows": request.windows, "dim": dim,
            "epochs": request.epochs, "seed": seed, "task": cfg.downstream.task,
            "task_languages": task.labels, "results": results}


def metric_key(row: dict[str, Any]) -> str:
    """The MLflow name stem of one combination: ``<model>.r<rows>.w<window>``."""
    return f"{row['model']}.r{row['rows']}.w{row['window']}"


def static_and_record(cfg: Config, request: StaticRequest, out: Path | None = None,
                      progress: bool = True) -> tuple[dict[str, Any], Path]:
    """:func:`static_grid`, logged as its own run in the study's experiment (ended FINISHED
    or FAILED, never RUNNING), then the JSON (default ``reports/static/<pair>.json``)."""
    experiment_id = tracking.connect(cfg.paths, cfg.experiment)  # a dead server: before work
    pair = f"{request.source}-{request.target}".replace(":", "_")
    path = out or cfg.paths.reports / "static" / f"{pair}.json"
    with tempfile.TemporaryDirectory() as scratch, tracking.run(
            experiment_id, name=f"static {pair}",
            tags={"stage": "static", "pair": pair, **tracking.source_tags()}) as run_id:
        tracking.log_params({"static.models": ",".join(request.models),
                             "static.rows": ",".join(map(str, request.counts)),
                             "static.windows": ",".join(map(str, request.windows)),
                             "static.dim": request.dim, "static.epochs": request.epochs,
                             "static.seed": request.seed,
                             "static.sentences": request.sentences,
                             "static.source": request.source, "static.target": request.target})
        record = static_grid(cfg, request, progress) | {"run_id": run_id}
        metrics: dict[str, float] = {}
        for row in record["results"]:
            stem = metric_key(row)
            metrics[f"static_mrr.{pair}.{stem}"] = row["mrr"]
            metrics[f"static_p1.{pair}.{stem}"] = row["p1"]
            metrics[f"static_seconds.{stem}"] = row["seconds"]
            for label, score in row["zero_shot"]["test"].items():
                metrics[f"static_acc.{label}.{stem}"] = score["accuracy"]
        tracking.log_metrics(metrics)
        copy = Path(scratch) / "static.json"
        write_json(copy, record)
        tracking.log_artifact(copy, f"static/{pair}")
    write_json(path, record)
    return record, path
