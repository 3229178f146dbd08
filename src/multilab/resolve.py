"""How a configuration is made: ``params.yaml`` + profile + overrides → a validated Config.

:func:`load_config` gives the study's :class:`~multilab.config.Config`; :func:`resolve_run`
gives one model of it (+ modification + seed) as a :class:`~multilab.config.RunConfig`.

``params.yaml`` holds the paper's values at the top level and, under ``profiles``, what each
profile (smoke / quick / paper) overrides. :func:`load_config` validates everything before any
work starts, so a bad value fails in one line naming the valid choices, with nothing written;
:func:`resolve_run` resolves a modification as training will, solving a reshaped model's
hidden size at a fixed parameter count (K et al. 2020 §3.3).

Validation is written out here (types from the dataclass annotations, ranges in
:data:`multilab.config.RULES`) rather than done by pydantic: pydantic is only an indirect
dependency (through MLflow), its lax mode turns ``100`` into ``100.0`` (the fingerprint hashes
values as written, so every trained model would be orphaned) and its errors are multi-line;
what it would save is the 60 lines of :func:`_conform`.
"""

from __future__ import annotations

import copy
import difflib
import functools
import math
import os
import re
import types
import typing
from collections.abc import Iterable
from dataclasses import fields, replace
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from multilab.architecture import BertShape, parameter_count, solve_hidden_size
from multilab.config import (
    ALL_EDITIONS,
    ALL_LAYERS,
    FUSED_STEP,
    MODEL_SIZES,
    RULES,
    SEED_DICTIONARIES,
    SEED_MAX,
    SEED_RULE,
    TRAIN_SCOPES,
    TRAIN_STEPS,
    VOCAB_JOINT,
    VOCAB_MODES,
    VOCAB_UNITS,
    Config,
    CorpusConfig,
    DownstreamConfig,
    EvalConfig,
    ModelConfig,
    Paths,
    RunConfig,
    SpacesConfig,
    TrainConfig,
    UserCorpusConfig,
    VocabConfig,
    WordOrderConfig,
)
from multilab.data.tasks import TASKS, get_task
from multilab.errors import UserError
from multilab.files import parse_yaml
from multilab.lab import languages as langs
from multilab.lab import modifications as mods
from multilab.lab.languages import EDITIONS

PROFILES_KEY = "profiles"
# what dvc.yaml templates read (matrix, paths): a profile may not change them behind its back
TOP_LEVEL_ONLY = frozenset({"profile", "seeds", "study", "modification", "paths", "experiment",
                            "languages", "corpora", "rows"})

#: The sections of params.yaml and the dataclass each one becomes (``models``: one per size).
SECTIONS: dict[str, type] = {
    "paths": Paths, "corpus": CorpusConfig, "vocab": VocabConfig, "spaces": SpacesConfig,
    "train": TrainConfig, "models": ModelConfig, "evaluate": EvalConfig,
    "downstream": DownstreamConfig, "word_order": WordOrderConfig,
    "corpora": UserCorpusConfig,
}
TOP_LEVEL_KEYS = ("profile", "seeds", "modification", "study", "languages", "experiment",
                  "rows", *SECTIONS, PROFILES_KEY)


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if value is None and isinstance(merged.get(key), dict):
            continue  # an empty section (`evaluate:` with nothing under it) changes nothing
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _reject_unknown(keys: Iterable[Any], valid: tuple[str, ...], where: str) -> None:
    """A key that is not one of ``valid`` (a typo such as ``trian``) is an error, never
    ignored: an ignored section silently trains with the code's defaults."""
    unknown = [key for key in keys if key not in valid]
    if not unknown:
        return
    key = str(unknown[0])
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise UserError(f"unknown key {where}{'.' if where else ''}{key}{hint}; valid: "
                    f"{', '.join(valid)}")


def _mapping(value: Any, where: str, valid: tuple[str, ...]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where} = {value!r}: must be a mapping with keys among "
                        f"{', '.join(valid)}")
    return value


def _check_keys(tree: dict[str, Any], where: str) -> None:
    """Every key of a parameter tree (the file's top level, a profile, the overrides)."""
    _reject_unknown(tree, TOP_LEVEL_KEYS, where)
    prefix = f"{where}." if where else ""
    for name, cls in SECTIONS.items():
        if name not in tree:
            continue
        if name == "corpora":  # free names, each a UserCorpusConfig
            section = _mapping(tree[name], prefix + name, ("<corpus name>",))
            for corpus, values in section.items():
                where_corpus = f"{prefix}corpora.{corpus}"
                _reject_unknown(_mapping(values, where_corpus, _field_names(cls)),
                                _field_names(cls), where_corpus)
            continue
        valid = MODEL_SIZES if name == "models" else _field_names(cls)
        section = _mapping(tree[name], prefix + name, valid)
        _reject_unknown(section, valid, prefix + name)
        if name == "models":
            for size, values in section.items():
                where_size = f"{prefix}models.{size}"
                _reject_unknown(_mapping(values, where_size, _field_names(cls)),
                                _field_names(cls), where_size)


