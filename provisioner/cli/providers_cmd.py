"""``provisioner providers``: which clouds can be used here (SDK installed, credentials found).

Nothing is imported from a cloud SDK and no credential is read: the SDK is looked up with the
import system's finders, and credentials are *found* (environment variable names, standard
files) without opening them. What is printed names variables and paths, never a value. Which
SDK, variables and files each cloud uses is its fact (``cloud_facts(name)``: ``sdk``,
``sdk_module``, ``credentials``; ``providers/<cloud>/facts.py``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import click

from providers.base import ProviderInfo, provider_names
from providers.facts import cloud_facts, known_clouds
from provisioner.cli.common import json_option, print_json
from provisioner.preflight import module_available

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_path(template: str, env: Mapping[str, str], home: Path) -> Path | None:
    """A credentials file template as a path: ``${VAR}`` is VAR's value (None when VAR is unset
    or empty), ``${VAR:-default}`` VAR's value or the default, a leading ``~`` the home."""
    missing = False

    def value(m: re.Match[str]) -> str:
        nonlocal missing
        got = env.get(m.group(1)) or m.group(2)
        if got is None:
            missing = True
            return ""
        return got

    text = _VAR.sub(value, template)
    if missing or not text:
        return None
    if text == "~" or text.startswith("~/"):
        return home / text[2:]
    return Path(text)


def credentials_where(name: str, env: Mapping[str, str], home: Path) -> str | None:
    """Where credentials for ``name`` would come from (variable names or a path), or None
    (also for a provider without facts)."""
    if name not in known_clouds():
        return None
    probe = cloud_facts(name).credentials
    for names in probe.env:
        if all(env.get(n) for n in names):
            return " + ".join(f"${n}" for n in names)
    for template in probe.files:
        path = expand_path(template, env, home)
        if path is not None and path.is_file():
            return str(path)
    return None


def provider_info(
    name: str, env: Mapping[str, str] | None = None, home: Path | None = None
) -> ProviderInfo:
    """SDK and credential status of one provider (``sim`` needs neither)."""
    if name == "sim":
        return ProviderInfo("sim", "", True, True, "built in; no credentials needed")
    if name not in known_clouds():
        return ProviderInfo(name, "", True, False, "plug-in provider without facts; not checked")
    facts = cloud_facts(name)
    installed = module_available(facts.sdk_module)
    where = credentials_where(name, os.environ if env is None else env, home or Path.home())
    detail = (
        f"credentials: {where}" if where else f"no credentials found ({facts.credentials.hint})"
    )
    if not installed:
        detail += f"; pip install 'provisioner[{name}]'"
    from providers._common import billing_from_options
    from provisioner.providers_config import provider_defaults

    billing = billing_from_options(name, provider_defaults(name))
    if billing is not None:  # the currency and rate it bids in, as the user set them
        detail += f"; {billing['note']}"
    return ProviderInfo(name, facts.sdk, installed, where is not None, detail)


@click.command()
@json_option
def providers(as_json: bool) -> None:
    """List the providers, whether each SDK is installed and whether credentials are found."""
    from provisioner.providers_config import default_checkpoint_uri

    infos = [provider_info(name) for name in provider_names()]
    stores = {i.name: default_checkpoint_uri(i.name) for i in infos}
    if as_json:
        print_json(
            [
                {
                    "name": i.name,
                    "sdk": i.sdk or None,
                    "sdk_installed": i.sdk_installed,
                    "credentials_found": i.credentials_found,
                    "checkpoint_uri": stores[i.name],
                    "detail": i.detail,
                }
                for i in infos
            ]
        )
        return
    from rich.markup import escape
    from rich.table import Table

    from provisioner.console import console

    table = Table(
        title="Providers",
        title_justify="left",
        caption="A VM's own identity (role, service account) is not probed. A job on a cloud "
        "needs a checkpoint store its VMs can reach: the policy's checkpoint.uri, else the "
        "default set with `checkpoint_uri:` per provider in ~/.config/provisioner/providers.yaml.",
        caption_justify="left",
    )
    for column in ("provider", "SDK", "installed", "credentials", "default checkpoint store"):
        table.add_column(column)
    table.add_column("detail")
    for i in infos:
        store = stores[i.name] or ("the policy's" if i.name == "sim" else "none set")
        table.add_row(
            escape(i.name),
            escape(i.sdk or "-"),
            "yes" if i.sdk_installed else "no",
            "yes" if i.credentials_found else "no",
            escape(store),
            escape(i.detail),
        )
    console().print(table)
