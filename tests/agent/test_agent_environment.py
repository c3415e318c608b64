"""The job's environment is an allow-list (provisioner.core.jobenv), and the sim's sandbox gives
its agent what a VM would have (providers.sim.identity): real agents, a real sim server.

The end-to-end proof, with a controller holding every cloud's credentials, is
``tests/e2e/test_e2e_environment.py``."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.sim import SimProvider
from providers.sim.identity import STORE_ENV, identity_env, names_for
from provisioner.agent.scrub import scrub_doc, scrubber
from provisioner.agent.spec import AgentSpec
from provisioner.core import jobenv
from provisioner.core.models import LaunchRequest, Market
from tests.agent.test_agent import PY, REPO, unreachable_url
from tests.simleaks import sim_servers
from tests.waiting import wait_for

#: the agent's environment besides the basics: what no job may see
AGENT_ONLY = {
    "AWS_SECRET_ACCESS_KEY": "aws-secret-agentonly-4Rt7Yq2",
    "PGPASSWORD": "pg-agentonly-8Hn3Kd6",
    "NVIDIA_API_KEY": "nvapi-agentonly-1Zx5Cv9",  # a prefix the basics take, a secret's name
    "CUDA_AUTH_TOKEN": "cuda-agentonly-6Wm2Qp4",
    "SOME_SETTING": "not-a-basic",
}
#: basics the job keeps
BASICS = {"CUDA_VISIBLE_DEVICES": "0,1", "OPENBLAS_CORETYPE": "Haswell", "LC_ALL": "C.UTF-8"}

SHOW = "import json, os; open(os.environ['OUT'], 'w').write(json.dumps(dict(os.environ)))"


def test_the_basics_are_listed_names_and_prefixes_never_a_secrets_name() -> None:
    for name in ("PATH", "HOME", "LANG", "TZ", "TMPDIR", "PYTHONPATH", "LC_ALL", "OMP_NUM_THREADS"):
        assert jobenv.is_basic(name), name
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME"):
        assert jobenv.is_basic(name), name
    for name in (*AGENT_ONLY, "AWS_ACCESS_KEY_ID", "PROVISIONER_DASHBOARD_TOKEN", "HF_TOKEN"):
        assert not jobenv.is_basic(name), name
    for name in ("NVIDIA_NGC_PASSWORD", "NCCL_SECRET", "MKL_CREDENTIALS_FILE"):
        assert not jobenv.is_basic(name), name
    env = {"PATH": "/bin", "PGPASSWORD": "x", "OUT": "o"}
    assert jobenv.for_job({"OUT": "mine", "A": "1"}, env) == {
        "PATH": "/bin",
        "OUT": "mine",
        "A": "1",
    }


def test_docs_agent_md_lists_the_basics_and_a_s3_stores_variables() -> None:
    """The lists are kept in the code; the page that promises them says the same."""
    text = (REPO / "docs" / "agent.md").read_text()

    def row(start: str) -> set[str]:
        line = next(ln for ln in text.splitlines() if ln.startswith(start))
        return set(re.findall(r"`([A-Z0-9_*()]+)`", line.split("|")[2]))

    assert row("| by name |") == set(jobenv.BASIC_NAMES)
    prefixes = {p.rstrip("*") for p in row("| by prefix |") if p.endswith("*")}
    assert prefixes == set(jobenv.BASIC_PREFIXES)
    assert row("| `s3://` store |") == set(STORE_ENV["s3"])


def test_the_agent_gives_the_job_and_its_setup_the_allow_list_only(tmp_path: Path) -> None:
    out, setup_out = tmp_path / "job-env.json", tmp_path / "setup-env.json"
    spec = AgentSpec(
        job_id="e",
        attempt=1,
        checkpoint_uri=f"file://{tmp_path}/store",
        metadata_url=unreachable_url(),
        workdir=str(tmp_path / "w"),
        command=[PY, "-c", SHOW],
        env={"OUT": str(out), "TOLD": "yes"},
        setup=[f'OUT={setup_out} {PY} -c "{SHOW}"'],
        probe="off",
    )
    path = tmp_path / "spec.json"
    spec.save(path)
    env = {**os.environ, **AGENT_ONLY, **BASICS, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [PY, "-m", "provisioner.agent", "--spec", str(path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for seen in (json.loads(out.read_text()), json.loads(setup_out.read_text())):
        assert not set(AGENT_ONLY) & set(seen), sorted(seen)
        assert {k: seen.get(k) for k in BASICS} == BASICS
        assert seen["PROVISIONER_JOB_ID"] == "e" and seen["TOLD"] == "yes"
        assert seen["PYTHONPATH"] == str(REPO) and seen["PATH"] == os.environ["PATH"]
        told = {k for k in seen if k.startswith("PROVISIONER_")} | {"OUT", "TOLD"}
        shell = {"PWD", "OLDPWD", "SHLVL", "_"}  # what sh adds for the setup's command
        assert {k for k in seen if not jobenv.is_basic(k)} <= told | {"PYTHONUNBUFFERED", *shell}


def test_a_progress_record_is_scrubbed_through_every_string_keys_included() -> None:
    scrub = scrubber(["s3cr3t-value", "ab"])  # under 4 characters: left alone
    doc = {"job": {"s3cr3t-value": ["x s3cr3t-value y", 3, None, {"ab": "ab"}]}, "step": 1}
    assert scrub_doc(doc, scrub) == {"job": {"***": ["x *** y", 3, None, {"ab": "ab"}]}, "step": 1}
    assert doc["job"] == {"s3cr3t-value": ["x s3cr3t-value y", 3, None, {"ab": "ab"}]}


def test_a_sim_vm_is_given_its_stores_access_only() -> None:
    controller = {
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000",
        "AZURE_CLIENT_SECRET": "azure-secret",
        "TENCENTCLOUD_SECRET_KEY": "tencent-secret",
        "PGPASSWORD": "pg",
        "PROVISIONER_DASHBOARD_TOKEN": "token",
    }
    assert identity_env({"checkpoint_uri": "file:///ck"}, controller) == {}
    s3 = identity_env({"checkpoint_uri": "s3://b/runs"}, controller)
    assert set(s3) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3"}
    both = identity_env(
        {"checkpoint_uri": "file:///ck", "secret_refs": {"A": "tencent-ssm:db", "B": "sim:x"}},
        controller,
    )
    assert set(both) == {"TENCENTCLOUD_SECRET_KEY"}
    names = names_for({"checkpoint_uri": "az://c/p", "secret_refs": {"A": "aws-sm:db"}})
    assert (
        "AZURE_STORAGE_CONNECTION_STRING" in names and "AWS_ENDPOINT_URL_SECRETS_MANAGER" in names
    )
    assert not {"PGPASSWORD", "PROVISIONER_DASHBOARD_TOKEN", "TENCENTCLOUD_SECRET_KEY"} & set(names)


@pytest.fixture
def sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SimProvider]:
    monkeypatch.chdir(REPO)
    p = SimProvider(tmp_path / "sim", mimic="aws", mtbp_hours=None, idle_exit_s=60)
    yield p
    p.shutdown_server(terminate_all=True)


def test_a_sandbox_agent_has_a_vms_environment_not_the_servers(
    sim: SimProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server is started from an environment holding a database password and a cloud's
    key; the sandbox's agent (its environment read from /proc while it runs) has neither, and
    has the store's access its launch named."""
    monkeypatch.setenv("PGPASSWORD", "pg-server-Lp4Ws8")
    monkeypatch.setenv("TENCENTCLOUD_SECRET_KEY", "tencent-server-Qm7Zx2")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # the store's: named
    offer = sim.offers()[0]
    spec = AgentSpec(
        job_id="v",
        attempt=1,
        checkpoint_uri="s3://bucket/runs",  # unreachable: the agent waits, its env is read
        metadata_url="http://unused",
        command=[PY, "-c", "import time; time.sleep(30)"],
        probe="off",
    ).to_dict()
    inst = sim.launch(
        LaunchRequest(job_id="v", attempt=1, offer=offer, market=Market.ON_DEMAND, job_spec=spec)
    )
    pid = int(sim.sandbox(inst.id)["pid"])

    def environ(of: int) -> dict[str, str] | None:
        try:
            raw = Path(f"/proc/{of}/environ").read_bytes()
        except OSError:
            return None
        pairs = (item.decode().partition("=") for item in raw.split(b"\0") if item)
        return {k: v for k, _, v in pairs} or None

    (server,) = [s for s in sim_servers() if s.state_dir == sim.state_dir]
    assert (environ(server.pid) or {}).get("PGPASSWORD") == "pg-server-Lp4Ws8"  # it has them
    env = wait_for(lambda: environ(pid), 30)
    assert env, "the sandbox's agent is not running"
    assert "PGPASSWORD" not in env and "TENCENTCLOUD_SECRET_KEY" not in env
    assert env["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:9"  # its identity: the store's
    assert env["PROVISIONER_INSTANCE_ID"] == inst.id and env["PATH"]
    recorded = sim.launch_requests()[-1]["identity_env"]  # kept by names only, no values
    assert "AWS_ENDPOINT_URL_S3" in recorded and "http://127.0.0.1:9" not in json.dumps(recorded)
