"""BERT model construction and the two forward paths multilab needs.

The MLM loss computes the vocabulary head only on the selected positions (15%), not on
every position as ``BertForMaskedLM.forward`` does: same loss, a fraction of the work.
The few widest training batches recompute activations instead of keeping them (same
gradients, bit for bit), which bounds the peak memory of training (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import AutoModelForMaskedLM, BertConfig, BertForMaskedLM, BertForPreTraining
from transformers.modeling_layers import GradientCheckpointingLayer

from multilab.config import ModelConfig
from multilab.errors import UserError
from multilab.progress import quiet_transformers
from multilab.training import language_layers

MODEL_FILES = ("config.json", "model.safetensors")

#: Called by the trainer at curve points with (step, model); returns metrics to log at that
#: step (the evaluation supplies it: training does not know what is measured).
CurveHook = Callable[[int, BertForMaskedLM], dict[str, float]]

#: A training batch with more positions (rows × padded width) than this recomputes each
#: layer's activations in the backward pass instead of keeping them. Bucketed batches are
#: rarely that wide (the widest ~4% of BERT-small's: width > 48 at batch 256), so the extra
#: forward costs ~3% of training time while the peak memory drops by ~0.9 GB.
CHECKPOINT_POSITIONS = 256 * 48


def bert_config(model: ModelConfig, vocab_size: int, languages: int = 2) -> BertConfig:
    """BERT of ``model``'s sizes; one segment id per language (lang-pos), at least two."""
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=model.hidden_size,
        intermediate_size=model.intermediate_size,
        num_attention_heads=model.num_attention_heads,
        num_hidden_layers=model.num_hidden_layers,
        max_position_embeddings=model.max_position_embeddings,
        type_vocab_size=max(2, languages),
        tie_word_embeddings=True,
    )


def build_model(model: ModelConfig, vocab_size: int, seed: int, languages: int = 2,
                next_sentence: bool = False, separate_layers: int = 0,
                offsets: tuple[int, ...] = ()) -> BertForMaskedLM | BertForPreTraining:
    """A freshly initialised BERT whose weights depend only on ``seed``.

    ``next_sentence`` (nsp) adds BERT's pooler and NSP head (``BertForPreTraining``); its
    saved folder still loads with ``AutoModelForMaskedLM`` (the NSP head is left out), so
    evaluation never needs to know. ``separate_layers`` (sep-L1-<n>): the bottom n layers
    one copy per language, whose blocks start at ``offsets`` (training/language_layers.py).
    """
    torch.manual_seed(seed)
    config = bert_config(model, vocab_size, languages)
    built = BertForPreTraining(config) if next_sentence else BertForMaskedLM(config)
    if separate_layers:
        built = language_layers.separate(built, separate_layers, list(offsets))
    return built


def load_model(model_dir: Path) -> BertForMaskedLM:
    """Load a saved model, with a clear error for anything that is not a checkpoint."""
    model_dir = Path(model_dir)
    missing = [f for f in MODEL_FILES if not (model_dir / f).exists()]
    if missing:
        raise UserError(
            f"{model_dir} is not a multilab model directory (missing {', '.join(missing)})"
        )
    try:
        json.loads((model_dir / "config.json").read_text())
        with quiet_transformers():  # sep-L1-<n>: the copies are "unused" until attached
            loaded = AutoModelForMaskedLM.from_pretrained(str(model_dir))
        return language_layers.attach_saved(loaded, model_dir)
    except Exception as err:  # corrupt files surface as many different exception types
        raise UserError(f"{model_dir} holds a corrupted checkpoint: {err}") from err


def check_finite_weights(state_dict: dict[str, torch.Tensor], where: Path) -> None:
    """Refuse NaN or infinite weights: training on from them, finishing them or evaluating
    them gives NaN losses and metrics."""
    bad = [name for name, tensor in state_dict.items()
           if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())]
    if bad:
        more = f" and {len(bad) - 1} more tensors" if len(bad) > 1 else ""
        raise UserError(f"{where} holds non-finite weights ({bad[0]}{more}); delete it to "
                        "train again")


def selected_logits(
    model: BertForMaskedLM, inputs: dict[str, torch.Tensor], selected: torch.Tensor
) -> torch.Tensor:
    """Vocabulary logits at the selected positions only ([N, V]): the MLM head where a loss
    is taken, not on every position as ``BertForMaskedLM.forward`` computes it."""
    hidden = model.bert(**inputs).last_hidden_state
    return model.cls.predictions(hidden[selected])


class MaskedLMObjective(torch.nn.Module):
    """The *summed* MLM loss as a module, so Accelerate/DDP can wrap it (gradient sync).

    Summed, not averaged: the trainer divides by the number of selected tokens of the whole
    global batch, and a piece with no selected token contributes an exact 0 (with a gradient
    graph over every parameter, which DDP's all-reduce needs on every rank).
    """

    def __init__(
        self, model: BertForMaskedLM, checkpoint_positions: int | None = CHECKPOINT_POSITIONS
    ) -> None:
        super().__init__()
        self.model = model
        self.checkpoint_positions = checkpoint_positions
        self._layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
        for layer in self._layers:  # only used while a layer's gradient_checkpointing is on
            layer._gradient_checkpointing_func = partial(checkpoint, use_reentrant=False)

    def forward(
        self, selected: torch.Tensor, labels: torch.Tensor,
        next_sentence: torch.Tensor | None = None, nsp_weight: float = 0.0,
        **inputs: torch.Tensor,
    ) -> torch.Tensor:
        """The summed MLM loss, plus ``nsp_weight`` × the summed NSP loss of the rows when
        ``next_sentence`` labels are given (nsp: the trainer's weight makes it the batch's
        mean NSP loss once divided by the selected-token count, BERT's MLM + NSP)."""
        nsp = (next_sentence, nsp_weight)
        if not self._recompute(inputs["input_ids"]):
            return self._loss_sum(selected, labels, inputs, nsp)
        self._set_recompute(True)
        try:
            return self._loss_sum(selected, labels, inputs, nsp)
        finally:
            self._set_recompute(False)

    def _loss_sum(
        self, selected: torch.Tensor, labels: torch.Tensor, inputs: dict[str, torch.Tensor],
        nsp: tuple[torch.Tensor | None, float],
    ) -> torch.Tensor:
        out = self.model.bert(**inputs)
        logits = self.model.cls.predictions(out.last_hidden_state[selected])
        loss = F.cross_entropy(logits.float(), labels, reduction="sum")
        next_sentence, weight = nsp
        if next_sentence is not None:
            nsp_logits = self.model.cls.seq_relationship(out.pooler_output)
            loss = loss + weight * F.cross_entropy(nsp_logits.float(), next_sentence,
                                                   reduction="sum")
        return loss

    def _recompute(self, input_ids: torch.Tensor) -> bool:
        """Checkpoint this batch's layers? Only wide batches in training, never when compiled."""
        if torch.compiler.is_compiling() or not (self.training and self._layers):
            return False
        limit = self.checkpoint_positions
        return limit is not None and input_ids.numel() > limit

    def _set_recompute(self, on: bool) -> None:
        for layer in self._layers:
            layer.gradient_checkpointing = on


@torch.no_grad()
def hidden_layers(
    model: BertForMaskedLM, inputs: dict[str, torch.Tensor], layers: list[int]
) -> list[torch.Tensor]:
    """Hidden states of the requested layers (0 = embedding output incl. LayerNorm)."""
    out = model.bert(**inputs, output_hidden_states=True)
    return [out.hidden_states[layer] for layer in layers]
