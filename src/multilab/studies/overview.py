"""``multilab study list | next | report``: what the studies hold and lack, as lines to print
and pages to write, all read from the committed records."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from multilab.config import Config
from multilab.errors import UserError
from multilab.studies.claims import Claim, paper_name
from multilab.studies.planning import ClaimPlan
from multilab.studies.records import Record
from multilab.studies.spec import Study
from multilab.studies.tables import StudyResult


def every_study(folder: Path, claims: Mapping[str, Claim], cfg: Config) -> dict[str, Study]:
    """The studies ``study`` commands know: the default study (params.yaml's, what ``dvc
    repro`` runs: :func:`~multilab.studies.default.listed_default_study`) first, then each
    ``<name>.yaml`` of ``folder``; a file named like the default study is one line."""
    from multilab.studies.default import listed_default_study
    from multilab.studies.spec import load_studies

    studies = load_studies(folder, claims)
    default = listed_default_study(cfg)
    if default.name in studies:
        raise UserError(f"{studies[default.name].source}: name {default.name!r} is the default "
                        "study's (params.yaml's experiment); rename the file's study")
    return {default.name: default, **studies}


def pick_names(studies: Mapping[str, Study], names: Sequence[str], every: bool) -> list[str]:
    """The studies named (``every``: all of them), or one line naming a study there is not."""
    picked = list(studies) if every else list(names)
    unknown = [name for name in picked if name not in studies]
    if unknown or not picked:
        raise UserError(f"study {unknown[0] if unknown else '(none)'!r}; name one of "
                        f"{', '.join(studies)} or --all")
    return picked


def list_lines(results: Sequence[StudyResult]) -> list[str]:
    """``study list``: one line a study, its runs and claims with a verdict, columns aligned."""
    lines = [("study", "paper", "table", "runs", "claims", "report with")]  # the header
    for result in results:
        study = result.study
        recorded = sum(len(seeds) for seeds in result.seeds_found.values())
        counted = sum(1 for o in result.outcomes.values() if o.verdict.counts)
        lines.append((study.name, paper_name(study.paper), study.table,
                      f"runs {recorded}/{sum(len(study.seeds_of(row)) for row in study.rows)}",
                      f"claims {counted}/{len(result.outcomes)} with a verdict",
                      f"multilab study report {study.name}"))
    widths = [max(len(line[i]) for line in lines) for i in range(5)]  # columns line up
    return ["  ".join([*(f"{text:{width}s}" for text, width in zip(line[:5], widths,
                                                                    strict=True)), line[5]])
            for line in lines]


#: ``study next --lanes``: the most lanes planned (each is a process of one thread)
MAX_LANES = 256


@dataclass(frozen=True)
class NextRequest:
    """What ``study next`` was asked: how many run sets, or a packing into lanes."""

    limit: int = 15
    lanes: int | None = None
    hours: float | None = None
    shell: bool = False
    fit: bool = False
    lanes_dir: str | None = None
    cpu: bool = False

    def packs_lanes(self) -> bool:
        """Any lane option given: the runs are packed into lanes."""
        return (self.lanes is not None or self.hours is not None or self.shell or self.fit
                or bool(self.lanes_dir))


def next_lines(results: Sequence[StudyResult], claims: Mapping[str, Claim],
               records: Sequence[Record], request: NextRequest) -> list[str]:
    """``study next``: the runs that bring claims to a verdict, most claims per CPU hour first
    (or packed into lanes)."""
    from multilab.studies.document import run_costs
    from multilab.studies.planning import claim_plans, lower_bound_rows, plan_lines, run_prices

    if request.limit < 1:
        raise UserError(f"--limit {request.limit}: must be >= 1")
    prices = run_prices(results, run_costs(records))
    plans = claim_plans(results, claims)
    if request.cpu:  # what a CPU can train: runs whose profile a CPU has trained before
        plans = [plan for plan in plans
                 if None not in plan.priced_models(prices).values()]
    if request.packs_lanes():
        return lane_plan(request, plans, results, records, prices)
    return plan_lines(plans, prices, request.limit, lower_bound_rows(results))


def lane_plan(request: NextRequest, plans: Sequence[ClaimPlan],
              results: Sequence[StudyResult], records: Sequence[Record],
              prices: Mapping[tuple[str, str], float | None]) -> list[str]:
    """``study next --lanes N --hours H``: the runs that fit in N background lanes of H hours,
    as lines to read, or (``--shell``) one command line per lane for scripts/lanes.sh."""
    from multilab.studies.lane_packing import (
        lane_checkpoints,
        lane_lines,
        measure_seconds,
        pack_lanes,
    )

    lanes = 2 if request.lanes is None else request.lanes
    hours = 2.5 if request.hours is None else request.hours
    if not 1 <= lanes <= MAX_LANES:  # a typo of many zeros would fill the memory
        raise UserError(f"--lanes {lanes}: must be from 1 to {MAX_LANES} (a lane is one "
                        "training process of one thread)")
    if not 0 < hours < math.inf:  # nan and inf too: inf would plan every run in a lane
        raise UserError(f"--hours {hours:g}: must be a number of hours > 0")
    # lanes rely on measured prices only, not on a profile's or another unit's lower bound
    measured = {(result.study.name, row.label): result.measured_seconds(row.label)
                for result in results for row in result.study.rows}
    checkpoints = lane_checkpoints(Path(request.lanes_dir), results) if request.lanes_dir \
        else {}
    packed = pack_lanes(plans, measured, measure_seconds(records), lanes, hours,
                        span=not request.fit, checkpoints=checkpoints)
    if request.shell:  # lane K on line K (a checkpoint's lane is its clone): empty lines kept
        lines = [lane.shell() for lane in packed]
        while lines and not lines[-1]:
            lines.pop()
        return lines
    # rows a CPU could train whose time no record measures: they wait for a measurement
    bounded = sorted({f"{plan.study} {label}" for plan in plans for label, _ in plan.runs
                      if measured.get((plan.study, label)) is None
                      and prices.get((plan.study, label)) is not None})
    return lane_lines(packed, hours) + ([
        "left out, their time not measured (a lower bound only; benchmarks/bench_row_steps.py "
        "prices one, to run by hand): " + ", ".join(bounded)]
        if bounded else [])


def every_result(studies: Mapping[str, Study], results: Sequence[StudyResult],
                 records: Sequence[Record], claims: Mapping[str, Claim], params: Path,
                 overrides: Sequence[str]) -> list[StudyResult]:
    """Every study's result, in the studies' order: those of ``results``, the others read."""
    from multilab.studies.tables import study_result

    return [next((r for r in results if r.study.name == name), None)
            or study_result(study, records, claims, params, overrides)
            for name, study in studies.items()]


def report_pages(results: Sequence[StudyResult], every: Sequence[StudyResult],
                 claims: Mapping[str, Claim], records: Sequence[Record], out: Path,
                 reproduction: Path | None = None, claims_folder: Path | None = None
                 ) -> dict[Path, str]:
    """``study report``: each study's page under ``out``; with ``reproduction`` (``--all``)
    the index and that document's generated blocks too (its prose kept), and the findings
    and README's tally (their element map in ``claims_folder``). Who speaks for a
    claim and its Holm-adjusted p are read over ``every`` study, so that a page reported
    alone is the page ``--all`` writes."""
    from multilab.studies.document import fill, new_document, render_index, reproduction_blocks
    from multilab.studies.figures import figure_lines
    from multilab.studies.findings import findings_documents
    from multilab.studies.lane_packing import measure_seconds
    from multilab.studies.standing import runs_left_lines, spread_lines
    from multilab.studies.tables import claim_verdicts, multiplicity, render_study, speakers

    speaking, adjusted = speakers(every), multiplicity(every, claims).adjusted
    successors = {r.study.supersedes: r.study.name for r in every if r.study.supersedes}
    measure = measure_seconds(records)
    texts = {out / f"{r.study.name}.md": render_study(
        r, claims, figure_lines(r), successors.get(r.study.name), speaking, adjusted,
        standing=[*spread_lines(r), *runs_left_lines(r, measure)]) for r in results}
    if reproduction is not None:
        verdicts = claim_verdicts(results, claims)
        texts[out / "index.md"] = render_index(results, claims, verdicts, records)
        blocks = reproduction_blocks(results, claims, verdicts, records)
        texts[reproduction] = fill(reproduction.read_text(encoding="utf-8"), blocks,
                                   str(reproduction)) if reproduction.is_file() else \
            new_document(blocks)
        if claims_folder is not None:
            texts.update(findings_documents(claims_folder, out, results, claims))
    return texts


def uncommitted_warning(results: Path) -> str | None:
    """The warning when the documents just written read records that git does not hold:
    the documents test regenerates them from the committed records on a fresh clone."""
    from multilab.source import uncommitted_files

    pending = uncommitted_files(results)
    if not pending:
        return None
    shown = ", ".join(pending[:3]) + (f" and {len(pending) - 3} more" if len(pending) > 3
                                      else "")
    return (f"warning: {len(pending)} file(s) under {results} not committed ({shown}): "
            "commit them with the documents, which read them")
