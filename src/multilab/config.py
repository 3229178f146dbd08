"""The configuration's schema: one typed, frozen dataclass per section of ``params.yaml``.

:class:`Config` is a study (what ``params.yaml`` + profile say), :class:`RunConfig` one model
of it (+ modification + seed), with the fingerprint that names its weights. Beside the
dataclasses stand the valid range of each field (:data:`RULES`) and the parameters a
fingerprint leaves out, so that whoever adds a field sees at once what else it touches.

How a configuration is made (YAML read, profile and overrides merged, every value checked,
a modification resolved into a :class:`RunConfig`) is :mod:`multilab.resolve`: it needs the
task registry and the parameter count of a BERT, which this module, read by every room of
the package, must not import. This module imports only the lab's registries.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from multilab.lab import languages as langs
from multilab.lab import modifications as mods


@dataclass(frozen=True)
class Paths:
    data: Path = Path("data")
    artifacts: Path = Path("artifacts")
    reports: Path = Path("reports")
    metrics: Path = Path("metrics")
    mlruns: Path = Path("mlruns")
    results: Path = Path("results")  # committed records of every measurement (studies/records)

    @property
    def corpora(self) -> Path:
        return self.artifacts / "corpora"

    @property
    def vocab(self) -> Path:
        return self.artifacts / "vocab"

    @property
    def spaces(self) -> Path:
        return self.artifacts / "spaces"

    @property
    def models(self) -> Path:
        return self.artifacts / "models"

    @property
    def evaluations(self) -> Path:
        return self.artifacts / "eval"

    @property
    def variant(self) -> Path:
        return self.artifacts / "variant"

    @property
    def figures(self) -> Path:
        return self.reports / "figures"

    def model_dir(self, modification: str, seed: int) -> Path:
        """A study model (a ``train`` stage of dvc.yaml writes the same path)."""
        return self.models / mods.slug(modification) / f"seed{seed}"

    def eval_file(self, modification: str, seed: int) -> Path:
        """A study model's evaluation (an ``evaluate`` stage of dvc.yaml writes it)."""
        return self.evaluations / mods.slug(modification) / f"seed{seed}.json"

    @property
    def downstream(self) -> Path:
        return self.artifacts / "downstream"

    def downstream_file(self, modification: str, seed: int) -> Path:
        """A study model's downstream results (a ``downstream`` stage of dvc.yaml writes it)."""
        return self.downstream / mods.slug(modification) / f"seed{seed}.json"

    def variant_model_dir(self, modification: str, seed: int) -> Path:
        """A model trained by ``multilab variant`` because the study has none like it."""
        return self.variant / mods.slug(modification) / f"seed{seed}"

    def variant_eval_file(self, modification: str, seed: int) -> Path:
        return self.variant / "eval" / mods.slug(modification) / f"seed{seed}.json"

    def rebased(self, root: Path) -> Paths:
        """All relative paths made relative to ``root`` (tests run in temp dirs)."""
        return Paths(**{f.name: root / getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class CorpusConfig:
    train_edition: str = "3"
    train_books: tuple[int, int] = (40, 66)
    dev_edition: str = "k"
    dev_books: tuple[int, int] = (1, 39)
    dev_sentences: int = 10000
    split_colons: bool = False  # also split train sentences at ';' and ':' (see README)
    # also split train sentences after ', ' + and/but/for/so/then/because/who/which/that
    # (English only): the paper's sentence-length profile from the same words (the GPU
    # experiments' clause-split corpus)
    split_clauses: bool = False
    export_editions: tuple[str, ...] = ("3", "k")
    #: verse studies: what the languages train on (:data:`TRAIN_SCOPES`): ``nt`` the New
    #: Testament; ``bible`` both testaments less the dev corpus and the downstream task's dev
    #: and test chapters (2–3 times the text per edition)
    train_scope: str = "nt"


@dataclass(frozen=True)
class UserCorpusConfig:
    """A language of the user's own text (Wikipedia samples on the GPU server),
    named in ``corpora:`` and listed in ``languages`` by that name
    (:mod:`multilab.data.user_corpora`). Paths are relative to ``paths.data``, so
    ``data.dvc`` versions the text the models are trained on."""

    iso: str  # ISO 639-1 code of its language: what a task (XNLI) reads it as
    train: str  # a file, or a folder read recursively: one sentence or document a line
    dev: str  # parallel text, line i the same sentence in every corpus of the study
    sentences: int | None = None  # a seeded sample of this many train lines; null: all
    #: or of about this many bytes of UTF-8 text (Dufter & Schütze 2020: 1 GB)
    bytes: int | None = None
    seed: int = 0  # the sample's


@dataclass(frozen=True)
class VocabConfig:
    size: int = 2048
    #: real languages: ``separate`` (a WordPiece per language, disjoint ids: Dufter & Schütze 2020
    #: §5),
    #: ``joint`` (one WordPiece over all of them, shared ids: mBERT-style, K et al. 2020 / Conneau
    #: et al. 2020) or
    #: ``union`` (a WordPiece per language, their union: identical strings share ids; seed
    #: 003's default-anchors)
    mode: str = "separate"
    #: the unit below the word (K et al. 2020 Table 10): ``wordpiece`` (the lab's default), ``word``
    #: (the most frequent words, others [UNK]) or ``char`` (every character of the corpus)
    unit: str = "wordpiece"

    @property
    def shared(self) -> bool:
        """Every language in one block at offset 0 (``joint``, ``union``): shared ids."""
        return self.mode in SHARED_VOCAB_MODES


@dataclass(frozen=True)
class SpacesConfig:
    dim: int = 300
    epochs: int = 5
    min_count: int = 1
    window: int = 5
    char_ngrams: bool = False
    threads: int = 1
    fake_shuffle_seed: int = 1
    knn_k: int | None = None  # neighbours per language; None: the paper's (see knn_neighbours)
    vecmap_seed: int = 0
    vecmap_max_iterations: int = 100
    #: real languages: how VecMap starts. ``none``: fully unsupervised (the paper's);
    #: ``silver``: from half of the silver dictionary the verse alignment induces (a
    #: cross-lingual signal the paper does not use; the other half scores the mapping)
    seed_dictionary: str = "none"


@dataclass(frozen=True)
class TrainConfig:
    epochs: float = 100
    warmup_steps: int = 50
    weight_decay: float = 0.01
    adam_eps: float = 1e-6
    max_length: int = 128
    mask_prob: float = 0.15
    replacement_override: tuple[float, ...] | None = None
    checkpoint_every: int = 500
    log_every: int = 10
    max_train_sentences: int | None = None
    eval_points: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 0.95)
    compile: bool = False
    bucket_chunk: int = 50  # batches per length-sorted chunk (1 = random batches)
    length_pieces: int = 1  # >1: sort each batch by length, run it in this many pieces
    #: >1: ``multilab train`` trains its models in stacks of up to this many, each stack one
    #: batched computation (training/train_stacked.py); 1: one model at a time
    stack: int = 1
    #: how a single model's step runs (``TRAIN_STEPS``): ``eager``, the Hugging Face forward
    #: with torch's dropout; ``fused``, the unpadded compiled forward with counter-hash
    #: dropout (training/fused_step.py: another random stream, so another fingerprint)
    step: str = "eager"


@dataclass(frozen=True)
class ModelConfig:
    hidden_size: int = 64
    intermediate_size: int = 256
    num_attention_heads: int = 1
    num_hidden_layers: int = 12
    max_position_embeddings: int = 256
    lr: float = 2e-3
    batch_size: int = 256
    grad_accum: int = 1

    @property
    def global_batch(self) -> int:
        """Sentences per optimizer step (a property: not in ``as_params``, the fingerprint)."""
        return self.batch_size * self.grad_accum


@dataclass(frozen=True)
class EvalConfig:
    dev_sentences: int = 10000
    curve_sentences: int = 1000
    layers: tuple[int, ...] | str = (0, 8)  # hidden-state layers (0 = embeddings) or "all"
    mask_seed: int = 0
    batch_size: int = 512


@dataclass(frozen=True)
class DownstreamConfig:
    """The zero-shot downstream task (``evaluation.downstream``): Dufter & Schütze 2020 §5's
    fine-tuning
    recipe (3 epochs, batch 32, lr 2e-5, after Devlin et al.: 10 % warm-up, decay .01), on
    the task ``task`` of ``data/tasks.py`` (book groups by default, or XNLI)."""

    task: str = "bible-books"  # data/tasks.py's registry: bible-books, bible-passages, xnli
    # the task's data folder (xnli: holding XNLI-1.0/ and XNLI-MT-1.0/); null: bible-books
    task_path: Path | None = None
    epochs: int = 3
    batch_size: int = 32
    lr: float = 2e-5
    warmup: float = 0.1  # share of the fine-tuning steps
    weight_decay: float = 0.01
    max_length: int = 128  # wordpieces with [CLS] and [SEP]; <= train.max_length
    split_seed: int = 0  # the chapter split (book_groups.split_chapters): one for all models
    seed: int | None = None  # classifier init, dropout, batch order; null: the model's seed
    # a seeded sample of the task's train examples (verses, XNLI pairs: any task); null: all
    max_train_verses: int | None = None
    max_test_verses: int | None = None  # the same for dev and for test; null: all
    # ``downstream --mds`` (Liu et al. 2020b §4.3): frozen below and shifted at this layer (null:
    # half the depth), alpha chosen per language on its dev set from these values
    mds_layer: int | None = None
    mds_alphas: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)


