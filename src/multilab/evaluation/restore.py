"""A lost tracking store (``rm -rf mlruns``, a new server) costs no report: each finished study
model's run is re-created from what the model directory and the evaluation stage left on disk.

``multilab report`` calls :func:`restore_lost_runs` before it reads the store, so one command
re-creates the runs and the report. A run is re-created only for a model whose
``multilab.json`` names a run the store holds neither itself nor as a re-created run
(``multilab.sys.restored_from``), and only from an evaluation JSON of the same fingerprint:
numbers of another model never enter its run. Nothing is recomputed.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from multilab import tracking
from multilab.config import Config
from multilab.resolve import resolve_run
from multilab.training.model_dir import read_done

log = logging.getLogger(__name__)


def _result_of(path: Path, fingerprint: str) -> dict | None:
    """The JSON at ``path`` when it is a readable result of the model ``fingerprint`` whose
    metrics are all finite numbers; None otherwise (missing, damaged, another model's)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(record, dict) or record.get("fingerprint") != fingerprint:
        return None
    metrics = record.get("metrics")
    if not isinstance(metrics, dict) or not all(
            isinstance(v, int | float) and math.isfinite(v) for v in metrics.values()):
        return None
    return record


def restore_lost_runs(cfg: Config) -> list[str]:
    """Re-create the run of every finished model of ``cfg.study`` × ``cfg.seeds`` that the
    store lost, with its evaluation (and downstream results, when their JSON is there);
    returns the new run ids. A model without a matching evaluation JSON is named in a
    warning (``multilab evaluate <dir>`` restores it by evaluating again)."""
    experiment_id = tracking.connect(cfg.paths, cfg.experiment)
    restored = []
    for entry in cfg.study:
        for seed in cfg.seeds:
            run = resolve_run(cfg, entry, seed)
            model_dir = run.model_dir
            done = read_done(model_dir, damaged_ok=True)
            if done is None or not done.get("run_id"):
                continue
            if tracking.current_run_id(cfg.paths, experiment_id, done["run_id"]) is not None:
                continue
            evaluation = _result_of(cfg.paths.eval_file(run.modification, seed),
                                    done["fingerprint"])
            if evaluation is None:
                log.warning("the run of %s is not in the tracking store and %s holds no "
                            "evaluation of it: `multilab evaluate %s` re-creates it", model_dir,
                            cfg.paths.eval_file(run.modification, seed), model_dir)
                continue
            # here, not at the top: they import torch and transformers, which a report
            # whose store lost nothing (nearly every one) never needs
            from multilab.evaluation.downstream import (
                LANGUAGES_TAG,
                TASK_TAG,
                TIMINGS,
                downstream_path,
            )
            from multilab.evaluation.evaluate import _model_run, record_in_mlflow

            run_id = _model_run(cfg, run, done, model_dir, experiment_id)
            step = done.get("steps", 0)
            record_in_mlflow(cfg, run_id, model_dir, evaluation["metrics"], step)
            for mds in (False, True):
                downstream = _result_of(downstream_path(cfg, run, mds), done["fingerprint"])
                if downstream is not None:
                    tracking.log_final_metrics(cfg.paths, run_id, downstream["metrics"], step,
                                               once=TIMINGS)
                    tracking.set_tags(cfg.paths, run_id, {
                        LANGUAGES_TAG: ",".join(downstream.get("labels", [])),
                        TASK_TAG: downstream.get("task", "")})
            restored.append(run_id)
    return restored
