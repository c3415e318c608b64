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
    from policies.loader import PolicyError, load_policy
    from provisioner.console import console, error
    from provisioner.planner import required_vram

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
        results.append({"file": f, "valid": True, "name": pol.name, "required_vram_gb": vram})
        if not as_json:
            extra = f", needs {vram:.1f} GB per GPU" if vram else ""
            console().print(f"{f}: ok ([bold]{pol.name}[/], market {pol.market.value}{extra})")
    if as_json:
        print_json(results)
    raise SystemExit(EXIT_OK if ok else EXIT_BAD_INPUT)


@policy.command()
def schema() -> None:
    """Print the JSON Schema of a policy (for editors: yaml-language-server)."""
    from policies.loader import policy_schema

    print_json(policy_schema())
