"""The default study, what ``dvc repro`` reproduces, as a study like the others.

Its spec is generated from the configuration (params.yaml's ``study`` rows, ``seeds``,
``profile`` and ``languages``; Table 1's metrics) instead of read from a studies/ file, and the
report builds its table with the one table builder, :func:`multilab.studies.tables.study_result`,
from whichever serialisation of the records is at hand: the copies its MLflow runs carry (the
report stage) or the committed files (:mod:`multilab.studies.run_records`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from multilab.config import Config
from multilab.lab.metric_table import METRICS
from multilab.lab.modifications import canonical_name, paper_id
from multilab.resolve import resolve_run
from multilab.studies.spec import Row, Study

#: the default study's paper: Table 1 of Dufter & Schütze 2020
PAPER = "dufter2020"


def default_study(cfg: Config, modifications: Sequence[str]) -> Study:
    """The spec of the default study's table of ``modifications`` (the study's rows, Table
    2's or the variant's): one row a modification, at the configuration's seeds."""
    names = list(dict.fromkeys(canonical_name(mod) for mod in modifications))
    rows = tuple(Row(label=name, modification=name, paper_id=paper_id(name), paper={})
                 for name in names)
    return Study(name=cfg.experiment, paper=PAPER, table="Table 1",
                 title="The default study: params.yaml's study rows over its seeds",
                 languages=tuple(cfg.languages), profile=cfg.profile, seeds=tuple(cfg.seeds),
                 settings={}, paper_seeds=None, paper_decimals=None, paper_comparable=None,
                 metrics=tuple(METRICS), rows=rows, claims=(), about=None,
                 source=Path("params.yaml"))


def default_configurations(cfg: Config, study: Study) -> dict[str, dict[str, Any]]:
    """Each row's resolved configuration, from ``cfg`` itself (as a record's ``config``
    block has it: JSON values), at the study's first seed: what its records must agree with."""
    return {row.label: json.loads(json.dumps(
        resolve_run(cfg, row.modification, study.seeds[0]).as_params(), default=str))
        for row in study.rows}

