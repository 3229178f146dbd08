"""Every file multilab writes appears whole or not at all.

A reader (a DVC stage, ``multilab report``, a resumed training) must never see half a file:
a killed process would otherwise leave a truncated JSON that parses as nothing, or a CSV that
parses as fewer rows. Each writer here fills a temporary file next to the target (same
folder, so the same file system), flushes it to disk and renames it over the target, which
POSIX makes atomic. Folders are swapped in the same way by :func:`replace_dir`.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from multilab.errors import UserError


def parse_yaml(text: str) -> Any:
    """YAML text as Python data, parsed by libyaml where PyYAML was built with it (ten times
    faster than PyYAML's pure-Python parser on the claims and study files; the same safe
    constructors, so the same data), else by that parser. Errors are ``yaml.YAMLError``."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _temporary(path: Path) -> Path:
    """A sibling name of our own: a concurrent writer of the same file has another (pid)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_temporaries(path: Path) -> None:
    """Remove the temporaries of ``path`` left by writers that were killed (SIGKILL, power
    loss: no cleanup ran), known by their pid being gone; a live writer's is left alone."""
    prefix = f".{path.name}."
    for stale in path.parent.glob(f"{glob.escape(prefix)}*.tmp"):
        pid = stale.name[len(prefix):-len(".tmp")]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            stale.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_open(path: Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Open ``path`` for writing (text as UTF-8, or ``"wb"``); it appears only on success.

    The parent folder is created. On any exception, Ctrl-C included, the temporary file is
    removed and the previous ``path`` (if any) stays untouched; a temporary of ``path`` that
    a killed writer left is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    tmp = _temporary(path)
    try:
        with tmp.open(mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())  # the rename must not outrun the data (power loss)
        tmp.replace(path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        if err.filename is None and err.errno is not None:  # a write's own error names no
            # file (a full disk at write or fsync): the message of it must name this one
            raise OSError(err.errno, err.strerror or os.strerror(err.errno), str(path)) from err
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) atomically; returns ``path``."""
    with atomic_open(path) as handle:
        handle.write(text)
    return Path(path)


def copy_file(source: Path, target: Path) -> Path:
    """Copy ``source`` to ``target`` atomically (``shutil.copyfile`` writes in place)."""
    with atomic_open(target, "wb") as handle, Path(source).open("rb") as original:
        shutil.copyfileobj(original, handle)
    return Path(target)


def write_json(path: Path, data: Any) -> Path:
    """The project's one JSON format (indent 2, sorted keys, final newline), atomically."""
    return write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def replace_dir(staging: Path, target: Path) -> None:
    """Swap a finished ``staging`` folder in for ``target`` (two renames, no partial state).

    A reader sees the old folder or the new one, never a mix of both. Only between the two
    renames (microseconds) is ``target`` absent; a kill there leaves the old folder under
    ``.<name>.old-<pid>``.
    """
    if not target.exists():
        staging.rename(target)
        return
    retired = target.with_name(f".{target.name}.old-{os.getpid()}")
    shutil.rmtree(retired, ignore_errors=True)
    target.rename(retired)
    staging.rename(target)
    shutil.rmtree(retired, ignore_errors=True)


def read_utf8(path: Path, fix: str) -> str:
    """The text of ``path``; bytes that are not UTF-8 are one line naming the file, the line
    and the byte, and ``fix`` (what rebuilds the file)."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise UserError(
            f"{path} is not valid UTF-8 (line {line}, byte {err.start}: "
            f"{data[err.start:err.end]!r}, {err.reason}); {fix}"
        ) from err


#: screens (the report, the README, MLflow) read the PNG; print reads the PDF beside it, whose
#: lines and text are vectors and whose images (heat maps) are at print resolution
SCREEN_DPI, PRINT_DPI = 110, 300
#: ``MULTILAB_PRINT_FIGURES=no``: figures as PNG only, no PDF beside each (a PDF costs about
#: as much as its PNG; the test suite, whose figures nobody prints, sets it)
PRINT_VARIABLE = "MULTILAB_PRINT_FIGURES"
PRINT_CHOICES = ("yes", "no")


def print_copies(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether :func:`save_figure` writes the PDF beside each PNG (``MULTILAB_PRINT_FIGURES``,
    ``yes`` unless set); another value is one line naming the valid ones."""
    chosen = environ.get(PRINT_VARIABLE, "").strip() or "yes"
    if chosen not in PRINT_CHOICES:
        raise UserError(f"{PRINT_VARIABLE}={chosen!r} is not one of {', '.join(PRINT_CHOICES)}")
    return chosen == "yes"


def save_figure(figure: Any, path: Path, dpi: int = SCREEN_DPI) -> Path:
    """A matplotlib figure as ``path`` (a PNG) and the same figure as a PDF beside it (unless
    :func:`print_copies` says no), each written atomically; returns the PNG's path. A figure
    made without pyplot gets an Agg canvas (no GUI is ever touched)."""
    if figure.canvas is None or type(figure.canvas).__name__ == "FigureCanvasBase":
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(figure)
    path = Path(path)
    with atomic_open(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=dpi)
    if not print_copies():
        return path
    with atomic_open(path.with_suffix(".pdf"), "wb") as handle:
        # no creation date: the same figure gives the same bytes (a report run twice, or
        # stopped half-way, leaves the earlier files as they were)
        figure.savefig(handle, format="pdf", dpi=PRINT_DPI, metadata={"CreationDate": None})
    return path
