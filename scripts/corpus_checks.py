"""Corpus, wordpiece and random-batch statistics of the built training corpus (no training).

What it is for: how far the lab's corpus and batches are from the paper's, §4.1 of
docs/notes/paper-setup-diff.md.

Usage (repo root, shared venv, PYTHONPATH=src):
    python scripts/corpus_checks.py [CORPORA_DIR] [VOCAB_OUT_DIR]
Defaults: artifacts/corpora and /tmp/paperdiff-vocab (the 2048 WordPiece is rebuilt there; it is
deterministic, so it equals `dvc repro vocab`'s).
"""

import collections
import math
import re
import statistics
import sys
from pathlib import Path

import torch

from multilab.data.corpus import read_lines
from multilab.data.vocab import build_vocab, load_tokenizer

corpora = Path(sys.argv[1] if len(sys.argv) > 1 else "artifacts/corpora")
vocab_dir = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/paperdiff-vocab")
train = read_lines(corpora / "train.txt")
dev = read_lines(corpora / "dev.txt")
if not (vocab_dir / "english" / "tokenizer.json").exists():
    build_vocab(train, 2048, vocab_dir)
tok = load_tokenizer(vocab_dir)
V = len(tok)
tr = tok(train, add_special_tokens=False)["input_ids"]
dv = tok(dev, add_special_tokens=False)["input_ids"]
L = [len(x) for x in tr]
Ld = [len(x) for x in dv]
words = sum(len(s.split()) for s in train)
print(f"train: {len(train)} sentences, {words} words, {sum(L)} wordpieces "
      f"({sum(L) / words:.3f}/word)")
print(f"train wordpieces/sentence: median {statistics.median(L)}, mean {statistics.mean(L):.1f}, "
      f"p90 {sorted(L)[int(.9 * len(L))]}, max {max(L)}, > 126: {sum(n > 126 for n in L)}")
print(f"dev wordpieces/sentence: median {statistics.median(Ld)}, mean {statistics.mean(Ld):.1f}, "
      f"max {max(Ld)}, > 126: {sum(n > 126 for n in Ld)}")

counts = collections.Counter(i for x in tr for i in x)
freq = [counts.get(i, 0) for i in range(V)]
for k in (0, 1, 9, 99):
    print(f"vocabulary entries (of {V}, 5 specials included) used <= {k} times in train: "
          f"{sum(f <= k for f in freq)}")

# random batches of 256 over English + Fake-English examples ([CLS] + words + [SEP])
gen = torch.Generator().manual_seed(0)
lengths = torch.tensor([n + 2 for n in L] * 2)
widths, pads, real = [], [], []
for _ in range(3):
    for rows in torch.randperm(len(lengths), generator=gen).split(256):
        n = lengths[rows]
        width = int(n.max())
        widths.append(width)
        real.append(int(n.sum()))
        pads.append(1 - int(n.sum()) / (width * len(rows)))
print(f"steps/epoch {math.ceil(len(lengths) / 256)}; "
      f"random batch: width mean {statistics.mean(widths):.1f}, "
      f"padding {statistics.mean(pads):.3f} of positions, real tokens {statistics.mean(real):.0f} "
      f"(selected for MLM ~{0.15 * (statistics.mean(real) - 2 * 256):.0f})")


def stats(sentences):
    lens = [len(s.split()) for s in sentences]
    median = statistics.median(lens)
    return f"{len(sentences)} sentences, median {median:g} words, {sum(lens)} words"


print("as built:", stats(train))
clause = re.compile(r"(?<=\s,)\s+(?=(?:and|but|for|so|then|because|who|which|that)\s)")
split = [p.strip() for s in train for p in clause.split(s) if p.strip()]
print("+ split after ' ,' before and/but/for/so/then/because/who/which/that:", stats(split))
