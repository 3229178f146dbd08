"""The registry of modifications: each one declares what it changes, nothing else.

A modification is a small declarative object: a name, a one-line description and the
fields of a :class:`Recipe` it overrides. A :class:`Family` is the same with a number in
its name (``permute-0.5``: K et al. 2020's word-order permutation with p = 0.5). Combinations
such as ``lang-pos;shift-special;no-random`` are the left-to-right merge of their parts; two
parts that set the same field to different values are a conflict, never a silent
override. To add an ablation that an existing :class:`Recipe` field expresses, add one entry
to ``REGISTRY`` (and, if the paper has one, its ID to ``PAPER_IDS``) and one test: whether it
stacks and how fingerprints treat its fields follow from the fields it sets. A new kind of
change is a new ``Recipe`` field (docs/concepts.md, "Adding a modification").
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields, replace
from typing import Any

from multilab.errors import UserError

#: Replacement probabilities of the selected MLM positions: (mask, keep, random, knn).
Replacement = tuple[float, float, float, float]

BERT_REPLACEMENT: Replacement = (0.8, 0.1, 0.1, 0.0)


class ModificationError(UserError):
    """An unknown, conflicting or malformed modification string."""


@dataclass(frozen=True)
class Recipe:
    """Everything a modification may change, with the values of the original setup.

    Grouped by where in the data flow the change acts, so each stage reads only its part.
    """

    # corpus
    invert_fake: bool = False  # Fake-English word order reversed (training and evaluation)
    parallel: bool = True  # False: English from the first half, Fake-English from the second
    # pretraining corpus only (never evaluation or fine-tuning): K et al. 2020
    permute: float = 0.0  # share p of each sentence's word-piece pairs swapped (§3.2.2)
    unigram_target: bool = False  # every language but the first: unigram word draws (§3.2.3)
    # Conneau et al. 2020's extra anchors: dictionary words switched (30 %, <= 15 %)
    code_switch: bool = False
    # vocab / inputs
    shift_special: bool = False  # Fake-English gets its own [CLS], [SEP], [MASK], ...
    language_sep: bool = False  # each language its own [SEP] (K et al. 2020's [SEP-A], [SEP-B])
    language_positions: bool = False  # Fake-English: positions + max_length, segment id 1
    attend_padding: bool = False  # the authors' code: padding attended (no attention mask)
    # model shape at a fixed parameter count (K et al. 2020 §3.3): 0 = the model size's own
    layers: int = 0  # Transformer layers; the hidden size is solved (resolve.resolve_run)
    heads: int = 0  # attention heads; likewise
    size_factor: float = 0.0  # parameter count x this at the depth and heads (0 = x 1)
    # objective
    next_sentence: bool = False  # K et al. 2020 §3.4.1: sentence pairs, BERT's NSP head and loss
    # Liu et al. 2020b §3.2.3: inputs sliced into w word-pieces (0 = whole sentences)
    window: int = 0
    # masking
    replacement: Replacement = BERT_REPLACEMENT
    # Conneau et al. 2020's sep-emb: random replacements from the row's own language's block
    # only (BERT's: the whole vocabulary)
    random_in_language: bool = False
    # parameter sharing (Conneau et al. 2020 §4 group 3): the bottom n Transformer layers one
    # copy per language (training/language_layers.py); 0 = every layer shared
    separate_layers: int = 0
    # model
    model_size: str = "small"
    # schedule
    epoch_factor: float = 1.0
    trained: bool = True

    @property
    def needs_knn(self) -> bool:
        """knn replacement needs a cross-lingual neighbour table from the spaces stage."""
        return self.replacement[3] > 0

    @property
    def separate_embeddings(self) -> bool:
        """Conneau et al. 2020's sep-emb: every embedding of a language its own (positions,
        specials, random replacements), so fine-tuning on English leaves them as pretrained
        (evaluation/downstream.py). In-language random replacements alone are masking, not
        separate embeddings."""
        return self.language_positions and self.shift_special and self.random_in_language


#: Recipe fields that change the model itself (its shape, its heads, whether it trains): a
#: modification setting one cannot share a stack with ``original`` (training/stacked.py).
ARCHITECTURE_FIELDS = frozenset({"layers", "heads", "size_factor", "next_sentence",
                                 "separate_layers", "model_size", "trained"})


@dataclass(frozen=True)
class Modification:
    """One named ablation: a description and the recipe fields it sets."""

    name: str
    description: str
    changes: dict[str, Any] = field(default_factory=dict)

    @property
    def stacks(self) -> bool:
        """Whether it trains in one stack with ``original`` (training/stacked.py): it sets
        no architecture field, so it changes only data, masking, inputs or positions."""
        return not set(self.changes) & ARCHITECTURE_FIELDS


REGISTRY: dict[str, Modification] = {
    m.name: m
    for m in [
        Modification("original", "the unmodified setup", {}),
        Modification(
            "lang-pos",
            "language-specific position and segment embeddings",
            {"language_positions": True},
        ),
        Modification(
            "shift-special",
            "special tokens shifted with Fake-English (no shared [CLS], [SEP], ...)",
            {"shift_special": True},
        ),
        Modification(
            "no-random",
            "masked tokens never replaced by random tokens: (mask, keep, random, knn) = "
            "(0.8, 0.2, 0.0, 0.0), BERT's (0.8, 0.1, 0.1, 0.0)",
            {"replacement": (0.8, 0.2, 0.0, 0.0)},
        ),
        Modification(
            "lang-id",
            "K et al. 2020's language-identity marker: each language ends its sentences with its "
            "own [SEP] ([SEP-A], [SEP-B], ...); every other special stays shared",
            {"language_sep": True},
        ),
        Modification(
            "unigram-target",
            "K et al. 2020's unigram-frequency corpus: every language but the first pretrains on "
            "words drawn from its own unigram distribution, sentence lengths kept",
            {"unigram_target": True},
        ),
        Modification(
            "nsp",
            "K et al. 2020's next-sentence prediction: each pretraining input a pair of sentences "
            "of one language (the true next one half of the time, a random one otherwise) "
            "with BERT's NSP head and loss beside MLM",
            {"next_sentence": True},
        ),
        Modification(
            "extra-anchors",
            "Conneau et al. 2020's extra anchors: pretraining words switched to their "
            "translation in a silver dictionary (IBM-1 over the aligned train verses) 30 % of "
            "the time, at most 15 % of a sentence's words; joint vocabularies",
            {"code_switch": True},
        ),
        Modification(
            "sep-emb",
            "Conneau et al. 2020's language-specific embeddings: each language its own "
            "word-piece block (as every separate vocabulary), its own positions and specials "
            "(lang-pos + shift-special), random replacements only within the language",
            {"language_positions": True, "shift_special": True, "random_in_language": True},
        ),
        Modification(
            "lang-random",
            "random replacements only from the masked row's own language (Conneau et al. "
            "2020's in-language sampling, part of sep-emb, alone; the variant avoiding "
            "cross-language replacements Dufter & Schütze 2020 point to): no-random's "
            "random tokens kept, their crossing between languages removed",
            {"random_in_language": True},
        ),
        Modification(
            "attend-padding",
            "the authors' padding (their run_language_modeling.py passes no attention mask): "
            "padding is attended, at its row's continuing positions and segment, as the row's "
            "own [PAD] under shift-special; needs train.length_pieces = 1 (each batch padded "
            "to its longest row, as theirs)",
            {"attend_padding": True},
        ),
        Modification(
            "inv-order",
            "Fake-English word order inverted",
            {"invert_fake": True},
        ),
        Modification(
            "no-parallel",
            "English and Fake-English from different halves of the corpus, twice the epochs",
            {"parallel": False, "epoch_factor": 2.0},
        ),
        Modification(
            "overparam",
            "BERT-base instead of BERT-small (lr 1e-4, batch 16 x 16)",
            {"model_size": "base"},
        ),
        Modification("untrained", "random initialisation, no training", {"trained": False}),
        Modification(
            "knn-replace",
            "a fourth replacement: a cross-lingual VecMap neighbour, (0.5, 0.1, 0.1, 0.3)",
            {"replacement": (0.5, 0.1, 0.1, 0.3)},
        ),
    ]
}

#: The Recipe fields of the first fingerprints. Every field added since is left out of a
#: fingerprint while it has its default, so the models trained before it keep theirs: a new
#: field is declared once, in :class:`Recipe`, with the original setup's value as its default.
FIRST_FIELDS = frozenset({"invert_fake", "parallel", "shift_special", "language_positions",
                          "replacement", "model_size", "epoch_factor", "trained"})
#: Recipe fields added after models were trained, with their defaults (read from Recipe).
LATER_FIELDS: dict[str, Any] = {f.name: f.default for f in fields(Recipe)
                                if f.name not in FIRST_FIELDS}


@dataclass(frozen=True)
class Family:
    """Modifications with a number in the name: ``<prefix>-<value>`` sets ``field`` to value.

    The canonical spelling writes the value with ``:g`` (``permute-1.0`` is ``permute-1``),
    so one model has one folder and one MLflow name.
    """

    prefix: str
    description: str  # a format string with {value}
    field: str
    low: float
    high: float
    example: str
    integer: bool = False  # a count (layers, heads): written and parsed as an integer

    @property
    def stacks(self) -> bool:
        """As :attr:`Modification.stacks`: its field is no architecture field."""
        return self.field not in ARCHITECTURE_FIELDS

    @property
    def symbol(self) -> str:
        return "n" if self.integer else "p"

    def valid(self) -> str:
        return (f"{self.prefix}-<{self.symbol}> with {self.low:g} <= {self.symbol} <= "
                f"{self.high:g} (e.g. {self.example})")

    def parse(self, part: str) -> float:
        """The value of ``part`` (``permute-0.5`` → 0.5), or a one-line error."""
        text = part[len(self.prefix) + 1:]
        try:
            value = int(text) if self.integer else float(text)
        except ValueError:
            kind = "an integer" if self.integer else "a number"
            raise ModificationError(
                f"modification {part!r}: {text!r} is not {kind}; valid: {self.valid()}"
            ) from None
        if not self.low <= value <= self.high:
            raise ModificationError(
                f"modification {part!r}: {self.symbol} = {value:g} is outside [{self.low:g}, "
                f"{self.high:g}]; valid: {self.valid()}"
            )
        return value

    def modification(self, value: float) -> Modification:
        return Modification(f"{self.prefix}-{value:g}", self.description.format(value=value),
                            {self.field: value})


FAMILIES: dict[str, Family] = {
    f.prefix: f
    for f in [
        Family(
            "permute",
            "K et al. 2020's word-order permutation: p·L/2 random word-piece pairs of each "
            "pretraining sentence swapped, in every language, p = {value:g}",
            "permute", 0.0, 1.0, "permute-0.5",
        ),
        Family(
            "depth",
            "K et al. 2020 Table 4: {value:g} Transformer layers, the hidden size solved so that "
            "the parameter count stays the model size's (intermediate = 4 x hidden)",
            "layers", 1, 48, "depth-4", integer=True,
        ),
        Family(
            "heads",
            "K et al. 2020 Table 5: {value:g} attention heads, the hidden size solved so that the "
            "parameter count stays the model size's (a multiple of the heads)",
            "heads", 1, 64, "heads-2", integer=True,
        ),
        Family(
            "window",
            "Liu et al. 2020b's context window: every pretraining sentence sliced into segments "
            "of at most {value:g} word-pieces, each its own input (the same tokens, shorter "
            "context)",
            "window", 1, 512, "window-20", integer=True,
        ),
        Family(
            "sep-L1",
            "Conneau et al. 2020's language-specific bottom layers: Transformer layers "
            "1-{value:g} one copy per language, the rest shared (sep-L1-3, sep-L1-6 of 12 as the "
            "paper's)",
            "separate_layers", 1, 48, "sep-L1-3", integer=True,
        ),
        Family(
            "params",
            "K et al. 2020 Tables 6-7: {value:g} x the model size's parameter count at its depth "
            "and heads (or those of depth-<n> / heads-<n>), the hidden size solved "
            "(intermediate = 4 x hidden)",
            "size_factor", 0.05, 20.0, "params-0.5",
        ),
    ]
}


def _family_part(part: str) -> Modification | None:
    """The modification a ``<prefix>-<value>`` part names, None if no family has the prefix."""
    family = next((f for f in FAMILIES.values() if part.startswith(f"{f.prefix}-")), None)
    return family.modification(family.parse(part)) if family else None


def lookup(part: str) -> Modification:
    """A registry entry or a family member, by its (canonical or not) name."""
    if part in REGISTRY:
        return REGISTRY[part]
    found = _family_part(part)
    if found is None:
        close = difflib.get_close_matches(part, [*REGISTRY, *PAPER_IDS.values()], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ModificationError(
            f"unknown modification {part!r}{hint}; valid: {valid_names()} "
            f"or a paper ID ({', '.join(PAPER_IDS)})"
        )
    return found


#: Dufter & Schütze 2020's model IDs of Tables 1 and 2 and the modification strings they denote.
PAPER_IDS: dict[str, str] = {
    "0": "original",
    "1": "lang-pos",
    "2": "shift-special",
    "3": "inv-order",
    "4": "no-random",
    "5": "lang-pos;shift-special",
    "6": "lang-pos;no-random",
    "7": "shift-special;no-random",
    "8": "lang-pos;shift-special;no-random",
    "9": "lang-pos;inv-order;shift-special;no-random",
    "15": "overparam",
    "16": "lang-pos;overparam",
    "17": "lang-pos;shift-special;no-random;overparam",
    "18": "untrained",
    "19": "untrained;lang-pos",
    "21": "no-parallel",
    "21b": "lang-pos;no-parallel",
    "30": "knn-replace",
}

#: Separators accepted between parts: the paper's ``;`` and ``+`` (safe in paths and DVC).
_SEPARATORS = (";", "+")


def split_modification(text: str) -> list[str]:
    """Split a modification string or paper ID into registry names, in the given order."""
    text = str(text).strip()
    if text in PAPER_IDS:
        text = PAPER_IDS[text]
    for sep in _SEPARATORS[1:]:
        text = text.replace(sep, _SEPARATORS[0])
    parts = [p.strip() for p in text.split(_SEPARATORS[0]) if p.strip()]
    if not parts:
        raise ModificationError(f"empty modification {text!r}; valid: {valid_names()}")
    parts = [lookup(part).name for part in parts]  # family members in canonical spelling
    if len(set(parts)) != len(parts):
        raise ModificationError(f"modification {text!r} names a part twice")
    if "original" in parts and len(parts) > 1:
        raise ModificationError(f"'original' cannot be combined with others in {text!r}")
    return parts


def resolve_recipe(text: str) -> Recipe:
    """Merge the changes of every part of ``text`` into one :class:`Recipe`."""
    recipe = Recipe()
    set_by: dict[str, str] = {}
    valid_fields = {f.name for f in fields(Recipe)}
    for part in split_modification(text):
        for key, value in lookup(part).changes.items():
            if key not in valid_fields:  # a registry bug, caught by the tests
                raise ModificationError(f"{part!r} changes unknown field {key!r}")
            if key in set_by and getattr(recipe, key) != value:
                raise ModificationError(
                    f"{set_by[key]!r} and {part!r} both set {key} differently"
                )
            set_by[key] = part
            recipe = replace(recipe, **{key: value})
    return recipe


def canonical_name(text: str) -> str:
    """The paper's ``;``-joined spelling of a modification (paper IDs expanded)."""
    return ";".join(split_modification(text))


