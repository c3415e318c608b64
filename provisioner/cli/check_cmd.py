"""``provisioner check JOB|--all``: a job's promises, checked now (provisioner.control.invariants).

Exit codes: 0 every invariant holds; 1 at least one is violated (each printed); 2 bad input;
3 no such job; 4 a provider could not list its instances (the store's checks still ran).
"""

from __future__ import annotations

from typing import Any

import click

from provisioner.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_PROVIDER
from provisioner.cli.common import (
    fail,
    job_or_exit,
    json_option,
    open_store,
    print_json,
    store_option,
)

#: at least one invariant is violated
EXIT_VIOLATED = 1


@click.command()
@click.argument("job_id", required=False)
@click.option("--all", "every", is_flag=True, help="Check every job in the store.")
@store_option
@json_option
def check(job_id: str | None, every: bool, store_url: str | None, as_json: bool) -> None:
    """Check a job's promises (or every job's with --all) against the store, its cloud's
    instance list and its events: no live instance of a finished job, ended instance rows
    with an end time, a non-zero exit fails the job, spend within max_total, at most two
    live attempts, no orphan instance, every preemption/restart/final state told, one
    message per event and target, resumed from the newest checkpoint.

    Exit 0 when all hold, 1 when any is violated (each printed), 2 bad input, 3 no such job,
    4 when a cloud could not be listed (the other checks still ran)."""
    from dataclasses import replace
    from datetime import UTC, datetime

    from providers.base import ProviderError
    from provisioner.control import invariants as inv
    from provisioner.control.cancel import default_provider_factory
    from provisioner.core.models import TAG_MANAGED

    if every == (job_id is not None):
        fail("name one JOB or pass --all (see `provisioner check --help`)", EXIT_BAD_INPUT)
    store = open_store(store_url)
    ids: list[str] | None = None
    if job_id is not None:
        ids = [job_or_exit(store, job_id).id]
    now = datetime.now(UTC)
    base = inv.snapshot(store, (), now, job_ids=ids)
    problems: list[str] = []
    cloud: list[Any] = []
    listed = False
    for name, options in _providers(base.jobs):
        try:
            prov = default_provider_factory(name, options)
            cloud += prov.list({TAG_MANAGED: "true"})
            listed = True
        except Exception as exc:  # a cloud we cannot reach or set up: said, checks go on
            why = exc if isinstance(exc, ProviderError) else f"{type(exc).__name__}: {exc}"
            problems.append(f"cannot list instances at {name}: {why}")

    snap = replace(base, cloud=tuple(cloud) if listed else None)
    found = inv.run_checks(snap, inv.FULL)
    if every and snap.cloud is not None:
        found = sorted(
            set(found) | set(inv.check_unknown_instances(snap, [j.id for j in snap.jobs]))
        )
    if as_json:
        print_json(
            {
                "jobs": len(snap.jobs),
                "violations": [v.to_doc() for v in found],
                "problems": problems,
            }
        )
    else:
        for v in found:
            click.echo(str(v))
        for p in problems:
            click.echo(f"warning: {p}", err=True)
        if not found:
            click.echo(f"{len(snap.jobs)} job(s): every invariant holds")
    if found:
        raise SystemExit(EXIT_VIOLATED)
    raise SystemExit(EXIT_PROVIDER if problems else EXIT_OK)


def _providers(jobs: Any) -> list[tuple[str, dict[str, Any]]]:
    """Each (provider, options) the jobs use, once."""
    import json

    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for j in jobs:
        opts = dict(j.provider_options or {})
        out.setdefault(j.provider + json.dumps(opts, sort_keys=True), (j.provider, opts))
    return list(out.values())
