"""``provisioner policy check|schema``."""

from __future__ import annotations

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
        results.append(
            {
                "file": f,
                "valid": True,
                "name": pol.name,
                "required_vram_gb": vram,
                "warnings": warnings,
            }
        )
        if not as_json:
            extra = f", needs {vram:.1f} GB per GPU" if vram else ""
            console().print(
                f"{escape(f)}: ok ([bold]{escape(pol.name)}[/], market {pol.market.value}{extra})"
            )
            for w in warnings:
                console(stderr=True).print(f"[yellow]warning:[/] {escape(f)}: {escape(w)}")
    if as_json:
        print_json(results)
    raise SystemExit(EXIT_OK if ok else EXIT_BAD_INPUT)


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
