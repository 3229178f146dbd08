"""``multilab study run NAME --queue``: a study's missing runs as a DVC experiment queue.

On a GPU server the engine is DVC's own queue (``dvc queue start -j N`` runs N experiments at
once), not our loop: each missing (row, seed) becomes one queued ``dvc exp run``. Its ``-S``
overrides are the ``--set`` values the loop runs the row with (:func:`~multilab.studies.settings.
study_settings`: profile, languages, vocabulary, the study's and the row's settings, the
study's MLflow experiment, its artifacts folder), the row's modification as the pipeline's one
``study`` entry, the seed as its one seed, and ``rows`` naming the row (its MLflow parent).
A section's setting is written at the top of params.yaml and in the profile's part, which
wins over the top (as ``--set`` wins over the profile in the loop). Its targets are the stages
that write the records the (row, seed) lacks: ``evaluate``, and
``downstream`` (fine-tuned on the row's first language). What dvc.yaml has no stage for
(``mrr``, ``translate``, ``downstream --mds``, fine-tuning on another language) is refused
before anything is queued: the loop (``study run`` without ``--queue``) runs those.

A queued experiment runs in a copy of the project (``.dvc/tmp/exps/``): the artifacts folder
is given relative to it; the records go to the project's own ``results/`` (absolute), as the
MLflow runs go to its store, so that ``study report`` reads them once the queue is done.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from multilab.errors import UserError
from multilab.files import parse_yaml
from multilab.lab import modifications as mods
from multilab.params_guard import hydra_value
from multilab.studies.runner import Step, row_setting
from multilab.studies.settings import study_settings
from multilab.studies.spec import Study
from multilab.studies.tables import row_languages

#: the dvc.yaml stage that writes a record (kind, variant), where there is one
STAGES = {("evaluate", ""): "evaluate", ("downstream", ""): "downstream"}
#: ``dvc queue status`` states of an experiment that will still run
WAITING = ("Queued", "Running")
#: the sections whose profile part (``profiles.<profile>.<section>``) dvc.yaml's stages track
PROFILE_TRACKED = ("corpus", "vocab", "train", "models", "evaluate", "spaces", "downstream",
                   "word_order")
#: dotted keys that are no section's: read from the top of params.yaml only
TOP_LEVEL_SECTIONS = ("paths", "corpora", "rows")


def unqueueable(study: Study, step: Step) -> str | None:
    """Why dvc.yaml cannot run ``step`` (None: it can)."""
    languages = row_languages(study, step.row).split(",")
    for kind, variant in step.needs or (("evaluate", ""),):
        if (kind, variant) not in STAGES:
            command = "downstream --mds" if kind == "downstream" else f"{kind} {variant}"
            return f"its `multilab {command}` record has no stage in dvc.yaml"
        fine_tune = step.row.fine_tune or study.fine_tune
        if kind == "downstream" and fine_tune not in (None, languages[0]):
            return (f"its downstream record is fine-tuned on {fine_tune}; dvc.yaml's downstream "
                    f"stage fine-tunes on the first language, {languages[0]}")
    return None


def experiment_name(study: Study, step: Step) -> str:
    """The queued experiment's name (a git ref): ``<study>-<row>-s<seed>``."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", f"{study.name}-{step.row.label}-s{step.seed}")


def overrides(study: Study, step: Step, results: Path, extra: Sequence[str] = ()
              ) -> list[str]:
    """The ``-S`` values of ``step``'s experiment (``++``: set, or add a key params.yaml
    leaves out, such as ``vocab.mode``): ``extra`` (the user's ``--set`` values), then the
    study's, as the loop gives them, each where :func:`_placed` puts it."""
    values = dict(text.split("=", 1) for text in (
        *extra, *study_settings(study, Path(), step.row), row_setting([step.row])))
    values |= {"study": f"[{mods.slug(step.row.modification)}]", "seeds": f"[{step.seed}]",
               "paths.results": str(results)}
    parsed = {key: parse_yaml(text) for key, text in values.items()}
    return [f"++{place}={hydra_value(value)}" for key, value in parsed.items()
            for place in _placed(key, value, parsed["profile"])]


