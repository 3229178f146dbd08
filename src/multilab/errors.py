"""The exceptions the command line turns into one line instead of a traceback.

``UserError`` is anything the user can fix by changing an input: a bad value in
``params.yaml`` or on the command line, a missing or damaged file (corpus, checkpoint, model
directory), a tracking server that does not answer. The message names the bad value and the
valid ones or the command that fixes it; ``multilab`` prints it as one line and exits 2.
"""

from __future__ import annotations


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