def _describe(hint: Any) -> str:
    """What a type annotation accepts, in words ("a list of 2 integers")."""
    plural = {int: "integers", float: "numbers", str: "strings", bool: "true/false values"}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        ordered = sorted(args, key=lambda a: a is not type(None))  # "null or …" first
        return " or ".join("null" if a is type(None) else _describe(a) for a in ordered)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {plural.get(args[0], args[0])}"
        return f"a list of {len(args)} {plural.get(args[0], args[0])}"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            Path: "a path"}.get(hint, str(hint))


_INVALID = object()


def _conform(value: Any, hint: Any) -> Any:
    """``value`` as the annotated type (lists become tuples), or ``_INVALID``.

    Numbers keep their Python type (an int stays an int in a float field): the fingerprint
    hashes the values as written, and ``100`` and ``100.0`` dump differently.
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None:
            return None if type(None) in args else _INVALID
        for option in (a for a in args if a is not type(None)):
            converted = _conform(value, option)
            if converted is not _INVALID:
                return converted
        return _INVALID
    if origin is tuple:
        if not isinstance(value, list | tuple):
            return _INVALID
        kinds = [args[0]] * len(value) if args[-1] is Ellipsis else list(args)
        if len(kinds) != len(value):
            return _INVALID
        items = tuple(_conform(v, kind) for v, kind in zip(value, kinds, strict=True))
        return _INVALID if any(item is _INVALID for item in items) else items
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if hint is bool:
        return value if isinstance(value, bool) else _INVALID
    if hint is int:
        return value if is_int else _INVALID
    if hint is float:
        number = is_int or isinstance(value, float)
        return value if number and math.isfinite(value) else _INVALID
    if hint is str:  # YAML reads `train_edition: 3` and `modification: 17` as numbers
        return str(value) if is_int else value if isinstance(value, str) else _INVALID
    if hint is Path:
        return Path(value) if isinstance(value, str | Path) and str(value) else _INVALID
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """A section's field types, evaluated once (the annotations are strings: evaluating
    them for every field of every configuration was most of what resolving a study's rows
    cost)."""
    return typing.get_type_hints(cls)


def _typed(cls: type, key: str, value: Any, where: str) -> Any:
    """One field: the right type and in range, or one line naming value and valid ones."""
    hint = _hints(cls)[key]
    test, valid = RULES.get((cls, key), ((lambda v: True), ""))
    converted = _conform(value, hint)
    if converted is _INVALID or not test(converted):
        raise UserError(f"{where} = {value!r}: must be {_describe(hint)}"
                        + (f" {valid}" if valid else ""))
    return converted


def _build(cls: type, values: dict[str, Any] | None, section: str) -> Any:
    """The dataclass of a section: every key known (checked before), typed and in range."""
    values = _mapping(values, section, _field_names(cls))
    _reject_unknown(values, _field_names(cls), section)
    return cls(**{key: _typed(cls, key, value, f"{section}.{key}")
                  for key, value in values.items()})


def check_seed(seed: Any, where: str = "seed") -> int:
    """A seed as an integer in the range every random generator we seed accepts."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise UserError(f"{where} {seed!r}: must be an integer {SEED_RULE[1]}")
    return seed


def _check_model(size: str, model: ModelConfig, train: TrainConfig) -> None:
    where = f"models.{size}"
    if model.hidden_size % model.num_attention_heads:
        divisors = [d for d in range(1, model.hidden_size + 1) if model.hidden_size % d == 0]
        raise UserError(
            f"{where}.num_attention_heads = {model.num_attention_heads} does not divide "
            f"{where}.hidden_size = {model.hidden_size}; valid: "
            f"{', '.join(map(str, divisors[:12]))}{' …' if len(divisors) > 12 else ''}"
        )
    if model.max_position_embeddings < train.max_length:
        raise UserError(
            f"{where}.max_position_embeddings = {model.max_position_embeddings} is less than "
            f"train.max_length = {train.max_length}: every position needs an embedding; valid: "
            f">= {train.max_length}"
        )


def _check_run(recipe: mods.Recipe, model: ModelConfig, train: TrainConfig, size: str,
               modification: str) -> None:
    """What only a (modification, model) pair can get wrong: lang-pos gives Fake-English
    positions ``max_length … 2·max_length - 1``, so the model needs twice the embeddings
    (a third and further language: :func:`resolve_run` widens the table to N blocks);
    attend-padding needs whole batches (``train.length_pieces`` 1)."""
    if recipe.attend_padding and train.length_pieces != 1:
        raise UserError(
            f"train.length_pieces = {train.length_pieces} with {modification!r}: attending to "
            f"padding needs each batch run whole, padded to its longest row (pieces would "
            f"change the padding every row sees); valid: 1"
        )
    unfused = [name for name, on in (("next_sentence", recipe.next_sentence),
                                     ("separate_layers", recipe.separate_layers),
                                     ("attend_padding", recipe.attend_padding)) if on]
    if train.step == FUSED_STEP and unfused:
        raise UserError(
            f"train.step = fused with {modification!r}: the fused step computes plain "
            f"BertForMaskedLM on real tokens, not {', '.join(unfused)}; valid: step eager"
        )
    needed = 2 * train.max_length if recipe.language_positions else train.max_length
    if model.max_position_embeddings < needed:
        raise UserError(
            f"models.{size}.max_position_embeddings = {model.max_position_embeddings} is too "
            f"small for {modification!r} with train.max_length = {train.max_length}: "
            f"language-specific positions need >= {needed} (2 x max_length)"
        )


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