def _placed(key: str, value: Any, profile: str) -> list[str]:
    """Where ``-S`` writes a setting. A top-level key (``profile``, ``languages``,
    ``paths.*``) at the top. A section's key (``train.epochs``) at the top and in the
    profile's part (``profiles.<profile>.train.epochs``), both of which its stage tracks; the
    profile's wins over the top as ``--set`` wins over the profile in the loop: written at
    the top alone, a value the profile sets too would be lost (and ``multilab check
    --stage`` refuses it). An empty list only in the profile's part: DVC's YAML writer
    corrupts params.yaml when it writes one over a block list with a comment beside its key
    (``eval_points: # …``); a stage that does not track the profile's part of its section is
    refused."""
    if "." not in key or key.split(".")[0] in TOP_LEVEL_SECTIONS:
        return [key]
    if value != []:
        return [key, f"profiles.{profile}.{key}"]
    if key.split(".")[0] not in PROFILE_TRACKED:
        raise UserError(f"--queue: setting {key} = []: `dvc exp run -S` cannot write an empty "
                        "list there (DVC's YAML writer corrupts params.yaml); run the study "
                        "without --queue")
    return [f"profiles.{profile}.{key}"]


def check_queueable(study: Study, steps: Sequence[Step],
                    check: Callable[[list[str]], None]) -> None:
    """Every step has a stage for each record it lacks, and its settings pass ``check``
    (as ``--set`` values): one line naming the first that does not. Called for every study
    before :func:`queue_study` queues anything."""
    for step in steps:
        reason = unqueueable(study, step)
        if reason:
            raise UserError(f"--queue: row {step.row.label!r} of {study.name} (seed "
                            f"{step.seed}): {reason}; run it without --queue")
        check([*study_settings(study, Path(), step.row), row_setting([step.row]),
               f"seeds=[{step.seed}]"])
        overrides(study, step, Path())  # a value `-S` cannot write: one line


def queue_study(study: Study, steps: Sequence[Step], results: Path, extra: Sequence[str] = (),
                say: Callable[[str], None] = print,
                dvc: Callable[[list[str]], str] | None = None) -> list[str]:
    """Queue ``steps`` (checked by :func:`check_queueable`) as DVC experiments, with the
    user's ``--set`` values ``extra``; returns the names queued. A step already waiting in
    the queue (by its name) is not queued twice."""
    dvc = dvc or run_dvc
    waiting = _waiting(dvc(["queue", "status"])) if steps else set()
    queued = []
    for step in steps:
        name = experiment_name(study, step)
        if name in waiting:
            say(f"study {study.name}: {step.row.label} seed {step.seed} is in the queue "
                f"already ({name})")
            continue
        targets = list(dict.fromkeys(STAGES[need] for need in step.needs or (("evaluate", ""),)))
        dvc(["exp", "run", "--queue", "--name", name,
             *(a for value in overrides(study, step, results, extra) for a in ("-S", value)),
             *targets])
        say(f"queued {name}: {step.row.label} seed {step.seed} ({', '.join(targets)})")
        queued.append(name)
    return queued


def _waiting(status: str) -> set[str]:
    """The names ``dvc queue status`` lists as queued or running."""
    return {parts[1] for parts in (line.split() for line in status.splitlines())
            if len(parts) >= 3 and parts[-1] in WAITING}


def run_dvc(argv: list[str]) -> str:
    """``dvc argv`` of this Python's DVC, in the current directory; its output, or one line
    with DVC's own last line when it fails."""
    done = subprocess.run([sys.executable, "-m", "dvc", *argv], capture_output=True, text=True)
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines() or ["no message"]
        raise UserError(f"`dvc {' '.join(argv[:3])} …` failed: {said[-1]}")
    return done.stdout
