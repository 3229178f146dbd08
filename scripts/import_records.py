"""Migrate results measured before records existed into ``results/`` (issue 51, item 3).

Each source below is a committed file (or a background run's output folder) whose numbers a
document cites; the record keeps its numbers unchanged and says where they came from: the
commit the run was made at (where known), the file, the date and the device. The
configuration is rebuilt from today's ``params.yaml`` for the run's modification and seed
(``provenance.config_rebuilt``). Run it from the project root; it is idempotent.

    python scripts/import_records.py                     # the committed sources
    python scripts/import_records.py --runs DIR ...      # background runs (run.json + JSONs)
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from multilab.config import load_config
from multilab.studies.records import model_identity, write_record

TABLE1_KEYS = ("mu", "align_f1.l0", "retrieval_p1.l0", "translation_p1.l0", "align_f1.l8",
               "retrieval_p1.l8", "translation_p1.l8", "ppl_train", "ppl_dev")


def file_commit(path: Path) -> tuple[str, str]:
    """The commit that added ``path`` and its date."""
    out = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H %aI", "-1", "--",
                          str(path)], capture_output=True, text=True, check=True).stdout
    commit, date = out.split()
    return commit, date


def origin(source: Path, ran_at: str | None, device: str, note: str) -> dict[str, Any]:
    added, date = file_commit(source)
    return {"commit": ran_at, "dirty": None, "date": date, "machine": {"device": device},
            "command": None, "imported_from": str(source), "imported_file_commit": added,
            "config_rebuilt": True, "note": note}


def _config(modification: str, seed: int) -> dict[str, Any]:
    return load_config(Path("params.yaml"), {"profile": "quick"}).run(modification,
                                                                      seed).as_params()


def import_quick_study(results: Path) -> list[Path]:
    """The default study's seed-42 rows (README's main command at d3accbd, CPU)."""
    source = Path("docs/results/quick-study/table1.csv")
    written = []
    with source.open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            modification = row["modification"]
            metrics = {key: float(row[f"{key}_mean"]) for key in TABLE1_KEYS}
            model = {"modification": modification, "paper_id": row["paper_id"], "seed": 42,
                     "profile": "quick", "fingerprint": None, "run_id": None}
            written.append(write_record(
                results, "multilab-quick", "evaluate", {"metrics": metrics}, model=model,
                config=_config(modification, 42), origin=origin(
                    source, "d3accbd", "cpu", "the default study's table (one seed, its "
                    "standard deviation column is 0); no fingerprint was recorded")))
    return written


def import_e5_base(results: Path) -> list[Path]:
    """E5's default-corpus arm, seeds 43 and 44 (trained at 7a1dce8 on the CPU)."""
    folder = Path("docs/results/e5-web-quick-cpu")
    written = []
    for seed in (43, 44):
        evaluation = json.loads((folder / f"e5-base-s{seed}.json").read_text())
        trained = json.loads((folder / f"base-s{seed}.train.json").read_text())
        model = model_identity(trained)
        config = _config("original", seed)
        note = "E5's default-corpus arm (quick, 4 length pieces, one thread)"
        written.append(write_record(results, "multilab-quick", "evaluate", evaluation,
                                    model=model, config=config,
                                    origin=origin(folder / f"e5-base-s{seed}.json", "7a1dce8",
                                                  "cpu", note)))
        written.append(write_record(results, "multilab-quick", "train", trained, model=model,
                                    config=config,
                                    origin=origin(folder / f"base-s{seed}.train.json",
                                                  "7a1dce8", "cpu", note)))
    return written


def import_run(folder: Path, results: Path) -> list[Path]:
    """A background run's folder: run.json (provenance), model.json, eval.json,
    downstream.json (each present only if that step finished)."""
    run = json.loads((folder / "run.json").read_text())
    if not (folder / "model.json").is_file():
        return []
    trained = json.loads((folder / "model.json").read_text())
    model = model_identity(trained)
    config = _config(run["modification"], run["seed"])
    stamp = {"commit": run["commit"], "dirty": False, "date": run["finished"],
             "machine": {"device": run["device"], "threads": run["threads"]},
             "command": f"multilab train/evaluate/downstream ({run['modification']}, seed "
                        f"{run['seed']}), one thread, nice 19", "config_rebuilt": True,
             "started": run["started"]}
    written = [write_record(results, "multilab-quick", "train", trained, model=model,
                            config=config, origin=stamp)]
    for kind, name in (("evaluate", "eval.json"), ("downstream", "downstream.json")):
        if (folder / name).is_file():
            written.append(write_record(results, "multilab-quick", kind,
                                        json.loads((folder / name).read_text()), model=model,
                                        config=config, origin=stamp))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results")
    parser.add_argument("--runs", nargs="*", default=None,
                        help="background run folders to import instead of the committed sources")
    args = parser.parse_args(argv)
    results = Path(args.results)
    if args.runs is not None:
        written = [path for folder in args.runs for path in import_run(Path(folder), results)]
    else:
        written = import_quick_study(results) + import_e5_base(results)
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
