"""scripts/background.sh: a command in the background at one thread and nice 19, in a
scheduling group of its own at nice 19 (so it yields to work started in any terminal), its
output and start/end lines in the log; a log that cannot be written is one line, exit 2."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from tests.helpers import ROOT

SCRIPT = ROOT / "scripts" / "background.sh"
PROBE = 'echo "threads=$OMP_NUM_THREADS nice=$(nice) $(cat /proc/self/autogroup)"'


#: the log's end line (``== 2026-12-06T10:16:46Z exit 3: COMMAND``); the start line may hold
#: the words "exit 3" too, inside the command it names
END_LINE = re.compile(r"^== \S+ exit -?\d+: ", re.MULTILINE)


def _ended(log: Path, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text()
        if END_LINE.search(text):
            return text
        time.sleep(0.05)
    raise AssertionError(f"no end line in {log}: {log.read_text()!r}")


def test_the_command_runs_at_one_thread_and_nice_19_in_its_own_group(tmp_path: Path) -> None:
    log = tmp_path / "lane.log"
    started = subprocess.run(["bash", str(SCRIPT), str(log), "FLAG=set", "sh", "-c",
                              PROBE + '; echo "flag=$FLAG"; exit 3'],
                             cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert started.returncode == 0 and "started in the background, session" in started.stdout
    text = _ended(log)
    assert "threads=1 nice=19" in text and "flag=set" in text
    if Path("/proc/self/autogroup").exists():  # Linux with autogroup scheduling
        assert text.split("nice=19", 1)[1].split("\n", 1)[0].strip().endswith("nice 19")
    assert "exit 3: FLAG=set sh -c" in text


def test_a_log_that_cannot_be_written_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "missing" / "x.log"), "true"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"background.sh: cannot write the log {tmp_path / 'missing' / 'x.log'}"]


def test_variables_without_a_command_are_refused_not_the_environment_logged(tmp_path: Path
                                                                           ) -> None:
    """``background.sh LOG FOO=1`` ran ``env FOO=1``, which prints the whole environment
    (tokens, keys) into the log: one line, exit 2, no log written."""
    log = tmp_path / "lane.log"
    done = subprocess.run(["bash", str(SCRIPT), str(log), "FOO=1", "BAR=2"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "SECRET_TOKEN": "hush"})
    assert done.returncode == 2 and not log.exists(), (done.stdout, done.stderr)
    assert done.stderr.strip().splitlines() == [
        "background.sh: no COMMAND after FOO=1 BAR=2; usage: bash scripts/background.sh LOG "
        "[VAR=value ...] COMMAND [ARG ...]"]
    assert "hush" not in done.stdout + done.stderr