def _check_replacement(probs: tuple[float, ...], where: str) -> None:
    if len(probs) not in (3, 4) or any(p < 0 for p in probs):
        raise UserError(
            f"{where} = {list(probs)}: need 3 or 4 non-negative probabilities "
            "(mask, keep, random[, knn])"
        )
    if not math.isclose(sum(probs), 1.0, abs_tol=1e-6):
        raise UserError(f"{where} = {list(probs)} sums to {sum(probs):g}, not 1")


def _yaml(text: str, source: str) -> Any:
    """YAML → Python, a syntax error as one line with its position."""
    try:
        return parse_yaml(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise UserError(f"{source}: YAML syntax error{where}: {problem}") from err


def load_config(
    params_path: Path | str = "params.yaml",
    overrides: dict[str, Any] | None = None,
) -> Config:
    """Read, merge and validate ``params.yaml`` (+ optional overrides, e.g. from tests)."""
    params_path = Path(params_path)
    if not params_path.exists():
        raise UserError(f"parameter file {params_path} not found")
    try:
        text = params_path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{params_path} is not UTF-8 text (byte {err.start}: {err.reason})"
                        ) from err
    except OSError as err:
        raise UserError(f"cannot read {params_path}: {err.strerror or err}") from err
    raw = _yaml(text, str(params_path))
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UserError(
            f"{params_path} holds a {type(raw).__name__}, not a mapping of parameters "
            f"(`key: value` lines; valid keys: {', '.join(TOP_LEVEL_KEYS)})"
        )
    return config_from_dict(raw, overrides)


def _check_study(study: list[Any], from_file: bool) -> tuple[str, ...]:
    """``study`` entries as model-folder names (``+``-joined parts, as written).

    Decision: in params.yaml, paper IDs and other spellings (``;``, spaces) are rejected,
    not normalised. dvc.yaml builds each train stage's output path from the entry itself
    (``models/${item.mod}/…``) and DVC templates cannot translate it, while multilab names
    the folder after the modification (``models/lang-pos/…`` for ID 1): with an ID the
    stage's declared output would never appear. A study given on the command line
    (``--set 'study=[0,1,3]' report``) is read by multilab alone, so there IDs are normalised
    to names. ``modification`` (the variant) and ``train -m`` take IDs everywhere.
    """
    entries = tuple("" if isinstance(e, bool) else str(e) for e in study)
    seen: dict[frozenset[str], str] = {}
    names = []
    for entry in entries:
        if from_file and entry in mods.PAPER_IDS:
            raise UserError(
                f"study entry {entry!r} is a paper ID: write {mods.slug(entry)!r} instead "
                "(dvc.yaml names each model folder after the entry, multilab after the name)"
            )
        if from_file and ";" in entry:
            raise UserError(
                f"study entry {entry!r}: join parts with '+' in params.yaml "
                f"(e.g. {entry.replace(';', '+')!r}) so DVC paths stay valid"
            )
        name = mods.slug(entry)  # unknown parts: a UserError
        mods.resolve_recipe(entry)  # conflicting parts: a UserError
        if from_file and name != entry:
            raise UserError(f"study entry {entry!r}: write it {name!r} (the model folder's "
                            "name; DVC paths use the entry as written)")
        parts = frozenset(mods.split_modification(entry))
        if parts in seen:
            raise UserError(f"study lists {seen[parts]!r} and {entry!r}: the same model twice")
        seen[parts] = entry
        names.append(name)
    return tuple(names)


def _check_seeds(seeds: Any) -> tuple[int, ...]:
    if not seeds or not isinstance(seeds, list | tuple):
        raise UserError(f"seeds = {seeds!r}: need a non-empty list of integers, e.g. [0, 42]")
    checked = tuple(check_seed(s, "seeds: entry") for s in seeds)
    repeated = sorted({s for s in checked if checked.count(s) > 1})
    if repeated:
        raise UserError(f"seeds = {list(seeds)!r}: seed {repeated[0]} twice")
    return checked


def default_experiment(profile: str, languages: tuple[str, ...]) -> str:
    """``multilab-<profile>``; a study of other languages gets its own experiment
    (``multilab-smoke-3-s``): its models, parent runs and report never mix with the default's."""
    if languages == langs.DEFAULT_LANGUAGES:
        return f"multilab-{profile}"
    return "-".join(["multilab", profile, *(k.replace(":", "_") for k in languages)])


