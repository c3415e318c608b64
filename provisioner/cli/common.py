"""Helpers shared by CLI commands: loading a policy with clean errors, JSON output."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from provisioner.cli import EXIT_BAD_INPUT
from provisioner.console import error


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    error(message)
    sys.exit(code)


def load_policy_or_exit(path: str) -> Any:
    from policies.loader import PolicyError, load_policy

    try:
        return load_policy(path)
    except PolicyError as exc:
        for issue in exc.issues:
            error(str(issue))
        sys.exit(EXIT_BAD_INPUT)


def load_catalog_or_exit(paths: tuple[str, ...], provider: str | None = None) -> Any:
    from provisioner.catalog_files import CatalogError, load_catalog

    try:
        return load_catalog(*paths, provider=provider)
    except CatalogError as exc:
        fail(str(exc))


def print_json(doc: Any) -> None:
    import json

    click.echo(json.dumps(doc, indent=2, default=str))


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
