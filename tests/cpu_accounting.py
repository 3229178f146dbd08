"""Where the test suite's CPU goes, whatever the machine's load: with ``MULTILAB_TEST_CPU_LOG``
set to a file, every test phase (setup, call, teardown) appends one tab-separated line —
test id, phase, CPU seconds of the worker process, CPU seconds of the processes it started
and waited for (``multilab``, ``dvc``, ``git``, an ``mlflow server`` stopped in that phase),
wall seconds, worker. CPU seconds hardly change with the load that makes wall times useless on
a shared 2-core machine, and their sum is what two quiet workers share; docs/PERFORMANCE.md
("The test suite and CI") reads them. Off (no file named): nothing is measured."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

LOG_VARIABLE = "MULTILAB_TEST_CPU_LOG"


def _cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _measured(item: pytest.Item, phase: str) -> Iterator[None]:
    log = os.environ.get(LOG_VARIABLE)
    if not log:
        yield
        return
    before = (_cpu_seconds(resource.RUSAGE_SELF), _cpu_seconds(resource.RUSAGE_CHILDREN),
              time.perf_counter())
    yield
    own = _cpu_seconds(resource.RUSAGE_SELF) - before[0]
    children = _cpu_seconds(resource.RUSAGE_CHILDREN) - before[1]
    wall = time.perf_counter() - before[2]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with Path(log).open("a") as handle:  # one short line per append: workers never interleave
        handle.write(f"{item.nodeid}\t{phase}\t{own:.2f}\t{children:.2f}\t{wall:.2f}\t{worker}\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _measured(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _measured(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield from _measured(item, "teardown")
