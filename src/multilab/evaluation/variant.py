"""A variant (``params.modification``) over all seeds: train, evaluate, summarise for DVC
and on the variant's parent run in MLflow (beside the baseline's).

The same resolved configuration is never trained twice: a model is identified by its
fingerprint (modification + profile + seed + every hyper-parameter + data/vocab hashes). If
the study already holds a finished model with the same fingerprint, it is reused.
"""

from __future__ import annotations

from multilab import tracking
from multilab.config import Config
from multilab.evaluation.evaluate import curve_hook, evaluate_and_record
from multilab.files import write_json
from multilab.lab.metric_table import VARIANT_KEY, dvc_metrics, summarise
from multilab.resolve import resolve_run, row_recipe
from multilab.training.model_dir import model_fingerprint, read_done
from multilab.training.train import train_model


def run_variant(cfg: Config) -> dict:
    """Train (or reuse) and evaluate ``cfg.modification`` for every seed; write the DVC
    metrics file and return the means under their MLflow keys (the terminal's table)."""
    experiment_id = tracking.connect(cfg.paths, cfg.experiment)
    per_seed, run_ids = [], []
    for seed in cfg.seeds:
        run = resolve_run(cfg, cfg.modification, seed)
        fingerprint = model_fingerprint(run)
        study_model = run.model_dir
        done = read_done(study_model)
        if done and done["fingerprint"] == fingerprint:
            model_dir = study_model
        else:
            model_dir = cfg.paths.variant_model_dir(cfg.modification, seed)
            train_model(run, experiment_id=experiment_id, curve_hook=curve_hook(run),
                        model_dir=model_dir)
        record = evaluate_and_record(cfg, model_dir,
                                     cfg.paths.variant_eval_file(cfg.modification, seed))
        per_seed.append(record["metrics"])
        run_ids += [record["run_id"]] if record.get("run_id") else []
    stats = summarise(per_seed)
    if run_ids and stats:  # the variant's row in the MLflow UI: mean ± std, mean curves
        parent = tracking.group_run(experiment_id, run.modification,
                                    {"paper_id": run.paper_id or "", "profile": cfg.profile},
                                    params=row_recipe(cfg, run.modification))
        tracking.summarise_row(cfg.paths, parent, run_ids, stats)
        tracking.baseline_first(cfg.paths, experiment_id)
    # the DVC metrics file: the mean over seeds under the DVC keys of metrics/study/, and the
    # modification's name (`dvc metrics show` labels the row with it); the standard
    # deviations go beside the models
    write_json(cfg.paths.metrics / "variant.json",
               dvc_metrics(stats, len(per_seed)) | {VARIANT_KEY: run.modification})
    summary = {"modification": run.modification,
               **{key: mean for key, (mean, _) in stats.items()}, "n_seeds": len(per_seed)}
    write_json(cfg.paths.variant / "summary.json", {
        "modification": run.modification, "paper_id": run.paper_id,
        "seeds": list(cfg.seeds), "profile": cfg.profile,
        "mean": {key: mean for key, (mean, _) in stats.items()},
        "std": {key: std for key, (_, std) in stats.items()},
        "per_seed": dict(zip(map(str, cfg.seeds), per_seed, strict=True)),
    })
    return summary
