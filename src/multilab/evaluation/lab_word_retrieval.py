"""Word retrieval MRR of a trained lab model, layer by layer (Liu et al. 2020b
§3.1.1).

``multilab mrr MODEL --source 3 --target fake`` wires :mod:`.word_retrieval` to the lab: the
study's first dev rows in both languages, each word's contextual vector per layer (its
wordpieces' mean in each occurrence, then the mean over its occurrences), and MRR / P@1 of
retrieving each dictionary translation among the dictionary's target words by cosine.

The dictionary, and what it means:

* **exact** where the target is a transform of the source edition: ``fake`` (the same words,
  id-shifted: w ↔ w) and ``enfake`` (w ↔ its unicode-shifted spelling);
* **silver** otherwise: mutual best IBM-1 matches over the *training* verses of the pair
  (:func:`multilab.data.dictionary.induce_dictionary`, words in ≥ 5 verses), never checked
  against a gold dictionary here; its precision where gold exists (English ↔ Fake-English) is
  measured in ``tests/test_dictionary.py``. Numbers on a silver dictionary say so in the JSON.

Beside the trained model, the same architecture untrained (the model's seed): on parallel rows
w and its translation share positions, so an untrained model already scores far above 1/n
(see :mod:`.word_retrieval`); the trained model's gain is read against it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import BertForMaskedLM, PreTrainedTokenizerBase

from multilab import tracking
from multilab.config import Config, RunConfig
from multilab.data.dictionary import induce_dictionary
from multilab.data.inputs import INVERTED, InputEncoder
from multilab.data.layout import layout, tokenized_verses
from multilab.data.pos_lexicon import POS_GROUPS, brill_lexicon, pos_groups
from multilab.data.vocab import load_tokenizer
from multilab.errors import UserError
from multilab.evaluation.evaluate import evaluation_device
from multilab.evaluation.token_translation import dev_rows, model_pair
from multilab.evaluation.word_retrieval import ContextualWordVectors, word_retrieval
from multilab.files import write_json
from multilab.lab.enfake import unicode_fake
from multilab.lab.languages import Language
from multilab.lab.modifications import file_stem
from multilab.training.model import build_model, load_model
from multilab.training.model_dir import model_fingerprint
from multilab.training.training_data import study_encoder

log = logging.getLogger(__name__)

BATCH_SIZE = 64
SILVER_MIN_COUNT = 5  # a word takes part in the silver matching from 5 training verses on


def words_of(tokens: Sequence[str]) -> tuple[list[str], list[int]]:
    """The words of a wordpiece sequence and each piece's word index (``##`` continues)."""
    words: list[str] = []
    word_ids: list[int] = []
    for token in tokens:
        if token.startswith("##") and words:
            words[-1] += token[2:]
        else:
            words.append(token)
        word_ids.append(len(words) - 1)
    return words, word_ids


def language_tokenizers(cfg: Config) -> list[PreTrainedTokenizerBase]:
    """The tokenizer that cut each language's rows (its block's, not the saved union)."""
    if not cfg.verses:
        tokenizer = load_tokenizer(cfg.paths.vocab)
        return [tokenizer, tokenizer]
    lay = layout(cfg)
    loaded = {name: load_tokenizer(cfg.paths.vocab, name) for name in set(lay.tokenizers)}
    return [loaded[name] for name in lay.tokenizers]


@torch.no_grad()
def word_vectors(model: BertForMaskedLM, encoder: InputEncoder, rows: Sequence[torch.Tensor],
                 language: int, tokenizer: PreTrainedTokenizerBase
                 ) -> tuple[list[str], np.ndarray]:
    """Every word's mean contextual vector at every layer: (words, [words, layers + 1, d])."""
    accumulator = ContextualWordVectors()
    invert = language == INVERTED and encoder.recipe.invert_fake
    device = next(model.parameters()).device
    for start in range(0, len(rows), BATCH_SIZE):
        chunk = list(rows[start:start + BATCH_SIZE])
        batch = encoder.batch(chunk, [language] * len(chunk))
        inputs = {k: v.to(device) for k, v in batch.model_inputs().items()}
        hidden = torch.stack(model.bert(**inputs, output_hidden_states=True).hidden_states, 2)
        for i, row in enumerate(chunk):
            words, ids = words_of(tokenizer.convert_ids_to_tokens(row.tolist()))
            if invert:  # encode() reversed this language's pieces
                ids = ids[::-1]
            accumulator.add(hidden[i, 1:len(row) + 1].float().cpu().numpy(), ids, words)
    return accumulator.result()


