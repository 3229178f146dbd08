"""A committed record → its MLflow run: a lost tracking store (``rm -rf mlruns``, a new server)
costs no report, and a run evaluated before runs carried their records gets its copy.

``multilab report`` calls :func:`import_records` before it reads the store. For every
committed ``evaluate`` record of a model of ``study`` × ``seeds`` (profile the configuration's):
when the store holds neither the run the record names nor a run re-created for it
(``multilab.sys.restored_from``) and the model was trained here (its directory's
``multilab.json`` names that run: a fresh clone's records of models trained elsewhere stay
out of its store), the run is re-created from the record — its tags (the
model's identity), params (the record's configuration), final metrics (its result, and those
of the model's downstream records) — and the loss curve of the model directory's
``train_log.csv`` where that is at hand (a record keeps no per-step loss); then every record of
that model the run does not carry yet is logged to it (:mod:`multilab.studies.run_records`).
Nothing is recomputed, and numbers of another model never enter a run: a record names its
model.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence

from multilab import tracking
from multilab.config import Config
from multilab.lab.metric_table import EVALUATION_FACTS, TRAIN_LOSS
from multilab.lab.modifications import same_modification
from multilab.resolve import resolve_run
from multilab.studies.records import Record
from multilab.studies.run_records import RECORDS_FOLDER
from multilab.training.model_dir import TRAIN_LOG, read_done
from multilab.training.run_tracking import seed_run_name


def import_records(cfg: Config, records: Sequence[Record]) -> list[str]:
    """Give the runs of the default study's models their committed ``records``, re-creating
    a run the store lost; returns the ids of the runs re-created."""
    experiment_id = tracking.connect(cfg.paths, cfg.experiment)
    restored = []
    for record in records:
        model = record.model
        if record.kind != "evaluate" or record.data["qualifier"] or model is None or \
                not model.get("run_id") or not _studied(cfg, model):
            continue
        mine = [r for r in records if r.path.parent == record.path.parent]
        run_id = tracking.current_run_id(cfg.paths, experiment_id, str(model["run_id"]))
        if run_id is None:
            if not _trained_here(cfg, model):
                continue  # another workspace's model: its run was never this store's
            run_id = recreate_run(cfg, experiment_id, record, mine)
            restored.append(run_id)
        carried = {path.name for path in tracking.run_files(cfg.paths, run_id, RECORDS_FOLDER)}
        for other in mine:
            if other.path.name not in carried:
                tracking.log_artifact_to_run(cfg.paths, run_id, other.path, RECORDS_FOLDER)
    return restored


def _trained_here(cfg: Config, model: dict) -> bool:
    """Whether the record's model was trained in this workspace: its model directory's
    ``multilab.json`` names the record's run (a store lost its run), not a fresh clone's
    committed record of a model trained elsewhere (whose run no store here ever held)."""
    model_dir = resolve_run(cfg, str(model["modification"]), int(model["seed"])).model_dir
    done = read_done(model_dir, damaged_ok=True)
    return done is not None and done.get("run_id") == model["run_id"]


def _studied(cfg: Config, model: dict) -> bool:
    """Whether a record's model is one of the default study's (entry, seed, profile)."""
    return model.get("profile") == cfg.profile and model.get("seed") in cfg.seeds and any(
        same_modification(str(model["modification"]), entry) for entry in cfg.study)


def recreate_run(cfg: Config, experiment_id: str, evaluation: Record,
                 records: Sequence[Record]) -> str:
    """The FINISHED run standing in for the one ``evaluation`` (an ``evaluate`` record) names,
    from it and the other ``records`` of its model (its downstream results), nested under
    its modification's parent as training nests it."""
    model = evaluation.model or {}
    modification, seed = str(model["modification"]), int(model["seed"])
    tags = {"modification": modification, "seed": seed, "paper_id": model.get("paper_id") or "",
            "profile": model.get("profile") or cfg.profile, "fingerprint": model["fingerprint"],
            "study": cfg.experiment}
    row = cfg.row_of(modification)
    parent = tracking.group_run(experiment_id, modification,
                                {"paper_id": tags["paper_id"], "profile": tags["profile"]},
                                row=row)
    tags |= tracking.parent_tags(parent) | ({tracking.ROW_TAG: row} if row else {})
    measured = evaluation.data["result"].get("metrics", {})
    metrics = {key: value for key, value in measured.items() if key not in EVALUATION_FACTS}
    tags |= {"evaluated": "true", "eval_sentences": f"{measured.get('eval_sentences', 0):.0f}",
             tracking.SYS + "eval_seconds": f"{measured.get('eval_seconds', 0):.1f}"}
    for downstream in (r for r in records if r.kind == "downstream"):
        # here, not at the top: it imports torch, which nearly every report never needs
        from multilab.evaluation.downstream import LANGUAGES_TAG, TASK_TAG

        result = downstream.data["result"]
        metrics |= {key: value for key, value in result.get("metrics", {}).items()
                    if isinstance(value, int | float)}
        tags |= {LANGUAGES_TAG: ",".join(result.get("labels", [])),
                 TASK_TAG: result.get("task", "")}
    run = resolve_run(cfg, modification, seed)
    log_file = run.model_dir / TRAIN_LOG
    steps = []
    if log_file.is_file():
        with log_file.open(encoding="utf-8") as handle:
            steps = [{k: float(v) for k, v in line.items()} for line in csv.DictReader(handle)]
    return tracking.restore_run(
        experiment_id, str(model["run_id"]), name=seed_run_name(run), tags=tags,
        params=evaluation.data["config"], metrics=metrics,
        step_rows=[step for step in steps if "step" in step],
        step_keys={TRAIN_LOSS: "loss"}, artifact=log_file if log_file.is_file() else None)
