"""``provisioner catalog show|refresh``."""

from __future__ import annotations

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
    type=click.Path(dir_okay=False),
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
    "--limit", default=50, show_default=True, type=click.IntRange(0), help="Rows to print (0: all)."
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
    from provisioner.gpus import canonical_gpu

    cat = load_catalog_or_exit(catalogs, None)
    if gpu and canonical_gpu(gpu) is None:
        from provisioner.cli.common import fail

        fail(f"--gpu: unknown GPU {gpu!r}")
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
