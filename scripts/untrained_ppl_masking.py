"""Why the `untrained` row's training perplexity is above the paper's: a measurement.

Dufter & Schütze 2020, Table 1, rows 18 and 19: an untrained BERT has a training perplexity
of 3,484 in the paper but ≈ 4,170 in our study (``dufter2020-table1``), while the dev
perplexities agree (≈ 4,130 and ≈ 4,180). Hypothesis: the paper's training figure was
measured with the training masking (80 % [MASK], 10 % kept, 10 % random), ours with every
selected token turned into [MASK]; a randomly initialised BERT with tied input and output
embeddings gives a kept token a high logit through the residual stream, which lowers the
perplexity.

This script rebuilds the study's untrained models exactly as ``multilab train --modification
untrained`` makes them (the study's settings, ``build_model`` with the run's seed; no
training step), checks them against the study's records (fingerprint, weights' SHA-256 where
recorded), and computes ``ppl_train`` and ``ppl_dev`` with (a) our all-[MASK] replacement and
(b) the recipe's training replacement, on the same masks seed; for (b) also the perplexity of
each replacement class (masked, kept, random). It writes one ``diagnostic`` record (no study
table reads that kind) to ``results/<experiment>/diagnostic/untrained-ppl-masking.json``.

The study's corpora and vocabulary must already be built (``multilab study run
dufter2020-table1`` builds them); they are copied into a temporary folder, nothing is written
beside them. Run from the project root at one thread (about 13 minutes)::

    OMP_NUM_THREADS=1 nice -n 19 python scripts/untrained_ppl_masking.py \\
        --prebuilt artifacts/studies/dufter2020-table1
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from multilab.config import Config, RunConfig
from multilab.data.batches import mask_tokens, seeded_generator, tokenize_lines, training_examples
from multilab.data.corpus import training_lines
from multilab.data.inputs import InputEncoder
from multilab.data.vocab import load_tokenizer
from multilab.errors import UserError
from multilab.evaluation.evaluate import (
    PERPLEXITY_REPLACEMENT,
    dev_lines,
    perplexity,
    sentence_batches,
)
from multilab.evaluation.metrics import masked_nll
from multilab.evaluation.metrics import perplexity as nll_perplexity
from multilab.lab.modifications import Recipe
from multilab.resolve import load_config, parse_overrides, resolve_run
from multilab.studies.claims import load_claims
from multilab.studies.records import iter_records, write_record
from multilab.studies.settings import study_settings
from multilab.studies.spec import load_study
from multilab.training.model import build_model, selected_logits
from multilab.training.model_dir import WEIGHTS, data_fingerprint, file_sha256
from multilab.training.training_data import study_encoder

STUDY = "dufter2020-table1"
MODIFICATION = "untrained"
CLASSES = ("mask", "keep", "random")  # mask_tokens' replacement order (knn unused here)


def study_config(root: Path, work: Path) -> Config:
    """The study's configuration with its artifacts in ``work`` (as ``study run`` sets it)."""
    claims = load_claims(root / "studies" / "claims")
    study = load_study(root / "studies" / f"{STUDY}.yaml", claims)
    settings = study_settings(study, work)
    return load_config(root / "params.yaml", parse_overrides(settings))


def untrained_model(run: RunConfig) -> torch.nn.Module:
    """The model ``multilab train`` saves for an untrained run: built, never stepped."""
    encoder = study_encoder(run)
    return build_model(run.model, encoder.total_size, run.seed, encoder.languages,
                       run.recipe.next_sentence, run.recipe.separate_layers, encoder.offsets)


