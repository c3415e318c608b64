"""What a cloud's VM needs from the provider options, on every cloud: an identity (the bucket
and the secrets are read with it), the package its boot script installs (``package_spec``,
``pip_args``) or none (``agent_preinstalled``), and a bucket scheme whose fsspec store the
cloud's extra installs."""

from __future__ import annotations

import importlib
import sys
import tomllib
from pathlib import Path

import pytest

from tests.e2e_util import REPO

#: each cloud's option for the VM's identity
IDENTITY = {
    "aws": {"instance_profile": "provisioner-job"},
    "gcp": {"service_account": "provisioner-job@p.iam.gserviceaccount.com"},
    "azure": {"identity": "system"},
    "alibaba": {"ram_role": "provisioner-job"},
    "tencent": {"cam_role": "provisioner-job"},
}
INSTALL = {
    "package_spec": "provisioner @ https://pkgs.example.com/provisioner-0.1.0-py3-none-any.whl",
    "pip_args": ["--index-url", "https://pypi.example/simple"],
    "agent_preinstalled": True,
}


@pytest.mark.parametrize("cloud", sorted(IDENTITY))
def test_every_cloud_takes_an_identity_and_the_install_options(cloud: str) -> None:
    from provisioner.cli.checks import check_provider

    check_provider(cloud, {**IDENTITY[cloud], **INSTALL})  # exits 2 on an unknown option
    with pytest.raises(SystemExit):
        check_provider(cloud, {"package_specs": "x"})


def _extras() -> dict[str, list[str]]:
    doc = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    extras: dict[str, list[str]] = doc["project"]["optional-dependencies"]
    return extras


@pytest.mark.parametrize(("scheme", "cloud"), [("gs", "gcp"), ("az", "azure"), ("abfs", "azure")])
def test_the_clouds_extra_installs_its_buckets_fsspec_store(scheme: str, cloud: str) -> None:
    """The VM installs ``provisioner[<cloud>]``: that extra must carry the fsspec store of the
    cloud's bucket scheme, the package objstore names when it is missing."""
    from fsspec.registry import known_implementations

    package = str(known_implementations[scheme]["class"]).split(".")[0]
    assert any(req.split(">")[0].split("=")[0].strip() == package for req in _extras()[cloud])


def test_a_missing_store_package_is_named_for_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.objstore.fs import filesystem

    registry = importlib.import_module("fsspec.registry")  # the module (fsspec.registry is a view)
    monkeypatch.setitem(sys.modules, "adlfs", None)  # as if not installed
    monkeypatch.delitem(registry._registry, "abfs", raising=False)
    with pytest.raises(ImportError, match=r"needs the 'adlfs' package.*pip install adlfs"):
        filesystem("abfs://ckpt@team.dfs.core.windows.net/runs")


def test_an_azure_bucket_names_its_account_and_uses_the_vms_identity() -> None:
    """The form `up` suggests for Azure: adlfs takes the storage account from the URI's host
    and, given no key, authenticates with DefaultAzureCredential (the VM's managed identity)."""
    pytest.importorskip("adlfs")
    from policies.model import Checkpoint
    from provisioner.objstore.fs import filesystem
    from provisioner.submission import BUCKETS

    uri = BUCKETS["azure"].replace("CONTAINER", "ckpt").replace("ACCOUNT", "team")
    uri = uri.replace("PREFIX", "runs")
    assert Checkpoint(uri=uri).uri == uri
    fs, path = filesystem(uri)
    assert type(fs).__name__ == "AzureBlobFileSystem"
    assert (fs.account_name, path, fs.anon) == ("team", "ckpt/runs", False)
    assert type(fs.sync_credential).__name__ == "DefaultAzureCredential"


def test_no_oss_or_cos_store_is_offered() -> None:
    """No fsspec store reads OSS or COS with the VM's own role, so the policy refuses them and
    the messages offer none."""
    from policies.loader import PolicyError, parse_policy
    from provisioner.submission import BUCKETS

    assert set(BUCKETS) == {"aws", "gcp", "azure"}
    for scheme in ("oss", "cos"):
        with pytest.raises(PolicyError, match="shared filesystem"):
            parse_policy(f"job:\n  command: [x]\ncheckpoint:\n  uri: {scheme}://b/ck\n")
    assert not any("ossfs" in req for req in _extras()["alibaba"])


def test_the_docs_say_the_same(tmp_path: Path) -> None:
    text = (REPO / "docs" / "clouds.md").read_text(encoding="utf-8")
    for option in ("ram_role", "cam_role", "identity", "agent_preinstalled", "package_spec"):
        assert f"`{option}`" in text, option
