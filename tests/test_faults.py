"""Fault injection: every command that writes × a stop signal mid-write, a dead
tracking server, a full disk and a damaged input, as one table (``MATRIX``) with the outcome
each cell must have. docs/RELIABILITY.md ("Every writing command × four faults") says how.

Every cell runs the command in-process (``multilab.cli.main``) on a smoke project and checks
the rules of docs/RELIABILITY.md, whatever the fault:

* the outcome: exit 2 and one ``multilab: error:`` line naming the cause (refused), exit 143
  and one line (stopped), or exit 0 (the fault does not concern the command);
* every file the command opened for writing inside the project was a temporary name
  (``.<name>.<pid>.tmp``, a ``.staging`` or ``.tmp-`` folder) renamed into place: a reader
  never sees half a file;
* no temporary is left behind, no file that was there before is gone or changed (refused:
  byte for byte), no MLflow run is left RUNNING.

How the faults are made, cheaply: one audit hook (``sys.addaudithook``) sees every file the
command opens; at the chosen write it raises what the fault raises there: ``Terminated`` (the
exception ``lifeline`` turns SIGTERM into) or ``OSError(ENOSPC)``. A dead server is an
``MLFLOW_TRACKING_URI`` on a closed port; a damaged input is a file cut short or garbled.
SIGKILL, which no handler sees, runs in a subprocess whose audit hook kills it at a write
(``test_sigkill_mid_write_keeps_every_output_whole``, slow).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from multilab import tracking
from multilab.cli import main
from multilab.errors import Terminated
from tests.helpers import (
    LAUNCH_TIMEOUT,
    ROOT,
    TEXT_CORPORA,
    cli_args,
    cli_settings,
    free_port,
    link_project,
    subprocess_env,
    write_text_corpora,
    write_xnli_fixture,
)

pytestmark = pytest.mark.usefixtures("one_thread")

#: a name a writer may open inside the project: a temporary renamed into place, or a lock
TEMPORARY = re.compile(r"^\..+\.(tmp|staging)$|^\.(.+\.)?tmp-|\.lock$|\.lock\.owner$")
#: what the test leaves out of "the project": MLflow's own store
STORE = "mlruns"


# --------------------------------------------------------------------------- the injector

@dataclass
class Injector:
    """Watches the files opened for writing under ``root``; raises ``fault`` at write
    number ``at`` (1-based; 0: never)."""

    root: Path
    fault: Callable[[str], BaseException] | None = None
    at: int = 0
    writes: list[str] = field(default_factory=list)
    fired: bool = False

    def opened(self, path: str) -> None:
        relative = Path(os.path.abspath(path)).relative_to(self.root)
        if relative.parts[0] == STORE:
            return
        self.writes.append(str(relative))
        if self.fault is not None and len(self.writes) == self.at:
            self.fired = True
            raise self.fault(path)

    def direct_writes(self) -> list[str]:
        """Files opened for writing under their final name (not atomic)."""
        return [path for path in self.writes
                if not any(TEMPORARY.search(part) for part in Path(path).parts)]


_ACTIVE: list[Injector] = []
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _audit(event: str, args: tuple) -> None:
    if event != "open" or not _ACTIVE:
        return
    path, mode, flags = args
    if not isinstance(path, str | bytes | os.PathLike):
        return  # a file descriptor
    path = os.fsdecode(path)
    writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(
        (flags or 0) & _WRITING)
    injector = _ACTIVE[-1]
    if writing and os.path.abspath(path).startswith(f"{injector.root}{os.sep}"):
        injector.opened(path)


_HOOKED: list[bool] = []


@contextlib.contextmanager
def injected(injector: Injector) -> Iterator[Injector]:
    if not _HOOKED:  # for the rest of the process (a hook cannot be removed); idle between
        sys.addaudithook(_audit)  # cells, and only in the worker that runs this module
        _HOOKED.append(True)
    _ACTIVE.append(injector)
    try:
        yield injector
    finally:
        _ACTIVE.remove(injector)


def _stop(path: str) -> BaseException:
    return Terminated("signal 15")


def _full(path: str) -> BaseException:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


# --------------------------------------------------------------------------- the project

def _files(root: Path) -> dict[str, str]:
    """Every file under ``root`` (links followed, the store left out) → its SHA-256."""
    found = {}
    for folder, _dirs, names in os.walk(root, followlinks=True):
        relative = Path(folder).relative_to(root)
        if relative.parts[:1] == (STORE,):
            continue
        for name in names:
            path = Path(folder) / name
            found[str(relative / name)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _running_runs(root: Path) -> list[str]:
    database = root / STORE / "mlflow.db"
    if not database.exists():
        return []
    with contextlib.closing(sqlite3.connect(database)) as connection:
        try:
            return [row[0] for row in connection.execute(
                "SELECT run_uuid FROM runs WHERE status = 'RUNNING'")]
        except sqlite3.DatabaseError:  # the cell that damages the store: it has no runs
            return []


def _own(root: Path, relative: str) -> None:
    """Replace a folder linked to the session's built project by a copy of its own (the
    command writes there)."""
    link = root / relative
    source = link.resolve()
    link.unlink()
    shutil.copytree(source, link)


def _truncate(path: Path, keep: int = 40) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def _garble_tsv(path: Path) -> None:
    """A line that is not ``BB.CCC.VVV<TAB>text`` in the middle of a Bible export."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[:5]) + "garbled line without its verse id\n"
                    + "".join(lines[5:]), encoding="utf-8")


def _not_utf8(path: Path) -> None:
    path.write_bytes(b"In the beginning .\nAnd \xff God\n" + path.read_bytes())


def _short_new_testament(root: Path) -> None:
    """The project's own Bible exports, the New Testament cut to Matthew: the probe fits
    IBM-1 on every New Testament verse the editions share (most of its cost), and what a
    fault cell checks is how the command writes, not the alignment's numbers."""
    for export in (root / "data" / "bible").glob("*.tsv"):
        lines = export.read_text(encoding="utf-8").splitlines(keepends=True)
        export.write_text("".join(line for line in lines if int(line[:2]) <= 40),
                          encoding="utf-8")


