"""``provisioner probe``: measure this machine's GPUs (or CPU) beside their datasheet."""

from __future__ import annotations

import sys
from typing import Any

import click

from provisioner.cli import EXIT_BAD_INPUT, EXIT_ERROR
from provisioner.cli.common import fail, json_option, print_json


@click.command()
@click.option(
    "--full", is_flag=True, help="The long probe: 10240² matmuls, 2 s per figure, all GPU pairs."
)
@click.option("--size", type=click.IntRange(64, 65536), default=None, help="Matmul size n (n x n).")
@click.option(
    "--seconds",
    type=click.FloatRange(0.01, 600),
    default=None,
    help="Timed rounds per figure, in seconds [quick: 0.5].",
)
@click.option(
    "--buffer-mib", type=click.IntRange(1, 65536), default=None, help="Copy buffer size, MiB."
)
@click.option(
    "--backend",
    type=click.Choice(["auto", "torch", "cupy", "numpy"]),
    default="auto",
    show_default=True,
    help="Where the arithmetic runs (auto: torch with a GPU, else CuPy, else numpy on the CPU).",
)
@click.option(
    "--gpu", "gpu_model", default=None, help="Compare with this GPU's datasheet (A100, H100, ...)."
)
@click.option(
    "--report-file",
    "--output",
    "output",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Also write the JSON report to FILE (--output is the older name).",
)
@json_option
def probe(
    full: bool,
    size: int | None,
    seconds: float | None,
    buffer_mib: int | None,
    backend: str,
    gpu_model: str | None,
    output: str | None,
    as_json: bool,
) -> None:
    """Measure dense matmul throughput (FP32, TF32, BF16, FP16 where the hardware has them),
    device memory bandwidth, host-to-device and GPU-to-GPU bandwidth, and sample NVML
    (utilisation, clock, power, temperature); each figure beside its datasheet value.

    Quick by default (a few seconds per GPU); runs anywhere: with no GPU it measures the CPU
    with numpy. Exits 0 with a report, 2 on bad options, 1 when the measurement failed."""
    from policies.gpus import canonical_gpu
    from provisioner.probe.run import ProbeOptions, run_probe

    if gpu_model is not None:
        model = canonical_gpu(gpu_model)
        if model is None:
            fail(f"--gpu: unknown GPU {gpu_model!r} (see policies/gpus.csv)")
        gpu_model = model
    opts = ProbeOptions.preset(
        "full" if full else "quick",
        size=size,
        seconds=seconds,
        buffer_mib=buffer_mib,
        backend=backend,
    )
    tell = sys.stderr.isatty() and not as_json

    def progress(text: str) -> None:
        if tell:
            click.echo(f"  {text} ...", err=True)
        else:  # a log line a script can follow, never on stdout
            click.echo(f"probe: {text}", err=True)

    try:
        report = run_probe(opts, gpu_model=gpu_model, progress=progress)
    except ValueError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    except (RuntimeError, MemoryError) as exc:
        fail(f"probe failed: {exc}", EXIT_ERROR)
    if output:
        import json
        from pathlib import Path

        Path(output).write_text(
            json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
    if as_json:
        print_json(report)
        return
    render(report)


def _fmt(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render(report: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from provisioner.console import console

    out = console()
    devs = {d["index"]: d for d in report["devices"]}
    out.print(
        f"[bold]probe[/] on {escape(str(report['host']))} with {report['backend']} "
        f"({report['elapsed_s']:.1f} s)"
    )
    for d in report["devices"]:
        model = f" = {d['model']}" if d.get("model") else ""
        out.print(f"  device {d['index']}: {d['name']}{model}", markup=False)
    table = Table(box=None, pad_edge=False)
    for col in ("device", "figure", "measured", "datasheet", "ratio", "method"):
        table.add_column(
            col, justify="right" if col in ("measured", "datasheet", "ratio") else "left"
        )
    for f in report["figures"]:
        name = f["name"] + (f" -> {f['peer']} ({f.get('path')})" if f["name"] == "peer" else "")
        digits = 2 if f["unit"] == "TFLOPS" else 1
        table.add_row(
            str(f["device"]),
            name,
            f"{_fmt(f['value'], digits)} {f['unit']}",
            _fmt(f["datasheet"], digits),
            "-" if f["ratio"] is None else f"{f['ratio']:.0%}",
            f["method"],
        )
    out.print(table)
    nv = report["nvml"]
    if nv.get("available"):
        for g in nv.get("under_load") or []:
            dev = devs.get(g["index"], {})
            slow = ", ".join(g["slowdowns"]) or "none"
            out.print(
                f"  GPU {g['index']} under load: SM clock {_fmt(g['sm_clock_mean_mhz'], 0)} of "
                f"{_fmt(g['sm_clock_max_mhz'], 0)} MHz, power peak {_fmt(g['power_peak_w'])} W of "
                f"{_fmt(g['power_limit_w'])} W, {_fmt(g['temperature_peak_c'], 0)} °C, "
                f"utilisation {_fmt(g['utilization_mean_pct'])}%, slowdowns: {slow}"
                + (f" ({dev.get('name')})" if dev else "")
            )
    else:
        out.print(f"  NVML: {escape(str(nv.get('note', 'not available')))}")
    s = report["summary"]
    if s.get("fraction") is not None:
        out.print(
            f"[bold]{s['gpu_count']}x {s['gpu']}[/]: {s['tflops']:,.1f} {s['precision'].upper()} "
            f"TFLOPS measured, {s['fraction']:.0%} of datasheet (slowest GPU)"
        )
    elif s.get("note"):
        out.print(f"  {escape(str(s['note']))}")
    sys.stdout.flush()


def status_lines(probes: list[dict[str, Any]], progress: dict[str, Any]) -> list[str]:
    """``provisioner status``'s lines about the job's probes and its GPUs' utilisation."""
    lines = []
    for p in probes:
        if p["fraction"] is not None:
            what = f"{p['fraction']:.0%} of datasheet {str(p['precision'] or '').upper()}"
            if p["tflops"]:
                what += f" ({p['tflops']:,.1f} TFLOPS)"
        else:
            what = p["note"] or "nothing measured"
        lines.append(
            f"  probe, attempt {p['attempt']}: {p['instance_type']} ({p['gpu']}) "
            f"{what} [{p['verdict']}, {p['backend']}]"
        )
    gpus = progress.get("gpu") or []
    utils = [g.get("utilization_pct") for g in gpus if g.get("utilization_pct") is not None]
    if utils:
        text = "  GPU utilisation: " + ", ".join(f"{u:.0f}%" for u in utils)
        idle = progress.get("gpu_idle") or {}
        if idle.get("since"):
            text += f" (every GPU under {idle['threshold_pct']:g}% since {idle['since']})"
        lines.append(text)
    return lines
