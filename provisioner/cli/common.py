"""Helpers shared by CLI commands: loading a policy with clean errors, JSON output."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from provisioner.cli import EXIT_BAD_INPUT, exit_code_for
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
        fail(str(exc), exit_code_for(exc))


def print_json(doc: Any) -> None:
    import json

    click.echo(json.dumps(doc, indent=2, default=str))


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def fitted_table(
    headers: list[str],
    rows: list[list[str]],
    *,
    keep: frozenset[str],
    drop_order: tuple[str, ...] = (),
    right: frozenset[str] = frozenset(),
) -> tuple[Any, str | None]:
    """A rich table of ``rows`` for the screen: on a narrow terminal, columns outside ``keep``
    (ids and money) are left out whole until the rest fits (ids and money are never cut; a
    pipe gets every column); and the line that says what was left out, or None."""
    from rich.table import Table

    from provisioner.cli.plain import fit_columns, left_out_note
    from provisioner.console import console

    width = console().width
    shown = fit_columns(headers, rows, width, keep=keep, drop_order=drop_order, gap=2, edge=2)
    t = Table(box=None, header_style="bold")
    for i in shown:
        t.add_column(
            headers[i], justify="right" if headers[i] in right else "left", overflow="fold"
        )
    for r in rows:
        t.add_row(*(r[i] for i in shown))
    return t, left_out_note(headers, shown, width)
