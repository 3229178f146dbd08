"""One GPU per process on a multi-GPU server, so parallel DVC queue workers do not pile up.

``dvc queue start -j N`` starts N workers that all see every GPU, and CUDA would put all of
them on GPU 0. ``claim_gpu`` gives each training/evaluation process a GPU of its own (or one
of ``MULTILAB_WORKERS_PER_GPU`` slots on it, BERT-small being tiny): it takes an exclusive
``flock`` on one lock file per GPU slot, least-busy GPU first, and sets
``CUDA_VISIBLE_DEVICES`` before anything in the process initialises CUDA. The kernel drops a
``flock`` when its process ends, however it ends, so a killed worker never leaves a GPU
claimed. When every slot is taken, the process waits for one.

It changes nothing when ``CUDA_VISIBLE_DEVICES`` is already set (the user chose), under a
distributed launcher (``accelerate launch`` / ``torchrun`` set ``LOCAL_RANK``: every rank needs
its own GPU), or with fewer than two GPUs (no ``nvidia-smi`` means no GPU): a no-op on CPU
machines and laptops. Imports only the standard library, so it runs before torch.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

from multilab.errors import UserError

log = logging.getLogger(__name__)

VISIBLE = "CUDA_VISIBLE_DEVICES"
LOCK_DIR_VARIABLE = "MULTILAB_GPU_LOCKS"
PER_GPU_VARIABLE = "MULTILAB_WORKERS_PER_GPU"
PRECISION_VARIABLE = "MULTILAB_MIXED_PRECISION"
PRECISIONS = ("bf16", "fp16", "no")
DEFAULT_LOCK_DIR = Path("/tmp/multilab-gpus")
#: Set by accelerate launch / torchrun in each rank; the launcher assigns the GPUs then.
LAUNCHER_VARIABLES = ("LOCAL_RANK",)
QUERY = "index,uuid,memory.used,utilization.gpu"
POLL_SECONDS = 10.0


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi reports it; memory in MiB, utilisation in percent."""

    index: int
    uuid: str
    memory_used: float = 0.0
    utilization: float = 0.0

    @property
    def load(self) -> tuple[float, float, int]:
        return (self.memory_used, self.utilization, self.index)


