"""Results as data: the small record every number-producing command leaves in ``results/``.

Only git survives a session, and an MLflow store can be lost, so a record is the lasting form
of a run: the command's whole result (every layer, language pair, curve point), which model it
measured (modification, seed, fingerprint, profile), under which configuration, and where and
when (commit, a dirty source tree, date, device, threads). Study tables are computed from
records alone; a number without a record cannot appear in a generated table.

Layout (one folder per model, one file per command and qualifier)::

    results/<experiment>/<modification>/seed<N>-<fingerprint>[-<device>]/<kind>[.<qualifier>].json
    results/<experiment>/<kind>/<qualifier>.json          (no single lab model: word order …)

``-<device>``: the kind of device the model trained on where it is not the CPU
(``seed43-436afb8cc5ebb860-cuda``; the done file's ``device``). The fingerprint hashes what
decides the weights, not where they were computed, so a CPU rerun of a GPU's model has the
GPU model's fingerprint: without the suffix its records would replace the GPU's.

Records are written atomically; a record of the same model, kind and qualifier replaces the
older one (the same measurement, measured again). A file that does not parse as a record is
refused in one line naming it.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from multilab import stops
from multilab.errors import UserError
from multilab.files import write_json
from multilab.source import source_state, tracked_by_git

SCHEMA = 1
#: the kind of device whose models' records folders carry no device suffix (model_folder)
CPU_KIND = "cpu"
#: The commands that leave records (a record's ``kind``).
KINDS = ("train", "spaces", "evaluate", "downstream", "mrr", "static", "similarity", "translate",
         "model-order", "word-order", "probe", "variant",
         "diagnostic")  # diagnostic: a script's check that no study table reads (scripts/)
_REQUIRED = {"schema": int, "kind": str, "qualifier": str, "model": (dict, type(None)),
             "config": dict, "provenance": dict, "result": dict}
_SAFE = re.compile(r"[^A-Za-z0-9._+=-]+")


#: the profiles no study reads (tests and first looks): their records are scratch
SCRATCH_PROFILES = frozenset({"smoke"})
#: the scratch records folder sits beside the committed one, its name with this suffix
#: (``results-scratch/``, ignored by git)
SCRATCH_SUFFIX = "-scratch"


def records_root(results: Path, profile: str) -> Path:
    """Where the records of a run on ``profile`` are written and read: ``results``
    (``paths.results``) itself, except that a profile no study reads (smoke) never writes
    into a folder git tracks (the committed results/): its records go to the ignored
    ``results-scratch/`` beside it. Every writer and reader of records asks here, so that
    a smoke study's runner, report and records agree, and a smoke run leaves the committed
    tree and the documents generated from it as they were."""
    results = Path(results)
    if profile in SCRATCH_PROFILES and tracked_by_git(results):
        name = results.name or results.resolve().name
        return results.parent / f"{name}{SCRATCH_SUFFIX}"
    return results


def experiment_records(results: Path, profile: str, experiment: str) -> Path:
    """The folder of one experiment's records, ``results/<experiment>/`` (a smoke run's in
    the scratch folder: :func:`records_root`): where ``dvc repro``'s commands write theirs."""
    return records_root(results, profile) / safe_name(experiment)


def records_roots(results: Path, profiles: Iterable[str]) -> list[Path]:
    """The records folders that runs on ``profiles`` use (:func:`records_root`), each once,
    the committed one first."""
    roots: list[Path] = []
    for profile in sorted(set(profiles), key=lambda name: name in SCRATCH_PROFILES):
        root = records_root(results, profile)
        if root not in roots:
            roots.append(root)
    return roots


def profile_records(results: Path, profiles: Iterable[str]) -> list[Record]:
    """Every record that studies on ``profiles`` read: those of each folder
    :func:`records_roots` names (for the committed studies, results/ alone)."""
    return [record for root in records_roots(results, profiles)
            for record in iter_records(root)]


def safe_name(text: str) -> str:
    """A path component from a label: ``lang-pos;no-random`` → ``lang-pos+no-random``; never
    ``.``, ``..`` or a hidden name (leading and trailing dots go, as slashes do)."""
    return _SAFE.sub("-", text.replace(";", "+")).strip("-.") or "-"


