"""The exceptions the command line turns into one line instead of a traceback.

``UserError`` is anything the user can fix by changing an input: a bad value in
``params.yaml`` or on the command line, a missing or damaged file (corpus, checkpoint, model
directory), a tracking server that does not answer. The message names the bad value and the
valid ones or the command that fixes it; ``multilab`` prints it as one line and exits 2.
"""

from __future__ import annotations

import errno
import os


class UserError(ValueError):
    """A problem the user fixes by changing an input; the message says how."""


class Terminated(BaseException):
    """SIGTERM turned into an exception (by :mod:`multilab.stops`) so the run ends KILLED and the
    command line can say so in one line. A ``BaseException``, as ``KeyboardInterrupt``: a
    library's ``except Exception`` must not wrap it (MLflow's store turned a SIGTERM that
    landed while a step was being logged into an ``MlflowException``: the run ended FAILED)."""


class StoppedEarly(Exception):
    """``train_model(stop_after_step=…)`` ended a run on purpose (the resume tests' stand-in
    for a kill): its MLflow run ends KILLED and its last checkpoint resumes it."""


#: errno → what to do; the message of :func:`storage_problem`
STORAGE_ERRORS = {
    errno.ENOSPC: "free some space (or point paths.* in params.yaml elsewhere) and run the "
                  "same command again; complete files and checkpoints are kept",
    errno.EDQUOT: "free some of your quota and run the same command again",
    errno.EROFS: "the file system is read-only: point paths.* in params.yaml at a writable "
                 "folder",
    errno.EACCES: "make it writable or point paths.* in params.yaml at a writable folder",
    errno.EPERM: "make it writable or point paths.* in params.yaml at a writable folder",
    errno.EFBIG: "the file is larger than this process may write (a file-size limit, "
                 "`ulimit -f`, or the file system's largest file): raise the limit or point "
                 "paths.* in params.yaml elsewhere and run the same command again",
}
_STORAGE_TEXT = {"No space left on device": errno.ENOSPC, "database or disk is full": errno.ENOSPC,
                 "Read-only file system": errno.EROFS, "readonly database": errno.EROFS,
                 "Permission denied": errno.EACCES, "File too large": errno.EFBIG}


def storage_problem(err: BaseException) -> str | None:
    """One line for an exception caused by a full, read-only or forbidden output, wherever
    in its chain the ``OSError`` is (torch, safetensors, SQLite wrap it); None otherwise."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in STORAGE_ERRORS:
            where = f"{current.filename}: " if current.filename else ""
            return (f"{where}{current.strerror or os.strerror(current.errno)}; "
                    f"{STORAGE_ERRORS[current.errno]}")
        for text, code in _STORAGE_TEXT.items():
            if text in str(current):
                return f"{text}; {STORAGE_ERRORS[code]}"
        current = current.__cause__ or current.__context__
    return None
