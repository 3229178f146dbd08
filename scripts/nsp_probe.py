"""Did an ``nsp`` model learn next-sentence prediction? (K et al. 2020 Table 8, a diagnostic)

Rebuilds the model's own training pairs with the library (``prepare_data``), draws MLM masks
as training does (``mask_tokens``, fresh draws), reads the saved ``BertForPreTraining`` and
prints its MLM loss, NSP loss and NSP accuracy on a random sample of those pairs. Why: the
trainer logs MLM + NSP as one number, and a model that never learned NSP (loss ln 2, accuracy
1/2) reads differently from one that did. Run it in the workspace that trained the model,
with the same ``--set`` overrides (its done file gives the modification and seed, its
fingerprint refuses overrides that would rebuild other pairs)::

    python scripts/nsp_probe.py artifacts/models/nsp/seed42 \\
        --set 'languages=[v,enfake:3]' --set vocab.mode=joint --set 'study=[nsp]'
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import BertForPreTraining
from transformers.utils import logging as hf_logging

from multilab.config import RunConfig
from multilab.data.batches import mask_tokens
from multilab.errors import UserError
from multilab.resolve import load_config, parse_overrides, resolve_run
from multilab.training.model_dir import data_fingerprint, read_done
from multilab.training.training_data import prepare_data


def probed_run(params: Path, overrides: list[str], model_dir: Path) -> RunConfig:
    """The finished nsp model's run, its modification and seed read from its done file; the
    overrides must give the configuration it was trained on (same fingerprint)."""
    done = read_done(model_dir)
    if done is None:
        raise UserError(f"{model_dir} is not a finished multilab model; train it first")
    cfg = load_config(params, parse_overrides(overrides))
    run = resolve_run(cfg, done["modification"], done["seed"])
    if not run.recipe.next_sentence:
        raise UserError(f"{model_dir} was trained with {done['modification']!r}, which has no "
                        "nsp (valid: a model of a modification with nsp, e.g. nsp, lang-id;nsp)")
    if run.fingerprint(data_fingerprint(run)) != done["fingerprint"]:
        raise UserError(f"{model_dir} was trained on another configuration than params + "
                        f"{overrides}: pass the --set overrides of the study that trained it")
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", help="a saved nsp model (artifacts/models/nsp/seed<N>)")
    parser.add_argument("--params", default="params.yaml", help="the workspace's params file")
    parser.add_argument("--pairs", type=int, default=2048, help="training pairs to score")
    parser.add_argument("--set", action="append", default=[], help="params override, as multilab")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error(f"--pairs {args.pairs}: must be >= 1")
    hf_logging.set_verbosity_error()  # a diagnostic prints its three numbers, not load noise
    hf_logging.disable_progress_bar()

    try:
        run = probed_run(Path(args.params), args.set, Path(args.model_dir))
    except UserError as err:
        print(f"nsp_probe: error: {' '.join(str(err).split())}", file=sys.stderr)
        sys.exit(2)
    data, encoder = prepare_data(run)
    examples = data.examples
    generator = torch.Generator().manual_seed(0)
    sample = torch.randperm(len(examples), generator=generator)[: args.pairs]
    model = BertForPreTraining.from_pretrained(args.model_dir).eval()
    mlm_sum, mlm_count, nsp_sum, nsp_correct = 0.0, 0, 0.0, 0
    with torch.no_grad():
        for chunk in sample.split(64):
            masked = mask_tokens(examples.batch(chunk), encoder, run.study.train.mask_prob,
                                 run.recipe.replacement, generator)
            out = model(**masked.inputs)
            predicted = out.prediction_logits[masked.selected].float()
            mlm_sum += F.cross_entropy(predicted, masked.labels, reduction="sum").item()
            mlm_count += len(masked.labels)
            pair_logits = out.seq_relationship_logits.float()
            nsp_sum += F.cross_entropy(pair_logits, masked.next_sentence, reduction="sum").item()
            nsp_correct += int((pair_logits.argmax(-1) == masked.next_sentence).sum())
    true_share = float((examples.next_sentence[sample] == 0).float().mean())
    print(f"{len(sample)} of {len(examples)} training pairs (true next: {true_share:.3f})")
    print(f"MLM loss {mlm_sum / mlm_count:.3f}  NSP loss {nsp_sum / len(sample):.3f} "
          f"(chance {math.log(2):.3f})  NSP accuracy {nsp_correct / len(sample):.3f}")


if __name__ == "__main__":
    main()
