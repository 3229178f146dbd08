"""Bad input: every bad value or file ends in one ``multilab: error:`` line naming
the bad value and the valid ones, exit 2, nothing written, no RUNNING run; SIGTERM and
Ctrl-C on the command line are one line too.

docs/RELIABILITY.md lists the cases and the line each one prints.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from multilab import tracking
from multilab.cli import main
from multilab.errors import StoppedEarly, UserError
from multilab.resolve import resolve_run
from multilab.training.train import train_model
from tests.helpers import (
    BIN,
    LAUNCH_TIMEOUT,
    ROOT,
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
    return train_model(resolve_run(cfg, "untrained", 0), progress=False)


def _bad_corpus(root: Path, built_project: Path, train_text: str | bytes | None) -> None:
    """A project whose train.txt is missing (None) or has ``train_text``."""
    corpora = root / "artifacts" / "corpora"
    corpora.mkdir(parents=True)
    (root / "artifacts" / "vocab").symlink_to(built_project / "artifacts" / "vocab")
    if isinstance(train_text, bytes):
        (corpora / "train.txt").write_bytes(train_text)
    elif train_text is not None:
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


def _damaged_done(untrained_model: Path, root: Path, content: bytes) -> Path:
    """A copy of a finished model whose ``multilab.json`` holds ``content``."""
    model_dir = _copied_model(untrained_model, root, "none")
    (model_dir / "multilab.json").write_bytes(content)
    return model_dir


def _tracked_model(untrained_model: Path, root: Path) -> Path:
    """A finished model whose done file names an MLflow run (so evaluate must reach MLflow)."""
    model_dir = _copied_model(untrained_model, root, "none")
    done = json.loads((model_dir / "multilab.json").read_text())
    (model_dir / "multilab.json").write_text(json.dumps(done | {"run_id": "0" * 32}))
    return model_dir


def _bad_export(root: Path, built_project: Path) -> None:
    """Bible exports whose train edition holds a byte that is not UTF-8."""
    bible = root / "data" / "bible"
    bible.mkdir(parents=True)
    source = built_project / "data" / "bible"
    (bible / "k.tsv").symlink_to(source / "k.tsv")
    lines = (source / "3.tsv").read_bytes().splitlines(keepends=True)
    (bible / "3.tsv").write_bytes(b"".join(lines[:5]) + b"40.001.001\tJesus \xff\n"
                                  + b"".join(lines[5:]))


def _damaged_tokenizer(root: Path, built_project: Path) -> None:
    """A project whose saved (bilingual) tokenizer.json is cut short: a copy, never the
    session's shared vocabulary."""
    link_project(built_project, root)
    vocab = root / "artifacts" / "vocab"
    vocab.unlink()
    shutil.copytree(built_project / "artifacts" / "vocab", vocab)
    saved = vocab / "bilingual" / "tokenizer.json"
    saved.write_bytes(saved.read_bytes()[:3000])


def _damaged_knn_table(root: Path, built_project: Path) -> None:
    """Spaces of the right vocabulary whose knn.pt is cut short."""
    from multilab.data.vocab import load_tokenizer, vocabulary_words

    link_project(built_project, root)
    words = vocabulary_words(load_tokenizer(root / "artifacts" / "vocab"))
    space = root / "artifacts" / "spaces"
    space.mkdir()
    (space / "en.mapped.vec").write_text(f"{len(words)} 2\n"
                                         + "".join(f"{w} 0 0\n" for w in words))
    torch.save(torch.zeros(2 * len(words), 5, dtype=torch.long), space / "knn.pt")
    table = space / "knn.pt"
    table.write_bytes(table.read_bytes()[:2000])


SEED_2_70 = str(2**70)

