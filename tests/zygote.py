"""A fork server for the ``multilab`` processes that DVC starts in the pipeline tests.

Each ``multilab`` process spends 4–6 CPU s importing torch, transformers and MLflow before it
does a smoke stage's second of work; a ``dvc repro`` of the smoke study starts fifteen of them.
Where a test checks DVC's wiring and not the process boundary, a stand-in ``multilab`` first on
``PATH`` hands its arguments, working directory, environment and standard streams to this
server, which has imported those libraries once and forks a child per command: the child is a
real process (its own pid, environment, directory, streams and exit status) that skips the
imports. The stand-in waits for it, passes SIGTERM/SIGINT on, ends with its exit status (or
signal), and takes the child with it when killed (the child watches the stand-in's socket).

Not for the tests of the process boundary itself (SIGKILL and resume, DVC's signals, two
processes, thread choice): they start the real ``multilab``. The stand-in also starts the real
one when the request's environment differs from the server's in a variable that the preloaded
libraries read when imported (``IMPORT_TIME_PREFIXES``), and the fixture uses no server when
coverage is measured (coverage's subprocess patch would miss the children).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

#: What the server imports before it forks; what multilab imports of its own (cheap, and
#: some of it reads the environment) each child imports for itself.
PRELOAD = ("torch", "transformers", "transformers.models.bert.modeling_bert",
           "mlflow", "mlflow.tracking", "mlflow.store.tracking.sqlalchemy_store", "git",
           "tabulate", "pandas", "scipy.stats", "safetensors.torch", "tokenizers", "sklearn",
           "matplotlib.figure", "matplotlib.backends.backend_agg", "matplotlib.ticker",
           "nltk.tokenize")
#: Environment variables read when those libraries are imported (tqdm, Hugging Face, OpenMP
#: and friends, torch, Python): a request that sets one differently runs the real command.
#: multilab's thread choice too: it sets torch's threads only before torch is imported.
IMPORT_TIME_PREFIXES = ("TQDM_", "HF_", "TRANSFORMERS_", "OMP_", "MKL_", "KMP_", "TORCH",
                        "PYTORCH_", "CUDA_", "LD_", "PYTHON", "OPENBLAS_", "TOKENIZERS_",
                        "MPL", "NLTK", "MULTILAB_THREADS", "MULTILAB_WORKERS")
ADDRESS_VARIABLE = "MULTILAB_TEST_ZYGOTE"
#: an empty MLflow store (conftest's ``stores_from_a_template``) that a new store is copied from
TEMPLATE_VARIABLE = "MULTILAB_TEST_STORE_TEMPLATE"
OFF = "no"  # MULTILAB_TEST_ZYGOTE=no: every test starts the real command
LOG = "server.log"  # beside the socket: "ready", then why a request ran the real command
HEADER = struct.Struct("!Q")


def stand_in_path(address: str | os.PathLike) -> Path:
    """The stand-in ``multilab`` lives beside the server's socket."""
    return Path(address).with_name("multilab")


def import_time_environment(environ: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in environ.items() if key.startswith(IMPORT_TIME_PREFIXES)}


