"""Bad input (issue 8): every bad value or file ends in one ``multilab: error:`` line naming
the bad value and the valid ones, exit 2, nothing written, no RUNNING run; SIGTERM and
Ctrl-C on the command line are one line too.

docs/RELIABILITY.md lists the cases and the line each one prints.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from multilab import tracking
from multilab.cli import main
from multilab.training.train import train_model
from tests.helpers import (
    BIN,
    LAUNCH_TIMEOUT,
    cli_args,
    cli_settings,
    config_of,
    free_port,
    link_project,
    run_statuses,
    subprocess_env,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _snapshot(root: Path) -> set[str]:
    """Every path under ``root`` except the tracking store (``connect`` may create it)."""
    found = set()
    for folder, dirs, files in os.walk(root):
        relative = Path(folder).relative_to(root)
        found |= {str(relative / name) for name in dirs + files}
    return {path for path in found if Path(path).parts[0] != "mlruns"}


@pytest.fixture(scope="module")
def untrained_model(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished model directory that costs no training (the ``untrained`` modification)."""
    root = link_project(built_project, tmp_path_factory.mktemp("untrained"))
    cfg = config_of(cli_settings(root))
    return train_model(cfg.run("untrained", 0), progress=False)


def _bad_corpus(root: Path, built_project: Path, train_text: str | None) -> None:
    """A project whose train.txt is missing (None) or has ``train_text``."""
    corpora = root / "artifacts" / "corpora"
    corpora.mkdir(parents=True)
    (root / "artifacts" / "vocab").symlink_to(built_project / "artifacts" / "vocab")
    if train_text is not None:
        (corpora / "train.txt").write_text(train_text)


def _mismatched_space(root: Path, built_project: Path) -> None:
    """Spaces built for another vocabulary (knn table of the right shape)."""
    link_project(built_project, root)
    space = root / "artifacts" / "spaces"
    space.mkdir()
    words = ["[PAD]", "other", *[f"w{i}" for i in range(2046)]]
    (space / "en.mapped.vec").write_text(f"{len(words)} 2\n"
                                         + "".join(f"{w} 0 0\n" for w in words))
    torch.save(torch.zeros(4096, 1, dtype=torch.long), space / "knn.pt")


def _copied_model(untrained_model: Path, root: Path, damage: str) -> Path:
    model_dir = root / "model"
    shutil.copytree(untrained_model, model_dir)
    weights = model_dir / "model.safetensors"
    if damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:5000])
    elif damage == "no_weights":
        weights.unlink()
    return model_dir


def _short_dev(root: Path, built_project: Path) -> None:
    (root / "artifacts" / "corpora").mkdir(parents=True)
    (root / "artifacts" / "vocab").symlink_to(built_project / "artifacts" / "vocab")
    source = built_project / "artifacts" / "corpora"
    (root / "artifacts" / "corpora" / "train.txt").symlink_to(source / "train.txt")
    dev = source.joinpath("dev.txt").read_text().splitlines()[:50]
    (root / "artifacts" / "corpora" / "dev.txt").write_text("\n".join(dev) + "\n")