#: name → (extra --set values, command, fragments the one error line must contain)
BAD_INPUTS: dict[str, tuple[dict[str, str], tuple[str, ...], tuple[str, ...]]] = {
    "unknown modification": (
        {}, ("train", "--seed", "0", "-m", "no-such-thing"),
        ("unknown modification 'no-such-thing'", "valid:", "inv-order", "paper ID")),
    "unknown profile": (
        {"profile": "huge"}, ("train", "--seed", "0"),
        ("unknown profile 'huge'", "valid: paper, real, quick, real-quick, smoke")),
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
    # docs/RELIABILITY.md, "Parameters and the command line"; the parameter cases are all
    # in test_config.py, these prove the command line
    "top-level typo in the parameters": (
        {"trian.epochs": "3"}, ("train", "--seed", "0"),
        ("unknown key trian (did you mean 'train'?); valid: profile, seeds",)),
    "wrong type of a parameter": (
        {"train.epochs": "abc"}, ("train", "--seed", "0"),
        ("train.epochs = 'abc': must be a number > 0",)),
    "parameter out of range": (
        {"train.mask_prob": "1.5"}, ("train", "--seed", "0"),
        ("train.mask_prob = 1.5: must be a number between 0 and 1",)),
    "seed beyond 64 bits": (
        {}, ("train", "--seed", SEED_2_70),
        (f"seed {SEED_2_70}: must be an integer from 0 to 4294967295",)),
    "conflicting modification checked": (
        {"modification": "no-random;knn-replace"}, ("check",),
        ("'no-random' and 'knn-replace' both set replacement differently",)),
    "invalid UTF-8 in the corpus": (
        {}, ("train", "--seed", "0"),
        ("train.txt is not valid UTF-8 (line 2,", "dvc repro corpus")),
    "invalid UTF-8 in a Bible export": (
        {}, ("corpus", "build"),
        ("3.tsv is not valid UTF-8 (line 6,", "multilab corpus export --edition 3")),
    "truncated multilab.json": (
        {}, ("evaluate", "{model}"),
        ("multilab.json is not valid JSON", "run `multilab train` for it again")),
    "empty multilab.json": (
        {}, ("evaluate", "{model}"), ("multilab.json is not valid JSON",)),
    "multilab.json without its keys": (
        {}, ("evaluate", "{model}"), ("multilab.json lacks fingerprint, modification, seed",)),
    "report with no runs": (
        {}, ("report",), ("no finished, evaluated runs of profile 'smoke'", "multilab evaluate")),
    "tracking server not answering (evaluate)": (
        {}, ("evaluate", "{model}"), ("MLFLOW_TRACKING_URI=http://127.0.0.1:", "does not answer")),
    "tracking server not answering (report)": (
        {}, ("report",), ("MLFLOW_TRACKING_URI=http://127.0.0.1:", "does not answer")),
    "tracking server not answering (figures)": (
        {}, ("figures", "{model}"), ("MLFLOW_TRACKING_URI=http://127.0.0.1:", "does not answer")),
    "tracking server not answering (variant)": (
        {}, ("variant",), ("MLFLOW_TRACKING_URI=http://127.0.0.1:", "does not answer")),
    "tracking server not answering (spaces)": (
        {}, ("spaces",), ("MLFLOW_TRACKING_URI=http://127.0.0.1:", "does not answer")),
    "tracking server not answering (word-order)": (
        {}, ("word-order",), ("MLFLOW_TRACKING_URI=http://127.0.0.1:", "does not answer")),
    # the fault audit's case 8: a traceback once training had started
    "damaged bilingual tokenizer.json": (
        {}, ("train", "--seed", "0"),
        ("the tokenizer in", "bilingual is damaged", "dvc repro vocab")),
    "damaged knn.pt": (
        {}, ("train", "--seed", "0", "-m", "knn-replace"),
        ("knn.pt is damaged", "dvc repro spaces")),
    "unknown edition for the word order": (
        {"word_order.editions": "[s, x]"}, ("word-order",),
        ("word_order.editions = 'x' (unknown, empty or repeated); valid: 'all' or a list",)),
}
#: these run as a real `multilab` process (exit code, no traceback on a real stderr); the
#: rest call `multilab.cli.main` (each process costs seconds of imports)
AS_PROCESS = {"unknown modification", "unknown profile", "unknown Bible edition"}