def slug(text: str) -> str:
    """A path- and DVC-safe spelling: parts joined by ``+``."""
    return "+".join(split_modification(text))


def file_stem(text: str, seed: int) -> str:
    """How files about one model are named (figures, plot data): ``<slug>-seed<N>``."""
    return f"{slug(text)}-seed{seed}"


def same_modification(a: str, b: str) -> bool:
    """The same parts in any order (``lang-pos;no-random`` is ``no-random+lang-pos``)."""
    return set(split_modification(a)) == set(split_modification(b))


def paper_id(text: str) -> str | None:
    """The paper ID of a modification, whatever the order of its parts, if it has one."""
    return next((pid for pid, mod in PAPER_IDS.items() if same_modification(mod, text)), None)


def describe(text: str) -> str:
    """Human-readable description joined from the parts."""
    return "; ".join(lookup(p).description for p in split_modification(text))


def valid_names() -> str:
    return ", ".join([*REGISTRY, *(f.valid() for f in FAMILIES.values())])


def stack_group(text: str) -> tuple[str, ...]:
    """Which stack a modification's models may train in: ``()`` for ``original``'s
    architecture (every part stacks: data, masking, inputs, positions), else its
    architecture-changing parts (the seeds of ``overparam`` stack with each other, and with
    ``lang-pos;overparam``, never with ``original``)."""
    return tuple(sorted(p for p in split_modification(text) if not lookup(p).stacks))


