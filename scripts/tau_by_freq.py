"""Eval-only checks on one checkpoint (no training): word translation by how often the token
occurs in the training text, and (--retrieval) retrieval on 1k vs 10k dev sentences, also with the
authors' evaluation batching (English block then Fake block, sequential batches of 256, padding
attended, as minimult's evaluate.py does).

What it is for: whether word translation fails on the rare tokens and whether the dev-set size
or the authors' batching moves retrieval, §4.3 of docs/notes/paper-setup-diff.md.

Usage (repo root, shared venv, PYTHONPATH=src):
    python scripts/tau_by_freq.py CHECKPOINT_DIR [--retrieval]
        [--sizes 1000,10000] [--corpora artifacts/corpora] [--vocab /tmp/paperdiff-vocab]
"""

import argparse
import collections
from pathlib import Path

import torch
import torch.nn.functional as F

from multilab.data.batches import tokenize_lines
from multilab.data.corpus import read_lines
from multilab.data.inputs import ENGLISH, FAKE, InputEncoder
from multilab.data.vocab import load_tokenizer
from multilab.evaluation import metrics
from multilab.evaluation.evaluate import multilinguality
from multilab.lab.modifications import resolve_recipe
from multilab.training.model import hidden_layers, load_model

parser = argparse.ArgumentParser()
parser.add_argument("checkpoint", type=Path)
parser.add_argument("--retrieval", action="store_true")
parser.add_argument("--sizes", default="1000,10000", help="dev sentences for --retrieval")
parser.add_argument("--corpora", type=Path, default=Path("artifacts/corpora"))
parser.add_argument("--vocab", type=Path, default=Path("/tmp/paperdiff-vocab"))
args = parser.parse_args()
torch.set_num_threads(1)
tok = load_tokenizer(args.vocab)
V = len(tok)
enc = InputEncoder(resolve_recipe("original"), V, 128)
model = load_model(args.checkpoint).eval()
train = read_lines(args.corpora / "train.txt")
train_ids = tok(train, add_special_tokens=False)["input_ids"]
counts = collections.Counter(i for x in train_ids for i in x)
freq = torch.tensor([counts.get(i, 0) for i in range(V)])
ids = torch.arange(V)

vectors = {}
with torch.no_grad():
    for lang in (ENGLISH, FAKE):
        batch = enc.batch([torch.tensor([i]) for i in range(V)], [lang] * V)
        states = hidden_layers(model, batch.model_inputs(), [0, 8])
        for layer, h in zip((0, 8), states, strict=True):
            vectors[layer, lang] = F.normalize(h[:, 1].float(), dim=-1)
buckets = [
    ("specials (ids 0-4)", ids < 5),
    ("never in train", (freq == 0) & (ids >= 5)),
    ("1-9", (freq >= 1) & (freq <= 9)),
    ("10-99", (freq >= 10) & (freq <= 99)),
    ("100-999", (freq >= 100) & (freq <= 999)),
    (">= 1000", freq >= 1000),
]
print(f"checkpoint {args.checkpoint}")
header = " | ".join(name for name, _ in buckets)
print(f"| layer | tau (2,048) | tau (seen, no specials) | {header} |")
for layer in (0, 8):
    sim = vectors[layer, ENGLISH] @ vectors[layer, FAKE].T
    hit = ((sim.argmax(1) == ids).float() + (sim.argmax(0) == ids).float()) / 2
    seen = hit[(freq > 0) & (ids >= 5)].mean()
    cells = " | ".join(f"{hit[m].mean():.3f} (n={int(m.sum())})" for _, m in buckets)
    print(f"| {layer} | {hit.mean():.3f} | {seen:.3f} | {cells} |")

if args.retrieval:
    dev = read_lines(args.corpora / "dev.txt")
    for n in (int(x) for x in args.sizes.split(",")):
        sentences, _ = tokenize_lines(dev[:n], tok, enc)
        ours = multilinguality(model, enc, sentences, (0, 8), 512)
        examples = [(s, ENGLISH) for s in sentences] + [(s, FAKE) for s in sentences]
        pooled = {0: [], 8: []}
        with torch.no_grad():
            for start in range(0, len(examples), 256):
                chunk = examples[start:start + 256]
                batch = enc.batch([s for s, _ in chunk], [g for _, g in chunk])
                inputs = batch.model_inputs()
                inputs["attention_mask"] = torch.ones_like(inputs["attention_mask"])
                for layer, h in zip((0, 8), hidden_layers(model, inputs, [0, 8]), strict=True):
                    pooled[layer].append(metrics.mean_pool(h.float(), batch.word_mask))
        theirs = {}
        for layer in (0, 8):
            p = torch.cat(pooled[layer])
            theirs[layer] = metrics.retrieval_score(p[:n], p[n:]).p1
        print(f"{n} dev sentences: multilab rho0 {ours['retrieval_p1.l0']:.3f} rho8 "
              f"{ours['retrieval_p1.l8']:.3f} F1_0 {ours['align_f1.l0']:.3f} F1_8 "
              f"{ours['align_f1.l8']:.3f}; authors' batching with padding attended: rho0 "
              f"{theirs[0]:.3f} rho8 {theirs[8]:.3f}")
