"""``multilab study run``: train and evaluate what a study still lacks, nothing else.

The plan is computed from the records: a (row, seed) with a matching ``evaluate`` record is
done. Each missing one runs the ordinary commands — ``corpus build`` and ``vocab`` once per
study, ``spaces`` when a row needs the knn table, then ``train`` and ``evaluate`` — so
fingerprints, checkpoints, resume after a kill, MLflow runs and records work exactly as they
do for ``dvc repro``: a model whose fingerprint exists is not trained again, a killed run
resumes from its last checkpoint when the same command is given again. A study's corpora,
vocabulary and models live in ``artifacts/studies/<name>/`` so that studies of other languages
never share (or overwrite) the default study's.

The commands are passed in as a function (the command line's own ``main``), so this module
stays below the command line in the import structure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from multilab.errors import UserError
from multilab.lab import modifications as mods
from multilab.studies import ledger
from multilab.studies.records import Record, safe_name
from multilab.studies.spec import Row, Study
from multilab.studies.tables import collect

Command = Callable[[list[str]], int]


@dataclass(frozen=True)
class Step:
    row: Row
    seed: int


def missing_runs(study: Study, records: Iterable[Record], seeds: Sequence[int] | None = None,
                 rows: Sequence[str] | None = None) -> list[Step]:
    """The (row, seed) pairs without an evaluate record, in the spec's order."""
    chosen = collect(study, list(records))
    wanted_seeds = tuple(seeds) if seeds else study.seeds
    unknown = [label for label in rows or () if study.row(label) is None]
    if unknown:
        raise UserError(f"--rows {unknown[0]!r}: rows of {study.name} are "
                        f"{', '.join(row.label for row in study.rows)}")
    return [Step(row, seed) for row in study.rows if not rows or row.label in rows
            for seed in wanted_seeds if (row.label, seed, "evaluate") not in chosen]


def _own_data(row: Row | None) -> bool:
    """A row with settings of its own gets its own artifacts folder: they may change its
    corpora or vocabulary (``languages``, ``corpus.*``, ``vocab.*``), and even when they only
    change the model (``models.small.hidden_size``, ``train.epochs``: issue 55's sweep), two
    rows of one modification and seed would otherwise share one model folder, each run
    retraining over the other's model (and two runners clashing in it)."""
    return row is not None and bool(row.settings)


def study_artifacts(study: Study, root: Path, row: Row | None = None) -> Path:
    """Where a study's corpora, vocabulary and models live: ``artifacts/studies/<name>/``,
    and a subfolder per row that has settings of its own."""
    base = root / "artifacts" / "studies" / study.name
    return base / f"row-{safe_name(row.label)}" if row is not None and _own_data(row) else base


def study_settings(study: Study, root: Path, row: Row | None = None) -> list[str]:
    """The ``--set`` values every command of the study runs with (for ``row``: with the
    row's settings, its ``languages`` winning over the study's)."""
    base = study_artifacts(study, root, row)
    values = {"profile": study.profile,
              "languages": "[" + ", ".join(study.languages) + "]",
              "paths.artifacts": base, "paths.metrics": base / "metrics",
              "paths.reports": base / "reports", "study": "[original]", "seeds": "[0]",
              **study.settings, **(row.settings if row is not None else {})}
    return [f"{key}={value}" for key, value in values.items()]


def run_study(study: Study, steps: Sequence[Step], command: Command, root: Path,
              say: Callable[[str], None] = print, results: Path | None = None) -> None:
    """Run ``steps`` through ``command`` (``multilab``'s main); stop at the first failure.
    Corpora and vocabulary are built once per artifacts folder (the study's, or a row's own
    where its settings change the languages, corpus or vocabulary), under a lock, so that
    two runners of one study can share its work. With ``results``, each run is booked in
    the run ledger there first (:mod:`multilab.studies.ledger`) and skipped when another
    live runner holds it."""

    def run(settings: list[str], *argv: str) -> None:
        args = [f"--set={value}" for value in settings] + list(argv)
        if command(args) != 0:
            raise UserError(f"study {study.name}: `multilab {' '.join(argv)}` failed (its "
                            "message is above); fix it and run `multilab study run "
                            f"{study.name}` again: finished runs are kept")

    prepared: set[Path] = set()
    for number, step in enumerate(steps, 1):
        if results is not None:
            held = ledger.book(results, study.name, step.row.label, step.seed)
            if held is not None:
                say(f"study {study.name}: {step.row.label} seed {step.seed} skipped: under "
                    f"way by {held.by} since {held.since} (results/{ledger.LEDGER})")
                continue
        try:
            settings = study_settings(study, root, step.row)
            artifacts = study_artifacts(study, root, step.row)
            if artifacts not in prepared:
                artifacts.mkdir(parents=True, exist_ok=True)
                with FileLock(artifacts / ".prepare.lock"):  # a second runner waits here
                    if not (artifacts / "corpora" / "train.txt").is_file():
                        say(f"study {study.name}: building its corpora"
                            + (f" (row {step.row.label})" if _own_data(step.row) else ""))
                        run(settings, "corpus", "build")
                    if not (artifacts / "vocab").is_dir():
                        run(settings, "vocab")
                prepared.add(artifacts)
            needs_knn = mods.resolve_recipe(step.row.modification).needs_knn
            if needs_knn:
                with FileLock(artifacts / ".prepare.lock"):
                    if not (artifacts / "spaces" / "knn.pt").is_file():
                        run(settings, "spaces")
            say(f"study {study.name}: {step.row.label} seed {step.seed} "
                f"({number}/{len(steps)})")
            run(settings, "train", "--modification", step.row.modification, "--seed",
                str(step.seed))
            model_dir = artifacts / "models" / mods.slug(step.row.modification) / \
                f"seed{step.seed}"
            run(settings, "evaluate", str(model_dir))
        finally:
            if results is not None:
                ledger.release(results, study.name, step.row.label, step.seed)
