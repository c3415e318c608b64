"""End to end on the sim: a job that brings everything of its own.

Its code lives only in a temporary workdir (packed at `up` into the checkpoint store, which is
an S3 bucket on moto's server); its setup installs a small local package (a wheel in the
workdir: no network); it reads a token from the sim's secret store; it is preempted once and
finishes with the same result as an uninterrupted run. Its own output is readable through
`provisioner logs` after it ends, and the token's value is nowhere: not in the store, the
events, the logs (shipped or on the "VM"), the bucket or the dashboard.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.sim import SimProvider
from provisioner.api import Job, submit
from provisioner.control.store import Store
from tests.e2e_util import REPO, reference_result

pytest.importorskip("boto3")
pytest.importorskip("moto")

pytestmark = pytest.mark.e2e
STEPS = 400
TOKEN = "tok-7Hq2Xb9LmW4zR8vN"  # the secret: must appear nowhere
BUCKET = "ckpt-e2e"

JOB_PY = """
import os, sys
sys.path.insert(0, ".deps")  # what setup installed
import localpkg
print("greeting:", localpkg.greet(), flush=True)
print("token is", os.environ["MY_TOKEN"], "of length", len(os.environ["MY_TOKEN"]), flush=True)
# the agent reached the S3 store with the VM's identity (the sim: the store's variables); the
# job is given none of it
assert not [k for k in os.environ if k.startswith("AWS_")], sorted(os.environ)
assert os.path.exists("setup-ran.txt"), "setup ran in the code's directory"
import train
train.main()
"""


def _wheel(where: Path) -> Path:
    """A pure-Python wheel of `localpkg` (a zip with its dist-info), built by hand."""
    files = {
        "localpkg/__init__.py": b'def greet():\n    return "hello from localpkg"\n',
        "localpkg-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: localpkg\nVersion: 0.1\n",
        "localpkg-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("localpkg-0.1.dist-info/RECORD,,")
    path = where / "localpkg-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("localpkg-0.1.dist-info/RECORD", "\n".join(record) + "\n")
    return path


@pytest.fixture(scope="module")
def moto_s3() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def sim_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "sim"
    yield d
    SimProvider(d).shutdown_server(terminate_all=True)


def test_own_code_setup_secret_and_s3_store_through_a_preemption(
    tmp_path: Path, sim_dir: Path, moto_s3: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    for key, value in {
        "AWS_ENDPOINT_URL_S3": moto_s3,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    boto3.client("s3", endpoint_url=moto_s3).create_bucket(Bucket=BUCKET)

    work = tmp_path / "myjob"  # the job's code: nowhere else
    work.mkdir()
    shutil.copy(REPO / "examples" / "train.py", work / "train.py")
    (work / "job.py").write_text(JOB_PY)
    _wheel(work)
    (work / "notes.log").write_text("ignored by .gitignore\n")
    (work / ".gitignore").write_text("*.log\n.deps/\n")
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text(f"MY_TOKEN: {TOKEN}\n")
    monkeypatch.setenv("PROVISIONER_SIM_SECRETS", str(secrets))
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"""
name: road
job:
  workdir: myjob
  setup:
    - "{sys.executable} -m pip install -q --no-index --target .deps ./localpkg-0.1-py3-none-any.whl"
    - touch setup-ran.txt
  command: ["python", "job.py", "--steps", "{STEPS}", "--step-seconds", "0.03"]
  secrets:
    MY_TOKEN: "sim:MY_TOKEN"
  compute_hours: 2
  reference_gpu: A10G
resources:
  min_vram_gb: 16
market: spot
bid_cap:
  max_spot_price_per_gpu_hour: 3.0
residency:
  allow: [EEA]
checkpoint:
  uri: s3://{BUCKET}/runs
  interval: 30s
  grace: 20s
restart:
  max_restarts: 10
  zone_cooldown: 4s
""")
    options = {
        "state_dir": str(sim_dir),
        "mimic": "all",
        "seconds_per_hour": 60,
        "mtbp_hours": None,
        "preempt_first_after_s": 8,
        "demo_outage_s": 6,
        "idle_exit_s": 120,
    }
    db = tmp_path / "s.db"
    store = Store(f"sqlite:///{db}")
    _, job_id = submit(
        policy, provider="sim", provider_defaults=False, provider_options=options, store=store
    )
    job = Job(store, job_id)
    state = job.wait(timeout=240, poll_s=0.5)
    assert state == "succeeded", job.refresh().reason

    attempts = store.attempts(job_id)
    assert sum(a.state == "preempted" for a in attempts) >= 1, [a.state for a in attempts]
    ref = reference_result(STEPS)
    assert job.result["params_sha256"] == ref["params_sha256"]  # the same as a straight run
    row = store.job(job_id)
    assert row is not None and row.checkpoint_uri == f"s3://{BUCKET}/runs"
    assert row.code and row.code["kind"] == "archive"

    # the bucket holds the code (once), the checkpoints and the job's own output
    s3 = boto3.client("s3", endpoint_url=moto_s3)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert [k for k in keys if k.startswith("runs/_code/")] == [
        f"runs/_code/sha256-{row.code['sha256']}.tar.gz"
    ]
    assert any(k.startswith(f"runs/{job_id}/checkpoints/") for k in keys)
    assert any(k.startswith(f"runs/{job_id}/logs/a1-n0/job-") for k in keys)
    assert any(k.startswith(f"runs/{job_id}/logs/a1-n0/setup-") for k in keys)

    # `provisioner logs` shows what job.py printed, with the token scrubbed
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-m", "provisioner", "logs", job_id, "--store", f"sqlite:///{db}"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    ).stdout
    assert "greeting: hello from localpkg" in out
    assert f"token is *** of length {len(TOKEN)}" in out
    assert "$ touch setup-ran.txt" in out  # the setup's own log, per attempt
    assert "preempted" in out and "launch" in out  # interleaved with the controller's events
    assert " a2 job " in out or " a3 job " in out  # the restarted attempt's output too

    # the token is nowhere
    found = []
    for path in [db, *sim_dir.rglob("*"), *tmp_path.joinpath("myjob").rglob("*")]:
        if path.is_file() and TOKEN.encode() in path.read_bytes():
            found.append(str(path))
    for key in keys:
        body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        if TOKEN.encode() in body:
            found.append(f"s3://{BUCKET}/{key}")
    for ev in store.events(job_id):
        if TOKEN in ev.message or TOKEN in json.dumps(ev.data, default=str):
            found.append(f"event {ev.kind}")
    assert TOKEN not in out
    from provisioner.dashboard import DashboardServer

    server = DashboardServer(store, port=0)
    server.start()
    try:
        for page in (f"jobs/{job_id}", f"jobs/{job_id}?format=json", "", "fleet"):
            with urllib.request.urlopen(server.url + page, timeout=10) as resp:
                body = resp.read()
            if TOKEN.encode() in body:
                found.append(f"dashboard /{page}")
        with urllib.request.urlopen(server.url + f"jobs/{job_id}", timeout=10) as resp:
            html = resp.read().decode()
        # the output's tail (the newest attempt's last 40 lines): the job's last line is there
        assert "done: " in html, html[-3000:]
    finally:
        server.close()
    assert found == [], found
