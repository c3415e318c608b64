"""A job's environment is an allow-list, end to end (issue 43, problems 3 and 4).

`provisioner up` runs as a real process whose environment holds credentials for the five
clouds, a PostgreSQL password, the dashboard's token and a notification URL, as a controller's
does; the sim server it starts, the sandbox, the real agent and a job that prints its whole
environment and writes it into its progress file all run for real. None of those values may
appear anywhere: the job's output (job.log, agent.log, the store's chunks, `provisioner logs`),
every table of the store, `status --json`, `jobs --json`, the checkpoint store's files, the
sim's state directory. The job's own `job.secrets` value reaches the job, and comes out masked
(`***`) wherever the job wrote it, its progress record included.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.sim import SimProvider
from tests.e2e_util import REPO

pytestmark = pytest.mark.e2e

#: what a controller's environment holds (fake, but shaped like the real ones)
CONTROLLER_SECRETS = {
    "AWS_ACCESS_KEY_ID": "AKIAENVLEAKPROBE7Q2X",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-Jq8vR2mW5zT1nB7cX4kL9pF3",
    "AZURE_CLIENT_ID": "0f1e2d3c-azure-client-7a6b5c4d",
    "AZURE_TENANT_ID": "9a8b7c6d-azure-tenant-1e2f3a4b",
    "AZURE_CLIENT_SECRET": "azure-secret-Hk3~Wq9.Zr5_Lm2-Pv8",
    "ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAIenvLeakProbe5tR8",
    "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "alibaba-secret-Ym4Nc7Xq2Vb9Lk1Zs6",
    "TENCENTCLOUD_SECRET_ID": "AKIDenvLeakProbeTencent3F7",
    "TENCENTCLOUD_SECRET_KEY": "tencent-secret-Gd5Rw8Tp1Qs4Mz7Kc2",
    "PGPASSWORD": "pg-password-Uv6Xe9Ba3Nd2Hf8Jy5",
    "PROVISIONER_DASHBOARD_TOKEN": "dashboard-token-Wc7Lq4Zm1Rt8Ks5Pb2",
    "PROVISIONER_NOTIFY_OPS": "json://hooks.example.invalid/notify-token-Sg3Vk9Mx6",
}
GCP_KEY = "gcp-private-key-Ea2Ty7Pn4Wd9Lc6Qh1"  # inside the service account file
JOB_SECRET = "job-secret-Zt6Fm1Xw8Bq3Kr5Jd9"  # the job's own, through job.secrets

JOB = r"""
import json, os, time
for key, value in sorted(os.environ.items()):
    print(f"{key}={value}", flush=True)
doc = {"step": 1, "total_steps": 1, "env": dict(os.environ),
       "said": "my token is " + os.environ["MY_TOKEN"], os.environ["MY_TOKEN"]: "as a key"}
with open(os.environ["PROVISIONER_PROGRESS_FILE"] + ".tmp", "w") as fh:
    json.dump(doc, fh)
os.replace(os.environ["PROVISIONER_PROGRESS_FILE"] + ".tmp", os.environ["PROVISIONER_PROGRESS_FILE"])
time.sleep(2)
"""


@pytest.fixture
def sim_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "sim"
    yield d
    SimProvider(d).shutdown_server(terminate_all=True)


def _controller_env(tmp_path: Path) -> tuple[dict[str, str], list[str]]:
    """The environment `up` and the CLI run with, and every value that must not leak."""
    sa = tmp_path / "gcp-sa.json"
    sa.write_text(json.dumps({"type": "service_account", "private_key": GCP_KEY}))
    secrets = tmp_path / "sim-secrets.yaml"
    secrets.write_text(f"MY_TOKEN: {JOB_SECRET}\n")
    env = {
        **os.environ,
        **CONTROLLER_SECRETS,
        "GOOGLE_APPLICATION_CREDENTIALS": str(sa),
        "PROVISIONER_SIM_SECRETS": str(secrets),
        "PROVISIONER_STORE": f"sqlite:///{tmp_path / 's.db'}",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
        "NO_COLOR": "1",
    }
    return env, [*CONTROLLER_SECRETS.values(), str(sa), GCP_KEY]


def _cli(env: dict[str, str], cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "provisioner", *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout + done.stderr


def _tables(db: Path) -> str:
    """Every row of every table of the store, as text."""
    out = []
    with sqlite3.connect(db) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for name in names:
            for row in conn.execute(f'SELECT * FROM "{name}"'):  # the store's own names
                out.append(f"{name}: {row!r}")
    return "\n".join(out)


def test_a_job_printing_its_environment_shows_no_controller_credential(
    tmp_path: Path, sim_dir: Path
) -> None:
    env, forbidden = _controller_env(tmp_path)
    ckpt = tmp_path / "ck"
    script = tmp_path / "show_env.py"
    script.write_text(JOB)
    policy = tmp_path / "p.yaml"
    policy.write_text(f"""
