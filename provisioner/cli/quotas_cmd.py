"""``provisioner quotas``: the account's GPU quotas, as last read and cached in the store."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click

from provisioner.cli import EXIT_OK, EXIT_PROVIDER, exit_code_for
from provisioner.cli.common import fail, json_option, print_json
from provisioner.core.quotas import FROM_CLOUD, FROM_COUNT, FROM_LAUNCH, FROM_LIMIT, SOURCES

#: the `live` column: which figures of a quota were read from the cloud when it was read
LIVE_TEXT = {
    FROM_CLOUD: "limit, used",
    FROM_COUNT: "limit, used (counted)",
    FROM_LIMIT: "limit",
    FROM_LAUNCH: "none",
}
LIVE_MEANS = {
    FROM_CLOUD: "the cloud's limit and usage, as read",
    FROM_COUNT: "the cloud's limit; the usage counted from the account's running instances "
    "when read (AWS)",
    FROM_LIMIT: "the cloud's limit; its usage was not read, so the whole limit counts as left",
    FROM_LAUNCH: "a launch the cloud refused for quota: nothing more of that kind fits until "
    "the next --refresh",
}


@click.command()
@click.option("--provider", "provider_name", default=None, help="Only this cloud's quotas.")
@click.option(
    "--refresh",
    is_flag=True,
    help="Read the provider's quotas from the cloud now and cache them (needs --provider).",
)
@click.option("--region", "regions", multiple=True, help="Region to read (repeatable).")
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
def quotas(
    provider_name: str | None,
    refresh: bool,
    regions: tuple[str, ...],
    options: tuple[str, ...],
    store_url: str | None,
    as_json: bool,
) -> None:
    """List the account's GPU quotas per cloud and region: limit, used, what is left, and how
    old the reading is.

    `--refresh --provider NAME` reads them from the cloud (AWS Service Quotas, GCP regional
    quotas, Azure usages, Alibaba DescribeAccountAttributes, Tencent DescribeAccountQuota)
    and caches them in the store; `plan` then rejects offers beyond what
    is left, with reason `quota`. A launch the cloud refuses for quota also updates the cache.
    Exits 4 when the cloud refuses, 2 on bad input.
    """
    now = datetime.now(UTC)
    if refresh:
        rows = _refresh(provider_name, regions, options, store_url)
    else:
        if options:
            fail("-o: provider options are for --refresh")
        from provisioner.cli.common import existing_store

        store = existing_store(store_url)
        rows = [] if store is None else store.quotas(provider_name)
        if regions:
            rows = [q for q in rows if q.region in regions]
    if as_json:
        print_json({"quotas": [q.as_dict(now) for q in rows]})
        raise SystemExit(EXIT_OK)
    _render(rows, now, provider_name)
    raise SystemExit(EXIT_OK)


def _refresh(
    provider_name: str | None, regions: tuple[str, ...], options: tuple[str, ...], url: str | None
) -> list[Any]:
    from providers.base import ProviderError
    from providers.capabilities import Quotas
    from provisioner.cli.checks import open_provider
    from provisioner.cli.common import open_store

    if not provider_name:
        fail("--refresh needs --provider NAME (aws, gcp, azure, alibaba or tencent)")
    prov = open_provider(provider_name, options)
    try:
        if not isinstance(prov, Quotas):
            fail(
                f"{provider_name} reads no quotas from its cloud; its quota errors at launch "
                "are still cached",
                EXIT_PROVIDER,
            )
        try:
            rows = prov.quotas(list(regions) or None)
        except ProviderError as exc:
            fail(str(exc), exit_code_for(exc))
    finally:
        prov.close()
    open_store(url, create=True).save_quotas(rows, replace=provider_name)
    return rows


def _render(rows: list[Any], now: datetime, provider_name: str | None) -> None:
    from provisioner.cli.plain import Plain
    from provisioner.core.price_age import age_text

    out = Plain()
    if not rows:
        which = provider_name or "NAME"
        out.line(f"no quotas cached; `provisioner quotas --refresh --provider {which}` reads them")
        return
    headers = ["provider", "region", "quota", "market", "unit"]
    headers += ["limit", "used", "left", "live", "age"]
    table = []
    for q in rows:
        age = "-" if q.at is None else age_text(now - q.at)
        table.append(
            [
                q.provider,
                q.zone or q.region,
                q.name,
                q.market,
                q.unit,
                f"{q.limit:g}",
                "-" if q.used is None else f"{q.used:g}",
                f"{q.remaining:g}",
                LIVE_TEXT.get(q.origin, q.origin),
                age,
            ]
        )
    right = [False, False, False, False, False, True, True, True, False, True]
    if not out.table(headers, right, table):
        for row in table:
            out.line("  ".join(row))
    notes = {q.name: q.note for q in rows if q.note and q.note != q.name}
    for name, note in notes.items():
        out.line(f"  {name}: {note}")
    for origin in sorted({q.origin for q in rows}, key=SOURCES.index):
        out.line(f"live {LIVE_TEXT[origin]}: {LIVE_MEANS[origin]}")
