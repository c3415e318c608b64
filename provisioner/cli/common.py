"""Helpers shared by CLI commands: loading a policy with clean errors, JSON output."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from provisioner.cli import EXIT_BAD_INPUT, EXIT_NOT_FOUND, exit_code_for
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


# -- the store and its jobs, shared by the commands that read them --------------------------

store_option = click.option(
    "--store",
    "store_url",
    envvar="PROVISIONER_STORE",
    default=None,
    help="Store URL (default: SQLite in the XDG state directory; env PROVISIONER_STORE).",
)


def existing_store(url: str | None) -> Any:
    """The store at ``url`` where there is one, else None: for commands that read a store
    if one exists and never create one (``plan``, ``quotas``, ``priors``)."""
    from provisioner.control.store import default_url, store_missing

    if store_missing(url or default_url()) is not None:
        return None
    return open_store(url)


def open_store(url: str | None, *, create: bool = False) -> Any:
    """The store at ``url`` (the default: the state directory's). Only a command that records
    something (``up``, ``catalog refresh``) creates one; the others say there is none, so a
    mistyped URL never leaves an empty store behind."""
    from provisioner.control.store import Store, default_url, redacted_url, store_missing

    missing = None if create else store_missing(url or default_url())
    if missing is not None:
        hint = "start one with `provisioner up --policy FILE`" if url is None else "check --store"
        fail(f"{missing}; {hint}", EXIT_NOT_FOUND)
    try:
        return Store(url)
    except Exception as exc:  # a bad URL or an unreachable database: say so, no traceback
        from provisioner.cli import store_problem

        why = store_problem(exc) or f"{exc.__class__.__name__}: {str(exc)[:300]}"
        if url and "://" not in url:
            why += " (a store URL: sqlite:////path/to/file.db or postgresql+psycopg://...)"
        fail(f"cannot open the store {redacted_url(url or '')}: {why}", EXIT_BAD_INPUT)


def job_or_exit(store: Any, job_id: str) -> Any:
    job = store.job(job_id)
    if job is None:
        fail(f"no job {job_id!r} (see `provisioner jobs`)", EXIT_NOT_FOUND)
    return job


def billed(billing: dict[str, Any], cost_usd: float) -> dict[str, Any]:
    """The attempt's cost in the currency the account was billed in (as recorded at launch)."""
    code, rate = billing.get("currency"), billing.get("usd_per_unit")
    if not code or code == "USD" or not rate:
        return {"currency": code or "USD", "usd_per_unit": rate or 1.0, "cost": round(cost_usd, 4)}
    return {"currency": code, "usd_per_unit": rate, "cost": round(cost_usd / rate, 4)}


def billed_text(billed: dict[str, Any]) -> str:
    return f"{billed['cost']:.4f} {billed['currency']}"
