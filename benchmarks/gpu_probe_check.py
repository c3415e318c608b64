"""The probe's GPU paths on a real GPU machine: figures beside the datasheet, checked.

Run by ``benchmarks/gpu_probe_check.sh`` (unattended). Needs numpy and torch (CuPy and
nvidia-ml-py are used where present); it imports only ``provisioner.probe`` and the data
files, so it runs without the CLI's dependencies. Exit codes: 0 all checks passed, 1 a check
failed, 2 this machine cannot run the check (no torch, no GPU).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {what}")
    if not ok:
        failures.append(what)


def table(report: dict[str, Any]) -> None:
    print(f"\nbackend {report['backend']} ({report['elapsed_s']:.1f} s); {report['platform']}")
    for d in report["devices"]:
        print(f"  device {d['index']}: {d['name']} (cc {d['compute_capability']}, "
              f"{d['memory_gib']} GiB) -> datasheet row {d['model']}")  # fmt: skip
    print(f"  {'dev':>3} {'figure':<22} {'measured':>14} {'datasheet':>10} {'ratio':>7}  method")
    for f in report["figures"]:
        name = f["name"] + (f" ->{f['peer']} {f.get('path')}" if f["name"] == "peer" else "")
        val = "-" if f["value"] is None else f"{f['value']:,.1f} {f['unit']}"
        sheet = "-" if f["datasheet"] is None else f"{f['datasheet']:,.1f}"
        ratio = "-" if f["ratio"] is None else f"{f['ratio']:.0%}"
        print(f"  {f['device']:>3} {name:<22} {val:>14} {sheet:>10} {ratio:>7}  {f['method']}")
    nv = report["nvml"]
    if nv.get("available"):
        print(f"  NVML driver {nv.get('driver')}")
        for g in nv.get("under_load") or []:
            print(f"  GPU {g['index']} under load: {g['samples']} samples, SM clock "
                  f"{g['sm_clock_mean_mhz']} of {g['sm_clock_max_mhz']} MHz, power peak "
                  f"{g['power_peak_w']} of {g['power_limit_w']} W, {g['temperature_peak_c']} C, "
                  f"utilisation {g['utilization_mean_pct']}%, slowdowns {g['slowdowns']}")  # fmt: skip
    else:
        print(f"  NVML: {nv.get('note')}")
    s = report["summary"]
    print(f"  summary: {json.dumps(s)}")


def checks(report: dict[str, Any], nvml_installed: bool) -> None:
    gpus = [d for d in report["devices"] if d["kind"] == "gpu"]
    check(bool(gpus), f"{report['backend']}: sees {len(gpus)} GPU(s)")
    check(all(d["model"] for d in gpus), "every GPU maps to a row of gpus.csv")
    figs = report["figures"]
    for f in figs:
        if f["value"] is not None:
            check(f["value"] > 0, f"{f['name']} on {f['device']}: positive ({f['value']})")
        if f["ratio"] is not None and f["name"].startswith("matmul_"):
            check(0.05 < f["ratio"] < 1.3, f"{f['name']} on {f['device']}: "
                  f"{f['ratio']:.0%} of datasheet is plausible (5%..130%)")  # fmt: skip
        if f["ratio"] is not None and f["name"] in ("memory_copy", "host_to_device"):
            check(0.05 < f["ratio"] < 1.3, f"{f['name']} on {f['device']}: {f['ratio']:.0%}")
    names = {(f["name"], f["device"]) for f in figs}
    for d in gpus:
        for n in ("matmul_fp32", "memory_copy", "host_to_device"):
            check((n, d["index"]) in names, f"{n} measured on GPU {d['index']}")
        by = {f["name"]: f["value"] for f in figs if f["device"] == d["index"]}
        if "matmul_tf32" in by and "matmul_fp32" in by:
            check(by["matmul_tf32"] > 1.5 * by["matmul_fp32"],
                  f"GPU {d['index']}: TF32 ({by['matmul_tf32']:.0f}) well above FP32 "
                  f"({by['matmul_fp32']:.0f}): the TF32 switch works")  # fmt: skip
        if "matmul_bf16" in by and "matmul_fp32" in by:
            check(by["matmul_bf16"] > 2 * by["matmul_fp32"], f"GPU {d['index']}: BF16 > 2x FP32")
    if len(gpus) > 1:
        check(any(f["name"] == "peer" for f in figs), "peer bandwidth measured between GPUs")
    check(report["summary"]["fraction"] is not None, "a headline fraction of the datasheet")
    if nvml_installed:
        nv = report["nvml"]
        check(bool(nv.get("available")), "NVML available (nvidia-ml-py installed)")
        load = nv.get("under_load") or []
        check(len(load) == len(gpus), "NVML sampled every GPU under load")
        check(any((g["utilization_mean_pct"] or 0) > 0 for g in load), "utilisation > 0 under load")
        check(any((g["power_peak_w"] or 0) > 0 for g in load), "power read under load")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="the long probe (10240², 2 s per figure)")
    ap.add_argument("--json", default="", help="write the reports here")
    args = ap.parse_args()
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("cannot run: numpy is not installed", file=sys.stderr)
        return 2
    from provisioner.probe.backends import available_backends
    from provisioner.probe.run import ProbeOptions, run_probe

    try:
        import pynvml  # noqa: F401

        nvml_installed = True
    except ImportError:
        nvml_installed = False
        print("note: nvidia-ml-py not installed: NVML checks skipped")
    opts = ProbeOptions.preset("full" if args.full else "quick")
    reports = []
    for name in ("torch", "cupy"):
        try:
            backend, _ = available_backends(name)
        except RuntimeError as exc:
            print(f"{exc}")
            continue
        t0 = time.perf_counter()
        report = run_probe(
            opts, backend=backend, progress=lambda t: print(f"  ... {t}", flush=True)
        )
        print(f"{name}: probe took {time.perf_counter() - t0:.1f} s")
        table(report)
        checks(report, nvml_installed)
        reports.append(report)
    if not reports:
        print("cannot run: neither torch nor CuPy sees a GPU here", file=sys.stderr)
        return 2
    from provisioner.probe.idle import UtilisationSource

    if nvml_installed:
        rows = UtilisationSource("nvml", Path(".")).sample()
        check(bool(rows), f"the agent's NVML utilisation source samples {len(rows or [])} GPU(s)")
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=2))
    print(f"\n{len(failures)} check(s) failed" if failures else "\nall checks passed")
    for f in failures:
        print(f"  FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
