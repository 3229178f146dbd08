"""The benchmarks' shared profiler breakdown reads real events (benchmarks/common.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from common import op_seconds


def test_op_seconds_names_the_matrix_product_of_a_step_and_counts_each_step() -> None:
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    calls = []

    def step() -> None:
        calls.append(1)
        torch.mm(a, b).relu_()

    seconds = op_seconds(step, steps=3)
    assert len(calls) == 4  # one untimed, three profiled
    assert seconds["aten::mm"] > 0 and "aten::relu_" in seconds
