"""The suite's own guard against sim servers left running (tests/conftest.py, tests/simleaks.py):
a server a test forgets is stopped when the test ends, and one the guard cannot tie to a test
(started with a scrubbed environment) fails the session, loudly, and is stopped too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.simleaks import sim_servers

REPO = Path(__file__).resolve().parents[3]

FORGETFUL = """
import os, subprocess, sys
from pathlib import Path
from providers.sim import SimProvider

def test_forgets_its_server(tmp_path):
    SimProvider(tmp_path / "sim").list()  # starts a server, never stops it

def test_starts_one_the_guard_cannot_tie_to_it(tmp_path):
    if not os.environ.get("SCRUBBED"):
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVISIONER_SIM")}
    code = "from providers.sim import SimProvider; SimProvider(%r).list()" % str(tmp_path / "sim")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
"""


def _session(tmp_path: Path, scrubbed: bool) -> subprocess.CompletedProcess[str]:
    test = tmp_path / "test_forgetful.py"
    test.write_text(FORGETFUL)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVISIONER_SIM")}
    env.update(PYTHONPATH=str(REPO), SCRUBBED="1" if scrubbed else "")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
         "--basetemp", str(tmp_path / "base"), "-o", "addopts=", str(test)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def _left(tmp_path: Path) -> list[int]:
    return [s.pid for s in sim_servers() if s.state_dir and s.state_dir.is_relative_to(tmp_path)]


def test_a_server_a_test_forgets_is_stopped_when_the_test_ends(tmp_path: Path) -> None:
    done = _session(tmp_path, scrubbed=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sim servers left running" not in done.stdout
    assert _left(tmp_path) == []


def test_a_server_left_running_fails_the_session_loudly(tmp_path: Path) -> None:
    done = _session(tmp_path, scrubbed=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "sim servers left running" in done.stdout and "2 passed" in done.stdout, done.stdout
    assert _left(tmp_path) == []  # and stopped
