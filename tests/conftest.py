"""Shared fixtures: one real smoke-profile project (corpora + vocab from the Bible DB), built
once per test session in a temp dir; a fresh project per test; a real ``mlflow server`` and
two smoke models trained against it (used by the resume and tracking-server tests), and a
variant beside them (the MLflow UI's Chart and Compare views).

Under pytest-xdist (``-n``, pyproject's addopts) each worker is a process sharing the cores:
it takes its share of torch threads, the built project is built once for all workers, and a
module's tests run on one worker (xdist_scheduling.py), so module fixtures are built once."""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from filelock import FileLock

from multilab.files import PRINT_VARIABLE
from multilab.threads import OMP_THREADS, usable_cores

if TYPE_CHECKING:
    from multilab.config import Config

# torch, MLflow and the package's heavy modules are imported inside the fixtures: the xdist
# controller loads this file too (for its hooks) and runs no test, so it starts in a second

pytest_plugins = ["tests.cpu_accounting"]  # MULTILAB_TEST_CPU_LOG: CPU seconds per test phase

SERVER_TIMEOUT = 180  # `mlflow server` start-up on a loaded 2-core machine
#: MLflow 3's server also starts three job consumers (huey, 20 worker threads) for GenAI jobs
#: the tests never submit: 10 processes instead of 2, and a slower start (docs/tracking.md).
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
BUILT = ".built"  # written last into the shared built project: the build is complete
#: Python's cycle collector, less often than its default (700, 10, 10): a test process holds a
#: few million long-lived objects (torch, transformers, MLflow, pandas) and each full
#: collection walks them all, ≈ 0.3 CPU s, about once every 25 tests: 15–17 of the fast loop's
#: 144–163 CPU s went to it, 2.3–2.4 with these thresholds, at the same peak memory
#: (benchmarks/bench_collector.py, results/collector-2026-11-29.json).
#: Reference counting still frees everything that is not in a cycle at once.
COLLECTOR_THRESHOLDS = (50_000, 20, 100)


def pytest_configure(config: pytest.Config) -> None:
    """Figures as PNG only (``MULTILAB_PRINT_FIGURES=no``, in-process and in every process a
    test starts): a PDF costs about as much as its PNG, and only the tests that check the print
    copy (they set ``yes``) read one. An xdist worker shares the cores with the other workers:
    its torch (in-process tests) and what it starts take its share of threads, as
    MULTILAB_WORKERS would give them. The cycle collector runs less often
    (``COLLECTOR_THRESHOLDS``)."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    os.environ.setdefault(PRINT_VARIABLE, "no")
    if workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")):
        import torch

        share = max(1, usable_cores() // workers)
        os.environ[OMP_THREADS] = str(share)
        torch.set_num_threads(share)


@pytest.fixture(scope="session")
def built_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Exported editions, corpora and vocabulary, built for real once (under xdist, once for
    all workers: the first builds it in their common temp dir while the others wait)."""
    from multilab.data.project import build_project_data
    from tests.helpers import smoke_config

    os.environ.pop("MLFLOW_TRACKING_URI", None)
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        tmp = tmp_path_factory.mktemp("project")
        build_project_data(smoke_config(tmp))
        return tmp
    shared = tmp_path_factory.getbasetemp().parent / "built_project"
    with FileLock(f"{shared}.lock"):
        if not (shared / BUILT).exists():
            shutil.rmtree(shared, ignore_errors=True)  # a worker that died half-way
            build_project_data(smoke_config(shared))
            (shared / BUILT).touch()
    return shared


@pytest.fixture
def one_thread() -> Iterator[None]:
    """The test trains and evaluates in-process on one thread (helpers.one_torch_thread)."""
    from tests.helpers import one_torch_thread

    with one_torch_thread():
        yield


@pytest.fixture
def project(built_project: Path, tmp_path: Path) -> Config:
    """A fresh smoke project per test, sharing the session's corpora and vocabulary."""
    from tests.helpers import link_project, smoke_config

    return smoke_config(link_project(built_project, tmp_path))