def recorded(results: Path, seed: int) -> dict[str, Any] | None:
    """The newest evaluate record of the study's untrained model of ``seed`` (quick profile,
    its languages), or None."""
    found = None
    for record in iter_records(results):
        model, config = record.model, record.data["config"]
        if record.kind != "evaluate" or model is None or model.get("modification") != \
                MODIFICATION or model.get("seed") != seed or config.get("profile") != "quick" \
                or str(config.get("languages")) != "3,fake":
            continue
        if found is None or record.data["provenance"].get("date", "") >= \
                found.data["provenance"].get("date", ""):
            found = record
    if found is None:
        return None
    metrics = found.data["result"]["metrics"]
    return {"path": str(found.path.relative_to(results.parent)),
            "fingerprint": found.model.get("fingerprint"),
            "weights_sha256": found.model.get("weights_sha256"),
            "commit": found.data["provenance"].get("commit"),
            "ppl_train": metrics["ppl_train"], "ppl_dev": metrics["ppl_dev"]}


@torch.no_grad()
def by_class(model: torch.nn.Module, encoder: InputEncoder, sentences: list[torch.Tensor],
             recipe: Recipe, mask_prob: float, mask_seed: int, batch_size: int,
             replacement: tuple[float, ...]) -> dict[str, dict[str, float]]:
    """Perplexity and token count of each replacement class under ``replacement``: the
    masks and draws of :func:`perplexity` (same batches, same generator), the class read back
    from the input (a [MASK] id: mask; the true token: keep; anything else: random)."""
    examples = training_examples(sentences, recipe, encoder)
    mask_ids = torch.tensor([encoder.mask_id(lang) for lang in range(encoder.languages)])
    nll = dict.fromkeys(CLASSES, 0.0)
    count = dict.fromkeys(CLASSES, 0)
    for number, rows in enumerate(sentence_batches(examples.lengths, batch_size)):
        batch = examples.batch(rows)
        masked = mask_tokens(batch, encoder, mask_prob, replacement,
                             seeded_generator(mask_seed, number))
        logits = selected_logits(model, masked.inputs, masked.selected).float()
        given = masked.inputs["input_ids"][masked.selected]
        row_of = masked.selected.nonzero()[:, 0]
        is_mask = given == mask_ids[batch.languages][row_of]
        is_keep = ~is_mask & (given == masked.labels)
        for name, chosen in zip(CLASSES, (is_mask, is_keep, ~is_mask & ~is_keep), strict=True):
            if chosen.any():
                part, n = masked_nll(logits[chosen], masked.labels[chosen])
                nll[name] += part
                count[name] += n
    return {name: {"ppl": nll_perplexity(nll[name], count[name]), "tokens": count[name]}
            for name in CLASSES}


def measure(cfg: Config, seed: int) -> dict[str, Any]:
    """One seed: the model's identity and its perplexities under both replacements."""
    run = resolve_run(cfg, MODIFICATION, seed)
    if run.recipe.trained or cfg.verses:
        raise UserError(f"{MODIFICATION} must be an untrained English + Fake-English run")
    model = untrained_model(run).eval()
    saved = Path(tempfile.mkdtemp(prefix="untrained-weights-"))
    try:  # the weights' hash as the done file records it (save_pretrained's safetensors)
        model.save_pretrained(str(saved))
        weights = file_sha256(saved / WEIGHTS)
    finally:
        shutil.rmtree(saved, ignore_errors=True)
    tokenizer = load_tokenizer(cfg.paths.vocab)
    encoder = InputEncoder(run.recipe, len(tokenizer), cfg.train.max_length)
    ev, mask_prob = cfg.evaluate, cfg.train.mask_prob
    dev, _ = tokenize_lines(dev_lines(cfg.paths.corpora / "dev.txt", ev.dev_sentences),
                            tokenizer, encoder)
    train, _ = tokenize_lines(training_lines(cfg), tokenizer, encoder)
    dev_recipe = replace(run.recipe, parallel=True)  # dev: both languages, as evaluate_model
    splits = {"train": (train, run.recipe), "dev": (dev, dev_recipe)}
    training_replacement = tuple(run.recipe.replacement)
    result: dict[str, Any] = {
        "seed": seed, "fingerprint": run.fingerprint(data_fingerprint(run)),
        "weights_sha256": weights, "vocabulary": encoder.total_size,
        "training_replacement": list(training_replacement)}
    for label, replacement in (("all_mask", PERPLEXITY_REPLACEMENT),
                               ("training_masking", training_replacement)):
        for split, (sentences, recipe) in splits.items():
            result[f"{label}.ppl_{split}"] = perplexity(
                model, encoder, sentences, recipe, mask_prob, ev.mask_seed, ev.batch_size,
                replacement=replacement)
            if label == "training_masking":
                result[f"{label}.by_class_{split}"] = by_class(
                    model, encoder, sentences, recipe, mask_prob, ev.mask_seed, ev.batch_size,
                    replacement)
            print(f"seed {seed} {label} ppl_{split} {result[f'{label}.ppl_{split}']:.1f}",
                  flush=True)
    return result


