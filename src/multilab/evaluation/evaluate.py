"""Model + dev corpus → embeddings → multilinguality and model-fit metrics (Dufter & Schütze 2020
§2.2).

Sentences are length-sorted into batches, English and Fake-English twins go through the
model with the modification applied by :class:`~multilab.data.inputs.InputEncoder` exactly as in
training, and every metric is computed on whole tensors (see :mod:`multilab.evaluation.metrics`).
"""

from __future__ import annotations

import csv
import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import BertForMaskedLM

from multilab import tracking
from multilab.config import Config, RunConfig, resolve_layers
from multilab.data.batches import (
    Examples,
    mask_tokens,
    seeded_generator,
    tokenize_lines,
    training_examples,
)
from multilab.data.corpus import read_lines, training_lines
from multilab.data.inputs import ENGLISH, FAKE, InputEncoder
from multilab.data.layout import Layout, layout, metric_name, tokenized_verses
from multilab.data.vocab import load_tokenizer
from multilab.errors import UserError
from multilab.evaluation import metrics, verse_retrieval
from multilab.files import write_json
from multilab.lab.metric_table import EVALUATION_FACTS, MU_PARTS, TRAIN_LOSS, layer_key
from multilab.lab.modifications import Recipe
from multilab.progress import progress_bar, show_postfix
from multilab.resolve import resolve_run, row_recipe
from multilab.training.model import (
    CurveHook,
    check_finite_weights,
    hidden_layers,
    load_model,
    selected_logits,
)
from multilab.training.model_dir import (
    DONE_FILE,
    TRAIN_LOG,
    check_weights,
    data_fingerprint,
    model_fingerprint,
    read_done,
)
from multilab.training.run_tracking import seed_run_name

log = logging.getLogger(__name__)

PERPLEXITY_REPLACEMENT = (1.0, 0.0, 0.0, 0.0)  # every selected token becomes [MASK]

#: called once a part of an evaluation is done, with the part's name
PartDone = Callable[[str], None]


def _no_progress(part: str) -> None:
    """The default :data:`PartDone`: curve points inside training show no bar of their own."""


@contextmanager
def part_progress(total: int, label: str | None) -> Iterator[PartDone]:
    """A bar over an evaluation's ``total`` parts (languages' vectors, perplexities …).

    A standalone evaluation of a real-language model at every layer takes minutes: without a
    bar it looks hung. ``label`` None gives no bar (a curve point inside a training bar)."""
    if label is None:
        yield _no_progress
        return
    bar = progress_bar(total=total, desc=label, unit="part")

    def done(part: str) -> None:
        show_postfix(bar, done=part)
        bar.update()

    try:
        yield done
    finally:
        bar.close()


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def sentence_batches(lengths: torch.Tensor, batch_size: int) -> list[torch.Tensor]:
    """Length-sorted batches (little padding); order is irrelevant to every metric."""
    return list(torch.argsort(lengths, stable=True).split(batch_size))


@torch.no_grad()
def multilinguality(
    model: BertForMaskedLM,
    encoder: InputEncoder,
    sentences: list[torch.Tensor],
    layers: tuple[int, ...],
    batch_size: int,
) -> dict[str, float]:
    """Alignment (P/R/F1) and sentence retrieval (P@1/5/10) at each layer."""
    device = _device(model)
    lengths = torch.tensor([len(s) for s in sentences])
    counts = {layer: [] for layer in layers}
    pooled = {layer: ([], []) for layer in layers}
    for rows in sentence_batches(lengths, batch_size):
        chosen = [sentences[i] for i in rows.tolist()]
        eng = encoder.batch(chosen, [ENGLISH] * len(chosen)).to(device)
        fake = encoder.batch(chosen, [FAKE] * len(chosen)).to(device)
        eng_h = hidden_layers(model, eng.model_inputs(), list(layers))
        fake_h = hidden_layers(model, fake.model_inputs(), list(layers))
        n = lengths[rows].to(device)
        width = int(n.max())
        gold = encoder.gold_alignment(n, width)
        for layer, e, f in zip(layers, eng_h, fake_h, strict=True):
            counts[layer].append(
                metrics.alignment_counts(
                    e[:, 1 : 1 + width].float(), f[:, 1 : 1 + width].float(), n, gold
                )
            )
            pooled[layer][0].append(metrics.mean_pool(e.float(), eng.word_mask))
            pooled[layer][1].append(metrics.mean_pool(f.float(), fake.word_mask))
    results: dict[str, float] = {}
    for layer in layers:
        align = metrics.alignment_score(counts[layer])
        english, fake = pooled[layer]
        retrieval = metrics.retrieval_score(torch.cat(english), torch.cat(fake))
        results |= {
            layer_key("align_p", layer): align.precision,
            layer_key("align_r", layer): align.recall,
            layer_key("align_f1", layer): align.f1,
            layer_key("retrieval_p1", layer): retrieval.p1,
            layer_key("retrieval_p5", layer): retrieval.p5,
            layer_key("retrieval_p10", layer): retrieval.p10,
        }
    return results


