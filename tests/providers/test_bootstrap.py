"""The bootstrap script: content, syntax (real ``sh -n``), size limits, no secrets, and a real run.

The real run executes the script with ``sh`` under ``PROVISIONER_BOOTSTRAP_ROOT`` (a temporary
directory) with a stub ``python3`` first on ``PATH`` that records how it is called, so the
script's own logic (spec file, venv, pip, agent start) runs without network or root.
"""

from __future__ import annotations

import base64
import json
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from providers.bootstrap import (
    SPEC_PATH,
    BootstrapError,
    check_size,
    render_bootstrap,
    spec_from_script,
    user_data_limit,
)
from tests import waiting

SPEC = {
    "job_id": "finetune-llama",
    "attempt": 3,
    "command": ["python", "train.py", "--resume", "s3://bucket/ckpt/finetune-llama"],
    "checkpoint_uri": "s3://bucket/ckpt/finetune-llama",
    "checkpoint_interval_s": 600,
    "signal": "SIGUSR1",
    "env": {"TOKENIZERS_PARALLELISM": "false"},
}
SH = shutil.which("sh") or "/bin/sh"


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure", "alibaba", "tencent"])
def test_script_shape_and_spec_round_trip(cloud: str) -> None:
    script = render_bootstrap(SPEC, cloud=cloud)

    assert script.startswith("#!/bin/sh\n")
    assert spec_from_script(script) == {**SPEC, "cloud": cloud}
    assert "-m provisioner.agent --spec $SPEC" in script
    assert f'SPEC="$ROOT{SPEC_PATH}"' in script
    assert "systemctl enable --now provisioner-agent.service" in script
    assert "nohup" in script


