"""What several test modules share: paths, the smoke configuration, a CPU stand-in for the
Accelerator, and small helpers to set up and inspect projects. Fixtures live in conftest.py;
no test module imports another."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from multilab.config import Config, load_config

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params.yaml"
BIN = Path(sys.executable).parent  # the venv's dvc, multilab, mlflow
DVC = str(BIN / "dvc")


class CpuAccelerator:
    """What the trainer's ``_accumulate`` uses of an Accelerator, on one CPU process; counts
    the backward passes (each is a collective under DDP)."""

    device = "cpu"

    def __init__(self) -> None:
        self.backward_calls = 0

    def autocast(self):
        return contextlib.nullcontext()

    def no_sync(self, model):
        return contextlib.nullcontext()

    def backward(self, loss) -> None:
        self.backward_calls += 1
        loss.backward()


def smoke_config(tmp: Path, **overrides) -> Config:
    """The smoke profile with every path inside ``tmp``."""
    paths = {
        "data": str(tmp / "data"),
        "artifacts": str(tmp / "artifacts"),
        "reports": str(tmp / "reports"),
        "metrics": str(tmp / "metrics"),
        "mlruns": str(tmp / "mlruns"),
    }
    merged = {"profile": "smoke", "paths": paths}
    for key, value in overrides.items():
        merged[key] = value
    return load_config(PARAMS, merged)