@torch.no_grad()
def translation(
    model: BertForMaskedLM, encoder: InputEncoder, layers: tuple[int, ...], batch_size: int
) -> dict[str, float]:
    """Word translation: every vocabulary entry alone as ``[CLS] w [SEP]``, vector of w."""
    device = _device(model)
    words = [torch.tensor([i]) for i in range(encoder.vocab_size)]
    vectors = {layer: ([], []) for layer in layers}
    for start in range(0, len(words), batch_size):
        chunk = words[start : start + batch_size]
        for lang in (ENGLISH, FAKE):
            batch = encoder.batch(chunk, [lang] * len(chunk)).to(device)
            for layer, h in zip(layers, hidden_layers(model, batch.model_inputs(), list(layers)),
                                strict=True):
                vectors[layer][lang].append(h[:, 1].float())
    results = {}
    for layer in layers:
        score = metrics.retrieval_score(torch.cat(vectors[layer][0]), torch.cat(vectors[layer][1]))
        results[layer_key("translation_p1", layer)] = score.p1
        results[layer_key("translation_p5", layer)] = score.p5
    return results


@torch.no_grad()
def perplexity(
    model: BertForMaskedLM,
    encoder: InputEncoder,
    sentences: list[torch.Tensor],
    recipe: Recipe,
    mask_prob: float,
    mask_seed: int,
    batch_size: int,
    replacement: tuple[float, ...] = PERPLEXITY_REPLACEMENT,
) -> float:
    """MLM perplexity (base e): 15% of tokens → [MASK], the same masks for every model.

    ``replacement`` (mask, keep, random, knn) other than the default is for diagnostics only
    (scripts/untrained_ppl_masking.py: a training-style 80/10/10 masking); every table reads
    the all-[MASK] default."""
    device = _device(model)
    examples = training_examples(sentences, recipe, encoder)
    total_nll, count = 0.0, 0
    for number, rows in enumerate(sentence_batches(examples.lengths, batch_size)):
        batch = examples.batch(rows)
        masked = mask_tokens(
            batch, encoder, mask_prob, replacement, seeded_generator(mask_seed, number),
        )
        inputs = {k: v.to(device) for k, v in masked.inputs.items()}
        logits = selected_logits(model, inputs, masked.selected.to(device))
        nll, n = metrics.masked_nll(logits.float(), masked.labels.to(device))
        total_nll += nll
        count += n
    return metrics.perplexity(total_nll, count)


@torch.no_grad()
def verse_vectors(
    model: BertForMaskedLM, encoder: InputEncoder, verses: list[torch.Tensor], language: int,
    layers: tuple[int, ...], batch_size: int,
) -> dict[int, torch.Tensor]:
    """Mean-pooled vectors of one language's verses at each layer, row i = verse i."""
    device = _device(model)
    lengths = torch.tensor([len(v) for v in verses])
    pooled: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
    order = []
    for rows in sentence_batches(lengths, batch_size):
        chosen = [verses[i] for i in rows.tolist()]
        batch = encoder.batch(chosen, [language] * len(chosen)).to(device)
        hidden = hidden_layers(model, batch.model_inputs(), list(layers))
        for layer, h in zip(layers, hidden, strict=True):
            pooled[layer].append(metrics.mean_pool(h.float(), batch.word_mask).cpu())
        order.append(rows)
    back = torch.argsort(torch.cat(order))  # sorted batches → verse order
    return {layer: torch.cat(parts)[back] for layer, parts in pooled.items()}