def dictionary_of(cfg: Config, source: int, target: int, tokenizers: list
                  ) -> tuple[list[tuple[str, str]], str]:
    """(pairs, kind): exact for a transform of the source edition, else silver (module doc)."""
    study = cfg.language_list
    src, tgt = study[source], study[target]
    if tgt.edition == src.edition and src.is_edition and tgt.transform in ("fake", "enfake"):
        return [], tgt.transform  # built from the words that have vectors
    if tgt.edition == src.edition and tgt.is_edition and src.transform == "fake":
        return [], "fake"  # the same spelling both ways: a copy back to its language
    if not cfg.verses:  # English + a copy: no verse table, no silver dictionary to induce
        first = study[0].edition
        raise UserError(f"mrr {src.key(first)} → {tgt.key(first)}: only a language and its "
                        f"copy have a dictionary here (valid: --source {first} --target "
                        f"{study[1].key(first) if len(study) > 1 else 'fake'}, or the reverse "
                        "of a fake copy)")
    if not cfg.aligned_train:
        raise UserError(
            f"mrr {src.key(study[0].edition)} → {tgt.key(study[0].edition)}: a silver "
            "dictionary needs verse-aligned train text; user corpora and an ot language's "
            "verses are not parallel (valid: a language and its fake or enfake copy)")
    lay = layout(cfg)
    rows, _ = tokenized_verses(cfg, lay, "train", None, cfg.train.max_length)

    def segments(number: int) -> list[list[str]]:
        return [words_of(tokenizers[number].convert_ids_to_tokens(row.tolist()))[0]
                for row in rows[number]]

    entries = induce_dictionary(segments(source), segments(target), min_count=SILVER_MIN_COUNT)
    return [(e.source, e.target) for e in entries], "silver"


def exact_pairs(kind: str, source_words: Sequence[str], target_words: Sequence[str]
                ) -> list[tuple[str, str]]:
    """The exact dictionary over the words that have vectors on both sides."""
    present = set(target_words)
    spell = (lambda w: w) if kind == "fake" else unicode_fake
    return [(w, spell(w)) for w in source_words if spell(w) in present]


def pretraining_rows(cfg: Config) -> int:
    """How many train rows per language the study's models pretrain on (sentences of
    ``[3, fake]``, verses of real languages; ``train.max_train_sentences`` applied): the data
    size axis of the report's static-vs-contextual figure."""
    from multilab.data.corpus import training_lines
    from multilab.data.layout import read_verse_table

    if not cfg.verses:
        return len(training_lines(cfg))
    ids, _ = read_verse_table(cfg.paths.corpora / "train.txt")
    limit = cfg.train.max_train_sentences
    return min(len(ids), limit) if limit else len(ids)


def model_train_rows(cfg: Config, run: RunConfig, done: dict[str, Any], model_dir: Path
                     ) -> int | None:
    """The model's train rows when the current configuration is the one it was trained under
    (same fingerprint); None otherwise (said in a warning), since the count is read from the
    configuration, not from the model."""
    if model_fingerprint(run) == done["fingerprint"]:
        return pretraining_rows(cfg)
    log.warning("%s was trained under another configuration than the current one: its train "
                "rows are not recorded (--set the values it was trained with, e.g. "
                "train.max_train_sentences)", model_dir)
    return None


def english_groups(language: Language, words: Sequence[str]) -> dict[str, list[str]]:
    """The source words of each part-of-speech group (:mod:`multilab.data.pos_lexicon`)
    where the source is an English edition (Liu et al. 2020a Table 1); else none."""
    if language.transform is not None or language.base_iso != "en":
        return {}
    brill_lexicon()  # read once, and first: a missing TextBlob is one line before any work
    tagged = pos_groups(words)
    return {group: [w for w in words if group in tagged[w]] for group in POS_GROUPS}


