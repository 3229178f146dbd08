"""Does the fused CPU step learn the model the eager step learns? Welch over seeds, from records.

The fused step (``train.step: fused``) computes the same loss on the real tokens only and draws
its dropout from a counter hash, so one seed's model is another draw than the eager step's;
"the same experiment" means the same distribution of results. The criterion, written before
either arm's number was read: for each of the final dev perplexity and μ, Welch's two-sided
test over the seeds both arms have (at least 3 an arm) gives p ≥ .05. Beside it, descriptive
only: each difference with its 95 % Welch interval, the dev perplexity and μ at the curve points
(20, 40, 60, 80 % of the steps) side by side, the final training loss. Speed is not compared
here: the records' step seconds come from machines under different loads
(benchmarks/bench_cpu_floor.py times the two steps side by side). Should either p fall
below .05, the fused step is another trainer: it keeps its own fingerprint and does not
become a default.

The arms are the row ``original`` of ``dufter2020-table1`` (the eager step) and of
``dufter2020-table1-fused`` (the same settings, ``train.step: fused``); nothing is trained
here: ``multilab study run dufter2020-table1-fused`` trains the fused arm's missing seeds.

    python benchmarks/bench_fused_equivalence.py            # prints the table, writes a record
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path
from typing import Any

from scipy import stats

from common import PARAMS, RESULTS, ROOT, machine, write_json
from multilab.studies.claims import load_claims
from multilab.studies.records import Record, iter_records
from multilab.studies.spec import load_study
from multilab.studies.tables import collect
from multilab.studies.verdict import welch as verdict_welch

ARMS = {"eager": "dufter2020-table1", "fused": "dufter2020-table1-fused"}
ROW = "original"
DECIDING = ("ppl_dev", "mu")  # the criterion's metrics
DESCRIBED = ("ppl_train", "retrieval_p1.l8", "translation_p1.l8", "align_f1.l0")
ALPHA = 0.05


def arm_records(study_name: str, records: list[Record]) -> dict[int, dict[str, Record]]:
    """seed → {kind: record} of the study's row ``original`` (its evaluate and train records)."""
    studies = ROOT / "studies"
    study = load_study(studies / f"{study_name}.yaml", load_claims(studies / "claims"))
    seeds: dict[int, dict[str, Record]] = {}
    for (row, seed, kind, _variant), record in collect(study, records, PARAMS).items():
        if row == ROW:
            seeds.setdefault(seed, {})[kind] = record
    return seeds


def seed_values(by_kind: dict[str, Record]) -> dict[str, float]:
    """One seed's numbers: the final metrics, the curve points, the last logged loss."""
    values: dict[str, float] = {}
    evaluate, train = by_kind.get("evaluate"), by_kind.get("train")
    if evaluate is not None:
        metrics = evaluate.data["result"]["metrics"]
        values |= {name: metrics[name] for name in DECIDING + DESCRIBED if name in metrics}
    if train is not None:
        result = train.data["result"]
        steps = result["steps"]
        for point in result.get("curve", []):
            at = round(100 * point["step"] / steps)
            for name in ("ppl_dev", "mu"):
                values[f"curve.{name}.at{at}"] = point[name]
        values["loss.final"] = result["last_log"]["loss"]
    return values


def welch(a: list[float], b: list[float]) -> dict[str, Any]:
    """Welch's t-test of b − a (the verdict rule's :func:`multilab.studies.verdict.welch`) with
    the 95 % interval of the difference."""
    va, vb = statistics.variance(a), statistics.variance(b)
    diff = statistics.fmean(b) - statistics.fmean(a)
    if not va + vb:
        return {"difference": diff, "ci95": [diff, diff], "p": 1.0 if diff == 0 else 0.0}
    t, dof = verdict_welch(statistics.fmean(b), vb, len(b), statistics.fmean(a), va, len(a))
    half = float(stats.t.ppf(0.975, dof)) * math.sqrt(va / len(a) + vb / len(b))
    return {"difference": diff, "ci95": [diff - half, diff + half],
            "p": float(2 * stats.t.sf(abs(t), dof))}


def compare(arms: dict[str, dict[int, dict[str, Record]]]) -> dict[str, Any]:
    """Per metric: each arm's values by seed, mean ± std, Welch's test where both have ≥ 2."""
    values = {arm: {seed: seed_values(kinds) for seed, kinds in sorted(seeds.items())}
              for arm, seeds in arms.items()}
    names = sorted({name for seeds in values.values() for one in seeds.values() for name in one})
    table: dict[str, Any] = {}
    for name in names:
        entry: dict[str, Any] = {}
        for arm, seeds in values.items():
            got = [one[name] for one in seeds.values() if name in one]
            entry[arm] = {"values": got, "mean": statistics.fmean(got) if got else None,
                          "std": statistics.stdev(got) if len(got) > 1 else None}
        eager, fused = entry["eager"]["values"], entry["fused"]["values"]
        if len(eager) > 1 and len(fused) > 1:
            entry["welch_fused_minus_eager"] = welch(eager, fused)
        table[name] = entry
    return {"seeds": {arm: sorted(seeds) for arm, seeds in arms.items()}, "metrics": table}


def verdict(comparison: dict[str, Any]) -> str:
    """The criterion's reading: same experiment, another trainer, or not yet decided."""
    seeds = comparison["seeds"]
    if min(len(seeds["eager"]), len(seeds["fused"])) < 3:
        return (f"not decided: seeds eager {seeds['eager']}, fused {seeds['fused']} "
                "(3 an arm needed)")
    ps = {name: comparison["metrics"][name]["welch_fused_minus_eager"]["p"] for name in DECIDING}
    shown = ", ".join(f"{name} p {p:.3g}" for name, p in ps.items())
    if all(p >= ALPHA for p in ps.values()):
        return f"the same experiment within seed noise ({shown}; all ≥ {ALPHA})"
    return f"another trainer ({shown}; one below {ALPHA})"


def show(comparison: dict[str, Any]) -> None:
    print(f"{'metric':<20} {'eager mean ± std':>20} {'fused mean ± std':>20} {'fused − eager':>14} "
          f"{'95 % interval':>22} {'p':>7}")
    for name, entry in comparison["metrics"].items():
        cells = []
        for arm in ("eager", "fused"):
            mean, std = entry[arm]["mean"], entry[arm]["std"]
            count = len(entry[arm]["values"])
            cells.append("–" if mean is None else f"{mean:.4g} ± {std or 0:.2g} ({count})")
        test = entry.get("welch_fused_minus_eager")
        tail = (f"{test['difference']:>14.4g} [{test['ci95'][0]:>9.4g}, {test['ci95'][1]:>9.4g}] "
                f"{test['p']:>7.3g}") if test else ""
        print(f"{name:<20} {cells[0]:>20} {cells[1]:>20} {tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "results",
                        help="the records' folder (default: the repository's results/)")
    parser.add_argument("--out", type=Path, default=None, help="the record to write "
                        "(default: benchmarks/results/fused-equivalence-<date>.json)")
    args = parser.parse_args()
    records = list(iter_records(args.results))
    comparison = compare({arm: arm_records(study, records) for arm, study in ARMS.items()})
    show(comparison)
    reading = verdict(comparison)
    print(reading)
    about = machine()
    out = args.out or RESULTS / f"fused-equivalence-{about['date_utc'][:10]}.json"
    write_json(out, {"what": __doc__.splitlines()[0], "criterion": __doc__.split("\n\n")[1],
                     "arms": ARMS, "row": ROW, "machine": about, "verdict": reading,
                     **comparison})
    print(f"record: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


if __name__ == "__main__":
    main()
