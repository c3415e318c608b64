"""``provisioner plan``: eligible offers ranked, with rejections explained."""

from __future__ import annotations

from datetime import UTC, datetime

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
@click.option("--store", "store_url", envvar="PROVISIONER_STORE", default=None, help="Store URL.")
@json_option
def plan(
    policy_path: str,
    catalogs: tuple[str, ...],
    provider: str | None,
    top: int,
    measured: bool,
    store_url: str | None,
    as_json: bool,
) -> None:
    """Rank the GPU offers eligible under a policy, cheapest-best first.

    Exits 0 with placements, 3 when nothing is eligible (reasons printed), 2 on a bad policy.
    """
    from provisioner.core.planner import PlanContext, PlanError, plan_offers

    policy = load_policy_or_exit(policy_path)
    catalog = load_catalog_or_exit(catalogs, provider)
    context = PlanContext(now=datetime.now(UTC))
    if measured:
        from provisioner.cli.jobs_cmd import _store
        from provisioner.probe.records import measured as measured_figures

        context = PlanContext(now=context.now, measured=measured_figures(_store(store_url)))
    try:
        result = plan_offers(policy, catalog, context, top=top)
    except PlanError as exc:
        fail(f"{policy_path}: {exc}")
    from provisioner.simulate.estimate import estimate_plan

    result = estimate_plan(result, context.now)
    if as_json:
        from provisioner.cli.render import billing_by_provider

        doc = result.as_dict()
        doc["currency"] = "USD"  # every price, cap and estimate above
        doc["billing"] = billing_by_provider({pl.offer.provider for pl in result.placements})
        print_json(doc)
    else:
        from provisioner.cli.render import render_plan

        render_plan(result, catalog)
    raise SystemExit(EXIT_OK if result.placements else EXIT_NOTHING_ELIGIBLE)
