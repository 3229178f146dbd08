"""How many CPU threads torch uses: the usable cores shared among the processes that run at
once, so that parallel experiments never collapse.

On 2 cores shared with another busy process, a training with two OpenMP threads slowed from
about 1 s to 50–70 s a step: a thread that waits for the others spins, and when
the scheduler takes its core away the whole parallel region waits. The rules, first match:

* ``MULTILAB_THREADS=n``: n threads;
* ``OMP_NUM_THREADS`` (the standard variable) when set: that many;
* otherwise the usable cores (``os.sched_getaffinity``: the CPU set of a container or of
  ``taskset``, not the whole machine's) divided by the processes sharing them:
  ``MULTILAB_WORKERS=k`` when set; one thread inside a ``dvc queue`` worker (a queue exists
  to run several experiments side by side, and ``-j`` is not passed on to them); else all
  of them (the process is alone).

With more than one thread, OpenMP threads wait passively (``OMP_WAIT_POLICY=PASSIVE``, unless
set): a waiting thread sleeps instead of spinning. That changes timing, never results. The
thread count itself can change float reduction order: bit-identical runs need the same count
(docs/RELIABILITY.md). Standard library only: it runs before torch is imported, because
OpenMP reads its variables once.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from multilab.errors import UserError

log = logging.getLogger(__name__)

THREADS_VARIABLE = "MULTILAB_THREADS"
WORKERS_VARIABLE = "MULTILAB_WORKERS"
OMP_THREADS = "OMP_NUM_THREADS"
OMP_WAIT = "OMP_WAIT_POLICY"
#: Set by DVC for every ``dvc exp run``; a queued (or ``--temp``) one runs outside DVC_ROOT.
DVC_EXP_NAME, DVC_ROOT = "DVC_EXP_NAME", "DVC_ROOT"
QUEUE_WORKSPACES = Path(".dvc", "tmp", "exps")  # DVC's temporary copies of the repository


@dataclass(frozen=True)
class ThreadChoice:
    """The number of torch threads and the rule that chose it (logged)."""

    threads: int
    why: str


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _positive(environ: Mapping[str, str], name: str) -> int | None:
    """The whole number >= 1 in ``environ[name]`` (OpenMP's first level for a list), or None."""
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw.split(",")[0])
    except ValueError:
        value = 0
    if value < 1:
        raise UserError(f"{name} must be a whole number >= 1, not {raw!r}")
    return value


def in_dvc_queue(environ: Mapping[str, str], cwd: Path) -> bool:
    """True inside a queued (or ``--temp``) ``dvc exp run``: DVC sets ``DVC_ROOT`` to the
    user's repository and runs the stage in a temporary copy under ``.dvc/tmp/exps``."""
    if DVC_EXP_NAME not in environ or DVC_ROOT not in environ:
        return False
    root, here = Path(environ[DVC_ROOT]).resolve(), cwd.resolve()
    return not here.is_relative_to(root) or here.is_relative_to(root / QUEUE_WORKSPACES)


def choose_threads(environ: Mapping[str, str], cores: int, cwd: Path) -> ThreadChoice:
    """The number of threads by the rules of the module docstring."""
    if (chosen := _positive(environ, THREADS_VARIABLE)) is not None:
        return ThreadChoice(chosen, f"{THREADS_VARIABLE}={chosen}")
    if (chosen := _positive(environ, OMP_THREADS)) is not None:
        return ThreadChoice(chosen, f"{OMP_THREADS}={chosen}")
    if (workers := _positive(environ, WORKERS_VARIABLE)) is not None:
        return ThreadChoice(max(1, cores // workers),
                            f"{cores} usable cores / {WORKERS_VARIABLE}={workers}")
    if in_dvc_queue(environ, cwd):
        return ThreadChoice(1, "a dvc queue worker: one thread per queued experiment")
    return ThreadChoice(max(1, cores), f"{cores} usable cores, one process")


def apply_threads(choice: ThreadChoice, environ: MutableMapping[str, str]) -> None:
    """Set OpenMP's variables for ``choice``; torch reads them when it is imported."""
    environ[OMP_THREADS] = str(choice.threads)
    if choice.threads > 1:
        environ.setdefault(OMP_WAIT, "PASSIVE")


def configure_threads(environ: MutableMapping[str, str] | None = None) -> ThreadChoice | None:
    """Choose and apply the thread count before torch is imported; None (nothing changed)
    when torch is already loaded (a test or a notebook that set its own count)."""
    environ = os.environ if environ is None else environ
    choice = choose_threads(environ, usable_cores(), Path.cwd())
    if "torch" in sys.modules:
        log.info("torch is already imported: keeping its %s", OMP_THREADS)
        return None
    apply_threads(choice, environ)
    log.info("torch threads: %d (%s)", choice.threads, choice.why)
    return choice
