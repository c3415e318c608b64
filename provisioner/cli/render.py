"""Rich rendering of plans and catalog rows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from provisioner.console import console

if TYPE_CHECKING:
    from provisioner.core.catalog import Catalog
    from provisioner.core.models import Offer
    from provisioner.core.planner import Plan


def _money(v: float | None, digits: int = 4) -> str:
    return "-" if v is None else f"${v:,.{digits}g}" if v < 1000 else f"${v:,.0f}"


def render_plan(plan: Plan, catalog: Catalog) -> None:
    from rich.table import Table

    out = console()
    p = plan.policy
    head = f"[bold]{p.name}[/]: {plan.eligible} eligible of {plan.candidates} candidates"
    head += f" ({len(catalog)} offers, market {p.market.value}; prices in USD)"
    if plan.required_vram_gb is not None:
        head += f"; needs {plan.required_vram_gb:.1f} GB per GPU"
    if plan.deadline is not None:
        head += f"; deadline {plan.deadline:%Y-%m-%d %H:%M} UTC"
    out.print(head)
    for note in plan.notes:
        out.print(f"[yellow]note:[/] {note}")
    if plan.placements:
        t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        for col, justify in [
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
            ("TFLOPS/USD", "right"),
        ]:
            t.add_column(col, justify=justify)  # type: ignore[arg-type]
        for pl in plan.placements:
            o = pl.offer
            t.add_row(
                str(pl.rank),
                o.provider,
                o.zone or o.region,
                o.instance_type,
                f"{o.gpu_count}x {o.gpu}",
                pl.market.value,
                f"{pl.price_per_hour:.4f}",
                "-" if pl.bid_cap_per_hour is None else f"{pl.bid_cap_per_hour:.4f}",
                o.interruption_band or "-",
                "-" if pl.est_rtt_ms is None else f"{pl.est_rtt_ms:.0f}",
                "-" if pl.est_hours is None else f"{pl.est_hours:.1f}",
                "-" if pl.est_job_cost is None else f"{pl.est_job_cost:,.2f}",
                ("-" if pl.tflops_per_dollar is None else f"{pl.tflops_per_dollar:.1f}")
                + ("*" if any(r.startswith("measured") for r in pl.reasons) else ""),
            )
        out.print(t)
        for note in billing_notes({pl.offer.provider for pl in plan.placements}):
            out.print(f"[yellow]currency:[/] {note}")
        for pl in plan.placements:  # where probes measured the type (plan --measured)
            for why in pl.reasons:
                if why.startswith("measured"):
                    out.print(f"  * #{pl.rank} {pl.offer.instance_type}: {why}", markup=False)
    else:
        out.print("[bold red]Nothing is eligible under this policy.[/]")
    if plan.rejections:
        out.print("[bold]Rejected[/] (candidate = offer × market, first rule broken):")
        for r in plan.rejections.values():
            ex = "; ".join(r.examples[:2])
            out.print(f"  {r.reason:<14} {r.count:>7}  e.g. {ex}")


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


def render_offers(offers: list[Offer]) -> None:
    from rich.table import Table

    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for col in (
        "provider",
        "region",
        "zone",
        "instance",
        "GPUs",
        "vCPU",
        "GiB",
        "on-demand $/h",
        "spot $/h",
        "band",
        "date",
    ):
        t.add_column(col)
    for o in offers:
        t.add_row(
            o.provider,
            o.region,
            o.zone or "-",
            o.instance_type,
            f"{o.gpu_count}x {o.gpu}",
            f"{o.vcpus:g}",
            f"{o.memory_gib:g}",
            "-" if o.price is None else f"{o.price:.4f}",
            "-" if o.spot_price is None else f"{o.spot_price:.4f}",
            o.interruption_band or "-",
            o.price_date or "-",
        )
    console().print(t)