def _number(text: str) -> float:
    """nvidia-smi prints ``[N/A]`` (or ``[Not Supported]``) for what a GPU cannot report."""
    try:
        return float(text)
    except ValueError:
        return 0.0


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Parse ``nvidia-smi --query-gpu=index,uuid,memory.used,utilization.gpu --format=csv,
    noheader,nounits``."""
    gpus = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) < 2 or not cells[0].isdigit():
            continue
        cells += ["", ""]
        gpus.append(Gpu(int(cells[0]), cells[1], _number(cells[2]), _number(cells[3])))
    return gpus


def query_gpus() -> list[Gpu]:
    """The server's GPUs, from nvidia-smi: it does not initialise CUDA in this process (torch's
    device count would, and CUDA reads ``CUDA_VISIBLE_DEVICES`` only once)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    command = [exe, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as err:
        log.warning("nvidia-smi failed (%s): not choosing a GPU", err)
        return []
    return parse_nvidia_smi(done.stdout)


#: ``CUDA_VISIBLE_DEVICES`` values that hide every GPU (torch then trains on the CPU)
HIDDEN = ("", "-1")


def visible_device_kind(environ: MutableMapping[str, str] | None = None) -> str:
    """The kind of device a training started here trains on: ``cuda`` where nvidia-smi lists
    a GPU that ``CUDA_VISIBLE_DEVICES`` does not hide, else ``cpu``; without importing torch
    (a study that reads one kind of device checks it before anything starts)."""
    environ = os.environ if environ is None else environ
    if environ.get(VISIBLE, "unset").strip() in HIDDEN:
        return "cpu"
    return "cuda" if query_gpus() else "cpu"


@dataclass
class Claim:
    """A held GPU slot; ``release`` (also run at exit) unlocks it and restores the variable."""

    gpu: Gpu
    slot: int
    path: Path
    fd: int | None
    environ: MutableMapping[str, str] = field(repr=False)

    def release(self) -> None:
        if self.fd is None:
            return
        if self.environ.get(VISIBLE) == self.gpu.uuid:
            del self.environ[VISIBLE]
        os.close(self.fd)  # closing the only descriptor drops the flock
        self.fd = None


def _workers_per_gpu(environ: MutableMapping[str, str], per_gpu: int | None) -> int:
    raw = environ.get(PER_GPU_VARIABLE, "1") if per_gpu is None else per_gpu
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise UserError(f"{PER_GPU_VARIABLE} must be a whole number >= 1, not {raw!r}")
    return value


def mixed_precision(environ: MutableMapping[str, str] = os.environ) -> str:
    """Accelerate's ``mixed_precision``: bf16 on CUDA, none on the CPU, or the override.

    The override exists to measure bf16 against float32 on a GPU (docs/GPU.md); it is not part
    of a model's fingerprint, so train the two arms into different artefact directories.
    """
    chosen = environ.get(PRECISION_VARIABLE, "").strip()
    if not chosen:
        import torch  # here, not at the top: claim_gpu must run before anything touches CUDA

        return "bf16" if torch.cuda.is_available() else "no"
    if chosen not in PRECISIONS:
        raise UserError(f"{PRECISION_VARIABLE}={chosen!r} is not one of {', '.join(PRECISIONS)}")
    return chosen


def _lock(path: Path) -> int | None:
    """An exclusive, non-blocking flock on ``path``; the open descriptor, or None if taken."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    with contextlib.suppress(OSError):  # past the umask: other users' workers open it too
        os.fchmod(fd, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    with contextlib.suppress(OSError):  # who holds it, for a person looking at the lock dir
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
    return fd


def _prepare_lock_dir(lock_dir: Path) -> None:
    """Create the lock directory, writable by every user (several users may share GPUs)."""
    if lock_dir.is_dir():
        return
    lock_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        lock_dir.chmod(0o1777)


def _try_claim(
    gpus: list[Gpu], per_gpu: int, lock_dir: Path, environ: MutableMapping[str, str]
) -> Claim | None:
    """The first free slot: every GPU's first slot (least busy first), then second slots …"""
    ordered = sorted(gpus, key=lambda gpu: gpu.load)
    for slot in range(per_gpu):
        for gpu in ordered:
            # named by UUID: indices differ between containers that see different GPUs
            path = lock_dir / f"{gpu.uuid or gpu.index}.slot{slot}.lock"
            fd = _lock(path)
            if fd is not None:
                return Claim(gpu, slot, path, fd, environ)
    return None


def _try_claim_in(
    gpus: list[Gpu], per_gpu: int, lock_dir: Path, environ: MutableMapping[str, str]
) -> Claim | None:
    """``_try_claim`` with one clear error when the lock directory is not usable."""
    try:
        _prepare_lock_dir(lock_dir)
        return _try_claim(gpus, per_gpu, lock_dir, environ)
    except OSError as err:  # a taken lock is not an error: _lock returns None for it
        raise UserError(
            f"cannot keep GPU locks in {lock_dir} ({err}); set {LOCK_DIR_VARIABLE} to a "
            "directory every worker can write to"
        ) from err


def _cuda_already_initialised() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def claim_gpu(
    *,
    environ: MutableMapping[str, str] | None = None,
    lock_dir: Path | None = None,
    per_gpu: int | None = None,
    wait: float | None = None,
    poll: float = POLL_SECONDS,
) -> Claim | None:
    """Claim a free GPU slot for this process and make it the only visible GPU.

    Returns None (and changes nothing) when there is nothing to choose; see the module
    docstring. ``wait`` bounds the wait for a free slot in seconds (None: wait until one is
    free); past it, ``UserError``.
    """
    environ = os.environ if environ is None else environ
    if VISIBLE in environ or any(name in environ for name in LAUNCHER_VARIABLES):
        return None
    per_gpu = _workers_per_gpu(environ, per_gpu)
    gpus = query_gpus()
    if len(gpus) < 2:
        return None
    if _cuda_already_initialised():
        log.warning("CUDA is already initialised: too late to choose a GPU for this process")
        return None
    lock_dir = Path(lock_dir or environ.get(LOCK_DIR_VARIABLE) or DEFAULT_LOCK_DIR)
    deadline = None if wait is None else time.monotonic() + wait
    waiting = False
    while (claim := _try_claim_in(gpus, per_gpu, lock_dir, environ)) is None:
        slots = len(gpus) * per_gpu
        if deadline is not None and time.monotonic() >= deadline:
            raise UserError(
                f"all {slots} GPU slots in {lock_dir} are taken; set {VISIBLE} to choose a GPU "
                f"yourself or {PER_GPU_VARIABLE} to share GPUs"
            )
        if not waiting:
            print(f"multilab: all {slots} GPU slots in {lock_dir} are taken; waiting for one",
                  file=sys.stderr, flush=True)
            waiting = True
        time.sleep(poll)
        gpus = query_gpus() or gpus
    environ[VISIBLE] = claim.gpu.uuid
    atexit.register(claim.release)
    print(f"multilab: GPU {claim.gpu.index} ({claim.gpu.uuid}), slot {claim.slot + 1}/{per_gpu}",
          file=sys.stderr, flush=True)
    return claim
