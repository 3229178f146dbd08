"""The price of a study row that no record prices: CPU seconds of one training step, against a
row of the same study that a record does price.

`multilab study next --lanes` schedules only rows whose training time a record measured
(never a lower bound), so a row that nobody has trained on this machine (K et al. 2020
Table 10's character vocabularies, Table 5's 3 heads, Table 7's depth 16) is never started.
This measures what such a row costs: each row named trains ``--short`` and ``--long`` steps
in two fresh runs of the real ``multilab train`` at one thread (``MULTILAB_THREADS=1``), the
study's own settings for the row (:func:`multilab.studies.settings.study_settings`) in a
scratch folder; the CPU difference over the step difference is one step's cost, start-up and
the final save cancelling out. CPU seconds, not wall seconds: the machine is shared (the
lab's lanes run beside it), and the ratio of two rows measured in the same minutes is the
figure to read. A row's full training is then estimated as its steps (its profile's epochs x
the steps an epoch it reported), priced by each named row that a record prices: that row's
recorded training, scaled by the two rows' steps and step costs (the lowest and highest of
these are the estimate; recorded trainings ran under different loads).

Run from the project root (``--short``/``--long`` in steps; the first row's first run only
learns the steps an epoch):
``PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_row_steps.py k2020-table10
--rows wordpiece,char --project /tmp/rows``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any

from common import RESULTS, ROOT, cpu_seconds, machine, train_record, write_json
from multilab.data.layout import vocab_built
from multilab.studies.claims import load_claims
from multilab.studies.records import iter_records
from multilab.studies.settings import row_configuration, study_artifacts, study_settings
from multilab.studies.spec import Study, load_studies, split_row_names
from multilab.studies.tables import study_result


def row_step_cost(study: Study, label: str, root: Path, short: int, long: int,
                  env: dict[str, str]) -> dict[str, Any]:
    """One row's CPU seconds a step (two fresh runs of ``short`` and ``long`` steps after a
    probe that learns the steps an epoch) and the steps of its full training."""
    row = study.row(label)
    if row is None:
        raise SystemExit(f"row {label!r}: not a row of {study.name} "
                         f"({', '.join(r.label for r in study.rows)})")
    settings = [f"--set={value}" for value in study_settings(study, root, row)]
    settings += [f"--set=paths.{key}={root / key}" for key in ("mlruns", "results")]
    settings.append("--set=train.eval_points=[]")
    train = ["train", "--modification", row.modification, "--seed", "0"]
    artifacts = study_artifacts(study, root, row)
    if not (artifacts / "corpora" / "train.txt").is_file():
        cpu_seconds([*settings, "corpus", "build"], env)
    if not vocab_built(artifacts / "vocab"):
        cpu_seconds([*settings, "vocab"], env)
    def fresh() -> None:
        """Each run trains afresh and writes its own record: a model found is not trained
        again, and an identical record is not written again."""
        for folder in (artifacts / "models", root / "results"):
            shutil.rmtree(folder, ignore_errors=True)

    fresh()
    cpu_seconds([*settings, "--set=train.epochs=0.01", *train], env)
    per_epoch = train_record(root / "results")["steps_per_epoch"]
    runs = []
    for steps in (short, long):
        fresh()
        seconds = cpu_seconds([*settings, f"--set=train.epochs={steps / per_epoch:.6f}",
                               *train], env)
        runs.append((train_record(root / "results")["steps"], seconds))
    (short_steps, short_s), (long_steps, long_s) = runs
    epochs = float(row_configuration(study, row, ROOT / "params.yaml")["epochs"])
    return {"row": row.label, "modification": row.modification,
            "cpu_s_per_step": round((long_s - short_s) / (long_steps - short_steps), 3),
            "steps_per_epoch": per_epoch, "full_steps": round(epochs * per_epoch),
            "runs": [{"steps": s, "cpu_s": round(c, 1)} for s, c in runs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", help="a study's name (studies/NAME.yaml)")
    parser.add_argument("--rows", required=True,
                        help="row labels, comma-separated; name at least one with a recorded "
                             "training, the price of the others")
    parser.add_argument("--project", type=Path, required=True, help="a scratch folder")
    parser.add_argument("--short", type=int, default=2, help="steps of the short run")
    parser.add_argument("--long", type=int, default=8, help="steps of the long run")
    parser.add_argument("--out", type=Path, help="the JSON (default results/row-steps-STUDY.json)")
    args = parser.parse_args()
    folder = ROOT / "studies"
    claims = load_claims(folder / "claims")
    studies = load_studies(folder, claims)
    if args.study not in studies:
        raise SystemExit(f"study {args.study!r}: not a study ({', '.join(studies)})")
    study = studies[args.study]
    labels = split_row_names(args.rows, [study])
    result = study_result(study, list(iter_records(ROOT / "results")), claims,
                          ROOT / "params.yaml")
    env = {**os.environ, "MULTILAB_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    out_path = args.out or RESULTS / f"row-steps-{study.name}.json"
    out: dict[str, Any] = {"machine": machine(), "study": study.name, "threads": 1,
                           "short": args.short, "long": args.long, "rows": []}
    for label in labels:
        entry = row_step_cost(study, label, args.project.resolve(), args.short, args.long, env)
        entry["recorded_train_s"] = result.measured_seconds(label)
        out["rows"].append(entry)
        print(json.dumps(entry), flush=True)
        write_json(out_path, out)
    # each row priced by every row with a recorded training, scaled by step cost and steps:
    # the references disagree by the load their recorded runs had, so the range is the figure
    references = [e for e in out["rows"] if e["recorded_train_s"]]
    for entry in out["rows"]:
        estimates = [ref["recorded_train_s"] / 60 * entry["full_steps"] / ref["full_steps"]
                     * entry["cpu_s_per_step"] / ref["cpu_s_per_step"] for ref in references]
        if estimates:
            entry["estimated_train_min"] = [round(min(estimates), 1), round(max(estimates), 1)]
    out["references"] = [ref["row"] for ref in references]
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    write_json(out_path, out)
    print(json.dumps({e["row"]: e.get("estimated_train_min") for e in out["rows"]}))


if __name__ == "__main__":
    main()
