"""The node agent, run as a real subprocess: notices in five formats, checkpoints, progress.

The notice tests run the agent inside the sim cloud (the sim server serves the metadata in each
cloud's format); the others run ``python -m provisioner.agent`` directly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from providers.sim import SimProvider
from provisioner.agent.notices import NoticeReader
from provisioner.agent.spec import AgentSpec, SpecError
from provisioner.agent.store import CheckpointStore, read_progress
from provisioner.core.models import InstanceState, LaunchRequest, Market
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
CLOUDS = ("aws", "gcp", "azure", "alibaba", "tencent")
#: a job that counts steps, checkpoints only when signalled, and never ends by itself
TRAIN = [
    PY,
    "-m",
    "examples.train",
    "--steps",
    "1000000",
    "--step-seconds",
    "0.01",
    "--checkpoint-every",
    "0",
    "--log-every",
    "0",
]


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SimProvider]:
    monkeypatch.chdir(REPO)  # the sandbox finds `examples` through the launcher's cwd
    provider = SimProvider(
        tmp_path / "sim", mimic="all", mtbp_hours=None, notice_floor_s=1.0, idle_exit_s=60
    )
    try:
        yield provider
    finally:
        provider.shutdown_server(terminate_all=True)


def offer_for(sim: SimProvider, cloud: str) -> Any:
    return next(o for o in sim.offers() if sim.zone_cloud(o.zone) == cloud)


@pytest.mark.parametrize("cloud", CLOUDS)
def test_notice_signal_checkpoint_synced_before_the_kill(
    sim: SimProvider, tmp_path: Path, cloud: str
) -> None:
    store_uri = f"file://{tmp_path}/store"
    spec = AgentSpec(
        job_id=f"job-{cloud}",
        attempt=1,
        command=TRAIN,
        checkpoint_uri=store_uri,
        interval_s=0,
        grace_s=10,
        progress_every_s=0.5,
    )
    inst = sim.launch(
        LaunchRequest(
            job_id=spec.job_id,
            attempt=1,
            offer=offer_for(sim, cloud),
            market=Market.SPOT,
            job_spec=spec.to_dict(),
        )
    )
    pgid = int(sim.sandbox(inst.id)["pid"])
    wait_for(lambda: ((read_progress(store_uri, spec.job_id) or {}).get("step") or 0) >= 20)
    assert CheckpointStore(store_uri, spec.job_id).latest() is None  # no checkpoint yet

    notice_s = 4.0
    sim.preempt(inst.id, notice_s=notice_s)
    done = wait_for(lambda: sim.get(inst.id).state is InstanceState.PREEMPTED, timeout=15)
    assert done
    wait_for(lambda: group_gone(pgid), timeout=5)  # agent and job: the whole "VM" is gone

    record = sim.sandbox(inst.id)
    progress = read_progress(store_uri, spec.job_id)
    assert progress is not None
    assert progress["state"] == "interrupted", progress
    assert progress["notice"] is not None
    raw = progress["notice"]["raw"]
    expected = {
        "aws": '"action": "terminate"',
        "gcp": "TRUE",
        "azure": '"EventType": "Preempt"',
        "alibaba": "T",
        "tencent": " ",
    }[cloud]
    assert expected in raw
    latest = CheckpointStore(store_uri, spec.job_id).latest()
    assert latest is not None and latest == progress["last_checkpoint"]
    assert progress["last_checkpoint_step"] >= 20
    uploaded = datetime.fromisoformat(progress["last_checkpoint_at"].replace("Z", "+00:00"))
    killed = datetime.fromisoformat(record["ended_at"])
    seen = datetime.fromisoformat(progress["notice"]["seen_at"].replace("Z", "+00:00"))
    assert seen < uploaded < killed  # checkpointed after the notice, in the store before the kill
    assert (
        seen - datetime.fromisoformat(record["notice_at"])
    ).total_seconds() < 1.5  # polled >= 1/s
    files = os.listdir(f"{tmp_path}/store/{spec.job_id}/checkpoints/{latest}")
    assert sorted(files) == ["meta.json", "state.npz"]
    lived = (killed - datetime.fromisoformat(record["notice_at"])).total_seconds()
    if cloud == "azure":  # the agent approved the event: the VM went before NotBefore
        assert lived < notice_s - 0.5
    else:
        assert lived >= notice_s - 0.01


def test_metadata_endpoints_insist_on_their_headers(sim: SimProvider) -> None:
    import urllib.error
    import urllib.request

    inst = {
        c: sim.launch(
            LaunchRequest(job_id=f"h-{c}", attempt=1, offer=offer_for(sim, c), market=Market.SPOT)
        )
        for c in CLOUDS
    }
    base = {c: sim.sandbox(i.id)["metadata_url"] for c, i in inst.items()}

    def status(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> int:
        req = urllib.request.Request(
            url, method=method, headers=headers or {}, data=b"" if method == "PUT" else None
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as err:
            return err.code

    assert status(base["aws"] + "/latest/meta-data/spot/instance-action") == 401  # IMDSv2 only
    assert status(base["aws"] + "/latest/api/token", "PUT") == 400  # TTL header required
    assert status(base["gcp"] + "/computeMetadata/v1/instance/preempted") == 403
    assert (
        status(
            base["gcp"] + "/computeMetadata/v1/instance/preempted",
            headers={"Metadata-Flavor": "Google"},
        )
        == 200
    )
    assert status(base["azure"] + "/metadata/scheduledevents?api-version=2020-07-01") == 400
    assert (
        status(base["azure"] + "/metadata/scheduledevents", headers={"Metadata": "true"}) == 400
    )  # api-version required
    assert status(base["tencent"] + "/latest/meta-data/spot/termination-time") == 404

    for cloud, i in inst.items():
        reader = NoticeReader(cloud, base[cloud])
        assert reader.poll() is None
        sim.preempt(i.id, notice_s=30)
        notice = reader.poll()
        assert notice is not None, cloud
        assert 20 < notice.seconds_left() <= 31, (cloud, notice)


def run_agent(spec: AgentSpec, tmp_path: Path, **kw: Any) -> subprocess.Popen[str]:
    path = tmp_path / f"spec-{spec.attempt}.json"
    spec.save(path)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [PY, "-m", "provisioner.agent", "--spec", str(path)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


def unreachable_url() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there any more


def test_unreachable_metadata_is_no_notice_and_a_finished_job_is_done(tmp_path: Path) -> None:
    store = f"file://{tmp_path}/store"
    spec = AgentSpec(
        job_id="j",
        attempt=1,
        checkpoint_uri=store,
        metadata_url=unreachable_url(),
        workdir=str(tmp_path / "w"),
        command=[PY, "-m", "examples.train", "--steps", "60", "--step-seconds", "0"],
    )
    proc = run_agent(spec, tmp_path)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "unreachable" in out
    progress = read_progress(store, "j")
    assert progress is not None
    assert (progress["state"], progress["exit_code"], progress["step"]) == ("done", 0, 60)
    assert progress["gpu"] is None or isinstance(progress["gpu"], list)
    result = json.loads((tmp_path / "store/j/output/result.json").read_text())
    assert result["steps"] == 60
    assert CheckpointStore(store, "j").latest() == "ckpt-000000060"


def test_exit_code_mirrors_the_job_and_failure_is_reported(tmp_path: Path) -> None:
    store = f"file://{tmp_path}/store"
    spec = AgentSpec(
        job_id="f",
        attempt=2,
        checkpoint_uri=store,
        metadata_url=unreachable_url(),
        workdir=str(tmp_path / "w"),
        command=[PY, "-c", "import sys; sys.exit(3)"],
    )
    proc = run_agent(spec, tmp_path)
    proc.communicate(timeout=20)
    assert proc.returncode == 3
    progress = read_progress(store, "f")
    assert progress is not None and (progress["state"], progress["exit_code"]) == ("failed", 3)


def test_resume_point_and_environment_reach_the_job(tmp_path: Path) -> None:
    store = f"file://{tmp_path}/store"
    ckpt = tmp_path / "seed" / "ckpt-000000007"
    ckpt.mkdir(parents=True)
    (ckpt / "weights.bin").write_bytes(b"w" * 10)
    CheckpointStore(store, "r").upload(ckpt, ckpt.name)
    show = (
        "import json, os; print(json.dumps({k: v for k, v in os.environ.items() "
        "if k.startswith('PROVISIONER_')}))"
    )
    spec = AgentSpec(
        job_id="r",
        attempt=3,
        checkpoint_uri=store,
        metadata_url=unreachable_url(),
        workdir=str(tmp_path / "w"),
        command=[PY, "-c", show],
        env={"EXTRA": "1"},
        signal="SIGUSR2",
    )
    proc = run_agent(spec, tmp_path)
    out, _ = proc.communicate(timeout=20)
    env = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    assert env["PROVISIONER_JOB_ID"] == "r" and env["PROVISIONER_ATTEMPT"] == "3"
    assert env["PROVISIONER_CHECKPOINT_SIGNAL"] == "SIGUSR2"
    resume = Path(env["PROVISIONER_RESUME_FROM"])
    assert resume.name == "ckpt-000000007" and (resume / "weights.bin").read_bytes() == b"w" * 10
    assert Path(env["PROVISIONER_CHECKPOINT_DIR"]) == resume.parent
    progress = read_progress(store, "r")
    assert progress is not None and progress["resumed_from"] == "ckpt-000000007"


def test_periodic_checkpoints_are_asked_for_and_synced(tmp_path: Path) -> None:
    store = f"file://{tmp_path}/store"
    spec = AgentSpec(
        job_id="p",
        attempt=1,
        checkpoint_uri=store,
        metadata_url=unreachable_url(),
        workdir=str(tmp_path / "w"),
        command=TRAIN,
        interval_s=0.5,
        grace_s=5,
    )
    proc = run_agent(spec, tmp_path)
    try:
        seen: set[str] = set()

        def two() -> bool:
            latest = CheckpointStore(store, "p").latest()
            if latest:
                seen.add(latest)
            return len(seen) >= 2

        wait_for(two, timeout=15)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    # SIGTERM to the agent: one more checkpoint, then the job is stopped; state "interrupted"
    assert proc.returncode != 0
    progress = read_progress(store, "p")
    assert progress is not None and progress["state"] == "interrupted", out
    assert progress["last_checkpoint"] == CheckpointStore(store, "p").latest()
    # it wrote them: each listed, oldest first, the newest last (a controller that reads
    # progress seldom tells them all, each credited to this attempt)
    own = [c["name"] for c in progress["checkpoints"]]
    assert progress["last_checkpoint_attempt"] == spec.attempt
    assert len(own) >= 2 and own[-1] == progress["last_checkpoint"] and own == sorted(own)


def test_a_job_without_a_handler_is_not_killed_by_the_checkpoint_signal(tmp_path: Path) -> None:
    # e.g. a notice while the job is still importing: the signal is ignored until it handles it
    store = f"file://{tmp_path}/store"
    spec = AgentSpec(
        job_id="n",
        attempt=1,
        checkpoint_uri=store,
        metadata_url=unreachable_url(),
        workdir=str(tmp_path / "w"),
        command=[PY, "-c", "import time; time.sleep(1.5)"],  # the job: 1.5 s of work
        interval_s=0.2,
        grace_s=0.3,
    )
    proc = run_agent(spec, tmp_path)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    assert "asked the job for a checkpoint" in out
    progress = read_progress(store, "n")
    assert progress is not None and progress["state"] == "done"


def test_an_older_attempt_never_overwrites_newer_progress(tmp_path: Path) -> None:
    store = f"file://{tmp_path}/store"
    CheckpointStore(store, "o").write_progress({"attempt": 5, "state": "running"})
    spec = AgentSpec(
        job_id="o",
        attempt=4,
        checkpoint_uri=store,
        metadata_url=unreachable_url(),
        workdir=str(tmp_path / "w"),
        command=[PY, "-c", "pass"],
    )
    proc = run_agent(spec, tmp_path)
    proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert read_progress(store, "o") == {"attempt": 5, "state": "running"}


def test_checkpoint_marker_never_goes_backwards(tmp_path: Path) -> None:
    store = CheckpointStore(f"file://{tmp_path}/store", "b")
    for step in (20, 10):
        d = tmp_path / f"ckpt-{step:09d}"
        d.mkdir()
        (d / "x").write_text(str(step))
        store.upload(d, d.name)
    assert store.latest() == "ckpt-000000020"


def test_spec_round_trip_and_errors() -> None:
    spec = AgentSpec(
        job_id="a",
        attempt=1,
        command=["x"],
        checkpoint_uri="s3://b/ck",
        cloud="gcp",
        env={"A": "1"},
        interval_s=600,
    )
    again = AgentSpec.from_json(spec.to_json())
    assert again == spec
    assert (
        again.job_root == "s3://b/ck/a" and again.progress_location == "s3://b/ck/a/progress.json"
    )
    assert again.base_metadata_url == "http://metadata.google.internal"
    with pytest.raises(SpecError, match="unknown field"):
        AgentSpec.from_dict({**spec.to_dict(), "comand": ["x"]})
    with pytest.raises(SpecError, match="cloud"):
        AgentSpec(job_id="a", attempt=1, command=["x"], checkpoint_uri="file:///c", cloud="ibm")
    with pytest.raises(SpecError, match="poll_s"):
        AgentSpec(job_id="a", attempt=1, command=["x"], checkpoint_uri="file:///c", poll_s=5)
    with pytest.raises(SpecError, match="signal"):
        AgentSpec(
            job_id="a", attempt=1, command=["x"], checkpoint_uri="file:///c", signal="SIGNOPE"
        )


def test_spec_from_policy() -> None:
    from policies.loader import load_policy

    policy = load_policy(REPO / "policies" / "spot-finetune.yaml")
    spec = AgentSpec.from_policy(policy, job_id="llama", attempt=2, cloud="azure")
    assert spec.command == list(policy.job.command)
    assert spec.command[:2] == ["python", "train.py"]
    ck = policy.checkpoint
    assert (spec.interval_s, spec.grace_s, spec.signal) == (
        ck.interval.total_seconds(),
        ck.grace.total_seconds(),
        ck.signal,
    )
    assert spec.checkpoint_uri == ck.uri and spec.cloud == "azure"
    shell = AgentSpec.from_policy(
        policy.model_copy(
            update={"job": policy.job.model_copy(update={"command": "echo hi && sleep 1"})}
        ),
        job_id="s",
        attempt=1,
    )
    assert shell.command == ["/bin/sh", "-c", "echo hi && sleep 1"]