def lab_word_retrieval(cfg: Config, model_dir: Path, source: str, target: str,
                       sentences: int) -> dict[str, Any]:
    """MRR / P@1 per layer of the trained model and of its untrained twin (module doc)."""
    src, tgt, run, done = model_pair(cfg, model_dir, source, target, sentences)
    english_groups(cfg.language_list[src], [])  # a missing lexicon: one line, before the work
    encoder = study_encoder(run)
    tokenizers = language_tokenizers(cfg)
    pairs, kind = dictionary_of(cfg, src, tgt, tokenizers)
    _, rows, _ = dev_rows(cfg, run, sentences)
    keep = [i for i in range(len(rows[src])) if len(rows[src][i]) and len(rows[tgt][i])]
    trained = load_model(model_dir).to(evaluation_device()).eval()
    untrained = build_model(run.model, encoder.total_size, run.seed, encoder.languages,
                            separate_layers=run.recipe.separate_layers,
                            offsets=encoder.offsets)
    results: dict[str, Any] = {}
    for name, model in (("trained", trained), ("untrained", untrained.eval())):
        source_words, source_vectors = word_vectors(
            model, encoder, [rows[src][i] for i in keep], src, tokenizers[src])
        target_words, target_vectors = word_vectors(
            model, encoder, [rows[tgt][i] for i in keep], tgt, tokenizers[tgt])
        dictionary = pairs or exact_pairs(kind, source_words, target_words)
        groups = english_groups(cfg.language_list[src], source_words) if name == "trained" else {}
        layers = []
        for layer in range(source_vectors.shape[1]):
            score = word_retrieval(source_words, source_vectors[:, layer], target_words,
                                   target_vectors[:, layer], dictionary)
            entry = {"layer": layer, "mrr": score.mrr, "p1": score.precision_at_1,
                     "queries": score.queries, "skipped": score.skipped}
            if groups:
                entry["pos"] = {group: dict(zip(("mrr", "queries"), score.mrr_of(words),
                                                strict=True))
                                for group, words in groups.items()}
            layers.append(entry)
        results[name] = layers
    return {
        "model_dir": str(model_dir), "modification": run.modification, "seed": run.seed,
        "source": source, "target": target, "sentences": len(keep), "dictionary": kind,
        "dictionary_pairs": len(pairs) if pairs else results["trained"][0]["queries"],
        "trained": results["trained"], "untrained": results["untrained"],
        "run_id": done.get("run_id"), "train_rows": model_train_rows(cfg, run, done, model_dir),
        "window": run.recipe.window,
    }


def mrr_and_record(cfg: Config, model_dir: Path, source: str, target: str, sentences: int,
                   out: Path | None = None) -> tuple[dict[str, Any], Path]:
    """:func:`lab_word_retrieval`, its JSON (default ``reports/word_retrieval/<model>-<pair>/``)
    and per-layer metrics ``mrr.<pair>.l<k>`` in the model's MLflow run (status unchanged)."""
    tracking.check_server(cfg.paths)  # a dead server: one line before minutes of work
    record = lab_word_retrieval(cfg, Path(model_dir), source, target, sentences)
    pair = f"{source}-{target}".replace(":", "_")
    folder = out or (cfg.paths.reports / "word_retrieval"
                     / f"{file_stem(record['modification'], record['seed'])}-{pair}")
    write_json(folder / "word_retrieval.json", record)
    if record["run_id"] and tracking.run_exists(cfg.paths, record["run_id"]):
        metrics = {f"mrr.{pair}.l{row['layer']}": row["mrr"] for row in record["trained"]}
        metrics |= {f"mrr_untrained.{pair}.l{row['layer']}": row["mrr"]
                    for row in record["untrained"]}
        tracking.log_to_run(cfg.paths, record["run_id"], metrics)
        tracking.log_artifact_to_run(cfg.paths, record["run_id"],
                                     folder / "word_retrieval.json", f"word_retrieval/{pair}")
    return record, folder
