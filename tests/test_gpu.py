"""GPU claiming for parallel queue workers (multilab.devices), on a machine without GPUs.

The GPUs are faked at the one place multilab learns about them: ``devices.query_gpus`` in
process, or an ``nvidia-smi`` script on PATH for other processes. The locks are real
``flock``s in a temp directory, so a second process and a killed process are real too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from multilab import cli, devices
from multilab.cli import evaluate, params, train
from multilab.devices import VISIBLE, Gpu, claim_gpu
from multilab.errors import UserError

# GPU 1 is the least busy, then GPU 0 (less memory in use than GPU 2)
GPUS = [
    Gpu(0, "GPU-aaaa", memory_used=900, utilization=0),
    Gpu(1, "GPU-bbbb", memory_used=2, utilization=0),
    Gpu(2, "GPU-cccc", memory_used=5000, utilization=80),
]
SMI_OUTPUT = "0, GPU-aaaa, 900, 0\n1, GPU-bbbb, 2, 0\n2, GPU-cccc, 5000, 80\n"


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> list[Gpu]:
    monkeypatch.setattr(devices, "query_gpus", lambda: list(GPUS))
    return GPUS


@pytest.fixture
def claims():
    """Claims made by a test, released afterwards (they would otherwise last until exit)."""
    made: list[devices.Claim] = []
    yield made
    for claim in made:
        claim.release()


def _claim(lock_dir: Path, claims: list, **kwargs) -> tuple[devices.Claim | None, dict]:
    """One worker's claim, with its own environment (as separate processes have)."""
    environ: dict[str, str] = {}
    claim = claim_gpu(environ=environ, lock_dir=lock_dir, wait=0, **kwargs)
    if claim is not None:
        claims.append(claim)
    return claim, environ


def test_parse_nvidia_smi_including_unreported_values() -> None:
    text = SMI_OUTPUT + "3, GPU-dddd, 12, [N/A]\n\n"
    parsed = devices.parse_nvidia_smi(text)
    assert parsed[:3] == GPUS
    assert parsed[3] == Gpu(3, "GPU-dddd", 12.0, 0.0)


def test_workers_get_different_gpus_least_busy_first(gpus, claims, tmp_path: Path) -> None:
    got = [_claim(tmp_path, claims) for _ in gpus]
    assert [env[VISIBLE] for _, env in got] == ["GPU-bbbb", "GPU-aaaa", "GPU-cccc"]
    with pytest.raises(UserError, match="all 3 GPU slots"):
        _claim(tmp_path, claims)


def test_a_released_gpu_is_claimed_again(gpus, claims, tmp_path: Path) -> None:
    first, first_env = _claim(tmp_path, claims)
    second, _ = _claim(tmp_path, claims)
    assert first.gpu != second.gpu
    first.release()
    assert VISIBLE not in first_env  # the process no longer pretends to own it
    third, third_env = _claim(tmp_path, claims)
    assert third.gpu == first.gpu and third_env[VISIBLE] == first.gpu.uuid


def test_a_worker_waits_for_a_slot_to_free(gpus, claims, tmp_path: Path) -> None:
    held = [_claim(tmp_path, claims)[0] for _ in gpus]
    timer = threading.Timer(0.2, held[1].release)  # another worker finishes meanwhile
    timer.start()
    try:
        environ: dict[str, str] = {}
        claim = claim_gpu(environ=environ, lock_dir=tmp_path, wait=30, poll=0.05)
        claims.append(claim)
    finally:
        timer.cancel()
    assert claim.gpu == held[1].gpu and environ[VISIBLE] == held[1].gpu.uuid


def test_several_workers_per_gpu_fill_every_gpu_first(gpus, claims, tmp_path: Path) -> None:
    got = [_claim(tmp_path, claims, per_gpu=2)[0] for _ in range(6)]
    assert [c.gpu.index for c in got] == [1, 0, 2, 1, 0, 2]
    assert [c.slot for c in got] == [0, 0, 0, 1, 1, 1]
    with pytest.raises(UserError):
        _claim(tmp_path, claims, per_gpu=2)


def test_workers_per_gpu_from_the_environment(gpus, claims, tmp_path: Path) -> None:
    environ = {devices.PER_GPU_VARIABLE: "2", devices.LOCK_DIR_VARIABLE: str(tmp_path / "l")}
    claim = claim_gpu(environ=environ)
    claims.append(claim)
    assert claim.path.parent == tmp_path / "l" and claim.path.name == "GPU-bbbb.slot0.lock"
    with pytest.raises(UserError, match=f"{devices.PER_GPU_VARIABLE} .* not 'two'"):
        claim_gpu(environ={devices.PER_GPU_VARIABLE: "two"}, lock_dir=tmp_path)


