"""``provisioner drill``: one tiny job through a real interruption, every step checked and timed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from provisioner.cli import EXIT_INTERRUPTED, EXIT_JOB_FAILED, EXIT_NOTHING_ELIGIBLE, EXIT_OK
from provisioner.cli.common import fail, json_option, print_json

PROVIDERS = ("sim", "aws", "gcp", "azure", "alibaba", "tencent")


@click.command()
@click.option("--provider", type=click.Choice(PROVIDERS), help="The cloud to drill on.")
@click.option(
    "--max-cost",
    type=float,
    metavar="USD",
    help="The most the drill may spend (required): caps the price and the budget.",
)
@click.option("--policy", "policy_path", help="A policy whose rules the drill's job keeps.")
@click.option("--region", help="Only this region.")
@click.option(
    "--gpu",
    help="Only this GPU (default: the cheapest spot GPU the cloud has); `none`: a small CPU "
    "instance type with spot instead (m5.large, e2-standard-2, Standard_D2s_v3, ecs.g6.large, "
    "S5.MEDIUM4).",
)
@click.option(
    "--checkpoint-uri",
    help="Where checkpoints go (s3://, gs://, az://, or a shared file://); required on a cloud "
    "unless --policy names one. The drill deletes its own objects there.",
)
@click.option(
    "--step-seconds",
    type=click.FloatRange(min=0.01),
    help="Seconds per step of the drill's 60-step job (default: it runs three of the cloud's "
    "notices long, so it outlasts the notice).",
)
@click.option("--mimic", default="aws", show_default=True, help="sim: the cloud it plays.")
@click.option(
    "-o",
    "--provider-option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Provider option (repeatable), as for `up`.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False),
    help="Where drills keep their ledgers (default: ~/.local/state/provisioner).",
)
@click.option(
    "--report-file",
    "report_path",
    type=click.Path(dir_okay=False),
    help="Write the JSON report here (default: beside the drill's ledger).",
)
@click.option("--dry-run", is_flag=True, help="Print the API calls and permissions; do nothing.")
@click.option("--cleanup", is_flag=True, help="Delete what earlier drills left (after a kill).")
@json_option
def drill(
    provider: str | None,
    max_cost: float | None,
    policy_path: str | None,
    region: str | None,
    gpu: str | None,
    checkpoint_uri: str | None,
    step_seconds: float | None,
    mimic: str,
    options: tuple[str, ...],
    state_dir: str | None,
    report_path: str | None,
    dry_run: bool,
    cleanup: bool,
    as_json: bool,
) -> None:
    """Prove recovery on your own account: launch a tiny checkpointing job on the cheapest
    spot offer, trigger the cloud's own interruption (AWS FIS, GCP simulateMaintenanceEvent,
    Azure simulateEviction; on Alibaba and Tencent, which have none, a substitute notice and a
    terminate), and check and time every step: launch, agent up, notice, checkpoint,
    replacement, resume, result, cleanup. Everything the drill made is deleted at the end, on
    an error and on Ctrl-C; after a kill, `provisioner drill --cleanup` deletes it.

    Exit 0: every step held; 2: bad input; 3: nothing eligible under --max-cost; 5: a step
    did not hold (the report says which, and what it means); 130: interrupted (cleaned up).
    """
    from provisioner.drill.ledger import default_state_dir

    base = Path(state_dir) if state_dir else default_state_dir()
    if cleanup:
        raise SystemExit(_cleanup(base, as_json))
    if not provider:
        fail("--provider is required: sim, aws, gcp, azure, alibaba or tencent")
    if dry_run:
        raise SystemExit(_dry_run(provider, checkpoint_uri, region, gpu, mimic, as_json))
    if max_cost is None:
        fail("--max-cost USD is required: the most the drill may spend (e.g. --max-cost 1)")
    if max_cost <= 0:
        fail(f"--max-cost must be more than 0 (got {max_cost:g})")
    uri = checkpoint_uri or _policy_uri(policy_path)
    if provider != "sim" and not uri:
        fail(
            f"--checkpoint-uri is required on {provider}: a bucket both this machine and the VM "
            "can write (s3://, gs://, az://), or a shared file:// mount"
        )
    from provisioner.cli.checks import parse_provider_options
    from provisioner.drill.target import DrillTarget

    target = DrillTarget(
        provider=provider,
        max_cost=max_cost,
        state_dir=base,
        region=region,
        gpu=gpu,
        policy_path=policy_path,
        checkpoint_uri=uri,
        mimic=mimic,
        provider_options=parse_provider_options(options),
        step_seconds=step_seconds,
    )
    raise SystemExit(_run(target, report_path, as_json))


def _policy_uri(policy_path: str | None) -> str | None:
    if not policy_path:
        return None
    from provisioner.cli.common import load_policy_or_exit

    uri = load_policy_or_exit(policy_path).checkpoint.uri
    return None if uri == "file://./checkpoints" else str(uri)


def _run(target: Any, report_path: str | None, as_json: bool) -> int:
    from provisioner.console import console
    from provisioner.drill.runner import Drill, prepare

    out = console(stderr=as_json)
    ledger = prepare(target)

    def say(message: str) -> None:
        out.print(message, markup=False, highlight=False)

    drill_run = Drill(target, ledger, say=say)  # Ctrl-C and SIGTERM stop it (cleaned up)
    report = drill_run.run()
    path = Path(report_path) if report_path else ledger.directory / "report.json"
    path.write_text(json.dumps(report.to_json(), indent=2), encoding="utf-8")
    if as_json:
        print_json(report.to_json() | {"report": str(path)})
    else:
        _table(report, out)
        out.print(f"report: {path}", markup=False, highlight=False)
    if report.stopped.startswith("interrupted"):
        return EXIT_INTERRUPTED
    if drill_run.refused:
        return EXIT_NOTHING_ELIGIBLE
    return EXIT_OK if report.passed else EXIT_JOB_FAILED


def _table(report: Any, out: Any) -> None:
    from rich.table import Table

    from provisioner.drill.steps import MEANING, Outcome

    t = Table(box=None, header_style="bold")
    for name in ("step", "outcome", "at", "took", "detail"):
        t.add_column(name, justify="right" if name in ("at", "took") else "left")
    for s in report.steps:
        detail = s.detail + (" (substitute)" if s.substitute else "")
        if s.outcome is Outcome.FAILED:
            detail += f" -- likely: {MEANING[s.name][1]}"
        t.add_row(
            s.name.value,
            s.outcome.value,
            "" if s.at_s is None else f"{s.at_s:.1f} s",
            "" if s.took_s is None else f"{s.took_s:.1f} s",
            detail,
        )
    out.print()
    out.print(t)
    verdict = (
        "every step held" if report.passed else f"FAILED: {report.stopped or 'a step did not hold'}"
    )
    out.print(
        f"drill {report.drill_id} on {report.provider}: {verdict}; cost ${report.cost_usd:.4f}",
        markup=False,
        highlight=False,
    )
    for line in report.leftovers:
        out.print(f"left behind: {line}", markup=False, highlight=False)


def _dry_run(
    provider: str,
    uri: str | None,
    region: str | None,
    gpu: str | None,
    mimic: str,
    as_json: bool,
) -> int:
    from provisioner.drill.cpu import cpu_type, is_cpu
    from provisioner.drill.permissions import bucket_of, grants

    g = grants(provider, bucket_of(uri))
    cloud = mimic if provider == "sim" else provider
    cpu = cpu_type(cloud) if is_cpu(gpu) else None
    if cpu is not None:
        instance = cpu.describe()
        if region and region != cpu.region:
            instance += f"; launched in {region} (the figures are {cpu.region}'s)"
    elif gpu:
        instance = f"the cheapest spot offer with one {gpu} under the drill's price cap"
    else:
        instance = "the cheapest spot GPU offer under the drill's price cap"
    if as_json:
        extra: dict[str, Any] = {"region": region, "instance": instance}
        if cpu is not None:
            extra["instance_type"] = cpu.instance_type
        print_json(g.to_json() | extra)
        return EXIT_OK
    echo = click.echo
    echo(f"provisioner drill --provider {provider}: nothing is done (--dry-run)")
    echo(f"instance: {instance}")
    echo(f"interruption: {g.interruption}")
    echo("")
    echo("API calls, in order (who: call -- why):")
    for n, c in enumerate(g.calls, 1):
        echo(f"{n:3}. {c.who:<6} {c.call} -- {c.why}")
    echo("")
    echo("the caller (this machine's identity) needs:")
    for p in g.caller:
        echo(f"  {p}")
    echo("the VM needs:")
    for p in g.vm:
        echo(f"  {p}")
    for name, doc in g.documents.items():
        echo("")
        echo(f"{name} (IAM policy document):")
        echo(json.dumps(doc, indent=2))
    for note in g.notes:
        echo("")
        echo(f"note: {note}")
    return EXIT_OK


def _cleanup(base: Path, as_json: bool) -> int:
    from provisioner.control.cancel import default_provider_factory
    from provisioner.drill.cleanup import clean
    from provisioner.drill.ledger import open_ledgers

    found = open_ledgers(base)
    results = []
    for ledger in found:
        left = clean(ledger, default_provider_factory)
        results.append({"drill": ledger.drill_id, "provider": ledger.provider, "left_behind": left})
    if as_json:
        print_json({"drills": results})
    elif not found:
        click.echo(f"no drill to clean up under {base / 'drills'}")
    for r in results if not as_json else []:
        if r["left_behind"]:
            for line in r["left_behind"]:
                click.echo(f"{r['drill']} ({r['provider']}): could not delete: {line}")
        else:
            click.echo(f"{r['drill']} ({r['provider']}): everything deleted")
    return EXIT_JOB_FAILED if any(r["left_behind"] for r in results) else EXIT_OK