def _check_rows(value: Any) -> dict[str, str]:
    """``rows``: modification → the label of the study row its models belong to (set by
    ``multilab study run``): each modification known, each label a name."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"rows = {value!r}: must map modifications to study row labels, "
                        "e.g. {original: '0', lang-pos: '1'}")
    rows = {}
    for modification, label in value.items():
        mods.split_modification(str(modification))  # an unknown part: one line naming it
        if isinstance(label, bool) or not isinstance(label, str | int) or str(label) == "":
            raise UserError(f"rows.{modification} = {label!r}: must be a study row's label")
        rows[str(modification)] = str(label)
    return rows


def _check_languages(value: Any, corpora: dict[str, str]) -> tuple[str, ...]:
    """``languages``: a list of edition codes, user corpora and transforms
    (``lab/languages.py``), in its canonical spelling; ``"3,s,i"`` is accepted too
    (``--set languages=3,s,i``)."""
    if not isinstance(value, list | tuple | str):
        raise UserError(f"languages = {value!r}: must be a list such as [3, fake] or [3, s, i]; "
                        f"each entry {langs.valid_entries(corpora)}")
    return tuple(langs.language_keys(langs.parse_languages(value, corpora=corpora)))


#: A user corpus's name: a language key in paths, metric names and `--set languages=…`
CORPUS_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]+")
ISO_CODE = re.compile(r"[a-z]{2,3}")


def _check_corpora(value: Any) -> dict[str, UserCorpusConfig]:
    """``corpora``: name → :class:`UserCorpusConfig`, each field typed, each name usable as a
    language (not an edition code or transform, two characters or more: letters, digits,
    ``-``, ``_``), paths relative and inside ``paths.data``, at most one of sentences/bytes.
    Whether the files exist is checked when the corpus is built (one line, nothing written),
    so that ``multilab check`` works on a machine without the text."""
    corpora = {}
    for name, values in _mapping(value, "corpora", ("<corpus name>",)).items():
        where = f"corpora.{name}"
        if (not isinstance(name, str) or not CORPUS_NAME.fullmatch(name) or name in EDITIONS
                or name in langs.TRANSFORMS):
            raise UserError(f"{where}: {name!r} cannot name a corpus; valid: two or more "
                            "letters, digits, '-' or '_', starting with a letter, not an "
                            "edition code or a transform (e.g. wiki-de)")
        values = _mapping(values, where, _field_names(UserCorpusConfig))
        for needed in ("iso", "train", "dev"):
            if needed not in values:
                raise UserError(f"{where}.{needed} missing; a corpus needs iso, train and dev "
                                "(README: Seeds at scale)")
        corpus = _build(UserCorpusConfig, values, where)
        if not ISO_CODE.fullmatch(corpus.iso):
            raise UserError(f"{where}.iso = {corpus.iso!r}: must be an ISO 639 code in lower "
                            "case, e.g. de")
        for key in ("train", "dev"):
            path = Path(getattr(corpus, key))
            if path.is_absolute() or ".." in path.parts or not str(path).strip():
                raise UserError(f"{where}.{key} = {str(path)!r}: must be a path inside "
                                "paths.data, relative to it (DVC versions data/ with data.dvc)")
        if corpus.sentences is not None and corpus.bytes is not None:
            raise UserError(f"{where}: sentences = {corpus.sentences} and bytes = "
                            f"{corpus.bytes}; give one of them (or neither: every line)")
        corpora[name] = corpus
    _check_corpus_paths(corpora)
    return corpora


def _check_corpus_paths(corpora: dict[str, UserCorpusConfig]) -> None:
    """No two corpora share a dev file, and no dev file is (or lies inside) a corpus's train
    text: `corpus xnli-dev` writes every dev file, and one corpus's would overwrite the
    other's or the training text."""
    seen: dict[PurePosixPath, str] = {}
    trains = {name: PurePosixPath(os.path.normpath(c.train)) for name, c in corpora.items()}
    for name, corpus in corpora.items():
        dev = PurePosixPath(os.path.normpath(corpus.dev))
        if dev in seen:
            raise UserError(f"corpora.{name}.dev = {corpus.dev!r} is also corpora.{seen[dev]}"
                            ".dev; each corpus needs a dev file of its own (line i the same "
                            "sentence in each), e.g. corpora/dev.<iso>.txt")
        seen[dev] = name
        for other, train in trains.items():
            if dev == train or train in dev.parents:
                raise UserError(f"corpora.{name}.dev = {corpus.dev!r} is corpora.{other}"
                                f".train{'' if dev == train else ' (inside it)'}; the dev "
                                "text must be a file apart from every train text")


def _check_train_scope(corpus: CorpusConfig, languages: tuple[str, ...],
                       corpora: dict[str, str]) -> None:
    """``corpus.train_scope``: a known scope; ``bible`` only where the languages are Bible
    editions read verse by verse (the sentence setup reads ``corpus.train_books``; user
    corpora are their own text; an ``ot`` language is the Old Testament as another domain)."""
    scope = corpus.train_scope
    if scope not in TRAIN_SCOPES:
        raise UserError(f"corpus.train_scope = {scope!r}; valid: {', '.join(TRAIN_SCOPES)}")
    if scope == TRAIN_SCOPES[0]:
        return
    if languages == (corpus.train_edition, "fake"):
        raise UserError(f"corpus.train_scope = {scope!r} needs real languages (verse tables, "
                        f"e.g. languages [3, s]); [{', '.join(languages)}] trains on "
                        f"corpus.train_books (valid with it: {TRAIN_SCOPES[0]})")
    parsed = langs.parse_languages(languages, corpora=corpora)
    odd = next((lang for lang in parsed if lang.from_user_corpus or lang.other_domain), None)
    if odd is not None:
        raise UserError(f"corpus.train_scope = {scope!r} needs Bible editions of the Bible's "
                        f"own domain; {odd.name!r} is not one (valid with it: "
                        f"{TRAIN_SCOPES[0]})")


