"""The only package that talks to MLflow; every other room reads it as ``tracking.<name>``.

By concern: ``store`` (where the store is, whether it answers), ``runs`` (a run's life and
its parent), ``orphans`` (runs whose process died), ``log`` (what a run records),
``queries`` (what the store holds), ``rows`` (what a row's parent shows: mean ± std, mean
curves, the baseline first) and ``colors`` (each row's colour in the UI).
"""

from multilab.tracking.colors import BASELINE, RUN_COLOR_TAG
from multilab.tracking.log import (
    file_digest,
    log_artifact,
    log_artifact_to_run,
    log_datasets,
    log_final_metrics,
    log_metrics,
    log_model,
    log_params,
    log_step_rows,
    log_to_run,
    set_tags,
)
from multilab.tracking.orphans import (
    HOST_TAG,
    ORPHAN_TAG,
    PID_TAG,
    PROCESS_START_TAG,
    end_orphaned_runs,
    process_tags,
)
from multilab.tracking.queries import (
    logged_model,
    metric_history,
    run_files,
    runs_of,
    search_runs,
)
from multilab.tracking.rows import STD_SUFFIX, baseline_first, summarise_row, summarise_study_row
from multilab.tracking.runs import (
    FAILED,
    FINISHED,
    GIT_COMMIT_TAG,
    GROUP,
    KILLED,
    PARENT_TAG,
    RESTORED_TAG,
    ROLE_TAG,
    ROW_TAG,
    RUNNING,
    SYS,
    current_run_id,
    git_commit,
    group_run,
    held_runs,
    parent_tags,
    restore_run,
    run,
    run_exists,
    source_tags,
)
from multilab.tracking.store import (
    EXPERIMENT_KIND_TAG,
    HTTP_SETTINGS,
    MODEL_TRAINING,
    URI_VARIABLE,
    check_server,
    connect,
    project_root,
    similarity_experiment,
    spaces_experiment,
    tracking_uri,
    word_order_experiment,
)

__all__ = [  # the public names every room reads as tracking.<name>
    "BASELINE", "EXPERIMENT_KIND_TAG", "FAILED", "FINISHED", "GIT_COMMIT_TAG", "GROUP", "HOST_TAG",
    "HTTP_SETTINGS", "KILLED", "MODEL_TRAINING", "ORPHAN_TAG", "PARENT_TAG", "PID_TAG",
    "PROCESS_START_TAG", "RESTORED_TAG", "ROLE_TAG", "ROW_TAG", "RUNNING", "RUN_COLOR_TAG",
    "STD_SUFFIX", "SYS", "URI_VARIABLE", "baseline_first", "check_server", "connect",
    "current_run_id", "end_orphaned_runs", "file_digest", "git_commit", "group_run", "held_runs",
    "log_artifact", "log_artifact_to_run", "log_datasets", "log_final_metrics", "log_metrics",
    "log_model", "log_params", "log_step_rows", "log_to_run", "logged_model", "metric_history",
    "parent_tags", "process_tags", "project_root", "restore_run", "run", "run_exists", "run_files",
    "runs_of",
    "search_runs", "set_tags", "similarity_experiment", "source_tags", "spaces_experiment",
    "summarise_row", "summarise_study_row", "tracking_uri", "word_order_experiment",
]
