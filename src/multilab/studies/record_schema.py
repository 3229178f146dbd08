"""What a record must say about where its numbers came from, as a JSON Schema, and the check
of every file under ``results/`` against it (``multilab records check``).

A number a referee can trust names the code that made it (commit), the model (fingerprint,
seed, profile), the machine (device), when (date) and the command line that wrote it. A
record that cannot say one of these, because the run that made it never recorded it (a
result measured before records existed, imported later), says so instead: its
``provenance.unbacked`` lists the fields it lacks and why, ``{"fields": ["provenance.commit"],
"reason": "…"}``; the check then accepts the gap, and only that gap. An ``unbacked`` that
names a field the record does have is an error too: the mark must stay true.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from multilab.errors import UserError
from multilab.studies.ledger import LEDGER, LEDGER_LOCK, read_ledger
from multilab.studies.records import KINDS, SCHEMA, check_numbers

_COMMIT = {"type": "string", "pattern": "^[0-9a-f]{7,40}$"}
_DATE = {"type": "string",  # ISO 8601 with its zone, as provenance() writes it
         "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$"}
_TEXT = {"type": "string", "minLength": 1}

#: the fields a record is checked for, by dotted path; ``unbacked.fields`` names some of these
CHECKED_FIELDS = ("provenance.commit", "provenance.date", "provenance.command",
                  "provenance.machine.device", "model.fingerprint", "model.seed",
                  "model.profile", "config.profile")

RECORD_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "multilab results record",
    "type": "object",
    "required": ["schema", "kind", "qualifier", "model", "config", "provenance", "result"],
    "properties": {
        "schema": {"const": SCHEMA},
        "kind": {"enum": list(KINDS)},
        "qualifier": {"type": "string"},
        "result": {"type": "object"},
        "provenance": {
            "type": "object",
            "required": ["commit", "date", "command", "machine"],
            "properties": {
                "commit": _COMMIT, "date": _DATE, "command": _TEXT,
                "machine": {"type": "object", "required": ["device"],
                            "properties": {"device": _TEXT}},
                "unbacked": {
                    "type": "object", "required": ["fields", "reason"],
                    "additionalProperties": False,
                    "properties": {
                        "fields": {"type": "array", "minItems": 1, "uniqueItems": True,
                                   "items": {"enum": list(CHECKED_FIELDS)}},
                        "reason": {"type": "string", "minLength": 20}}},
            },
        },
        # a record of one model names it; one of no single model (spaces, the similarity
        # of two models, static embeddings, a diagnostic) names them in its result, and its
        # profile in its configuration
        "model": {"type": ["object", "null"],  # required and properties: objects only
                  "required": ["modification", "seed", "fingerprint", "profile"],
                  "properties": {"modification": _TEXT, "seed": {"type": "integer"},
                                 "fingerprint": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
                                 "profile": _TEXT}},
        "config": {"type": "object"},
    },
    "if": {"properties": {"model": {"type": "null"}}},
    "then": {"properties": {"config": {"required": ["profile"],
                                       "properties": {"profile": _TEXT}}}},
}

_VALIDATOR = Draft202012Validator(RECORD_SCHEMA)


@dataclass(frozen=True)
class Problem:
    """One reason one file is not a record the lab can stand behind."""

    path: Path
    field: str
    message: str

    def line(self) -> str:
        return f"{self.path}: {self.field}: {self.message}"


def _field(error: Any) -> str:
    """The dotted field an error is about (a missing key: its parent's path plus the key)."""
    parts = [str(part) for part in error.absolute_path]
    if error.validator == "required":
        missing = next((key for key in error.validator_value
                        if isinstance(error.instance, Mapping) and key not in error.instance),
                       None)
        if missing is not None:
            parts.append(missing)
    return ".".join(parts) or "(record)"


def _value(data: Mapping[str, Any], field: str) -> Any:
    node: Any = data
    for part in field.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _non_finite(tree: Any, where: str = "") -> Iterator[str]:
    """The dotted fields holding NaN or an infinity (JSON's ``NaN``, which Python reads)."""
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            yield from _non_finite(value, f"{where}.{key}" if where else str(key))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            yield from _non_finite(value, f"{where}.{index}" if where else str(index))
    elif isinstance(tree, float) and not math.isfinite(tree):
        yield where or "(record)"


def check_document(path: Path, data: Any) -> list[Problem]:
    """The schema's complaints about one parsed record, less the gaps it declares unbacked,
    and what reading it would refuse (NaN, a measured value that is no number)."""
    if not isinstance(data, Mapping):
        return [Problem(path, "(record)", "not a JSON object")]
    problems: dict[str, Problem] = {
        field: Problem(path, field, "not a finite number; a record holds finite numbers "
                       "(measure it again, or delete the record)")
        for field in _non_finite(data)}
    if not problems and isinstance(data.get("result"), Mapping):
        try:
            check_numbers(path, data["result"])
        except UserError as err:
            problems["result"] = Problem(path, "result", str(err).removeprefix(f"{path}: "))
    for error in sorted(_VALIDATOR.iter_errors(data), key=lambda e: list(e.absolute_path)):
        field = _field(error)
        problems.setdefault(field, Problem(path, field, _message(error)))
    unbacked = _value(data, "provenance.unbacked")
    declared = set(unbacked.get("fields", [])) if isinstance(unbacked, Mapping) else set()
    for field in sorted(declared):
        if field in problems:
            del problems[field]
        elif (field.startswith("model.") and data.get("model") is None) \
                or (field == "config.profile" and data.get("model") is not None):
            problems[field] = Problem(path, "provenance.unbacked", f"names {field}, which a "
                                      "record of this shape is not asked for")
        else:
            problems[field] = Problem(path, "provenance.unbacked", f"names {field}, but the "
                                      f"record has it ({_value(data, field)!r}): drop it from "
                                      "the unbacked fields")
    return list(problems.values())


def _message(error: Any) -> str:
    """The schema's reason in a few words."""
    if error.validator == "required":
        return "missing (a record names it; or list it in provenance.unbacked with the reason)"
    return " ".join(str(error.message).split())[:160]


#: scripts/lanes.sh's list of the lanes not finished: lane, host, start, checkpoint, command
LANES_FILE = "lanes.tsv"


def check_lanes_file(path: Path) -> list[Problem]:
    """The lanes' list: each line five tab-separated fields, the first a lane number."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return [Problem(path, "(file)", f"not readable as text ({err})")]
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split("\t", 4)  # the command, last, may hold tabs of its own
        if len(fields) != 5 or not fields[0].isdigit():
            problems.append(Problem(path, f"(line {number})", "not a lane: lane number, host, "
                                    "start, checkpoint and command, tab-separated"))
    return problems


#: more than any record holds (the largest are some 16 KB): a stray dump, not read whole
MAX_FILE_BYTES = 16 * 1024 * 1024


def check_file(path: Path) -> list[Problem]:
    """One file under results/: a JSON record, the run ledger or the lanes' list."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        return [Problem(path, "(file)", f"{size} bytes, more than any record or list holds "
                        f"({MAX_FILE_BYTES} at most): not read")]
    if path.name == LANES_FILE:
        return check_lanes_file(path)
    if path.name == LEDGER_LOCK and size == 0:  # the ledger's lock, left by every runner
        return []
    if path.name == LEDGER:
        try:
            read_ledger(path.parent)
        except UserError as err:
            return [Problem(path, "(ledger)", str(err))]
        return []
    if path.suffix != ".json":
        return [Problem(path, "(file)",
                        "neither a .json record, the run ledger nor the lanes' list")]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:  # ValueError: bad JSON, an integer
        # of over 4300 digits; RecursionError: arrays nested some thousand deep
        return [Problem(path, "(record)", f"not readable as JSON ({_first_words(err)})")]
    return check_document(path, data)


def _first_words(err: BaseException) -> str:
    """An error's message on one line, cut short (a decoder's can run to several)."""
    return " ".join(str(err).split())[:200] or type(err).__name__


def check_records(root: Path) -> Iterator[Problem]:
    """Every problem of every file under ``root``, in path order."""
    if not root.is_dir():
        raise UserError(f"{root}: no results folder here (run from the project root, or "
                        "name the folder)")
    inside = root.resolve()
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            target = path.resolve()
            if not target.exists():
                yield Problem(path, "(link)", f"a link to {target}, which does not exist")
                continue
            if not target.is_relative_to(inside):
                yield Problem(path, "(link)", f"a link out of {root} (to {target}): a record "
                              "lies in the results tree, committed with it")
                continue
        if path.is_file():
            yield from check_file(path)
