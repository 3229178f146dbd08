"""``multilab study run``: each study's missing (row, seed) pairs planned, prepared, queued as
DVC experiments or run through the command line.

The command line passes itself in (its ``main``, :data:`multilab.studies.runner.Command`),
so that every run goes through the ordinary commands and this module stays below the
command line in the import structure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from multilab.config import Config
from multilab.errors import UserError
from multilab.studies.records import Record
from multilab.studies.runner import Command, Step
from multilab.studies.spec import Study


@dataclass(frozen=True)
class RunRequest:
    """What ``study run`` was asked: which pairs (``--seeds``, ``--rows`` as typed), under
    which ``--params`` and ``--set``, and what to do with them."""

    params: str
    overrides: list[str] = field(default_factory=list)
    seeds: str | None = None
    rows: str | None = None
    again: bool = False
    plan: bool = False
    prepare: bool = False
    queue: bool = False
    stack: int = 1
    executor: str = "local"
    address: str | None = None
    cpus_per_run: float = 1.0
    gpus_per_run: float | None = None

    def command_line(self, command: Command) -> Command:
        """``command`` with this request's ``--params`` and ``--set`` before each argv."""
        base = ["--params", self.params, *(f"--set={value}" for value in self.overrides)]
        return lambda argv: command(base + argv)


def _as_int(text: str) -> int | str:
    """A command-line number as an int, or the text unchanged for the checker to name."""
    try:
        return int(text)
    except ValueError:
        return text


def run_studies(request: RunRequest, cfg: Config, studies: Sequence[Study],
                records: Sequence[Record], command: Command) -> None:
    """Each study's missing (row, seed) pairs: said (``--plan``, or none missing), their data
    built (``--prepare``), queued (``--queue``) or run through ``command``."""
    from multilab.resolve import check_seed
    from multilab.studies.ray_executor import executor_dispatch
    from multilab.studies.runner import (
        check_seeds,
        check_stack_size,
        missing_runs,
        pick_rows,
        prepare_study,
        run_study,
    )
    from multilab.studies.spec import split_row_names

    seeds = [check_seed(_as_int(s.strip()), "--seeds") for s in request.seeds.split(",")
             if s.strip()] if request.seeds else None
    rows = split_row_names(request.rows, studies) if request.rows else None
    if request.again and not rows:
        raise UserError("--again needs --rows: the rows to measure again (e.g. --rows original "
                        "--seeds 43,44), never a whole study by accident")
    run_command = request.command_line(command)
    resolved = (Path(request.params), request.overrides)  # what the runs will resolve to
    check_seeds(studies, seeds, rows)
    for study in studies:  # every study's --stack checked before anything runs
        check_stack_size(study, request.stack, seeds, rows)
    dispatch = executor_dispatch(request.executor, run_command, Path.cwd(), request.address,
                                 request.cpus_per_run, request.gpus_per_run,
                                 stack=request.stack, queue=request.queue)
    if request.prepare:
        for study in studies:
            for folder in prepare_study(study, pick_rows(study, rows), run_command, Path.cwd()):
                print(f"study {study.name}: data in {folder}")
        return
    if request.queue and not request.plan:
        plans = [(s, missing_runs(s, records, seeds, rows, *resolved, again=request.again))
                 for s in studies]
        for study, steps in plans:  # a DVC experiment trains one workspace model
            for step in (step for step in steps if step.row.script or step.row.static):
                writer = "its script" if step.row.script else "`multilab static`"
                print(f"study {study.name}: {step.row.label} seed {step.seed} not queued: "
                      f"{writer} writes it (`multilab study run {study.name}` runs it)")
        queue_studies(request, cfg, [(s, [step for step in steps
                                          if not step.row.script and not step.row.static])
                                     for s, steps in plans])
        return
    for study in studies:
        steps = missing_runs(study, records, seeds, rows, *resolved, again=request.again)
        if request.plan or not steps:
            print(plan_text(study, steps, cfg.paths.results, request.again))
            continue
        run_study(study, steps, run_command, Path.cwd(),
                  results=cfg.paths.results, stack=request.stack, params=resolved[0],
                  overrides=resolved[1], again=request.again, dispatch=dispatch,
                  fingerprint_of=lambda settings, modification, seed: fingerprint_here(
                      request, settings, modification, seed))


