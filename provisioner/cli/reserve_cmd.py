"""``provisioner reserve``: GPU capacity that can be booked ahead for a date range, with its
price, and (only with ``--yes`` and a ``--max-price``) the booking bought.

The GPU is mapped to instance types through the catalog the other commands read: every type of
the provider with that GPU whose GPU count divides ``--count`` is asked for, as
``--count / gpus-per-instance`` instances (``--gpu H100 --count 8``: one p5.48xlarge, or eight
p5.4xlarge). The provider lists what it can book
(:class:`~providers.capabilities.BooksCapacity`: AWS ``DescribeCapacityBlockOfferings``);
nothing is bought unless ``--yes`` is given with ``--max-price`` (USD, the whole booking's
upfront price) and an offering is within it. ``--dry-run`` lists and never buys.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import click

from provisioner.cli import EXIT_NOTHING_ELIGIBLE, EXIT_OK, EXIT_PROVIDER
from provisioner.cli.common import fail, json_option, print_json

#: the clouds whose adapters can book capacity ahead
BOOKING_PROVIDERS = ("aws",)


def _start(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        fail(f"--start {text!r}: expected an ISO 8601 time, e.g. 2026-07-01T09:00Z")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def instance_shapes(
    catalog: Any, provider: str, gpu: str, count: int, regions: tuple[str, ...]
) -> list[tuple[str, int, int]]:
    """(instance type, GPUs each, instances) of ``provider``'s types with ``gpu`` that make
    exactly ``count`` GPUs, most GPUs per instance first."""
    shapes: dict[str, int] = {}
    for o in catalog.filter(provider=provider, gpu=gpu, regions=list(regions) or None):
        if o.gpu_count >= 1 and count % o.gpu_count == 0:
            shapes[o.instance_type] = int(o.gpu_count)
    return [
        (itype, each, count // each)
        for itype, each in sorted(shapes.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


@click.command()
@click.option("--gpu", required=True, help="GPU model, e.g. H100, H200, A100.")
@click.option(
    "--count", type=int, required=True, help="GPUs in all (8: one 8-GPU instance, or 8 of one)."
)
@click.option("--hours", type=int, required=True, help="How long the booking lasts, in hours.")
@click.option(
    "--start", "start_text", default=None, metavar="ISO", help="Earliest start (default: now)."
)
@click.option(
    "--provider",
    "provider_name",
    type=click.Choice(["aws", "gcp"]),
    default="aws",
    show_default=True,
    help="Which cloud to ask.",
)
@click.option("--region", "regions", multiple=True, help="Region to ask (repeatable).")
@click.option(
    "-o",
    "--provider-option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Provider option (repeatable), as for `up`.",
)
@click.option("--dry-run", is_flag=True, help="List what can be booked; never buy.")
@click.option("--yes", is_flag=True, help="Buy the cheapest offering within --max-price.")
@click.option(
    "--max-price",
    type=float,
    default=None,
    metavar="USD",
    help="The most the whole booking may cost, upfront (needed with --yes).",
)
@click.option("--offering", "offering_id", default=None, help="Buy this offering id instead.")
@json_option
def reserve(
    gpu: str,
    count: int,
    hours: int,
    start_text: str | None,
    provider_name: str,
    regions: tuple[str, ...],
    options: tuple[str, ...],
    dry_run: bool,
    yes: bool,
    max_price: float | None,
    offering_id: str | None,
    as_json: bool,
) -> None:
    """List GPU capacity that can be booked for a date range (AWS Capacity Blocks for ML),
    with its upfront price, and buy one only when asked.

    Nothing is bought without `--yes`, and `--yes` needs `--max-price USD`: the cheapest
    offering (then the earliest) whose whole upfront price is within it is bought, or the one
    `--offering ID` names. `--dry-run` lists and never buys. A bought block is held capacity:
    a policy with `market: reserved...` launches into it.

    Exit codes: 0 listed (or bought), 2 bad input, 3 nothing offered or nothing within
    --max-price, 4 the cloud refused.
    """
    from policies.gpus import canonical_gpu

    if count < 1:
        fail("--count must be 1 or more GPUs")
    if hours < 1:
        fail("--hours must be 1 or more")
    if yes and max_price is None:
        fail("--yes buys: give --max-price USD, the most the whole booking may cost")
    if max_price is not None and (not math.isfinite(max_price) or max_price <= 0):
        fail("--max-price must be a positive number of USD")
    if offering_id is not None and not yes:
        fail("--offering names what --yes buys: give --yes and --max-price with it")
    model = canonical_gpu(gpu)
    if model is None:
        fail(f"--gpu {gpu!r}: not a GPU model the catalog knows (e.g. H100, H200, A100)")
    start = _start(start_text)
    if provider_name not in BOOKING_PROVIDERS:
        fail(
            f"{provider_name} has no capacity booking here: GCP calendar-mode reservations "
            "are booked in its console or with `gcloud compute future-reservations create`",
            EXIT_PROVIDER,
        )
    from provisioner.catalog_files import builtin_catalog

    shapes = instance_shapes(builtin_catalog(), provider_name, model, count, regions)
    if not shapes:
        fail(
            f"no {provider_name} instance type with {model} makes {count} GPUs (the catalog's "
            "types have 1, 4 or 8)",
            EXIT_NOTHING_ELIGIBLE,
        )
    offerings = _offerings(provider_name, options, shapes, hours, start, regions)
    within = [o for o in offerings if max_price is None or o.upfront_usd <= max_price + 1e-9]
    choice = None
    if yes:
        pool = within
        if offering_id is not None:
            pool = [o for o in within if o.id == offering_id]
        pool = sorted(pool, key=lambda o: (o.upfront_usd, o.starts_at))
        choice = pool[0] if pool else None
    bought = None
    if choice is not None and not dry_run:
        bought = _book(provider_name, options, choice)
    if as_json:
        print_json(
            {
                "gpu": model,
                "gpus": count,
                "hours": hours,
                "max_price_usd": max_price,
                "offerings": [_row(o, max_price) for o in offerings],
                "chosen": None if choice is None else choice.id,
                "dry_run": dry_run,
                "bought": None if bought is None else bought.as_dict(),
            }
        )
    else:
        _render(model, count, hours, offerings, max_price, choice, bought, dry_run)
    if not offerings:
        raise SystemExit(EXIT_NOTHING_ELIGIBLE)
    if yes and choice is None:
        if not as_json:
            from provisioner.console import error

            which = f"offering {offering_id}" if offering_id else "no offering"
            error(f"{which} within --max-price {max_price:.2f} USD: nothing bought")
        raise SystemExit(EXIT_NOTHING_ELIGIBLE)
    raise SystemExit(EXIT_OK)


def _offerings(
    provider_name: str,
    options: tuple[str, ...],
    shapes: list[tuple[str, int, int]],
    hours: int,
    start: datetime | None,
    regions: tuple[str, ...],
) -> list[Any]:
    from providers.base import ErrorKind, ProviderError
    from providers.capabilities import BooksCapacity
    from provisioner.cli.checks import open_provider

    prov = open_provider(provider_name, options)
    try:
        if not isinstance(prov, BooksCapacity):
            fail(f"{provider_name} books no capacity ahead", EXIT_PROVIDER)
        out: list[Any] = []
        for itype, _each, instances in shapes:
            try:
                out.extend(
                    prov.capacity_offerings(
                        itype, instances, hours, start_after=start, regions=list(regions) or None
                    )
                )
            except ProviderError as exc:
                if exc.kind is ErrorKind.INVALID:
                    fail(str(exc))
                fail(str(exc), EXIT_PROVIDER)
    finally:
        prov.close()
    out.sort(key=lambda o: (o.starts_at, o.upfront_usd))
    return out


def _book(provider_name: str, options: tuple[str, ...], offering: Any) -> Any:
    from providers.base import ProviderError
    from provisioner.cli.checks import open_provider

    prov = open_provider(provider_name, options)
    try:
        return prov.book(offering)  # type: ignore[attr-defined]
    except ProviderError as exc:
        fail(f"buying {offering.id}: {exc}", EXIT_PROVIDER)
    finally:
        prov.close()


def _row(o: Any, max_price: float | None) -> dict[str, Any]:
    return {
        "provider": o.provider,
        "id": o.id,
        "region": o.region,
        "zone": o.zone,
        "instance_type": o.instance_type,
        "instances": o.count,
        "starts_at": o.starts_at.isoformat(),
        "ends_at": o.ends_at.isoformat(),
        "hours": o.hours,
        "upfront_usd": o.upfront_usd,
        "currency": o.currency,
        "usd_per_instance_hour": round(o.usd_per_instance_hour, 4),
        "within_max_price": None if max_price is None else o.upfront_usd <= max_price + 1e-9,
    }


def _render(
    model: str,
    count: int,
    hours: int,
    offerings: list[Any],
    max_price: float | None,
    choice: Any,
    bought: Any,
    dry_run: bool,
) -> None:
    from provisioner.cli.plain import Plain

    out = Plain()
    if not offerings:
        out.line(f"nothing offered for {count} {model} GPUs for {hours} h")
        return
    out.line((f"{len(offerings)} offering(s) for {count} {model} GPUs for {hours} h", ("bold",)))
    headers = ["id", "zone", "type", "n", "start (UTC)", "end (UTC)", "upfront USD", "USD/inst-h"]
    right = [False, False, False, True, False, False, True, True]
    table = []
    for o in offerings:
        mark = "" if max_price is None or o.upfront_usd <= max_price + 1e-9 else " >max"
        table.append(
            [
                o.id,
                o.zone or o.region,
                o.instance_type,
                str(o.count),
                o.starts_at.strftime("%Y-%m-%d %H:%M"),
                o.ends_at.strftime("%Y-%m-%d %H:%M"),
                f"{o.upfront_usd:,.2f}{mark}",
                f"{o.usd_per_instance_hour:.2f}",
            ]
        )
    out.table(headers, right, table, force=True)  # ids and prices are never cut
    if bought is not None:
        out.line(
            ("bought ", ("bold",)),
            f"{choice.id} as {bought.id}: {bought.total} x {bought.instance_type} in "
            f"{bought.zone}, {choice.starts_at:%Y-%m-%d %H:%M} to {choice.ends_at:%Y-%m-%d %H:%M}"
            f" UTC, {choice.upfront_usd:,.2f} {choice.currency} upfront",
        )
    elif choice is not None and dry_run:
        out.line(
            f"--dry-run: would buy {choice.id} for {choice.upfront_usd:,.2f} USD; nothing bought"
        )
    elif choice is None:
        out.line("nothing bought: --yes --max-price USD buys the cheapest offering within it")