@pytest.fixture(scope="session")
def preloaded_multilab() -> Iterator[dict[str, str]]:
    """Environment for processes whose ``multilab`` commands may skip their imports
    (tests/zygote.py): ``PATH`` with the stand-in first and the server's address. Empty (the
    real command) when coverage is measured, or with ``MULTILAB_TEST_ZYGOTE=no``."""
    import sys
    import tempfile

    from tests import zygote
    from tests.helpers import BIN, ROOT, subprocess_env

    measured = {"COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START"} & os.environ.keys()
    if os.environ.get(zygote.ADDRESS_VARIABLE) == zygote.OFF or measured:  # coverage's own
        yield {}
        return
    folder = Path(tempfile.mkdtemp(prefix="zygote-"))  # short: a socket path
    address, log = folder / "socket", folder / zygote.LOG
    stand_in = zygote.stand_in_path(address)
    stand_in.write_text(zygote.STAND_IN.format(
        python=sys.executable, variable=zygote.ADDRESS_VARIABLE, real=str(BIN / "multilab")))
    stand_in.chmod(0o755)
    with log.open("w") as handle:
        server = subprocess.Popen([sys.executable, "-m", "tests.zygote", str(address)],
                                  cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT,
                                  env=subprocess_env(),  # what its requests will have
                                  start_new_session=True)
    try:
        deadline = time.monotonic() + SERVER_TIMEOUT
        while not log.read_text().startswith("ready"):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the multilab fork server did not start:\n{log.read_text()}")
            time.sleep(0.1)
        yield {"PATH": f"{folder}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}",
               zygote.ADDRESS_VARIABLE: str(address)}
    finally:
        _stop(server)  # its process group: the server and any child still running
        shutil.rmtree(folder, ignore_errors=True)


# --------------------------------------------------------------------------- tracking server


def _wait_for_health(uri: str, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVER_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"mlflow server exited {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    pytest.fail(f"mlflow server did not answer within {SERVER_TIMEOUT}s:\n"
                + log.read_text()[-3000:])