def test_an_unusable_lock_dir_is_one_clear_error(gpus, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")  # not a directory (permissions would not stop root)
    with pytest.raises(UserError, match=devices.LOCK_DIR_VARIABLE):
        claim_gpu(environ={}, lock_dir=tmp_path / "file" / "locks", wait=0)


def test_nothing_changes_without_several_gpus(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for found in ([], GPUS[:1]):
        monkeypatch.setattr(devices, "query_gpus", lambda found=found: list(found))
        environ: dict[str, str] = {}
        assert claim_gpu(environ=environ, lock_dir=tmp_path / "locks") is None
        assert environ == {} and not (tmp_path / "locks").exists()


@pytest.mark.parametrize("preset", [{VISIBLE: "3"}, {VISIBLE: ""}, {"LOCAL_RANK": "1"}])
def test_a_chosen_gpu_or_a_distributed_launch_is_left_alone(
    preset: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def no_query() -> list[Gpu]:
        raise AssertionError("queried the GPUs although the choice was made")

    monkeypatch.setattr(devices, "query_gpus", no_query)
    environ = dict(preset)
    assert claim_gpu(environ=environ, lock_dir=tmp_path) is None
    assert environ == preset


def test_no_nvidia_smi_means_no_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty bin dir: no nvidia-smi
    assert devices.query_gpus() == []


def _fake_nvidia_smi(bin_dir: Path) -> None:
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '{SMI_OUTPUT.replace(chr(10), chr(92) + 'n')}'\n")
    smi.chmod(0o755)


def test_a_killed_worker_frees_its_gpu(claims, tmp_path: Path) -> None:
    """Another process holds the least busy GPU until it dies (SIGKILL: no clean-up runs)."""
    _fake_nvidia_smi(tmp_path / "bin")
    env = {
        **{k: v for k, v in os.environ.items() if k not in (VISIBLE, "LOCAL_RANK")},
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        devices.LOCK_DIR_VARIABLE: str(tmp_path / "locks"),
    }
    worker = textwrap.dedent("""
        import os, sys
        from multilab.devices import claim_gpu
        claim_gpu()
        print(os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
        sys.stdin.read()
    """)
    with subprocess.Popen(
        [sys.executable, "-c", worker], env=env, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as proc:
        try:
            assert proc.stdout.readline().strip() == "GPU-bbbb", proc.stderr.read()
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("PATH", env["PATH"])  # the real query_gpus, through the fake
                claim, _ = _claim(tmp_path / "locks", claims)
                assert claim.gpu.uuid == "GPU-aaaa"  # the worker's GPU is taken
                claim.release()
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
                claim, _ = _claim(tmp_path / "locks", claims)
                assert claim.gpu.uuid == "GPU-bbbb"  # freed by the kernel
        finally:
            proc.kill()


def test_gpu_commands_claim_before_they_start(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(cli, "claim_gpu", lambda: calls.append("claim"))
    for group, name in ((train, "cmd_train"), (evaluate, "cmd_evaluate"),
                        (evaluate, "cmd_variant"), (params, "cmd_ids")):
        monkeypatch.setattr(group, name, lambda args, name=name: calls.append(name))
    assert cli.main(["train", "--seed", "0"]) == 0
    assert cli.main(["evaluate", "some/model"]) == 0
    assert cli.main(["variant"]) == 0
    assert cli.main(["ids"]) == 0
    assert calls == ["claim", "cmd_train", "claim", "cmd_evaluate", "claim", "cmd_variant",
                     "cmd_ids"]


QUEUE_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "queue_table1.sh"


def test_the_queue_script_covers_tables_1_and_2() -> None:
    from multilab.lab.metric_table import PAPER_VALUES

    line = next(x for x in QUEUE_SCRIPT.read_text().splitlines() if x.startswith("IDS="))
    assert set(line.removeprefix("IDS=").split(",")) == set(PAPER_VALUES)


@pytest.mark.slow  # a clone and a DVC queue
def test_the_queue_script_queues_one_experiment_per_id(tmp_path: Path) -> None:
    """Queue only (no worker starts): DVC 3's sweep syntax gives one experiment per ID."""
    from tests.helpers import BIN, DVC, ROOT

    project = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(project)], check=True)
    script = project / "scripts" / QUEUE_SCRIPT.name
    script.write_bytes(QUEUE_SCRIPT.read_bytes())  # the working tree's version
    who = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **who}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(script), *args], cwd=project, env=env,
                              capture_output=True, text=True, timeout=120, check=False)

    refused = run("--ids", "3,18")  # nothing of the pipeline has run in the clone
    assert refused.returncode == 1 and "not up to date" in refused.stderr
    assert run("-S", "modification=3").returncode == 2

    queued = run("--ids", "3,18", "--force", "-S", "profile=smoke")
    assert queued.returncode == 0, queued.stderr
    shown = subprocess.run(
        [DVC, "exp", "show", "--no-pager", "--json"], cwd=project, env=env,
        capture_output=True, text=True, check=True,
    ).stdout
    experiments = [
        exp for rev in json.loads(shown) for exp in rev.get("experiments") or []
    ]
    params = [
        run_["data"]["params"]["params.yaml"]["data"]
        for exp in experiments for run_ in exp["revs"]
    ]
    assert sorted(str(p["modification"]) for p in params) == ["18", "3"]
    assert {p["profile"] for p in params} == {"smoke"}
    subprocess.run([DVC, "queue", "remove", "--all"], cwd=project, env=env,
                   capture_output=True, check=True)


def test_mixed_precision_defaults_to_bf16_on_cuda_and_none_on_cpu(monkeypatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.mixed_precision({}) == "bf16"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.mixed_precision({}) == "no"


def test_mixed_precision_override_for_the_fp32_arm_and_bad_values() -> None:
    assert devices.mixed_precision({devices.PRECISION_VARIABLE: "no"}) == "no"
    with pytest.raises(UserError, match="'fp8' is not one of bf16, fp16, no"):
        devices.mixed_precision({devices.PRECISION_VARIABLE: "fp8"})
