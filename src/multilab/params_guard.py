"""The first stage of the DVC pipeline: ``params.yaml`` checked before any stage runs.

DVC deletes a stage's outputs before running its command, so a command that refuses a bad
value (``dvc exp run -S modification=lang-poss``) has already lost its outputs. The ``check``
stage (``multilab check --stage``, which depends on params.yaml itself) runs first because
the pipeline's first stages depend on its marker file: a refused value stops ``dvc repro``
there, before anything is deleted.

``dvc exp run -S`` writes the value into ``params.yaml`` before any stage runs. When the value
is refused, the file is put back byte for byte as it was at the last accepted check (or in
the experiment's baseline commit), but only when that is certain to undo DVC's write and
nothing else: every value that differs is refused on its own, and DVC's own rewrite of the
earlier file with those values gives the current file exactly. Anything else (an edit by
hand) is left for the user.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from multilab.errors import UserError
from multilab.files import parse_yaml, write_text

#: the marker the pipeline's first stages depend on; the same text at every accepted check,
#: so its rewrite never makes a later stage stale
MARKER_TEXT = "params.yaml accepted by `multilab check --stage`\n"
#: the copy of params.yaml at its last accepted check (beside the marker)
ACCEPTED_NAME = "params.accepted.yaml"
#: set by ``dvc exp run`` for the commands of its stages (and only then)
EXP_BASELINE_ENV = "DVC_EXP_BASELINE_REV"
#: a key the new file no longer has
_REMOVED = object()


def accepted(params_path: Path, marker: Path) -> None:
    """Write the marker and keep a copy of the accepted ``params.yaml`` beside it."""
    write_text(marker.parent / ACCEPTED_NAME, params_path.read_text(encoding="utf-8"))
    write_text(marker, MARKER_TEXT)


def restore_refused(params_path: Path, marker: Path, refuses: Callable[[dict], bool],
                    environ: dict[str, str] | None = None,
                    profile: str | None = None) -> str | None:
    """After a refused value under ``dvc exp run``: put ``params.yaml`` back as it was before
    DVC wrote the value; returns what it did (a sentence) or None when it left the file.

    ``refuses(data)`` says whether a parameter tree is refused; a value that ``profile``
    sets too (:func:`set_by_profile`) counts as refused. Candidates for "as it was": the
    copy of the last accepted check, then the experiment's baseline commit.
    """
    environ = dict(os.environ if environ is None else environ)
    if EXP_BASELINE_ENV not in environ:  # `dvc repro` or by hand: DVC wrote nothing
        return None
    current_text = params_path.read_text(encoding="utf-8")
    current = parse_yaml(current_text)
    for source, text in _candidates(params_path, marker, environ[EXP_BASELINE_ENV]):
        before = parse_yaml(text)
        changed = _changed_leaves(before, current)
        if not changed or not all(
                (profile and set_by_profile(before, profile, key) is not _REMOVED)
                or refuses(_with(before, key, value)) for key, value in changed):
            continue
        if _dvc_rewrite(text, changed) != current_text:
            continue
        write_text(params_path, text)
        keys = ", ".join(key for key, _ in changed)
        return f"params.yaml put back as it was before `-S {keys}=...` (from {source})"
    return None


def set_by_profile(tree: dict, profile: str, key: str) -> Any:
    """The value profile ``profile`` of ``tree`` gives the dotted top-level ``key`` (which
    then never reaches a run: a profile wins over the top level), else :data:`_REMOVED`."""
    if key.split(".")[0] in ("profile", "profiles"):
        return _REMOVED
    node: Any = (tree.get("profiles") or {}).get(profile)
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _REMOVED
        node = node[part]
    return node


def shadowed_by_the_profile(params_path: Path, marker: Path, profile: str,
                            environ: dict[str, str] | None = None) -> str | None:
    """Under ``dvc exp run``: a top-level value ``-S`` changed that the active profile sets
    to another value would be recorded as if it had been used; the sentence that says so and
    what to set instead, or None. (``dvc exp run -S train.epochs=7`` under the quick
    profile, whose 25 epochs win: ``-S profiles.quick.train.epochs=7`` is what changes it.)"""
    environ = dict(os.environ if environ is None else environ)
    if EXP_BASELINE_ENV not in environ:
        return None
    current = parse_yaml(params_path.read_text(encoding="utf-8"))
    for _, text in _candidates(params_path, marker, environ[EXP_BASELINE_ENV])[:1]:
        changed = dict(_changed_leaves(parse_yaml(text), current))
        for key, value in changed.items():
            wins = set_by_profile(current, profile, key)
            in_profile = f"profiles.{profile}.{key}"
            moved_too = any(in_profile == k or in_profile.startswith(f"{k}.") for k in changed)
            if value is not _REMOVED and wins is not _REMOVED and wins != value and \
                    not moved_too:  # both parts changed: a reset, or --queue's two writes
                return (f"{key} = {value!r} has no effect: profile {profile!r} sets {key} = "
                        f"{wins!r}, which wins; set -S {in_profile}={hydra_value(value)} instead")
    return None


def _candidates(params_path: Path, marker: Path, baseline: str) -> list[tuple[str, str]]:
    found = []
    copy = marker.parent / ACCEPTED_NAME
    if copy.is_file():
        found.append(("the last accepted check", copy.read_text(encoding="utf-8")))
    try:
        root = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=params_path.parent,
                                   capture_output=True, text=True, check=True).stdout.strip())
        name = params_path.resolve().relative_to(root.resolve()).as_posix()
        shown = subprocess.run(["git", "show", f"{baseline}:{name}"], cwd=root,
                               capture_output=True, text=True, check=True)
        found.append((f"commit {baseline[:7]}", shown.stdout))
    except (OSError, ValueError, subprocess.CalledProcessError):
        pass  # not a git checkout, or the file is new: the copy is the only candidate
    return found


def _changed_leaves(before: Any, after: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Dotted keys whose value differs (a list is one value); a removed key's value is
    :data:`_REMOVED`."""
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return [] if before == after else [(prefix.rstrip("."), after)]
    changed = []
    for key in [*before, *(k for k in after if k not in before)]:
        if key not in after:
            changed.append((f"{prefix}{key}", _REMOVED))
        elif key not in before:
            changed.append((f"{prefix}{key}", after[key]))
        else:
            changed += _changed_leaves(before[key], after[key], f"{prefix}{key}.")
    return changed


