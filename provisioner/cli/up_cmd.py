"""``provisioner up``: submit a job and see it through interruptions."""

from __future__ import annotations

import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from provisioner.cli import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_JOB_FAILED,
    EXIT_NOTHING_ELIGIBLE,
    EXIT_OK,
    exit_code_for,
)
from provisioner.cli.checks import parse_provider_options
from provisioner.cli.common import (
    fail,
    json_option,
    load_policy_or_exit,
    open_store,
    print_json,
    store_option,
)
from provisioner.cli.jobs_cmd import job_summary


@click.command()
@click.option(
    "--policy",
    "policy_path",
    required=True,
    help="Policy YAML file.",
)
@click.option(
    "--provider", default="sim", show_default=True, help="sim, aws, gcp, azure, alibaba or tencent."
)
@click.option(
    "-o",
    "--provider-option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Provider option (repeatable), e.g. -o region=eu-west-1, -o seconds_per_hour=60; "
    "on the sim, -o preempt_first_after_s=0 turns the demo preemption off.",
)
@click.option(
    "--detach",
    is_flag=True,
    help="Submit and return; a running `provisioner daemon` on the same store supervises it.",
)
@store_option
@json_option
def up(
    policy_path: str,
    provider: str,
    options: tuple[str, ...],
    detach: bool,
    store_url: str | None,
    as_json: bool,
) -> None:
    """Submit a job under a policy and supervise it until it finishes.

    The job starts on the cheapest eligible offer; on an interruption it is checkpointed and
    restarted from the latest checkpoint on the next cheapest eligible offer. If a daemon is
    running on the same store, the job is handed to it. Ctrl-C terminates the job's instances
    (checkpoints are kept) and exits 130. Exit 0: the job succeeded; 3: nothing eligible;
    5: the job failed or was stopped.
    """
    from provisioner.api import Job, job_provider_options, submit
    from provisioner.control.store import live_replicas
    from provisioner.preflight import NothingEligible, Refused, check_submission

    # Everything is checked before anything is written: a refused `up` leaves no job behind.
    policy = load_policy_or_exit(policy_path)
    given = parse_provider_options(options)
    try:
        check_submission(policy, policy_path, provider, job_provider_options(provider, given))
    except NothingEligible as exc:
        from provisioner.cli.render import render_plan
        from provisioner.console import error

        render_plan(exc.plan, _catalog())
        error(str(exc))  # which rule refused the offers, and what to change
        raise SystemExit(EXIT_NOTHING_ELIGIBLE) from None
    except Refused as exc:
        fail(str(exc), exit_code_for(exc))
    store = open_store(store_url, create=True)
    job_id = _submit(submit, policy_path, provider, given, store, as_json)
    job = Job(store, job_id)
    daemon = bool(live_replicas(store, datetime.now(UTC)))
    if detach or daemon:
        who = "the running daemon" if daemon else "nobody yet: start `provisioner daemon`"
        page = _dashboard_page(store, job_id) if daemon else None
        if as_json:
            print_json(
                {
                    "id": job_id,
                    "state": "pending",
                    "supervised_by": "daemon" if daemon else None,
                    "dashboard": page,
                }
            )
        else:
            click.echo(
                f"submitted {job_id} ({provider}); supervised by {who}. Follow with `provisioner logs {job_id} -f`."
            )
            if page:
                click.echo(f"dashboard: {page}")
        raise SystemExit(EXIT_OK)
    code = _supervise(job, as_json)
    raise SystemExit(code)


def _submit(
    submit: Any, policy_path: str, provider: str, opts: dict[str, Any], store: Any, as_json: bool
) -> str:
    """Submit, with what the job's road needs (code packed, secrets' references checked:
    provisioner.submission) shown as it goes; a policy that cannot run exits 2, unwritten."""
    from policies.loader import PolicyError
    from provisioner.console import console, error

    out = console(stderr=True)
    with out.status("preparing the job", spinner="dots") as status:

        def say(message: str) -> None:
            status.update(message)

        try:
            _, job_id = submit(
                policy_path,
                provider=provider,
                provider_options=opts,
                store=store,
                say=say,
                check=False,  # checked before the store was opened
                reach_store=True,  # a remote checkpoint store answers, within seconds
            )
        except PolicyError as exc:
            status.stop()
            for issue in exc.issues:
                error(str(issue))
            raise SystemExit(EXIT_BAD_INPUT) from None
    if not as_json:
        for ev in store.events(job_id):
            if ev.kind == "submitted":
                out.print(ev.message, markup=False, highlight=False)
    return str(job_id)


def _dashboard_page(store: Any, job_id: str) -> str | None:
    """The job's page on the dashboard a live daemon serves, if one does."""
    from provisioner.dashboard.history import dashboard_url

    url = dashboard_url(store, datetime.now(UTC))
    return f"{url.rstrip('/')}/jobs/{job_id}" if url else None


def _catalog() -> Any:
    from provisioner.catalog_files import builtin_catalog

    return builtin_catalog()