@pytest.mark.parametrize("case", [
    pytest.param(case, marks=pytest.mark.slow) if case in AS_PROCESS else case  # a process
    for case in BAD_INPUTS])
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
    elif case == "damaged bilingual tokenizer.json":
        _damaged_tokenizer(root, built_project)
    elif case == "damaged knn.pt":
        _damaged_knn_table(root, built_project)
    elif case == "dev corpus shorter than the evaluation":
        _short_dev(root, built_project)
        model = str(_copied_model(untrained_model, tmp_path, "none"))
    elif case in ("model directory without weights", "truncated model.safetensors"):
        link_project(built_project, root)
        damage = "truncated" if case.startswith("truncated") else "no_weights"
        model = str(_copied_model(untrained_model, tmp_path, damage))
    elif case == "invalid UTF-8 in the corpus":
        _bad_corpus(root, built_project, b"In the beginning .\nAnd \xff God\n")
    elif case == "invalid UTF-8 in a Bible export":
        _bad_export(root, built_project)
    elif case.endswith("multilab.json") or case == "multilab.json without its keys":
        link_project(built_project, root)
        content = {"truncated multilab.json": b'{"fingerprint": "abc", "mod',
                   "empty multilab.json": b"",
                   "multilab.json without its keys": b'{"steps": 0}'}[case]
        model = str(_damaged_done(untrained_model, tmp_path, content))
    elif case.startswith("tracking server not answering ("):
        link_project(built_project, root)
        model = str(_tracked_model(untrained_model, tmp_path))
    else:
        link_project(built_project, root)
    dead = f"http://127.0.0.1:{free_port()}"
    env = subprocess_env(dead if case.startswith("tracking") else None)
    monkeypatch.delenv(tracking.URI_VARIABLE, raising=False)
    if case.startswith("tracking"):
        monkeypatch.setenv(tracking.URI_VARIABLE, env[tracking.URI_VARIABLE])
    settings = cli_settings(root, **extra)
    args = cli_args(settings, *(part.format(model=model) for part in command))
    before = _snapshot(root)

    started = time.monotonic()
    if case in AS_PROCESS:
        result = subprocess.run([str(BIN / "multilab"), *args], capture_output=True, text=True,
                                env=env, timeout=LAUNCH_TIMEOUT, check=False)
        code, err = result.returncode, result.stderr
    else:
        code, err = main(args), capsys.readouterr().err
    if case.startswith("tracking"):
        assert time.monotonic() - started < 30, "a dead server must fail in seconds"

    errors = [line for line in err.splitlines() if line.startswith("multilab: error:")]
    assert code == 2, err
    assert len(errors) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    assert _snapshot(root) == before  # nothing written, not even half
    try:
        cfg = config_of(settings)
    except UserError:  # the bad parameter itself: nothing could have started a run
        cfg = None
    if cfg is not None:
        assert "RUNNING" not in run_statuses(cfg)
    if model and "multilab.json" not in case:
        assert not (root / "artifacts" / "eval").exists()
        assert json.loads((Path(model) / "multilab.json").read_text())["steps"] == 0