def config_from_dict(raw: dict[str, Any], overrides: dict[str, Any] | None = None) -> Config:
    """Merge base values, the chosen profile, then explicit overrides (which win).

    The one validation path of every command (``check`` included): unknown keys at every
    level, types, ranges, and every modification the config names (study entries and
    ``modification``) resolved as training will resolve it. Sections are checked in this
    order, so a config with several faults is told the same first one every time.
    """
    overrides = overrides or {}
    profile, merged = _merged_profile(raw, overrides)
    seeds = _check_seeds(merged.get("seeds"))
    modification = _check_modification(merged.get("modification", "original"))
    study = merged.get("study") or []
    if not isinstance(study, list | tuple):
        raise UserError(f"study = {study!r}: must be a list of modification names")
    study = _check_study(study, from_file="study" not in overrides)
    corpora = _check_corpora(merged.get("corpora"))
    isos = {name: c.iso for name, c in corpora.items()}
    languages = _check_languages(merged.get("languages", list(langs.DEFAULT_LANGUAGES)), isos)
    experiment = merged.get("experiment")
    if experiment is not None and (not isinstance(experiment, str | int) or experiment == ""):
        raise UserError(f"experiment = {experiment!r}: must be a name or null "
                        f"(null: multilab-{profile})")
    rows = _check_rows(merged.get("rows"))
    models = _models(merged)
    train = _train_section(merged, models)
    corpus = _build(CorpusConfig, merged.get("corpus"), "corpus")
    _check_train_scope(corpus, languages, isos)
    evaluate = _evaluate_section(merged, corpus, models)
    spaces = _spaces_section(merged, languages, corpus, corpora)
    vocab = _vocab_section(merged, languages, corpus, isos)
    downstream = _downstream_section(merged, train)
    word_order = _build(WordOrderConfig, merged.get("word_order"), "word_order")
    _check_word_order(word_order)
    cfg = Config(
        profile=profile,
        seeds=seeds,
        modification=modification,
        study=study,
        experiment=str(experiment or default_experiment(profile, languages)),
        paths=_build(Paths, merged.get("paths"), "paths"),
        corpus=corpus,
        vocab=vocab,
        spaces=spaces,
        train=train,
        models=models,
        evaluate=evaluate,
        downstream=downstream,
        word_order=word_order,
        languages=languages,
        corpora=corpora,
        rows=rows,
    )
    for entry in (modification, *study):  # as `train` will resolve them: one path for both
        resolve_run(cfg, entry, seeds[0])
    return cfg


