"""The default study, what ``dvc repro`` reproduces, as a study like the others.

Its spec is generated from the configuration (params.yaml's ``study`` rows, ``seeds``,
``profile`` and ``languages``; Table 1's metrics and the paper's values) instead of read from
a studies/ file, and its table is built by the one table builder,
:func:`multilab.studies.tables.study_result`, from whichever serialisation of the records is
at hand: the copies its MLflow runs carry (the report stage) or the committed files under
``results/<experiment>/`` (``study list | next | report``, :func:`listed_default_study`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from multilab.config import Config
from multilab.lab.metric_table import METRICS, PAPER_VALUES
from multilab.lab.modifications import canonical_name, paper_id
from multilab.resolve import resolve_run
from multilab.studies.records import experiment_records, safe_name
from multilab.studies.spec import Row, Study, is_study_name
from multilab.studies.verdict import PaperValue

#: the default study's paper: Table 1 of Dufter & Schütze 2020
PAPER = "dufter2020"
#: the languages of the paper's Table 1 (English + Fake-English): only then are its values
#: the same experiment's
PAPER_LANGUAGES = ("3", "fake")
#: Table 1's means are over five seeds, printed to two decimals
PAPER_SEEDS, PAPER_DECIMALS = 5, 2
#: the default study's name where its experiment's is no study name (one set in params.yaml)
FALLBACK_NAME = "default-study"


def default_name(cfg: Config) -> str:
    """The default study's name: its MLflow experiment's (``multilab-quick``, also the
    folder of its records under results/), so that the study, its runs and its records go
    by one name; ``default-study`` where the experiment's name is no study name."""
    return cfg.experiment if is_study_name(cfg.experiment) else FALLBACK_NAME


def _paper_row(name: str, paper_languages: bool) -> dict[str, PaperValue]:
    """The paper's Table 1 means of a row (none for another language set or a row the
    paper does not have)."""
    values = PAPER_VALUES.get(paper_id(name) or "", {}) if paper_languages else {}
    return {key: PaperValue(float(values[key]), None, PAPER_SEEDS)
            for key in METRICS if key in values}


def default_study(cfg: Config, modifications: Sequence[str]) -> Study:
    """The spec of the default study's table of ``modifications`` (the study's rows, Table
    2's or the variant's): one row a modification, at the configuration's seeds."""
    names = list(dict.fromkeys(canonical_name(mod) for mod in modifications))
    paper_languages = tuple(map(str, cfg.languages)) == PAPER_LANGUAGES
    rows = tuple(Row(label=name, modification=name, paper_id=paper_id(name),
                     paper=_paper_row(name, paper_languages)) for name in names)
    comparable = None if cfg.profile == "paper" or not paper_languages else (
        f"no: profile `{cfg.profile}` trains far fewer updates than the paper's (profile "
        "`paper`); rows can be ordered, magnitudes not compared")
    return Study(name=default_name(cfg), paper=PAPER, table="Table 1",
                 title="The default study: params.yaml's study rows over its seeds",
                 languages=tuple(cfg.languages), profile=cfg.profile, seeds=tuple(cfg.seeds),
                 settings={}, paper_seeds=PAPER_SEEDS, paper_decimals=PAPER_DECIMALS,
                 paper_comparable=comparable, metrics=tuple(METRICS), rows=rows, claims=(),
                 about=None, source=Path("params.yaml"))


def listed_default_study(cfg: Config) -> Study:
    """The default study as ``study list | next | run | report`` hold it beside
    studies/*.yaml: params.yaml's ``study`` rows, read from the records ``dvc repro`` leaves
    (``results/<experiment>/``) and from no other study's folder, so that its page is the
    report stage's table from the committed copies of the same records."""
    study = default_study(cfg, list(cfg.study))
    folder = experiment_records(cfg.paths.results, cfg.profile, cfg.experiment)
    shown = f"{Path(cfg.paths.results).name}/{safe_name(cfg.experiment)}/"
    about = (f"What `dvc repro` runs, its spec generated from params.yaml (`study`, `seeds`, "
             f"`profile`, `languages`), not from a file of studies/. Only the records of "
             f"experiment `{cfg.experiment}` are read (`{shown}`, where `dvc repro` writes "
             "them); its report stage (`reports/table1.md`) reads the same records from "
             "their MLflow runs.")
    # a study's runs land in the experiment named after it: here, where the study reads
    settings = {} if study.name == cfg.experiment else {"experiment": cfg.experiment}
    return replace(study, settings=settings, records_under=folder, about=about)


def default_configurations(cfg: Config, study: Study) -> dict[str, dict[str, Any]]:
    """Each row's resolved configuration, from ``cfg`` itself (as a record's ``config``
    block has it: JSON values), at the study's first seed: what its records must agree with."""
    return {row.label: json.loads(json.dumps(
        resolve_run(cfg, row.modification, study.seeds[0]).as_params(), default=str))
        for row in study.rows}
