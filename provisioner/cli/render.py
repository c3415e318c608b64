"""Rendering of plans (plain lines, rich for tables wider than the screen) and catalog rows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from provisioner.console import console

if TYPE_CHECKING:
    from provisioner.core.catalog import Catalog
    from provisioner.core.models import Offer, Placement
    from provisioner.core.planner import Plan


def _money(v: float | None, digits: int = 4) -> str:
    return "-" if v is None else f"${v:,.{digits}g}" if v < 1000 else f"${v:,.0f}"


PLAN_COLUMNS = [
    ("#", "right"),
    ("provider", "left"),
    ("region/zone", "left"),
    ("instance", "left"),
    ("GPUs", "left"),
    ("market", "left"),
    ("USD/h", "right"),
    ("cap USD/h", "right"),
    ("band", "left"),
    ("RTT ms", "right"),
    ("est h", "right"),
    ("est USD", "right"),
    ("±", "right"),
    ("P10-P90 USD", "right"),
    ("miss", "right"),
    ("TFLOPS/USD", "right"),
]


#: Columns a narrow screen never loses (what names a placement, and its money); the others
#: are left out whole when the table does not fit, those named nowhere first, then these in
#: this order (a cell is never cut: provisioner.cli.plain.fit_columns).
PLAN_KEEP = frozenset({"#", "provider", "region/zone", "instance", "market", "USD/h", "est USD"})
PLAN_DROP_ORDER = (
    "TFLOPS/USD",
    "P10-P90 USD",
    "±",
    "band",
    "RTT ms",
    "cap USD/h",
    "est h",
    "miss",
    "GPUs",
)


def _est_cells(pl: Placement) -> list[str]:
    """Expected cost (the interruption-aware estimate, else hours x price), how sure it is
    (the measured error per job of its prior), its P10-P90 and the chance of missing the
    deadline."""
    e = pl.estimate
    if e is None:
        return ["-" if pl.est_job_cost is None else f"{pl.est_job_cost:,.2f}", "-", "-", "-"]
    miss = "-" if e.p_miss_deadline is None else f"{e.p_miss_deadline:.0%}"
    sure = "-" if e.error is None else f"±{e.error:.0%}"
    return [f"{e.mean_usd:,.2f}", sure, f"{e.p10_usd:,.2f}-{e.p90_usd:,.2f}", miss]


def _sureness_note(plan: Plan) -> str | None:
    """How far off est USD is per job, by the priors of the placements shown (measured on
    recorded traces, docs/money.md)."""
    seen: dict[str, set[float]] = {}
    for pl in plan.placements:
        e = pl.estimate
        if e is None or e.error is None:
            continue
        if "history" in e.prior or e.prior == "trace":
            kind = "recorded history"
        elif "placement score" in e.prior:
            kind = "placement score"
        else:
            kind = "band"
        seen.setdefault(kind, set()).add(e.error)
    if not seen:
        return None
    parts = ", ".join(
        f"{kind} " + "/".join(f"±{err:.0%}" for err in sorted(errs)) for kind, errs in seen.items()
    )
    return f"±: est USD's mean error per job, measured on recorded traces ({parts})"


def render_plan(plan: Plan, catalog: Catalog) -> None:
    """The plan as a head line, a table of placements and the rejections. Printed without rich
    (:mod:`provisioner.cli.plain`: `plan` starts faster) unless the table is wider than the
    screen, where rich wraps its cells."""
    from provisioner.cli.plain import Plain, fit_columns, left_out_note

    out = Plain()
    p = plan.policy
    head = f": {plan.eligible} eligible of {plan.candidates} candidates"
    head += f" ({len(catalog)} offers, market {p.market.value}; prices in USD)"
    if plan.required_vram_gb is not None:
        head += f"; needs {plan.required_vram_gb:.1f} GB per GPU"
    if plan.deadline is not None:
        head += f"; deadline {plan.deadline:%Y-%m-%d %H:%M} UTC"
    out.line((p.name, ("bold",)), head)
    nodes = p.resources.nodes
    if nodes > 1:
        inter = {"any": "one region", "same-zone": "one zone"}.get(
            p.resources.interconnect.inter_node, "one placement group"
        )
        out.line(
            ("gang:", ("cyan",)),
            f" {nodes} nodes per placement, in {inter}; USD/h and cap are per node (each node's "
            f"launch carries the cap), est h and est USD are the whole gang's "
            f"({nodes} x USD/h per gang-hour)",
        )
    for note in plan.notes:
        out.line(("note:", ("yellow",)), f" {note}")
    if plan.placements:
        rows = [
            [
                str(pl.rank),
                pl.offer.provider,
                pl.offer.zone or pl.offer.region,
                pl.offer.instance_type,
                f"{pl.offer.gpu_count}x {pl.offer.gpu}",
                pl.market.value,
                f"{pl.price_per_hour:.4f}",
                "-" if pl.bid_cap_per_hour is None else f"{pl.bid_cap_per_hour:.4f}",
                pl.offer.interruption_band or "-",
                "-" if pl.est_rtt_ms is None else f"{pl.est_rtt_ms:.0f}",
                "-" if pl.est_hours is None else f"{pl.est_hours:.1f}",
                *_est_cells(pl),
                ("-" if pl.tflops_per_dollar is None else f"{pl.tflops_per_dollar:.1f}")
                + ("*" if any(r.startswith("measured") for r in pl.reasons) else ""),
            ]
            for pl in plan.placements
        ]
        headers = [c for c, _ in PLAN_COLUMNS]
        shown = fit_columns(headers, rows, out.width, keep=PLAN_KEEP, drop_order=PLAN_DROP_ORDER)
        out.table(
            [headers[i] for i in shown],
            [PLAN_COLUMNS[i][1] == "right" for i in shown],
            [[r[i] for i in shown] for r in rows],
            force=True,
        )
        left_out = left_out_note(headers, shown, out.width)
        if left_out:
            out.line(left_out)
        if any(pl.estimate is not None for pl in plan.placements):
            out.line(
                "est USD: expected cost with interruptions, restarts and on-demand fallback "
                "(P10-P90 over simulated runs); miss: chance of missing the deadline"
            )
            sure = _sureness_note(plan)
            if sure:
                out.line(sure)
        for note in billing_notes({pl.offer.provider for pl in plan.placements}):
            out.line(("currency:", ("yellow",)), f" {note}")
        for pl in plan.placements:  # where probes measured the type (plan --measured)
            for why in pl.reasons:
                if why.startswith("measured"):
                    out.line(f"  * #{pl.rank} {pl.offer.instance_type}: {why}")
    else:
        out.line(("Nothing is eligible under this policy.", ("bold", "red")))
    if plan.rejections:
        out.line(("Rejected", ("bold",)), " (candidate = offer × market, first rule broken):")
        for r in plan.rejections.values():
            ex = "; ".join(r.examples[:2])
            out.line(f"  {r.reason:<14} {r.count:>7}  e.g. {ex}")


def billing_notes(providers: set[str]) -> list[str]:
    """How each cloud that bills in the account's currency will convert, from its options."""
    return [f"{name}: {info['note']}" for name, info in billing_by_provider(providers).items()]


