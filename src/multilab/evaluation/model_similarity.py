"""How similar are two independently trained models? Seed 003 §5 (Figure 2) on Bible verses.

``multilab similarity DIR_A DIR_B --languages 3,l`` reads the same Old Testament verses in two
editions, model A the first edition and model B the second (each with its own saved tokenizer:
a lab model trained on a one-language study, or any Hugging Face masked LM), pools each verse
per layer (mean over its wordpieces, [CLS]/[SEP] and padding left out) and measures, layer by
layer, what :mod:`.similarity` implements: verse retrieval P@1 after an orthogonal map learned
on a seeded half of the verses (held-out half retrieved), and linear CKA on all of them.

The floor is not zero (:mod:`.similarity`'s doc: parallel verses share lengths and positions,
which even untrained models carry), so every curve comes with the same measure on two
*untrained* models of the same shapes (seeded initialisation): read the gap, not the value.
The word-level measures of Figure 2 need a dictionary; with none here (PanLex is not
available) they are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from multilab.errors import UserError
from multilab.evaluation.probe import load_masked_lm
from multilab.evaluation.similarity import mean_pool, sentence_similarity_by_layer

MEASURES = ("sentence_retrieval", "cka")


@torch.no_grad()
def verse_layers(model: torch.nn.Module, tokenizer, verses: Sequence[str],
                 max_length: int = 128, batch_size: int = 64) -> list[np.ndarray]:
    """Per layer (0 = embeddings), the mean-pooled vector of each verse: layers × (verses × d)."""
    by_layer: list[list[np.ndarray]] = []
    for start in range(0, len(verses), batch_size):
        encoded = tokenizer(list(verses[start:start + batch_size]), truncation=True,
                            max_length=max_length, padding=True, return_tensors="pt")
        hidden = model(**encoded, output_hidden_states=True).hidden_states
        special = torch.tensor(tokenizer.all_special_ids)
        keep = (encoded["attention_mask"].bool() & ~torch.isin(encoded["input_ids"], special))
        if not by_layer:
            by_layer = [[] for _ in hidden]
        for layer, states in enumerate(hidden):
            by_layer[layer].append(mean_pool(states.float().numpy(), keep.numpy()))
    return [np.concatenate(parts) for parts in by_layer]


def _untrained_copy(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """A freshly initialised model of the same configuration (the floor of every measure)."""
    from transformers import AutoModelForMaskedLM

    torch.manual_seed(seed)
    return AutoModelForMaskedLM.from_config(model.config).eval()


def compare_models(dir_a: Path, dir_b: Path, verses_a: Sequence[str], verses_b: Sequence[str],
                   *, train_fraction: float = 0.5, seed: int = 0) -> dict[str, Any]:
    """Figure 2's sentence-level curves for models A and B on parallel verses, and the same
    for untrained models of their shapes."""
    if len(verses_a) != len(verses_b):
        raise ValueError(f"{len(verses_a)} verses for A but {len(verses_b)} for B")
    if len(verses_a) < 4:
        raise UserError(f"{len(verses_a)} parallel verses: need at least 4 (half to learn the "
                        "map, half to test it)")
    (model_a, tok_a), (model_b, tok_b) = load_masked_lm(dir_a), load_masked_lm(dir_b)
    depth_a, depth_b = model_a.config.num_hidden_layers, model_b.config.num_hidden_layers
    if depth_a != depth_b:
        raise UserError(f"{dir_a} has {depth_a} layers and {dir_b} {depth_b}: the curves compare "
                        "layer l with layer l, so both models need the same depth")
    curves = sentence_similarity_by_layer(verse_layers(model_a, tok_a, verses_a),
                                          verse_layers(model_b, tok_b, verses_b),
                                          train_fraction, seed)
    floor = sentence_similarity_by_layer(
        verse_layers(_untrained_copy(model_a, seed), tok_a, verses_a),
        verse_layers(_untrained_copy(model_b, seed + 1), tok_b, verses_b),
        train_fraction, seed)
    return {
        "model_a": str(dir_a), "model_b": str(dir_b), "verses": len(verses_a),
        "layers": list(range(depth_a + 1)), "train_fraction": train_fraction, "seed": seed,
        "trained": {m: list(map(float, curves[m])) for m in MEASURES},
        "untrained": {m: list(map(float, floor[m])) for m in MEASURES},
    }


def similarity_figure(record: dict[str, Any], measure: str, path: Path) -> Path:
    """One of Figure 2's panels: ``measure`` against the layer, trained and untrained."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(record["layers"], record["trained"][measure], marker="o", label="trained")
    ax.plot(record["layers"], record["untrained"][measure], marker="x", linestyle="--",
            label="untrained (same shapes)")
    ax.set_xlabel("layer (0 = embeddings)")
    ax.set_ylabel("verse retrieval P@1" if measure == "sentence_retrieval" else "linear CKA")
    ax.set_ylim(0, 1)
    ax.set_title(f"{record['editions'][0]} (A) vs {record['editions'][1]} (B), "
                 f"{record['verses']} verses", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