@dataclass(frozen=True)
class WordOrderConfig:
    """Each edition's word order against an English one (Dufter & Schütze 2020 App. B.2, Table 4;
    ``evaluation.bible_word_order``): not a model's measure, so not in any fingerprint."""

    reference: str = "3"  # the English the lab trains on (Basic English)
    editions: tuple[str, ...] | str = "all"  # edition codes, or "all" of the Bible DB
    books: tuple[int, int] = (40, 66)  # IBM-1 fits on the pair's verses of these books
    #: scored verses per edition (Dufter & Schütze 2020: 2,500), the same ids for all
    verses: int = 2500
    sample_seed: int = 0
    ibm1_iterations: int = 5
    square_root: bool = True  # Birch & Osborne's 1 - sqrt(D/Z); false: 1 - D/Z

    def edition_list(self) -> tuple[str, ...]:
        """The editions to score, in DB order for ``all`` (the reference included: its
        score is the method's ceiling)."""
        return tuple(langs.EDITIONS) if self.editions == ALL_EDITIONS else tuple(self.editions)


@dataclass(frozen=True)
class Config:
    """The study-level configuration (what ``params.yaml`` + profile say); one model of it is
    a :class:`RunConfig` (:func:`multilab.resolve.resolve_run`)."""

    profile: str
    seeds: tuple[int, ...]
    modification: str
    study: tuple[str, ...]
    experiment: str
    paths: Paths
    corpus: CorpusConfig
    vocab: VocabConfig
    spaces: SpacesConfig
    train: TrainConfig
    models: dict[str, ModelConfig]
    evaluate: EvalConfig
    downstream: DownstreamConfig = DownstreamConfig()
    word_order: WordOrderConfig = WordOrderConfig()
    #: the study's languages in their canonical spelling (``languages.language_keys``)
    languages: tuple[str, ...] = langs.DEFAULT_LANGUAGES
    #: user corpora by name (``corpora:``): languages of the user's own text
    corpora: dict[str, UserCorpusConfig] = field(default_factory=dict)
    #: modification → the study row its models belong to (``multilab study run`` sets it):
    #: their MLflow runs nest under the row's parent run instead of the modification's
    rows: dict[str, str] = field(default_factory=dict)

    def row_of(self, modification: str) -> str | None:
        """The study row label of ``modification``'s models, or None outside a study."""
        return next((label for mod, label in self.rows.items()
                     if mods.same_modification(mod, modification)), None)

    @property
    def language_list(self) -> tuple[langs.Language, ...]:
        return langs.parse_languages(self.languages, corpora=self.corpus_isos)

    @property
    def corpus_isos(self) -> dict[str, str]:
        """User corpus name → ISO code (what :func:`langs.parse_languages` reads)."""
        return {name: corpus.iso for name, corpus in self.corpora.items()}

    @property
    def aligned_train(self) -> bool:
        """True when row i of the train table is one verse in every language: not for user
        corpora, nor with a language of another domain (``ot``): what silver dictionaries
        (IBM-1 over the rows) need."""
        return not self.user_corpora and not any(lang.other_domain
                                                 for lang in self.language_list)

    @property
    def user_corpora(self) -> bool:
        """True when the study's languages are user corpora: text that is not parallel
        (the train rows of two languages are unrelated lines; only dev is aligned)."""
        return self.language_list[0].from_user_corpus

    @property
    def verses(self) -> bool:
        """True for a study of real languages, built from verse-aligned editions.

        The one other setup is the paper's: ``[corpus.train_edition, fake]``, English
        sentences (NLTK) and their id-shifted Fake-English; every other list of languages is
        read verse by verse (``data/parallel.py``: the verse is what editions align).
        """
        return self.languages != (self.corpus.train_edition, "fake")

    @property
    def knn_neighbours(self) -> int:
        """How many neighbours per language knn-replace draws from: ``spaces.knn_k``, or the
        paper's (Dufter & Schütze 2020 App. A.3) when it is null: the nearest one for Fake-English,
        one of the five nearest for real languages ("to accommodate noise")."""
        if self.spaces.knn_k is not None:
            return self.spaces.knn_k
        return 5 if self.verses else 1


