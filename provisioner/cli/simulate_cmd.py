"""``provisioner simulate``: what a policy would cost on recorded spot traces, and whether the
job would make its deadline, before a cent is spent."""

from __future__ import annotations

from typing import Any

import click

from provisioner.cli import EXIT_OK, EXIT_UNMEETABLE
from provisioner.cli.common import fail, json_option, load_policy_or_exit, print_json


def _hours(value: str | None, option: str) -> float | None:
    if value is None:
        return None
    from policies.model import parse_duration

    try:
        hours = parse_duration(value).total_seconds() / 3600.0
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None
    if hours < 0:
        raise click.BadParameter("must not be negative", param_hint=option)
    return hours


@click.command()
@click.option(
    "--policy",
    "policy_path",
    required=True,
    help="Policy YAML file.",
)
@click.option(
    "--trace", "trace_paths", required=True, multiple=True,
    help="Spot trace, JSON (Can't Be Late layout) or CSV timestamp,available[,price]; one per zone (repeatable).",
)  # fmt: skip
@click.option(
    "--windows",
    default=1,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Windows to replay (1: from the traces' start; more: random starts).",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed for the random windows.")
@click.option(
    "--strategy",
    default=None,
    help="Market strategy by name (default: the policy's market picks it).",
)
@click.option("--work", default=None, help="Compute time, e.g. 48h (default: job.compute_hours).")
@click.option(
    "--deadline", default=None, help="Deadline from the start, e.g. 60h (default: the policy's)."
)
@click.option(
    "--changeover",
    default="12m",
    show_default=True,
    help="Launch + setup + restore of a new instance.",
)
@click.option(
    "--step",
    default=None,
    help="Decision step (default: the largest divisor of the changeover up to the trace gap).",
)
@click.option(
    "--on-demand-price", default=3.06, show_default=True, type=float, help="USD/h (p3.2xlarge)."
)
@click.option(
    "--spot-price", default=None, type=float, help="USD/h (default: the traces' prices, else 0.97)."
)
@click.option(
    "--nodes",
    default=None,
    type=click.IntRange(1, 64),
    help="Gang size, 1-64 (default: the policy's resources.nodes): spot is up in a zone while "
    "its multi-node trace shows at least this many instances; losing one restarts the gang; "
    "billed per node.",
)
@click.option(
    "--checkpoint-loss/--no-checkpoint-loss",
    default=True,
    show_default=True,
    help="A preemption loses the work since the last periodic checkpoint.",
)
@click.option(
    "--oracle",
    is_flag=True,
    default=False,
    help="Tell decide() every zone's spot capacity, as no daemon knows it: an upper bound "
    "no daemon can reach (default: what the daemon knows, its refused launches and "
    "preemptions).",
)
@click.option(
    "--early-signals",
    is_flag=True,
    default=False,
    help="Model AWS's rebalance recommendation from the traces (10 min before 80% of the "
    "outages, 0.5 false alarms a zone a day, seeded by --seed): decide() may look elsewhere "
    "before the notice.",
)
@click.option(
    "--plot",
    "plot_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="Write a PNG of the first window.",
)
@click.option(
    "--stand-in",
    "stand_in",
    is_flag=True,
    default=False,
    help="Let traces from zones or GPUs the policy does not allow stand for its placements "
    "(only their pattern of spot availability is used); without it such traces are refused.",
)
@json_option
def simulate(
    policy_path: str,
    trace_paths: tuple[str, ...],
    windows: int,
    seed: int,
    strategy: str | None,
    work: str | None,
    deadline: str | None,
    changeover: str,
    step: str | None,
    on_demand_price: float,
    spot_price: float | None,
    nodes: int | None,
    checkpoint_loss: bool,
    oracle: bool,
    early_signals: bool,
    plot_path: str | None,
    stand_in: bool,
    as_json: bool,
) -> None:
    """Replay spot traces through the daemon's own decision function for a policy.

    Prints cost, on-demand and spot hours, deadline met or missed, restarts and lost work, with
    the on-demand-only cost, the lower bound and the offline optimum on the same windows for
    reference. Exits 0, or 6 when a window misses its deadline or fails; 2 on bad input.
    """
    from provisioner.core.strategies import STRATEGIES
    from provisioner.simulate.engine import Timeline
    from provisioner.simulate.run import SimulateError, scenario_for
    from provisioner.simulate.run import simulate as run
    from provisioner.simulate.traces import TraceError, load_trace

    if plot_path:
        _require_matplotlib()
    policy = load_policy_or_exit(policy_path)
    if strategy is not None and strategy not in STRATEGIES:
        fail(f"unknown strategy {strategy!r} (known: {', '.join(sorted(STRATEGIES))})")
    try:
        traces = [load_trace(p) for p in trace_paths]
        unfit = trace_mismatches(policy, traces)
        if unfit and not stand_in:
            fail(
                "; ".join(unfit) + ". The simulation would price capacity this job may never "
                "use: give traces of zones and GPUs the policy allows, or pass --stand-in to let "
                "these stand for its placements (only their pattern of spot availability is used)"
            )
        if unfit:  # standing for the policy's placements: its residency holds for them
            from policies.model import Residency

            policy = policy.model_copy(update={"residency": Residency()})
        changeover_h = _hours(changeover, "--changeover") or 0.0
        step_h = _hours(step, "--step")
        sc = scenario_for(
            policy, traces, work_h=_hours(work, "--work"), deadline_h=_hours(deadline, "--deadline"),
            changeover_h=changeover_h, step_s=None if step_h is None else step_h * 3600.0,
            on_demand_price=on_demand_price, spot_price=spot_price, checkpoint_loss=checkpoint_loss,
            nodes=nodes,
        )  # fmt: skip
        if early_signals:  # the model's defaults (docs/simulate.md, "Early signals")
            from dataclasses import replace

            from provisioner.core.rebalance import RebalanceModel

            sc = replace(sc, rebalance=RebalanceModel(seed=seed))
        tl = Timeline() if plot_path else None
        report = run(
            policy,
            traces,
            sc,
            windows=windows,
            seed=seed,
            strategy=strategy,
            timeline=tl,
            oracle=oracle,
        )
    except (TraceError, SimulateError, ValueError) as exc:
        fail(str(exc))
    if plot_path and tl is not None:
        from provisioner.simulate.plot import plot_timeline

        title = f"{policy.name}: {report['strategy']} on {', '.join(report['zones'])}"
        plot_timeline(
            tl, report["zones"], plot_path, title=title, deadline_h=report["deadline_hours"]
        )
    report["stand_in"] = unfit  # traces that stand for placements they do not match
    report["early_signals"] = early_signals
    if as_json:
        print_json(report)
    else:
        _render(report, plot_path)
    bad = report["summary"]["deadlines_missed"] or report["summary"]["failed"]
    raise SystemExit(EXIT_UNMEETABLE if bad else EXIT_OK)


def trace_mismatches(policy: Any, traces: list[Any]) -> list[str]:
    """How each trace does not match what the policy may run on: its zone's region outside
    the policy's residency, or its GPU (the file name's second part, ``us-east-1c_v100_1``)
    not allowed or too small. A trace whose region or GPU is not known is taken as it is."""
    from policies.gpus import canonical_gpu, gpu_spec
    from provisioner.core.planner import required_vram
    from provisioner.core.regions import regions
    from provisioner.core.rules import residency_violation

    known = regions()
    need_gb, _ = required_vram(policy)
    allowed = {canonical_gpu(g) or g for g in policy.resources.gpus or []}
    out = []
    for t in traces:
        clouds = [
            p for p in ("aws", "gcp", "azure", "alibaba", "tencent") if (p, t.region) in known
        ]
        if clouds:
            why = residency_violation(policy, clouds[0], t.region)
            if why is not None:
                res = policy.residency
                rule = f"allow {', '.join(res.allow)}" if res.allow else f"{why.replace('_', ' ')}"
                out.append(f"trace {t.name}: {clouds[0]}:{t.region} is outside the policy's "
                           f"residency ({rule})")  # fmt: skip
        parts = t.name.split("_")
        gpu = canonical_gpu(parts[1]) if len(parts) > 1 else None
        spec = gpu_spec(gpu) if gpu else None
        if gpu and allowed and gpu not in allowed:
            out.append(f"trace {t.name}: its GPU {gpu} is not one of resources.gpus")
        elif spec is not None and need_gb is not None and spec.vram_gb < need_gb:
            out.append(
                f"trace {t.name}: its GPU {gpu} has {spec.vram_gb:g} GB, the job needs "
                f"{need_gb:.1f} GB per GPU"
            )
    return out


def _require_matplotlib() -> None:
    """``--plot`` needs matplotlib, an optional extra: exit 2 saying how to install it (before
    any work is done), not an ImportError traceback."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        fail("--plot needs matplotlib, which is not installed: pip install 'provisioner[plot]'")


def _render(report: dict[str, Any], plot_path: str | None) -> None:
    from rich.table import Table

    from provisioner.console import console

    s = report["summary"]
    out = console()
    out.print(
        f"[bold]{report['policy']}[/] ({report['strategy']}) on {', '.join(report['zones'])}"
        + (f", a gang of {report['nodes']} nodes (billed per node)" if report["nodes"] > 1 else "")
        + ": "
        f"{report['work_hours']:g} h of work, deadline {report['deadline_hours']:g} h, "
        f"changeover {report['changeover_hours'] * 60:g} min, step {report['step_seconds']:g} s, "
        f"{s['windows']} window(s)"
        + (
            ", oracle knowledge (an upper bound no daemon reaches)"
            if report.get("knowledge") == "oracle"
            else ""
        )
    )
    table = Table(show_header=True, header_style="bold")
    for col in ("", "cost $", "on-demand h", "spot h", "deadline", "restarts", "lost work h"):
        table.add_column(col, justify="right" if col else "left")
    for i, r in enumerate(report["windows"][:20]):
        met = "missed" if r["deadline_missed"] else f"met ({r['finish_hours']:.1f} h)"
        if r["failed"]:
            met = f"failed: {r['failed']}"
        table.add_row(
            f"window {i + 1} (+{r['start_hours']:.0f} h)", f"{r['cost']:.2f}", f"{r['on_demand_hours']:.1f}",
            f"{r['spot_hours']:.1f}", met, str(r["restarts"]), f"{r['lost_work_hours']:.2f}",
        )  # fmt: skip
    if s["windows"] > 1:
        table.add_row(
            "mean", f"{s['cost_mean']:.2f}", f"{s['on_demand_hours']:.1f}", f"{s['spot_hours']:.1f}",
            f"{s['deadlines_met']}/{s['windows']} met",
            f"{s['restarts']:.1f}", f"{s['lost_work_hours']:.2f}",
        )  # fmt: skip
    out.print(table)
    for why in report.get("stand_in") or []:
        out.print(f"stand-in: {why}", markup=False)
    ref = (
        f"on-demand only ${s['on_demand_only_cost']:.2f}, lower bound ${s['lower_bound_cost']:.2f}"
    )
    if s.get("optimum_cost") == s.get("optimum_cost"):  # not NaN
        ref += f", offline optimum ${s['optimum_cost']:.2f}"
    if "cost_over_optimum" in s:
        ref += f"; cost / optimum {s['cost_over_optimum']:.3f}"
        if s["cost_over_optimum_windows"] < s["windows"]:
            ref += f" (over the {s['cost_over_optimum_windows']} window(s) that did not fail)"
    out.print(f"reference (mean): {ref}", markup=False)
    if plot_path:
        out.print(f"plot: {plot_path}", markup=False)
