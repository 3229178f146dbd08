"""What a study row runs: the ``--set`` values of its commands and the model configuration
they resolve to.

The runner passes :func:`study_settings` to every command of a row; the tables resolve the
same values (:func:`row_configuration`) into the configuration the row's models have, which a
record's ``config`` block must agree with for the record to belong to the row
(:func:`multilab.studies.tables.collect`). One function for both, so what is run and what is
read cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from multilab.config import Config
from multilab.errors import UserError
from multilab.files import parse_yaml
from multilab.resolve import config_from_dict, parse_overrides, resolve_run
from multilab.studies.records import safe_name
from multilab.studies.spec import Row, Study


def own_data(row: Row | None) -> bool:
    """A row with settings of its own gets its own artifacts folder: they may change its
    corpora or vocabulary (``languages``, ``corpus.*``, ``vocab.*``), and even when they only
    change the model (``models.small.hidden_size``, ``train.epochs``: the real-language sweep), two
    rows of one modification and seed would otherwise share one model folder, each run
    retraining over the other's model (and two runners clashing in it)."""
    return row is not None and bool(row.settings)


def study_artifacts(study: Study, root: Path, row: Row | None = None) -> Path:
    """Where a study's corpora, vocabulary and models live: ``artifacts/studies/<name>/``,
    and a subfolder per row that has settings of its own."""
    base = root / "artifacts" / "studies" / study.name
    return base / f"row-{safe_name(row.label)}" if row is not None and own_data(row) else base


def study_settings(study: Study, root: Path, row: Row | None = None) -> list[str]:
    """The ``--set`` values every command of the study runs with (for ``row``: with the
    row's settings, its ``languages`` winning over the study's)."""
    base = study_artifacts(study, root, row)
    values = {"profile": study.profile, "experiment": study.name,
              "languages": "[" + ", ".join(study.languages) + "]",
              "paths.artifacts": base, "paths.metrics": base / "metrics",
              "paths.reports": base / "reports", "study": "[original]", "seeds": "[0]",
              **study.settings, **(row.settings if row is not None else {})}
    return [f"{key}={value}" for key, value in values.items()]


@lru_cache(maxsize=4)
def _params_tree(params: str, modified_ns: int) -> dict[str, Any]:
    """``params.yaml`` read once per version of the file (a report resolves every row of
    every study)."""
    try:
        raw = parse_yaml(Path(params).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise UserError(f"parameter file {params}: not readable YAML ({err})") from None
    return raw if isinstance(raw, dict) else {}


@lru_cache(maxsize=256)
def _configuration(params: str, modified_ns: int, settings: tuple[str, ...]) -> Config:
    """``params`` with ``settings`` (``--set`` values), validated once per set of values: a
    study's rows mostly differ in their modification only."""
    return config_from_dict(_params_tree(params, modified_ns), parse_overrides(list(settings)))


def row_configuration(study: Study, row: Row, params: Path,
                      overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The resolved configuration of ``row``'s models (``RunConfig.as_params``, as a record's
    ``config`` block has it: JSON values), at the study's first seed: ``params`` + the
    command line's ``overrides`` (``--set``) + the study's profile, languages and settings +
    the row's settings, the row's modification resolved as ``train`` resolves it. A row that
    cannot be resolved is one line naming the study, the row and why."""
    try:
        modified = Path(params).stat().st_mtime_ns
    except OSError as err:
        raise UserError(f"parameter file {params}: {err.strerror or err}") from None
    # as the runner passes them: the command line's first, the study's winning over them
    settings = (*overrides, *study_settings(study, Path(), row))
    try:
        run = resolve_run(_configuration(str(params), modified, settings), row.modification,
                          study.seeds[0])
    except UserError as err:
        raise UserError(f"study {study.name}, row {row.label}: {err}") from None
    return json.loads(json.dumps(run.as_params(), default=str))