def verse_metrics(
    model: BertForMaskedLM, encoder: InputEncoder, lay: Layout,
    dev: list[list[torch.Tensor]], train: list[list[torch.Tensor]], run: RunConfig,
    layers: tuple[int, ...], part_done: PartDone = _no_progress,
) -> dict[str, float]:
    """Real languages: verse retrieval P@1 of every ordered pair at each layer (gold: the
    verse id), each language's mean and the overall mean (``retrieval_p1.l8`` as for
    English + Fake-English); MLM perplexity per language and over all of them.

    Word alignment, word translation and μ need word-level gold, which real languages do not
    have: they are not computed (the report says so). A one-language study (Conneau et al. 2020 §5's
    monolingual models) has no pair to retrieve: perplexity only. ``part_done`` hears of each
    of the :func:`verse_parts` parts as it ends.
    """
    ev, names = run.study.evaluate, [metric_name(key) for key in lay.keys]
    retrieved = layers if has_retrieval(len(names)) else ()
    by_layer: dict[int, dict[str, torch.Tensor]] = {layer: {} for layer in retrieved}
    for language, (name, verses) in enumerate(zip(names, dev, strict=True) if retrieved else ()):
        for layer, vectors in verse_vectors(model, encoder, verses, language, retrieved,
                                            ev.batch_size).items():
            by_layer[layer][name] = vectors
        part_done(f"vectors {name}")
    results: dict[str, float] = {}
    for layer in retrieved:
        matrix = verse_retrieval.retrieval_matrix(by_layer[layer])
        key = layer_key("retrieval_p1", layer)
        results[key] = verse_retrieval.overall(matrix)
        results |= {f"{key}.{name}": value
                    for name, value in verse_retrieval.per_language(matrix).items()}
        results |= {f"{key}.{a}-{b}": value for (a, b), value in matrix.items()}
    mask_prob, seed = run.study.train.mask_prob, ev.mask_seed
    # train: the verses each language was trained on (its share under no-parallel; every
    # line of a user corpus, which no-parallel leaves whole); dev: all
    trained = _parallel(run.recipe) if run.study.user_corpora else run.recipe
    splits = (("train", train, trained), ("dev", dev, _parallel(run.recipe)))
    for split, verses, recipe in splits:
        every = training_examples([], recipe, encoder, verses)
        of_language = torch.tensor(every.languages)
        total_nll, total_count = 0.0, 0
        for language, name in enumerate(names):
            keep = (of_language == language).nonzero()[:, 0]
            examples = Examples([every.encoded[i] for i in keep.tolist()],
                                [language] * len(keep), every.lengths[keep],
                                attend_padding=every.attend_padding)
            nll, count = _masked_nll(model, encoder, examples, mask_prob, seed, ev.batch_size)
            results[f"ppl_{split}.{name}"] = metrics.perplexity(nll, count)
            total_nll, total_count = total_nll + nll, total_count + count
            part_done(f"ppl_{split} {name}")
        results[f"ppl_{split}"] = metrics.perplexity(total_nll, total_count)
    return results


def has_retrieval(languages: int) -> bool:
    """Verse retrieval needs a pair of languages; a monolingual study has perplexity only
    (one rule for :func:`verse_metrics` and the count of its parts)."""
    return languages > 1


def verse_parts(languages: int) -> int:
    """How many parts :func:`verse_metrics` reports: each language's vectors (where there is
    a pair to retrieve), then its train and dev perplexity."""
    return (languages if has_retrieval(languages) else 0) + 2 * languages


