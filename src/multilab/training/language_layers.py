"""Conneau et al. 2020's parameter sharing (``sep-L1-<n>``): the bottom n Transformer layers one
copy per language, the layers above shared.

Design, so that a model stays a ``save_pretrained`` folder:

- layer i < n becomes a :class:`LanguageLayer`: a ``BertLayer`` (the first language's copy,
  under the standard parameter names) holding the other languages' copies in ``others``;
- each row of a batch goes through its own language's copy. The language of a row is read
  from its ids (a pre-hook on ``model.bert``): every language has its own block of ids
  (``config.multilab_language_offsets``), and the block most of a row's word-pieces are in
  names its language (:meth:`RowLanguages.read`). This needs separate vocabularies (the config
  refuses ``vocab.mode: joint`` and ``union``);
- ``save_pretrained`` writes every copy (``bert.encoder.layer.<i>.others.<j>.…``) and
  ``config.multilab_separate_layers``. :func:`attach_saved` (called by every loader of the
  lab) puts the copies back after ``from_pretrained``. A plain
  ``AutoModelForMaskedLM.from_pretrained`` still loads the folder, with a warning about the
  unused ``others`` weights: it then reads *every* language with the first one's layers.
  So does the copy logged to MLflow (``mlflow.transformers`` saves the plain class): the
  model folder is the whole model.

Depth: ``sep-L1-3`` / ``sep-L1-6`` are the paper's layers 1–3 / 1–6 of 12 and ours at depth 12;
with ``depth-<n>`` the count is taken as written (at most the depth: one line otherwise), so a
quarter / half of a 4-layer model is ``sep-L1-1`` / ``sep-L1-2``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn
from transformers import PreTrainedModel
from transformers.models.bert.modeling_bert import BertLayer

LAYERS_KEY = "multilab_separate_layers"
OFFSETS_KEY = "multilab_language_offsets"
WEIGHTS_FILE = "model.safetensors"
SPECIALS = 5  # [PAD] [UNK] [CLS] [SEP] [MASK] at the start of every block (data/vocab.py)


class RowLanguages:
    """The language of each row of the batch being run, shared by the model's layers."""

    def __init__(self, offsets: list[int]) -> None:
        self.offsets = offsets
        self.rows: torch.Tensor | None = None

    def read(self, input_ids: torch.Tensor | None) -> None:
        """Each row's language: the block most of its word-pieces are in (specials and
        padding left out). A majority, not any id: masking puts a few ids of other languages
        into a row (BERT's random replacement draws from the whole vocabulary, knn-replace
        from the other languages), never most of them (15 % of a row are selected)."""
        if input_ids is None:
            self.rows = None
            return
        offsets = torch.tensor(self.offsets, device=input_ids.device)
        blocks = torch.bucketize(input_ids.contiguous(), offsets[1:], right=True)
        words = (input_ids - offsets[blocks]) >= SPECIALS
        counts = torch.zeros(len(input_ids), len(self.offsets), device=input_ids.device,
                             dtype=torch.long)
        counts.scatter_add_(1, blocks, words.long())
        self.rows = counts.argmax(dim=1)  # a row without words: the first language


class LanguageLayer(BertLayer):
    """A Transformer layer with one copy per language; rows run through their own."""

    def __init__(self, config: Any, languages: RowLanguages) -> None:
        super().__init__(config)
        self.others = nn.ModuleList(BertLayer(config) for _ in languages.offsets[1:])
        self.languages = languages

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                *args: Any, **kwargs: Any) -> torch.Tensor:
        rows = self.languages.rows
        if rows is None or len(rows) != len(hidden_states) or not bool((rows > 0).any()):
            return super().forward(hidden_states, attention_mask, *args, **kwargs)
        out = torch.empty_like(hidden_states)
        for language in rows.unique().tolist():
            picked = (rows == language).nonzero()[:, 0]
            mask = attention_mask
            if mask is not None and mask.dim() > 0 and mask.shape[0] == len(hidden_states):
                mask = mask[picked]
            # forward, not __call__: Hugging Face records a layer's output (hidden_states)
            # by hooks on every BertLayer; the copies must not add records of their rows
            layer = self if language == 0 else self.others[language - 1]
            out[picked] = BertLayer.forward(layer, hidden_states[picked], mask, *args, **kwargs)
        return out


def separate(model: PreTrainedModel, layers: int, offsets: list[int]) -> PreTrainedModel:
    """Give ``model`` (a BERT with a ``.bert``) language-specific copies of its bottom
    ``layers`` layers, each copy initialised as the model initialises a new layer (seeded
    by the caller), the first language's copy the layer the model had."""
    bert = model.bert
    if not 1 <= layers <= len(bert.encoder.layer):
        raise ValueError(f"sep-L1-{layers}: the model has {len(bert.encoder.layer)} layers")
    languages = RowLanguages(list(offsets))
    for index in range(layers):
        old = bert.encoder.layer[index]
        new = LanguageLayer(model.config, languages)
        for copy in new.others:
            copy.apply(model._init_weights)
        new.load_state_dict(old.state_dict(), strict=False)  # the first language's: as was
        bert.encoder.layer[index] = new.to(next(old.parameters()).device)
    bert.register_forward_pre_hook(_read_languages(languages), with_kwargs=True)
    setattr(model.config, LAYERS_KEY, layers)
    setattr(model.config, OFFSETS_KEY, list(offsets))
    return model


def _read_languages(languages: RowLanguages):
    def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
        languages.read(kwargs.get("input_ids", args[0] if args else None))
    return hook


def attach_saved(model: PreTrainedModel, model_dir: Path | str) -> PreTrainedModel:
    """Put a saved model's language-specific copies back after ``from_pretrained`` (which
    loads the first language's under the standard names and leaves the copies out); a model
    without them is returned as it is."""
    layers = getattr(model.config, LAYERS_KEY, 0) or 0
    if not layers:
        return model
    separate(model, layers, list(getattr(model.config, OFFSETS_KEY)))
    saved = load_file(str(Path(model_dir) / WEIGHTS_FILE))
    prefix = "bert." if any(k.startswith("bert.") for k in saved) else ""
    state = {}
    for key, value in saved.items():
        if ".others." in key and key.startswith(prefix):
            state[key[len(prefix):]] = value
    missing = [k for k in model.bert.state_dict() if ".others." in k and k not in state]
    if missing:
        raise ValueError(f"{model_dir} lacks the language-specific weights {missing[0]}")
    model.bert.load_state_dict(state, strict=False)
    return model


def freeze_language_specific(model: PreTrainedModel, embeddings: bool) -> int:
    """Conneau et al. 2020 §4: while fine-tuning on English, the language-specific parts stay as
    pretrained, so the target language reads with its own, untouched by the English
    fine-tune: every copy of the separate layers and, with ``embeddings`` (sep-emb), the word,
    position and segment embeddings. Returns how many parameters were frozen."""
    layers = getattr(model.config, LAYERS_KEY, 0) or 0
    modules: list[nn.Module] = list(model.bert.encoder.layer[:layers])
    if embeddings:
        parts = model.bert.embeddings
        modules += [parts.word_embeddings, parts.position_embeddings,
                    parts.token_type_embeddings]
    frozen = 0
    for module in modules:
        for parameter in module.parameters():
            parameter.requires_grad_(False)
            frozen += parameter.numel()
    return frozen
