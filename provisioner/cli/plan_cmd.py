"""``provisioner plan``: eligible offers ranked, with rejections explained."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

import click

from provisioner.cli import EXIT_NOTHING_ELIGIBLE, EXIT_OK
from provisioner.cli.common import (
    fail,
    json_option,
    load_catalog_or_exit,
    load_policy_or_exit,
    print_json,
)


@click.command()
@click.option(
    "--policy",
    "policy_path",
    required=True,
    help="Policy YAML file.",
)
@click.option(
    "--catalog",
    "catalogs",
    multiple=True,
    help="Catalog CSV (repeatable; own layout, SkyPilot vms.csv, GCP price list). Default: built-in.",
)
@click.option(
    "--catalog-provider",
    "--provider",
    "provider",
    default=None,
    help="Provider of --catalog rows that have no Provider column (--provider is the older name).",
)
@click.option(
    "--top",
    default=10,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Placements to show.",
)
@click.option(
    "--measured",
    is_flag=True,
    help="Rank on the store's probe results where there are some (see `catalog measured`).",
)
@click.option(
    "--held",
    "held_from",
    multiple=True,
    help="Rank the capacity this provider's account holds (reservations, capacity blocks) "
    "for a policy whose market allows `reserved` (repeatable; its -o options apply).",
)
@click.option(
    "-o",
    "--provider-option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Option of the --held provider (repeatable), e.g. -o region=us-east-1.",
)
@click.option("--store", "store_url", envvar="PROVISIONER_STORE", default=None, help="Store URL.")
@json_option
def plan(
    policy_path: str,
    catalogs: tuple[str, ...],
    provider: str | None,
    top: int,
    measured: bool,
    held_from: tuple[str, ...],
    options: tuple[str, ...],
    store_url: str | None,
    as_json: bool,
) -> None:
    """Rank the GPU offers eligible under a policy, cheapest-best first.

    Exits 0 with placements, 3 when nothing is eligible (reasons printed), 2 on a bad policy.
    """
    from provisioner.core.planner import PlanError, plan_offers
    from provisioner.core.price_age import freshest, price_key
    from provisioner.planning import launch_context

    policy = load_policy_or_exit(policy_path)
    catalog = load_catalog_or_exit(catalogs, provider)
    store = _existing_store(store_url)
    # the account's quotas as last read (`provisioner quotas --refresh`, quota errors at launch)
    # and the clouds' availability priors (`provisioner priors --refresh`)
    # judged as the daemon will judge the first launch (provisioner.core.admission): nothing
    # spent, each cloud's billing minimum, the daemon's pass interval
    context = launch_context(
        policy,
        catalog,
        datetime.now(UTC),
        quotas=tuple(store.quotas()) if store is not None else (),
        priors=_zone_risks(store),
    )
    # each offer at its freshest price: the live quotes `catalog refresh` stored, else the row
    catalog, origins = freshest(catalog, store.prices() if store is not None else [])
    if measured:
        from dataclasses import replace

        from provisioner.cli.common import open_store
        from provisioner.control.store.probes import measured as measured_figures

        context = replace(context, measured=measured_figures(open_store(store_url)))
    if held_from:
        from dataclasses import replace

        context = replace(context, reservations=held_capacity(held_from, options))
    try:
        result = plan_offers(policy, catalog, context, top=top)
    except PlanError as exc:
        fail(f"{policy_path}: {exc}")
    from provisioner.simulate.estimate import estimate_plan

    result = estimate_plan(result, context.now, priors=context.priors)
    if as_json:
        from provisioner.cli.render import billing_by_provider

        doc = result.as_dict()
        doc["currency"] = "USD"  # every price, cap and estimate above
        doc["billing"] = billing_by_provider({pl.offer.provider for pl in result.placements})
        for pl, row in zip(result.placements, doc["placements"], strict=True):
            origin = origins.get(price_key(pl.offer, pl.market.value))
            if origin is not None:  # held capacity has no price to date: its marginal is 0
                row.update(origin.as_dict(context.now))
        doc["price_warning"] = stale_warning(result, origins, context.now)
        print_json(doc)
    else:
        from provisioner.cli.render import render_plan

        render_plan(result, catalog)
        held_notes(result)
        _price_notes(result, origins, context.now)
    raise SystemExit(EXIT_OK if result.placements else EXIT_NOTHING_ELIGIBLE)


def held_capacity(names: tuple[str, ...], options: tuple[str, ...]) -> tuple[Any, ...]:
    """The capacity the accounts of ``names`` hold (their HeldCapacity listing); the sim's
    under the cloud each of its zones mimics, as its offers are planned. A provider without
    the capability, or whose listing fails, is a clear error (exit 2 / 4)."""
    from dataclasses import replace

    from providers.base import ProviderError
    from providers.capabilities import HeldCapacity
    from provisioner.cli import EXIT_PROVIDER
    from provisioner.cli.checks import open_provider

    out: list[Any] = []
    for name in names:
        prov: Any = open_provider(name, options)
        try:
            if not isinstance(prov, HeldCapacity):
                fail(f"--held {name}: {name} lists no held capacity (no reservations() here)")
            prov = cast(Any, prov)
            try:
                found = prov.reservations()
            except ProviderError as exc:
                fail(f"--held {name}: {exc}", EXIT_PROVIDER)
            if name == "sim":
                found = [replace(r, provider=prov.zone_cloud(r.zone)) for r in found]
            out.extend(found)
        finally:
            prov.close()
    return tuple(out)


def held_notes(plan: Any) -> None:
    """Each reserved placement's reservation: which, how much is free, its marginal price
    (0) and what it costs the team per hour anyway, and when a block ends."""
    from provisioner.cli.plain import Plain

    rows = [p for p in plan.placements if p.reservation is not None]
    if not rows:
        return
    out = Plain()
    out.line(("held capacity:", ("dim",)), " marginal $0/h (paid for whether used or not)")
    for p in rows:
        r = p.reservation
        held = "unknown" if r.held_usd_per_hour is None else f"${r.held_usd_per_hour:.4g}/h"
        ends = f", ends {r.ends_at.isoformat()}" if r.ends_at is not None else ""
        out.line(
            f"  #{p.rank} {r.id} ({r.kind.value}) {r.provider}:{r.zone or r.region} "
            f"{r.instance_type}: {r.free} of {r.total} free, held {held}{ends}"
        )


def _zone_risks(store: Any) -> dict[Any, Any]:
    """The store's availability priors as one risk per zone and type ({}: none cached)."""
    if store is None:
        return {}
    rows = store.priors()
    if not rows:
        return {}
    from provisioner.core.zone_priors import zone_risks

    return zone_risks(rows)


