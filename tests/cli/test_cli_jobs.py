"""`provisioner up` as a real process on the sim provider, Ctrl-C, and the job commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.sim import SimProvider
from tests.e2e_util import write_policy
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def sim_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "sim"
    yield d
    SimProvider(d).shutdown_server(terminate_all=True)


def cli(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "provisioner", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def test_ctrl_c_leaves_a_clean_state_and_job_commands_work(tmp_path: Path, sim_dir: Path) -> None:
    policy = write_policy(tmp_path / "p.yaml", steps=2000, ckpt=tmp_path / "ck")
    env = dict(os.environ, PROVISIONER_STORE=f"sqlite:///{tmp_path / 's.db'}", NO_COLOR="1")
    opts = [
        "-o",
        f"state_dir={sim_dir}",
        "-o",
        "mimic=aws",
        "-o",
        "mtbp_hours=null",
        "-o",
        "seconds_per_hour=60",
    ]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "provisioner",
            "up",
            "--policy",
            str(policy),
            "--provider",
            "sim",
            *opts,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    # wait until the job runs on an instance
    def running() -> str | None:
        rows = json.loads(cli("jobs", "--json", env=env).stdout or "[]")
        if rows and rows[0]["placement"] and rows[0]["placement"]["attempt_state"] == "running":
            return str(rows[0]["id"])
        return None

    job_id = wait_for(running, timeout=60, every=0.5)
    sim = SimProvider(sim_dir)
    assert [i for i in sim.list({"provisioner-job": job_id}) if i.state.alive]
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr + stdout
    assert not [i for i in sim.list({"provisioner-job": job_id}) if i.state.alive], (
        "no instance left behind"
    )

    status = json.loads(cli("status", job_id, "--json", env=env).stdout)
    assert status["state"] == "cancelled"
    assert status["placement"]["market"] == "spot"
    cost = json.loads(cli("cost", job_id, "--json", env=env).stdout)
    assert cost["total_usd"] > 0 and cost["attempts"][0]["market"] == "spot"
    assert cost["by_market_usd"]["spot"] == cost["total_usd"]
    logs = cli("logs", job_id, env=env).stdout
    assert "launch" in logs and "cancelled" in logs and "why:" in logs
    listing = cli("jobs", env=env)
    assert listing.returncode == 0 and job_id not in listing.stdout  # finished jobs only with --all
    assert job_id in cli("jobs", "--all", env=env).stdout
    assert cli("status", "nope", env=env).returncode == 3
    # the checkpoint store keeps what the job wrote
    assert (tmp_path / "ck" / job_id).exists()


def test_detach_then_down(tmp_path: Path, sim_dir: Path) -> None:
    policy = write_policy(tmp_path / "p.yaml", steps=2000, ckpt=tmp_path / "ck")
    env = dict(os.environ, PROVISIONER_STORE=f"sqlite:///{tmp_path / 's.db'}", NO_COLOR="1")
    opts = ["-o", f"state_dir={sim_dir}", "-o", "mimic=aws", "-o", "mtbp_hours=null"]
    out = cli(
        "up", "--policy", str(policy), "--provider", "sim", *opts, "--detach", "--json", env=env
    )
    assert out.returncode == 0, out.stderr
    job_id = json.loads(out.stdout)["id"]
    down = cli("down", job_id, "--json", env=env)
    assert down.returncode == 0 and json.loads(down.stdout)["state"] == "cancelled"
    assert json.loads(cli("status", job_id, "--json", env=env).stdout)["state"] == "cancelled"


def test_up_with_nothing_eligible_exits_3(tmp_path: Path) -> None:
    pol = tmp_path / "p.yaml"
    pol.write_text("name: none\nmarket: spot\nbid_cap: {max_spot_price_per_hour: 0.00001}\n")
    env = dict(os.environ, PROVISIONER_STORE=f"sqlite:///{tmp_path / 's.db'}", NO_COLOR="1")
    out = cli("up", "--policy", str(pol), env=env)
    assert out.returncode == 3 and "bid_cap" in out.stdout