def _stop(server: subprocess.Popen) -> None:
    """SIGTERM the server's process group (it runs uvicorn as a child), then SIGKILL."""
    for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 20)):
        if server.poll() is not None:
            break
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            break
        try:
            server.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):  # a worker may outlive its leader
        os.killpg(server.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def tracking_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``mlflow server`` (SQLite store, proxied local artefacts) on a loopback port."""
    with mlflow_server(tmp_path_factory.mktemp("server")) as uri:
        yield uri


@pytest.fixture
def start_server():
    """:func:`mlflow_server`, for a test that stops and restarts its own server."""
    return mlflow_server


@contextlib.contextmanager
def mlflow_server(root: Path, port: int | None = None) -> Iterator[str]:
    """``mlflow server`` with its store in ``root``, stopped on exit; started again on the
    same ``root`` and port it serves the same runs (a server that died and came back)."""
    from tests.helpers import BIN, free_port, subprocess_env

    uri = f"http://127.0.0.1:{port or free_port()}"
    log = root / "server.log"
    with log.open("a") as handle:
        server = subprocess.Popen(
            [str(BIN / "mlflow"), "server",
             "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
             "--artifacts-destination", str(root / "artifacts"),
             "--host", "127.0.0.1", "--port", uri.rsplit(":", 1)[1], "--workers", "1"],
            stdout=handle, stderr=subprocess.STDOUT, env=subprocess_env() | SERVER_ENV, cwd=root,
            start_new_session=True,  # its own process group: stopped as a whole
        )
    try:
        _wait_for_health(uri, server, log)
        yield uri
    finally:
        _stop(server)


@pytest.fixture(scope="session")
def served(tracking_server: str, built_project: Path, tmp_path_factory: pytest.TempPathFactory,
           preloaded_multilab: dict[str, str]) -> dict:
    """Seeds 0 and 1 trained at once against the server, then evaluated and reported (the
    uninterrupted reference of the resume tests, too)."""
    from mlflow.tracking import MlflowClient

    from multilab import tracking
    from multilab.cli import main
    from multilab.evaluation.evaluate import evaluate_and_record
    from tests.helpers import (
        cli_args,
        cli_settings,
        config_of,
        finish,
        launch,
        link_project,
        one_torch_thread,
        subprocess_env,
    )

    root = link_project(built_project, tmp_path_factory.mktemp("served"))
    settings = cli_settings(root)
    cfg = config_of(settings)
    logs = {seed: root / f"train-seed{seed}.log" for seed in (0, 1)}
    env = subprocess_env(tracking_server, preloaded_multilab)
    processes = {seed: launch(settings, logs[seed], env, "train", "--seed", str(seed))
                 for seed in (0, 1)}
    for seed, process in processes.items():
        finish(process, logs[seed])
    with pytest.MonkeyPatch.context() as patch, one_torch_thread():
        patch.setenv(tracking.URI_VARIABLE, tracking_server)
        records = {seed: evaluate_and_record(cfg, cfg.paths.model_dir("original", seed))
                   for seed in (0, 1)}
        report = main(cli_args(settings, "report"))
        runs = tracking.search_runs(cfg.paths, cfg.experiment)
        client = MlflowClient(tracking_server)
        full = {run_id: client.get_run(run_id) for run_id in runs["run_id"]}
        history = {run_id: client.get_metric_history(run_id, "train_loss")
                   for run_id in runs["run_id"]}
        artifacts = {run_id: [a.path for a in client.list_artifacts(run_id)]
                     for run_id in runs["run_id"]}
    return {"cfg": cfg, "records": records, "report": report, "runs": runs, "full": full,
            "history": history, "artifacts": artifacts, "uri": tracking_server}


@pytest.fixture(scope="session")
def served_variant(served: dict) -> dict:
    """:func:`served` and then a variant beside its study, as ``dvc exp run -S
    modification=lang-pos`` makes one (``multilab variant``, seed 0, against the same server):
    two rows, the baseline and a variant, each a parent run over its seeds."""
    from multilab import tracking
    from multilab.evaluation.variant import run_variant
    from tests.helpers import cli_settings, config_of, one_torch_thread

    root = served["cfg"].paths.mlruns.parent
    cfg = config_of(cli_settings(root, modification="lang-pos", seeds="[0]"))
    with pytest.MonkeyPatch.context() as patch, one_torch_thread():
        patch.setenv(tracking.URI_VARIABLE, served["uri"])
        summary = run_variant(cfg)
        groups = tracking.search_runs(cfg.paths, cfg.experiment, groups=True)
    parents = groups[groups[f"tags.{tracking.ROLE_TAG}"] == tracking.GROUP]
    return served | {"variant": summary, "variant_cfg": cfg,
                     "parents": dict(zip(parents["tags.modification"], parents["run_id"],
                                         strict=True))}


@pytest.fixture(scope="session", autouse=True)
def repository_results_untouched() -> Iterator[None]:
    """No test writes into the repository's committed results/ (every test project sets
    ``paths.results`` inside its temp dir)."""
    results = Path(__file__).resolve().parent.parent / "results"

    def listing() -> dict[str, float]:
        return {str(p): p.stat().st_mtime for p in results.rglob("*")} if results.is_dir() else {}

    before = listing()
    yield
    assert listing() == before, "a test wrote into the repository's results/"


@pytest.fixture(scope="session", autouse=True)
def stores_from_a_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A new MLflow SQLite store costs ≈ 1.9 CPU s of schema migrations, and most tests open
    one in a project of their own: here, and in the fork server's commands, a new store is
    instead a copy of one empty, migrated store made once per session (the schema MLflow
    would write, without its Default experiment, which the copy's first client creates with
    the copy's own artefact root; tests/zygote.py's ``stores_from``). The store file appears
    exactly when MLflow creates it (a refused command still leaves no ``mlruns/``); real
    processes migrate."""
    import sqlite3

    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    from tests import zygote

    shared = tmp_path_factory.getbasetemp().parent / "mlflow-store-template"
    template = shared / "mlflow.db"
    with FileLock(f"{shared}.lock"):
        if not template.exists():
            shared.mkdir(parents=True, exist_ok=True)
            building = shared / "building.db"
            building.unlink(missing_ok=True)
            SqlAlchemyStore(f"sqlite:///{building}", str(shared / "artifacts")).engine.dispose()
            with contextlib.closing(sqlite3.connect(building)) as db, db:
                db.execute("DELETE FROM experiment_tags")
                db.execute("DELETE FROM experiments")
            building.replace(template)
    os.environ[zygote.TEMPLATE_VARIABLE] = str(template)
    zygote.stores_without_fsync()  # and commits without fsync (its docstring says why)
    with pytest.MonkeyPatch.context() as patch:
        zygote.stores_from(template, patch.setattr)
        yield


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadscope`` (pyproject's addopts): by module, the longest first."""
    if config.getvalue("dist") != "loadscope":
        return None
    from tests.xdist_scheduling import ModuleScheduling

    return ModuleScheduling(config, log)
