"""``provisioner cost``: what ran and what it cost, per job, attempt, cloud or day, as billed,
beside the estimate made at launch; CSV, JSON and a PNG of spend over time."""

from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import click

from provisioner.cli import EXIT_BAD_INPUT, EXIT_OK
from provisioner.cli.common import (
    billed,
    billed_text,
    fail,
    job_or_exit,
    json_option,
    open_store,
    print_json,
    store_option,
)

#: the ledger's columns, after each grouping's own (docs/money.md, "The ledger")
LEDGER_COLUMNS = [
    "on_demand_usd",
    "saved_usd",
    "saved_pct",
    "cheapest_on_demand_usd",
    "lost_work_h",
    "lost_work_usd",
    "overlap_usd",
    "changeover_usd",
]
CSV_COLUMNS = {
    "job": ["job_id", "name", "state", "attempts", "hours", "cost_usd", "estimate_usd",
            "estimate_p10_usd", "estimate_p90_usd", "diff_usd", "diff_pct", *LEDGER_COLUMNS],
    "attempt": ["job_id", "attempt", "instance_id", "provider", "zone", "instance_type", "market",
                "price_per_hour", "started_at", "ended_at", "hours", "cost_usd", "billed_usd",
                "estimate_usd", "state", "end_reason", *LEDGER_COLUMNS],
    "cloud": ["provider", "attempts", "hours", "cost_usd"],
    "day": ["day", "hours", "cost_usd"],
}  # fmt: skip


def _when(text: str | None, name: str) -> datetime | None:
    """A date (YYYY-MM-DD: its midnight UTC) or an ISO time (UTC unless it says otherwise)."""
    if text is None:
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        fail(f"{name} {text!r}: not a date (YYYY-MM-DD) or an ISO time", EXIT_BAD_INPUT)
    return t if t.tzinfo else t.replace(tzinfo=UTC)