def _merged_profile(raw: dict[str, Any], overrides: dict[str, Any]
                    ) -> tuple[str, dict[str, Any]]:
    """The chosen profile's name and the values it sees: the file's top level, the
    profile's values over it, the overrides over both (every profile checked, not only the
    chosen one: a bad one fails before its turn comes)."""
    _check_keys(raw, "")
    _check_keys(overrides, "")
    profiles = _deep_merge(
        _mapping(raw.get(PROFILES_KEY), PROFILES_KEY, ("<profile name>",)),
        _mapping(overrides.get(PROFILES_KEY), PROFILES_KEY, ("<profile name>",)),
    )
    profile = overrides.get("profile", raw.get("profile", "quick"))
    if not isinstance(profile, str) or profile not in profiles:
        close = difflib.get_close_matches(str(profile), list(profiles), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UserError(f"unknown profile {profile!r}{hint}; valid: "
                        f"{', '.join(profiles) or '(none)'}")
    for name, values in profiles.items():
        values = _mapping(values, f"{PROFILES_KEY}.{name}", tuple(SECTIONS))
        pinned = sorted(set(values) & TOP_LEVEL_ONLY)
        if pinned:
            raise UserError(
                f"profile {name!r} sets {', '.join(pinned)}: these are read by dvc.yaml from "
                "the top of params.yaml, so set them there (or with `dvc exp run -S`)"
            )
        _reject_unknown(values, tuple(SECTIONS), f"{PROFILES_KEY}.{name}")
        _check_keys(values, f"{PROFILES_KEY}.{name}")
    base = {k: v for k, v in raw.items() if k != PROFILES_KEY}
    merged = _deep_merge(_deep_merge(base, profiles[profile] or {}), overrides)
    merged.pop(PROFILES_KEY, None)
    return profile, merged


def _check_modification(modification: Any) -> str:
    """``modification``: a name, '+'-joined names or a paper ID (resolved with the rest)."""
    if isinstance(modification, bool) or not isinstance(modification, str | int):
        raise UserError(f"modification = {modification!r}: must be a name, '+'-joined names "
                        "or a paper ID")
    return str(modification)


def _models(merged: dict[str, Any]) -> dict[str, ModelConfig]:
    """``models``: every size of :data:`MODEL_SIZES`, each a :class:`ModelConfig`."""
    models_raw = _mapping(merged.get("models"), "models", MODEL_SIZES)
    models = {name: _build(ModelConfig, v, f"models.{name}") for name, v in models_raw.items()}
    for needed in MODEL_SIZES:
        if needed not in models:
            raise UserError(f"models.{needed} missing; valid sizes: {', '.join(MODEL_SIZES)}")
    return models


def _train_section(merged: dict[str, Any], models: dict[str, ModelConfig]) -> TrainConfig:
    """``train``: its step, stack and compile together, every replacement the config or the
    registry names, and each model size against it."""
    train = _build(TrainConfig, merged.get("train"), "train")
    if train.step not in TRAIN_STEPS:
        raise UserError(f"train.step = {train.step!r}: valid: {', '.join(TRAIN_STEPS)}")
    if train.step == FUSED_STEP and (train.stack > 1 or train.compile):
        raise UserError(f"train.step = fused with train.stack = {train.stack} and "
                        f"train.compile = {str(train.compile).lower()}: the fused step is "
                        "compiled already and trains one model at a time; valid: stack 1 and "
                        "compile false, or step eager")
    if train.stack > 1 and train.compile:
        raise UserError(f"train.compile = true with train.stack = {train.stack}: a stack runs "
                        "under torch.func.vmap, not torch.compile; valid: compile false, or "
                        "stack 1")
    if train.replacement_override is not None:
        _check_replacement(train.replacement_override, "train.replacement_override")
    for name, mod in mods.REGISTRY.items():
        _check_replacement(mod.changes.get("replacement", mods.BERT_REPLACEMENT), name)
    for size, model in models.items():
        _check_model(size, model, train)
    return train


def _evaluate_section(merged: dict[str, Any], corpus: CorpusConfig,
                      models: dict[str, ModelConfig]) -> EvalConfig:
    """``evaluate``: no more sentences than the dev corpus holds, no layer a model lacks."""
    evaluate = _build(EvalConfig, merged.get("evaluate"), "evaluate")
    evaluate = replace(evaluate, layers=parse_layers(evaluate.layers))
    for key in ("dev_sentences", "curve_sentences"):
        if getattr(evaluate, key) > corpus.dev_sentences:
            raise UserError(
                f"evaluate.{key} = {getattr(evaluate, key)} is more than corpus.dev_sentences "
                f"= {corpus.dev_sentences} (the dev corpus is cut to that); valid: <= "
                f"{corpus.dev_sentences}"
            )
    if evaluate.layers != ALL_LAYERS:
        for size, model in models.items():
            if max(evaluate.layers) > model.num_hidden_layers:
                raise UserError(
                    f"evaluate.layers = {list(evaluate.layers)} but models.{size} has "
                    f"{model.num_hidden_layers} layers; valid: 0-{model.num_hidden_layers} "
                    f"or {ALL_LAYERS!r}"
                )
    return evaluate


def _spaces_section(merged: dict[str, Any], languages: tuple[str, ...], corpus: CorpusConfig,
                    corpora: dict[str, UserCorpusConfig]) -> SpacesConfig:
    """``spaces``: a silver seed dictionary only where verse-aligned real languages give one."""
    spaces = _build(SpacesConfig, merged.get("spaces"), "spaces")
    if spaces.seed_dictionary not in SEED_DICTIONARIES:
        raise UserError(f"spaces.seed_dictionary = {spaces.seed_dictionary!r}; valid: "
                        f"{', '.join(SEED_DICTIONARIES)}")
    if spaces.seed_dictionary != "none" and languages == (corpus.train_edition, "fake"):
        raise UserError(
            f"spaces.seed_dictionary = {spaces.seed_dictionary!r} needs real languages (a "
            "silver dictionary from the verse alignment); Fake-English is mapped unsupervised "
            "(valid: none, or e.g. languages [3, s, i])"
        )
    if spaces.seed_dictionary != "none" and (languages[0] in corpora or any(
            lang.other_domain for lang in langs.parse_languages(
                languages, corpora={name: c.iso for name, c in corpora.items()}))):
        raise UserError(
            f"spaces.seed_dictionary = {spaces.seed_dictionary!r} needs verse-aligned train "
            "text; user corpora and an ot language's verses are not parallel (valid: none, "
            "VecMap unsupervised as Dufter & Schütze 2020 §5)"
        )
    return spaces


def _vocab_section(merged: dict[str, Any], languages: tuple[str, ...], corpus: CorpusConfig,
                   isos: dict[str, str]) -> VocabConfig:
    """``vocab``: a known mode and unit; a shared vocabulary only for real languages."""
    vocab = _build(VocabConfig, merged.get("vocab"), "vocab")
    if vocab.mode not in VOCAB_MODES:
        raise UserError(f"vocab.mode = {vocab.mode!r}; valid: {', '.join(VOCAB_MODES)}")
    if vocab.unit not in VOCAB_UNITS:
        raise UserError(f"vocab.unit = {vocab.unit!r}; valid: {', '.join(VOCAB_UNITS)}")
    if vocab.shared and languages == (corpus.train_edition, "fake"):
        raise UserError(
            f"vocab.mode = {vocab.mode!r} needs real languages; [{', '.join(languages)}] has "
            "one vocabulary and its id-shifted copy (valid: separate, or e.g. languages "
            "[3, s, i])"
        )
    if vocab.shared:
        _check_own_domain_pairs(languages, isos, vocab.mode)
    return vocab


def _downstream_section(merged: dict[str, Any], train: TrainConfig) -> DownstreamConfig:
    """``downstream``: no position the pretrained model never saw, a known task."""
    downstream = _build(DownstreamConfig, merged.get("downstream"), "downstream")
    if downstream.max_length > train.max_length:
        raise UserError(
            f"downstream.max_length = {downstream.max_length} is more than train.max_length = "
            f"{train.max_length} (positions the model never saw; lang-pos shifts by "
            f"train.max_length); valid: <= {train.max_length}"
        )
    _check_task(downstream)
    return downstream


def resolve_run(cfg: Config, modification: str, seed: int) -> RunConfig:
    """The fully resolved configuration of one model, validated as a whole (the seed, the
    modification's parts and whether they apply to the languages, its model's sizes)."""
    check_seed(seed)
    recipe = mods.resolve_recipe(modification)
    if cfg.train.replacement_override is not None:
        recipe = replace(recipe, replacement=tuple(cfg.train.replacement_override))
    langs.check_modification(modification, cfg.language_list)
    mode = cfg.vocab.mode
    if cfg.verses and recipe.needs_knn and cfg.vocab.shared:
        raise mods.ModificationError(
            f"modification {mods.canonical_name(modification)!r} replaces a token by a "
            f"neighbour in another language, told apart by its id; vocab.mode = {mode!r} "
            "gives the languages shared ids (valid with it: any modification without "
            "knn-replace)"
        )
    if recipe.shift_special and cfg.vocab.shared:
        raise mods.ModificationError(
            f"modification {mods.canonical_name(modification)!r} gives each language's "
            f"block its own specials; vocab.mode = {mode!r} has one block for all "
            "languages (valid with it: any modification without shift-special)"
        )
    if recipe.language_sep and cfg.vocab.shared:
        raise mods.ModificationError(
            f"modification {mods.canonical_name(modification)!r} gives each language its "
            f"own [SEP] in its own block; vocab.mode = {mode!r} has one block for all "
            "languages (valid with it: any modification without lang-id)"
        )
    model = cfg.models[recipe.model_size]
    count = len(cfg.languages)
    if recipe.language_positions and count > 2:
        # one position block per language: N x max_length positions (2 languages: the
        # configured table, checked below as before)
        needed = count * cfg.train.max_length
        model = replace(model, max_position_embeddings=max(
            model.max_position_embeddings, needed))
    if recipe.next_sentence and (recipe.language_positions or not recipe.parallel):
        other = "lang-pos" if recipe.language_positions else "no-parallel"
        why = ("gives segment ids to languages; nsp gives them to the two sentences of a "
               "pair" if recipe.language_positions else
               "splits the verses between languages; nsp's true next sentence would "
               "cross the split")
        raise mods.ModificationError(
            f"modification {mods.canonical_name(modification)!r}: {other} {why} "
            "(valid with nsp: any modification without lang-pos and no-parallel)")
    if recipe.layers or recipe.heads or recipe.size_factor:
        model = _reshaped(cfg, model, recipe, modification)
    if recipe.code_switch and (not cfg.verses or cfg.user_corpora
                               or cfg.vocab.mode != VOCAB_JOINT or recipe.unigram_target):
        raise mods.ModificationError(
            f"modification {mods.canonical_name(modification)!r} switches words into "
            "another language's by a dictionary induced from verse-aligned train text and "
            "read with one shared WordPiece; valid with: real languages of the Bible, "
            "vocab.mode = 'joint' (not union: a switched word would be cut by its host "
            "language's pieces), without unigram-target")
    if (recipe.separate_layers or recipe.random_in_language) and cfg.vocab.shared:
        raise mods.ModificationError(
            f"modification {mods.canonical_name(modification)!r} tells languages apart by "
            f"their blocks of ids; vocab.mode = {mode!r} has one block for all languages "
            "(valid with it: any modification without "
            f"{mods.names_setting('separate_layers', 'random_in_language')})")
    if recipe.separate_layers > model.num_hidden_layers:
        raise mods.ModificationError(
            f"modification {mods.canonical_name(modification)!r}: the model has "
            f"{model.num_hidden_layers} layers; valid: sep-L1-<n> with n <= "
            f"{model.num_hidden_layers}")
    _check_run(recipe, model, cfg.train, recipe.model_size, modification)
    return RunConfig(
        study=cfg,
        modification=mods.canonical_name(modification),
        seed=seed,
        recipe=recipe,
        model=model,
    )


def _reshaped(cfg: Config, model: ModelConfig, recipe: mods.Recipe, modification: str
              ) -> ModelConfig:
    """K et al. 2020 §3.3: another depth or head count at the model size's parameter count
    (Tables 4-5), or another count (``params-<x>``: x times it, Tables 6-7).

    The count is the lab's ``BertForMaskedLM`` (tied decoder) with the study's nominal
    vocabulary (``vocab.size`` per language: a large-alphabet block may be bigger) and
    its position table; the hidden size is the multiple of the heads nearest to it,
    intermediate 4 × hidden (K et al. 2020), within 5 % or a one-line error.
    """
    vocab = cfg.vocab.size * len(cfg.languages)
    reference = parameter_count(BertShape(
        model.hidden_size, model.num_hidden_layers, model.num_attention_heads, vocab,
        model.max_position_embeddings, max(2, len(cfg.languages)),
        model.intermediate_size)).total
    if recipe.size_factor:
        reference = round(reference * recipe.size_factor)
    layers = recipe.layers or model.num_hidden_layers
    heads = recipe.heads or model.num_attention_heads
    try:
        shape = solve_hidden_size(reference, layers, heads, vocab,
                                  model.max_position_embeddings,
                                  type_vocab_size=max(2, len(cfg.languages)))
    except ValueError as err:
        raise mods.ModificationError(
            f"modification {mods.canonical_name(modification)!r}: {err}") from None
    reshaped = replace(model, hidden_size=shape.hidden_size,
                       intermediate_size=shape.intermediate, num_hidden_layers=layers,
                       num_attention_heads=heads)
    deepest = max(cfg.evaluate.layers) if cfg.evaluate.layers != ALL_LAYERS else 0
    if deepest > layers:
        raise mods.ModificationError(
            f"modification {mods.canonical_name(modification)!r} has {layers} layers but "
            f"evaluate.layers = {list(cfg.evaluate.layers)} asks for layer {deepest}; "
            f"valid: evaluate.layers = all (each model its own), or layers <= {layers}")
    return reshaped


def _check_own_domain_pairs(languages: tuple[str, ...], corpora: dict[str, str],
                            mode: str) -> None:
    """Refuse an edition beside its own other-domain transform (``[3, ot:3]``) under a shared
    vocabulary. Both are evaluated (and tested downstream) on the same dev verses of the same
    edition, so with shared ids their inputs are identical: every cross-language score is
    1.000 by construction, an untrained model's too. Under ``separate`` the copy has ids of
    its own (as Fake-English has), and the measurement means something."""
    parsed = langs.parse_languages(languages, corpora=corpora)
    first = parsed[0].edition
    for language in parsed:
        if language.other_domain and langs.Language(language.edition) in parsed:
            raise UserError(
                f"languages [{', '.join(languages)}] lists {language.edition!r} and "
                f"{language.key(first)!r}: both are evaluated on the same dev verses, so with "
                f"vocab.mode {mode!r} their inputs are identical and every score between them "
                "is 1.000 by construction; use vocab.mode separate, or the transform of "
                f"another edition (e.g. [{language.edition}, ot:<other code>])")


def _check_task(downstream: DownstreamConfig) -> None:
    """``downstream.task``: a registered task, with ``task_path`` where it reads one (whether
    the folder exists is checked when the task runs, so ``check`` works without the data)."""
    task = get_task(downstream.task)
    if task.needs_path and downstream.task_path is None:
        raise UserError(f"downstream.task = {downstream.task!r} needs downstream.task_path: "
                        "the folder its data is in (README, \"Downstream task\")")
    if not task.needs_path and downstream.task_path is not None:
        # a path nobody reads would look like the task's data while the Bible DB is used
        readers = ", ".join(name for name, other in TASKS.items() if other.needs_path)
        raise UserError(f"downstream.task_path = {downstream.task_path}: downstream.task = "
                        f"{downstream.task!r} reads no folder (only {readers} does); set "
                        "task_path to null or choose that task")


def _check_word_order(word_order: WordOrderConfig) -> None:
    valid = f"{ALL_EDITIONS!r} or a list of edition codes ({', '.join(EDITIONS)})"
    if word_order.reference not in EDITIONS or EDITIONS[word_order.reference][0] != "en":
        english = [code for code, (iso, _) in EDITIONS.items() if iso == "en"]
        raise UserError(f"word_order.reference = {word_order.reference!r}: must be an English "
                        f"edition; valid: {', '.join(english)}")
    if isinstance(word_order.editions, str):
        if word_order.editions != ALL_EDITIONS:
            raise UserError(f"word_order.editions = {word_order.editions!r}; valid: {valid}")
        return
    unknown = [code for code in word_order.editions if code not in EDITIONS]
    if unknown or not word_order.editions or len(set(word_order.editions)) < len(
            word_order.editions):
        bad = unknown[0] if unknown else list(word_order.editions)
        raise UserError(f"word_order.editions = {bad!r} (unknown, empty or repeated); "
                        f"valid: {valid}")


def parse_overrides(pairs: list[str] | None) -> dict[str, Any]:
    """Dotted ``key=value`` overrides from the command line (``--set train.epochs=3``) as the
    nested dict :func:`load_config` merges; values are read as YAML (``[0, 1]``, ``null``)."""
    tree: dict[str, Any] = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise UserError(f"--set {pair!r}: expected key=value, e.g. train.epochs=3")
        key, value = pair.split("=", 1)
        *parents, leaf = key.split(".")
        if not all([*parents, leaf]):
            raise UserError(f"--set {pair!r}: empty key part; expected e.g. train.epochs=3")
        node = tree
        for depth, part in enumerate(parents):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UserError(f"--set {pair!r}: {'.'.join(parents[: depth + 1])} is "
                                "already set to a value, not a section")
        node[leaf] = _yaml(value, f"--set {pair}")
    return tree


#: what every model of a row has in its own way (not a setting of the row)
_RUN_OWN = ("modification", "seed")


def row_recipe(cfg: Config, modification: str) -> dict[str, Any]:
    """The settings ``modification``'s models differ in from ``original``'s under ``cfg``
    (its recipe fields and what they change: the model's positions, the vocabulary …), with
    the modification's name: the parameters of its row's parent run in MLflow, so that
    Compare of the rows shows what each row changes, not a hundred equal settings."""
    mine = resolve_run(cfg, modification, 0).as_params()
    original = resolve_run(cfg, "original", 0).as_params()
    return {"modification": mods.canonical_name(modification),
            **{key: value for key, value in mine.items()
               if key not in _RUN_OWN and original.get(key) != value}}
