"""``provisioner jobs | status | logs | down``: jobs in the store, wherever they run (``cost``
is in :mod:`provisioner.cli.cost_cmd`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click

from provisioner.cli import EXIT_NOT_FOUND, EXIT_OK
from provisioner.cli.common import (
    fail,
    job_or_exit,
    json_option,
    open_store,
    print_json,
    store_option,
)


def _ago(t: datetime | None) -> str:
    if t is None:
        return "-"
    s = (datetime.now(UTC) - t).total_seconds()
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= n:
            return f"{s / n:.0f}{unit} ago"
    return f"{s:.0f}s ago"


def progress_text(job: Any) -> str:
    """Where a job is, in words: ``step 120 of 400 (30%)``, ``step 120``, ``done``, or the
    agent's state when the job reports no step (``running, no step reported``)."""
    prog = job.progress or {}
    step, total = prog.get("step"), prog.get("total_steps")
    if isinstance(step, int | float) and isinstance(total, int | float) and total:
        return f"step {step:g} of {total:g} ({min(1.0, step / total):.0%})"
    if isinstance(step, int | float):
        return f"step {step:g}"
    if job.state == "succeeded":
        return "done"
    state = prog.get("state")
    if state and job.state not in ("failed", "cancelled", "stopped"):
        return f"{state}, no step reported"
    return "-"


def gang_text(a: Any) -> str:
    """An attempt's GPUs: ``1x A100``, or for a gang ``2 nodes x 1x A100``."""
    nodes = a.nodes or 1
    return f"{nodes} nodes x {a.gpu_count}x {a.gpu}" if nodes > 1 else f"{a.gpu_count}x {a.gpu}"


def price_text(a: Any) -> str:
    """An attempt's price: ``$0.4912/h``, or for a gang the gang's hour and the node's."""
    nodes = a.nodes or 1
    if nodes > 1:
        return f"${a.price_per_hour * nodes:.4f}/h ({nodes} x ${a.price_per_hour:.4f}/h per node)"
    return f"${a.price_per_hour:.4f}/h"


def job_summary(store: Any, job: Any) -> dict[str, Any]:
    attempts = store.attempts(job.id)
    cur = attempts[-1] if attempts else None
    return {
        "id": job.id,
        "name": job.name,
        "state": job.state,
        "provider": job.provider,
        "submitted_at": job.submitted_at.isoformat(),
        "deadline": job.deadline.isoformat() if job.deadline else None,
        "attempt": job.attempt,
        "restarts": job.restarts,
        "spent_usd": round(job.spent_usd, 4),
        "progress": job.progress,
        "reason": job.reason,
        "cause": job.cause or None,  # why it is in its state (provisioner.core.states.Cause)
        "placement": None
        if cur is None
        else {
            "provider": cur.provider,
            "region": cur.region,
            "zone": cur.zone,
            "instance_type": cur.instance_type,
            "gpu": f"{cur.gpu_count}x {cur.gpu}",
            "nodes": cur.nodes or 1,
            "market": cur.market,
            "price_per_hour": cur.price_per_hour,
            "gang_price_per_hour": round(cur.price_per_hour * (cur.nodes or 1), 6),
            "bid_cap_per_hour": cur.bid_cap_per_hour,
            "instance_id": cur.instance_id,
            "attempt_state": cur.state,
            "attempt_end_cause": cur.end_cause or None,
        },
        "result": job.result,
    }


@click.command()
@store_option
@click.option("--all", "show_all", is_flag=True, help="Include finished jobs.")
@json_option
def jobs(store_url: str | None, show_all: bool, as_json: bool) -> None:
    """List jobs (active ones unless --all)."""
    from provisioner.control.store import ACTIVE_STATES

    store = open_store(store_url)
    rows = store.jobs(None if show_all else list(ACTIVE_STATES))
    if as_json:
        print_json([job_summary(store, j) for j in rows])
        return
    from provisioner.cli.common import fitted_table
    from provisioner.console import console

    if not rows:
        console().print("no jobs" + ("" if show_all else " (active; --all for finished ones)"))
        return
    headers = [
        "job",
        "state",
        "provider",
        "attempt",
        "restarts",
        "spent $",
        "progress",
        "submitted",
    ]
    table = [
        [
            j.id,
            j.state,
            j.provider,
            str(j.attempt),
            str(j.restarts),
            f"{j.spent_usd:.4f}",
            progress_text(j),
            _ago(j.submitted_at),
        ]
        for j in rows
    ]
    t, note = fitted_table(headers, table, keep=JOBS_KEEP, drop_order=JOBS_DROP_ORDER)
    console().print(t)
    if note:
        console().print(note, markup=False)


