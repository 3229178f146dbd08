"""One typed configuration, resolved from ``params.yaml`` + profile + modification + seed.

``params.yaml`` holds the paper's values at the top level and, under ``profiles``, what each
profile (smoke / quick / paper) overrides. :func:`load_config` validates everything before any
work starts, so a bad value fails in one line naming the valid choices, with nothing written.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from multilab.errors import UserError
from multilab.lab import modifications as mods


@dataclass(frozen=True)
class Paths:
    data: Path = Path("data")
    artifacts: Path = Path("artifacts")
    reports: Path = Path("reports")
    metrics: Path = Path("metrics")
    mlruns: Path = Path("mlruns")

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
    export_editions: tuple[str, ...] = ("3", "k")


@dataclass(frozen=True)
class VocabConfig:
    size: int = 2048


@dataclass(frozen=True)
class SpacesConfig:
    dim: int = 300
    epochs: int = 5
    min_count: int = 1
    window: int = 5
    char_ngrams: bool = False
    threads: int = 1
    fake_shuffle_seed: int = 1
    knn_k: int = 1
    vecmap_seed: int = 0
    vecmap_max_iterations: int = 100


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
class Config:
    """The study-level configuration (what ``params.yaml`` + profile say)."""

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

    def run(self, modification: str, seed: int) -> RunConfig:
        """The fully resolved configuration of one model."""
        recipe = mods.resolve_recipe(modification)
        if self.train.replacement_override is not None:
            recipe = replace(recipe, replacement=tuple(self.train.replacement_override))
        return RunConfig(
            study=self,
            modification=mods.canonical_name(modification),
            seed=seed,
            recipe=recipe,
            model=self.models[recipe.model_size],
        )


@dataclass(frozen=True)
class RunConfig:
    """One model: study config + modification recipe + seed."""

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
        return flat

    def fingerprint(self, data_hash: str = "") -> str:
        """Content hash of everything that determines the trained weights."""
        relevant = {
            k: v for k, v in self.as_params().items() if k not in NOT_IN_FINGERPRINT
        }
        relevant["data"] = data_hash
        blob = json.dumps(relevant, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


#: Parameters that never change the trained weights: every step's randomness is seeded from
#: (seed, step), so when curves are measured, logged or checkpointed does not matter.
NOT_IN_FINGERPRINT = frozenset({"train.eval_points", "train.checkpoint_every", "train.log_every"})

PROFILES_KEY = "profiles"
# what dvc.yaml templates read (matrix, paths): a profile may not change them behind its back
TOP_LEVEL_ONLY = frozenset({"profile", "seeds", "study", "modification", "paths", "experiment"})


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _build(cls: type, values: dict[str, Any] | None, section: str) -> Any:
    """Dataclass from a dict, rejecting unknown keys with the valid ones named."""
    values = dict(values or {})
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise UserError(f"unknown key {section}.{unknown[0]}; valid: {', '.join(known)}")
    for key, value in values.items():
        if isinstance(value, list):
            values[key] = tuple(value)
        if cls is Paths:
            values[key] = Path(value)
    return cls(**values)


ALL_LAYERS = "all"


def parse_layers(value: Any) -> tuple[int, ...] | str:
    """``evaluate.layers``: layer numbers (list or "0,4,8") or "all" (embeddings + every layer)."""
    if isinstance(value, str) and value.strip().lower() == ALL_LAYERS:
        return ALL_LAYERS
    items = value.split(",") if isinstance(value, str) else value
    try:
        layers = tuple(int(str(item).strip()) for item in items)
    except (TypeError, ValueError):
        layers = ()
    if not layers or min(layers) < 0:
        raise UserError(
            f"evaluate.layers = {value!r}: need layer numbers >= 0 (0 = embedding output), "
            f"e.g. [0, 8], or {ALL_LAYERS!r}"
        )
    return tuple(sorted(set(layers)))


def resolve_layers(layers: tuple[int, ...] | str, num_hidden_layers: int) -> tuple[int, ...]:
    """The concrete layers of a model: "all" = 0 (embeddings) … ``num_hidden_layers``."""
    if layers == ALL_LAYERS:
        return tuple(range(num_hidden_layers + 1))
    return tuple(layers)


def _check_replacement(probs: tuple[float, ...], where: str) -> None:
    if len(probs) not in (3, 4) or any(p < 0 for p in probs):
        raise UserError(
            f"{where} = {list(probs)}: need 3 or 4 non-negative probabilities "
            "(mask, keep, random[, knn])"
        )
    if not math.isclose(sum(probs), 1.0, abs_tol=1e-6):
        raise UserError(f"{where} = {list(probs)} sums to {sum(probs):g}, not 1")


def load_config(
    params_path: Path | str = "params.yaml",
    overrides: dict[str, Any] | None = None,
) -> Config:
    """Read, merge and validate ``params.yaml`` (+ optional overrides, e.g. from tests)."""
    params_path = Path(params_path)
    if not params_path.exists():
        raise UserError(f"parameter file {params_path} not found")
    raw = yaml.safe_load(params_path.read_text()) or {}
    return config_from_dict(raw, overrides)


def config_from_dict(raw: dict[str, Any], overrides: dict[str, Any] | None = None) -> Config:
    """Merge base values, the chosen profile, then explicit overrides (which win)."""
    overrides = overrides or {}
    profiles = _deep_merge(raw.get(PROFILES_KEY) or {}, overrides.get(PROFILES_KEY) or {})
    profile = str(overrides.get("profile", raw.get("profile", "quick")))
    if profile not in profiles:
        raise UserError(f"unknown profile {profile!r}; valid: {', '.join(profiles) or '(none)'}")
    pinned = sorted(set(profiles[profile]) & TOP_LEVEL_ONLY)
    if pinned:
        raise UserError(
            f"profile {profile!r} sets {', '.join(pinned)}: these are read by dvc.yaml from the "
            "top of params.yaml, so set them there (or with `dvc exp run -S`)"
        )
    base = {k: v for k, v in raw.items() if k != PROFILES_KEY}
    merged = _deep_merge(_deep_merge(base, profiles[profile]), overrides)
    merged.pop(PROFILES_KEY, None)

    seeds = merged.get("seeds")
    if not seeds or not isinstance(seeds, list | tuple):
        raise UserError(f"seeds = {seeds!r}: need a non-empty list of integers, e.g. [0, 42]")
    try:
        seeds = tuple(int(s) for s in seeds)
    except (TypeError, ValueError) as err:
        raise UserError(f"seeds = {seeds!r}: need integers") from err

    modification = str(merged.get("modification", "original"))
    study = tuple(str(s) for s in (merged.get("study") or []))
    mods.split_modification(modification)  # unknown or conflicting parts: a UserError
    for entry in study:
        if ";" in entry:
            raise UserError(
                f"study entry {entry!r}: join parts with '+' in params.yaml "
                f"(e.g. {entry.replace(';', '+')!r}) so DVC paths stay valid"
            )
        mods.split_modification(entry)

    model_sections = merged.get("models") or {}
    models = {name: _build(ModelConfig, v, f"models.{name}") for name, v in model_sections.items()}
    for needed in ("small", "base"):
        if needed not in models:
            raise UserError(f"models.{needed} missing; valid sizes: small, base")

    train = _build(TrainConfig, merged.get("train"), "train")
    if train.replacement_override is not None:
        _check_replacement(train.replacement_override, "train.replacement_override")
    for name, mod in mods.REGISTRY.items():
        _check_replacement(mod.changes.get("replacement", mods.BERT_REPLACEMENT), name)
    if train.epochs <= 0:
        raise UserError(f"train.epochs = {train.epochs}: must be > 0")
    for key in ("bucket_chunk", "length_pieces"):
        value = getattr(train, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UserError(f"train.{key} = {value!r}: must be an integer >= 1")

    evaluate = _build(EvalConfig, merged.get("evaluate"), "evaluate")
    evaluate = replace(evaluate, layers=parse_layers(evaluate.layers))
    return Config(
        profile=profile,
        seeds=seeds,
        modification=modification,
        study=study,
        experiment=str(merged.get("experiment") or f"multilab-{profile}"),
        paths=_build(Paths, merged.get("paths"), "paths"),
        corpus=_build(CorpusConfig, merged.get("corpus"), "corpus"),
        vocab=_build(VocabConfig, merged.get("vocab"), "vocab"),
        spaces=_build(SpacesConfig, merged.get("spaces"), "spaces"),
        train=train,
        models=models,
        evaluate=evaluate,
    )


def parse_overrides(pairs: list[str] | None) -> dict[str, Any]:
    """Dotted ``key=value`` overrides from the command line (``--set train.epochs=3``) as the
    nested dict :func:`load_config` merges; values are read as YAML (``[0, 1]``, ``null``)."""
    tree: dict[str, Any] = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise UserError(f"--set {pair!r}: expected key=value, e.g. train.epochs=3")
        key, value = pair.split("=", 1)
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    return tree
