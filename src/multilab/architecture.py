"""BERT shapes at a fixed parameter count (K et al. 2020 §3.3, Tables 4–7).

K et al. 2020 varies depth, attention heads and size while "the total number of parameters
remains almost the same", changing the hidden size with intermediate = 4 × hidden. Its
counts include the embeddings: BERT-base with a 60,000 vocabulary, 512 positions, 2 token
types, the pooler and the NSP head (``BertForPreTraining``) has exactly 132,775,010
parameters, the paper's "132.78 M". :func:`parameter_count` is the closed form for Hugging
Face's BERT; :func:`solve_hidden_size` inverts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the config's resolution imports this module: transformers costs seconds
    from transformers import BertConfig

#: K et al. 2020 Table 4 spans 132.78–139.33 M around a 132.78 M reference: within 5 %.
DEFAULT_TOLERANCE = 0.05


@dataclass(frozen=True)
class BertShape:
    """What fixes a BERT's parameter count (intermediate defaults to 4 × hidden)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    vocab_size: int
    max_position_embeddings: int
    type_vocab_size: int = 2
    intermediate_size: int | None = None

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} does not divide "
                f"hidden_size={self.hidden_size}; valid head counts divide the hidden size"
            )

    @property
    def intermediate(self) -> int:
        return 4 * self.hidden_size if self.intermediate_size is None else self.intermediate_size

    def config(self, **overrides: object) -> BertConfig:
        """The Hugging Face config of this shape (tied input/output embeddings as the lab)."""
        from transformers import BertConfig

        fields = {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "tie_word_embeddings": True,
        }
        return BertConfig(**{**fields, **overrides})


@dataclass(frozen=True)
class ParameterCount:
    """Parameters of a BERT by part; ``total`` is what K et al. 2020 reports."""

    embeddings: int  # word + position + token type + LayerNorm
    encoder: int  # the transformer layers
    mlm_head: int  # transform (dense + LayerNorm) + output bias (+ decoder if untied)
    pooler: int  # dense over [CLS]: BertForPreTraining and classifiers, not BertForMaskedLM
    nsp_head: int  # next-sentence classifier of BertForPreTraining

    @property
    def total(self) -> int:
        return self.embeddings + self.encoder + self.mlm_head + self.pooler + self.nsp_head

    @property
    def non_embedding(self) -> int:
        return self.total - self.embeddings


def parameter_count(
    shape: BertShape, *, pooler: bool = False, nsp_head: bool = False, tied: bool = True
) -> ParameterCount:
    """Closed-form parameter count of Hugging Face's BERT with an MLM head.

    Defaults match the lab's ``BertForMaskedLM`` (tied decoder, no pooler).
    ``pooler=nsp_head=True`` is ``BertForPreTraining``, the paper's model.
    """
    if nsp_head and not pooler:
        raise ValueError("nsp_head=True needs pooler=True (the NSP head reads the pooled [CLS])")
    h, i = shape.hidden_size, shape.intermediate
    rows = shape.vocab_size + shape.max_position_embeddings + shape.type_vocab_size
    embeddings = rows * h + 2 * h
    attention = 4 * (h * h + h) + 2 * h  # query, key, value, output dense + LayerNorm
    feed_forward = (h * i + i) + (i * h + h) + 2 * h  # intermediate, output dense + LayerNorm
    # untied, transformers (5.x) gives the decoder its own weight and bias beside the head's
    decoder = 0 if tied else shape.vocab_size * (h + 1)
    return ParameterCount(
        embeddings=embeddings,
        encoder=shape.num_hidden_layers * (attention + feed_forward),
        mlm_head=(h * h + h) + 2 * h + shape.vocab_size + decoder,
        pooler=h * h + h if pooler else 0,
        nsp_head=2 * h + 2 if nsp_head else 0,
    )


def solve_hidden_size(
    target: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    vocab_size: int,
    max_position_embeddings: int,
    *,
    type_vocab_size: int = 2,
    tolerance: float = DEFAULT_TOLERANCE,
    include_embeddings: bool = True,
    pooler: bool = False,
    nsp_head: bool = False,
) -> BertShape:
    """The shape (intermediate = 4 × hidden, heads dividing hidden) closest to ``target``.

    The count grows strictly with the hidden size, so the answer is one of the two multiples
    of the head count around the target; a tie goes to the smaller model. ``target`` counts
    what K et al. 2020 counts (embeddings included) unless ``include_embeddings=False``.
    ValueError when the nearest count is further than ``tolerance`` (relative) from it.
    """
    if target < 1 or tolerance < 0:
        raise ValueError(f"target={target} must be >= 1 and tolerance={tolerance} >= 0")
    if num_attention_heads < 1 or num_hidden_layers < 1:
        raise ValueError(
            f"num_attention_heads={num_attention_heads} and num_hidden_layers="
            f"{num_hidden_layers} must both be >= 1"
        )

    def shape_of(hidden: int) -> BertShape:
        return BertShape(
            hidden_size=hidden,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            vocab_size=vocab_size,
            max_position_embeddings=max_position_embeddings,
            type_vocab_size=type_vocab_size,
        )

    def count(hidden: int) -> int:
        parts = parameter_count(shape_of(hidden), pooler=pooler, nsp_head=nsp_head)
        return parts.total if include_embeddings else parts.non_embedding

    hidden = num_attention_heads
    while count(hidden) < target:
        hidden += num_attention_heads
    candidates = (
        [hidden] if hidden == num_attention_heads else [hidden - num_attention_heads, hidden]
    )
    best = min(candidates, key=lambda h: (abs(count(h) - target), h))
    error = abs(count(best) - target) / target
    if error > tolerance:
        near = " and ".join(f"hidden {h} has {count(h):,}" for h in candidates)
        raise ValueError(
            f"no BERT with {num_hidden_layers} layers and {num_attention_heads} heads has "
            f"{target:,} parameters within {tolerance:.0%}: the hidden size must be a multiple "
            f"of {num_attention_heads}, and {near} ({error:.1%} off at best)"
        )
    return shape_of(best)
