"""Issue 24's seed experiments (E3, E4 on a GPU; E5 on the CPU): mean ± std over seeds of each
arm, and Welch's t-test of each arm against its baseline, read from the evaluation JSONs copied
out of the runs.

    python scripts/arm_stats.py [FOLDER] [BASE:ARM ...]

FOLDER holds ``<experiment>-<arm>-s<seed>.json`` (an evaluation JSON of multilab); the arm is
named by the file, not by the record's modification, because E3's arms are all ``original`` on
different corpora. Without pairs: E4's (``original:attend-padding``,
``lang-pos:lang-pos+attend-padding``) on ``benchmarks/results/gpu-h200-2026-11-27``.

Welch's test (unequal variances) because the arms' spreads differ several-fold; with three
seeds a side it only separates large effects, which is why the docs read the p-values beside
the per-seed values rather than alone.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

from scipy.stats import ttest_ind

METRICS = ("mu", "align_f1.l0", "align_f1.l8", "retrieval_p1.l0", "retrieval_p1.l8",
           "translation_p1.l0", "translation_p1.l8", "ppl_train", "ppl_dev")
E4_PAIRS = (("original", "attend-padding"), ("lang-pos", "lang-pos+attend-padding"))
#: where the E4 run's evaluation JSONs were kept (beside the benchmarks' results)
E4_RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "gpu-h200-2026-11-27"
FILE_NAME = re.compile(r"^[^-]+-(?P<arm>.+)-s(?P<seed>\d+)\.json$")


def read_arms(folder: Path) -> dict[str, dict[str, list[float]]]:
    """Each arm's metric values, one per seed, in seed order."""
    arms: dict[str, dict[str, list[float]]] = {}
    for path in sorted(folder.glob("*-s*.json")):
        match = FILE_NAME.match(path.name)
        if match is None:
            continue
        record = json.loads(path.read_text())
        values = arms.setdefault(match["arm"], {})
        for metric in METRICS:
            values.setdefault(metric, []).append(record["metrics"][metric])
    return arms


def main(folder: Path, pairs: list[tuple[str, str]]) -> None:
    arms = read_arms(folder)
    unknown = sorted({name for pair in pairs for name in pair} - arms.keys())
    if unknown or any(len(pair) != 2 for pair in pairs):
        print(f"arm_stats: bad pair or unknown arm {', '.join(unknown) or pairs}; "
              f"arms in {folder}: {', '.join(sorted(arms))} (pairs are BASE:ARM)", file=sys.stderr)
        sys.exit(2)
    names = list(dict.fromkeys(name for pair in pairs for name in pair if name in arms))
    print("metric".ljust(18) + "".join(f"{name:>26}" for name in names))
    for metric in METRICS:
        cells = [arms[name][metric] for name in names]
        print(metric.ljust(18) + "".join(
            f"{statistics.mean(v):>17.3f} ± {statistics.stdev(v):.3f}" for v in cells))
    for base, arm in pairs:
        for metric in METRICS:
            a, b = arms[arm][metric], arms[base][metric]
            p = ttest_ind(a, b, equal_var=False).pvalue
            print(f"{arm} − {base}, {metric}: {statistics.mean(a) - statistics.mean(b):+.3f} "
                  f"(p {p:.3f}; per seed {' '.join(f'{x:.3f}' for x in a)} "
                  f"against {' '.join(f'{x:.3f}' for x in b)})")


if __name__ == "__main__":
    args = sys.argv[1:]
    folder = Path(args[0]) if args else E4_RESULTS
    given = [tuple(pair.split(":", 1)) for pair in args[1:]]
    main(folder, given or list(E4_PAIRS))