def trains_stacked(text: str) -> bool:
    """Whether the stacked trainer can train this modification's models: a plain
    ``BertForMaskedLM`` that trains (not ``untrained``, ``nsp``'s second head or
    ``sep-L1-<n>``'s per-language layers); such models train one at a time."""
    recipe = resolve_recipe(text)
    return recipe.trained and not recipe.next_sentence and not recipe.separate_layers


def check_stack(modifications: list[str]) -> None:
    """Refuse, in one line, models that cannot share a stack: ``untrained`` (nothing to
    train) or modifications of different architectures."""
    if not modifications:
        raise ModificationError("a stack needs at least one model (valid: stack >= 1)")
    for text in modifications:
        if not resolve_recipe(text).trained:
            raise ModificationError(
                f"modification {canonical_name(text)!r} trains nothing and cannot be stacked "
                "(valid: trained modifications)")
    first = modifications[0]
    for text in modifications[1:]:
        if stack_group(text) != stack_group(first):
            differ = ", ".join(sorted(set(stack_group(text)) ^ set(stack_group(first))))
            raise ModificationError(
                f"modifications {canonical_name(first)!r} and {canonical_name(text)!r} "
                f"cannot share a stack: {differ} changes the architecture (valid: one "
                f"architecture per stack: {stackable_names()} with original, or the seeds of "
                "one row)")


def names_setting(*recipe_fields: str) -> str:
    """The registry entries and families that set any of ``recipe_fields`` (for messages
    that name the modifications a rule concerns, current with the registry)."""
    wanted = set(recipe_fields)
    return ", ".join([*(m.name for m in REGISTRY.values() if wanted & set(m.changes)),
                      *(f"{f.prefix}-<{f.symbol}>" for f in FAMILIES.values()
                        if f.field in wanted)])


def stackable_names() -> str:
    """The registry entries and families that stack with ``original``."""
    return ", ".join([*(m.name for m in REGISTRY.values() if m.stacks),
                      *(f"{f.prefix}-<{f.symbol}>" for f in FAMILIES.values() if f.stacks)])
