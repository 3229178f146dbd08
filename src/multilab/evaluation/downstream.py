"""The zero-shot downstream task (one interface for any task).

The task is ``downstream.task`` of :mod:`multilab.data.tasks`: the book groups of
:mod:`multilab.data.book_groups` (the default, the lab's stand-in for Dufter & Schütze 2020 §5's
XNLI) or XNLI itself (:mod:`multilab.data.xnli`, sentence pairs). A finished pretrained model is
loaded as ``AutoModelForSequenceClassification`` (one output per label of the task; the
encoder's weights are the pretrained ones, the pooler and the classifier are new,
initialised from the seed), fine-tuned on the *first* language's train split with Dufter & Schütze
2020 §5's recipe (3 epochs, batch 32, lr 2e-5; ``downstream`` in params.yaml), the epoch with the
best first-language dev accuracy is kept, and that model classifies the test split in
**every** language of the study: the first language is the in-language score, every other
one is zero-shot. Beside them, the majority baseline (always the most frequent train label).
Every task is scored under the same metric names (``downstream/acc.<language>`` …); the
task's name is in the JSON record and the run's ``downstream.task`` tag.

Inputs are built as in pretraining (:class:`~multilab.data.inputs.InputEncoder`): a
language's text is tokenized by its vocabulary and encoded as the study's language number
``k`` (a pair by ``encode_pair``), so a modification (lang-pos, shift-special, inv-order)
applies exactly as the model was trained, and Fake-English is the ``fake`` transform's
id-shifted input ids of the English text, not a text of its own. Which languages a model
can read is decided in one place, :func:`language_inputs`.

What a number means, compared with XNLI: docs/downstream.md.

Cost on a CPU: dynamic padding, and batches of similar length (each epoch's shuffled order
is cut into chunks of 50 batches sorted by length, as Hugging Face's ``group_by_length``);
evaluation in length-sorted batches. Deterministic given the seed on a fixed thread count.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import (
    AutoModelForSequenceClassification,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    get_linear_schedule_with_warmup,
)

from multilab import tracking
from multilab.config import Config, DownstreamConfig, RunConfig
from multilab.data.classification import (
    SPLITS,
    Baseline,
    Example,
    Scores,
    classification_scores,
    majority_baseline,
)
from multilab.data.inputs import InputEncoder, collate
from multilab.data.layout import layout
from multilab.data.tasks import DEFAULT_TASK, get_task
from multilab.data.tokenizers import SPECIAL_TOKENS
from multilab.data.vocab import load_tokenizer
from multilab.errors import UserError
from multilab.evaluation import mds_transfer
from multilab.evaluation.evaluate import _model_run, evaluation_device, model_record
from multilab.evaluation.mean_shift import shifted
from multilab.files import write_json
from multilab.lab.languages import Language, language_keys, language_label
from multilab.progress import progress_bar, quiet_transformers, show_postfix
from multilab.resolve import resolve_run
from multilab.training import language_layers
from multilab.training.model import check_finite_weights
from multilab.training.model_dir import DONE_FILE, check_weights, read_done

log = logging.getLogger(__name__)

PREFIX = "downstream/"
#: ``--mds`` (Liu et al. 2020b §4.3): its own metric names, so the stage's plain scores stay as they
#: are
MDS_PREFIX = "downstream_mds/"
#: Batches per length-sorted chunk of a fine-tuning epoch (Hugging Face's mega-batch).
CHUNK_BATCHES = 50
#: Measurements of the run itself, not of the model: MLflow tags under ``multilab.sys.``
#: (a timing among the metrics would be offered by Compare as a result).
TIMINGS = (f"{PREFIX}seconds", f"{MDS_PREFIX}seconds")
LANGUAGES_TAG = "downstream.languages"
#: which task the run's ``downstream/…`` metrics are of (``data/tasks.py``)
TASK_TAG = "downstream.task"


# --------------------------------------------------------------------------- languages


def study_languages(cfg: Config) -> tuple[Language, ...]:
    """The languages of the study (``languages`` of params.yaml): the first is fine-tuned
    on and tested in-language, every other one is tested zero-shot."""
    return cfg.language_list


@dataclass(frozen=True)
class LanguageInput:
    """How the verses of one language become model inputs: the tokenizer that cuts them and
    the study's language number the encoder gives them (block of ids, positions)."""

    language: Language
    tokenizer: PreTrainedTokenizerBase
    number: int


