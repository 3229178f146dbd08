"""Unsupervised token translation of a trained lab model (Liu et al. 2020b §4, Table 2, Figs 7–8).

``multilab translate MODEL --source 3 --target fake`` wires :mod:`.mean_shift` to the lab: the
study's dev sentences (English + Fake-English) or dev verses (real languages) in both languages,
each language's mean hidden state per layer over them, the mean difference shift D, and the
convert-rate / BLEU-1 heat maps over α × layer, written as JSON and PNGs and logged to the
model's MLflow run.

Reading the paper where the lab differs:

* the means are taken over the same dev rows that are translated (the paper: "a corpus"); the
  rows are parallel, so both means see the same content;
* BLEU-1 compares the output wordpiece ids with the parallel row's ids in the target language,
  as the model encodes it (block offset, inv-order's reversal): English → Fake-English has an
  exact reference, real languages a verse translation (so BLEU-1 there is a loose score, never
  near 1, and the convert rate is the telling number);
* shared tokens (V_s ∩ V_t) are the shared specials: every language has a block of its own.
  A joint or union vocabulary (``vocab.mode: joint`` / ``union``) gives the languages one block,
  so a token's language is unknown and the convert rate undefined: refused in one line;
* "unshifted" (α = 0) is reported beside the sweep: the model's own reconstruction of the
  source, the floor every shift is read against.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from multilab import tracking
from multilab.config import Config, RunConfig
from multilab.data.batches import tokenize_lines
from multilab.data.inputs import InputEncoder
from multilab.data.layout import layout, tokenized_verses
from multilab.data.tokenizers import SPECIAL_TOKENS
from multilab.data.vocab import load_tokenizer
from multilab.errors import UserError
from multilab.evaluation.evaluate import dev_lines, evaluation_device
from multilab.evaluation.mean_shift import (
    bleu1,
    convert_rate,
    id_set,
    language_means,
    mean_difference_shift,
    no_ids,
    translate,
    translation_sweep,
)
from multilab.files import save_figure, write_json
from multilab.lab.languages import language_keys, parse_languages
from multilab.lab.modifications import file_stem
from multilab.resolve import resolve_run
from multilab.training.model import load_model
from multilab.training.model_dir import read_done
from multilab.training.training_data import study_encoder

log = logging.getLogger(__name__)

DEFAULT_ALPHAS = (1.0, 2.0, 3.0)  # Liu et al. 2020b Table 2 / Figs 7–8
BATCH_SIZE = 64


def pair_numbers(cfg: Config, source: str, target: str) -> tuple[int, int]:
    """The study's language numbers of ``source`` and ``target`` (keys as the study spells
    them), or one line naming the valid ones."""
    study = cfg.language_list
    keys = language_keys(study)
    chosen = parse_languages(f"{source},{target}", study[0].edition, cfg.corpus_isos)
    numbers = []
    for language, key in zip(chosen, (source, target), strict=True):
        if language not in study:
            raise UserError(f"language {key!r} is not in the study; valid: {', '.join(keys)}")
        numbers.append(study.index(language))
    return numbers[0], numbers[1]


def model_pair(cfg: Config, model_dir: Path, source: str, target: str, sentences: int
               ) -> tuple[int, int, RunConfig, dict[str, Any]]:
    """What every measure of two study languages on one finished model checks first, in one
    line each: the row count, the pair, the model. Returns (source number, target number, the
    model's run, its done record)."""
    if sentences < 1:
        raise UserError(f"--sentences {sentences}: must be >= 1")
    src, tgt = pair_numbers(cfg, source, target)  # the same language twice: one line
    done = read_done(model_dir)
    if done is None:
        raise UserError(f"{model_dir} is not a finished multilab model; train it first")
    return src, tgt, resolve_run(cfg, done["modification"], done["seed"]), done


def dev_rows(cfg: Config, run: RunConfig, count: int
             ) -> tuple[InputEncoder, list[list[torch.Tensor]], tuple[int, ...]]:
    """The study's encoder (as training builds it), each language's wordpiece ids of the
    first ``count`` dev rows (row i parallel in every language) and each language's block
    size."""
    lay = layout(cfg)
    encoder = study_encoder(run)
    if cfg.verses:
        rows, _ = tokenized_verses(cfg, lay, "dev", count, cfg.train.max_length)
        return encoder, rows, lay.sizes
    tokenizer = load_tokenizer(cfg.paths.vocab)
    ids, _ = tokenize_lines(dev_lines(cfg.paths.corpora / "dev.txt", count), tokenizer, encoder)
    return encoder, [ids, ids], lay.sizes


def _batches(encoder: InputEncoder, rows: Sequence[torch.Tensor], language: int
             ) -> list[dict[str, torch.Tensor]]:
    return [encoder.batch(list(rows[start:start + BATCH_SIZE]),
                          [language] * len(rows[start:start + BATCH_SIZE])).model_inputs()
            for start in range(0, len(rows), BATCH_SIZE)]


def token_translation(cfg: Config, model_dir: Path, source: str, target: str,
                      sentences: int, alphas: Sequence[float] = DEFAULT_ALPHAS) -> dict[str, Any]:
    """The α × layer sweep of one model from ``source`` to ``target`` (see the module doc)."""
    if cfg.verses and cfg.vocab.shared:
        raise UserError(f"vocab.mode = {cfg.vocab.mode!r} gives the languages one vocabulary "
                        "block, so an output token's language is unknown (valid: vocab.mode = "
                        "'separate')")
    if not alphas or any(not np.isfinite(a) or a <= 0 for a in alphas):
        raise UserError(f"--alphas {list(alphas)}: need numbers > 0, e.g. 1,2,3")
    src, tgt, run, done = model_pair(cfg, model_dir, source, target, sentences)
    encoder, rows, sizes = dev_rows(cfg, run, sentences)
    keep = [i for i in range(len(rows[src])) if len(rows[src][i]) and len(rows[tgt][i])]
    source_rows = [rows[src][i] for i in keep]
    target_rows = [rows[tgt][i] for i in keep]
    model = load_model(model_dir).to(evaluation_device()).eval()
    offsets = encoder.offsets
    special = [offset + i for offset in set(offsets) for i in range(len(SPECIAL_TOKENS))]
    source_batches = _batches(encoder, source_rows, src)
    shift = mean_difference_shift(
        language_means(model, source_batches, special),
        language_means(model, _batches(encoder, target_rows, tgt), special))
    low, high = offsets[tgt] + len(SPECIAL_TOKENS), offsets[tgt] + sizes[tgt]

    def is_target(ids: torch.Tensor) -> torch.Tensor:
        return (ids >= low) & (ids < high)

    shared = no_ids if run.recipe.shift_special else id_set(range(len(SPECIAL_TOKENS)))
    references = [encoder.encode(row, tgt)[0][1:-1].tolist() for row in target_rows]
    sweep = translation_sweep(model, source_batches, references, shift, is_target, special,
                              shared, alphas)
    plain = [sentence for batch in source_batches
             for sentence in translate(model, batch, 0, torch.zeros_like(shift[0]), special)]
    best = np.unravel_index(np.nanargmax(sweep.convert_rate), sweep.convert_rate.shape)
    return {
        "model_dir": str(model_dir), "modification": run.modification, "seed": run.seed,
        "source": source, "target": target, "sentences": len(keep),
        "alphas": list(sweep.alphas), "layers": list(sweep.layers),
        "convert_rate": sweep.convert_rate.tolist(), "bleu1": sweep.bleu1.tolist(),
        "unshifted": {"convert_rate": convert_rate(plain, is_target, shared),
                      "bleu1": bleu1(plain, references)},
        "best": {"alpha": sweep.alphas[best[0]], "layer": sweep.layers[best[1]],
                 "convert_rate": float(sweep.convert_rate[best]),
                 "bleu1": float(sweep.bleu1[best])},
        "run_id": done.get("run_id"),
    }


def heat_map(record: dict[str, Any], measure: str, path: Path) -> Path:
    """One of Liu et al. 2020b's Figs 7–8: ``measure`` over α (rows) × layer (columns)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = np.array(record[measure], dtype=float)
    fig, ax = plt.subplots(figsize=(1.2 + 0.6 * values.shape[1], 1.2 + 0.5 * values.shape[0]))
    image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    for (i, j), value in np.ndenumerate(values):
        ax.text(j, i, "" if np.isnan(value) else f"{value:.2f}", ha="center", va="center",
                fontsize=7, color="white" if value < 0.6 else "black")
    ax.set_xticks(range(values.shape[1]), [str(layer) for layer in record["layers"]])
    ax.set_yticks(range(values.shape[0]), [f"{a:g}" for a in record["alphas"]])
    ax.set_xlabel("layer l (α·D added to its output)")
    ax.set_ylabel("α")
    name = "convert rate" if measure == "convert_rate" else "BLEU-1"
    ax.set_title(f"{name}, {record['source']} → {record['target']}, {record['modification']} "
                 f"s{record['seed']}", fontsize=8)
    fig.colorbar(image, ax=ax, fraction=0.05)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=120)  # and a PDF beside it
    plt.close(fig)
    return path


def translation_folder(cfg: Config, record: dict[str, Any]) -> Path:
    pair = f"{record['source']}-{record['target']}".replace(":", "_")
    stem = file_stem(record["modification"], record["seed"])
    return cfg.paths.reports / "translation" / f"{stem}-{pair}"


def translate_and_record(cfg: Config, model_dir: Path, source: str, target: str,
                         sentences: int, alphas: Sequence[float] = DEFAULT_ALPHAS,
                         out: Path | None = None) -> tuple[dict[str, Any], Path]:
    """:func:`token_translation`, its JSON and heat maps in ``out`` (default:
    ``reports/translation/<model>-<source>-<target>/``), metrics and figures in the model's
    MLflow run (its status unchanged)."""
    tracking.check_server(cfg.paths)  # a dead server: one line before minutes of work
    record = token_translation(cfg, Path(model_dir), source, target, sentences, alphas)
    folder = out or translation_folder(cfg, record)
    figures = [heat_map(record, measure, folder / f"{measure}.png")
               for measure in ("convert_rate", "bleu1")]
    write_json(folder / "translation.json", record)
    if record["run_id"] and tracking.run_exists(cfg.paths, record["run_id"]):
        pair = f"{record['source']}-{record['target']}".replace(":", "_")
        prefix = f"translate.{pair}."
        tracking.log_to_run(cfg.paths, record["run_id"], {
            prefix + "convert_rate_best": record["best"]["convert_rate"],
            prefix + "bleu1_best": record["best"]["bleu1"],
            prefix + "convert_rate_unshifted": record["unshifted"]["convert_rate"],
            prefix + "bleu1_unshifted": record["unshifted"]["bleu1"],
        })
        for path in [*figures, folder / "translation.json"]:
            tracking.log_artifact_to_run(cfg.paths, record["run_id"], path, f"translation/{pair}")
    return record, folder
