"""The agent's probe at the start of each attempt, before the job starts.

The probe runs in its own process (``python -m provisioner probe --json --output FILE``): a
GPU context or a torch import in the agent would hold GPU memory for the job's whole life,
and a hung driver call is ended by a timeout. The report goes to the checkpoint store beside
``progress.json`` (``<root>/probes/attempt-<n>.json``); the progress record carries a short
``probe`` entry that tells the controller it is there.

``AgentSpec.probe`` is ``off``, ``quick``, ``full``, or ``file:PATH`` (a report written by
someone else: the sim cloud's sandboxes, which have no GPU, simulate one this way).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("provisioner.agent")

PROBE_MODES = ("off", "quick", "full")


def probe_path(attempt: int) -> str:
    """Where attempt ``attempt``'s report lives, relative to the job's checkpoint root."""
    return f"probes/attempt-{attempt}.json"


def valid_mode(mode: str) -> bool:
    return mode in PROBE_MODES or (mode.startswith("file:") and len(mode) > len("file:"))


def run_probe_process(mode: str, timeout_s: float, workdir: Path) -> dict[str, Any]:
    """The probe's report (raises RuntimeError with the reason when there is none)."""
    if mode.startswith("file:"):
        p = Path(mode[len("file:") :])
        p = p if p.is_absolute() else workdir / p
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"cannot read the probe report {p}: {exc}") from None
        if not isinstance(doc, dict):
            raise RuntimeError(f"{p}: not a probe report")
        return doc
    fd, out = tempfile.mkstemp(prefix="probe-", suffix=".json", dir=workdir)
    os.close(fd)
    argv = [sys.executable, "-m", "provisioner", "probe", "--json", "--output", out]
    if mode == "full":
        argv.append("--full")
    try:
        res = subprocess.run(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout_s,
            check=False,
            cwd=workdir,
        )
        if res.returncode != 0:
            tail = res.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"probe exited {res.returncode}: {' / '.join(tail)}")
        doc = json.loads(Path(out).read_text(encoding="utf-8"))
        if not isinstance(doc, dict):
            raise RuntimeError("probe wrote no report")
        return doc
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"probe took longer than {timeout_s:g} s; killed") from None
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"probe failed: {exc}") from None
    finally:
        Path(out).unlink(missing_ok=True)


def probe_node(
    mode: str, timeout_s: float, workdir: Path, attempt: int, store: Any
) -> dict[str, Any] | None:
    """Run the probe and put its report in the checkpoint store; the progress record's
    ``probe`` entry (None when the probe is off). Never raises: a failed probe is reported
    and the job starts all the same."""
    if mode == "off":
        return None
    started = time.monotonic()
    try:
        report = run_probe_process(mode, timeout_s, workdir)
        store.write_text(probe_path(attempt), json.dumps(report, indent=2, sort_keys=True))
    except Exception as exc:
        log.warning("probe: %s", exc)
        return {"state": "failed", "attempt": attempt, "error": str(exc)[:500]}
    s = report.get("summary") or {}
    log.info(
        "probe: %s, %s x %s, %s of datasheet (%s) in %.1fs",
        report.get("backend"),
        s.get("gpu_count"),
        s.get("gpu"),
        "-" if s.get("fraction") is None else f"{float(s['fraction']):.0%}",
        s.get("precision"),
        time.monotonic() - started,
    )
    return {
        "state": "done",
        "attempt": attempt,
        "path": probe_path(attempt),
        "backend": report.get("backend"),
        "gpu": s.get("gpu"),
        "gpu_count": s.get("gpu_count"),
        "precision": s.get("precision"),
        "fraction": s.get("fraction"),
        "tflops": s.get("tflops"),
    }