def plan_text(study: Study, steps: Sequence[Step], results: Path, again: bool) -> str:
    """``study run --plan``: a study's missing pairs, each with what else is known of it (its
    script, a live runner's booking, a model another study trained)."""
    from multilab.studies.ledger import read_ledger
    from multilab.studies.records import records_root
    from multilab.studies.runner import study_model_dir, trained_elsewhere

    booked = {b.key: b for b in read_ledger(records_root(results, study.profile))
              if not b.stale()}
    lines = []
    for step in steps:
        held = booked.get((study.name, step.row.label, step.seed))
        here = Path()  # relative: the plan names the folder as a user would
        trained = trained_elsewhere(step, here, study_model_dir(study, here, step),
                                    study.device_of(step.row))
        lines.append(f"\n  {step.row.label} seed {step.seed}"
                     + (f" (by its script: {step.row.script_command(step.seed)})"
                        if step.row.script else "")
                     + (" (multilab static)" if step.row.static else "")
                     + (f" (under way: {held.by} since {held.since})" if held else "")
                     + (f" (measure only: trained in {trained})" if trained else ""))
    what = "to measure again (--again)" if again else "missing"
    return f"study {study.name}: {len(steps)} run(s) {what}" + "".join(lines)


def fingerprint_here(request: RunRequest, settings: list[str], modification: str,
                     seed: int) -> str:
    """The fingerprint ``train`` would give (modification, seed) under ``--params``, the
    command line's ``--set`` and a study's ``settings`` (the runner's order: the study's win)."""
    from multilab.resolve import load_config, parse_overrides, resolve_run
    from multilab.training.model_dir import model_fingerprint

    cfg = load_config(request.params, parse_overrides([*request.overrides, *settings]))
    return model_fingerprint(resolve_run(cfg, modification, seed))


def queue_studies(request: RunRequest, cfg: Config,
                  plans: Sequence[tuple[Study, list[Step]]]) -> None:
    """``study run --queue``: the missing (row, seed) pairs as queued DVC experiments, every
    one checked before the first is queued; then the command that runs them."""
    from multilab.resolve import load_config, parse_overrides
    from multilab.studies.queue import check_queueable, queue_study

    if request.stack != 1:
        raise UserError(f"--stack {request.stack} with --queue: a queued experiment trains one "
                        "model; `dvc queue start -j N` runs N of them at once (valid: --stack 1)")
    if not (Path(".dvc").is_dir() and Path("dvc.yaml").is_file()):
        raise UserError(f"--queue needs the DVC project's root (.dvc/ and dvc.yaml); "
                        f"{Path.cwd()} is not one")
    if Path(request.params).resolve() != Path("params.yaml").resolve():
        raise UserError(f"--params {request.params} with --queue: DVC's experiments read the "
                        "project's params.yaml (valid: --params params.yaml)")
    for study, steps in plans:  # a refusal anywhere queues nothing
        check_queueable(study, steps, lambda settings: load_config(
            request.params, parse_overrides([*request.overrides, *settings])))
    results = cfg.paths.results if cfg.paths.results.is_absolute() else \
        Path.cwd() / cfg.paths.results
    queued = []
    for study, steps in plans:
        if not steps:
            print(f"study {study.name}: 0 run(s) missing")
        queued += queue_study(study, steps, results, request.overrides)
    if queued:
        print(f"{len(queued)} experiment(s) queued; run them N at a time with `dvc queue start "
              "-j N` (`dvc queue status` shows them), then `multilab study report "
              f"{' '.join(study.name for study, _ in plans)}`")