@click.command()
@click.argument("job_id", required=False)
@click.option("--all", "all_jobs", is_flag=True, help="Every job in the store.")
@click.option("--since", default=None, help="Only spend from this date/time on (UTC).")
@click.option("--until", default=None, help="Only spend before this date/time (UTC).")
@click.option(
    "--by",
    type=click.Choice(["job", "attempt", "cloud", "day"]),
    default=None,
    help="Rows per job, attempt, cloud or UTC day (default: attempt for one job, else job).",
)
@click.option(
    "--csv",
    "csv_path",
    default=None,
    metavar="FILE",
    help="Write the rows as CSV to FILE (- : stdout).",
)
@click.option("--plot", "plot_path", default=None, metavar="FILE.png", help="Write a PNG of spend over time (needs the plot extra).")  # fmt: skip
@click.option("--focus", "focus_path", default=None, metavar="FILE", help="Write the attempts by UTC day as a FinOps FOCUS 1.0 CSV to FILE (- : stdout).")  # fmt: skip
@store_option
@json_option
def cost(
    job_id: str | None,
    all_jobs: bool,
    since: str | None,
    until: str | None,
    by: str | None,
    csv_path: str | None,
    plot_path: str | None,
    focus_path: str | None,
    store_url: str | None,
    as_json: bool,
) -> None:
    """What ran and what it cost, as each cloud billed it, beside the estimate made at launch.

    JOB_ID for one job, or --all. Per-day figures split an attempt that crosses midnight UTC
    in proportion to its run time on each side; every grouping adds up to the same attempts.
    Beside each: what the same run would have cost on on-demand, what spot saved, and what
    interruptions cost (lost work, overlap, changeover).
    """
    from provisioner.control import ledger, spend

    if (job_id is None) == (not all_jobs):
        fail("give one JOB_ID or --all (see `provisioner cost --help`)", EXIT_BAD_INPUT)
    to_stdout = [x for x in (csv_path == "-", focus_path == "-", as_json) if x]
    if len(to_stdout) > 1:
        fail("--csv -, --focus - and --json all write to stdout: choose one", EXIT_BAD_INPUT)
    t0, t1 = _when(since, "--since"), _when(until, "--until")
    if t0 and t1 and t1 <= t0:
        fail("--until must be after --since", EXIT_BAD_INPUT)
    if plot_path:
        _require_matplotlib()
    store = open_store(store_url)
    jobs = [job_or_exit(store, job_id)] if job_id else store.jobs()
    by = by or ("attempt" if job_id else "job")
    now = datetime.now(UTC)
    costs = spend.attempt_costs(store, jobs, now, t0, t1)
    ledgers = ledger.store_ledgers(store, [j.id for j in jobs], now, t0, t1)
    by_attempt = {(a.job_id, a.attempt): a for rows in ledgers.values() for a in rows}
    billed_in = {}
    if job_id:
        billed_in = {  # instance -> the account currency and USD rate recorded at launch
            str(e.data.get("instance")): e.data.get("billing") or {}
            for e in store.events(jobs[0].id)
            if e.kind == "launch" and isinstance(e.data, dict)
        }
    attempts = []
    totals: dict[str, float] = {"spot": 0.0, "on-demand": 0.0}
    hours: dict[str, float] = {"spot": 0.0, "on-demand": 0.0}
    for c in costs:
        d = spend.attempt_doc(c)
        d["billed"] = billed(billed_in.get(str(c.row.instance_id)) or {}, c.cost_usd)
        d.update(_ledger_fields(ledger.attempt_doc(by_attempt[(c.row.job_id, c.row.attempt)])))
        attempts.append(d)
        totals[c.row.market] = totals.get(c.row.market, 0.0) + c.cost_usd
        hours[c.row.market] = hours.get(c.row.market, 0.0) + c.hours
    job_rows = spend.job_docs(costs)
    for j in job_rows:
        j.update(_ledger_fields(ledger.totals(ledgers[j["job_id"]]).as_dict()))
    groups = {
        "job": job_rows,
        "attempt": attempts,
        "cloud": spend.cloud_docs(costs),
        "day": spend.day_docs(costs),
    }
    doc: dict[str, Any] = {
        "currency": "USD",
        "since": t0.isoformat() if t0 else None,
        "until": t1.isoformat() if t1 else None,
        "by": by,
        "total_usd": round(sum(c.cost_usd for c in costs), 6),
        "by_market_usd": {k: round(v, 6) for k, v in totals.items()},
        "hours_by_market": {k: round(v, 6) for k, v in hours.items()},
        "rows": groups[by],
        "jobs": groups["job"],
        "attempts": attempts,
        "by_cloud": groups["cloud"],
        "by_day": groups["day"],
        "ledger": ledger.totals(a for rows in ledgers.values() for a in rows).as_dict(),
    }
    if job_id:
        j = groups["job"][0] if groups["job"] else {}
        doc = {"id": jobs[0].id, **doc, **{k: j.get(k) for k in ("estimate_usd", "diff_usd")}}
    if csv_path:
        _write_csv(csv_path, CSV_COLUMNS[by], groups[by])
    if focus_path:
        _write_focus(focus_path, costs, by_attempt, jobs, now, _accounts(store, jobs))
    if plot_path:
        from provisioner.cli.cost_plot import plot_spend

        est = doc.get("estimate_usd") if job_id else None
        plot_spend(spend.spend_curve(costs), plot_path, title=_title(jobs, job_id), estimate=est)
    if as_json:
        print_json(doc)
    elif not to_stdout:
        ran: dict[str, list[Any]] = {}
        for c in costs:
            ran.setdefault(c.job.id, []).append(c.row)
        notes = [n for j in jobs if j.id in ran and (n := demo_note(j, ran[j.id]))]
        if len(notes) > 1:  # one line for them all, each cloud's rule named once
            rules = "; ".join(
                dict.fromkeys(
                    r for j in jobs if j.id in ran for r in billing_rules(j, ran[j.id]).split("; ")
                )
            )
            notes = [
                f"note: {len(notes)} of these jobs ran on the sim with compressed time: the "
                "estimates are for the jobs' hours of work at real speed, the bills for the "
                f"real seconds their instances ran, {rules} per launch, so the bills are far "
                "below the estimates"
            ]
        _print(doc, by, notes)
    raise SystemExit(EXIT_OK)


def _ledger_fields(d: dict[str, Any]) -> dict[str, Any]:
    keep = (*LEDGER_COLUMNS, "on_demand_price_per_hour", "on_demand_price_from",
            "cheapest_on_demand_offer", "cheapest_on_demand_per_hour", "overlap_h",
            "changeover_h", "useful_usd")  # fmt: skip
    return {k: d[k] for k in keep if k in d}


