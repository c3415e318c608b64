"""``provisioner tco``: a sustained workload's cost over months, spot and on-demand against
each cloud's 1- and 3-year commitments, per region the policy allows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from provisioner.cli import EXIT_BAD_INPUT, EXIT_NOTHING_ELIGIBLE, EXIT_OK
from provisioner.cli.common import fail, json_option, load_catalog_or_exit, load_policy_or_exit
from provisioner.console import error

if TYPE_CHECKING:
    from policies.profile import Profile
    from provisioner.core.planner.tco_plan import TcoResult


def load_profile_or_exit(path: str) -> Profile:
    """The profile at ``path``, or exit 2 with every problem as ``file:line:column``."""
    import sys

    from policies.loader import PolicyError
    from policies.profile import load_profile

    try:
        return load_profile(path)
    except PolicyError as exc:
        for issue in exc.issues:
            error(str(issue))
        sys.exit(EXIT_BAD_INPUT)


@click.command()
@click.option(
    "--policy", "policy_path", required=True, help="Policy YAML file (residency, budget, market)."
)
@click.option(
    "--profile", "profile_path", required=True, help="Workload profile YAML (phases, horizon)."
)
@click.option(
    "--catalog",
    "catalogs",
    multiple=True,
    help="Catalog CSV (repeatable). Default: built-in.",
)
@click.option(
    "--commitments",
    "commitments_path",
    default=None,
    help="Commitment prices CSV (layout of provisioner/data/commitments.csv). Default: built-in.",
)
@click.option(
    "--top",
    default=20,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Options to show in the table (JSON carries them all).",
)
@click.option(
    "--plot",
    "plot_path",
    default=None,
    help="Write a PNG of cumulative cost (needs the plot extra).",
)
@json_option
def tco(
    policy_path: str,
    profile_path: str,
    catalogs: tuple[str, ...],
    commitments_path: str | None,
    top: int,
    plot_path: str | None,
    as_json: bool,
) -> None:
    """Compare spot with fallback, on-demand and commitments for a sustained workload.

    For each cloud region the policy allows (residency, budget, capacity as in `plan`): the
    cost over the profile's horizon of spot with on-demand fallback, on-demand, and each
    commitment offer (AWS Reserved Instances and Savings Plans, GCP committed-use discounts,
    Azure reservations, Alibaba savings plans, Tencent monthly prepaid; 1 and 3 years), with
    the break-even utilisation of each commitment. Commitment prices come from the offline
    file provisioner/data/commitments.csv, or from --commitments FILE: for live AWS and Azure
    prices, write one with `provisioner catalog refresh --provider aws --commitments-out FILE`.

    Exits 0 with options, 3 when nothing is eligible, 2 on a bad policy or profile.
    """
    from provisioner.catalog_files import CatalogError, read_commitments
    from provisioner.core.planner import PlanContext, PlanError
    from provisioner.core.planner.tco_plan import compare

    if plot_path is not None:
        _require_matplotlib()
    policy = load_policy_or_exit(policy_path)
    profile = load_profile_or_exit(profile_path)
    catalog = load_catalog_or_exit(catalogs)
    try:
        commitments = read_commitments(commitments_path)
    except CatalogError as exc:
        fail(str(exc))
    try:
        result = compare(profile, policy, catalog, commitments, PlanContext(now=datetime.now(UTC)))
    except PlanError as exc:
        fail(f"{policy_path}: {exc}")
    if plot_path is not None and result.options:
        from provisioner.cli.tco_plot import plot_tco

        try:
            plot_tco(result, plot_path)
        except OSError as exc:
            fail(f"{plot_path}: cannot write the plot: {exc.strerror or exc}")
    if as_json:
        from provisioner.cli.common import print_json

        doc = result.as_dict()
        doc["plot"] = plot_path if result.options else None
        print_json(doc)
    else:
        _render(result, top, plot_path)
    raise SystemExit(EXIT_OK if result.options else EXIT_NOTHING_ELIGIBLE)


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        fail("--plot needs matplotlib, which is not installed: pip install 'provisioner[plot]'")


def _pct(v: float | None) -> str:
    if v is None:
        return "-"
    return "never" if v > 1 else f"{v:.0%}"


def _legs_text(values: tuple[float | None, ...]) -> str:
    return "/".join(_pct(v) for v in values) if values else "-"


def _render(result: TcoResult, top: int, plot_path: str | None) -> None:
    from rich.markup import escape
    from rich.table import Table

    from provisioner.console import console

    out = console()
    p = result.profile
    phases = "; ".join(
        f"{ph.name} {ph.count}x {'/'.join(ph.gpus)} {ph.daily_hours:g} h/day ({ph.utilisation:.0%})"
        for ph in p.phases
    )
    out.print(
        f"[bold]{p.name}[/] under policy [bold]{result.policy.name}[/]: {phases}; "
        f"{p.horizon_months} months; USD"
    )
    for note in result.notes:
        out.print(f"[yellow]note:[/] {escape(note)}")
    if not result.options:
        out.print("[bold red]Nothing is eligible under this policy.[/]")
        _rejections(result, out)
        return
    od: dict[tuple[str, str], float] = {
        (o.provider, o.region): o.total for o in result.options if o.kind == "on-demand"
    }
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for col, just in (
        ("#", "right"),
        ("provider", "left"),
        ("region", "left"),
        ("option", "left"),
        ("upfront", "right"),
        ("monthly", "right"),
        ("horizon", "right"),
        ("owed after", "right"),
        ("vs on-demand", "right"),
        ("use", "right"),
        ("break-even vs OD", "right"),
        ("vs spot", "right"),
    ):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for i, o in enumerate(result.options[:top], start=1):
        base = od.get((o.provider, o.region))
        t.add_row(
            str(i),
            o.provider,
            o.region,
            o.label + (f" (on-demand: {', '.join(o.uncovered)})" if o.uncovered else ""),
            _usd(sum(v for _, v in o.upfront_at)),
            _usd(o.monthly),
            _usd(o.horizon_cost),
            _usd(o.owed_after),
            "-" if base is None or base <= 0 else f"{o.total / base - 1:+.0%}",
            _legs_text(o.utilisation),
            _legs_text(o.break_even_on_demand),
            _legs_text(o.break_even_spot),
        )
    out.print(t)
    if len(result.options) > top:
        out.print(f"({len(result.options) - top} more options: --top or --json)")
    out.print(
        "use: the share of the committed instances' hours the workload uses them; break-even: "
        "the use above which the commitment costs less than paying per hour (per phase, "
        + "/".join(ph.name for ph in p.phases)
        + "); over 100% = never"
    )
    out.print("Legs (cheapest type per phase and region):")
    for r in result.regions:
        legs = ", ".join(
            f"{leg.phase.name}: {leg.instances}x {leg.instance_type}"
            + (f" (spot share {leg.spot_share:.0%})" if leg.spot is not None else "")
            for leg in r.legs
        )
        out.print(f"  {r.provider}:{r.region}  {legs}", markup=False)
    out.print("Assumptions:")
    for a in result.assumptions:
        out.print(f"  - {a}", markup=False)
    _rejections(result, out)
    if plot_path is not None:
        out.print(f"plot: {plot_path}", markup=False)


def _rejections(result: TcoResult, out: Any) -> None:
    if result.rejected:
        text = ", ".join(f"{k} {v:,}" for k, v in sorted(result.rejected.items()))
        out.print(f"Rejected (candidates, first rule broken, as in `plan`): {text}", markup=False)


def _usd(v: float) -> str:
    return "-" if v == 0 else f"{v:,.0f}"