name: envprobe
job:
  command: ["{sys.executable}", "{script}"]
  env:
    TOLD_BY_POLICY: "told"
  secrets:
    MY_TOKEN: "sim:MY_TOKEN"
resources:
  min_vram_gb: 16
market: on-demand
budget:
  max_price_per_hour: 10
residency:
  allow: [EEA]
checkpoint:
  uri: file://{ckpt}
  shared: true
""")
    up = _cli(
        env, tmp_path, "up", "--policy", str(policy), "--provider", "sim",
        "-o", f"state_dir={sim_dir}", "-o", "mimic=aws", "-o", "keep_sandboxes=true",
    )  # fmt: skip
    status = _cli(env, tmp_path, "status", "--json")
    job_id = json.loads(status)["id"] if status.lstrip().startswith("{") else None
    assert job_id, status[-2000:]
    jobs = _cli(env, tmp_path, "jobs", "--json")
    logs = _cli(env, tmp_path, "logs", job_id)

    # what the job saw: the protocol's variables, its env and secret, the basics; nothing else
    (job_log,) = sim_dir.glob("instances/*/work/logs/a1-n0/job.log")
    seen = job_log.read_text()
    assert f"PROVISIONER_JOB_ID={job_id}" in seen and "TOLD_BY_POLICY=told" in seen
    assert "MY_TOKEN=***" in seen and "PATH=" in seen  # the secret reached it, masked here
    assert f"PROVISIONER_JOB_ID={job_id}" in logs and "MY_TOKEN=***" in logs
    printed = {line.split(" ", 1)[-1].split("=", 1)[0] for line in seen.splitlines()}
    assert not printed & {*CONTROLLER_SECRETS, "GOOGLE_APPLICATION_CREDENTIALS"}, printed

    # the job's progress, as the store and the CLI show it: its secret masked, keys included
    progress = json.loads((ckpt / job_id / "progress.json").read_text())
    assert progress["job"]["said"] == "my token is ***"
    assert progress["job"]["env"]["MY_TOKEN"] == "***" and "***" in progress["job"]
    assert "my token is ***" in status

    # none of the controller's values, nor the job's secret, anywhere
    texts = {
        "up": up,
        "status": status,
        "jobs": jobs,
        "logs": logs,
        "store": _tables(tmp_path / "s.db"),
        **_pages(tmp_path / "s.db", job_id),
    }
    for root in (sim_dir, ckpt):
        for path in root.rglob("*"):
            if path.is_file():
                texts[str(path)] = path.read_bytes().decode("utf-8", "replace")
    assert any(k.endswith("agent.log") for k in texts) and any("/logs/" in k for k in texts)
    leaks = [
        (where, value[:12])
        for where, text in texts.items()
        for value in [*forbidden, JOB_SECRET]
        # the job's own progress file on its VM's disk holds what the job wrote: its business
        if value in text and not (value == JOB_SECRET and where.endswith("/job-progress.json"))
    ]
    assert leaks == []


def _pages(db: Path, job_id: str) -> dict[str, str]:
    """The dashboard's pages of the job (HTML and JSON; its output's tail included), served
    by the real server on the store."""
    import urllib.request

    from provisioner.control.store import Store
    from provisioner.dashboard.server import DashboardServer

    store = Store(f"sqlite:///{db}")
    server = DashboardServer(store, port=0)
    server.start()
    try:
        out: dict[str, str] = {}
        for path in ("/", f"/jobs/{job_id}", f"/jobs/{job_id}?format=json", "/fleet"):
            with urllib.request.urlopen(server.url.rstrip("/") + path, timeout=30) as r:
                out[f"dashboard {path}"] = r.read().decode("utf-8", "replace")
        assert job_id in out[f"dashboard /jobs/{job_id}"]  # the job's own page, served
        return out
    finally:
        server.close()
        store.close()