@dataclass(frozen=True)
class Record:
    path: Path
    data: dict[str, Any]

    @property
    def kind(self) -> str:
        return self.data["kind"]

    @property
    def model(self) -> dict[str, Any] | None:
        return self.data["model"]

    @property
    def device(self) -> str:
        return self.data["provenance"].get("machine", {}).get("device", "unknown")

    @property
    def metrics(self) -> dict[str, float]:
        """Every number of the result under its dotted path (``metrics.mu``,
        ``test.s.accuracy``, ``trained.3.mrr``)."""
        return flatten(self.data["result"])


def flatten(tree: Any, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of nested dicts and lists, keyed by dotted paths (booleans left out)."""
    out: dict[str, float] = {}
    if isinstance(tree, Mapping):
        items: Any = ((str(k), v) for k, v in tree.items())
    elif isinstance(tree, list | tuple):
        items = ((str(i), v) for i, v in enumerate(tree))
    else:
        if isinstance(tree, int | float) and not isinstance(tree, bool):
            out[prefix] = float(tree)
        return out
    for key, value in items:
        out.update(flatten(value, f"{prefix}.{key}" if prefix else key))
    return out


def machine() -> dict[str, Any]:
    """Where a number was measured: results are bit-identical only on the same kind of CPU,
    and CPU and GPU runs differ."""
    cpu = platform.processor() or platform.machine()
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            text = info.read()
        cpu = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                    if line.startswith("model name")), cpu)
        flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    except OSError:
        pass
    described: dict[str, Any] = {"cpu": cpu, "avx512": " avx512f" in flags,
                                 "python": platform.python_version(), "device": f"cpu: {cpu}"}
    torch = sys.modules.get("torch")  # only when the command used it: no import here
    if torch is not None:
        described["torch"] = torch.__version__
        described["threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            described["device"] = f"cuda: {torch.cuda.get_device_name(0)}"
    return described


#: names the commit of a source copy that has no .git (scripts/gpu_lease.sh sets it)
def provenance() -> dict[str, Any]:
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else ""
    return source_state() | {"date": now, "machine": machine(), "command": command,
                             "pid": os.getpid()}


def record_path(root: Path, experiment: str, kind: str, model: Mapping[str, Any] | None,
                qualifier: str = "") -> Path:
    name = f"{kind}.{safe_name(qualifier)}.json" if qualifier else f"{kind}.json"
    if model is None:
        return root / safe_name(experiment) / kind / (
            f"{safe_name(qualifier)}.json" if qualifier else f"{kind}.json")
    folder = model_folder(model)
    path = root / safe_name(experiment) / safe_name(str(model["modification"])) / folder / name
    if not path.resolve().is_relative_to(Path(root).resolve()):  # every part sanitised: never
        raise ValueError(f"record path {path} is outside {root}")
    return path


def model_identity(done: Mapping[str, Any]) -> dict[str, Any]:
    """The model a record measures, from its ``multilab.json`` (the done file); its
    ``device`` (the kind it trained on) where the done file names one (models trained
    before it was kept do not)."""
    keys = ("modification", "paper_id", "seed", "profile", "fingerprint", "run_id", "steps",
            "weights_sha256")
    identity = {key: done.get(key) for key in keys}
    if done.get("device"):
        identity["device"] = str(done["device"])
    return identity


def model_folder(model: Mapping[str, Any]) -> str:
    """A model's records folder: ``seed<N>-<fingerprint>``, ``-<device>`` after it where the
    model trained on another kind of device than the CPU (see the module's docstring)."""
    folder = f"seed{model['seed']}-{model.get('fingerprint') or 'unknown'}"
    device = str(model.get("device") or CPU_KIND)
    return safe_name(folder if device == CPU_KIND else f"{folder}-{device}")


def write_record(root: Path, experiment: str, kind: str, result: Mapping[str, Any], *,
                 model: Mapping[str, Any] | None, config: Mapping[str, Any],
                 qualifier: str = "", origin: Mapping[str, Any] | None = None) -> Path:
    """Write one record atomically and return its path. ``origin``: the provenance of a
    result measured elsewhere and imported (commit, date, machine, the file it came from)."""
    path, data = record_document(root, experiment, kind, result, model=model, config=config,
                                 qualifier=qualifier, origin=origin)
    with stops.deferred():  # a stop waits for the record: written whole, then raised
        return write_json(path, data)


def record_document(root: Path, experiment: str, kind: str, result: Mapping[str, Any], *,
                    model: Mapping[str, Any] | None, config: Mapping[str, Any],
                    qualifier: str = "", origin: Mapping[str, Any] | None = None
                    ) -> tuple[Path, dict[str, Any]]:
    """The path and content :func:`write_record` would write (an import compares them with
    the record already there before writing anything)."""
    if kind not in KINDS:
        raise ValueError(f"record kind {kind!r}: one of {', '.join(KINDS)}")
    data = {"schema": SCHEMA, "kind": kind, "qualifier": qualifier,
            "model": _plain(model) if model is not None else None, "config": _plain(config),
            "provenance": _plain(origin) if origin is not None else provenance(),
            "result": _plain(result)}
    return record_path(root, experiment, kind, model, qualifier), data


def _plain(value: Mapping[str, Any]) -> dict[str, Any]:
    """JSON-ready: paths, tuples and other values as JSON writes them (paths as text)."""
    return json.loads(json.dumps(dict(value), default=str))


def parse_record(path: Path) -> Record:
    """Read one record; anything that is not one is a one-line UserError naming the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:  # ValueError: bad JSON (UTF-8
        # too), an integer of over 4300 digits; RecursionError: arrays nested too deep
        raise UserError(f"{path}: not a readable results record "
                        f"({' '.join(str(err).split())[:200]})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a results record (a JSON object is needed)")
    for key, kind in _REQUIRED.items():
        if key not in data:
            raise UserError(f"{path}: not a results record (no {key!r}; a record has "
                            f"{', '.join(_REQUIRED)})")
        if not isinstance(data[key], kind):
            raise UserError(f"{path}: {key!r} has the wrong type ({type(data[key]).__name__})")
    if data["schema"] != SCHEMA:
        raise UserError(f"{path}: record schema {data['schema']}; this multilab reads {SCHEMA}")
    if data["kind"] not in KINDS:
        raise UserError(f"{path}: record kind {data['kind']!r}; valid: {', '.join(KINDS)}")
    model = data["model"]
    if model is not None and not {"modification", "seed"} <= model.keys():
        raise UserError(f"{path}: its model names no modification and seed")
    check_numbers(Path(path), data["result"])
    return Record(Path(path), data)


#: the part of a result whose every leaf is a number a table reads (an ``evaluate``
#: record's metrics), and the keys that are one wherever they are (a downstream record's
#: accuracies): a string there was dropped silently
NUMERIC_PARTS = ("metrics",)
NUMERIC_KEYS = ("accuracy", "macro_f1")


def check_numbers(path: Path, result: Mapping[str, Any]) -> None:
    """A record's numbers are numbers: NaN or infinity anywhere (JSON's ``NaN``, which
    Python writes and reads) and a value that is no number where a table reads numbers
    are one line naming the file and the key; a table would drop the value or fail on it."""
    def walk(tree: Any, where: str, numeric: bool) -> None:
        if isinstance(tree, Mapping):
            for key, value in tree.items():
                walk(value, f"{where}.{key}", numeric or (
                    key in NUMERIC_KEYS and not isinstance(value, Mapping | list)))
        elif isinstance(tree, list) and not numeric:
            for index, value in enumerate(tree):
                walk(value, f"{where}.{index}", numeric)
        elif isinstance(tree, float) and not math.isfinite(tree):
            raise UserError(f"{path}: {where} is {tree!r}; a record holds finite numbers "
                            "(measure it again, or delete the record)")
        elif numeric and (isinstance(tree, bool) or not isinstance(tree, int | float)):
            raise UserError(f"{path}: {where} is {tree!r} ({type(tree).__name__}); a "
                            "record's measured values are numbers (int or float)")

    for key, value in result.items():
        walk(value, f"result.{key}", key in NUMERIC_PARTS and isinstance(value, Mapping))


def iter_records(root: Path) -> Iterator[Record]:
    """Every record under ``root``, in path order (deterministic tables)."""
    if not Path(root).is_dir():
        return
    for path in sorted(Path(root).rglob("*.json")):
        yield parse_record(path)