def _with(tree: dict, key: str, value: Any) -> dict:
    """A copy of ``tree`` with one dotted key set (or removed)."""
    import copy

    result = copy.deepcopy(tree)
    node = result
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    if value is _REMOVED:
        node.pop(leaf, None)
    else:
        node[leaf] = value
    return result


def _dvc_rewrite(text: str, changed: list[tuple[str, Any]]) -> str | None:
    """``text`` as ``dvc exp run -S`` writes it with these values (DVC's own code), or None
    when DVC cannot be imported or refuses them."""
    try:
        from dvc.utils.hydra import apply_overrides
    except ImportError:
        return None
    overrides = [f"~{key}" if value is _REMOVED else f"++{key}={hydra_value(value)}"
                 for key, value in changed]
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "params.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            apply_overrides(path, overrides)
        except Exception:  # DVC's or Hydra's own errors: not a rewrite DVC made
            return None
        return path.read_text(encoding="utf-8")


def hydra_value(value: Any) -> str:
    """A value (as YAML read it) in the override grammar of ``dvc exp run -S`` (Hydra's):
    strings quoted, lists and mappings spelled out."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(hydra_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {hydra_value(item)}" for key, item in value.items()) \
            + "}"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def check_stage(params_path: Path, marker: Path, validate: Callable[[], Any],
                refuses: Callable[[dict], bool]) -> Any:
    """The ``params`` stage: ``validate()`` returns the Config or raises :class:`UserError`
    on a bad value; accepted, the marker and the copy are written; refused, or a value of
    ``dvc exp run -S`` that the profile would override (:func:`shadowed_by_the_profile`), the
    marker stays absent (so no later stage can run), params.yaml is put back where DVC wrote
    the value, and the error says so."""
    try:
        result = validate()
    except UserError as err:
        marker.unlink(missing_ok=True)
        restored = restore_refused(params_path, marker, refuses)
        if restored:
            raise UserError(f"{err}; {restored}") from err
        raise
    shadowed = shadowed_by_the_profile(params_path, marker, result.profile)
    if shadowed:
        marker.unlink(missing_ok=True)
        restored = restore_refused(params_path, marker, refuses, profile=result.profile)
        raise UserError(f"{shadowed}; {restored}" if restored else shadowed)
    accepted(params_path, marker)
    return result