#: What `jobs` never leaves out on a narrow screen (the id users pass to status, logs and down,
#: and money), and what goes first (provisioner.cli.common.fitted_table).
JOBS_KEEP = frozenset({"job", "state", "spent $"})
JOBS_DROP_ORDER = ("restarts", "attempt", "provider", "submitted", "progress")


@click.command()
@click.argument("job_id", required=False)
@store_option
@json_option
def status(job_id: str | None, store_url: str | None, as_json: bool) -> None:
    """Show a job's state, placement, progress and spend (the latest job if none is named)."""
    store = open_store(store_url)
    if job_id is None:
        rows = store.jobs(limit=1)
        if not rows:
            fail("no jobs yet (start one with `provisioner up --policy FILE`)", EXIT_NOT_FOUND)
        job = rows[0]
    else:
        job = job_or_exit(store, job_id)
    doc = job_summary(store, job)
    from provisioner.control.store.probes import status_rows

    doc["probes"] = status_rows(store, job.id)
    if as_json:
        print_json(doc)
        return
    from rich.markup import escape

    from provisioner.console import console

    out = console()
    out.print(
        f"[bold]{escape(job.id)}[/] ({escape(job.name)}): [bold]{job.state}[/]"
        + (f" — {escape(job.reason)}" if job.reason else "")
    )
    pl = doc["placement"]
    atts = store.attempts(job.id)
    cur = atts[-1] if atts else None
    if pl and cur is not None:
        out.print(
            f"  attempt {job.attempt}: {pl['provider']}:{pl['zone'] or pl['region']} {pl['instance_type']} "
            f"({gang_text(cur)}) {pl['market']} {price_text(cur)}"
            + (f" (cap ${pl['bid_cap_per_hour']:.4f}/h)" if pl["bid_cap_per_hour"] else "")
            + f", instance {pl['instance_id'] or '-'} [{pl['attempt_state']}]",
            markup=False,
        )
    prog = job.progress or {}
    out.print(
        f"  progress: {progress_text(job)}, last checkpoint {prog.get('last_checkpoint') or '-'}",
        markup=False,
    )
    out.print(
        f"  restarts {job.restarts}, spent ${job.spent_usd:.4f}"
        + (f", deadline {job.deadline:%Y-%m-%d %H:%M} UTC" if job.deadline else "")
    )
    from provisioner.cli.probe_cmd import status_lines

    for line in status_lines(doc["probes"], prog):
        out.print(line, markup=False)
    if job.result:
        out.print(f"  result: {job.result}", markup=False)


@click.command()
@click.argument("job_id")
@store_option
@json_option
def down(job_id: str, store_url: str | None, as_json: bool) -> None:
    """Stop a job: terminate its instances, keep its checkpoints."""
    from provisioner.control.reconciler import cancel_job
    from provisioner.control.store import FINAL_STATES

    store = open_store(store_url)
    job = job_or_exit(store, job_id)
    before = job.state
    terminated = cancel_job(store, job.id, now=datetime.now(UTC))
    after = (store.job(job.id) or job).state
    if as_json:
        print_json({"id": job.id, "state": after, "was": before, "terminated": terminated})
    elif before in FINAL_STATES and after == before:
        click.echo(f"{job.id}: already {before}; nothing to stop")
    else:
        last = store.events(job.id)[-1:]
        note = last[0].message if last and last[0].kind == "cancelled" else "cancelled"
        click.echo(f"{job.id}: {note}")
    raise SystemExit(EXIT_OK)