def _accounts(store: Any, jobs: list[Any]) -> dict[tuple[str, str], str]:
    """(job id, instance id) -> the account its launch was billed to, where the cloud said."""
    out: dict[tuple[str, str], str] = {}
    for job_id, events in store.events_of_kinds([j.id for j in jobs], ["launch"]).items():
        for e in events:
            data = e.data if isinstance(e.data, dict) else {}
            account = (data.get("billing") or {}).get("account")
            if account:
                out[(job_id, str(data.get("instance")))] = str(account)
    return out


def _write_focus(
    path: str,
    costs: list[Any],
    by_attempt: dict[Any, Any],
    jobs: list[Any],
    now: datetime,
    accounts: dict[tuple[str, str], str],
) -> None:
    from policies.loader import PolicyError, parse_policy
    from provisioner.control import focus

    tags: dict[str, dict[str, str]] = {}
    for j in jobs:
        try:
            tags[j.id] = dict(parse_policy(j.policy_yaml, "<stored policy>").tags)
        except PolicyError:
            tags[j.id] = {}
    data = focus.rows(costs, by_attempt, tags, now, accounts)
    if path == "-":
        focus.write(sys.stdout, data)
        return
    try:
        with open(path, "w", newline="", encoding="utf-8") as f:
            focus.write(f, data)
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror}", EXIT_BAD_INPUT)


def _title(jobs: list[Any], job_id: str | None) -> str:
    return f"spend of job {jobs[0].name} ({jobs[0].id})" if job_id else "spend of all jobs"


def _write_csv(path: str, columns: list[str], rows: list[dict[str, Any]]) -> None:
    def write(f: Any) -> None:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if r.get(k) is None else r.get(k) for k in columns})

    if path == "-":
        write(sys.stdout)
        return
    try:
        with open(path, "w", newline="") as f:
            write(f)
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror}", EXIT_BAD_INPUT)


def _money(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}%"


#: What a narrow screen never loses in each view of `cost` (ids and money), and what goes
#: first (provisioner.cli.common.fitted_table).
COST_KEEP = frozenset(
    {"job", "attempt", "instance", "cost USD", "est USD", "cloud", "day (UTC)", "billed as"}
)
COST_DROP_ORDER = ("ended", "lost h", "OD USD", "saved", "where", "type", "USD/h", "hours",
                   "name", "attempts", "diff USD", "diff %", "state", "market", "by cloud")  # fmt: skip


def demo_note(job: Any, attempts: Sequence[Any] = ()) -> str | None:
    """For a job the sim ran with compressed time: why its bill is far below its estimate,
    with the billing rule of each cloud the sim played for ``attempts`` (the job's, launched)."""
    opts = job.provider_options or {}
    sph = opts.get("seconds_per_hour")
    if job.provider != "sim" or not isinstance(sph, int | float) or sph >= 3600:
        return None
    return (
        f"note: the sim ran {job.id} with {sph:g} s per simulated hour: the estimate is for "
        "the job's hours of work at real speed, the bill for the real seconds its instances "
        f"ran, {billing_rules(job, attempts)} per launch, so the bill is far below the estimate"
    )


def billing_rules(job: Any, attempts: Sequence[Any] = ()) -> str:
    """The billing rule of each cloud ``job``'s attempts ran on (for the sim: the cloud it
    played in each attempt's zone): "per started minute (azure)", or one per cloud."""
    from provisioner.control.played import played_cloud
    from provisioner.control.records import billing_rule

    opts = job.provider_options or {}
    clouds: list[str] = []
    for a in attempts:
        if a.launched_at is None:
            continue
        cloud = played_cloud(a.provider, a.region, a.zone, opts)
        if cloud not in clouds:
            clouds.append(cloud)
    if not clouds:  # nothing launched yet: the cloud it plays when it plays one
        mimic = opts.get("mimic", "aws") if job.provider == "sim" else job.provider
        clouds = [mimic if isinstance(mimic, str) and mimic != "all" else "aws"]
    return "; ".join(f"{billing_rule(c).rule} ({c})" for c in clouds)