def language_inputs(cfg: Config, languages: Sequence[Language]) -> list[LanguageInput]:
    """What the study's models can read, per language, or one line saying why not.

    A language gets the tokenizer and language number (block of ids, positions) it was
    pretrained with (:func:`multilab.data.layout.layout`): any of the study's languages, in
    any order, so ``--languages s,3`` fine-tunes on German and tests English zero-shot. In
    the English + Fake-English setup that is ``[3]`` or ``[3, fake]`` (one vocabulary; fake is
    its id-shifted copy).
    """
    study = cfg.language_list
    lay = layout(cfg)
    listed = ", ".join(language_keys(tuple(languages), study[0].edition))
    numbers = {lang: number for number, lang in enumerate(study)}
    first = cfg.corpus.train_edition
    readable = (f"[{first}] or [{first}, fake]" if not cfg.verses
                else f"the study's [{', '.join(cfg.languages)}], in any order")
    tokenizers = {name: load_tokenizer(cfg.paths.vocab, name) for name in set(lay.tokenizers)}
    inputs = []
    for place, lang in enumerate(languages):
        number = numbers.get(lang)
        if not cfg.verses and number is not None and number != place:
            number = None  # one vocabulary: English must come first, its fake copy second
        if number is None:
            raise UserError(
                f"language {lang.key(study[0].edition)!r} ({lang.name}) at place "
                f"{place + 1} of [{listed}] has no vocabulary block in this study's models "
                f"(languages [{', '.join(cfg.languages)}]); valid: {readable}"
            )
        inputs.append(LanguageInput(lang, tokenizers[lay.tokenizers[number]], number))
    return inputs


def input_encoder(cfg: Config, run: RunConfig) -> InputEncoder:
    """The encoder of pretraining: every language's block at its offset."""
    lay = layout(cfg)
    return InputEncoder(run.recipe, lay.sizes[0], cfg.train.max_length, lay.offsets,
                        lay.total)


# --------------------------------------------------------------------------- data


