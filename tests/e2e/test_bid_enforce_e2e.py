"""A spot price that rises past the bid cap mid-run, end to end on the sim: `provisioner up` as a
real process, the sim server, the agent in its sandbox.

- ``bid_cap.enforce: daemon``: no bid goes with any launch; once the zone's price passes the
  cap, the daemon moves the job made before break (the old instance works on until the new
  one has taken over), and the job succeeds under the cap.
- ``bid_cap.enforce: cloud``: the cap is the launch's bid, and the sim, as the clouds that take
  one do, reclaims the instance once the price passes it: a preemption, and the job goes on
  elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.sim import SimProvider
from providers.sim.client import request, running_url
from provisioner.control.store import AttemptRow, Store
from tests.waiting import until

pytestmark = pytest.mark.e2e

CAP = 3.0  # USD/h: above every sim spot price of these offers, under 50 times any of them


@pytest.fixture
def sim_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "sim"
    yield d
    SimProvider(d).shutdown_server(terminate_all=True)


def _policy(tmp_path: Path, enforce: str) -> Path:
    # attempt 1 works until it is moved; a later attempt finishes a few seconds in
    command = (
        "import os, sys, time\n"
        "if os.environ['PROVISIONER_ATTEMPT'] != '1': time.sleep(3); sys.exit(0)\n"
        "time.sleep(600)\n"
    )
    path = tmp_path / "p.yaml"
    path.write_text(f"""
name: capped
job:
  command: ["{sys.executable}", "-c", {command!r}]
resources:
  min_vram_gb: 16
market: spot
bid_cap:
  max_spot_price_per_hour: {CAP}
  enforce: {enforce}
residency:
  allow: [EEA]
checkpoint:
  uri: file://{tmp_path / "ck"}
  shared: true
restart:
  max_restarts: 5
  zone_cooldown: 4s
""")
    return path


def _start(tmp_path: Path, policy: Path, sim_dir: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PROVISIONER_STORE=f"sqlite:///{tmp_path / 's.db'}", NO_COLOR="1")
    args = ["-o", f"state_dir={sim_dir}", "-o", "mimic=aws", "-o", "seconds_per_hour=60"]
    args += ["-o", "preempt_first_after_s=100000"]
    return subprocess.Popen(
        [sys.executable, "-m", "provisioner", "up", "--policy", str(policy), "--provider", "sim",
         *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip


def _running_first(store_path: Path, proc: subprocess.Popen[str]) -> AttemptRow:
    """Attempt 1 once its instance runs (the store says so)."""
    found: list[AttemptRow] = []

    def first() -> bool:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        if not store_path.exists():
            return False
        store = Store(f"sqlite:///{store_path}")
        try:
            jobs = store.jobs()
            rows = store.attempts(jobs[0].id) if jobs else []
        finally:
            store.close()
        found[:] = [a for a in rows if a.attempt == 1 and a.state == "running" and a.instance_id]
        return bool(found)

    assert until(first, timeout=120), "attempt 1 never ran"
    return found[0]


def _finish(proc: subprocess.Popen[str]) -> str:
    try:
        out, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"`up` did not end: {out[-3000:]}")
    assert proc.returncode == 0, out[-3000:]
    return out


def _surged_run(tmp_path: Path, sim_dir: Path, enforce: str) -> tuple[Store, str, AttemptRow, str]:
    """`up` under ``bid_cap.enforce``; once attempt 1 runs, its zone's spot price times 50 (a
    sim surge): the store, the job's id, attempt 1 and the sim's URL, after `up` ended 0."""
    proc = _start(tmp_path, _policy(tmp_path, enforce), sim_dir)
    try:
        first = _running_first(tmp_path / "s.db", proc)
        url = running_url(sim_dir)
        assert url is not None
        surge = {"zone": first.zone, "factor": 50, "seconds": 600}
        request(url + "/v1/market/surge", "POST", surge)
        _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    (job,) = store.jobs()
    assert job.state == "succeeded", (job.state, job.reason)
    return store, job.id, first, url


def test_under_the_daemon_a_price_over_the_cap_moves_the_job_with_no_bid_on_the_wire(
    tmp_path: Path, sim_dir: Path
) -> None:
    store, job_id, first, url = _surged_run(tmp_path, sim_dir, "daemon")
    rows = store.attempts(job_id)
    one = next(a for a in rows if a.attempt == 1)
    assert one.state == "ended" and one.end_cause in ("handed-over", "over-cap"), one
    moved = [a for a in rows if a.attempt > 1 and a.state != "failed"]
    assert moved and all(a.zone != first.zone for a in moved), [(a.zone, a.state) for a in rows]
    events = [e.message for e in store.events(job_id)]
    assert any("passed the bid cap" in m for m in events), events
    # no bid on the wire: every launch carried the cap to check, none as a bid
    launches = request(url + "/v1/requests")["launch"]
    assert launches and all(r["bid_cap"] is None for r in launches), launches
    assert all(r["price_ceiling"] == pytest.approx(CAP) for r in launches)


def test_under_the_cloud_a_price_over_the_bid_reclaims_the_instance(
    tmp_path: Path, sim_dir: Path
) -> None:
    store, job_id, _first, url = _surged_run(tmp_path, sim_dir, "cloud")
    one = next(a for a in store.attempts(job_id) if a.attempt == 1)
    assert one.state == "preempted", one  # the cloud took it back for its price
    launches = request(url + "/v1/requests")["launch"]
    assert launches[0]["bid_cap"] == pytest.approx(CAP)  # the cap went as the bid
