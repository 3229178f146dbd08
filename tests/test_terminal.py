"""What `multilab` prints: the training bar says when it evaluates a curve point,
library bars (weight loading, shard writing) stay silent, and evaluate prints a short table
while the full results go to their JSON file."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from multilab.cli import main
from tests.helpers import cli_args, cli_settings, config_of, link_project, one_torch_thread

pytestmark = pytest.mark.slow  # `multilab train` and `evaluate` of a smoke model


@pytest.fixture(scope="module")
def printed(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`multilab train` (one curve point) and `multilab evaluate` in-process, their output."""
    root = link_project(built_project, tmp_path_factory.mktemp("terminal"))
    settings = cli_settings(root, **{"train.eval_points": "[0.5]", "seeds": "[0]"})
    cfg = config_of(settings)
    outputs = {}
    with one_torch_thread(), pytest.MonkeyPatch.context() as patch:
        patch.delenv("TQDM_DISABLE", raising=False)
        for command in (("train", "--seed", "0"),
                        ("evaluate", str(cfg.paths.model_dir("original", 0)))):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                assert main(cli_args(settings, *command)) == 0
            outputs[command[0]] = (out.getvalue(), err.getvalue())
    return {"cfg": cfg, **outputs}


def test_training_bar_says_when_it_evaluates_a_curve_point(printed: dict) -> None:
    _, err = printed["train"]
    assert "evaluating the curve point on 100 dev sentences" in err
    assert "original s0" in err  # the bar's own name comes back afterwards


def test_library_bars_are_silent(printed: dict) -> None:
    everything = "".join(printed["train"] + printed["evaluate"])
    assert "Writing model shards" not in everything and "Loading weights" not in everything


def test_evaluate_prints_a_short_table_and_writes_the_json(printed: dict) -> None:
    out, _ = printed["evaluate"]
    lines = out.strip().splitlines()
    assert len(lines) == 4 and "{" not in out
    assert lines[3].startswith("record: ") and lines[3].endswith("/evaluate.json")
    assert lines[0].split()[:3] == ["model", "μ", "L8"] and lines[1].startswith("original s0")
    path = Path(lines[2].removeprefix("all metrics: "))
    record = json.loads(path.read_text())
    assert f"{record['metrics']['mu']:.3f}" in lines[1]
