"""``provisioner providers``: SDK and credential discovery, printed without secrets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from provisioner.cli import cli
from provisioner.cli.providers_cmd import credentials_where, module_available, provider_info

CLOUD_VARS = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "CLOUDSDK_CONFIG",
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_CLIENT_CERTIFICATE_PATH",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_USERNAME",
    "AZURE_PASSWORD",
    "AZURE_CONFIG_DIR",
    "ALIBABA_CLOUD_ACCESS_KEY_ID",
    "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
    "ALICLOUD_ACCESS_KEY",
    "ALICLOUD_SECRET_KEY",
    "ALIBABA_CLOUD_CREDENTIALS_FILE",
    "TENCENTCLOUD_SECRET_ID",
    "TENCENTCLOUD_SECRET_KEY",
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home and no cloud variables: nothing is found unless a test puts it there."""
    for name in CLOUD_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def run_json(*args: str) -> list[dict[str, object]]:
    result = CliRunner().invoke(cli, ["providers", "--json", *args])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert isinstance(doc, list)
    return doc


def test_lists_sim_and_the_five_clouds_with_sdk_status(home: Path) -> None:
    rows = {r["name"]: r for r in run_json()}
    assert {"sim", "aws", "gcp", "azure", "alibaba", "tencent"} <= set(rows)
    assert rows["sim"]["sdk_installed"] is True
    assert rows["sim"]["credentials_found"] is True
    assert rows["aws"]["sdk"] == "boto3"
    for name in ("aws", "gcp", "azure", "alibaba", "tencent"):
        assert rows[name]["credentials_found"] is False, rows[name]
    # every SDK is installed in the dev environment; the answer must say so
    assert rows["aws"]["sdk_installed"] is module_available("boto3") is True
    assert rows["tencent"]["sdk_installed"] is module_available("tencentcloud.cvm")


def test_credentials_found_from_env_and_files_never_printed(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRETVALUE"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("TENCENTCLOUD_SECRET_ID", "AKIDtencentid")
    monkeypatch.setenv("TENCENTCLOUD_SECRET_KEY", secret)
    adc = home / ".config" / "gcloud" / "application_default_credentials.json"
    adc.parent.mkdir(parents=True)
    adc.write_text(json.dumps({"type": "authorized_user", "client_secret": secret}))
    (home / ".azure").mkdir()
    (home / ".azure" / "azureProfile.json").write_text("{}")

    rows = {r["name"]: r for r in run_json()}
    assert rows["aws"]["credentials_found"] is True
    assert "$AWS_ACCESS_KEY_ID" in str(rows["aws"]["detail"])
    assert rows["gcp"]["credentials_found"] is True
    assert str(adc) in str(rows["gcp"]["detail"])
    assert rows["azure"]["credentials_found"] is True
    assert rows["tencent"]["credentials_found"] is True
    assert rows["alibaba"]["credentials_found"] is False

    table = CliRunner().invoke(cli, ["providers"])
    assert table.exit_code == 0
    for out in (table.output, json.dumps(rows)):
        assert secret not in out
        assert "AKIAIOSFODNN7EXAMPLE" not in out
        assert "AKIDtencentid" not in out
    assert "aws" in table.output and "tencent" in table.output


def test_half_a_key_pair_is_not_credentials(home: Path) -> None:
    assert credentials_where("aws", {"AWS_ACCESS_KEY_ID": "x"}, home) is None
    assert credentials_where("alibaba", {"ALICLOUD_ACCESS_KEY": "x"}, home) is None
    both = {"ALICLOUD_ACCESS_KEY": "x", "ALICLOUD_SECRET_KEY": "y"}
    assert credentials_where("alibaba", both, home) == "$ALICLOUD_ACCESS_KEY + $ALICLOUD_SECRET_KEY"
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("[default]\n")
    assert credentials_where("aws", {}, home) == str(home / ".aws" / "credentials")


def test_missing_sdk_says_how_to_install(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    import provisioner.cli.providers_cmd as mod
    from providers.facts import cloud_facts

    facts = dataclasses.replace(cloud_facts("aws"), sdk_module="no_such_sdk_module.sub")
    monkeypatch.setattr(
        mod, "cloud_facts", lambda name: facts if name == "aws" else cloud_facts(name)
    )
    info = provider_info("aws", env={}, home=home)
    assert info.sdk_installed is False
    assert "pip install 'provisioner[aws]'" in info.detail


def test_command_imports_no_cloud_sdk() -> None:
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from provisioner.cli import cli\n"
        "r = CliRunner().invoke(cli, ['providers', '--json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('boto3', 'botocore', 'alibabacloud_ecs20140526', 'tencentcloud', 'azure')"
        " or m.startswith('google.cloud')]\n"
        "print(bad)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