def _xnli_project(root: Path) -> None:
    """User corpora and a tiny XNLI release in the project's own data folder."""
    write_text_corpora(root / "data")
    write_xnli_fixture(root / "data" / "xnli", pairs=6)


def _xnli_settings() -> dict[str, str]:
    """The settings of :func:`_xnli_project`: its corpora, each dev file made from XNLI."""
    values = {"languages": "[wiki-en,wiki-de,wiki-hi]", "downstream.task": "xnli",
              "downstream.task_path": "{root}/data/xnli", "corpus.dev_sentences": 10,
              "evaluate.dev_sentences": 10, "evaluate.curve_sentences": 5}
    for name, (iso, _code) in TEXT_CORPORA.items():
        values |= {f"corpora.{name}.iso": iso, f"corpora.{name}.dev":
                   f"corpora/xnli-dev.{iso}.txt", f"corpora.{name}.train":
                   f"corpora/{name}" if name == "wiki-en" else f"corpora/{name}/wiki.txt"}
    return values


# --------------------------------------------------------------------------- the commands

#: cheap settings every cell adds: tiny evaluations, two short editions for the word order,
#: one fastText epoch
FAST = {"evaluate.dev_sentences": 20, "evaluate.curve_sentences": 10, "spaces.epochs": 1,
        "evaluate.layers": "[0, 1]", "word_order.editions": "[s]", "word_order.verses": 20,
        "downstream.epochs": 1, "downstream.max_train_verses": 16,
        "downstream.max_test_verses": 16}
MODEL = "artifacts/models/untrained/seed0"


@dataclass(frozen=True)
class Command:
    """A writing command as a cell runs it: ``argv`` (``{root}``, ``{model}`` filled in),
    the folders it writes that must be the project's own (not linked to the session's build),
    whether it needs the tracked model project, whether it writes at all (``study run
    --plan`` only reads) and writes again when run twice (a trained model is skipped), and its
    damaged input: (what, how, the file
    as a pattern relative to the project, fragments of the one line)."""

    argv: tuple[str, ...]
    own: tuple[str, ...] = ()
    model: bool = False
    tracking: bool = True
    settings: dict = field(default_factory=dict)
    writes: bool = True
    again: bool = True
    prepare: Callable[[Path], None] | None = None
    damaged: tuple[str, Callable[[Path], None], str, tuple[str, ...]] | None = None


#: the damaged input of the commands that read a trained model's ``multilab.json`` first
MODEL_JSON_CUT_SHORT = ("multilab.json cut short", _truncate, f"{MODEL}/multilab.json",
                        ("multilab.json is not valid JSON",))

COMMANDS: dict[str, Command] = {
    "corpus export": Command(("corpus", "export", "--edition", "s"), own=("data",),
                             tracking=False),
    "corpus build": Command(
        ("corpus", "build"), own=("data", "artifacts/corpora"), tracking=False,
        # a dev corpus from Genesis: Punkt learning from the Old Testament was most of the
        # build, and the cells check how it writes (as test_pipeline's smaller corpus stage)
        settings={"corpus.dev_books": "[1, 1]", "corpus.dev_sentences": 1000},
        damaged=("garbled Bible export", _garble_tsv, "data/bible/3.tsv",
                 ("3.tsv line 6", "is not `BB.CCC.VVV<TAB>text`", "corpus export --edition 3"))),
    "corpus xnli-dev": Command(
        ("corpus", "xnli-dev"), own=("data",), tracking=False, prepare=_xnli_project,
        settings=_xnli_settings(),
        damaged=("XNLI dev file cut short", lambda p: _truncate(p, 300),
                 "data/xnli/XNLI-1.0/xnli.dev.tsv", ("xnli.dev.tsv",))),
    "corpus stats": Command(
        ("corpus", "stats"), own=("artifacts/corpora",), tracking=False,
        damaged=("train.txt not UTF-8", _not_utf8, "artifacts/corpora/train.txt",
                 ("train.txt is not valid UTF-8 (line 2", "dvc repro corpus"))),
    "vocab": Command(
        ("vocab",), own=("artifacts/corpora", "artifacts/vocab"), tracking=False,
        damaged=("train.txt not UTF-8", _not_utf8, "artifacts/corpora/train.txt",
                 ("train.txt is not valid UTF-8 (line 2", "dvc repro corpus"))),
    "spaces": Command(
        ("spaces",), own=("artifacts/vocab",),
        damaged=("tokenizer.json cut short", _truncate, "artifacts/vocab/english/tokenizer.json",
                 ("the tokenizer in", "is damaged", "dvc repro vocab"))),
    # a shared vocabulary of real languages: no spaces, but the stage's outputs (an empty knn
    # table, the reason) are written all the same (cli/data.py's _skip_spaces); no store is opened
    "spaces (shared vocabulary)": Command(
        ("spaces",), tracking=False, settings={"languages": "[3, s]", "vocab.mode": "joint"}),
    "word-order": Command(
        ("word-order",), own=("data",),
        damaged=("garbled Bible export", _garble_tsv, "data/bible/3.tsv",
                 ("3.tsv line 6", "is not `BB.CCC.VVV<TAB>text`", "corpus export --edition 3"))),
    "train": Command(
        ("train", "--seed", "1", "-m", "untrained"), own=("artifacts/vocab",), again=False,
        damaged=("tokenizer.json cut short", _truncate,
                 "artifacts/vocab/bilingual/tokenizer.json",
                 ("the tokenizer in", "bilingual is damaged", "dvc repro vocab"))),
    "evaluate": Command(
        ("evaluate", "{model}"), model=True,
        damaged=("model.safetensors cut short", _truncate, f"{MODEL}/model.safetensors",
                 ("holds a corrupted checkpoint",))),
    "probe": Command(
        ("probe", "{model}", "--languages", "3,s", "--verses", "4", "--layer", "1",
         "--out", "{root}/reports/probe.json"), model=True, tracking=False,
        own=("data",), prepare=_short_new_testament,
        damaged=("tokenizer.json cut short", _truncate, f"{MODEL}/tokenizer.json",
                 ("tokenizer",))),
    "similarity": Command(
        ("similarity", "{model}", "{model}", "--languages", "3,3", "--verses", "4"),
        model=True,
        damaged=MODEL_JSON_CUT_SHORT),
    "translate": Command(
        ("translate", "{model}", "--source", "3", "--target", "fake", "--sentences", "8",
         "--alphas", "1"), model=True,
        damaged=MODEL_JSON_CUT_SHORT),
    "mrr": Command(
        ("mrr", "{model}", "--source", "3", "--target", "fake", "--sentences", "8"),
        model=True,
        damaged=MODEL_JSON_CUT_SHORT),
    "model-order": Command(
        ("model-order", "{model}", "--source", "3", "--target", "fake", "--sentences", "8",
         "--layer", "1"), model=True,
        damaged=MODEL_JSON_CUT_SHORT),
    "static": Command(
        ("static", "--source", "3", "--target", "fake", "--models", "skipgram", "--rows", "32",
         "--sentences", "8", "--dim", "8", "--epochs", "1"),
        damaged=("train.txt not UTF-8", _not_utf8, "artifacts/corpora/train.txt",
                 ("train.txt is not valid UTF-8",)), own=("artifacts/corpora",)),
    "downstream": Command(
        ("downstream", "{model}"), model=True,
        damaged=("model.safetensors cut short", _truncate, f"{MODEL}/model.safetensors",
                 ("model.safetensors is damaged", "weights_sha256"))),
    "variant": Command(
        ("variant",), model=True, settings={"modification": "untrained", "seeds": "[0]"},
        damaged=("model.safetensors cut short", _truncate, f"{MODEL}/model.safetensors",
                 ("seed0 holds a corrupted checkpoint",))),
    "report": Command(
        ("report",), model=True,
        damaged=("MLflow store cut short", _truncate, f"{STORE}/mlflow.db",
                 ("the MLflow store sqlite:///", "is damaged", "run `multilab report`"))),
    "figures": Command(
        ("figures", "{model}"), model=True,
        damaged=("model.safetensors cut short", _truncate, f"{MODEL}/model.safetensors",
                 ("holds a corrupted checkpoint",))),
    "plots-page": Command(("plots-page", "{root}/reports/dvc-plots.html"), tracking=False,
                          again=False),
    "study report": Command(
        ("study", "report", "--all", "--studies", "{root}/studies", "--out",
         "{root}/docs/studies"), tracking=False, own=("studies",),
        damaged=("study spec not YAML", lambda p: p.write_text("rows: [a, b\n"),
                 "studies/dufter2020-table1.yaml", ("dufter2020-table1.yaml", "YAML"))),
    "study run": Command(
        ("study", "run", "dufter2020-table1", "--studies", "{root}/studies", "--seeds", "42",
         "--plan"), model=True, own=("studies",), writes=False, tracking=False,
        damaged=("record JSON cut short", _truncate, "results/*/untrained/*/evaluate.json",
                 ("evaluate.json",))),
    "check --stage": Command(("check", "--stage", "{root}/artifacts/accepted"),
                             tracking=False),
}


