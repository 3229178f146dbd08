"""Precision and coverage of the silver dictionary (multilab.data.dictionary) on the Bible.

Three measurements, each for several ``min_count`` thresholds and both associations:

1. English ↔ Fake-English: the built training corpus (``artifacts/corpora/train.txt``, one
   tokenized sentence a line) against its ``::``-prefixed copy, sentence order kept. The gold is
   exact (w ↔ ::w).
2. English ↔ English: Basic English (edition 3) against the World English Bible (edition 4),
   New Testament verses aligned by verse id. Gold = the identical string, which is a *lower
   bound* on precision (a correct synonym pair such as went ↔ departed counts as wrong); it is
   the only real-wording pair with an automatic gold here.
3. English (3) ↔ German (Schlachter, ``s``): no gold; a seeded sample of entries is printed for a
   hand check.

Inputs come from the CLI so the script depends on nothing but the dictionary module:

    multilab corpus export && multilab corpus export --edition 4 && \
        multilab corpus export --edition s && multilab corpus build
    python benchmarks/bench_dictionary.py --train artifacts/corpora/train.txt --bible data/bible
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import time
from pathlib import Path

from nltk.tokenize import NLTKWordTokenizer

from multilab.data.dictionary import (
    evaluate_dictionary,
    induce_dictionary,
    prefixed_copy,
    prefixed_gold,
)

NEW_TESTAMENT = (40, 66)
_REMOVED = re.compile(r"[“”‘’()\[\]\"]")  # as multilab.corpus.clean_verse


def read_export(path: Path, books: tuple[int, int]) -> dict[str, str]:
    """verse id → text of one exported edition (``verse_id<TAB>text`` lines)."""
    verses = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        vid, _, text = line.partition("\t")
        if books[0] <= int(vid.split(".")[0]) <= books[1] and text.strip():
            verses[vid] = text
    return verses


def aligned_verses(
    bible: Path, source: str, target: str, lowercase: bool = False
) -> tuple[list[list[str]], list[list[str]]]:
    """Tokenized verses present in both editions, in canonical order.

    NLTK's word tokenizer splits only a string's last full stop; a verse holds several
    sentences, so a word's trailing full stop is split off here too (``man.`` → ``man .``).
    """
    tokenizer = NLTKWordTokenizer()
    src = read_export(bible / f"{source}.tsv", NEW_TESTAMENT)
    trg = read_export(bible / f"{target}.tsv", NEW_TESTAMENT)
    ids = [vid for vid in src if vid in trg]

    def tokens(text: str) -> list[str]:
        text = " ".join(_REMOVED.sub(" ", text.lower() if lowercase else text).split())
        out = []
        for token in tokenizer.tokenize(text):
            out += [token[:-1], "."] if len(token) > 1 and token.endswith(".") else [token]
        return out

    return [tokens(src[v]) for v in ids], [tokens(trg[v]) for v in ids]


def top_n_precision(source, target, gold, sizes, min_count) -> list[dict]:
    """Precision of the n highest-scoring entries: the two associations at equal size."""
    rows = []
    for association in ("dice", "ibm1"):
        entries = induce_dictionary(source, target, min_count, association)
        for n in sizes:
            top = entries[:n]
            correct = sum(e.target in gold.get(e.source, ()) for e in top)
            rows.append({"association": association, "min_count": min_count, "n": len(top),
                         "precision": correct / len(top), "lowest_score": top[-1].score})
            print(json.dumps(rows[-1]))
    return rows


def sweep(source, target, gold, thresholds, associations) -> list[dict]:
    rows = []
    for association in associations:
        for min_count in thresholds:
            start = time.perf_counter()
            entries = induce_dictionary(source, target, min_count, association)
            seconds = time.perf_counter() - start
            row = {"association": association, "min_count": min_count,
                   "seconds": round(seconds, 2), "entries": len(entries)}
            if gold is not None:
                row |= vars(evaluate_dictionary(entries, gold, source))
            rows.append(row)
            print(json.dumps(row))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=Path, required=True, help="built train.txt")
    parser.add_argument("--bible", type=Path, required=True, help="folder of exported editions")
    parser.add_argument("--thresholds", type=int, nargs="+", default=[1, 2, 3, 5, 10, 20])
    parser.add_argument("--associations", nargs="+", default=["dice", "ibm1"])
    parser.add_argument("--sample", type=int, default=20, help="entries shown for en-de")
    parser.add_argument("--sample-min-count", type=int, default=5)
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent / "results" / "dictionary.json")
    args = parser.parse_args()
    record: dict = {"date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                    "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}

    english = [line.split() for line in args.train.read_text().splitlines() if line.strip()]
    print(f"# en-fake: {len(english)} sentences")
    record["en_fake"] = sweep(english, prefixed_copy(english),
                              prefixed_gold({w for s in english for w in s}),
                              args.thresholds, args.associations)

    for lowercase in (False, True):
        basic, web = aligned_verses(args.bible, "3", "4", lowercase)
        name = "en3_en4_identity" + ("_lowercased" if lowercase else "")
        print(f"# {name}: {len(basic)} verses, gold = identical string (a lower bound)")
        identity = {w: {w} for s in basic for w in s}
        record[name] = sweep(basic, web, identity, args.thresholds, args.associations)
        if not lowercase:
            record["en3_en4_identity_top_n"] = top_n_precision(
                basic, web, identity, [250, 500, 750, 1000], args.sample_min_count
            )

    basic, german = aligned_verses(args.bible, "3", "s")
    print(f"# en3-de_s: {len(basic)} verses, no gold")
    record["en3_de"] = sweep(basic, german, None, args.thresholds, args.associations)
    record["en3_de_sample"] = {}
    for association in args.associations:
        entries = induce_dictionary(basic, german, args.sample_min_count, association)
        sample = random.Random(0).sample(entries, min(args.sample, len(entries)))
        record["en3_de_sample"][association] = [
            [e.source, e.target, round(e.score, 3), e.source_count, e.target_count]
            for e in sample
        ]
        print(f"# en3-de sample, {association}, min_count {args.sample_min_count}")
        for e in sample:
            print(f"{e.source:>15} {e.target:<18} {e.score:.3f} {e.source_count} {e.target_count}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