def _print(doc: dict[str, Any], by: str, notes: Sequence[str] = ()) -> None:
    from provisioner.cli.common import fitted_table
    from provisioner.console import console

    rows = doc["rows"]
    out = console()
    table: list[list[str]]
    if by == "attempt":
        converted = any(r["billed"]["currency"] not in ("USD", None) for r in rows)
        cols = ["job", "attempt", "instance", "where", "type", "market", "USD/h", "hours",
                "cost USD", *(["billed as"] if converted else []), "est USD", "OD USD", "saved",
                "lost h", "ended"]  # fmt: skip
        table = [
            [
                r["job_id"], str(r["attempt"]), r["instance_id"] or "-",
                f"{r['provider']}:{r['zone']}", r["instance_type"], r["market"],
                f"{r['price_per_hour']:.4f}", f"{r['hours']:.3f}", f"{r['cost_usd']:.4f}",
                *([billed_text(r["billed"])] if converted else []),
                _money(r["estimate_usd"]), _money(r["on_demand_usd"]), _pct(r["saved_pct"]),
                f"{r['lost_work_h']:.3f}", r["end_reason"] or r["state"],
            ]
            for r in rows
        ]  # fmt: skip
    elif by == "job":
        cols = ["job", "name", "state", "attempts", "hours", "cost USD", "est USD", "diff USD", "diff %", "OD USD", "saved"]  # fmt: skip
        table = [
            [
                r["job_id"], r["name"], r["state"], str(r["attempts"]), f"{r['hours']:.3f}",
                f"{r['cost_usd']:.4f}", _money(r["estimate_usd"]), _money(r["diff_usd"]),
                "-" if r["diff_pct"] is None else f"{r['diff_pct']:+.1f}%",
                _money(r["on_demand_usd"]), _pct(r["saved_pct"]),
            ]
            for r in rows
        ]  # fmt: skip
    elif by == "cloud":
        cols = ["cloud", "attempts", "hours", "cost USD"]
        table = [[r["provider"], str(r["attempts"]), f"{r['hours']:.3f}", f"{r['cost_usd']:.4f}"] for r in rows]  # fmt: skip
    else:
        cols = ["day (UTC)", "hours", "cost USD", "by cloud"]
        table = [
            [r["day"], f"{r['hours']:.3f}", f"{r['cost_usd']:.4f}",
             ", ".join(f"{k} {v:.4f}" for k, v in r["by_cloud"].items())]
            for r in rows
        ]  # fmt: skip
    if not table:
        window = " between --since and --until" if doc["since"] or doc["until"] else ""
        out.print(f"nothing ran{window}", markup=False)
        return
    t, note = fitted_table(cols, table, keep=COST_KEEP, drop_order=COST_DROP_ORDER)
    out.print(t)
    if note:
        out.print(note, markup=False)
    m = doc["by_market_usd"]
    out.print(
        f"total {doc['total_usd']:.4f} USD (spot {m.get('spot', 0.0):.4f} USD, "
        f"on-demand {m.get('on-demand', 0.0):.4f} USD)",
        markup=False,
    )
    led = doc["ledger"]
    if led["on_demand_usd"] is not None:
        out.print(
            f"saved {led['saved_usd']:.4f} USD ({_pct(led['saved_pct'])}) vs on-demand "
            f"{led['on_demand_usd']:.4f} USD"
            + (
                f" (the cheapest on-demand the policy allowed: {led['cheapest_on_demand_usd']:.4f} USD)"
                if led["cheapest_on_demand_usd"] is not None
                else ""
            )
            + f"; lost work {led['lost_work_h']:.3f} h ({led['lost_work_usd']:.4f} USD), overlap "
            f"{led['overlap_usd']:.4f} USD, changeover {led['changeover_usd']:.4f} USD",
            markup=False,
        )
    if doc.get("estimate_usd") is not None:
        j = doc["jobs"][0]
        lo, hi = j["estimate_p10_usd"], j["estimate_p90_usd"]
        band = f" (P10-P90 {lo:.4f}-{hi:.4f})" if lo is not None and hi is not None else ""
        diff = doc.get("diff_usd")
        out.print(
            f"estimate at launch {doc['estimate_usd']:.4f} USD{band}, "
            + (
                f"difference {diff:+.4f} USD"
                if diff is not None
                else "the whole job's: no difference against a part of it (--since/--until)"
            ),
            markup=False,
        )
    for r in doc["attempts"]:
        b = r["billed"]
        if b["currency"] not in ("USD", None):
            out.print(
                f"attempt {r['attempt']}: {r['provider']} bills in {b['currency']}; USD figures "
                f"converted at {b['usd_per_unit']:.4f} USD/{b['currency']} (provider option "
                "cny_to_usd or fx_rates)",
                markup=False,
            )
    for note in notes:
        out.print(note, markup=False)


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        fail("--plot needs matplotlib, which is not installed: pip install 'provisioner[plot]'")
