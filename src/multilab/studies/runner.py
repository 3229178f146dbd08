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

MLflow: a study's runs land in an experiment of their own, named after the study
(``experiment`` = its name; a spec's ``settings`` may name another). A study's rows may share
a modification (13 ``original`` rows of the real-regime sweep) and its models are its own
(``artifacts/studies/<name>/``), so the default experiment's one parent per modification
would mix rows, studies and ``dvc repro``'s models; in the study's experiment each row has a
parent run of its own (``rows`` = {modification: row label}, :func:`row_setting`), its seeds
nested, and the experiment reads as the study's table in the UI. ``evaluate`` puts the mean
± std of the row's seeds on the parent (:func:`multilab.tracking.summarise_study_row`).

The commands are passed in as a function (the command line's own ``main``), so this module
stays below the command line in the import structure. Where they run is the caller's choice:
here, one after another, or each (row, seed) as a task on a Ray cluster (a ``dispatch``:
:mod:`multilab.studies.ray_executor`), which runs the same commands (:class:`StepRun`).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from filelock import FileLock

from multilab import devices, stops
from multilab.errors import UserError
from multilab.lab import modifications as mods
from multilab.studies import ledger
from multilab.studies.metrics import MINUS
from multilab.studies.records import Record, records_root
from multilab.studies.settings import own_data, study_artifacts, study_settings
from multilab.studies.spec import Row, Study
from multilab.studies.tables import (
    DEFAULT_PARAMS,
    MODEL_LESS,
    collect,
    row_languages,
    row_sources,
)

Command = Callable[[list[str]], int]
STATIC = "static"  # the record kind (and metric head) of ``multilab static``
#: (the study's ``--set`` values for a row, modification, seed) → the fingerprint ``train``
#: would give that model here (the command line's: it knows ``--params`` and ``--set``)
FingerprintOf = Callable[[list[str], str, int], str]


@dataclass(frozen=True)
class Step:
    row: Row
    seed: int
    # the (kind, variant) records this (row, seed) lacks; empty: the evaluate record
    needs: tuple[tuple[str, str], ...] = ()
    # fingerprints of the models the row's records at this seed measure (any study's): a
    # finished model of one of them, wherever it lies, need not be trained again
    fingerprints: tuple[str, ...] = ()


@dataclass(frozen=True)
class StepRun:
    """One (row, seed)'s work once its data is prepared: the ``multilab`` argument lists that
    train it and write its records, in order. What an executor dispatches (the local loop
    here, or :mod:`multilab.studies.ray_executor`): the same commands either way, so the
    records, fingerprints and checkpoints are the same."""

    study: str
    step: Step
    title: str  # "study NAME: ROW seed S (n/N)", as the runner says it
    commands: tuple[tuple[str, ...], ...]


def failure_line(study: str, shown: str, code: int) -> str:
    """The one line a failed command of a study's run is reported by (any executor)."""
    return (f"study {study}: `{shown}` failed (exit {code}; its message is above); fix it "
            f"and run `multilab study run {study}` again: finished runs are kept")


def shown_command(args: Sequence[str]) -> str:
    """``multilab <command>`` as a failure names it: without the ``--set`` values."""
    return "multilab " + " ".join(arg for arg in args if not arg.startswith("--set="))


#: Runs prepared :class:`StepRun` s elsewhere (a Ray cluster); raises on a failed one once the
#: others are done
Dispatch = Callable[[Sequence[StepRun]], None]


def missing_runs(study: Study, records: Iterable[Record], seeds: Sequence[int] | None = None,
                 rows: Sequence[str] | None = None, params: Path = DEFAULT_PARAMS,
                 overrides: Sequence[str] = (), again: bool = False) -> list[Step]:
    """The (row, seed) pairs lacking a record their metrics read, in the spec's order (the
    rows resolved from ``params`` and ``overrides``, as the runs will be: :func:`collect`).
    A static row's (row, seed) lacks its ``multilab static`` record (:func:`static_command`);
    similarity records (two models) are run only where the row names the ``script`` that
    writes them. ``again``: every picked
    pair with all its records, for records that predate a metric (position embeddings, MRR
    by part of speech: measured anew; curve points: a model trained anew, unless its model
    still lies on disk, which is then only measured)."""
    wanted_seeds = tuple(seeds) if seeds else study.seeds
    picked = pick_rows(study, rows)
    chosen = collect(study, list(records), params, overrides)
    steps = []
    for row in picked:
        sources = [key for key in row_sources(study, row)  # a script writes any kind
                   if row.script is not None or key[0] not in MODEL_LESS
                   or (row.static and key[0] == STATIC)]
        for seed in (seed for seed in wanted_seeds if seed in study.seeds_of(row)):
            if again:
                steps.append(Step(row, seed, tuple(sources), _fingerprints(chosen, row, seed)))
                continue
            needs = tuple(key for key in sources if (row.label, seed, *key) not in chosen)
            if needs:
                steps.append(Step(row, seed, needs, _fingerprints(chosen, row, seed)))
    return steps


def pick_rows(study: Study, rows: Sequence[str] | None) -> list[Row]:
    """The study's rows named by ``--rows`` (labels or the table's IDs), in the spec's order;
    all without it. An unknown name: one line naming the rows and IDs."""
    unknown = [label for label in rows or () if study.row(label) is None]
    if unknown:
        ids = [row.paper_id for row in study.rows if row.paper_id is not None]
        raise UserError(f"--rows {unknown[0]!r}: rows of {study.name} are "
                        f"{', '.join(row.label for row in study.rows)}"
                        + (f" (or their IDs {', '.join(ids)})" if ids else ""))
    wanted = {study.row(name).label for name in rows or ()}  # an ID names its row's label
    return [row for row in study.rows if not wanted or row.label in wanted]


def _fingerprints(chosen: Mapping[tuple[str, int, str, str], Record], row: Row,
                  seed: int) -> tuple[str, ...]:
    """The model fingerprints of the records chosen for (row, seed), newest record first."""
    found = [record for (label, at, _, _), record in chosen.items()
             if label == row.label and at == seed and record.model]
    found.sort(key=lambda record: str(record.data["provenance"].get("date", "")), reverse=True)
    return tuple(dict.fromkeys(str(record.model["fingerprint"]) for record in found
                               if record.model.get("fingerprint")))


def study_model_dir(study: Study, root: Path, step: Step) -> Path:
    """Where the study trains ``step``'s model."""
    return study_artifacts(study, root, step.row) / "models" / \
        mods.slug(step.row.modification) / f"seed{step.seed}"


def trained_elsewhere(step: Step, root: Path, own: Path, device: str | None = None
                      ) -> Path | None:
    """A finished model of ``step``'s row and seed in another folder under ``root /
    "artifacts"`` (another study's, or ``dvc repro``'s): its done file names one of the
    fingerprints the row's records measure and its weights are the ones it recorded; with
    ``device`` (the row's: :meth:`Study.device_of`), its done file names that kind of
    device too (a model trained before done files named one is not reused then).

    Studies share models: Liu et al. 2020b Table 2 shifts the model its Table 4 fine-tunes,
    Dufter & Schütze 2020 Table 3 reads it too. A study's models live in its own folder, so
    without this each study would train the same model again (≈ 50 CPU-minutes each)."""
    from multilab.training.model_dir import check_weights, read_done  # torch-free, but late

    if not step.fingerprints:
        return None
    tail = Path(mods.slug(step.row.modification)) / f"seed{step.seed}"
    artifacts = root / "artifacts"
    candidates = [artifacts / "models" / tail,
                  *sorted(artifacts.glob(f"studies/*/models/{tail.as_posix()}")),
                  *sorted(artifacts.glob(f"studies/*/row-*/models/{tail.as_posix()}"))]
    for folder in candidates:
        if folder.resolve() == own.resolve() or not folder.is_dir():
            continue
        done = read_done(folder, damaged_ok=True)
        if done is None or str(done.get("fingerprint")) not in step.fingerprints:
            continue
        if device is not None and done.get("device") != device:
            continue  # another device's model: its records would not be the row's
        try:
            check_weights(folder, done)
        except UserError:
            continue  # damaged: not a model to measure
        return folder
    return None


def check_device(study: Study, steps: Sequence[Step]) -> None:
    """Refuse, before anything runs, steps of a row that reads one kind of device (its
    ``device``) on a machine that would train on another: their records would not count."""
    wanted = {kind for step in steps if (kind := study.device_of(step.row)) is not None}
    if not wanted:
        return
    here = devices.visible_device_kind()
    wrong = next((step for step in steps if study.device_of(step.row) not in (None, here)),
                 None)
    if wrong is None:
        return
    kind = study.device_of(wrong.row)
    how = ("hide the GPU: CUDA_VISIBLE_DEVICES= multilab study run …" if kind == "cpu" else
           "run it where a GPU is visible")
    raise UserError(f"study {study.name}: row {wrong.row.label} reads records of the {kind} "
                    f"only (its `device`), and this machine would train on the {here}; {how}")


def check_model_device(study: Study, step: Step, model_dir: Path) -> None:
    """A finished model in ``step``'s own folder that names another kind of device than its
    row reads (``device``) is not measured as the row's: one line, the folder left as it is
    (a model is never deleted for the user). A done file naming no device (older) passes."""
    from multilab.training.model_dir import read_done  # torch-free, but late

    kind = study.device_of(step.row)
    done = read_done(model_dir, damaged_ok=True) if kind is not None else None
    trained = done.get("device") if done else None
    if trained and trained != kind:
        raise UserError(f"study {study.name}: {model_dir} holds a model of {step.row.label} "
                        f"seed {step.seed} trained on the {trained}, and the row reads the "
                        f"{kind} only (its `device`): move the folder aside (e.g. to "
                        f"{model_dir.name}-{trained}) and run again")


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


def static_command(study: Study, row: Row, seed: int) -> list[str]:
    """``multilab static`` for a static row at ``seed``: the models, windows and train rows
    the study's ``static.<model>.w<window>.r<rows>.…`` metrics name (one record holds the
    whole grid), between the row's pair (``pair``; without one, its first two languages)."""
    grid = [metric.split(".")[1:4] for metric in study.metrics
            if metric.startswith(f"{STATIC}.") and MINUS not in metric]
    models = dict.fromkeys(model for model, _, _ in grid)
    windows = dict.fromkeys(window[1:] for _, window, _ in grid)
    counts = dict.fromkeys("all" if rows == "rall" else rows[1:] for _, _, rows in grid)
    pair = row.pair or "-".join(row_languages(study, row).split(",")[:2])
    source, _, target = pair.partition("-")
    return ["static", "--source", source, "--target", target, "--models", ",".join(models),
            "--rows", ",".join(counts), "--windows", ",".join(windows), "--seed", str(seed)]


def row_setting(rows: Iterable[Row]) -> str:
    """The ``--set`` value that nests the models of ``rows`` under their rows' parent runs
    (``rows={original: '0', lang-pos: '1'}``): one command may train several (a stack)."""
    return "rows=" + yaml.safe_dump({mods.slug(row.modification): row.label for row in rows},
                                    default_flow_style=True, sort_keys=False,
                                    width=10**6).strip()


def run_study(study: Study, steps: Sequence[Step], command: Command, root: Path,
              say: Callable[[str], None] = print, results: Path | None = None,
              stack: int = 1, fingerprint_of: FingerprintOf | None = None,
              params: Path = DEFAULT_PARAMS, overrides: Sequence[str] = (),
              again: bool = False, dispatch: Dispatch | None = None) -> None:
    """Run ``steps`` through ``command`` (``multilab``'s main); stop at the first failure.
    Corpora and vocabulary are built once per artifacts folder (the study's, or a row's own
    where its settings change the languages, corpus or vocabulary), under a lock, so that
    two runners of one study can share its work. With ``results``, each run is booked in
    the run ledger there first (:mod:`multilab.studies.ledger`) and skipped when another
    live runner holds it. ``stack`` > 1: the steps that may share a stack (:func:`stacks`)
    train by one ``train`` command each, in stacks of up to ``stack`` models. A (row, seed)
    whose model another folder under ``artifacts/`` holds already (another study trained
    it: :func:`trained_elsewhere`) is measured there, not trained again, when its
    fingerprint is the one ``fingerprint_of`` gives for the row here (the same configuration
    and the same bytes of data: without it, nothing is reused).

    The steps are a plan, and a plan ages: another runner may have finished a (row, seed)
    since, and released it. So, once booked, each step is planned again from the records in
    ``results`` (resolved from ``params`` and ``overrides``, ``again`` as planned): one whose
    records are there now is released and skipped, not measured (and its record rewritten)
    a second time.

    ``dispatch``: the steps that train are prepared here (their data built once, as above),
    then handed to ``dispatch`` whole (a Ray cluster schedules them: no ledger booking, one
    model a task, ``stack`` 1); rows run by their script and models trained elsewhere are
    still run here first."""
    if dispatch is not None and stack > 1:
        raise UserError(f"--stack {stack} with --executor ray: each (row, seed) is one Ray "
                        "task (valid: --stack 1)")
    if results is not None:  # the study's own records folder (a smoke study's: scratch)
        results = records_root(results, study.profile)
    if dispatch is None:  # a Ray task trains where the cluster puts it: not checked here
        check_device(study, steps)
    runner = _Runner(study, command, root, say, results, (params, tuple(overrides), again))
    for step in [step for step in steps if step.row.script is not None or step.row.static]:
        if runner.book([step]):
            try:
                if step.row.script is not None:
                    runner.script(step)
                else:
                    runner.static(step)
            finally:
                runner.release([step])
    to_train = []
    for step in [step for step in steps if step.row.script is None and not step.row.static]:
        # a model trained already (another study's) is only measured: first
        folder = runner.reusable(step, fingerprint_of) if fingerprint_of else None
        if folder is None:
            to_train.append(step)
        else:
            runner.measure_only(step, folder)
    steps = to_train
    if dispatch is not None:
        work = []
        for number, step in enumerate(steps, 1):
            check_model_device(study, step, runner.model_dir(step))
            runner.prepare(step.row)  # once per artifacts folder, before any task starts
            work.append(runner.step_run(step, number, len(steps)))
        if work:
            dispatch(work)
        return
    if stack > 1:
        runner.stacked(steps, stack)
        return
    for number, step in enumerate(steps, 1):
        if not runner.book([step]):
            continue
        try:
            check_model_device(study, step, runner.model_dir(step))
            runner.prepare(step.row)
            work = runner.step_run(step, number, len(steps))
            say(work.title)
            for argv in work.commands:
                runner.run_argv(list(argv))
        finally:
            runner.release([step])


def prepare_study(study: Study, rows: Sequence[Row], command: Command, root: Path,
                  say: Callable[[str], None] = print) -> list[Path]:
    """Only the data of ``rows`` (corpora, vocabulary, knn spaces), as ``study run`` builds
    it before training: for a machine that trains without building (a GPU lease without the
    Bible, ``scripts/gpu_lease.sh prepare``). Returns the artifacts folders."""
    runner = _Runner(study, command, root, say, None)
    for row in rows:
        if not row.static:
            runner.prepare(row)
    return sorted(runner.prepared)


def check_seeds(studies: Sequence[Study], seeds: Sequence[int] | None,
                rows: Sequence[str] | None) -> None:
    """``--seeds``: each one a seed of a picked row of some study. A study's seeds are part of
    its claims (the verdicts read them); a seed outside them would run nothing, silently."""
    if not seeds:
        return
    offered = sorted({seed for study in studies for row in pick_rows(study, rows)
                      for seed in study.seeds_of(row)})
    unknown = [seed for seed in seeds if seed not in offered]
    if unknown:
        picked = "the rows picked of " if rows else ""
        raise UserError(f"--seeds {unknown[0]}: not a seed of {picked}"
                        f"{', '.join(study.name for study in studies)}; valid: "
                        f"{', '.join(map(str, offered))}")


def check_stack_size(study: Study, stack: int, seeds: Sequence[int] | None,
                     rows: Sequence[str] | None) -> None:
    """``--stack k``: at least 1, and no more than the study's rows x seeds on offer."""
    offered = len(rows or study.rows) * len(seeds or study.seeds)
    if not 1 <= stack <= offered:
        raise UserError(f"--stack {stack}: study {study.name} offers {offered} run(s) "
                        f"({len(rows or study.rows)} row(s) x {len(seeds or study.seeds)} "
                        f"seed(s)); valid: 1 to {offered}")


def stacks(study: Study, steps: Sequence[Step], root: Path) -> list[list[Step]]:
    """The steps that may train in one stack: one artifacts folder and one set of settings
    (the rows' own), one architecture (the registry's ``stack_group``), each trainable by
    the stacked trainer (``trains_stacked``; the others train alone, as single steps)."""
    groups: dict[tuple, list[Step]] = {}
    alone: list[list[Step]] = []
    for step in steps:
        if not mods.trains_stacked(step.row.modification):
            alone.append([step])
            continue
        key = (tuple(study_settings(study, root, step.row)),
               mods.stack_group(step.row.modification))
        groups.setdefault(key, []).append(step)
    return [*groups.values(), *alone]


def products(steps: Sequence[Step]) -> list[tuple[list[Row], list[int]]]:
    """``steps`` as (rows, seeds) cross products, what one ``train -m … --seed …`` command
    trains: rows missing the same seeds share one, each modification once in it."""
    seeds_of: dict[str, list[int]] = {}
    rows: dict[str, Row] = {}
    for step in steps:
        seeds_of.setdefault(step.row.label, []).append(step.seed)
        rows[step.row.label] = step.row
    out: list[tuple[list[Row], list[int]]] = []
    for label, seeds in seeds_of.items():
        home = next((p for p in out if p[1] == seeds and all(
            r.modification != rows[label].modification for r in p[0])), None)
        if home is None:
            out.append(([rows[label]], seeds))
        else:
            home[0].append(rows[label])
    return out


def _with_settings(settings: Sequence[str], argv: Sequence[str]) -> list[str]:
    return [f"--set={value}" for value in settings] + list(argv)


class _Runner:
    """One study's commands: preparing its artifacts once, booking runs in the ledger."""

    def __init__(self, study: Study, command: Command, root: Path,
                 say: Callable[[str], None], results: Path | None,
                 planned: tuple[Path, tuple[str, ...], bool] = (DEFAULT_PARAMS, (), False)
                 ) -> None:
        self.study, self.command, self.root, self.say = study, command, root, say
        self.results = results
        self.planned = planned  # how the steps were planned: params, overrides, again
        self.prepared: set[Path] = set()

    def run(self, settings: list[str], *argv: str) -> None:
        self.run_argv(_with_settings(settings, argv))

    def run_argv(self, args: list[str]) -> None:
        self._check(self.command(args), shown_command(args))

    def step_run(self, step: Step, number: int, total: int) -> StepRun:
        """``step``'s commands: ``train`` in the study's (row's) settings, nested under its
        row's parent run, then the commands that write the records it lacks."""
        settings = [*study_settings(self.study, self.root, step.row), row_setting([step.row])]
        argvs = [["train", "--modification", step.row.modification, "--seed", str(step.seed)],
                 *measure_commands(self.study, step, self.model_dir(step))]
        title = f"study {self.study.name}: {step.row.label} seed {step.seed} ({number}/{total})"
        return StepRun(self.study.name, step, title,
                       tuple(tuple(_with_settings(settings, argv)) for argv in argvs))

    def _check(self, code: int, shown: str) -> None:
        """A command's exit status: a stop it said it took is this run's stop as well; a
        failure is one line naming the command."""
        if (stop := stops.stop_of_exit_status(code)) is not None:
            raise stop
        if code != 0:
            raise UserError(failure_line(self.study.name, shown, code))

    def script(self, step: Step) -> None:
        """A row's own command (its ``script``, ``{seed}`` filled in), from the project
        root: it writes the records the runner cannot (a similarity of two models)."""
        argv = shlex.split(step.row.script_command(step.seed))
        self.say(f"study {self.study.name}: {step.row.label} seed {step.seed}: "
                 f"{shlex.join(argv)}")
        self._check(subprocess.run(argv, cwd=self.root, check=False).returncode,
                    shlex.join(argv))

    def static(self, step: Step) -> None:
        """A static row's embeddings at the step's seed (:func:`static_command`), in the
        study's settings, on its corpora and vocabulary (built first where missing)."""
        self.prepare(step.row)
        self.say(f"study {self.study.name}: {step.row.label} seed {step.seed}: static "
                 "embeddings")
        self.run(study_settings(self.study, self.root, step.row),
                 *static_command(self.study, step.row, step.seed))

    def book(self, steps: Sequence[Step]) -> list[Step]:
        """The steps this runner now holds (all, without a ledger); the others are said."""
        if self.results is None:
            return list(steps)
        mine = []
        for step in steps:
            held = ledger.book(self.results, self.study.name, step.row.label, step.seed)
            if held is None:
                fresh = self._still_missing(step)
                if fresh is not None:
                    mine.append(fresh)
                    continue
                ledger.release(self.results, self.study.name, step.row.label, step.seed)
                self.say(f"study {self.study.name}: {step.row.label} seed {step.seed} "
                         "skipped: its records were written since the plan (by another "
                         "runner)")
                continue
            self.say(f"study {self.study.name}: {step.row.label} seed {step.seed} skipped: "
                     f"under way by {held.by} since {held.since} (results/{ledger.LEDGER})")
        return mine

    def _still_missing(self, step: Step) -> Step | None:
        """``step`` planned again from the records now in ``results`` (fewer needs where some
        records arrived), None where none is missing any more."""
        from multilab.studies.records import iter_records

        params, overrides, again = self.planned
        assert self.results is not None
        fresh = missing_runs(self.study, iter_records(self.results), [step.seed],
                             [step.row.label], params, overrides, again=again)
        found = next((found for found in fresh if found.row.label == step.row.label
                      and found.seed == step.seed), None)
        return None if found is None else replace(step, needs=found.needs)

    def release(self, steps: Sequence[Step]) -> None:
        if self.results is not None:
            for step in steps:
                ledger.release(self.results, self.study.name, step.row.label, step.seed)

    def reusable(self, step: Step, fingerprint_of: FingerprintOf) -> Path | None:
        """A finished model of ``step`` in another folder whose fingerprint is the one
        ``train`` would give it here: the row's records name a model lying elsewhere, so the
        study's data is prepared (the fingerprint hashes it) and compared. A model trained
        on other data (the code that builds it changed since) is trained again."""
        device = self.study.device_of(step.row)
        if trained_elsewhere(step, self.root, self.model_dir(step), device) is None:
            return None
        self.prepare(step.row)
        expected = fingerprint_of(study_settings(self.study, self.root, step.row),
                                  step.row.modification, step.seed)
        folder = trained_elsewhere(replace(step, fingerprints=(expected,)), self.root,
                                   self.model_dir(step), device)
        if folder is None:
            self.say(f"study {self.study.name}: {step.row.label} seed {step.seed}: the "
                     f"trained model its records name is not of this data (fingerprint "
                     f"{expected} here): training it")
        return folder

    def measure_only(self, step: Step, model_dir: Path) -> None:
        """Measure a model another folder holds (:func:`trained_elsewhere`), not training it
        again: the study's own corpora and vocabulary are prepared first (the same bytes, as
        the fingerprint is the same), its records written under the study's experiment."""
        if not self.book([step]):
            return
        try:
            self.prepare(step.row)
            self.say(f"study {self.study.name}: {step.row.label} seed {step.seed}: measuring "
                     f"the model already trained in {model_dir}")
            settings = [*study_settings(self.study, self.root, step.row),
                        row_setting([step.row])]
            for argv in measure_commands(self.study, step, model_dir):
                self.run(settings, *argv)
        finally:
            self.release([step])

    def model_dir(self, step: Step) -> Path:
        return study_model_dir(self.study, self.root, step)

    def prepare(self, row: Row) -> None:
        """The row's corpora and vocabulary (once per artifacts folder), its knn table."""
        from multilab.data.layout import vocab_built  # torch: only where a study runs

        settings = study_settings(self.study, self.root, row)
        artifacts = study_artifacts(self.study, self.root, row)
        if artifacts not in self.prepared:
            artifacts.mkdir(parents=True, exist_ok=True)
            with FileLock(artifacts / ".prepare.lock"):  # a second runner waits here
                if not (artifacts / "corpora" / "train.txt").is_file():
                    self.say(f"study {self.study.name}: building its corpora"
                             + (f" (row {row.label})" if own_data(row) else ""))
                    self.run(settings, "corpus", "build")
                if not vocab_built(artifacts / "vocab"):
                    self.run(settings, "vocab")
            self.prepared.add(artifacts)
        if mods.resolve_recipe(row.modification).needs_knn:
            with FileLock(artifacts / ".prepare.lock"):
                if not (artifacts / "spaces" / "knn.pt").is_file():
                    self.run(settings, "spaces")

    def stacked(self, steps: Sequence[Step], stack: int) -> None:
        """Each group of steps that may share a stack (:func:`stacks`), booked whole, as
        cross products: one ``train`` command each (``train.stack`` up to ``stack``: the
        command cuts it into stacks), then every member's evaluation. A product of one
        model trains alone, on the single-model path."""
        groups = stacks(self.study, steps, self.root)
        for number, group in enumerate(groups, 1):
            mine = self.book(group)
            try:
                for step in mine:
                    check_model_device(self.study, step, self.model_dir(step))
                for rows, seeds in products(mine):
                    for row in rows:
                        self.prepare(row)
                    size = len(rows) * len(seeds)
                    settings = [*study_settings(self.study, self.root, rows[0]),
                                row_setting(rows), f"train.stack={min(stack, size)}"]
                    self.say(f"study {self.study.name}: {', '.join(r.label for r in rows)} "
                             f"seeds {', '.join(map(str, seeds))}: {size} model(s) in stacks "
                             f"of up to {min(stack, size)} ({number}/{len(groups)})")
                    self.run(settings, "train",
                             *(a for r in rows for a in ("--modification", r.modification)),
                             *(a for seed in seeds for a in ("--seed", str(seed))))
                    for step in mine:
                        if step.row in rows and step.seed in seeds:
                            for argv in measure_commands(self.study, step, self.model_dir(step)):
                                self.run(settings, *argv)
            finally:
                self.release(mine)
