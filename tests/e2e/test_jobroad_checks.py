"""What `up` refuses before anything is written, with the place in the policy and the fix
(a workdir over its limit, a git ref that is not there, a secret that cannot be read, a local
checkpoint store for a real cloud, a credential in job.env, a package the VM would take from
PyPI, where `provisioner` is another project), and what a VM's boot script carries for each
of the five clouds: the spec, never the code or a secret, under the cloud's limit even with a
100 MB workdir."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from policies.loader import PolicyError, parse_policy
from providers.bootstrap import render_bootstrap, user_data_limit
from provisioner.agent.spec import AgentSpec
from provisioner.control.store import Store
from provisioner.submission import package_problem, prepare
from tests.e2e_util import REPO
from tests.store_util import insert_legacy_job

CLOUDS = ("aws", "gcp", "azure", "alibaba", "tencent")
MB = 1024 * 1024
WHEEL = "https://pkgs.example.com/provisioner-0.1.0-py3-none-any.whl"


def _policy(tmp_path: Path, job: str, extra: str = "") -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(f"name: checks\njob:\n{job}\n{extra}")
    return path


def _up(
    tmp_path: Path, policy: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str]:
    db = tmp_path / "s.db"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "provisioner",
            "up",
            "--policy",
            str(policy),
            "--store",
            f"sqlite:///{db}",
            "--detach",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": str(REPO),
            "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
            "XDG_STATE_HOME": str(tmp_path / "state"),
            **(env or {}),
        },
        check=False,
    )
    if db.exists():  # nothing half-launched: no job recorded
        assert Store(f"sqlite:///{db}").jobs(None) == []
    return done.returncode, done.stderr


def test_a_workdir_over_its_limit(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "weights.bin").write_bytes(b"\0" * (2 * MB))
    policy = _policy(tmp_path, "  workdir: w\n  workdir_max_mb: 1\n  command: [python, x.py]")
    code, err = _up(tmp_path, policy)
    assert code == 2
    assert f"{policy}:3:12:" in err and "job.workdir" in err and "weights.bin 2.0 MB" in err
    assert not list((tmp_path).glob("checkpoints/_code/*"))  # nothing uploaded


def test_a_git_ref_that_is_not_there(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True)
    (repo / "a.py").write_text("x")
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "one"], cwd=repo, check=True)
    policy = _policy(tmp_path, f"  git:\n    url: {repo}\n    ref: v9\n  command: [python, a.py]")
    code, err = _up(tmp_path, policy)
    assert code == 2 and "job.git" in err and "'v9' is not in" in err and "main" in err


def test_a_full_commit_of_a_repository_that_is_not_there(tmp_path: Path) -> None:
    """A 40-hex ref of a nonexistent repository is refused at ``up`` (exit 2, nothing
    written, nothing launched) with git's own words, not accepted as "pinned at"."""
    url = f"file://{tmp_path / 'no-such-repo.git'}"
    sha = "0123456789abcdef0123456789abcdef01234567"
    policy = _policy(tmp_path, f"  git:\n    url: {url}\n    ref: {sha}\n  command: [python, a.py]")
    code, err = _up(tmp_path, policy)
    assert code == 2, err
    assert "job.git" in err and "does not appear to be a git repository" in err, err
    assert "pinned at" not in err and "Traceback" not in err
    assert not (tmp_path / "state" / "provisioner" / "sim" / "instances").exists()  # no VM


def test_secrets_that_cannot_be_read(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text("OTHER: x\n")
    policy = _policy(tmp_path, "  command: [python, x.py]\n  secrets:\n    MY_TOKEN: sim:MY_TOKEN")
    code, err = _up(tmp_path, policy)  # no secrets file named
    assert code == 2 and f"{policy}:5:" in err and "PROVISIONER_SIM_SECRETS" in err
    code, err = _up(tmp_path, policy, env={"PROVISIONER_SIM_SECRETS": str(secrets)})
    assert code == 2 and "job.secrets.MY_TOKEN" in err and "MY_TOKEN" in err
    code, err = _up(tmp_path, policy, "--provider", "aws")  # no aws reference
    assert code == 2 and "no reference a aws VM can read" in err


def test_a_real_cloud_refuses_a_local_checkpoint_store(tmp_path: Path) -> None:
    policy = _policy(tmp_path, "  command: [python, x.py]")
    code, err = _up(tmp_path, policy, "--provider", "gcp")
    assert code == 2 and "checkpoint.uri" in err and "gs://BUCKET" in err
    cfg = tmp_path / "cfg" / "provisioner"
    cfg.mkdir(parents=True)
    (cfg / "providers.yaml").write_text("gcp:\n  checkpoint_uri: gs://team-bucket/runs\n")
    pol = parse_policy(policy.read_text(), str(policy))
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path / "cfg")
    try:
        ready = prepare(
            pol,
            provider="gcp",
            provider_options={"package_spec": f"provisioner[gcp] @ {WHEEL}"},
            policy_path=str(policy),
        )
    finally:
        del os.environ["XDG_CONFIG_HOME"]
    assert ready.checkpoint_uri == "gs://team-bucket/runs"  # the provider's default bucket