def _no_sqlite_file(url: str | None) -> bool:
    """Whether ``url`` (or the default store) is a SQLite file that is not there, found
    without importing the store (``plan`` stays quick to start when there is none)."""
    import os
    from pathlib import Path

    url = url or os.environ.get("PROVISIONER_STORE")
    if not url:  # the default: provisioner.control.store.engine.default_url()
        base = os.environ.get("XDG_STATE_HOME") or os.path.join(
            os.path.expanduser("~"), ".local", "state"
        )
        return not (Path(base) / "provisioner" / "provisioner.db").exists()
    if url.startswith("sqlite:///") and "?" not in url:
        return not Path(url.removeprefix("sqlite:///")).exists()
    return False


def _existing_store(url: str | None) -> Any:
    """The store, where there is one (`plan` never creates one); None where there is none."""
    if _no_sqlite_file(url):
        return None
    from provisioner.cli.common import existing_store

    return existing_store(url)


def stale_warning(plan: Any, origins: Mapping[Any, Any], now: datetime) -> str | None:
    """A warning when the first placement's price is older than STALE_DAYS, else None."""
    from provisioner.core.price_age import STALE_DAYS, price_key

    if not plan.placements:
        return None
    first = plan.placements[0].offer
    origin = origins.get(price_key(first, plan.placements[0].market.value))
    if origin is None or not origin.stale(now):
        return None
    return (
        f"#1's price ({first.provider}: {origin.describe(now)}) is older than {STALE_DAYS} "
        f"days, the ranking may be off; `provisioner catalog refresh --provider "
        f"{first.provider}` stores live prices for plan"
    )


def _price_notes(plan: Any, origins: Mapping[Any, Any], now: datetime) -> None:
    """Where the placements' prices come from, each old one's age, and the stale warning."""
    from provisioner.cli.plain import Plain
    from provisioner.core.price_age import price_key, summary

    if not plan.placements:
        return
    out = Plain()
    keys = [price_key(pl.offer, pl.market.value) for pl in plan.placements]
    out.line(("prices:", ("dim",)), f" {summary(origins, keys, now)}")
    old: dict[str, list[int]] = {}  # each old price's age, and the placements priced so
    for pl in plan.placements:
        origin = origins.get(price_key(pl.offer, pl.market.value))
        if origin is not None and origin.stale(now):
            old.setdefault(origin.describe(now), []).append(pl.rank)
    for what, ranks in old.items():
        out.line(f"  {what}: {ranks_text(ranks)}")
    warning = stale_warning(plan, origins, now)
    if warning:
        out.line(("warning:", ("yellow",)), f" {warning}")


def ranks_text(ranks: list[int]) -> str:
    """``#1-#3, #5`` for ranks 1, 2, 3, 5."""
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    return ", ".join(f"#{run[0]}" if len(run) == 1 else f"#{run[0]}-#{run[-1]}" for run in runs)
