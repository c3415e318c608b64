"""``provisioner priors``: the clouds' availability priors (placement scores, eviction rates,
interruption rates, price volatility), as last read and cached in the store."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click

from provisioner.cli import EXIT_OK, exit_code_for
from provisioner.cli.common import fail, json_option, print_json

#: the clouds that publish no availability figures (docs/clouds.md#availability-priors)
NONE_PUBLISHED = {
    "gcp": "GCP publishes no per-zone spot availability or preemption rate",
    "tencent": "Tencent Cloud publishes no per-zone spot availability or interruption rate",
    "sim": "the simulated cloud publishes no availability figures",
}


@click.command()
@click.option("--provider", "provider_name", default=None, help="Only this cloud's priors.")
@click.option(
    "--refresh",
    is_flag=True,
    help="Read the provider's priors from the cloud now and cache them (needs --provider).",
)
@click.option("--region", "regions", multiple=True, help="Region to read (repeatable).")
@click.option(
    "--instance-type",
    "instance_types",
    multiple=True,
    metavar="TYPE",
    help="Instance type to read (repeatable; default: the catalog's spot GPU types there).",
)
@click.option(
    "-o",
    "--provider-option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Provider option for --refresh (repeatable), as for `up`.",
)
@click.option("--store", "store_url", envvar="PROVISIONER_STORE", default=None, help="Store URL.")
@json_option
def priors(
    provider_name: str | None,
    refresh: bool,
    regions: tuple[str, ...],
    instance_types: tuple[str, ...],
    options: tuple[str, ...],
    store_url: str | None,
    as_json: bool,
) -> None:
    """List what each cloud says of its zones' spot capacity, per instance type: the monthly
    interruption risk it reads as, and how old the reading is.

    `--refresh --provider NAME` reads it from the cloud (AWS Spot placement scores and spot
    price history, Azure Resource Graph eviction rates, Alibaba DescribeSpotAdvice) and caches
    it in the store; `plan` then ranks a zone by its prior's risk, the daemon starts a zone
    with no history from it and the cost estimate refines the zone's band with it. GCP and
    Tencent publish none. Exits 4 when the cloud refuses, 2 on bad input.
    """
    now = datetime.now(UTC)
    if refresh:
        rows = _refresh(provider_name, regions, instance_types, options, store_url)
    else:
        if options:
            fail("-o: provider options are for --refresh")
        from provisioner.cli.common import existing_store

        store = existing_store(store_url)
        rows = [] if store is None else store.priors(provider_name)
        if regions:
            rows = [p for p in rows if p.region in regions]
        if instance_types:
            rows = [p for p in rows if p.instance_type in instance_types]
    if as_json:
        print_json({"priors": [p.as_dict(now) for p in rows]})
        raise SystemExit(EXIT_OK)
    _render(rows, now, provider_name)
    raise SystemExit(EXIT_OK)


def _default_types(provider: str, regions: list[str]) -> list[str]:
    """The built-in catalog's instance types of ``provider`` with a spot price in ``regions``."""
    from provisioner.catalog_files import builtin_catalog

    return sorted(
        {
            o.instance_type
            for o in builtin_catalog().offers
            if o.provider == provider and o.spot_price and (not regions or o.region in regions)
        }
    )


def _refresh(
    provider_name: str | None,
    regions: tuple[str, ...],
    instance_types: tuple[str, ...],
    options: tuple[str, ...],
    url: str | None,
) -> list[Any]:
    from providers.base import ProviderError, ProviderUnavailable
    from providers.capabilities import Priors
    from provisioner.cli.checks import open_provider
    from provisioner.cli.common import open_store

    if not provider_name:
        fail("--refresh needs --provider NAME (aws, azure or alibaba)")
    if provider_name in NONE_PUBLISHED:
        fail(f"{NONE_PUBLISHED[provider_name]}: nothing to read (aws, azure and alibaba do)")
    prov = open_provider(provider_name, options)
    try:
        if not isinstance(prov, Priors):
            fail(f"{provider_name} reads no availability priors from its cloud")
        where = list(regions) or list(
            getattr(prov, "regions", None) or getattr(prov, "locations", [])
        )
        types = list(instance_types) or _default_types(provider_name, where)
        try:
            rows = prov.priors(where or None, types)
        except ProviderError as exc:
            fail(str(exc), exit_code_for(exc))
        except ProviderUnavailable as exc:
            fail(str(exc))
    finally:
        prov.close()
    open_store(url, create=True).save_priors(rows, replace=provider_name)
    return rows


def _render(rows: list[Any], now: datetime, provider_name: str | None) -> None:
    from provisioner.cli.plain import Plain
    from provisioner.core.price_age import age_text
    from provisioner.core.zone_priors import band_of, describe, risk

    out = Plain()
    if not rows:
        which = provider_name or "NAME"
        out.line(f"no priors cached; `provisioner priors --refresh --provider {which}` reads them")
        return
    headers = ["provider", "zone", "instance type", "figure", "risk", "age"]
    table = []
    for p in rows:
        r = risk(p)
        table.append(
            [
                p.provider,
                p.location,
                p.instance_type,
                describe(p),
                "-" if r is None else band_of(r),
                "-" if p.at is None else age_text(now - p.at),
            ]
        )
    right = [False, False, False, False, True, True]
    if not out.table(headers, right, table):
        for row in table:
            out.line("  ".join(row))
    out.line(
        "risk: the monthly interruption band the figure reads as (a price volatility sets none: "
        "it raises the zone's risk by up to half)"
    )