@torch.no_grad()
def _masked_nll(model: BertForMaskedLM, encoder: InputEncoder, examples: Examples,
                mask_prob: float, mask_seed: int, batch_size: int) -> tuple[float, int]:
    """Summed NLL and count of 15% masked tokens (the masks of :func:`perplexity`)."""
    device = _device(model)
    total_nll, count = 0.0, 0
    for number, rows in enumerate(sentence_batches(examples.lengths, batch_size)):
        masked = mask_tokens(examples.batch(rows), encoder, mask_prob, PERPLEXITY_REPLACEMENT,
                             seeded_generator(mask_seed, number))
        inputs = {k: v.to(device) for k, v in masked.inputs.items()}
        logits = selected_logits(model, inputs, masked.selected.to(device))
        nll, n = metrics.masked_nll(logits.float(), masked.labels.to(device))
        total_nll += nll
        count += n
    return total_nll, count


def evaluate_model(
    model: BertForMaskedLM,
    run: RunConfig,
    dev_sentences: int | None = None,
    train_sentences: int | None = None,
    progress: str | None = None,
) -> dict[str, float]:
    """All metrics of one model on the dev corpus (+ train perplexity); ``progress`` names a
    bar over its parts (None: no bar, as for curve points inside training)."""
    cfg = run.study
    ev = cfg.evaluate
    layers = resolve_layers(ev.layers, model.config.num_hidden_layers)
    if max(layers) > model.config.num_hidden_layers:
        raise UserError(
            f"evaluate.layers={list(layers)} but the model has "
            f"{model.config.num_hidden_layers} layers (valid: 0-{model.config.num_hidden_layers}"
            " or 'all')"
        )
    if cfg.verses:
        return _evaluate_verses(model, run, layers, dev_sentences or ev.dev_sentences,
                                train_sentences, progress)
    tokenizer = load_tokenizer(cfg.paths.vocab)
    encoder = InputEncoder(run.recipe, len(tokenizer), cfg.train.max_length)
    dev_text = dev_lines(cfg.paths.corpora / "dev.txt", dev_sentences or ev.dev_sentences)
    train_lines = training_lines(cfg)
    if train_sentences:
        train_lines = train_lines[:train_sentences]
    dev, _ = tokenize_lines(dev_text, tokenizer, encoder)
    train, _ = tokenize_lines(train_lines, tokenizer, encoder)
    was_training = model.training
    model.eval()
    started = time.perf_counter()
    mask_prob, seed = cfg.train.mask_prob, ev.mask_seed
    with part_progress(4, progress) as part_done:
        results = multilinguality(model, encoder, dev, layers, ev.batch_size)
        part_done("alignment, retrieval")
        results |= translation(model, encoder, layers, ev.batch_size)
        part_done("translation")
        if all(key in results for key in MU_PARTS):  # layers 0 and 8 evaluated
            results["mu"] = metrics.multilinguality_score(*(results[key] for key in MU_PARTS))
        results["ppl_train"] = perplexity(
            model, encoder, train, run.recipe, mask_prob, seed, ev.batch_size
        )
        part_done("ppl_train")
        results["ppl_dev"] = perplexity(model, encoder, dev, _parallel(run.recipe), mask_prob,
                                        seed, ev.batch_size)
        part_done("ppl_dev")
    if run.recipe.language_positions:  # Figures 5 and 8: the position embeddings' diagonal
        results |= metrics.position_diagonal(
            model.bert.embeddings.position_embeddings.weight, cfg.train.max_length)
    results["eval_seconds"] = time.perf_counter() - started
    results["eval_sentences"] = len(dev)
    model.train(was_training)
    return results


def _evaluate_verses(model: BertForMaskedLM, run: RunConfig, layers: tuple[int, ...],
                     wanted: int, train_verses: int | None,
                     progress: str | None = None) -> dict[str, float]:
    """:func:`verse_metrics` on the first ``wanted`` dev verses (+ train perplexity)."""
    cfg = run.study
    lay = layout(cfg)
    encoder = InputEncoder(run.recipe, lay.sizes[0], cfg.train.max_length, lay.offsets,
                           lay.total)
    dev, _ = tokenized_verses(cfg, lay, "dev", wanted, cfg.train.max_length)
    if len(dev[0]) < wanted:
        raise UserError(
            f"dev corpus {cfg.paths.corpora / 'dev.txt'} has {len(dev[0])} verses but the "
            f"evaluation needs {wanted} (evaluate.dev_sentences / curve_sentences): rebuild it "
            f"with corpus.dev_sentences >= {wanted} or lower those"
        )
    limit = train_verses or cfg.train.max_train_sentences
    if train_verses and cfg.train.max_train_sentences:
        limit = min(train_verses, cfg.train.max_train_sentences)
    train, _ = tokenized_verses(cfg, lay, "train", limit, cfg.train.max_length)
    was_training = model.training
    model.eval()
    started = time.perf_counter()
    with part_progress(verse_parts(len(dev)), progress) as part_done:
        results = verse_metrics(model, encoder, lay, dev, train, run, layers, part_done)
    results["eval_seconds"] = time.perf_counter() - started
    results["eval_sentences"] = len(dev[0])
    model.train(was_training)
    return results


