"""``provisioner catalog show|refresh``."""

from __future__ import annotations

from typing import Any

import click

from provisioner.cli import EXIT_NOT_FOUND, EXIT_OK
from provisioner.cli.common import json_option, load_catalog_or_exit, print_json


@click.group()
def catalog() -> None:
    """Look at the offer catalog, or refresh prices from a provider."""


@catalog.command()
@click.option(
    "--catalog",
    "catalogs",
    multiple=True,
    help="Catalog CSV (repeatable).",
)
@click.option("--gpu", default=None, help="GPU model (A100, H100, L4, ...).")
@click.option("--provider", default=None, help="aws, gcp, azure, alibaba, tencent.")
@click.option("--region", "regions", multiple=True, help="Region code (repeatable).")
@click.option(
    "--market",
    type=click.Choice(["spot", "on-demand"]),
    default=None,
    help="Only offers priced on this market.",
)
@click.option(
    "--top",
    "--limit",
    "limit",
    default=50,
    show_default=True,
    type=click.IntRange(0),
    help="Rows to print (0: all); --limit is the older name.",
)
@json_option
def show(
    catalogs: tuple[str, ...],
    gpu: str | None,
    provider: str | None,
    regions: tuple[str, ...],
    market: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Print catalog rows, cheapest first. Exits 3 when no row matches."""
    from policies.gpus import canonical_gpu

    cat = load_catalog_or_exit(catalogs, None)
    if gpu and canonical_gpu(gpu) is None:
        from provisioner.cli.common import fail

        fail(f"--gpu: unknown GPU {gpu!r}")
    if provider is not None:
        from providers.base import provider_names
        from provisioner.cli.common import fail

        if provider not in provider_names():
            fail(
                f"--provider {provider!r}: unknown provider (known: {', '.join(provider_names())})"
            )
    rows = cat.filter(provider=provider, gpu=gpu, regions=list(regions) or None)
    if market == "spot":
        rows = [o for o in rows if o.spot_price is not None]
    elif market == "on-demand":
        rows = [o for o in rows if o.price is not None]
    key = (
        (lambda o: o.spot_price)
        if market == "spot"
        else (lambda o: o.price if o.price is not None else float("inf"))
    )
    rows.sort(key=lambda o: (key(o), o.provider, o.region, o.zone))
    total = len(rows)
    if limit:
        rows = rows[:limit]
    if as_json:
        from dataclasses import asdict

        print_json({"total": total, "offers": [asdict(o) for o in rows]})
    else:
        from provisioner.cli.render import render_offers
        from provisioner.console import console

        render_offers(rows)
        console().print(f"{len(rows)} of {total} matching offers ({len(cat)} in catalog)")
    raise SystemExit(EXIT_OK if total else EXIT_NOT_FOUND)


@catalog.command()
@click.option(
    "--provider", "provider_name", required=True, help="aws, gcp, azure, alibaba, tencent or sim."
)
@click.option(
    "--region",
    "regions",
    multiple=True,
    help="Region to refresh (repeatable; default: the provider's).",
)
@click.option(
    "-o",
    "--provider-option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Provider option (repeatable).",
)
@click.option("--store", "store_url", envvar="PROVISIONER_STORE", default=None, help="Store URL.")
@click.option(
    "--commitments-out",
    "commitments_out",
    default=None,
    metavar="FILE.csv",
    help="Also fetch the provider's commitment prices live (AWS Reserved Instances, Azure "
    "reservations) into FILE.csv, in the layout `provisioner tco --commitments` reads.",
)
@json_option
def refresh(
    provider_name: str,
    regions: tuple[str, ...],
    options: tuple[str, ...],
    store_url: str | None,
    as_json: bool,
    commitments_out: str | None = None,
) -> None:
    """Fetch live spot and on-demand prices from a provider and store them.

    With --commitments-out, also write the provider's live commitment prices to a CSV in the
    layout of provisioner/data/commitments.csv, for `provisioner tco --commitments FILE.csv`.
    Exits 4 when the provider refuses (credentials, quota) and 2 on a bad provider name or a
    provider that quotes no commitment prices live.
    """
    from providers.base import ProviderError, ProviderUnavailable, get
    from providers.capabilities import Commitments, LivePrices
    from provisioner.cli import EXIT_PROVIDER, exit_code_for
    from provisioner.cli.checks import check_provider, parse_provider_options
    from provisioner.cli.common import fail, open_store
    from provisioner.console import console
    from provisioner.providers_config import provider_defaults

    opts = {**provider_defaults(provider_name), **parse_provider_options(options)}
    check_provider(provider_name, opts)
    try:
        prov = get(provider_name, **opts)
    except ValueError as exc:
        fail(str(exc))
    except (ProviderUnavailable, ImportError) as exc:
        fail(
            f"{provider_name}: {exc} (install the extra: pip install 'provisioner[{provider_name}]')",
            EXIT_PROVIDER,
        )
    if not isinstance(prov, LivePrices):
        prov.close()
        fail(f"{provider_name} quotes no live prices; the catalog's prices stand", EXIT_PROVIDER)
    if commitments_out is not None and not isinstance(prov, Commitments):
        prov.close()
        fail(f"--commitments-out: {provider_name} quotes no commitment prices live")
    rows: list[Any] = []
    try:
        with console(stderr=True).status(f"fetching prices from {provider_name}..."):
            quotes = prov.prices(list(regions) or None)
            if commitments_out is not None and isinstance(prov, Commitments):
                live = prov.commitment_prices(list(regions) or None)
                rows = [c for c in (q.as_commitment() for q in live) if c is not None]
    except ProviderError as exc:
        fail(str(exc), exit_code_for(exc))
    finally:
        prov.close()
    written: int | None = None
    if commitments_out is not None:
        from provisioner.catalog_files import write_commitments

        try:
            written = write_commitments(rows, commitments_out)
        except OSError as exc:
            fail(f"--commitments-out {commitments_out}: cannot write: {exc.strerror or exc}")
    n = open_store(store_url, create=True).save_prices(quotes)
    summary = price_summary(quotes)
    if as_json:
        doc: dict[str, Any] = {"provider": provider_name, "stored": n, **summary}
        if written is not None:
            doc["commitments_written"] = written
            doc["commitments_file"] = commitments_out
        print_json(doc)
    else:
        console().print(f"stored {n} price quote(s) from {provider_name}")
        if written is not None:
            console().print(f"wrote {written} commitment price(s) to {commitments_out}")
        for line in summary["lines"]:
            console().print(f"  {line}", markup=False)


def price_summary(quotes: list[Any]) -> dict[str, Any]:
    """How live and how old the quotes are, and what currency they were converted from."""
    from datetime import UTC, datetime

    now = datetime.now(UTC)

    def age(at: datetime | None) -> float | None:
        return None if at is None else round((now - at).total_seconds() / 60.0, 1)

    spot_at = [q.at for q in quotes if q.spot_price is not None]
    od_live = [q.on_demand_at for q in quotes if getattr(q, "on_demand_at", None) is not None]
    od_catalog = sum(
        1
        for q in quotes
        if q.on_demand_price is not None and getattr(q, "on_demand_at", None) is None
    )
    currencies = {
        str(q.currency): float(q.usd_per_unit)
        for q in quotes
        if getattr(q, "currency", "USD") not in ("USD", "")
    }
    doc: dict[str, Any] = {
        "currency": "USD",
        "spot_oldest_age_min": age(min(spot_at)) if spot_at else None,
        "on_demand_live": len(od_live),
        "on_demand_oldest_age_min": age(min(od_live)) if od_live else None,
        "on_demand_from_catalog": od_catalog,
        "converted_from": currencies,
    }
    lines = []
    if spot_at:
        lines.append(
            f"spot: {len(spot_at)} live, oldest observed {doc['spot_oldest_age_min']} min ago"
        )
    if od_live:
        lines.append(
            f"on-demand: {len(od_live)} live, fetched {doc['on_demand_oldest_age_min']} min ago"
        )
    if od_catalog:
        lines.append(f"on-demand: {od_catalog} from the bundled catalog (not live)")
    for code, rate in sorted(currencies.items()):
        lines.append(f"quoted in {code}, stored as USD at {rate:.4f} USD/{code}")
    doc["lines"] = lines
    return doc


@catalog.command()
@click.option("--store", "store_url", envvar="PROVISIONER_STORE", default=None, help="Store URL.")
@click.option("--provider", default=None, help="Only this cloud.")
@click.option("--gpu", default=None, help="Only this GPU model.")
@json_option
def measured(store_url: str | None, provider: str | None, gpu: str | None, as_json: bool) -> None:
    """What probes measured per (cloud, instance type, GPU), beside the datasheet: runs,
    median share of the datasheet, and TFLOPS per dollar measured vs datasheet (at the
    catalog's cheapest price for the type). This is what the planner ranks by. Exits 3 when
    nothing was measured yet."""
    from policies.gpus import canonical_gpu, gpu_specs
    from provisioner.catalog_files import builtin_catalog
    from provisioner.cli.common import open_store
    from provisioner.control.store.probes import measured as measured_figures

    model = canonical_gpu(gpu) if gpu else None
    if gpu and model is None:
        from provisioner.cli.common import fail

        fail(f"--gpu: unknown GPU {gpu!r}")
    store = open_store(store_url)
    figures = [
        m
        for m in measured_figures(store).values()
        if (provider is None or m.provider == provider) and (model is None or m.gpu == model)
    ]
    cat = builtin_catalog().with_prices(store.prices())
    specs = gpu_specs()
    rows = []
    for m in sorted(figures, key=lambda m: (m.provider, m.instance_type)):
        offers = [o for o in cat.filter(provider=m.provider) if o.instance_type == m.instance_type]
        prices = [p for o in offers for p in (o.price, o.spot_price) if p]
        count = offers[0].gpu_count if offers else None
        spec = specs.get(m.gpu)
        sheet = spec.tensor_tflops * count if spec and count else None
        price = min(prices) if prices else None
        rows.append(
            {
                **m.as_dict(),
                "gpu_count": count,
                "datasheet_tflops": sheet,
                "measured_tflops": m.tflops or (sheet * m.fraction if sheet else None),
                "price_per_hour": price,
                "datasheet_tflops_per_dollar": sheet / price if sheet and price else None,
                "measured_tflops_per_dollar": sheet * m.fraction / price
                if sheet and price
                else None,
            }
        )
    if as_json:
        print_json({"measured": rows})
    else:
        from rich.table import Table

        from provisioner.console import console

        t = Table(box=None, header_style="bold")
        for col in ("provider", "instance type", "GPU", "runs", "of datasheet", "lowest",
                    "TFLOPS/$ measured", "datasheet", "price/h"):  # fmt: skip
            t.add_column(
                col, justify="left" if col in ("provider", "instance type", "GPU") else "right"
            )
        for r in rows:
            t.add_row(
                r["provider"],
                r["instance_type"],
                f"{r['gpu_count'] or '?'}x {r['gpu']}",
                str(r["runs"]),
                f"{r['fraction']:.0%}",
                f"{r['lowest']:.0%}",
                "-"
                if r["measured_tflops_per_dollar"] is None
                else f"{r['measured_tflops_per_dollar']:.0f}",
                "-"
                if r["datasheet_tflops_per_dollar"] is None
                else f"{r['datasheet_tflops_per_dollar']:.0f}",
                "-" if r["price_per_hour"] is None else f"${r['price_per_hour']:.4g}",
            )
        out = console()
        if rows:
            out.print(t)
        out.print(f"{len(rows)} measured (cloud, instance type, GPU)")
    raise SystemExit(EXIT_OK if rows else EXIT_NOT_FOUND)
