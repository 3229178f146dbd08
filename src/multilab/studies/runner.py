"""``multilab study run``: train and measure what a study still lacks, nothing else.

The plan is computed from the records: a (row, seed) with every record its metrics read
(``evaluate``; ``downstream``, ``downstream --mds``, ``mrr``, ``translate`` of a language
pair) is done. Each missing one runs the ordinary commands — ``corpus build`` and ``vocab``
once per study, ``spaces`` when a row needs the knn table, then ``train`` and the measuring
commands whose records are missing — so
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
from multilab.studies.tables import MODEL_LESS, collect, row_languages, row_sources

Command = Callable[[list[str]], int]


@dataclass(frozen=True)
class Step:
    row: Row
    seed: int
    # the (kind, variant) records this (row, seed) lacks; empty: the evaluate record
    needs: tuple[tuple[str, str], ...] = ()


def missing_runs(study: Study, records: Iterable[Record], seeds: Sequence[int] | None = None,
                 rows: Sequence[str] | None = None) -> list[Step]:
    """The (row, seed) pairs lacking a record their metrics read, in the spec's order.
    Static rows (``multilab static``) and similarity records (two models) are not run
    here."""
    chosen = collect(study, list(records))
    wanted_seeds = tuple(seeds) if seeds else study.seeds
    unknown = [label for label in rows or () if study.row(label) is None]
    if unknown:
        raise UserError(f"--rows {unknown[0]!r}: rows of {study.name} are "
                        f"{', '.join(row.label for row in study.rows)}")
    steps = []
    for row in study.rows:
        if (rows and row.label not in rows) or row.static:
            continue
        sources = [key for key in row_sources(study, row) if key[0] not in MODEL_LESS]
        for seed in wanted_seeds:
            needs = tuple(key for key in sources if (row.label, seed, *key) not in chosen)
            if needs:
                steps.append(Step(row, seed, needs))
    return steps


def measure_commands(study: Study, step: Step, model_dir: Path) -> list[list[str]]:
    """The commands that write the records ``step`` lacks, in order: ``evaluate``, then
    ``downstream`` (fine-tuned on the row's ``fine_tune`` edition, the row's languages
    after it; ``--mds`` for the shifted variant), ``mrr`` and ``translate`` per pair."""
    languages = [part for part in row_languages(study, step.row).split(",") if part]
    first = step.row.fine_tune or study.fine_tune or languages[0]
    order = ",".join([first, *(code for code in languages if code != first)])
    commands = []
    for kind, variant in step.needs or (("evaluate", ""),):
        if kind == "evaluate":
            commands.append(["evaluate", str(model_dir)])
        elif kind == "downstream":
            commands.append(["downstream", str(model_dir), "--languages", order,
                             *(["--mds"] if variant == "mds" else [])])
        elif kind in ("mrr", "translate"):
            source, _, target = variant.partition("-")
            commands.append([kind, str(model_dir), "--source", source, "--target", target])
    return commands


#: settings that change what a row's corpora or vocabulary are: a row overriding one gets
#: its own artifacts folder (its own corpora, vocabulary and models)
_DATA_KEYS = ("languages",)
_DATA_PREFIXES = ("corpus.", "vocab.", "corpora")


def _own_data(row: Row | None) -> bool:
    return row is not None and any(key in _DATA_KEYS or key.startswith(_DATA_PREFIXES)
                                   for key in row.settings)


def study_artifacts(study: Study, root: Path, row: Row | None = None) -> Path:
    """Where a study's corpora, vocabulary and models live: ``artifacts/studies/<name>/``,
    and a subfolder per row whose settings change the languages, corpus or vocabulary."""
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
            for argv in measure_commands(study, step, model_dir):
                run(settings, *argv)
        finally:
            if results is not None:
                ledger.release(results, study.name, step.row.label, step.seed)
