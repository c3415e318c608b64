"""``provisioner providers``: which clouds can be used here (SDK installed, credentials found).

Nothing is imported from a cloud SDK and no credential is read: the SDK is looked up with the
import system's finders, and credentials are *found* (environment variable names, standard
files) without opening them. What is printed names variables and paths, never a value.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from importlib.machinery import all_suffixes
from pathlib import Path

import click

from providers.base import ProviderInfo, provider_names
from provisioner.cli.common import json_option, print_json

#: provider -> (SDK distribution, the module that says it is installed)
SDKS: dict[str, tuple[str, str]] = {
    "aws": ("boto3", "boto3"),
    "gcp": ("google-cloud-compute", "google.cloud.compute_v1"),
    "azure": ("azure-mgmt-compute", "azure.mgmt.compute"),
    "alibaba": ("alibabacloud-ecs20140526", "alibabacloud_ecs20140526"),
    "tencent": ("tencentcloud-sdk-python-cvm", "tencentcloud.cvm"),
}


def module_available(name: str) -> bool:
    """Whether ``name`` can be imported, found without importing it or its parent packages.

    The top-level package is found by the import system; the rest of the dotted name is looked
    up in its directories (namespace packages such as ``google.cloud`` included).
    """
    top, *rest = name.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None:
        return False
    locations = [Path(p) for p in spec.submodule_search_locations or ()]
    for i, part in enumerate(rest):
        if i == len(rest) - 1 and any(
            (loc / f"{part}{suffix}").is_file() for loc in locations for suffix in all_suffixes()
        ):
            return True
        locations = [loc / part for loc in locations if (loc / part).is_dir()]
        if not locations:
            return False
    return True


def _first(*found: str | None) -> str | None:
    return next((f for f in found if f), None)


def _env(env: Mapping[str, str], *names: str) -> str | None:
    """``"$A + $B"`` when every variable in ``names`` is set and non-empty."""
    if all(env.get(n) for n in names):
        return " + ".join(f"${n}" for n in names)
    return None


def _file(path: Path | str | None) -> str | None:
    return str(path) if path and Path(path).is_file() else None


def credentials_where(name: str, env: Mapping[str, str], home: Path) -> str | None:
    """Where credentials for ``name`` would come from (variable names or a path), or None."""
    if name == "aws":
        aws = home / ".aws"
        return _first(
            _env(env, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
            _env(env, "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"),
            _env(env, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"),
            _env(env, "AWS_CONTAINER_CREDENTIALS_FULL_URI"),
            _file(env.get("AWS_SHARED_CREDENTIALS_FILE") or aws / "credentials"),
            _file(env.get("AWS_CONFIG_FILE") or aws / "config"),
        )
    if name == "gcp":
        gcloud = Path(env.get("CLOUDSDK_CONFIG") or home / ".config" / "gcloud")
        return _first(
            _file(env.get("GOOGLE_APPLICATION_CREDENTIALS")),
            _file(gcloud / "application_default_credentials.json"),
        )
    if name == "azure":
        azure = Path(env.get("AZURE_CONFIG_DIR") or home / ".azure")
        return _first(
            _env(env, "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET"),
            _env(env, "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_CERTIFICATE_PATH"),
            _env(env, "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_FEDERATED_TOKEN_FILE"),
            _env(env, "AZURE_USERNAME", "AZURE_PASSWORD"),
            _file(azure / "msal_token_cache.json"),
            _file(azure / "azureProfile.json"),
        )
    if name == "alibaba":
        return _first(
            _env(env, "ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET"),
            _env(env, "ALICLOUD_ACCESS_KEY", "ALICLOUD_SECRET_KEY"),
            _file(env.get("ALIBABA_CLOUD_CREDENTIALS_FILE")),
            _file(home / ".alibabacloud" / "credentials.ini"),
            _file(home / ".alibabacloud" / "credentials"),
            _file(home / ".aliyun" / "config.json"),
        )
    if name == "tencent":
        return _first(
            _env(env, "TENCENTCLOUD_SECRET_ID", "TENCENTCLOUD_SECRET_KEY"),
            _file(home / ".tencentcloud" / "credentials"),
            _file("/etc/tencentcloud/credentials"),
        )
    return None


def provider_info(
    name: str, env: Mapping[str, str] | None = None, home: Path | None = None
) -> ProviderInfo:
    """SDK and credential status of one provider (``sim`` needs neither)."""
    if name == "sim":
        return ProviderInfo("sim", "", True, True, "built in; no credentials needed")
    if name not in SDKS:
        return ProviderInfo(name, "", True, False, "plug-in provider; credentials not checked")
    dist, module = SDKS[name]
    installed = module_available(module)
    where = credentials_where(name, os.environ if env is None else env, home or Path.home())
    detail = f"credentials: {where}" if where else "no credentials found"
    if not installed:
        detail += f"; pip install 'provisioner[{name}]'"
    from providers._common import billing_from_options
    from provisioner.providers_config import provider_defaults

    billing = billing_from_options(name, provider_defaults(name))
    if billing is not None:  # the currency and rate it bids in, as the user set them
        detail += f"; {billing['note']}"
    return ProviderInfo(name, dist, installed, where is not None, detail)


@click.command()
@json_option
def providers(as_json: bool) -> None:
    """List the providers, whether each SDK is installed and whether credentials are found."""
    infos = [provider_info(name) for name in provider_names()]
    if as_json:
        print_json(
            [
                {
                    "name": i.name,
                    "sdk": i.sdk or None,
                    "sdk_installed": i.sdk_installed,
                    "credentials_found": i.credentials_found,
                    "detail": i.detail,
                }
                for i in infos
            ]
        )
        return
    from rich.table import Table

    from provisioner.console import console

    table = Table(
        title="Providers",
        title_justify="left",
        caption="A VM's own identity (role, service account) is not probed.",
        caption_justify="left",
    )
    for column in ("provider", "SDK", "installed", "credentials", "detail"):
        table.add_column(column)
    for i in infos:
        table.add_row(
            i.name,
            i.sdk or "-",
            "yes" if i.sdk_installed else "no",
            "yes" if i.credentials_found else "no",
            i.detail,
        )
    console().print(table)
