"""``provisioner policy check|schema``."""

from __future__ import annotations

from typing import Any

import click

from provisioner.cli import EXIT_BAD_INPUT, EXIT_OK
from provisioner.cli.common import json_option, print_json


@click.group()
def policy() -> None:
    """Validate policy files; print the policy JSON Schema."""


@policy.command()
@click.argument("files", nargs=-1, required=True)
@json_option
def check(files: tuple[str, ...], as_json: bool) -> None:
    """Validate policy FILES. Exits 0 when all are valid, 2 otherwise (errors as file:line:col)."""
    from rich.markup import escape

    from policies.loader import PolicyError, load_policy
    from provisioner.console import console, error
    from provisioner.core.planner import required_vram

    results = []
    ok = True
    for f in files:
        try:
            pol = load_policy(f)
        except PolicyError as exc:
            ok = False
            results.append({"file": f, "valid": False, "errors": [str(i) for i in exc.issues]})
            if not as_json:
                for i in exc.issues:
                    error(str(i))
            continue
        vram, _ = required_vram(pol)
        warnings = _tag_warnings(pol.tags, pol.residency.providers)
        unmatched = _matches_nothing(pol)
        if unmatched:
            warnings.append(unmatched)
        results.append(
            {
                "file": f,
                "valid": True,
                "name": pol.name,
                "required_vram_gb": vram,
                "matches_catalog": not unmatched,
                "warnings": warnings,
            }
        )
        if not as_json:
            extra = f", needs {vram:.1f} GB per GPU" if vram else ""
            word = "valid, but it can run nowhere" if unmatched else "ok"
            console().print(
                f"{escape(f)}: {word} ([bold]{escape(pol.name)}[/], market {pol.market.value}{extra})"
            )
            for w in warnings:
                console(stderr=True).print(f"[yellow]warning:[/] {escape(f)}: {escape(w)}")
    if as_json:
        print_json(results)
    raise SystemExit(EXIT_OK if ok else EXIT_BAD_INPUT)


def _matches_nothing(pol: Any) -> str | None:
    """Why no offer of the built-in catalog can run the policy now, or None when one can."""
    from datetime import UTC, datetime

    from provisioner.catalog_files import builtin_catalog
    from provisioner.core.planner import PlanContext, PlanError, plan_offers

    try:
        plan = plan_offers(pol, builtin_catalog(), PlanContext(now=datetime.now(UTC)), top=1)
    except PlanError as exc:
        return f"it cannot be planned: {exc}"
    if plan.placements:
        return None
    why = ", ".join(
        f"{reason} {n}" for reason, n in sorted(plan.rejected.items(), key=lambda kv: -kv[1])
    )
    return (
        f"matches no offer of the built-in catalog ({plan.candidates} candidates; rejected "
        f"by: {why}); `provisioner plan --policy FILE` shows why, with examples"
    )


def _tag_warnings(tags: dict[str, str], providers: list[str]) -> list[str]:
    """How the policy's tags will not reach a cloud as written (GCP labels), when GCP may run it."""
    if not tags or (providers and "gcp" not in providers):
        return []
    from providers.gcp import label_changes

    return [f"gcp: {line}" for line in label_changes(tags)]


@policy.command()
def schema() -> None:
    """Print the JSON Schema of a policy (for editors: yaml-language-server)."""
    from policies.loader import policy_schema

    print_json(policy_schema())