def _read_exactly(connection: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = connection.recv(min(left, 1 << 16))
        if not chunk:
            raise ConnectionError("the stand-in went away")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _run_child(connection: socket.socket, request: dict, streams: list[int]) -> None:
    """In the forked child: become the requested ``multilab`` process, run it, exit."""
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(number, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    for target, fd in enumerate(streams):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = request["argv"]
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own streams
    sys.stdout = open(1, "w", buffering=1 if os.isatty(1) else -1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115

    def die_with_the_stand_in() -> None:  # EOF: the stand-in was killed
        connection.recv(1)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=die_with_the_stand_in, daemon=True).start()
    import numpy  # a process of its own draws its own entropy (``random`` reseeds at fork)

    numpy.random.seed()
    code: object = 0
    try:
        from multilab.cli import main

        code = main()
    except SystemExit as exit_:
        code = exit_.code
    except BaseException:  # what Python prints for an uncaught exception
        traceback.print_exc()
        code = 1
    import atexit

    atexit._run_exitfuncs()  # as at a normal interpreter exit (MLflow ends its runs here)
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code & 0xFF)


def stores_without_fsync() -> None:
    """MLflow's SQLite stores in this process commit without waiting for the disk (``PRAGMA
    synchronous=OFF``): a commit is a few milliseconds instead of ≈ 20 (an fsync each), and
    a training logs every step. A killed process loses nothing by it (its writes are in the
    kernel's cache); only a machine that loses power would, which no test makes."""
    import sqlalchemy
    from sqlalchemy import event

    if not event.contains(sqlalchemy.engine.Engine, "connect", _no_fsync):
        event.listen(sqlalchemy.engine.Engine, "connect", _no_fsync)


def _no_fsync(connection: object, _record: object) -> None:
    import sqlite3

    if isinstance(connection, sqlite3.Connection):
        # a damaged file stays MLflow's to find (here it would make MLflow retry a minute)
        with contextlib.suppress(sqlite3.DatabaseError):
            connection.execute("PRAGMA synchronous=OFF")


def stores_from(template: Path, setattr: Callable[[object, str, object], None] = setattr) -> None:
    """A new SQLite store is a copy of ``template`` (SQLite's backup, page for page) instead
    of MLflow's schema migrations, ≈ 1.9 CPU s each; MLflow then checks the copy's schema
    version and adds its Default experiment as on any new store. The test process passes a
    monkeypatch's ``setattr`` (undone after the session); a fork server's child keeps it."""
    import sqlite3

    from mlflow.store.db import utils
    from mlflow.store.model_registry import sqlalchemy_store as registry

    migrate = utils._initialize_tables

    def copy_the_template(engine) -> None:
        if engine.url.get_backend_name() != "sqlite":
            migrate(engine)
            return
        with contextlib.closing(sqlite3.connect(template)) as source, engine.connect() as target:
            source.backup(target.connection.driver_connection)

    for module in (utils, registry):
        setattr(module, "_initialize_tables", copy_the_template)


def serve(address: str) -> None:
    """Import ``PRELOAD``, then fork a child per request while the worker that started it lives."""
    import importlib

    own_environment = import_time_environment(dict(os.environ))
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # as cli.quiet_libraries
    gc.disable()  # no collection leaves holes between the preloaded objects' pages
    for name in PRELOAD:
        importlib.import_module(name)
    stores_without_fsync()
    if template := os.environ.get(TEMPLATE_VARIABLE):
        stores_from(Path(template))
    # the preloaded objects (millions) out of every collection in the children: a child's full
    # collection walks only what the child made, and writes no page it shares with the server
    # (Python's advice for a fork without exec: gc.disable early, gc.freeze before forking)
    gc.freeze()
    gc.enable()
    set_by_the_libraries = {key for key, value in import_time_environment(dict(os.environ)).items()
                            if own_environment.get(key) != value}  # torch's KMP_*, for one
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(address)
    listener.listen(16)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_read, selectors.EVENT_READ, "child")
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    parent = os.getppid()
    while os.getppid() == parent:  # an xdist worker that died leaves no server behind
        for key, _ in selector.select(timeout=5):
            if key.data == "accept":
                connection, _ = listener.accept()
                try:
                    start, fds, _, _ = socket.recv_fds(connection, HEADER.size, 3)
                    (size,) = HEADER.unpack(
                        start + _read_exactly(connection, HEADER.size - len(start)))
                    request = json.loads(_read_exactly(connection, size))
                except (ConnectionError, struct.error, ValueError):
                    connection.close()
                    continue
                differing = {name for name in own_environment.keys()
                             | import_time_environment(request["env"]).keys()
                             if own_environment.get(name) != request["env"].get(name)
                             and name not in set_by_the_libraries}
                if differing:
                    print(f"real multilab: {sorted(differing)} differ", flush=True)
                    connection.sendall(b"real\n")
                    connection.close()
                    for fd in fds:
                        os.close(fd)
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    for other in children.values():
                        other.close()
                    listener.close()
                    selector.close()
                    os.close(wake_read)
                    os.close(wake_write)
                    _run_child(connection, request, fds)
                for fd in fds:
                    os.close(fd)
                connection.sendall(f"pid {pid}\n".encode())
                children[pid] = connection
            else:
                os.read(wake_read, 4096)
                while children:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                    if pid == 0:
                        break
                    connection = children.pop(pid, None)
                    if connection is None:
                        continue
                    ending = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                              else f"exit {os.WEXITSTATUS(status)}")
                    with contextlib.suppress(OSError):  # the stand-in was killed
                        connection.sendall(f"{ending}\n".encode())
                    connection.close()


#: The stand-in: Python without ``site`` (it starts in milliseconds). It sends the request
#: with its standard streams, forwards the stop signals to the child and ends as the child
#: ended; told ``real``, it becomes the real command.
STAND_IN = """#!{python} -S
import json, os, signal, socket, struct, sys
request = json.dumps({{"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
connection = socket.socket(socket.AF_UNIX)
try:
    connection.connect(os.environ[{variable!r}])
    socket.send_fds(connection, [struct.pack("!Q", len(request)) + request], [0, 1, 2])
    reply = connection.makefile("rb")
    first = reply.readline().decode()
except (OSError, KeyError):
    first = "real"
if not first.startswith("pid "):
    os.execv({real!r}, [{real!r}, *sys.argv[1:]])
child = int(first.split()[1])
for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(number, lambda number, frame: os.kill(child, number))
while True:
    try:
        line = reply.readline().decode()
        break
    except InterruptedError:
        continue
kind, _, value = line.partition(" ")
if kind == "signal":
    signal.signal(int(value), signal.SIG_DFL)
    os.kill(os.getpid(), int(value))
sys.exit(int(value) if kind == "exit" else 1)
"""


if __name__ == "__main__":
    serve(sys.argv[1])