@pytest.mark.parametrize(
    ("cloud", "role", "filesystem"),
    [("alibaba", "an ECS RAM role", "NAS"), ("tencent", "a CVM CAM role", "CFS")],
)
def test_a_cloud_with_no_usable_bucket_says_so_and_names_the_shared_filesystem(
    tmp_path: Path, cloud: str, role: str, filesystem: str
) -> None:
    pytest.importorskip({"alibaba": "alibabacloud_ecs20140526", "tencent": "tencentcloud"}[cloud])
    policy = _policy(tmp_path, "  command: [python, x.py]")
    code, err = _up(tmp_path, policy, "--provider", cloud, "-o", "agent_preinstalled=true")
    assert code == 2 and "checkpoint.uri" in err
    message = " ".join(err.split())
    assert f"no bucket works with {role}" in message
    assert filesystem in message and "checkpoint.shared: true" in message
    assert "oss://" not in message and "s3://" not in message  # nothing the VM cannot use
    with pytest.raises(PolicyError, match=r"checkpoint\.shared: true"):
        parse_policy("job:\n  command: [x]\ncheckpoint:\n  uri: oss://bucket/ck\n")


def test_a_real_cloud_refuses_the_pypi_package_with_the_fix(tmp_path: Path) -> None:
    """On PyPI `provisioner` is another project: a VM told by `package_spec` to `pip install
    provisioner[gcp]` from there would never start the agent. `up` says so, with every way
    out, and writes nothing; a wheel's URL, a git ref, a replaced index or a preinstalled agent
    are taken; no package_spec at all is the default road (this version's wheel, carried
    through the checkpoint store: tests/agent/test_agentwheel.py)."""
    policy = _policy(tmp_path, "  command: [python, x.py]", "checkpoint:\n  uri: gs://b/ck\n")
    code, err = _up(tmp_path, policy, "--provider", "gcp", "-o", "package_spec=provisioner[gcp]")
    message = " ".join(err.split())
    assert code == 2, err
    assert f"{policy}: a gcp VM would run `pip install 'provisioner[gcp]'`" in message
    for fix in (
        "another project",
        "Leave package_spec out",
        "-o 'package_spec=provisioner[gcp] @ https://",
        "@ git+https://",
        "-o 'pip_args=[--index-url, https://HOST/simple]'",
    ):
        assert fix in message, fix
    # an extra index beside PyPI is the same trap
    code, err = _up(
        tmp_path,
        policy,
        "--provider",
        "gcp",
        "-o",
        "package_spec=provisioner",
        "-o",
        "pip_args=[--extra-index-url, https://pypi.example/simple]",
    )
    assert code == 2 and "as package_spec says" in err
    # no package_spec: nothing from PyPI by name (the wheel road), whatever the index
    assert package_problem("gcp", {}) is None
    assert package_problem("gcp", {"pip_args": ["--extra-index-url", "https://x/simple"]}) is None

    pol = parse_policy(policy.read_text(), str(policy))
    for options in (
        {"package_spec": f"provisioner[gcp] @ {WHEEL}"},
        {"package_spec": "provisioner[gcp] @ git+https://git.example/provisioner.git@v0.1.0"},
        {"package_spec": "provisioner[gcp]", "pip_args": ["-i", "https://pypi.example/simple"]},
        {"agent_preinstalled": True},
    ):
        ready = prepare(pol, provider="gcp", provider_options=options, policy_path=str(policy))
        assert ready.checkpoint_uri == "gs://b/ck"
    assert prepare(pol, provider="sim").checkpoint_uri == "gs://b/ck"  # the sim installs nothing

    # the option set once in providers.yaml is what `up` passes on: no package problem left
    cfg = tmp_path / "cfg" / "provisioner"
    cfg.mkdir(parents=True)
    (cfg / "providers.yaml").write_text(f"gcp:\n  package_spec: 'provisioner[gcp] @ {WHEEL}'\n")
    local = _policy(tmp_path, "  command: [python, x.py]")  # file://: refused for its store
    code, err = _up(tmp_path, local, "--provider", "gcp")
    assert code == 2 and "checkpoint.uri" in err and "another project" not in err


