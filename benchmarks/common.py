"""What every benchmark needs: a real project (corpus + vocabulary) and a record of the machine.

Benchmarks run on the real corpus, not a toy: either the project's own ``artifacts/`` (when
``dvc repro`` has built them) or a copy built from the pinned Bible database in a temporary
folder, as ``dvc repro corpus vocab`` builds them
(:func:`multilab.data.project.build_project_data`, about 10 s).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers

from multilab.config import Config
from multilab.data.project import build_project_data
from multilab.files import write_text
from multilab.resolve import load_config

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params.yaml"
RESULTS = ROOT / "benchmarks" / "results"
PATH_KEYS = ("data", "artifacts", "reports", "metrics", "mlruns", "results")


def project_config(project: Path | None, overrides: dict[str, Any] | None = None) -> Config:
    """The quick-profile config on a built corpus + vocabulary.

    ``project=None`` uses the repository's ``artifacts/`` if built, else builds into a fresh
    temporary folder; a given folder is reused (and built into if empty).
    """
    overrides = dict(overrides or {})
    if project is None and (ROOT / "artifacts" / "vocab" / "bilingual").exists():
        return load_config(PARAMS, overrides | {"paths": {k: str(ROOT / k) for k in PATH_KEYS}})
    root = project or Path(tempfile.mkdtemp(prefix="multilab-bench-"))
    cfg = load_config(PARAMS, overrides | {"paths": {k: str(root / k) for k in PATH_KEYS}})
    if not (cfg.paths.vocab / "bilingual").exists():
        build_project_data(cfg)
    return cfg


def project_root(cfg: Config) -> Path:
    """The folder a config's paths live in (to hand the same project to a subprocess)."""
    return cfg.paths.artifacts.parent


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def git_state() -> str:
    """HEAD commit, with ``+dirty`` when the working tree has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def cpu_seconds(argv: list[str], env: dict[str, str]) -> float:
    """User + system CPU seconds of one ``multilab`` command (a child process): the
    measure on a shared machine, where wall time depends on what else runs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "multilab.cli", *argv], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"multilab {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def train_record(results: Path) -> dict[str, Any]:
    """The result of the newest train record under ``results`` (a scratch project's)."""
    newest = max(results.rglob("train.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(newest.read_text())["result"]


def load_average() -> list[float]:
    """1/5/15-minute load averages: the CPU is shared, so every result says how busy it was."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    return {
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu_model": cpu_model(),
        "nproc": os.cpu_count(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "torch_threads": torch.get_num_threads(),
        "git": git_state(),
        "load_average_at_start": load_average(),
    }


def peak_rss_mib() -> float:
    """This process's peak resident set size (VmHWM) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def write_json(path: Path, record: dict[str, Any]) -> Path:
    """A results file: in the order the benchmark recorded it (not sorted), written atomically."""
    return write_text(path, json.dumps(record, indent=2, default=str) + "\n")


#: aten ops that only describe memory (views, metadata) and launch no kernel on a GPU
NO_KERNEL = ("view", "reshape", "as_strided", "t", "transpose", "expand", "slice", "select",
             "unsqueeze", "squeeze", "permute", "detach", "alias", "empty", "empty_like",
             "empty_strided", "unbind", "split", "split_with_sizes", "chunk", "lift_fresh",
             "_unsafe_view", "resolve_conj", "resolve_neg", "is_nonzero", "item",
             "_local_scalar_dense", "result_type", "size", "stride", "numel", "to", "_to_copy")


def op_seconds(step: Callable[[], object], steps: int) -> dict[str, float]:
    """Self CPU seconds a step of each profiled event (torch.profiler's key averages) over
    ``steps`` steps after one untimed one: what the step benchmarks' breakdowns sum by kind."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    return {event.key: event.self_cpu_time_total / 1e6 / steps for event in prof.key_averages()}
