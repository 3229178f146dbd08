"""Mean of language, mean difference shift, unsupervised token translation (Liu et al. 2020b §4).

* **Mean of language** R_L^l = E_{x∈C, i∈I}[h^l_{x,i}]: the mean hidden state of layer l over a
  language's corpus. The paper does not say which positions I holds; here every real token
  counts once (a token-weighted mean), **[CLS], [SEP] and padding excluded** — they are the same
  in every language and would pull both means towards each other. Layer 0 is the embedding
  output, layer l ≥ 1 the output of encoder layer l (Hugging Face's ``hidden_states[l]``), so
  the paper's layers 1–12 are 1–12 here.
* **Mean difference shift** D^l_{L1→L2} = R^l_{L2} − R^l_{L1}.
* **Unsupervised token translation**: the source sentence goes in *unmasked*; α·D^l is added to
  the output of layer l at every position (the paper: "to the hidden representation of each
  token"); the remaining layers and the MLM head run on the shifted states and the argmax token
  at each real position is the translation. The shift is a forward hook on the layer module
  (:func:`shifted`), so the model's own code runs the rest — attention masks, dropout off, any
  attention implementation — instead of a hand-written copy of it.
* **Metrics** (Liu et al. 2020b §4.2.2): the convert rate, #(y ∈ V_t − V_s) / (#y − #(y ∈ V_s ∩
V_t)),
  and BLEU-1 against the parallel reference, computed *corpus-level* with NLTK (modified unigram
  precision pooled over all sentences times one brevity penalty; weights (1, 0, 0, 0), no
  smoothing — unigram BLEU has no empty higher-order counts to smooth). Both are fractions in
  [0, 1]; the paper prints BLEU-1 × 100.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from nltk.translate.bleu_score import corpus_bleu
from torch import Tensor
from transformers import BertForMaskedLM

#: An elementwise test on a LongTensor of token ids → BoolTensor of the same shape.
IdPredicate = Callable[[Tensor], Tensor]
#: Every input the lab's encoder gives: lang-pos models read a language's own positions
#: (``position_ids``) and segment id, so dropping either reads it as another language.
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "position_ids")


def id_set(ids: Collection[int]) -> IdPredicate:
    """The predicate "is one of ``ids``" (e.g. the ids of a language's wordpieces)."""
    members = torch.as_tensor(sorted(ids), dtype=torch.long)
    return lambda tokens: torch.isin(tokens, members.to(tokens.device))


def no_ids(tokens: Tensor) -> Tensor:
    """The predicate of an empty set (no shared tokens)."""
    return torch.zeros_like(tokens, dtype=torch.bool)


def real_tokens(batch: Mapping[str, Tensor], special_ids: Collection[int]) -> Tensor:
    """Positions that hold a real token: attended to and not a special id ([CLS], [SEP], …)."""
    ids = batch["input_ids"]
    keep = batch.get("attention_mask", torch.ones_like(ids)).bool()
    if special_ids:
        keep &= ~torch.isin(ids, torch.as_tensor(sorted(special_ids), device=ids.device))
    return keep


def _model_inputs(model: BertForMaskedLM, batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
    device = model.device
    return {k: batch[k].to(device) for k in MODEL_INPUTS if k in batch}


def _num_layers(model: BertForMaskedLM) -> int:
    return len(model.bert.encoder.layer)


@torch.no_grad()
def language_means(
    model: BertForMaskedLM,
    batches: Sequence[Mapping[str, Tensor]],
    special_ids: Collection[int],
) -> Tensor:
    """R_L^l for l = 0 … L: a (layers + 1) × hidden matrix, the token-weighted mean over the
    real tokens of every batch (see the module doc). Accumulated in float64."""
    model.eval()
    total: Tensor | None = None
    count = 0
    for batch in batches:
        inputs = _model_inputs(model, batch)
        keep = real_tokens(inputs, special_ids)
        hidden = model.bert(**inputs, output_hidden_states=True).hidden_states
        sums = torch.stack([h[keep].double().sum(dim=0) for h in hidden])
        total = sums if total is None else total + sums
        count += int(keep.sum())
    if total is None or count == 0:
        raise ValueError("no real token in the batches: nothing to average")
    return (total / count).float().cpu()


def mean_difference_shift(source_means: Tensor, target_means: Tensor) -> Tensor:
    """D^l_{L1→L2} = R^l_{L2} − R^l_{L1} for every layer (same shape as the means)."""
    if source_means.shape != target_means.shape:
        raise ValueError(
            f"means of different shapes: {tuple(source_means.shape)} vs {tuple(target_means.shape)}"
        )
    return target_means - source_means


@contextmanager
def shifted(model: BertForMaskedLM, layer: int, shift: Tensor) -> Iterator[None]:
    """While inside, the output of ``layer`` (0 = embeddings, l = encoder layer l) gets
    ``shift`` (a hidden-size vector, already scaled by α) added at every position.

    The hook is prepended, so Hugging Face's own output recording (``output_hidden_states``)
    sees the shifted state: ``hidden_states[layer]`` then differs from the unshifted run by
    exactly ``shift``.
    """
    layers = _num_layers(model)
    if not 0 <= layer <= layers:
        raise ValueError(f"layer {layer} out of range; valid: 0 (embeddings) … {layers}")
    hidden_size = model.config.hidden_size
    if shift.shape != (hidden_size,):
        raise ValueError(f"the shift must be one vector of size {hidden_size}, got "
                         f"{tuple(shift.shape)}")
    module = model.bert.embeddings if layer == 0 else model.bert.encoder.layer[layer - 1]

    def add_shift(_module: torch.nn.Module, _args: object, output: object) -> object:
        if isinstance(output, tuple):
            return (output[0] + shift.to(output[0]), *output[1:])
        return output + shift.to(output)

    handle = module.register_forward_hook(add_shift, prepend=True)
    try:
        yield
    finally:
        handle.remove()


@torch.no_grad()
def translate(
    model: BertForMaskedLM,
    batch: Mapping[str, Tensor],
    layer: int,
    shift: Tensor,
    special_ids: Collection[int],
) -> list[list[int]]:
    """Argmax MLM predictions of the unmasked batch with ``shift`` added at ``layer``: per
    sentence, the predicted ids at its real-token positions (position-wise translation)."""
    model.eval()
    inputs = _model_inputs(model, batch)
    keep = real_tokens(inputs, special_ids)
    with shifted(model, layer, shift):
        logits = model(**inputs).logits
    predicted = logits.argmax(dim=-1)
    return [row[mask].tolist() for row, mask in zip(predicted.cpu(), keep.cpu(), strict=True)]


def convert_rate(
    outputs: Sequence[Sequence[int]],
    is_target: IdPredicate,
    is_shared: IdPredicate = no_ids,
) -> float:
    """Share of target-language tokens among the output tokens that are not shared.

    #(y ∈ V_t − V_s) / (#y − #(y ∈ V_s ∩ V_t)): ``is_target`` says y ∈ V_t, ``is_shared`` says
    y ∈ V_s ∩ V_t (for English → Fake-English, whose every wordpiece is shifted, only specials
    are shared). A token of neither language counts in the denominator, as not converted.
    NaN when every output token is shared.
    """
    flat = torch.as_tensor([t for sentence in outputs for t in sentence], dtype=torch.long)
    if flat.numel() == 0:
        raise ValueError("no output tokens")
    shared = is_shared(flat)
    not_shared = int((~shared).sum())
    if not_shared == 0:
        return float("nan")
    return int((is_target(flat) & ~shared).sum()) / not_shared


def bleu1(hypotheses: Sequence[Sequence[Hashable]], references: Sequence[Sequence[Hashable]]
          ) -> float:
    """Corpus-level BLEU-1 (NLTK, one reference per sentence), in [0, 1].

    NLTK is given ``weights=(1.0,)``: the same score as (1, 0, 0, 0) — zero weights drop out of
    the geometric mean — without counting 2- to 4-grams nor warning that they have no overlap.
    Tokens are compared as given (wordpiece ids here: the translation is position-wise over
    wordpieces, and the reference is the parallel sentence in the target's wordpieces).
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("no sentences to score")
    return float(corpus_bleu([[list(r)] for r in references], [list(h) for h in hypotheses],
                             weights=(1.0,)))


@dataclass(frozen=True)
class TranslationSweep:
    """Heat maps of Liu et al. 2020b Figs 7–8: ``convert_rate[i, j]`` and ``bleu1[i, j]`` for
    ``alphas[i]`` and ``layers[j]``."""

    alphas: tuple[float, ...]
    layers: tuple[int, ...]
    convert_rate: np.ndarray
    bleu1: np.ndarray


def translation_sweep(
    model: BertForMaskedLM,
    batches: Sequence[Mapping[str, Tensor]],
    references: Sequence[Sequence[Hashable]],
    shift_by_layer: Tensor,
    is_target: IdPredicate,
    special_ids: Collection[int],
    is_shared: IdPredicate = no_ids,
    alphas: Sequence[float] = (1.0, 2.0, 3.0),
    layers: Sequence[int] | None = None,
) -> TranslationSweep:
    """Token translation for every α × layer (default: layers 1 … L, as the paper's 1–12).

    ``shift_by_layer`` is D (layers + 1 × hidden, from :func:`mean_difference_shift`);
    ``references[k]`` is the parallel target sentence of the k-th sentence of ``batches``.
    """
    layers = tuple(range(1, _num_layers(model) + 1)) if layers is None else tuple(layers)
    if shift_by_layer.shape[0] != _num_layers(model) + 1:
        raise ValueError(f"shift_by_layer needs {_num_layers(model) + 1} rows (layers 0 … L), "
                         f"got {shift_by_layer.shape[0]}")
    rate = np.full((len(alphas), len(layers)), np.nan)
    bleu = np.full((len(alphas), len(layers)), np.nan)
    for i, alpha in enumerate(alphas):
        for j, layer in enumerate(layers):
            shift = alpha * shift_by_layer[layer]
            outputs = [sentence for batch in batches
                       for sentence in translate(model, batch, layer, shift, special_ids)]
            rate[i, j] = convert_rate(outputs, is_target, is_shared)
            bleu[i, j] = bleu1(outputs, references)
    return TranslationSweep(tuple(float(a) for a in alphas), layers, rate, bleu)
