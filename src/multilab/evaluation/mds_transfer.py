"""Liu et al. 2020b §4.3 (Table 4): zero-shot transfer with the mean difference shift (MDS).

Liu et al. 2020b fine-tunes mBERT on English with the first six of twelve layers fixed, then feeds a
test sentence of another language and adds α·D to the hidden states of layer 6, where D moves
that language's mean representation onto English's; α is chosen per language on its dev set.

Here (``multilab downstream MODEL --mds``): the embeddings and the lower half of the layers
(``downstream.mds_layer``, null = half the depth) are frozen while fine-tuning on the first
language, so the representations at the shift layer are the pretrained model's; for every
other language D = R_first − R_target at that layer, the token-weighted means over the real
tokens of each language's dev verses (:func:`multilab.evaluation.mean_shift.language_means`);
α is the value of ``downstream.mds_alphas`` (0 included: no shift when nothing helps) with the
best dev accuracy of that language (ties: the smaller α), and its test accuracy is reported
beside the unshifted one of the same fine-tuned model.

Choosing α on the target language's dev labels is the paper's protocol (Table 4: "selected
according to the best results on XNLI dev-set"): it is not purely zero-shot, and with seven
α values it can gain a little by chance, which the unshifted column beside it bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from multilab.evaluation.mean_shift import language_means


def shift_layer(configured: int | None, depth: int) -> int:
    """The layer whose output is shifted, and below which everything is frozen."""
    layer = depth // 2 if configured is None else configured
    if not 1 <= layer <= depth:
        raise ValueError(f"downstream.mds_layer = {layer}: the model has layers 1 … {depth}")
    return layer


def freeze_below(model: PreTrainedModel, layer: int) -> int:
    """Freeze the embeddings and encoder layers 1 … ``layer`` (Liu et al. 2020b fixes the first six
    of twelve); returns how many parameters stay trainable."""
    frozen = [model.bert.embeddings, *model.bert.encoder.layer[:layer]]
    for module in frozen:
        for parameter in module.parameters():
            parameter.requires_grad_(False)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@dataclass
class ShiftResult:
    """One target language: dev accuracy per α, the chosen α, test accuracy without and with."""

    dev_accuracy: dict[str, float]
    alpha: float
    test_unshifted: float
    test_shifted: float


def language_shift(model: PreTrainedModel, layer: int, first: list[dict[str, torch.Tensor]],
                   target: list[dict[str, torch.Tensor]], special_ids: list[int]) -> torch.Tensor:
    """D = R_first − R_target at ``layer``, from the two languages' dev batches (the
    ``bert`` encoder of BertForSequenceClassification, as the mean-shift functions read it)."""
    return (language_means(model, first, special_ids)[layer]
            - language_means(model, target, special_ids)[layer])


def best_alpha(dev_accuracy: dict[float, float]) -> float:
    """The α with the best dev accuracy; ties go to the smaller α (the lesser change)."""
    return max(sorted(dev_accuracy), key=lambda alpha: (dev_accuracy[alpha], -alpha))