def dev_lines(path: Path, wanted: int) -> list[str]:
    """The first ``wanted`` dev sentences; fewer is an error, not a smaller evaluation.

    Retrieval picks the twin of each sentence among all the others: P@1 over 200 candidates
    and over 10000 are different numbers, so models evaluated on unequal dev sets must not
    meet in one table.
    """
    lines = read_lines(path)
    if len(lines) < wanted:
        raise UserError(
            f"dev corpus {path} has {len(lines)} sentences but the evaluation needs {wanted} "
            "(evaluate.dev_sentences / curve_sentences): rebuild it with corpus.dev_sentences "
            f">= {wanted} or lower those"
        )
    return lines[:wanted]


def _parallel(recipe: Recipe) -> Recipe:
    """Dev perplexity always covers both languages of every dev sentence."""
    from dataclasses import replace

    return replace(recipe, parallel=True)


def curve_hook(run: RunConfig) -> CurveHook:
    """Metrics at training curve points: ``curve_sentences`` dev and train sentences."""
    n = run.study.evaluate.curve_sentences

    def hook(step: int, model: BertForMaskedLM) -> dict[str, float]:
        return evaluate_model(model, run, dev_sentences=n, train_sentences=n)

    return hook


def evaluation_device() -> torch.device:
    """A GPU when there is one (the claimed one on a GPU server), else the CPU.

    Evaluation stays in float32 on every device: argmax alignment and nearest-neighbour
    retrieval compare cosine similarities that bf16 would round into ties.
    """
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def check_finite_metrics(results: dict[str, float], model_dir: Path) -> dict[str, float]:
    """``results`` if every metric is a number: a NaN perplexity means broken weights, and
    must neither reach the evaluation JSON nor the model's MLflow run."""
    bad = {key: value for key, value in results.items() if not math.isfinite(value)}
    if bad:
        listed = ", ".join(f"{key}={value}" for key, value in sorted(bad.items()))
        raise UserError(f"evaluating {model_dir} gave non-finite metrics ({listed}); its "
                        "weights are broken: delete it to train again")
    return results


def evaluate_and_record(cfg: Config, model_dir: Path, out: Path | None = None) -> dict:
    """Evaluate a trained model directory; log metrics to its MLflow run; write JSON.

    The tracking store is reached first, so a dead server fails in seconds before any
    work; the JSON is written last, so a failure leaves the previous results untouched. A
    run the store no longer holds (mlruns/ deleted) is re-created from ``multilab.json``. A
    run nested under a study row's parent (``multilab study run``) updates the parent's
    mean ± std over the row's seeds: no report stage follows a study's seeds.
    """
    done = read_done(model_dir)
    if done is None:
        raise UserError(
            f"{model_dir} is not a finished multilab model (no {DONE_FILE}); train it first"
        )
    run = resolve_run(cfg, done["modification"], done["seed"])
    run_id = done.get("run_id")
    experiment_id = tracking.connect(cfg.paths, cfg.experiment) if run_id else None
    model = load_model(model_dir)  # an unreadable file: "corrupted checkpoint"
    check_weights(model_dir, done)  # a readable one that changed since training
    check_finite_weights(model.state_dict(), model_dir)
    results = check_finite_metrics(
        evaluate_model(model.to(evaluation_device()), run,
                       progress=f"evaluate {run.modification} s{run.seed}"), model_dir)
    if run_id and experiment_id is not None:
        run_id = _model_run(cfg, run, done, Path(model_dir), experiment_id)
        record_in_mlflow(cfg, run_id, model_dir, results, done.get("steps", 0))
        tracking.summarise_study_row(cfg.paths, run_id)  # a study row's mean ± std, if one
    record = model_record(cfg, run, run_id, done) | {"metrics": results}
    out = out or cfg.paths.eval_file(run.modification, run.seed)
    write_json(out, record)
    return record