#: ``up`` supervises its job with a pass about every second (decide() is told so).
UP_PASS_INTERVAL_S = 1.0


def supervising_reconciler(store: Any, job_id: str) -> Any:
    """The reconciler ``up`` runs in the foreground for one job."""
    from provisioner.control.reconciler import Reconciler

    return Reconciler(
        store, job_ids=[job_id], lease=timedelta(seconds=15), pass_interval_s=UP_PASS_INTERVAL_S
    )


def _supervise(job: Any, as_json: bool) -> int:
    """Run reconcile passes here, with a live view, until the job ends or Ctrl-C."""
    from rich.markup import escape

    from provisioner.console import console
    from provisioner.control.store import FINAL_STATES

    out = console(stderr=as_json)
    interrupted = {"n": 0}

    def on_sigint(_sig: int, _frm: Any) -> None:
        interrupted["n"] += 1
        if interrupted["n"] > 1:
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, on_sigint)
    old_term = signal.signal(signal.SIGTERM, on_sigint)
    rec = supervising_reconciler(job.store, job.id)
    seen_events = 0
    start = time.monotonic()
    try:
        from rich.live import Live

        with Live(
            _view(job, start),
            console=out,
            refresh_per_second=2,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        ) as live:
            while True:
                if interrupted["n"]:
                    break
                rec.run_pass()
                for ev in job.store.events(job.id, after_id=seen_events):
                    seen_events = ev.id
                    live.console.print(
                        f"[dim]{ev.at:%H:%M:%S}[/] {ev.kind:<13} {escape(ev.message)}"
                    )
                live.update(_view(job, start))
                if job.refresh().state in FINAL_STATES:
                    break
                for _ in range(round(UP_PASS_INTERVAL_S / 0.1)):
                    if interrupted["n"]:
                        break
                    time.sleep(0.1)
    except KeyboardInterrupt:
        interrupted["n"] = max(interrupted["n"], 1)
    finally:
        signal.signal(signal.SIGINT, old)
        signal.signal(signal.SIGTERM, old_term)
        if interrupted["n"]:
            out.print(
                "[yellow]interrupted:[/] terminating the job's instances (checkpoints are kept)..."
            )
            job.cancel()
        job.store.release_jobs(rec.owner)
        rec.close()
    row = job.refresh()
    if as_json:
        print_json(job_summary(job.store, row) | {"cost": _cost(job)})
    else:
        out.print()
        _print_cost(job, out)
    if interrupted["n"]:
        return EXIT_INTERRUPTED
    return EXIT_OK if row.state == "succeeded" else EXIT_JOB_FAILED


def _view(job: Any, start: float) -> Any:
    from rich.markup import escape
    from rich.table import Table

    from provisioner.cli.jobs_cmd import gang_text, price_text, progress_text

    row = job.refresh()
    atts = job.store.attempts(job.id)
    cur = atts[-1] if atts else None
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    t.add_row(
        "job",
        escape(
            f"{row.id} [{row.state}]"
            + (f" {row.reason}" if row.reason and row.state != "running" else "")
        ),
    )
    if cur:
        t.add_row(
            "placement",
            escape(
                f"{cur.provider}:{cur.zone} {cur.instance_type} ({gang_text(cur)}) "
                f"{cur.market} {price_text(cur)} [{cur.state}]"
            ),
        )
    prog = row.progress or {}
    if prog:
        t.add_row(
            "progress",
            escape(f"{progress_text(row)}, checkpoint {prog.get('last_checkpoint') or '-'}"),
        )
    preempted = sum(1 for a in atts if a.state == "preempted")
    t.add_row(
        "spent",
        f"${row.spent_usd:.4f}   interruptions {preempted}   restarts {row.restarts}   "
        f"elapsed {time.monotonic() - start:.0f}s",
    )
    return t


def _cost(job: Any) -> dict[str, Any]:
    by: dict[str, float] = {}
    for a in job.store.attempts(job.id):
        by[a.market] = by.get(a.market, 0.0) + a.cost_usd
    return {
        "total_usd": round(sum(by.values()), 6),
        "by_market_usd": {k: round(v, 6) for k, v in by.items()},
    }


def _print_cost(job: Any, out: Any) -> None:
    from rich.markup import escape

    row = job.refresh()
    c = _cost(job)
    markets = ", ".join(f"{k} ${v:.4f}" for k, v in c["by_market_usd"].items()) or "nothing billed"
    out.print(
        f"[bold]{escape(row.id)}[/] {row.state}: cost ${c['total_usd']:.4f} ({markets}); "
        f"restarts {row.restarts}"
    )
    from provisioner.cli.cost_cmd import demo_note

    note = demo_note(row, job.store.attempts(row.id))
    if note:
        out.print(note, markup=False, highlight=False)
    if row.result:
        res = row.result
        keys = {k: res[k] for k in ("final_loss", "params_sha256", "steps") if k in res}
        if keys:
            out.print(f"result: {keys}", markup=False)
    sys.stdout.flush()