#: name → (extra --set values, command, fragments the one error line must contain)
BAD_INPUTS: dict[str, tuple[dict[str, str], tuple[str, ...], tuple[str, ...]]] = {
    "unknown modification": (
        {}, ("train", "--seed", "0", "-m", "no-such-thing"),
        ("unknown modification 'no-such-thing'", "valid:", "inv-order", "paper ID")),
    "unknown profile": (
        {"profile": "huge"}, ("train", "--seed", "0"),
        ("unknown profile 'huge'", "valid: paper, quick, smoke")),
    "replacement not summing to 1": (
        {"train.replacement_override": "[0.5, 0.3, 0.3]"}, ("train", "--seed", "0"),
        ("train.replacement_override = [0.5, 0.3, 0.3] sums to 1.1, not 1",)),
    "empty seed list": (
        {"seeds": "[]"}, ("train", "--seed", "0"),
        ("seeds = []", "non-empty list of integers")),
    "missing corpus": ({}, ("train", "--seed", "0"), ("train.txt not found", "dvc repro corpus")),
    "empty corpus": ({}, ("train", "--seed", "0"), ("train.txt is empty",)),
    "unknown Bible edition": (
        {}, ("corpus", "export", "--edition", "xx"),
        ("unknown Bible edition 'xx'", "valid: 1, 2, 3", ", k,")),
    "space of another vocabulary": (
        {}, ("train", "--seed", "0", "-m", "knn-replace"),
        ("en.mapped.vec: word 1 is 'other' but the tokenizer has", "dvc repro spaces")),
    "dev corpus shorter than the evaluation": (
        {}, ("evaluate", "{model}"),
        ("has 50 sentences but the evaluation needs 200", "corpus.dev_sentences")),
    "model directory without weights": (
        {}, ("evaluate", "{model}"), ("is not a multilab model directory", "model.safetensors")),
    "truncated model.safetensors": (
        {}, ("evaluate", "{model}"), ("holds a corrupted checkpoint",)),
    "tracking server not answering": (
        {}, ("train", "--seed", "0"),
        ("MLFLOW_TRACKING_URI=http://127.0.0.1:", "does not answer", "unset the variable")),
}
#: these run as a real `multilab` process (exit code, no traceback on a real stderr); the
#: rest call `multilab.cli.main` (each process costs seconds of imports)
AS_PROCESS = {"unknown modification", "unknown profile", "unknown Bible edition"}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_clear_line(case: str, built_project: Path, untrained_model: Path,
                                     tmp_path: Path, capsys, monkeypatch) -> None:
    extra, command, fragments = BAD_INPUTS[case]
    root = tmp_path / "project"
    root.mkdir()
    model = ""
    if case == "missing corpus":
        _bad_corpus(root, built_project, None)
    elif case == "empty corpus":
        _bad_corpus(root, built_project, "")
    elif case == "space of another vocabulary":
        _mismatched_space(root, built_project)
    elif case == "dev corpus shorter than the evaluation":
        _short_dev(root, built_project)
        model = str(_copied_model(untrained_model, tmp_path, "none"))
    elif case in ("model directory without weights", "truncated model.safetensors"):
        link_project(built_project, root)
        damage = "truncated" if case.startswith("truncated") else "no_weights"
        model = str(_copied_model(untrained_model, tmp_path, damage))
    else:
        link_project(built_project, root)
    env = subprocess_env(f"http://127.0.0.1:{free_port()}" if case.startswith("tracking") else None)
    monkeypatch.delenv(tracking.URI_VARIABLE, raising=False)
    if case.startswith("tracking"):
        monkeypatch.setenv(tracking.URI_VARIABLE, env[tracking.URI_VARIABLE])
    settings = cli_settings(root, **extra)
    args = cli_args(settings, *(part.format(model=model) for part in command))
    before = _snapshot(root)

    if case in AS_PROCESS:
        result = subprocess.run([str(BIN / "multilab"), *args], capture_output=True, text=True,
                                env=env, timeout=LAUNCH_TIMEOUT, check=False)
        code, err = result.returncode, result.stderr
    else:
        code, err = main(args), capsys.readouterr().err

    errors = [line for line in err.splitlines() if line.startswith("multilab: error:")]
    assert code == 2, err
    assert len(errors) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    assert _snapshot(root) == before  # nothing written, not even half
    if "profile" not in extra and "seeds" not in extra and "train.replacement_override" \
            not in extra:
        assert "RUNNING" not in run_statuses(config_of(settings))
    if model:
        assert not (root / "artifacts" / "eval").exists()
        assert json.loads((Path(model) / "multilab.json").read_text())["steps"] == 0


def test_sigterm_on_the_command_line_is_one_line(monkeypatch, capsys) -> None:
    """The CLI turns the SIGTERM exception (raised after the run is ended KILLED) into one
    line and exit 143 (128 + 15), Ctrl-C into exit 130: no traceback."""
    from multilab import cli
    from multilab.errors import Terminated

    def terminated(args) -> None:
        raise Terminated("signal 15")

    def interrupted(args) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "claim_gpu", lambda: None)
    for command, expected in ((terminated, 143), (interrupted, 130)):
        monkeypatch.setattr(cli, "cmd_train", command)
        assert cli.main(["train", "--seed", "0"]) == expected
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "resume" in err and "Traceback" not in err