def model_record(cfg: Config, run: RunConfig, run_id: str | None, done: dict) -> dict:
    """What every per-model JSON (evaluation, downstream) starts with: which model it is."""
    return {
        "modification": run.modification,
        "paper_id": run.paper_id,
        "seed": run.seed,
        "profile": cfg.profile,
        "run_id": run_id,
        "fingerprint": done["fingerprint"],
    }


def _model_run(cfg: Config, run: RunConfig, done: dict, model_dir: Path,
               experiment_id: str) -> str:
    """The MLflow run of a finished model: its own, or (when the store lost it) one
    re-created from ``multilab.json`` and ``train_log.csv`` with the same tags, params (when
    the current configuration still gives the model's fingerprint) and loss curve. Curve
    points measured during training are not in the model directory and stay lost."""
    if tracking.run_exists(cfg.paths, done["run_id"]):
        return done["run_id"]
    same = model_fingerprint(run) == done["fingerprint"]
    rows = []
    log_file = model_dir / TRAIN_LOG
    if log_file.exists():
        with log_file.open(encoding="utf-8") as handle:
            rows = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(handle)]
    tags = {"modification": run.modification, "seed": run.seed, "paper_id": run.paper_id or "",
            "profile": done.get("profile", cfg.profile), "fingerprint": done["fingerprint"],
            "study": cfg.experiment}
    if same:
        tags["data_hash"] = data_fingerprint(run)
    row = cfg.row_of(run.modification)
    parent = tracking.group_run(experiment_id, run.modification,
                                {"paper_id": run.paper_id or "", "profile": tags["profile"]},
                                row=row, params=row_recipe(cfg, run.modification))
    tags |= tracking.parent_tags(parent)  # nested under its modification, as train nests it
    tags |= {tracking.ROW_TAG: row} if row else {}
    sizes = {key: done[key] for key in ("train_examples", "truncated_sentences", "world_size")
             if isinstance(done.get(key), int | float)}  # params, as train logs them
    if isinstance(done.get("steps"), int):
        sizes["total_steps"] = done["steps"]
    restored = tracking.restore_run(
        experiment_id, done["run_id"], name=seed_run_name(run), tags=tags,
        params=(run.as_params() if same else {}) | sizes, metrics={},
        step_rows=[row for row in rows if "step" in row], step_keys={TRAIN_LOSS: "loss"},
        artifact=log_file,
    )
    log.warning("run %s of %s was not in the tracking store: re-created as %s from %s",
                done["run_id"], model_dir, restored, DONE_FILE)
    return restored


def record_in_mlflow(cfg: Config, run_id: str, model_dir: Path, results: dict[str, float],
                     step: int) -> None:
    """The final metrics on the model's run and on its logged model, once (a re-evaluation
    adds no duplicate point); the model itself as an MLflow transformers model, once; then
    the ``evaluated`` tag, and what the results say of the evaluation itself
    (:data:`EVALUATION_FACTS`) as tags: the time under ``multilab.sys.`` (bookkeeping)."""
    model_id = tracking.logged_model(cfg.paths, run_id)
    if model_id is None:
        model_id = tracking.log_model(cfg.paths, run_id, model_dir, step)
    metrics = {key: value for key, value in results.items() if key not in EVALUATION_FACTS}
    tracking.log_final_metrics(cfg.paths, run_id, metrics, step, model_id=model_id)
    facts = {"eval_sentences": f"{results.get('eval_sentences', 0):.0f}",
             tracking.SYS + "eval_seconds": f"{results.get('eval_seconds', 0):.1f}"}
    tracking.set_tags(cfg.paths, run_id, facts | {"evaluated": "true"})

