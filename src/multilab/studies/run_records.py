"""A record and its MLflow run: two serialisations of one record.

The record a command leaves in ``results/`` (:mod:`multilab.studies.records`) travels with the
model's run as well, as the artifact ``records/<file name>``: the same JSON, byte for byte.
The report stage of ``dvc repro`` reads the runs' copies (the design card's "query MLflow"),
``study report`` reads the committed files, and both hand the same :class:`Record` objects to
the one table builder, :func:`multilab.studies.tables.study_result`. A run that lost its
record, or a store that lost the run, gets it back from the committed file
(:mod:`multilab.studies.restore`).
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pandas as pd

from multilab import tracking
from multilab.config import Config
from multilab.errors import UserError
from multilab.resolve import resolve_run
from multilab.studies.records import (
    SCHEMA,
    Record,
    experiment_records,
    iter_records,
    model_identity,
    parse_record,
    record_path,
    records_root,
    write_record,
)
from multilab.training.model_dir import read_done

log = logging.getLogger(__name__)

#: the artifact folder of a model's run that holds its records
RECORDS_FOLDER = "records"
#: how a record read from a run names where it came from: ``runs:/<run id>/records/<file>``,
#: MLflow's own address of the artifact
RUNS_SCHEME = "runs:"


def record_config(cfg: Config, modification: str | None = None, seed: int | None = None
                  ) -> dict[str, Any]:
    """A record's ``config`` block: the model's resolved configuration (``modification`` and
    ``seed``; without them, what a record of no single model is measured under) and the
    measurement settings of ``evaluate`` and ``downstream``."""
    config: dict[str, Any] = {"profile": cfg.profile, "languages": ",".join(cfg.languages),
                              "vocab.mode": cfg.vocab.mode, "vocab.unit": cfg.vocab.unit}
    if modification is not None and seed is not None:
        config = resolve_run(cfg, modification, seed).as_params()
    config |= {f"evaluate.{k}": v for k, v in asdict(cfg.evaluate).items()}
    return config | {f"downstream.{k}": v for k, v in asdict(cfg.downstream).items()}


def keep_record(cfg: Config, kind: str, result: Mapping[str, Any],
                model_dir: Path | None = None, qualifier: str = "",
                extra: Mapping[str, Any] | None = None, once: bool = False) -> Path | None:
    """Write the command's record to ``results/`` (a smoke run's to the ignored
    ``results-scratch/``: :func:`~multilab.studies.records.records_root`) and give the
    model's run a copy; returns its path (None: ``once`` and a record is there already,
    kept with its provenance)."""
    done = read_done(model_dir) if model_dir is not None else None
    model = model_identity(done) if done is not None else None
    config = record_config(cfg, *((done["modification"], done["seed"]) if done else ()))
    config |= extra or {}
    root = records_root(cfg.paths.results, cfg.profile)  # smoke: the ignored scratch folder
    if once and record_path(root, cfg.experiment, kind, model, qualifier).exists():
        return None
    path = write_record(root, cfg.experiment, kind, result, model=model,
                        config=config, qualifier=qualifier)
    if model is not None and model.get("run_id"):
        carry_record(cfg, path, str(model["run_id"]))
    return path


def carry_record(cfg: Config, path: Path, run_id: str) -> str | None:
    """Log the record at ``path`` to the run that holds its model's numbers now (``run_id``,
    or the run re-created for it); returns that run, None where there is none. A store that
    does not answer costs a warning, not the record: the next report attaches it."""
    try:
        experiment_id = tracking.connect(cfg.paths, cfg.experiment)
        current = tracking.current_run_id(cfg.paths, experiment_id, run_id)
        if current is not None:
            tracking.log_artifact_to_run(cfg.paths, current, path, RECORDS_FOLDER)
        return current
    except UserError as err:
        log.warning("record %s not logged to run %s (%s): the next `multilab report` "
                    "attaches it", path, run_id, err)
        return None


def records_of_runs(cfg: Config, runs: pd.DataFrame) -> list[Record]:
    """The records the runs carry (``runs``: a ``search_runs`` table), oldest run first so
    that of two records of one model the later run's wins a tie of dates. Each is named
    ``runs:/<run id>/records/<file>`` (:func:`carrying_run` reads the run back). A run that
    carries no ``evaluate`` record (evaluated before runs carried their records, or by a
    caller of the library that writes none: ``multilab variant``) is read as the one its
    own fields make: :func:`record_of_run`."""
    if runs.empty:
        return []
    records = []
    with tempfile.TemporaryDirectory(prefix="multilab-records-") as folder:
        for _, run in runs.sort_values("end_time").iterrows():
            run_id = str(run["run_id"])
            files = tracking.run_files(cfg.paths, run_id, RECORDS_FOLDER, Path(folder, run_id))
            carried = [replace(parse_record(file), path=Path(RUNS_SCHEME, run_id,
                                                              RECORDS_FOLDER, file.name))
                       for file in files]
            records += carried
            evaluated = any(r.kind == "evaluate" and not r.data["qualifier"] for r in carried)
            if not evaluated and (record := record_of_run(cfg, run)) is not None:
                records.append(record)
    return records


def record_of_run(cfg: Config, run: pd.Series) -> Record | None:
    """The ``evaluate`` record a run's fields make (None: not a model's evaluated run): its
    model from the tags, its result from the metrics, its configuration the one its
    fingerprint stands for (the report drops a record whose fingerprint is not the current
    configuration's, and flags rows whose fingerprint it cannot check)."""
    tags = {key.removeprefix("tags."): value for key, value in run.items()
            if key.startswith("tags.") and isinstance(value, str)}
    if tags.get("evaluated") != "true" or not {"modification", "seed",
                                                "fingerprint"} <= tags.keys():
        return None
    modification, seed = tags["modification"], int(tags["seed"])
    try:
        config = record_config(cfg, modification, seed)
    except UserError:  # a modification this multilab no longer knows: no row's
        return None
    metrics = {key.removeprefix("metrics."): float(value) for key, value in run.items()
               if key.startswith("metrics.") and pd.notna(value)}
    model = {"modification": modification, "paper_id": tags.get("paper_id") or None,
             "seed": seed, "profile": tags.get("profile"), "fingerprint": tags["fingerprint"],
             "run_id": str(run["run_id"])}
    ended = pd.Timestamp(run["end_time"]).isoformat(timespec="seconds")
    data = {"schema": SCHEMA, "kind": "evaluate", "qualifier": "", "model": model,
            "config": config,
            "provenance": {"date": ended, "machine": {"device": "unknown"}},
            "result": model | {"metrics": metrics}}
    return Record(Path(RUNS_SCHEME, str(run["run_id"])), json.loads(json.dumps(data,
                                                                                 default=str)))


def carrying_run(record: Record) -> str | None:
    """The MLflow run behind a record: the run it was read from, else the run its model
    names (a committed file)."""
    parts = record.path.parts
    if len(parts) > 1 and parts[0] == RUNS_SCHEME:
        return parts[1]
    run_id = (record.model or {}).get("run_id")
    return str(run_id) if run_id else None


def committed_records(cfg: Config) -> list[Record]:
    """The records of the configuration's experiment as its commands wrote them
    (``results/<experiment>/``; a smoke run's under ``results-scratch/``: records_root)."""
    return list(iter_records(experiment_records(cfg.paths.results, cfg.profile,
                                                cfg.experiment)))