@dataclass
class Encoded:
    """One split of one language as model inputs: encoded examples and their labels."""

    encoded: list[tuple[torch.Tensor, ...]]
    labels: torch.Tensor
    languages: list[int]
    truncated: int

    @property
    def lengths(self) -> torch.Tensor:
        return torch.tensor([len(e[0]) for e in self.encoded])

    def __len__(self) -> int:
        return len(self.encoded)

    def batch(self, rows: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        idx = rows.tolist()
        batch = collate([self.encoded[i] for i in idx], [self.languages[i] for i in idx])
        return batch.model_inputs(), self.labels[rows]


def encode_examples(examples: Sequence[Example], how: LanguageInput, encoder: InputEncoder,
                    max_length: int) -> Encoded:
    """Examples → ``[CLS] A [SEP]`` inputs of the language, or ``[CLS] A [SEP] B [SEP]`` for
    an example with a ``text_pair``, cut to ``max_length`` (a pair: the longer text first)."""
    ids = how.tokenizer([e.text for e in examples], add_special_tokens=False)["input_ids"]
    paired = [i for i, e in enumerate(examples) if e.text_pair is not None]
    seconds = dict(zip(paired, how.tokenizer([examples[i].text_pair for i in paired],
                                             add_special_tokens=False)["input_ids"],
                       strict=True)) if paired else {}
    limit = max_length - 2
    encoded, truncated = [], 0
    for i, row in enumerate(ids):
        if i in seconds:
            second = seconds[i]
            encoded.append(encoder.encode_pair(torch.tensor(row, dtype=torch.long),
                                               torch.tensor(second, dtype=torch.long),
                                               how.number, max_length))
            truncated += len(row) + len(second) > max_length - 3
        else:
            encoded.append(encoder.encode(torch.tensor(row[:limit], dtype=torch.long),
                                          how.number))
            truncated += len(row) > limit
    return Encoded(encoded, torch.tensor([e.label for e in examples], dtype=torch.long),
                   [how.number] * len(examples), truncated)


def sample(examples: dict[Language, list[Example]], limit: int | None, seed: int
           ) -> dict[Language, list[Example]]:
    """At most ``limit`` examples, drawn by ``random.Random(seed)``, the same ids in every
    language, kept in the task's order (all of them when ``limit`` is None or not smaller)."""
    first = next(iter(examples.values()))
    if limit is None or limit >= len(first):
        return examples
    keep = sorted(random.Random(seed).sample(range(len(first)), limit))
    return {lang: [rows[i] for i in keep] for lang, rows in examples.items()}


def task_data(cfg: Config, languages: Sequence[Language]
              ) -> dict[str, dict[Language, list[Example]]]:
    """The splits of ``downstream.task`` for ``languages``, capped as ``downstream`` says
    (``max_train_verses``, ``max_test_verses``: examples of any task)."""
    settings = cfg.downstream
    examples = get_task(settings.task).examples(cfg, languages)
    caps = {"train": settings.max_train_verses, "dev": settings.max_test_verses,
            "test": settings.max_test_verses}
    return {split: sample(examples[split], caps[split], settings.split_seed + number)
            for number, split in enumerate(SPLITS)}


# --------------------------------------------------------------------------- fine-tuning


def load_classifier(model_dir: Path, seed: int,
                    num_labels: int = len(get_task(DEFAULT_TASK).labels)) -> PreTrainedModel:
    """The pretrained checkpoint with a new ``num_labels``-way head (default: the book
    groups'), initialised from ``seed``."""
    torch.manual_seed(seed)
    try:
        with quiet_transformers():
            return language_layers.attach_saved(AutoModelForSequenceClassification.from_pretrained(
                str(model_dir), num_labels=num_labels, local_files_only=True), model_dir)
    except Exception as err:  # corrupt files surface as many different exception types
        raise UserError(f"{model_dir} holds a corrupted checkpoint: {err}") from err


def epoch_batches(lengths: torch.Tensor, batch_size: int, generator: torch.Generator
                  ) -> list[torch.Tensor]:
    """One epoch's batches: a seeded shuffle, cut into chunks of :data:`CHUNK_BATCHES`
    batches, each chunk sorted by length (little padding), the batches in seeded order."""
    order = torch.randperm(len(lengths), generator=generator)
    batches: list[torch.Tensor] = []
    for chunk in order.split(batch_size * CHUNK_BATCHES):
        by_length = chunk[torch.argsort(lengths[chunk], stable=True)]
        batches.extend(by_length.split(batch_size))
    shuffled = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in shuffled]


def _optimizer(model: torch.nn.Module, settings: DownstreamConfig) -> torch.optim.AdamW:
    """AdamW without decay on biases and LayerNorm weights (as BERT's fine-tuning)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(param)
    groups = [{"params": decay, "weight_decay": settings.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=settings.lr)


@torch.no_grad()
def predict(model: PreTrainedModel, data: Encoded, batch_size: int,
            bar: tqdm | None = None) -> list[int]:
    """The predicted label of every example, in the data's order (length-sorted batches)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    predicted = torch.empty(len(data), dtype=torch.long)
    for rows in torch.argsort(data.lengths, stable=True).split(batch_size):
        inputs, _ = data.batch(rows)
        logits = model(**{k: v.to(device) for k, v in inputs.items()}).logits
        predicted[rows] = logits.argmax(dim=-1).cpu()
        if bar is not None:
            bar.update(len(rows))
    model.train(was_training)
    return predicted.tolist()


@dataclass
class FineTuned:
    """What fine-tuning chose: the epoch (1-based) with the best dev accuracy (ties: the
    earlier) and the dev scores of every epoch."""

    epoch: int
    dev_accuracy: list[float]
    dev_macro_f1: list[float]
    train_loss: list[float]