# --------------------------------------------------------------------------- the cells

@pytest.fixture(scope="module")
def model_project(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with a finished, tracked and evaluated model that costs no training (the
    ``untrained`` modification): what the commands reading a model need."""
    root = link_project(built_project, tmp_path_factory.mktemp("faults-model"))
    settings = cli_settings(root, **FAST)
    for command in (("train", "--seed", "0", "-m", "untrained"), ("evaluate", MODEL)):
        assert main(cli_args(settings, *command[:-1], str(root / command[-1]))
                    if command[0] == "evaluate" else cli_args(settings, *command)) == 0
    return root


def _project(command: Command, built_project: Path, model_project: Path, tmp_path: Path
             ) -> Path:
    root = tmp_path / "project"
    if command.model:
        shutil.copytree(model_project, root, symlinks=True)
    else:
        link_project(built_project, root)
    for relative in command.own:
        if (root / relative).is_symlink():
            _own(root, relative)
        elif not (root / relative).exists():
            shutil.copytree(ROOT / relative, root / relative)
    if command.prepare is not None:
        command.prepare(root)
    return root


def _argv(command: Command, root: Path) -> list[str]:
    settings = {key: str(value).format(root=root) for key, value in command.settings.items()}
    values = cli_settings(root, **(FAST | settings))
    return cli_args(values, *(part.format(root=root, model=root / MODEL)
                              for part in command.argv))


def _run(argv: list[str], root: Path, capsys, injector: Injector | None = None
         ) -> tuple[int, str, Injector]:
    injector = injector or Injector(root)
    with injected(injector):
        code = main(argv)
    return code, capsys.readouterr().err, injector


def _leftovers(root: Path) -> list[str]:
    """Temporaries (files or folders) anywhere in the project but the store."""
    left = []
    for folder, dirs, names in os.walk(root):
        relative = Path(folder).relative_to(root)
        if relative.parts[:1] == (STORE,):
            continue
        left += [str(relative / name) for name in dirs + names
                 if TEMPORARY.search(name) and not name.endswith((".lock", ".owner"))]
    return left


@dataclass(frozen=True)
class Cell:
    """One (command, fault) pair and its outcome: ``refused`` (exit 2, one line with
    ``fragments``), ``stopped`` (exit 143, one line) or ``unaffected`` (exit 0)."""

    command: str
    fault: str
    outcome: str
    fragments: tuple[str, ...] = ()
    at: int = 1
    slow: bool = False


SERVER_DOWN = ("MLFLOW_TRACKING_URI=http://127.0.0.1:", "does not answer")
DISK_FULL = ("No space left on device; free some space",)
#: commands whose work before the first write costs more than a few seconds (stop, disk full)
COSTLY = {"corpus build", "word-order", "spaces", "probe", "similarity", "translate", "static",
          "downstream", "figures", "evaluate", "variant"}


def _cells() -> list[Cell]:
    cells = []
    for name, command in COMMANDS.items():
        if command.writes:
            cells.append(Cell(name, "stop", "stopped", slow=name in COSTLY))
            cells.append(Cell(name, "disk full", "refused", DISK_FULL, slow=name in COSTLY))
        cells.append(Cell(name, "server down", "refused", SERVER_DOWN) if command.tracking
                     else Cell(name, "server down", "unaffected", slow=name in COSTLY))
        if command.damaged is not None:
            cells.append(Cell(name, f"damaged: {command.damaged[0]}", "refused",
                              command.damaged[3]))
    return cells


MATRIX = _cells()


@pytest.mark.parametrize("cell", [
    pytest.param(cell, id=f"{cell.command}|{cell.fault}",
                 marks=[pytest.mark.slow] if cell.slow else [])
    for cell in MATRIX])
def test_fault(cell: Cell, built_project: Path, model_project: Path, tmp_path: Path,
               capsys, monkeypatch) -> None:
    command = COMMANDS[cell.command]
    root = _project(command, built_project, model_project, tmp_path)
    monkeypatch.delenv(tracking.URI_VARIABLE, raising=False)
    argv = _argv(command, root)
    if cell.fault == "stop" and command.again:  # first a run to the end: the outputs the
        # stopped run must keep (a command whose second run writes nothing starts afresh)
        code, err, normal = _run(argv, root, capsys)
        assert code == 0, err
        assert normal.direct_writes() == [], "written in place, not renamed into place"
        assert not _leftovers(root) and not _running_runs(root)
    elif cell.fault == "server down":
        monkeypatch.setenv(tracking.URI_VARIABLE, f"http://127.0.0.1:{free_port()}")
    elif cell.fault.startswith("damaged"):
        _, damage, pattern, _ = command.damaged
        damage(next(root.glob(pattern)))
    before = _files(root)
    fault = {"stop": _stop, "disk full": _full}.get(cell.fault)
    code, err, injector = _run(argv, root, capsys, Injector(root, fault, cell.at))

    lines = [line for line in err.splitlines() if line.startswith("multilab:")]
    assert "Traceback" not in err, err
    if cell.outcome == "unaffected":
        assert code == 0, err
    else:
        assert code == (143 if cell.outcome == "stopped" else 2), err
        assert len(lines) == 1, err
        for fragment in cell.fragments:
            assert fragment in lines[0], lines[0]
    if fault is not None:
        assert injector.fired, f"the command wrote nothing: {injector.writes}"
    assert injector.direct_writes() == [], "written in place, not renamed into place"
    assert not _leftovers(root)
    assert not _running_runs(root)
    after = _files(root)
    if cell.outcome == "unaffected":
        assert set(before) <= set(after)
    else:  # the fault came at the first write (or before): every file as it was
        assert after == before


# --------------------------------------------------------------------------- SIGKILL

#: ``python -c KILLER <root> <n> <multilab arguments>``: multilab, SIGKILLed at the rename
#: that would put the n-th file it wrote into place (its temporary is complete, the target
#: still the previous one): no handler runs, nothing is cleaned up
KILLER = """
import os, signal, sys
root, at, writes = sys.argv[1] + os.sep, int(sys.argv[2]), []
def kill_at_the_rename(event, args):
    if event == "open" and isinstance(args[0], str) and isinstance(args[1], str):
        if args[0].startswith(root) and "w" in args[1] and "/mlruns/" not in args[0]:
            writes.append(args[0])
    elif event == "os.rename" and len(writes) >= at:
        os.kill(os.getpid(), signal.SIGKILL)
sys.addaudithook(kill_at_the_rename)
from multilab.cli import main
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.slow  # a fresh process each (imports: seconds on a loaded machine)
@pytest.mark.parametrize(("name", "at"), [("corpus stats", 1), ("study report", 3)])
def test_sigkill_mid_write_keeps_every_output_whole(name: str, at: int, built_project: Path,
                                                    tmp_path: Path, capsys) -> None:
    """SIGKILL between a complete temporary and its rename: every output is the previous
    one, whole; the same command again finishes and removes the killed writer's
    temporary (its pid is gone)."""
    command = COMMANDS[name]
    root = _project(command, built_project, built_project, tmp_path)
    argv = _argv(command, root)
    code, err, _ = _run(argv, root, capsys)  # the outputs the killed run must not damage
    assert code == 0, err
    before = _files(root)

    killed = subprocess.run([sys.executable, "-c", KILLER, str(root), str(at), *argv],
                            env=subprocess_env(), capture_output=True, text=True,
                            timeout=LAUNCH_TIMEOUT, check=False, cwd=root)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    stale = _leftovers(root)
    assert len(stale) == 1 and stale[0].endswith(".tmp"), stale
    assert {path: digest for path, digest in _files(root).items() if path not in stale} == \
        before  # the outputs renamed before the kill were the same bytes again

    code, err, again = _run(argv, root, capsys)
    assert code == 0, err
    assert again.direct_writes() == []
    assert not _leftovers(root) and _files(root) == before


# --------------------------------------------------------------------------- studies

def _toy_study(tmp_path: Path) -> tuple[Path, Path]:
    from tests.test_studies import toy_study

    return toy_study(tmp_path)


def _report_argv(tmp_path: Path, folder: Path, results: Path) -> list[str]:
    return ["--params", str(ROOT / "params.yaml"), "--set", f"paths.results={results}",
            "study", "report", "--all", "--studies",
            str(folder), "--out", str(tmp_path / "docs" / "studies")]


def test_a_full_disk_at_the_write_names_the_file(tmp_path: Path, capsys, monkeypatch) -> None:
    """A real full disk fails the write or its fsync with an OSError that names no file: the
    one line named none ("No space left on device; …"). It names the file being written,
    and nothing is half-written."""
    folder, results = _toy_study(tmp_path)
    argv = _report_argv(tmp_path, folder, results)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    assert main(argv) == 2
    err = capsys.readouterr().err
    out = tmp_path / "docs" / "studies"
    (line,) = err.splitlines()  # the first page written: the default study's, listed first
    page = Path(line.removeprefix("multilab: error: ").split(": No space")[0])
    assert page.parent == out and page.suffix == ".md", line
    assert line.endswith(": No space left on device; free some space (or point paths.* in "
                         "params.yaml elsewhere) and run the same command again; complete "
                         "files and checkpoints are kept")
    assert not _leftovers(tmp_path) and not page.exists()


def test_study_report_under_a_file_size_limit_is_one_line(tmp_path: Path, capsys) -> None:
    """``ulimit -f``: a write past the limit fails with EFBIG (Python ignores SIGXFSZ), which
    was a traceback: one line naming the file, exit 2, the previous report whole."""
    import resource

    folder, results = _toy_study(tmp_path)
    argv = _report_argv(tmp_path, folder, results)
    assert main(argv) == 0  # the previous report the limited one must keep
    capsys.readouterr()
    before = _files(tmp_path)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    done = subprocess.run([sys.executable, "-m", "multilab", *argv], cwd=tmp_path,
                          env=subprocess_env() | {"PYTHONDONTWRITEBYTECODE": "1"},
                          preexec_fn=limit, capture_output=True, text=True,
                          timeout=LAUNCH_TIMEOUT, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "File too large" in lines[0] and "ulimit -f" in lines[0], lines
    assert f"multilab: error: {tmp_path / 'docs'}" in lines[0]
    assert not _leftovers(tmp_path) and _files(tmp_path) == before


def _toy_run_project(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """A toy study whose data is built (the runner prepares nothing) and the ``study run``
    arguments of one (row, seed)."""
    from multilab.data.layout import BLOCKS_FILE
    from tests.test_studies import STUDIES, _spec

    folder = tmp_path / "studies"
    folder.mkdir()
    shutil.copytree(STUDIES / "claims", folder / "claims")
    _spec(folder)
    artifacts = tmp_path / "artifacts" / "studies" / "toy-study"
    (artifacts / "corpora").mkdir(parents=True)
    (artifacts / "corpora" / "train.txt").touch()
    (artifacts / "vocab").mkdir()
    (artifacts / "vocab" / BLOCKS_FILE).touch()
    results = tmp_path / "results"
    return folder, results, ["--params", str(ROOT / "params.yaml"), "--set",
                             f"paths.results={results}", "study", "run", "toy-study",
                             "--studies", str(folder), "--rows", "original", "--seeds", "0"]


def test_a_stopped_study_run_says_so_once(tmp_path: Path, capsys, monkeypatch) -> None:
    """The training under `study run` said "SIGTERM: stopped", then the study run said it
    again: one line, exit 143, the booking released."""
    from multilab.cli import train

    _, results, argv = _toy_run_project(tmp_path)

    def stopped(args) -> None:
        raise Terminated("signal 15")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(train, "cmd_train", stopped)
    assert main(argv) == 143
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("multilab")]
    assert lines == ["multilab: SIGTERM: stopped; run the same command again to resume from "
                     "the last checkpoint"]
    assert not (results / "ledger.csv").exists()


#: ``python -c SIGTERM_IN_RECORD <results> <multilab arguments>``: `study run` whose train is
#: a no-op and whose evaluate writes its record, a real SIGTERM arriving mid-write
SIGTERM_IN_RECORD = """
import os, signal, sys
from pathlib import Path
import multilab.cli as cli
import multilab.cli.evaluate
import multilab.cli.train
from multilab.studies.records import write_record

def evaluate(args):
    def hook(event, hooked):
        if event == "open" and isinstance(hooked[0], str) and ".evaluate.json." in hooked[0]:
            os.kill(os.getpid(), signal.SIGTERM)
    sys.addaudithook(hook)
    write_record(Path(sys.argv[1]), "toy", "evaluate", {"metrics": {"mu": 0.5}},
                 model={"modification": "original", "seed": 0, "fingerprint": "f"}, config={})

cli.train.cmd_train, cli.evaluate.cmd_evaluate = lambda args: None, evaluate
sys.exit(cli.main(sys.argv[2:]))
"""


def test_sigterm_while_a_study_run_writes_a_record_releases_the_booking(tmp_path: Path
                                                                        ) -> None:
    """A SIGTERM while `study run`'s evaluate wrote ``evaluate.json`` (outside any MLflow run,
    where no handler was installed) ended the process without a word, its booking left in
    the ledger and its temporary on disk. Now the record is written whole, then the run
    stops: one line, exit 143, the booking released."""
    _, results, argv = _toy_run_project(tmp_path)
    done = subprocess.run([sys.executable, "-c", SIGTERM_IN_RECORD, str(results), *argv],
                          cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True,
                          timeout=LAUNCH_TIMEOUT, check=False)
    assert done.returncode == 143, (done.returncode, done.stderr[-3000:])
    assert [line for line in done.stderr.splitlines() if line.startswith("multilab")] == [
        "multilab: SIGTERM: stopped; run the same command again to resume from the last "
        "checkpoint"]
    assert not (results / "ledger.csv").exists()
    (record,) = results.rglob("*.json")
    assert json.loads(record.read_text())["result"] == {"metrics": {"mu": 0.5}}
    assert not _leftovers(tmp_path)


# --------------------------------------------------------------------------- imports

def import_records_main():
    """scripts/import_records.py's ``main`` (scripts/ is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("import_records",
                                                  ROOT / "scripts" / "import_records.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def background_run(folder: Path, fingerprint: str = "f1") -> Path:
    """A background run's output folder (run.json, model.json, eval.json)."""
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({
        "modification": "original", "seed": 0, "commit": "abc1234", "device": "cpu",
        "threads": 1, "started": "2026-01-01T00:00:00+00:00",
        "finished": "2026-01-01T01:00:00+00:00"}))
    (folder / "model.json").write_text(json.dumps({
        "modification": "original", "seed": 0, "profile": "quick", "fingerprint": fingerprint}))
    (folder / "eval.json").write_text(json.dumps({"metrics": {"mu": 0.5}}))
    return folder


def test_an_import_never_overwrites_a_record_without_force(tmp_path: Path, capsys,
                                                           monkeypatch) -> None:
    """scripts/import_records.py is documented as idempotent, but rebuilt every record's
    configuration from today's params.yaml and rewrote the committed records (69 of them
    differ today): the same content is left as it is; other content is refused, nothing
    written, unless --force."""
    monkeypatch.chdir(ROOT)  # the script reads the project's params.yaml
    run = import_records_main()
    folder = background_run(tmp_path / "run")
    results = tmp_path / "results"
    assert run(["--results", str(results), "--runs", str(folder)]) == 0
    written = _files(results)
    assert len(written) == 2  # train and evaluate
    capsys.readouterr()
    assert run(["--results", str(results), "--runs", str(folder)]) == 0
    assert "2 record(s) unchanged, 0 written" in capsys.readouterr().out
    assert _files(results) == written
    record = next(results.rglob("evaluate.json"))
    committed = record.read_text().replace('"mu": 0.5', '"mu": 0.25')  # measured otherwise
    record.write_text(committed)
    before = _files(results)
    assert run(["--results", str(results), "--runs", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"import_records: error: {record} exists with other content: "
                                "an import never overwrites a record without --force "
                                "(nothing written)"]
    assert _files(results) == before and not _leftovers(results)
    assert run(["--results", str(results), "--runs", str(folder), "--force"]) == 0
    assert f"replaced {record}" in capsys.readouterr().out
    assert _files(results) == written


@pytest.mark.parametrize("fingerprint", ["../../../../../escaped", "../../../../.hidden"])
def test_a_fingerprint_cannot_write_a_record_outside_results(fingerprint: str, tmp_path: Path,
                                                             monkeypatch) -> None:
    """``record_path`` did not pass the fingerprint through ``safe_name``: a ``../`` in an
    imported model.json wrote records outside the repository. Every part is sanitised."""
    from multilab.studies.records import record_path

    monkeypatch.chdir(ROOT)
    folder = background_run(tmp_path / "run", fingerprint)
    results = tmp_path / "deep" / "results"
    assert import_records_main()(["--results", str(results), "--runs", str(folder)]) == 0
    found = sorted(p for p in tmp_path.rglob("*.json") if not p.is_relative_to(folder))
    assert len(found) == 2 and all(p.is_relative_to(results) for p in found), found
    assert all(not part.startswith(".") for p in found for part in p.relative_to(results).parts)
    path = record_path(results, "../x", "evaluate", {"modification": "..", "seed": "../0",
                                                      "fingerprint": fingerprint}, "../q")
    assert path.resolve().is_relative_to(results.resolve())


def test_study_run_again_says_it_replaces_the_records_it_measures_again(tmp_path: Path) -> None:
    """``--again``'s help said "the new records are read, the old stay", but a record of the
    same model and kind is one file, and measured again it is replaced: the help says so."""
    from multilab.cli import build_parser
    from multilab.studies.records import iter_records, write_record

    study = next(action for action in build_parser()._subparsers._group_actions[0]
                 .choices["study"]._actions if "--again" in action.option_strings)
    assert "the old stay" not in study.help
    assert "replaces the old one of its model and kind" in study.help
    model = {"modification": "original", "seed": 0, "fingerprint": "f"}
    for mu in (0.1, 0.2):  # measured, then measured again
        path = write_record(tmp_path, "toy", "evaluate", {"metrics": {"mu": mu}}, model=model,
                            config={})
    assert [record.data["result"] for record in iter_records(tmp_path)] == [
        {"metrics": {"mu": 0.2}}] and path.is_file()


# --------------------------------------------------------------------------- lanes, fused step
# docs/RELIABILITY.md, "Lanes" and "The fused CPU step": the lanes' signals and manifest, a
# lane clone's damaged progress.json, the fused step's compile.


def _lane_project(tmp_path: Path) -> tuple[Path, Path]:
    """A git project with scripts/lanes.sh (tests/test_lanes_script.py's) and its LANES_DIR."""
    from tests.test_lanes_script import _project

    return _project(tmp_path / "project"), tmp_path / "lanes"


def _lanes_sh(root: Path, lanes: Path, *args: str, path: str | None = None
              ) -> subprocess.CompletedProcess:
    env = subprocess_env() | {"LANES_DIR": str(lanes)}
    if path is not None:
        env["PATH"] = f"{path}:{env.get('PATH', os.environ['PATH'])}"
    return subprocess.run(["bash", str(root / "scripts" / "lanes.sh"), *args], cwd=root,
                          env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT)


def test_lanes_never_signal_a_session_that_is_not_a_running_lane_s(tmp_path: Path) -> None:
    """`pause`, `continue` and `stop` signal each lane's recorded process session. They
    signalled a finished lane's (its number free for any process to take), a number whose
    leader is another process now, and the words of a damaged laneK.session (`pkill -s 1`:
    the machine's first session). Only a live lane's session is signalled now (a fake pkill
    records what would be)."""
    root, lanes = _lane_project(tmp_path)
    lanes.mkdir()
    sleeper = subprocess.Popen(["setsid", "sleep", "60"])  # a session of our own
    try:
        _wait_for_session(sleeper.pid)
        start = Path(f"/proc/{sleeper.pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]
        lane_files = {
            1: {"session": str(sleeper.pid), "start": start},  # live: signalled
            2: {"session": str(sleeper.pid), "exit": "0"},  # finished
            3: {"session": str(sleeper.pid), "start": str(int(start) + 1)},  # number reused
            4: {"session": "garbage; 1"},  # damaged
            5: {"session": "1"},
        }
        for number, files in lane_files.items():
            (lanes / f"lane{number}.command").write_text("sleep 60\n")
            for suffix, text in files.items():
                (lanes / f"lane{number}.{suffix}").write_text(text + "\n")
        fake = tmp_path / "fake"
        fake.mkdir()
        (fake / "pkill").write_text(f'#!/usr/bin/env bash\necho "$*" >> {tmp_path}/pkill.log\n')
        (fake / "pkill").chmod(0o755)
        for action in ("pause", "continue"):
            assert _lanes_sh(root, lanes, action, path=str(fake)).returncode == 0
        assert (tmp_path / "pkill.log").read_text().splitlines() == [
            f"-STOP -s {sleeper.pid}", f"-CONT -s {sleeper.pid}"]
    finally:
        sleeper.kill()
        sleeper.wait()


def _wait_for_session(pid: int) -> None:
    """Until ``pid`` leads its own session (setsid has run)."""
    for _ in range(1000):
        with contextlib.suppress(OSError):
            if os.getsid(pid) == pid:
                return
        import time

        time.sleep(0.01)
    pytest.fail(f"process {pid} never led a session")


def test_a_damaged_progress_json_never_reaches_the_lanes_manifest(tmp_path: Path) -> None:
    """A lane's checkpoint with a damaged progress.json: the committed results/lanes.tsv got
    its bytes (`step \\xff/?`, not UTF-8); it says `step ?/?` now."""
    root, lanes = _lane_project(tmp_path)
    area = lanes / "lane1" / "artifacts" / "checkpoints" / "models" / "original" / "seed0"
    (area / "f1" / "checkpoint-7").mkdir(parents=True)
    (area / "f1" / "checkpoint-7" / "progress.json").write_bytes(b'\x00\xff "step": "12abc')
    (lanes / "lane1.command").write_text("sleep 60\n")
    done = _lanes_sh(root, lanes, "harvest")
    assert done.returncode == 0, done.stderr
    manifest = (root / "results" / "lanes.tsv").read_bytes().decode("utf-8")
    assert manifest.split("\t")[3] == "models/original/seed0 step ?/?"


@pytest.mark.parametrize("text", [
    "{}", '{"step": "x"}', '{"step": null, "total_steps": 10}',
    '{"step": 5, "total_steps": "ten"}', '{"step": 1e999}', '{"step": -5, "total_steps": 10}',
    '{"step": 50, "total_steps": 10}', '{"step": true}', "[1, 2]", "not json"])
def test_a_lane_s_damaged_progress_json_is_passed_over_with_a_warning(
        text: str, tmp_path: Path, caplog) -> None:
    """`study next --lanes-dir` reads each lane checkpoint's progress.json: a missing or
    non-numeric step was a traceback (KeyError, ValueError, TypeError, OverflowError) and a
    negative one or one past the total was planned ("from step -5/10"); now such a file is
    passed over, a warning naming it, the model planned as if it had no checkpoint."""
    from multilab.studies.lane_packing import lane_checkpoints
    from tests.test_lane_packing import _toy_result, toy_checkpoint_area

    area = toy_checkpoint_area(tmp_path / "lane1") / "checkpoint-100"
    area.mkdir(parents=True)
    (area / "progress.json").write_text(text)
    assert lane_checkpoints(tmp_path, [_toy_result()]) == {}
    assert f"{area / 'progress.json'}: not a checkpoint's progress" in caplog.text


def _fused_train(cfg_root: Path) -> list[str]:
    return cli_args(cli_settings(cfg_root, **{"train.step": "fused"}), "train", "--seed", "0")


def _failing_compile(function, **_options):
    """What torch.compile returns where inductor cannot build the step's loops."""
    import torch

    def failing(*_args, **_kwargs):
        raise torch._inductor.exc.InductorError(
            torch._inductor.exc.InvalidCxxCompiler(), None)
    return failing


def test_a_fused_run_without_a_c_compiler_is_one_line_before_training(
        project, capsys, monkeypatch) -> None:
    """No working C++ compiler (CXX naming none): the fused step's first step failed after
    inductor's two minutes of tracing with a 99-line InductorError; now one line before the
    data is prepared, exit 2, no MLflow run, no checkpoint."""
    import torch

    from tests.helpers import run_statuses

    monkeypatch.setattr(torch, "compile", _failing_compile)
    root = project.paths.artifacts.parent
    with torch._inductor.config.patch({"cpp.cxx": (None, "/nonexistent/g++")}):
        assert main(_fused_train(root)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "multilab: error: train.step = fused needs a C++ compiler"), err
    assert "/nonexistent/g++" in err[0] and "train.step eager" in err[0]
    assert "RUNNING" not in run_statuses(project) and "FINISHED" not in run_statuses(project)
    assert not list((root / "artifacts").glob("checkpoints/**/checkpoint-*"))


def test_a_fused_step_whose_compile_fails_is_one_line_and_the_run_failed(
        project, capsys, monkeypatch) -> None:
    """torch.compile failing inside the first step (a compiler that crashes, a cache it
    cannot write): a traceback, exit 1; now one line naming the failure, exit 2, the run
    FAILED, never a silent fall-back to another (uncompiled) trainer."""
    import torch

    from tests.helpers import run_statuses

    monkeypatch.setattr(torch, "compile", _failing_compile)
    assert main(_fused_train(project.paths.artifacts.parent)) == 2
    text = capsys.readouterr().err
    err = [line for line in re.sub(r"original s0:[^\n]*?step/s\]", "", text).splitlines()
           if line.strip()]  # the progress bar's lines
    assert len(err) == 1 and err[0].startswith(
        "multilab: error: train.step = fused: torch.compile failed (InductorError"), text
    assert run_statuses(project) == ["FAILED"]


def test_a_lane_lost_before_its_first_checkpoint_restarts_its_command(tmp_path: Path) -> None:
    """A lane of a machine that is gone, listed in results/lanes.tsv before it wrote a
    checkpoint (an empty fourth field, as lanes.sh writes it): `resume` read the line with
    bash's tab splitting, which merges two tabs, so the command went into the checkpoint
    field and the new lane ran an empty command. It runs the lane's command now."""
    from tests.test_lanes_script import _lanes, _project, _wait

    root = tmp_path / "project"
    (root / "results").mkdir(parents=True)
    line = "echo ran > ran.txt"
    (root / "results" / "lanes.tsv").write_text(f"1\tgone-host\t\t\t{line}\n")
    _project(root)
    lanes = tmp_path / "lanes"
    resumed = _lanes(root, lanes, "resume")
    assert f"starts again from step 0 in a new clone: {line}" in resumed.stdout
    assert "(the last:" not in resumed.stdout and " at )" not in resumed.stdout
    _wait(lambda: (lanes / "lane1.exit").exists(), "end of the restarted lane")
    assert (lanes / "lane1.command").read_text() == f"{line}\n"
    assert (lanes / "lane1" / "ran.txt").read_text() == "ran\n"


def test_a_second_lanes_sh_while_one_starts_lanes_is_refused(tmp_path: Path) -> None:
    """Two `lanes.sh run` (or `start`, `resume`) at once, as from two terminals: the second
    found no lane running yet (the first was setting up its clones), removed the first's lane
    files and started its own lane in the same clone. It is refused now, one line, exit 2,
    and the first's lane runs once."""
    from tests.test_lanes_script import _git, _lanes, _project, _wait

    root = _project(tmp_path / "project")
    setup = root / "scripts" / "setup.sh"
    setup.write_text("sleep 2\n" + setup.read_text().split("\n", 1)[1])  # a slow set-up
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "slow set-up")
    lanes = tmp_path / "lanes"
    env = subprocess_env() | {"LANES_DIR": str(lanes)}
    first = subprocess.Popen(["bash", str(root / "scripts" / "lanes.sh"), "run",
                              "echo first >> ../ran.txt; sleep 60"], cwd=root, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: (lanes / "lane1.command").exists(), "the first's lane files")
        second = _lanes(root, lanes, "run", "echo second >> ../ran.txt", check=False)
        assert second.returncode == 2, second.stderr
        assert second.stderr.splitlines() == [
            f"lanes.sh run: another lanes.sh is starting or resuming lanes in {lanes}; "
            "wait for it, then: bash scripts/lanes.sh status"], second.stderr
        _, err = first.communicate(timeout=LAUNCH_TIMEOUT)
        assert first.returncode == 0, err
        _wait(lambda: (lanes / "ran.txt").exists(), "the first's lane")
        # the running lane holds no lock: the next command is not refused
        assert "lane 1: running, left alone" in _lanes(root, lanes, "resume").stdout
        beside = _lanes(root, lanes, "run", "echo third >> ../ran.txt", check=False)
        assert beside.returncode == 2 and "lanes are running" in beside.stderr, beside.stderr
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        _lanes(root, lanes, "stop", check=False)
    assert (lanes / "ran.txt").read_text() == "first\n"


def _eager_when_suppressed(function, **_options):
    """torch.compile as it acts where dynamo's errors are suppressed: a compile that fails
    runs the function uncompiled, a warning its only trace."""
    import torch

    def step(*args, **kwargs):
        if torch._dynamo.config.suppress_errors:
            return function(*args, **kwargs)
        raise torch._inductor.exc.InductorError(torch._inductor.exc.InvalidCxxCompiler(), None)
    return step


def test_a_fused_run_that_would_fall_back_to_eager_unnoticed_is_refused(
        project, capsys, monkeypatch) -> None:
    """TORCHDYNAMO_SUPPRESS_ERRORS=1 in the environment (torch's switch): a failing compile
    of the fused step trained the model with the uncompiled step, exit 0, under the fused
    step's fingerprint. One line now, before the data, no run."""
    import torch

    from tests.helpers import run_statuses

    monkeypatch.setattr(torch, "compile", _eager_when_suppressed)
    root = project.paths.artifacts.parent
    with torch._dynamo.config.patch(suppress_errors=True):
        assert main(_fused_train(root)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["multilab: error: train.step = fused: TORCHDYNAMO_SUPPRESS_ERRORS is set, "
                   "so a compile that fails would train with the uncompiled step unnoticed; "
                   "unset it, or train.step eager (another fingerprint)"], err
    assert run_statuses(project) == []
    assert not list((root / "artifacts").glob("models/**/multilab.json"))


@pytest.mark.parametrize("cxx", ["", "/tmp", "/etc/passwd", "g++ -O2", "/nonexistent/g++"])
def test_a_compiler_that_is_no_program_is_one_line(cxx: str) -> None:
    """CXX empty, a folder, a file that is no program, a command with its options: each one
    line naming it (inductor's search raised PermissionError for the first three)."""
    import torch

    from multilab.errors import UserError
    from multilab.training.fused_step import check_compiler

    with torch._inductor.config.patch({"cpp.cxx": (None, cxx)}), \
            pytest.raises(UserError, match=r"train\.step = fused needs a C\+\+ compiler") as err:
        check_compiler()
    assert len(str(err.value).splitlines()) == 1 and repr(cxx)[1:-1] in str(err.value)


def test_a_merge_conflicted_lanes_list_resumes_only_its_lanes(tmp_path: Path) -> None:
    """results/lanes.tsv is committed from each machine; a merge that conflicted left its
    markers in it. `resume` took each marker line for a lane (`lane<<<<<<<.command`, a clone
    of that name, an empty command started); it passes them over now, a warning each, and
    resumes each lane once (both sides list lane 1: the first line wins)."""
    from tests.test_lanes_script import _lanes, _project, _wait

    root = tmp_path / "project"
    (root / "results").mkdir(parents=True)
    (root / "results" / "lanes.tsv").write_text(
        "<<<<<<< HEAD\n1\tgone\t\t\techo one > ran.txt\n=======\n"
        "1\tother\t\t\techo other > ran.txt\n2\tother\t\t\techo two > ran.txt\n>>>>>>> b\n")
    _project(root)
    lanes = tmp_path / "lanes"
    resumed = _lanes(root, lanes, "resume")
    assert resumed.stderr.count("not a lane (number, host, start, checkpoint, command") == 3
    _wait(lambda: all((lanes / f"lane{k}.exit").exists() for k in (1, 2)), "both lanes' end")
    assert sorted(p.name for p in lanes.iterdir() if p.is_dir()) == ["lane1", "lane2"]
    assert (lanes / "lane1" / "ran.txt").read_text() == "one\n"
    assert (lanes / "lane2" / "ran.txt").read_text() == "two\n"