@dataclass(frozen=True)
class RunConfig:
    """One model: study config + modification recipe + seed, resolved and validated together
    by :func:`multilab.resolve.resolve_run`."""

    study: Config
    modification: str
    seed: int
    recipe: mods.Recipe
    model: ModelConfig

    @property
    def epochs(self) -> float:
        return self.study.train.epochs * self.recipe.epoch_factor

    @property
    def model_dir(self) -> Path:
        return self.study.paths.model_dir(self.modification, self.seed)

    @property
    def paper_id(self) -> str | None:
        return mods.paper_id(self.modification)

    def as_params(self) -> dict[str, Any]:
        """Flat dict of every resolved hyper-parameter (for MLflow params)."""
        flat: dict[str, Any] = {
            "modification": self.modification,
            "seed": self.seed,
            "profile": self.study.profile,
            "epochs": self.epochs,
        }
        for prefix, obj in [
            ("recipe", self.recipe),
            ("model", self.model),
            ("train", self.study.train),
            ("vocab", self.study.vocab),
            ("corpus", self.study.corpus),
        ]:
            for key, value in asdict(obj).items():
                flat[f"{prefix}.{key}"] = value
        flat["languages"] = ",".join(self.study.languages)
        return flat

    def fingerprint(self, data_hash: str = "") -> str:
        """Content hash of everything that determines the trained weights.

        The default languages are left out, so that every model trained before languages
        were a parameter keeps its fingerprint (and is not retrained); any other list is in.
        """
        relevant = {
            k: v for k, v in self.as_params().items() if k not in NOT_IN_FINGERPRINT
        }
        for later, default in LEFT_OUT_AT_DEFAULT.items():  # as before each existed
            if relevant[later] == default:
                del relevant[later]
        # how many share a stack is an execution detail; that a model was trained stacked is
        # not (its dropout is counter-based, training/stacked.py): one key for every k > 1
        if relevant.pop("train.stack") > 1:
            relevant["trainer"] = STACKED_TRAINER
        relevant["data"] = data_hash
        blob = json.dumps(relevant, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


VOCAB_SEPARATE = "separate"
VOCAB_JOINT = "joint"
VOCAB_UNION = "union"
#: ``vocab.mode``: the first is the default (data/multilingual_vocab.py builds each)
VOCAB_MODES = (VOCAB_SEPARATE, VOCAB_JOINT, VOCAB_UNION)
#: the modes with one block for every language: identical strings share one id
SHARED_VOCAB_MODES = (VOCAB_JOINT, VOCAB_UNION)
#: ``vocab.unit``: the first is the default (data/vocab.py's train_tokens)
VOCAB_UNITS = ("wordpiece", "word", "char")
#: ``corpus.train_scope`` (data/parallel.py's train_corpora): the first is the default
NEW_TESTAMENT_SCOPE, WHOLE_BIBLE = "nt", "bible"
TRAIN_SCOPES = (NEW_TESTAMENT_SCOPE, WHOLE_BIBLE)
#: ``spaces.seed_dictionary``: the first is the default (the paper's unsupervised start)
SEED_DICTIONARIES = ("none", "silver")
#: ``word_order.editions``: every edition of the Bible DB
ALL_EDITIONS = "all"
#: ``evaluate.layers``: the embeddings and every layer of each model
ALL_LAYERS = "all"
#: ``train.step``: the first is the default (training/train.py picks the objective)
TRAIN_STEPS = ("eager", "fused")
FUSED_STEP = TRAIN_STEPS[1]
#: What a stacked model's fingerprint says of its trainer (any ``train.stack`` > 1).
STACKED_TRAINER = "stacked"
#: Parameters added after models were trained, with their defaults: a fingerprint leaves one
#: out while it has its default, so those models keep their fingerprints.
LATER_PARAMS: dict[str, Any] = {"corpus.split_clauses": False,
                                 "corpus.train_scope": NEW_TESTAMENT_SCOPE,
                                 "train.step": "eager"}
#: What a fingerprint leaves out while it has its default, so that the models trained before
#: it existed keep their fingerprints: the default languages, vocabulary mode and unit, the
#: later parameters and recipe fields. A record written before one existed lacks it and means
#: this value (studies/tables.py).
LEFT_OUT_AT_DEFAULT: dict[str, Any] = {
    "languages": ",".join(langs.DEFAULT_LANGUAGES), "vocab.mode": VOCAB_MODES[0],
    "vocab.unit": VOCAB_UNITS[0], **LATER_PARAMS,
    **{f"recipe.{field}": default for field, default in mods.LATER_FIELDS.items()}}
#: Parameters that never change the trained weights: every step's randomness is seeded from
#: (seed, step), so when curves are measured, logged or checkpointed does not matter.
NOT_IN_FINGERPRINT = frozenset({"train.eval_points", "train.checkpoint_every", "train.log_every"})
MODEL_SIZES = ("small", "base")  # what Recipe.model_size names

#: Seeds reach torch, NumPy and ``random``; NumPy's legacy seeding stops at 32 bits, and a
#: larger number would fail deep inside a run (torch: "Overflow when unpacking long").
SEED_MAX = 2**32 - 1
#: [PAD], [UNK], [CLS], [SEP], [MASK] (``data.tokenizers.SPECIAL_TOKENS``, not imported: this
#: module stays free of heavy imports so a bad value fails before seconds of loading).
SPECIAL_TOKEN_COUNT = 5
#: [CLS] + one wordpiece + [SEP]: inputs keep ``max_length - 2`` wordpieces, so below 3 every
#: sentence would lose all its words (0 used to drop the last two of each sentence instead).
MIN_MAX_LENGTH = 3


def _at_least(low: int) -> tuple[Callable[[Any], bool], str]:
    return (lambda value: value >= low), f">= {low}"


_POSITIVE = (lambda value: value > 0), "> 0"
#: a seed's range, as a rule of :data:`RULES` (also what ``resolve.check_seed`` says)
SEED_RULE = (lambda value: 0 <= value <= SEED_MAX), f"from 0 to {SEED_MAX}"
_BOOKS = ((lambda books: 1 <= books[0] <= books[1] <= 66),
          "from 1 to 66, the first <= the second")


#: The valid range of each numeric field: (test, text completing "must be <type> …").
RULES: dict[tuple[type, str], tuple[Callable[[Any], bool], str]] = {
    (CorpusConfig, "train_books"): _BOOKS,
    (CorpusConfig, "dev_books"): _BOOKS,
    (CorpusConfig, "dev_sentences"): _at_least(1),
    (UserCorpusConfig, "sentences"): (lambda v: v is None or v >= 1, ">= 1 or null"),
    (UserCorpusConfig, "bytes"): (lambda v: v is None or v >= 1, ">= 1 or null"),
    (UserCorpusConfig, "seed"): (lambda v: 0 <= v <= SEED_MAX, f"in 0..{SEED_MAX}"),
    (CorpusConfig, "export_editions"): ((lambda codes: len(codes) > 0), "(at least one)"),
    (VocabConfig, "size"): (
        (lambda size: size > SPECIAL_TOKEN_COUNT),
        f"> {SPECIAL_TOKEN_COUNT} (the special tokens [PAD] [UNK] [CLS] [SEP] [MASK] take the "
        f"first {SPECIAL_TOKEN_COUNT} ids)"),
    **{(SpacesConfig, key): _at_least(1) for key in (
        "dim", "epochs", "min_count", "window", "threads", "vecmap_max_iterations")},
    (SpacesConfig, "knn_k"): (
        (lambda k: k is None or k >= 1),
        ">= 1 (null: the paper's, 1 for Fake-English, 5 for real languages)"),
    (SpacesConfig, "fake_shuffle_seed"): SEED_RULE,
    (SpacesConfig, "vecmap_seed"): SEED_RULE,
    (TrainConfig, "epochs"): _POSITIVE,
    (TrainConfig, "warmup_steps"): _at_least(0),
    (TrainConfig, "weight_decay"): _at_least(0),
    (TrainConfig, "adam_eps"): _POSITIVE,
    (TrainConfig, "max_length"): (
        (lambda length: length >= MIN_MAX_LENGTH),
        f">= {MIN_MAX_LENGTH} ([CLS], at least one wordpiece, [SEP])"),
    (TrainConfig, "mask_prob"): (
        (lambda p: 0 < p < 1), "between 0 and 1, both excluded (the share of tokens predicted)"),
    (TrainConfig, "checkpoint_every"): _at_least(1),
    (TrainConfig, "log_every"): _at_least(1),
    (TrainConfig, "max_train_sentences"): (
        (lambda n: n is None or n >= 1), ">= 1 (null: every sentence)"),
    (TrainConfig, "eval_points"): (
        (lambda points: all(0 < p < 1 for p in points)),
        "each strictly between 0 and 1 (fractions of the training), e.g. [0.5]"),
    (TrainConfig, "bucket_chunk"): _at_least(1),
    (TrainConfig, "length_pieces"): _at_least(1),
    (TrainConfig, "stack"): (
        (lambda k: k >= 1),
        ">= 1 (1: one model at a time; k: up to k models of one architecture as one stacked "
        "computation)"),
    **{(ModelConfig, key): _at_least(1) for key in (
        "hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
        "max_position_embeddings", "batch_size", "grad_accum")},
    (ModelConfig, "lr"): _POSITIVE,
    (EvalConfig, "dev_sentences"): _at_least(1),
    (EvalConfig, "curve_sentences"): _at_least(1),
    (EvalConfig, "batch_size"): _at_least(1),
    (EvalConfig, "mask_seed"): SEED_RULE,
    (DownstreamConfig, "epochs"): _at_least(1),
    (DownstreamConfig, "batch_size"): _at_least(1),
    (DownstreamConfig, "lr"): _POSITIVE,
    (DownstreamConfig, "warmup"): ((lambda share: 0 <= share < 1),
                                   "from 0 (included) to 1 (excluded): a share of the steps"),
    (DownstreamConfig, "weight_decay"): _at_least(0),
    (DownstreamConfig, "max_length"): (
        (lambda length: length >= MIN_MAX_LENGTH),
        f">= {MIN_MAX_LENGTH} ([CLS], at least one wordpiece, [SEP])"),
    (DownstreamConfig, "split_seed"): SEED_RULE,
    (DownstreamConfig, "seed"): ((lambda s: s is None or SEED_RULE[0](s)),
                                 f"{SEED_RULE[1]} (null: the pretrained model's seed)"),
    (DownstreamConfig, "max_train_verses"): (
        (lambda n: n is None or n >= 1), ">= 1 (null: the whole train split)"),
    (WordOrderConfig, "books"): _BOOKS,
    (WordOrderConfig, "verses"): _at_least(1),
    (WordOrderConfig, "sample_seed"): SEED_RULE,
    (WordOrderConfig, "ibm1_iterations"): _at_least(1),
    (DownstreamConfig, "max_test_verses"): (
        (lambda n: n is None or n >= 1), ">= 1 (null: the whole dev and test splits)"),
    (DownstreamConfig, "mds_layer"): (
        (lambda n: n is None or n >= 1), ">= 1 (null: half the model's depth)"),
    (DownstreamConfig, "mds_alphas"): (
        (lambda alphas: len(alphas) > 0 and min(alphas) >= 0),
        "with at least one value, each >= 0 (0 = no shift), e.g. [0, 0.5, 1, 2]"),
}


def resolve_layers(layers: tuple[int, ...] | str, num_hidden_layers: int) -> tuple[int, ...]:
    """The concrete layers of a model: "all" = 0 (embeddings) … ``num_hidden_layers``."""
    if layers == ALL_LAYERS:
        return tuple(range(num_hidden_layers + 1))
    return tuple(layers)
