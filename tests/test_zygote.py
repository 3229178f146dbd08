"""The fork server's stand-in (tests/zygote.py) behaves as the real ``multilab`` for what the
pipeline tests use: arguments, working directory, environment, standard streams, exit status;
a request whose import-time environment differs runs the real command."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from multilab.files import PRINT_VARIABLE
from tests.helpers import PARAMS, multilab_program, subprocess_env
from tests.zygote import ADDRESS_VARIABLE, LOG


def _stand_in(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([multilab_program(env), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def preloaded_env(preloaded_multilab: dict[str, str]) -> dict[str, str]:
    if not preloaded_multilab:
        pytest.skip("no fork server (coverage is measured, or MULTILAB_TEST_ZYGOTE=no)")
    return subprocess_env(preloaded=preloaded_multilab)


def test_the_stand_in_runs_the_command_where_and_as_it_was_asked(preloaded_env, tmp_path):
    shutil.copy(PARAMS, tmp_path / "params.yaml")  # the default --params, in the cwd
    done = _stand_in(["--set", "profile=smoke", "check"], tmp_path, preloaded_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("params OK: profile=smoke "), done.stdout

    refused = _stand_in(["--set", "profile=bogus", "check"], tmp_path, preloaded_env)
    assert refused.returncode == 2 and refused.stdout == ""
    assert len(refused.stderr.splitlines()) == 1 and "bogus" in refused.stderr

    bad_value = _stand_in(["check"], tmp_path, preloaded_env | {PRINT_VARIABLE: "bogus"})
    assert bad_value.returncode == 2 and PRINT_VARIABLE in bad_value.stderr  # its environment


def test_a_different_import_time_environment_runs_the_real_command(preloaded_env, tmp_path):
    shutil.copy(PARAMS, tmp_path / "params.yaml")
    log = Path(preloaded_env[ADDRESS_VARIABLE]).with_name(LOG)
    done = _stand_in(["check"], tmp_path, preloaded_env | {"TQDM_MININTERVAL": "5"})
    assert done.returncode == 0 and done.stdout.startswith("params OK"), done.stderr
    assert "TQDM_MININTERVAL" in log.read_text()  # the server said why it did not fork