def billing_by_provider(providers: set[str]) -> dict[str, dict[str, object]]:
    """The billing currency each provider in ``providers`` would bid in, from its configured
    options (``providers.yaml``), for the clouds that bill in the account's currency."""
    from providers._common import billing_from_options
    from provisioner.providers_config import provider_defaults

    out = {}
    for name in sorted(providers):
        info = billing_from_options(name, provider_defaults(name))
        if info is not None:
            out[name] = info
    return out


#: What a narrow screen never loses in ``catalog show`` (ids and money), and what goes first.
#: ``where`` is the zone, or the region of an offer made in a whole region, so the region
#: column can go first (the zone names it).
OFFER_KEEP = frozenset({"provider", "where", "instance", "OD $/h", "spot $/h"})
OFFER_DROP_ORDER = ("band", "vCPU", "GiB", "region", "date", "GPUs")


def render_offers(offers: list[Offer]) -> None:
    """The offers as a table; on a narrow screen whole columns are left out (and named), never
    an id, a price or a date cut short."""
    from provisioner.cli.common import fitted_table

    headers = ["provider", "region", "where", "instance", "GPUs", "vCPU", "GiB",
               "OD $/h", "spot $/h", "band", "date"]  # fmt: skip
    rows = [
        [
            o.provider, o.region, o.zone or o.region, o.instance_type, f"{o.gpu_count}x {o.gpu}",
            f"{o.vcpus:g}", f"{o.memory_gib:g}",
            "-" if o.price is None else f"{o.price:.4f}",
            "-" if o.spot_price is None else f"{o.spot_price:.4f}",
            o.interruption_band or "-", o.price_date or "-",
        ]
        for o in offers
    ]  # fmt: skip
    t, note = fitted_table(
        headers, rows, keep=OFFER_KEEP, drop_order=OFFER_DROP_ORDER,
        right=frozenset({"vCPU", "GiB", "OD $/h", "spot $/h"}),
    )  # fmt: skip
    out = console()
    out.print(t)
    if note:
        out.print(note, markup=False, highlight=False)