def test_policy_check_refuses_a_credential_in_env_at_its_line(tmp_path: Path) -> None:
    policy = _policy(
        tmp_path, "  command: [python, x.py]\n  env:\n    MODE: fast\n    HF_TOKEN: hf_x"
    )
    done = subprocess.run(
        [sys.executable, "-m", "provisioner", "policy", "check", str(policy)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert done.returncode == 2
    assert f"{policy}:6:5: job.env.HF_TOKEN" in done.stderr
    assert "move it to job.secrets" in done.stderr
    with pytest.raises(PolicyError, match="looks like a credential"):
        parse_policy("job:\n  env:\n    URL: https://u:p4ss@example.com/x\n")


@pytest.fixture(scope="module")
def big_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("big")
    for i in range(10):  # 100 MB that does not compress
        (work / f"shard-{i}.bin").write_bytes(os.urandom(10 * MB))
    (work / "train.py").write_text("MARKER_FROM_THE_CODE = 'never in user data'\n")
    return work


@pytest.mark.parametrize("cloud", CLOUDS)
def test_user_data_carries_no_code_and_no_secret_with_a_100_mb_workdir(
    tmp_path: Path, big_workdir: Path, cloud: str
) -> None:
    policy = parse_policy(
        f"name: big\njob:\n  workdir: {big_workdir}\n  workdir_max_mb: 200\n"
        "  command: [python, train.py]\n  setup: [pip install -r requirements.txt]\n"
        f"  secrets:\n    HF_TOKEN: {{{cloud}: {_ref(cloud)}}}\n"
        "  container: {image: nvcr.io/nvidia/pytorch:24.05-py3}\n"
        "checkpoint:\n  uri: s3://bucket/ck\n"
    )
    from provisioner.jobcode.archive import pack

    packed = pack(big_workdir, max_bytes=200 * MB, into=tmp_path)
    code = {
        "kind": "archive",
        "uri": f"s3://bucket/ck/_code/{packed.name}",
        "sha256": packed.sha256,
        "size": packed.size,
        "files": packed.files,
    }
    spec = AgentSpec.from_policy(policy, job_id="big-1", attempt=1, cloud=cloud, code=code)
    script = render_bootstrap(spec.to_dict(), cloud=cloud)
    limit, encoded = user_data_limit(cloud)
    import base64

    size = len(base64.b64encode(script.encode())) if encoded else len(script.encode())
    assert size < limit and size < 16 * 1024  # the spec only
    assert "MARKER_FROM_THE_CODE" not in script and packed.sha256 in script
    assert _ref(cloud) in script and "HF_TOKEN" in script  # the reference, by name
    assert "nvidia-container-toolkit" in script  # an engine and the toolkit where missing
    assert f"provisioner[{cloud}]" in script  # the cloud's SDK for its bucket and secrets


def _ref(cloud: str) -> str:
    return {
        "aws": "aws-sm:hf-token",
        "gcp": "gcp-sm:projects/p/secrets/hf",
        "azure": "azure-kv:https://team-vault.vault.azure.net/secrets/hf",
        "alibaba": "alibaba-kms:hf",
        "tencent": "tencent-ssm:hf",
    }[cloud]


def test_migration_0005_keeps_older_jobs_and_their_store(tmp_path: Path) -> None:
    """Jobs written before the job's road came keep their policy's checkpoint store (resolved
    where they were submitted) and have no code."""
    from sqlalchemy import inspect

    from provisioner.control.records import job_checkpoint_uri

    url = f"sqlite:///{tmp_path / 'old.db'}"
    old = Store(url, migrate=False)
    old.migrate("0004")
    assert "code" not in {c["name"] for c in inspect(old.engine).get_columns("jobs")}
    with old.engine.begin() as conn:
        insert_legacy_job(
            conn,
            "old-1",
            datetime(2026, 12, 1, tzinfo=UTC),
            policy_yaml="name: old\ncheckpoint:\n  uri: file://./ck\n",
            workdir="/srv/jobs",
            provider="sim",
            state="running",
        )
    old.close()
    store = Store(url)  # to head
    row = store.job("old-1")
    assert row is not None and row.code is None and row.checkpoint_uri is None
    assert job_checkpoint_uri(row) == "file:///srv/jobs/ck"
    store.close()
