"""Word order from a lab model's own vectors (the word-order stage's second alignment source).

``multilab model-order MODEL --source 3 --target s`` aligns each dev verse pair of two study
languages with SimAlign's Match on the model's layer-l word vectors (pieces merged by their
mean, words without a letter or digit dropped as in the word-order stage) and scores every
alignment with Birch & Osborne's Kendall's tau (:func:`multilab.evaluation.wordorder.verse_taus`,
1 = the source's order). Dufter & Schütze 2020 aligns with mBERT's layer 8; the word-order stage
aligns with
IBM-1 scores fitted on the pair's verses, a source independent of any model. Set side by side
they tell whether the model's vectors carry the alignment: on ``[3, fake]`` a trained model
should give tau ≈ 1 (Fake-English keeps English's order) and ≈ 0 under ``inv-order``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import BertForMaskedLM, PreTrainedTokenizerBase

from multilab import tracking
from multilab.config import Config
from multilab.data.inputs import INVERTED, InputEncoder
from multilab.errors import UserError
from multilab.evaluation.evaluate import evaluation_device
from multilab.evaluation.lab_word_retrieval import language_tokenizers, words_of
from multilab.evaluation.token_translation import dev_rows, model_pair
from multilab.evaluation.wordorder import merge_wordpieces, verse_taus
from multilab.files import write_json
from multilab.lab.modifications import file_stem
from multilab.training.model import load_model
from multilab.training.training_data import study_encoder

BATCH_SIZE = 64


@torch.no_grad()
def verse_word_vectors(model: BertForMaskedLM, encoder: InputEncoder,
                       rows: Sequence[torch.Tensor], language: int,
                       tokenizer: PreTrainedTokenizerBase, layer: int) -> list[np.ndarray]:
    """Per verse, its content words' vectors at ``layer`` ([words, d]) in the order the model
    read them: the row's, reversed for the language inv-order inverts."""
    invert = language == INVERTED and encoder.recipe.invert_fake
    device = next(model.parameters()).device
    verses = []
    for start in range(0, len(rows), BATCH_SIZE):
        chunk = list(rows[start:start + BATCH_SIZE])
        batch = encoder.batch(chunk, [language] * len(chunk))
        inputs = {k: v.to(device) for k, v in batch.model_inputs().items()}
        hidden = model.bert(**inputs, output_hidden_states=True).hidden_states[layer]
        for i, row in enumerate(chunk):
            pieces = hidden[i, 1:len(row) + 1].float().cpu()
            if invert:  # encode() reversed the pieces: merge them in the row's order …
                pieces = pieces.flip(0)
            words, ids = words_of(tokenizer.convert_ids_to_tokens(row.tolist()))
            vectors = np.asarray(merge_wordpieces(pieces, ids))
            keep = [k for k, word in enumerate(words) if any(ch.isalnum() for ch in word)]
            # … and give the words in the order the model read them (inverted by inv-order)
            verses.append(np.ascontiguousarray(vectors[keep][::-1] if invert else vectors[keep]))
    return verses


def model_word_order(cfg: Config, model_dir: Path, source: str, target: str, sentences: int,
                     layer: int) -> dict[str, Any]:
    """Mean Kendall's tau of ``target``'s order against ``source``'s, from Match on the
    model's layer-``layer`` vectors over the first ``sentences`` dev rows (module doc)."""
    src, tgt, run, done = model_pair(cfg, model_dir, source, target, sentences)
    depth = run.model.num_hidden_layers
    if not 0 <= layer <= depth:
        raise UserError(f"--layer {layer}: the model has layers 0 … {depth}")
    encoder = study_encoder(run)
    tokenizers = language_tokenizers(cfg)
    _, rows, _ = dev_rows(cfg, run, sentences)
    model = load_model(model_dir).to(evaluation_device()).eval()
    source_verses = verse_word_vectors(model, encoder, rows[src], src, tokenizers[src], layer)
    target_verses = verse_word_vectors(model, encoder, rows[tgt], tgt, tokenizers[tgt], layer)
    pairs = [(s, t) for s, t in zip(source_verses, target_verses, strict=True)
             if len(s) and len(t)]
    taus = verse_taus([s for s, _ in pairs], [t for _, t in pairs])
    return {
        "model_dir": str(model_dir), "modification": run.modification, "seed": run.seed,
        "source": source, "target": target, "layer": layer, "verses": len(pairs),
        "tau": float(taus.mean()), "tau_std": float(taus.std()),
        "run_id": done.get("run_id"),
    }


def model_order_and_record(cfg: Config, model_dir: Path, source: str, target: str,
                           sentences: int, layer: int, out: Path | None = None
                           ) -> tuple[dict[str, Any], Path]:
    """:func:`model_word_order`, its JSON (default ``reports/model_word_order/`` +
    ``<model>-<pair>-l<k>.json``) and ``tau_model.<pair>.l<k>`` in the model's MLflow run."""
    tracking.check_server(cfg.paths)  # a dead server: one line before minutes of work
    record = model_word_order(cfg, Path(model_dir), source, target, sentences, layer)
    pair = f"{source}-{target}".replace(":", "_")
    path = out or (cfg.paths.reports / "model_word_order"
                   / f"{file_stem(record['modification'], record['seed'])}-{pair}-l{layer}.json")
    write_json(path, record)
    if record["run_id"] and tracking.run_exists(cfg.paths, record["run_id"]):
        tracking.log_to_run(cfg.paths, record["run_id"],
                            {f"tau_model.{pair}.l{layer}": record["tau"]})
    return record, path