def fine_tune(model: PreTrainedModel, train: Encoded, dev: Encoded,
              settings: DownstreamConfig, seed: int, bar: tqdm) -> FineTuned:
    """Fine-tune ``model`` in place and leave it at the selected epoch's weights."""
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    steps_per_epoch = math.ceil(len(train) / settings.batch_size)
    total = steps_per_epoch * settings.epochs
    optimizer = _optimizer(model, settings)
    scheduler = get_linear_schedule_with_warmup(optimizer, round(settings.warmup * total),
                                                total)
    lengths = train.lengths
    best: dict[str, torch.Tensor] | None = None
    result = FineTuned(0, [], [], [])
    for epoch in range(1, settings.epochs + 1):
        model.train()
        losses = []
        for rows in epoch_batches(lengths, settings.batch_size, generator):
            inputs, labels = train.batch(rows)
            logits = model(**{k: v.to(device) for k, v in inputs.items()}).logits
            loss = F.cross_entropy(logits.float(), labels.to(device))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
            bar.update(len(rows))
            show_postfix(bar, epoch=epoch, loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
        scores = classification_scores(predict(model, dev, settings.batch_size * 4, bar),
                                       dev.labels.tolist(), model.config.num_labels)
        result.train_loss.append(sum(losses) / len(losses))
        result.dev_accuracy.append(scores.accuracy)
        result.dev_macro_f1.append(scores.macro_f1)
        if best is None or scores.accuracy > max(result.dev_accuracy[:-1]):
            result.epoch = epoch
            best = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if best is not None and result.epoch != settings.epochs:
        model.load_state_dict(best)
    return result


# --------------------------------------------------------------------------- the task


def input_batches(data: Encoded, batch_size: int) -> list[dict[str, torch.Tensor]]:
    """The model inputs of ``data`` in length-sorted batches (the order does not matter to a
    mean over tokens, the padding does)."""
    return [data.batch(rows)[0]
            for rows in torch.argsort(data.lengths, stable=True).split(batch_size)]


def downstream_model(cfg: Config, model_dir: Path, run: RunConfig,
                     languages: Sequence[Language], progress: bool = True, mds: bool = False,
                     data: dict[str, dict[Language, list[Example]]] | None = None
                     ) -> dict[str, Any]:
    """Fine-tune a finished model on the first language and test it in every language.

    Returns the record the JSON holds: the task, per-language test scores, the majority
    baseline, the selected epoch and the flat ``metrics`` logged to MLflow. ``data``: the
    task's splits when already read (:func:`task_data`). ``mds``: Liu et al. 2020b §4.3's variant
    (:mod:`multilab.evaluation.mds_transfer`): the lower half frozen while fine-tuning,
    every other language tested with and without the mean difference shift.
    """
    settings = cfg.downstream
    task = get_task(settings.task)
    seed = run.seed if settings.seed is None else settings.seed
    started = time.perf_counter()
    inputs = language_inputs(cfg, languages)
    data = task_data(cfg, languages) if data is None else data
    encoder = input_encoder(cfg, run)
    split = _encoded_splits(data, inputs, encoder, settings.max_length, mds)
    train, dev, tests, devs = split.train, split.dev, split.tests, split.devs
    model = _classifier(cfg, model_dir, run, seed, len(task.labels), encoder)
    layer = _mds_layer(model, settings) if mds else 0
    name = f"downstream{' mds' if mds else ''} {run.modification} s{run.seed}"
    work = settings.epochs * (len(train) + len(dev)) + sum(len(t) for t in tests.values())
    work += sum(len(settings.mds_alphas) * len(d) + len(tests[lang]) for lang, d in devs.items())
    with progress_bar(total=work, desc=name, unit="example", disable=not progress) as bar:
        tuned = fine_tune(model, train, dev, settings, seed, bar)
        show_postfix(bar, epoch=tuned.epoch, testing=len(tests))
        scores = {lang: classification_scores(predict(model, test, settings.batch_size * 4,
                                                      bar), test.labels.tolist(),
                                              len(task.labels))
                  for lang, test in tests.items()}
        shifts = _shifted_transfer(model, layer, settings, encoder, dev, devs, tests, scores,
                                   bar)
    first = inputs[0].language
    baseline = majority_baseline(train.labels.tolist(), tests[first].labels.tolist(),
                                 len(task.labels))
    labels = {lang: language_label(lang, languages) for lang in languages}
    prefix = MDS_PREFIX if mds else PREFIX
    metrics = _transfer_metrics(prefix, labels, scores, shifts, baseline, tuned, started)
    bad = {k: v for k, v in metrics.items() if not math.isfinite(v)}
    if bad:
        raise UserError(f"fine-tuning {model_dir} gave non-finite metrics {bad}; lower "
                        "downstream.lr or check the model")
    return {
        "task": task.name,
        "languages": language_keys(tuple(languages), cfg.language_list[0].edition),
        "labels": [labels[lang] for lang in languages],
        "settings": asdict(settings) | {
            "seed": seed,
            "task_path": None if settings.task_path is None else str(settings.task_path)},
        "verses": {"train": len(train), "dev": len(dev), "test": len(tests[first])},
        "truncated": {"train": train.truncated, "dev": dev.truncated,
                      "test": tests[first].truncated},
        "majority": {"label": task.labels[baseline.label], "accuracy": baseline.accuracy,
                     "macro_f1": baseline.macro_f1},
        "test": {labels[lang]: asdict(score) for lang, score in scores.items()},
        "epochs": {"selected": tuned.epoch, "dev_accuracy": tuned.dev_accuracy,
                   "dev_macro_f1": tuned.dev_macro_f1, "train_loss": tuned.train_loss},
        "metrics": metrics,
    } | ({"mds": {"layer": layer, "frozen": f"embeddings and layers 1-{layer}",
                  "alphas": list(settings.mds_alphas),
                  "languages": {labels[lang]: asdict(shift) for lang, shift in shifts.items()}}}
         if mds else {})


@dataclass
class _Splits:
    """The task's splits encoded: fine-tuning (train, dev) in the first language, a test
    split in each, and (mds only) the other languages' dev splits the shift is chosen on."""

    train: Encoded
    dev: Encoded
    tests: dict[Language, Encoded]
    devs: dict[Language, Encoded]


def _encoded_splits(data: dict[str, dict[Language, list[Example]]],
                    inputs: Sequence[LanguageInput],
                    encoder: InputEncoder, max_length: int, mds: bool) -> _Splits:
    first = inputs[0]
    train = encode_examples(data["train"][first.language], first, encoder, max_length)
    dev = encode_examples(data["dev"][first.language], first, encoder, max_length)
    tests = {how.language: encode_examples(data["test"][how.language], how, encoder,
                                           max_length) for how in inputs}
    devs = {how.language: encode_examples(data["dev"][how.language], how, encoder,
                                          max_length) for how in inputs[1:]} if mds else {}
    return _Splits(train, dev, tests, devs)


def _classifier(cfg: Config, model_dir: Path, run: RunConfig, seed: int, labels: int,
                encoder: InputEncoder) -> PreTrainedModel:
    """The pretrained model with a fresh classifier head, on the evaluation device, its
    language-specific parts frozen; refused when its weights are not finite or it has fewer
    token ids than the languages' inputs."""
    model = load_classifier(model_dir, seed, labels)
    # Conneau et al. 2020: the language-specific parts stay as pretrained (sep-L1-<n>'s copies;
    # sep-emb's embeddings)
    language_layers.freeze_language_specific(model, run.recipe.separate_embeddings)
    check_finite_weights(model.state_dict(), model_dir)  # NaN weights: NaN scores
    model = model.to(evaluation_device())
    if model.config.vocab_size < encoder.total_size:
        raise UserError(f"{model_dir} has {model.config.vocab_size} token ids, fewer than the "
                        f"{encoder.total_size} of languages [{', '.join(cfg.languages)}]")
    return model


def _mds_layer(model: PreTrainedModel, settings: DownstreamConfig) -> int:
    """The layer the mean difference shift acts at; the layers below it frozen."""
    try:
        layer = mds_transfer.shift_layer(settings.mds_layer, model.config.num_hidden_layers)
    except ValueError as err:
        raise UserError(str(err)) from None
    mds_transfer.freeze_below(model, layer)
    return layer


def _transfer_metrics(prefix: str, labels: dict[Language, str], scores: dict[Language, Scores],
                      shifts: dict[Language, mds_transfer.ShiftResult], baseline: Baseline,
                      tuned: FineTuned, started: float) -> dict[str, float]:
    """The flat metrics MLflow logs: each language's scores (and shifted ones), the majority
    baseline, the selected epoch's dev accuracy, the time taken."""
    metrics: dict[str, float] = {}
    for lang, score in scores.items():
        metrics[f"{prefix}acc.{labels[lang]}"] = score.accuracy
        metrics[f"{prefix}f1.{labels[lang]}"] = score.macro_f1
    for lang, shift in shifts.items():
        metrics[f"{prefix}acc_shifted.{labels[lang]}"] = shift.test_shifted
        metrics[f"{prefix}alpha.{labels[lang]}"] = shift.alpha
    return metrics | {
        f"{prefix}majority_acc": baseline.accuracy,
        f"{prefix}majority_f1": baseline.macro_f1,
        f"{prefix}dev_acc": tuned.dev_accuracy[tuned.epoch - 1],
        f"{prefix}epoch": tuned.epoch,
        f"{prefix}seconds": time.perf_counter() - started,
    }


def _shifted_transfer(model: PreTrainedModel, layer: int, settings: DownstreamConfig,
                      encoder: InputEncoder, first_dev: Encoded, devs: dict[Language, Encoded],
                      tests: dict[Language, Encoded], unshifted: dict[Language, Scores],
                      bar: tqdm) -> dict[Language, mds_transfer.ShiftResult]:
    """``--mds``: each other language's test accuracy with the shift chosen on its dev set,
    beside the unshifted one the plain test already measured."""
    size = settings.batch_size * 4
    special = [offset + i for offset in set(encoder.offsets) for i in range(len(SPECIAL_TOKENS))]
    first_batches = input_batches(first_dev, size)

    def accuracy(data: Encoded, shift: torch.Tensor, alpha: float) -> float:
        with shifted(model, layer, alpha * shift):
            predicted = predict(model, data, size, bar)
        return classification_scores(predicted, data.labels.tolist(),
                                     model.config.num_labels).accuracy

    results = {}
    for lang, dev in devs.items():
        shift = mds_transfer.language_shift(model, layer, first_batches,
                                            input_batches(dev, size), special)
        on_dev = {alpha: accuracy(dev, shift, alpha) for alpha in settings.mds_alphas}
        alpha = mds_transfer.best_alpha(on_dev)
        results[lang] = mds_transfer.ShiftResult(
            {f"{a:g}": value for a, value in sorted(on_dev.items())}, alpha,
            unshifted[lang].accuracy, accuracy(tests[lang], shift, alpha))
    return results


def downstream_and_record(cfg: Config, model_dir: Path, languages: Sequence[Language] | None
                          = None, out: Path | None = None, progress: bool = True,
                          mds: bool = False) -> dict:
    """Run the task on a finished model directory; log to its MLflow run; write the JSON.

    Everything that can be refused is checked before the fine-tune (the languages, the model
    directory and its weights, the task's data, the tracking store); the JSON is written
    last, so a failure leaves the previous results untouched. No run is started: the metrics
    are added to the model's own (finished) run, whose status stays as it was; its tags say
    which languages and which task they are of.
    """
    model_dir = Path(model_dir)
    languages = tuple(languages) if languages is not None else study_languages(cfg)
    language_inputs(cfg, languages)  # an unreadable language: one line, before any work
    done = read_done(model_dir)
    if done is None:
        raise UserError(
            f"{model_dir} is not a finished multilab model (no {DONE_FILE}); train it first"
        )
    run = resolve_run(cfg, done["modification"], done["seed"])
    check_weights(model_dir, done)
    if mds and len(languages) < 2:
        raise UserError("--mds shifts the other languages onto the first; "
                        f"[{', '.join(language_keys(languages))}] has one (valid: two or more)")
    data = task_data(cfg, languages)  # a missing or damaged task file: one line, no store
    run_id = done.get("run_id")
    experiment_id = tracking.connect(cfg.paths, cfg.experiment) if run_id else None
    record = downstream_model(cfg, model_dir, run, languages, progress, mds, data)
    if run_id and experiment_id is not None:
        run_id = _model_run(cfg, run, done, model_dir, experiment_id)
        scores = {key: value for key, value in record["metrics"].items() if key not in TIMINGS}
        tracking.log_final_metrics(cfg.paths, run_id, scores, done.get("steps", 0))
        timings = {tracking.SYS + key: f"{value:.1f}" for key, value
                   in record["metrics"].items() if key in TIMINGS}
        tracking.set_tags(cfg.paths, run_id, {LANGUAGES_TAG: ",".join(record["labels"]),
                                              TASK_TAG: record["task"]} | timings)
    record = model_record(cfg, run, run_id, done) | record
    write_json(out or downstream_path(cfg, run, mds), record)
    return record


def downstream_path(cfg: Config, run: RunConfig, mds: bool = False) -> Path:
    """Where a model's results go: the stage's file, or ``seed<N>-mds.json`` beside it."""
    path = cfg.paths.downstream_file(run.modification, run.seed)
    return path.with_name(f"{path.stem}-mds.json") if mds else path