@pytest.mark.parametrize("cloud", ["aws", "tencent"])
def test_script_passes_sh_syntax_check(cloud: str, tmp_path: Path) -> None:
    path = tmp_path / "bootstrap.sh"
    path.write_text(
        render_bootstrap(
            SPEC,
            cloud=cloud,
            package_spec="provisioner[agent] @ https://example.org/provisioner-0.1.0.whl",
            pip_args=["--index-url", "https://pypi.example.org/simple"],
        )
    )
    shells = {SH, *filter(None, (shutil.which("dash"), shutil.which("bash")))}
    for shell in sorted(shells):
        done = subprocess.run([shell, "-n", str(path)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{shell}: {done.stderr}"


def test_package_spec_and_pip_args_are_shell_quoted() -> None:
    script = render_bootstrap(
        SPEC, cloud="aws", package_spec="provisioner[agent]", pip_args=["--index-url", "x y"]
    )
    assert "PACKAGE='provisioner[agent]'" in script
    assert "pip install -q --index-url 'x y' \"$PACKAGE\"" in script


@pytest.mark.parametrize(
    "bad",
    [
        {"aws_secret_access_key": "abc123abc123"},
        {"env": {"HF_TOKEN": "hf_abcdefgh"}},
        {"env": {"WANDB_API_KEY": "0123456789"}},
        {"checkpoint_uri": "https://user:hunter2@example.org/ckpt"},
        {"command": ["aws", "configure", "set", "key", "AKIAABCDEFGHIJKLMNOP"]},
        {"extra": [{"password": "x"}]},
    ],
)
def test_secrets_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(BootstrapError) as caught:
        render_bootstrap({**SPEC, **bad}, cloud="aws")
    assert "credential" in str(caught.value)
    for value in ("abc123abc123", "hf_abcdefgh", "hunter2", "AKIAABCDEFGHIJKLMNOP"):
        assert value not in str(caught.value)


def test_index_with_credentials_is_refused() -> None:
    with pytest.raises(BootstrapError):
        render_bootstrap(
            SPEC, cloud="aws", pip_args=["--index-url", "https://me:tok3n@pypi.example/simple"]
        )


def test_size_limits_per_cloud() -> None:
    big = {**SPEC, "notes": "x" * (15 * 1024)}
    with pytest.raises(BootstrapError, match="limit is 16384"):
        render_bootstrap(big, cloud="aws")
    assert len(render_bootstrap(big, cloud="gcp")) > 15 * 1024  # 256 KiB there

    limit, encoded = user_data_limit("tencent")
    assert encoded
    script = render_bootstrap({**SPEC, "notes": "x" * 9000}, cloud="gcp")
    assert len(script.encode()) < limit < len(base64.b64encode(script.encode()))
    with pytest.raises(BootstrapError, match="base64"):
        check_size(script, "tencent")


def test_unknown_cloud_is_refused() -> None:
    with pytest.raises(BootstrapError, match="unknown cloud"):
        render_bootstrap(SPEC, cloud="oracle")


STUB_PYTHON = r"""#!/bin/sh
# records every call; plays python3 for the bootstrap script
echo "$0 $*" >> "$CALLS"
case "$1" in
  -c) exit 0 ;;
  -m)
    case "$2" in
      venv) mkdir -p "$3/bin" && cp "$0" "$3/bin/python3" && exit 0 ;;
      pip) exit 0 ;;
      provisioner.agent)  # runs until told to stop (at most 10 s)
        cp "$4" "$CALLS.spec"; i=0
        while [ ! -f "$CALLS.stop" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
        exit 0 ;;
    esac ;;
esac
exit 3
"""


def test_script_really_runs(tmp_path: Path) -> None:
    root = tmp_path / "root"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    stub = stubs / "python3"
    stub.write_text(STUB_PYTHON)
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    calls = tmp_path / "calls"
    script = tmp_path / "bootstrap.sh"
    script.write_text(render_bootstrap(SPEC, cloud="azure", package_spec="provisioner[agent]"))
    env = {
        "PATH": f"{stubs}:/usr/bin:/bin",
        "PROVISIONER_BOOTSTRAP_ROOT": str(root),
        "CALLS": str(calls),
        "HOME": str(tmp_path),
    }

    def run() -> None:
        done = subprocess.run(
            [SH, str(script)], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr

    run()
    spec_file = root / SPEC_PATH.lstrip("/")
    assert json.loads(spec_file.read_text()) == {**SPEC, "cloud": "azure"}
    wait_for(lambda: Path(f"{calls}.spec").exists())
    lines = calls.read_text().splitlines()
    venv_py = f"{root}/opt/provisioner/venv/bin/python3"
    assert any(line.endswith(f"-m venv {root}/opt/provisioner/venv") for line in lines)
    assert f"{venv_py} -m pip install -q provisioner[agent]" in lines
    assert f"{venv_py} -m provisioner.agent --spec {spec_file}" in lines
    assert json.loads(Path(f"{calls}.spec").read_text())["job_id"] == "finetune-llama"

    # again (GCP runs it on every boot): nothing installed twice, the live agent left alone
    run()
    agent = f"{venv_py} -m provisioner.agent --spec {spec_file}"
    lines = calls.read_text().splitlines()
    assert lines.count(agent) == 1
    assert sum(" -m pip install -q provisioner[agent]" in line for line in lines) == 1
    assert sum(" -m venv " in line for line in lines) == 1

    # once the agent has gone, the next run starts it again
    Path(f"{calls}.stop").touch()
    pid = int((root / "run" / "provisioner-agent.pid").read_text())
    wait_for(lambda: not _alive(pid))
    Path(f"{calls}.stop").unlink()
    run()
    wait_for(lambda: calls.read_text().splitlines().count(agent) == 2)


def test_a_preinstalled_agent_is_started_and_nothing_is_installed(tmp_path: Path) -> None:
    """``agent_preinstalled``: the image's venv is used as it is: no Python looked for, no venv
    made, no pip, no marker needed; a venv that cannot import the agent stops the script."""
    root = tmp_path / "root"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    stub = stubs / "python3"
    stub.write_text(STUB_PYTHON)
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    calls = tmp_path / "calls"
    script = tmp_path / "bootstrap.sh"
    script.write_text(
        render_bootstrap(
            SPEC,
            cloud="gcp",
            package_spec="provisioner[gcp] @ https://pkgs.example.com/p.whl",
            agent_preinstalled=True,
        )
    )
    env = {
        "PATH": f"{stubs}:/usr/bin:/bin",
        "PROVISIONER_BOOTSTRAP_ROOT": str(root),
        "CALLS": str(calls),
        "HOME": str(tmp_path),
    }

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [SH, str(script)], env=env, capture_output=True, text=True, timeout=60, check=False
        )

    # an image without the agent: refused with the reason, nothing installed
    done = run()
    venv = root / "opt" / "provisioner" / "venv"
    assert done.returncode == 1
    assert "agent_preinstalled is set" in done.stderr and f"{venv}/bin/python3" in done.stderr
    assert not venv.exists()
    assert not calls.exists() or " -m pip " not in calls.read_text()

    # the image's venv (no marker file): used as it is
    (venv / "bin").mkdir(parents=True)
    shutil.copy(stub, venv / "bin" / "python3")
    done = run()
    assert done.returncode == 0, done.stderr
    spec_file = root / SPEC_PATH.lstrip("/")
    wait_for(lambda: Path(f"{calls}.spec").exists())
    lines = calls.read_text().splitlines()
    venv_py = f"{venv}/bin/python3"
    assert lines[0] == f"{venv_py} -c import provisioner.agent"
    assert f"{venv_py} -m provisioner.agent --spec {spec_file}" in lines
    assert all(line.startswith(venv_py) for line in lines)  # no system Python asked
    assert not any(" -m pip " in line or " -m venv " in line for line in lines)
    assert not (venv / ".provisioner-package").exists()
    Path(f"{calls}.stop").touch()  # let the stub agent go
    pid = int((root / "run" / "provisioner-agent.pid").read_text())
    wait_for(lambda: not _alive(pid))


def test_a_git_package_spec_gets_git_first() -> None:
    script = render_bootstrap(
        SPEC, cloud="aws", package_spec="provisioner[aws] @ git+https://git.example/p.git@v1"
    )
    install = script.index('"$VENV/bin/python3" -m pip install -q  "$PACKAGE"')
    assert script.index('case "$PACKAGE" in *git+*) have git ||') < install


def test_which_package_specs_would_come_from_pypi() -> None:
    from providers.bootstrap import installs_from_pypi

    wheel = "provisioner[aws] @ https://pkgs.example.com/provisioner-0.1.0-py3-none-any.whl"
    for spec in (
        "provisioner",
        "provisioner[aws]",
        " Provisioner [gcp] >=0.1",
        "provisioner==0.1.0",
    ):
        assert installs_from_pypi(spec, [])
        assert installs_from_pypi(spec, ["--extra-index-url", "https://pypi.example/simple"])
        assert not installs_from_pypi(spec, ["--index-url", "https://pypi.example/simple"])
        assert not installs_from_pypi(spec, ["--index-url=https://pypi.example/simple"])
        assert not installs_from_pypi(spec, ["-i", "https://pypi.example/simple"])
        assert not installs_from_pypi(spec, ["--no-index", "--find-links", "/wheels"])
    for spec in (
        wheel,
        "provisioner[aws] @ git+https://git.example/provisioner.git@v0.1.0",
        "https://pkgs.example.com/provisioner-0.1.0-py3-none-any.whl",
        "/opt/wheels/provisioner-0.1.0-py3-none-any.whl",
        "my-provisioner-fork[aws]",
    ):
        assert not installs_from_pypi(spec, []), spec


def wait_for(condition: Callable[[], bool], timeout: float = 10) -> None:
    waiting.wait_for(condition, timeout)


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie left by a container without init counts as gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes() != b""
    except FileNotFoundError:
        return False
