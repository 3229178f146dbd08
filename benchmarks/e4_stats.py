"""Issue 24 E4: mean ± std over seeds of each arm, and Welch's t-test of each attend-padding arm
against its baseline, read from the evaluation JSONs that benchmarks/gpu_e4.sh produced.

    python benchmarks/e4_stats.py [benchmarks/results/gpu-h200-2026-11-27]

Welch's test (unequal variances) because the arms' spreads differ several-fold; with three
seeds a side it only separates large effects, which is why the docs read the p-values beside
the per-seed values rather than alone.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from scipy.stats import ttest_ind

METRICS = ("mu", "align_f1.l0", "align_f1.l8", "retrieval_p1.l0", "retrieval_p1.l8",
           "translation_p1.l0", "translation_p1.l8", "ppl_train", "ppl_dev")
PAIRS = (("original", "attend-padding"), ("lang-pos", "lang-pos+attend-padding"))


def read_arms(folder: Path) -> dict[str, dict[str, list[float]]]:
    """Each arm's metric values, one per seed, from files named e4-<modification>-s<seed>.json."""
    arms: dict[str, dict[str, list[float]]] = {}
    for path in sorted(folder.glob("e4-*-s*.json")):
        record = json.loads(path.read_text())
        values = arms.setdefault(record["modification"].replace(";", "+"), {})
        for metric in METRICS:
            values.setdefault(metric, []).append(record["metrics"][metric])
    return arms


def main(folder: Path) -> None:
    arms = read_arms(folder)
    names = [name for pair in PAIRS for name in pair if name in arms]
    print("metric".ljust(18) + "".join(f"{name:>26}" for name in names))
    for metric in METRICS:
        cells = [arms[name][metric] for name in names]
        print(metric.ljust(18) + "".join(
            f"{statistics.mean(v):>17.3f} ± {statistics.stdev(v):.3f}" for v in cells))
    for base, arm in PAIRS:
        for metric in METRICS:
            a, b = arms[arm][metric], arms[base][metric]
            p = ttest_ind(a, b, equal_var=False).pvalue
            print(f"{arm} − {base}, {metric}: {statistics.mean(a) - statistics.mean(b):+.3f} "
                  f"(p {p:.3f}; per seed {' '.join(f'{x:.3f}' for x in a)} "
                  f"against {' '.join(f'{x:.3f}' for x in b)})")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1
              else Path(__file__).parent / "results" / "gpu-h200-2026-11-27"))