def test_sigterm_on_the_command_line_is_one_line(monkeypatch, capsys) -> None:
    """The CLI turns the SIGTERM exception (raised after the run is ended KILLED) into one
    line and exit 143 (128 + 15), Ctrl-C into exit 130: no traceback."""
    from multilab import cli
    from multilab.cli import train
    from multilab.errors import Terminated

    def terminated(args) -> None:
        raise Terminated("signal 15")

    def interrupted(args) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "claim_gpu", lambda: None)
    for command, expected in ((terminated, 143), (interrupted, 130)):
        monkeypatch.setattr(train, "cmd_train", command)
        assert cli.main(["train", "--seed", "0"]) == expected
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "resume" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("code", "advice"),
    [(errno.ENOSPC, "free some space"), (errno.EROFS, "the file system is read-only"),
     (errno.EACCES, "make it writable")],
)
def test_full_or_read_only_output_is_one_line(code: int, advice: str, built_project: Path,
                                              tmp_path: Path, capsys, monkeypatch) -> None:
    """A disk that is full, read-only or forbidden under an output: one line, exit 2, no
    file half-written (`corpus stats` writes metrics/corpus.json)."""
    root = link_project(built_project, tmp_path / "project")
    metrics = root / "metrics"
    real_open = Path.open

    def refusing(self: Path, mode: str = "r", *args, **kwargs):
        if "w" in mode and metrics in self.parents:
            raise OSError(code, os.strerror(code), str(self))
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refusing)
    assert main(cli_args(cli_settings(root), "corpus", "stats")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("multilab: error: "), err
    assert os.strerror(code) in err and advice in err and "corpus.json" in err
    assert not any(metrics.rglob("*.json")) if metrics.exists() else True


@pytest.mark.slow  # trains a smoke model
def test_disk_full_during_training_is_one_line_and_keeps_the_checkpoint(
        built_project: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """torch reports ENOSPC as an OSError over its own RuntimeError: one line, the run ends
    FAILED (never RUNNING), the complete checkpoint before it stays for the resume."""
    root = link_project(built_project, tmp_path / "project")
    settings = cli_settings(root)
    real_save, calls = torch.save, []

    def filling_up(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(*args, **kwargs)

    monkeypatch.setattr(torch, "save", filling_up)
    assert main(cli_args(settings, "train", "--seed", "0")) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("multilab")]
    assert lines, err
    assert lines == [lines[0]] and "No space left on device; free some space" in lines[0], err
    assert run_statuses(config_of(settings)) == ["FAILED"]
    complete = [p.parent.name for p in root.rglob("state.pt")
                if not p.parent.name.startswith(".tmp-")]  # a partial one is never read
    assert complete == ["checkpoint-1"]
    assert not list(root.rglob(".tmp-checkpoint-*"))  # the fault audit's case 9: it took the space
    assert not list(root.rglob("multilab.json"))


def test_storage_problem_is_found_under_other_exception_types() -> None:
    from multilab.errors import storage_problem

    try:
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as inner:
            raise RuntimeError("[enforce fail at inline_container.cc:672] unexpected pos") \
                from inner
    except RuntimeError as outer:
        assert storage_problem(outer).startswith("No space left on device; free some space")
    assert storage_problem(RuntimeError("(sqlite3.OperationalError) database or disk is full")
                           ).startswith("database or disk is full; free some space")
    assert storage_problem(ValueError("something else")) is None
    assert storage_problem(OSError(errno.ENOENT, "No such file or directory")) is None


@pytest.mark.slow  # trains a smoke model
def test_incomplete_state_pt_is_one_line(built_project: Path, tmp_path: Path, capsys) -> None:
    """A state.pt that loads but lacks what a resume reads: one line naming what is missing."""
    root = link_project(built_project, tmp_path / "project")
    settings = cli_settings(root)
    with pytest.raises(StoppedEarly):
        train_model(resolve_run(config_of(settings), "original", 0), stop_after_step=1,
                    progress=False)
    (state,) = root.rglob("state.pt")
    saved = torch.load(state, weights_only=False)
    del saved["scheduler"], saved["state"]["log_rows"]
    torch.save(saved, state)
    checksum = state.with_name("state.sha256")  # where checkpoints carry one
    if checksum.exists():
        checksum.write_text(hashlib.sha256(state.read_bytes()).hexdigest() + "\n")
    before = _snapshot(root)
    capsys.readouterr()
    assert main(cli_args(settings, "train", "--seed", "0")) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("multilab")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert "is incomplete (state.pt lacks scheduler, state.log_rows); delete that folder" in err
    assert _snapshot(root) == before


@pytest.mark.slow  # trains a smoke model
def test_train_retrains_a_model_whose_done_file_is_damaged(
        built_project: Path, untrained_model: Path, tmp_path: Path) -> None:
    """A truncated multilab.json does not block `train` (it used to crash until the file was
    deleted by hand): the model counts as unfinished and is trained again."""
    root = link_project(built_project, tmp_path / "project")
    settings = cli_settings(root)
    model_dir = config_of(settings).paths.model_dir("untrained", 0)
    shutil.copytree(untrained_model, model_dir)
    (model_dir / "multilab.json").write_text('{"fingerprint": "ab')
    assert main(cli_args(settings, "train", "--seed", "0", "-m", "untrained")) == 0
    assert json.loads((model_dir / "multilab.json").read_text())["modification"] == "untrained"


# --------------------------------------------------------------------------- studies

def _toy_study(tmp_path: Path) -> tuple[Path, Path]:
    from tests.test_studies import toy_study

    return toy_study(tmp_path)


@pytest.mark.parametrize(("value", "said"), [
    ("NaN", "result.metrics.mu is nan; a record holds finite numbers"),
    ("Infinity", "result.metrics.mu is inf"),
    ('"0.24"', "result.metrics.mu is '0.24' (str); a record's measured values are numbers"),
    ("1" * 5000, "not a readable results record (Exceeds the limit (4300 digits)"),  # ValueError
])
@pytest.mark.parametrize("action", ["list", "next", "report"])
def test_a_record_that_is_no_number_is_one_line_naming_it(
        value: str, said: str, action: str, tmp_path: Path, capsys) -> None:
    """A NaN in a record was an AttributeError traceback (``numerator``) in every study
    command, or read "+nan, as claimed" with one seed; a metric given as text was dropped
    from the table without a word."""
    folder, results = _toy_study(tmp_path)
    record = sorted(results.rglob("evaluate.json"))[0]
    data = json.loads(record.read_text())
    data["result"]["metrics"]["mu"] = "@"
    record.write_text(json.dumps(data).replace('"@"', value))
    before = _snapshot(tmp_path)
    code = main(["--set", f"paths.results={results}", "study", action, "--studies",
                 str(folder), *(["--all", "--out", str(tmp_path / "docs")]
                                if action == "report" else [])])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert len(err.splitlines()) == 1 and err.startswith(f"multilab: error: {record}: ")
    assert said in err
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("ledger_text", [
    "garbage that is no ledger\n",
    "study,row,seed,by,since\ntoy-study,original,zero,me pid 1,2026-01-01T00:00:00+00:00\n",
    "study,row,seed,by,since\ntoy-study,original,0,me pid 1,yesterday\n",
])
def test_a_ledger_that_cannot_be_read_is_one_line_naming_it(ledger_text: str, tmp_path: Path,
                                                            capsys) -> None:
    """A garbage ``results/ledger.csv`` was ``KeyError: 'study'``: one line naming the file
    and the line it cannot read, nothing run or written (a merge conflict's markers are
    read: tests/test_ledger.py)."""
    folder = tmp_path / "studies"
    folder.mkdir()
    from tests.test_studies import STUDIES, _spec

    shutil.copytree(STUDIES / "claims", folder / "claims")
    _spec(folder)
    results = tmp_path / "results"
    results.mkdir()
    (results / "ledger.csv").write_text(ledger_text)
    before = _snapshot(tmp_path)
    for extra in (["--plan"], []):
        code = main(["--set", f"paths.results={results}", "study", "run", "toy-study",
                     "--studies", str(folder), "--rows", "original", "--seeds", "0", *extra])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err, err
        assert err.splitlines() == [err.strip()] and f"{results / 'ledger.csv'} line " in err
        assert "is not a booking (study,row,seed,by,since)" in err
        # the ledger's lock file is the only new file (the lock the booking would take)
        assert _snapshot(tmp_path) - before <= {"results/.ledger.csv.lock"}
        assert before <= _snapshot(tmp_path)


@pytest.mark.parametrize(("options", "said"), [
    (["--hours", "inf"], "--hours inf: must be a number of hours > 0"),  # planned everything
    (["--hours", "nan"], "--hours nan: must be a number of hours > 0"),
    (["--lanes", "100000000"], "--lanes 100000000: must be from 1 to 256"),  # MemoryError
    (["--lanes", "-1"], "--lanes -1: must be from 1 to 256"),
])
def test_study_next_lanes_refuses_numbers_no_session_has(options: list[str], said: str,
                                                         tmp_path: Path, capsys) -> None:
    """`study next --lanes N --hours H`: infinite hours planned every run into one lane
    ("≈ 49.0 of inf h"), a hundred million lanes filled the memory; one line each now."""
    folder, results = _toy_study(tmp_path)
    code = main(["--set", f"paths.results={results}", "study", "next", "--studies",
                 str(folder), "--shell", *options])
    err = capsys.readouterr().err
    assert code == 2 and err.splitlines() == [f"multilab: error: {err.split('error: ')[1]}"
                                              .strip()] and said in err, err


def _ledger_release(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "multilab.studies.ledger", "release", *args],
                          capture_output=True, text=True, timeout=LAUNCH_TIMEOUT)


BOOKING = "s,original,43,gone pid 7,2026-12-01T00:00:00+00:00\n"


@pytest.mark.parametrize(("ledger", "committed", "host", "said"), [
    ("garbage\n", None, "gone", "ledger.csv line 1: 'garbage' is not a booking"),
    (BOOKING, "study,row,seed,by,since\ns,original,x,gone pid 7,2026\n", "gone",
     "committed.csv line 2: "),  # was ValueError
    (BOOKING, "", "", "HOST '': must be a machine's name"),
    (BOOKING, "missing", "gone", "committed.csv: no such file"),  # silently kept none
    (None, None, "gone", "RESULTS "),  # results/ a file: FileExistsError
])
def test_ledger_release_bad_input_is_one_line_and_releases_nothing(
        ledger: str | None, committed: str | None, host: str, said: str,
        tmp_path: Path) -> None:
    """`python -m multilab.studies.ledger release RESULTS HOST [COMMITTED]` (what
    lanes.sh resume runs in a clone) printed a traceback for a ledger it cannot read, a
    committed ledger with a bad line and a RESULTS that is a file; a missing COMMITTED kept
    no booking. One line each now, exit 2, the ledger unchanged."""
    results = tmp_path / "results"
    if ledger is None:
        results.write_text("a file\n")
    else:
        results.mkdir()
        (results / "ledger.csv").write_text(f"study,row,seed,by,since\n{ledger}"
                                            if ledger == BOOKING else ledger)
    before = results.read_bytes() if ledger is None else (results / "ledger.csv").read_bytes()
    args = [str(results), host]
    if committed is not None:
        args.append(str(tmp_path / "committed.csv"))
        if committed != "missing":
            (tmp_path / "committed.csv").write_text(committed)
    done = _ledger_release(*args)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("ledger release: error: ") and said in done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stdout == ""
    after = results.read_bytes() if ledger is None else (results / "ledger.csv").read_bytes()
    assert after == before


def test_ledger_release_in_a_clone_without_results_makes_no_folder(tmp_path: Path) -> None:
    """A clone whose commit holds no ledger (nor results/): nothing to release, exit 0, and
    no results/ made for a lock file (it was)."""
    done = _ledger_release(str(tmp_path / "results"), "gone")
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(("args", "said"), [
    (["run", ""], "lanes.sh run: command '' is empty"),  # said "logs: …", started none
    (["run", "echo x", "  "], "lanes.sh run: command '  ' is empty"),  # an idle lane
    (["run", "echo a\necho b"], "has a line break"),  # two lanes of one command
    (["harvest", "--forc"], "lanes.sh harvest: --forc: valid: harvest, or harvest --force"),
    (["harvest", "--force", "x"], "valid: harvest, or harvest --force"),
    # study next's argparse usage (9 lines) after a harvest; 0 and -1 reached the plan
    (["start", "abc"], "lanes.sh start: HOURS 'abc'; valid: a number of hours above 0"),
    (["start", "0"], "lanes.sh start: HOURS '0'; valid: a number of hours above 0"),
    (["start", "-1"], "lanes.sh start: HOURS '-1'; valid: a number of hours above 0"),
    (["start", "2", "x"], "lanes.sh start: N 'x'; valid: a whole number of lanes from 1"),
    (["start", "2", "0"], "lanes.sh start: N '0'; valid: a whole number of lanes from 1"),
    # `stop 2` stopped every lane, not lane 2; the others ignored theirs too
    (["stop", "2"], "lanes.sh stop: takes no arguments ('2'); it acts on every lane"),
    (["pause", "1"], "lanes.sh pause: takes no arguments ('1'); it acts on every lane"),
    (["continue", "1"], "lanes.sh continue: takes no arguments ('1')"),
    (["resume", "lane1"], "lanes.sh resume: takes no arguments ('lane1')"),
    (["status", "-v"], "lanes.sh status: takes no arguments ('-v')"),
])
def test_lanes_script_bad_input_is_one_line_and_starts_nothing(
        args: list[str], said: str, tmp_path: Path) -> None:
    """`lanes.sh run ''` said where the logs are and started nothing, `run '  '` started a
    lane that ran nothing, a command with a line break became two lanes, `harvest --forc`
    harvested without --force, `start abc` printed study next's usage after a harvest, and
    `stop 2` stopped every lane; one line each now, exit 2, no lane started or signalled."""
    from tests.test_faults import _lane_project, _lanes_sh

    root, lanes = _lane_project(tmp_path)
    done = _lanes_sh(root, lanes, *args)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stdout == ""
    assert not lanes.exists()


def test_lanes_status_without_lanes_says_so(tmp_path: Path) -> None:
    """`lanes.sh status` with no lanes printed nothing at all."""
    from tests.test_faults import _lane_project, _lanes_sh

    root, lanes = _lane_project(tmp_path)
    done = _lanes_sh(root, lanes, "status")
    assert done.returncode == 0 and done.stderr == f"lanes.sh status: no lanes in {lanes}\n"


# --------------------------------------------------------------------------- imports

@pytest.mark.parametrize(("damage", "said"), [
    (lambda run: (run / "run.json").unlink(), "run.json: not found; a run folder holds"),
    (lambda run: (run / "run.json").write_text("{not json"), "run.json: not readable JSON"),
    (lambda run: (run / "run.json").write_text("[1]"), "run.json: a JSON object is needed"),
    (lambda run: (run / "run.json").write_text(json.dumps({"seed": 0})),
     "run.json: no 'modification'; a run.json has modification, seed, commit"),
    (lambda run: (run / "run.json").write_text(
        (run / "run.json").read_text().replace('"seed": 0', '"seed": "zero"')),
     "run.json: seed 'zero': an integer >= 0"),
    (lambda run: (run / "model.json").write_text('{"seed": 3}'),
     "model.json: model None seed 3, but run.json names 'original' seed 0"),
    (lambda run: (run / "eval.json").write_bytes(b"\xff"), "eval.json: not readable JSON"),
    (lambda run: shutil.rmtree(run), "--runs "),
])
def test_bad_import_runs_are_one_line(damage, said: str, tmp_path: Path, capsys,
                                      monkeypatch) -> None:
    """``scripts/import_records.py --runs`` on a folder that is not a background run's, or
    whose JSON is damaged, was a traceback: one line naming the file, exit 2, nothing
    written."""
    from tests.test_faults import background_run, import_records_main

    monkeypatch.chdir(ROOT)
    folder = background_run(tmp_path / "run")
    damage(folder)
    results = tmp_path / "results"
    assert import_records_main()(["--results", str(results), "--runs", str(folder)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("import_records: error: "), err
    assert said in err and str(folder) in err
    assert not results.exists()


def _nan_record(results: Path) -> None:
    """A record that passes the schema but holds NaN (Python writes it; reading refuses it)."""
    from tests.test_record_schema import GOOD

    (results / "evaluate.json").write_text(json.dumps(
        {**GOOD, "result": {"metrics": {"mu": float("nan")}}}))


def _link_out(results: Path) -> None:
    (results.parent / "elsewhere.json").write_text("{}")
    (results / "stray.json").symlink_to(results.parent / "elsewhere.json")


def _huge_file(results: Path) -> None:
    with (results / "dump.json").open("wb") as dump:  # sparse: no disk used
        dump.truncate(17 << 20)


@pytest.mark.parametrize(("make", "field", "said"), [
    (_nan_record, "result.metrics.mu", "not a finite number"),
    (lambda results: (results / "lanes.tsv").write_bytes(b"\x00\xff\n"), "(file)",
     "not readable as text"),
    (_link_out, "(link)", "a link out of"),
    (lambda results: (results / "gone.json").symlink_to(results / "nowhere.json"), "(link)",
     "which does not exist"),
    (_huge_file, "(file)", "more than any record or list holds"),
    # RecursionError and ValueError tracebacks, not JSONDecodeError
    (lambda results: (results / "deep.json").write_text("[" * 100_000 + "]" * 100_000),
     "(record)", "not readable as JSON (maximum recursion depth exceeded"),
    (lambda results: (results / "digits.json").write_text('{"mu": ' + "1" * 5000 + "}"),
     "(record)", "not readable as JSON (Exceeds the limit (4300 digits)"),
])
def test_records_check_names_every_bad_file_in_one_line(make, field: str, said: str,
                                                        tmp_path: Path, capsys) -> None:
    """``records check`` passed a NaN that reading refuses and a dangling link (silently
    skipped), read a link out of results/, read a huge dump whole, and a binary lanes.tsv
    was a traceback: each is now one line naming the file, exit 2."""
    results = tmp_path / "results"
    results.mkdir()
    make(results)
    with pytest.raises(SystemExit) as stopped:
        main(["records", "check", str(results)])
    assert stopped.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and f": {field}: " in lines[0] and said in lines[0], lines
    assert lines[0].startswith(str(results / "")), lines


def test_records_check_takes_a_lane_command_holding_a_tab(tmp_path: Path, capsys) -> None:
    """lanes.sh writes a lane's command, tabs and all, as the last field of results/lanes.tsv
    (and reads it back whole); ``records check`` counted its tab as a sixth field and
    refused the committed list. An empty checkpoint field (no checkpoint yet) is a field."""
    results = tmp_path / "results"
    results.mkdir()
    (results / "lanes.tsv").write_text("1\thost\t2026-12-01T00:00:00Z\t\tprintf 'a\tb'\n"
                                       "2\thost\t2026-12-01T00:00:00Z\tm step 3/9\tsleep 1\n")
    main(["records", "check", str(results)])
    assert capsys.readouterr().err == ""


@pytest.fixture
def ray_importable(monkeypatch) -> None:
    """``import ray`` succeeds (an empty module): the checks before Ray is asked anything."""
    import types

    monkeypatch.setitem(sys.modules, "ray", types.ModuleType("ray"))


@pytest.mark.parametrize(("extra", "said"), [
    (["--cpus-per-run", "0"], "--cpus-per-run 0; valid: a number above 0"),
    (["--cpus-per-run", "-1"], "--cpus-per-run -1; valid: a number above 0"),
    (["--cpus-per-run", "nan"], "--cpus-per-run nan; valid: a number above 0"),
    (["--gpus-per-run", "-1"], "--gpus-per-run -1; valid: 0 or more"),
    (["--address", "nonsense"], "--address 'nonsense'; valid: HOST:PORT"),
    (["--address", ":6379"], "--address ':6379'; valid: HOST:PORT"),  # no host
    (["--address", "ray://head:client"], "--address 'ray://head:client'; valid: HOST:PORT"),
    (["--address", ""], "--address ''; valid: HOST:PORT"),
    (["--address", "127.0.0.1:{closed}"], "no Ray cluster answers there"),
])
def test_bad_ray_resources_and_addresses_stop_before_any_work(
        ray_importable, extra: list[str], said: str, tmp_path: Path, monkeypatch,
        capsys) -> None:
    """``--executor ray`` checked its resources only against the cluster, and connected only
    when the runs were dispatched: a negative count or an unreachable cluster (Ray retries
    its connection for minutes) came after the study's data was built. Now one line first;
    ``--plan`` (which builds nothing) shows the check precedes every stage."""
    extra = [value.replace("{closed}", str(free_port())) for value in extra]
    monkeypatch.chdir(ROOT)
    assert main(["study", "run", "conneau2020-section5", "--plan", "--out",
                 str(tmp_path / "docs"), "--executor", "ray", *extra]) == 2
    err = capsys.readouterr()
    assert len(err.err.splitlines()) == 1 and said in err.err, err.err
    assert err.out == ""  # no plan printed: refused before it
