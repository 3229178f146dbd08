"""The package's layout keeps its promises: rooms documented, readers of models apart from
the training loop, DVC stages depending on all the code they run."""

from __future__ import annotations

import subprocess
import sys

import yaml

from tests.helpers import ROOT

PACKAGE = ROOT / "src" / "multilab"


def test_every_room_says_what_it_does() -> None:
    rooms = [p for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__")]
    assert {p.name for p in rooms} >= {"lab", "data", "spaces", "training", "evaluation",
                                        "reporting"}
    for room in rooms:
        init = room / "__init__.py"
        assert init.exists(), room
        source = init.read_text()
        assert source.startswith('"""') and len(source.split('"""')[1].split()) > 20, init


def test_readers_of_models_do_not_import_the_training_loop() -> None:
    """Evaluation, figures and the report read model directories through
    training.model_dir: importing them must not import training.train."""
    code = (
        "import sys\n"
        "import multilab.evaluation.evaluate, multilab.reporting.report, "
        "multilab.reporting.figures, multilab.training.model_dir\n"
        "print('multilab.training.train' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=300)
    assert done.stdout.strip() == "False"


def test_every_stage_depends_on_the_whole_package() -> None:
    """A stage runs more than its own module (cli, config, files, the registry); a list of
    modules misses the next import, so every stage depends on src/multilab."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        code = [dep for dep in stage["deps"] if str(dep).startswith("src")]
        assert code == ["src/multilab"], (name, code)