def matches(entry: dict[str, Any], record: dict[str, Any] | None) -> dict[str, bool | None]:
    """Whether the rebuilt model is the recorded one (None: the record lacks the field) and
    its all-[MASK] perplexities are the recorded ones (to 1e-5 relative: float sums differ
    in the last digits between CPUs)."""
    if record is None:
        return {}

    def same(key: str) -> bool | None:
        return None if record.get(key) is None else record[key] == entry[key]

    return {"fingerprint": same("fingerprint"), "weights_sha256": same("weights_sha256"),
            **{f"ppl_{split}": math.isclose(entry[f"all_mask.ppl_{split}"],
                                            record[f"ppl_{split}"], rel_tol=1e-5)
               for split in ("train", "dev")}}


def summary(per_seed: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean and sample std over seeds of each perplexity (as the study tables give them)."""
    out = {}
    for key in ("all_mask.ppl_train", "all_mask.ppl_dev", "training_masking.ppl_train",
                "training_masking.ppl_dev"):
        values = torch.tensor([entry[key] for entry in per_seed], dtype=torch.float64)
        out[key] = {"mean": float(values.mean()),
                    "std": float(values.std()) if len(values) > 1 else 0.0}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prebuilt", type=Path, required=True,
                        help="a folder with the study's built corpora/ and vocab/ (read only)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--results", type=Path, default=Path("results"),
                        help="the records folder (read for the recorded numbers, written to)")
    args = parser.parse_args(argv)
    root = Path.cwd()
    missing = [part for part in ("corpora", "vocab") if not (args.prebuilt / part).is_dir()]
    if missing:
        print(f"--prebuilt {args.prebuilt}: no {missing[0]}/ in it (valid: a study artifacts "
              f"folder such as artifacts/studies/{STUDY} with corpora/ and vocab/)",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="untrained-ppl-") as work_text:
        work = Path(work_text)
        cfg = study_config(root, work)
        base = cfg.paths.corpora.parent
        base.mkdir(parents=True, exist_ok=True)
        for part in ("corpora", "vocab"):
            shutil.copytree(args.prebuilt / part, base / part)
        cfg = study_config(root, work)
        per_seed = []
        for seed in args.seeds:
            entry = measure(cfg, seed)
            entry["recorded"] = recorded(args.results, seed)
            entry["matches_record"] = matches(entry, entry["recorded"])
            per_seed.append(entry)
        experiment = cfg.experiment
    result = {"study": STUDY, "modification": MODIFICATION, "profile": cfg.profile,
              "seeds": args.seeds, "mask_seed": cfg.evaluate.mask_seed,
              "mask_prob": cfg.train.mask_prob, "per_seed": per_seed,
              "summary": summary(per_seed),
              "measured": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    config = {"profile": cfg.profile, "languages": ",".join(cfg.languages),
              "study": STUDY, "modification": MODIFICATION}
    path = write_record(args.results, experiment, "diagnostic", result, model=None,
                        config=config, qualifier="untrained-ppl-masking")
    print(json.dumps(result["summary"], indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as err:
        print(err, file=sys.stderr)
        sys.exit(2)
