"""Notice -> checkpoint complete in the store, per training framework, on the sim.

For each framework (``examples/torch_train.py``, ``lightning_train.py``, ``hf_train.py``, with
a model of a few hundred MB: an MLP of 4096-wide layers, ~67M float32 parameters, 257 MB, or a
GPT-2 of 6 blocks 1024 wide, 289 MB; plain SGD, so that the checkpoint is the model) one long
job runs on the ``sim`` provider (AWS's notice format) under an in-process controller
(``provisioner.api``: overlap on notice, a replacement resumes from the notice's checkpoint).
``--count`` times, once the current attempt has trained a few steps, the benchmark serves a
notice on its instance (``SimProvider.preempt``, ``--notice-s`` real seconds) and measures,
from that call:

* seen: the agent's first look that found it (``seen_at`` in the notice file it wrote for the
  job);
* saved: the framework's save done (the checkpoint's ``provisioner-checkpoint.json``,
  ``saved_at``: the files written and fsynced, before the rename and the commit);
* in the store: ``<store>/<job>/latest`` names the new checkpoint (the agent's upload is done).

Printed per framework: median and max over the notices of each (seconds), and the median save
time the job measured. The job checks for the notice at each step boundary, so the rest of
the step in progress is part of "saved".

    .venv/bin/python benchmarks/framework_notice_bench.py [--count 20] [--frameworks torch hf]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

MLP = ["--hidden", "4096", "--layers", "5", "--optimizer", "sgd"]
BIG = {  # ~260-290 MB of float32 parameters each; SGD: no optimizer state to speak of
    "torch": ["examples.torch_train", *MLP],
    "lightning": ["examples.lightning_train", *MLP],
    "hf": [
        "examples.hf_train",
        "--n-embd",
        "1024",
        "--n-layer",
        "6",
        "--batch",
        "2",
        "--optim",
        "sgd",
    ],
}


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _ts(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _policy(path: Path, argv: list[str], ckpt: Path) -> Path:
    command = json.dumps([sys.executable, "-m", *argv, "--steps", "100000", "--checkpoint-every"])
    command = command[:-1] + ', "0"]'
    path.write_text(f"""
name: notice-bench
job:
  command: {command}
  compute_hours: 2
  reference_gpu: A10G
resources:
  min_vram_gb: 16
market: spot
bid_cap:
  max_spot_price_per_gpu_hour: 3.0
budget:
  max_price_per_hour: 10
residency:
  allow: [EEA]
checkpoint:
  uri: file://{ckpt}
  shared: true
  interval: 1h
  grace: 60s
restart:
  max_restarts: 1000
  zone_cooldown: 2s
""")
    return path


def one_framework(name: str, count: int, notice_s: float, tmp: Path) -> list[dict[str, float]]:
    from providers.sim import SimProvider
    from provisioner.api import Job, submit
    from provisioner.control.store import Store
    from provisioner.core.models import TAG_JOB

    options = {
        "state_dir": str(tmp / "sim"),
        "mimic": {"eu-west-1a": "aws", "eu-west-1b": "aws", "eu-west-1c": "aws"},
        "seconds_per_hour": 3600,
        "mtbp_hours": None,
        "idle_exit_s": 300,
    }
    ck = tmp / "ck"
    store = Store(f"sqlite:///{tmp / 's.db'}")
    _, job_id = submit(
        _policy(tmp / "p.yaml", BIG[name], ck),
        provider="sim",
        provider_defaults=False,
        provider_options=options,
        store=store,
    )
    job = Job(store, job_id)
    sim = SimProvider(**options)
    runner = threading.Thread(target=lambda: job.wait(timeout=3600, poll_s=0.2), daemon=True)
    runner.start()
    root = ck / job_id
    rows: list[dict[str, float]] = []
    try:
        for i in range(count):
            inst, work = _training(sim, TAG_JOB, job_id)
            before = (root / "latest").read_text().strip() if (root / "latest").exists() else ""
            t0 = time.time()
            sim.preempt(inst.id, notice_s=notice_s)
            t_store = None
            until = time.monotonic() + notice_s + 60
            while time.monotonic() < until:
                now_name = _latest(root)
                if now_name and now_name != before:
                    t_store = time.time()
                    break
                time.sleep(0.01)
            if t_store is None:
                raise SystemExit(f"{name}: notice {i + 1}: no checkpoint in the store in time")
            name_new = _latest(root)
            meta = _read(root / "checkpoints" / name_new / "provisioner-checkpoint.json")
            seen = _ts(_read(work / "notice.json").get("seen_at"))  # what the agent told the job
            saved = _ts(meta.get("saved_at"))
            row = {
                "seen": (seen - t0) if seen else float("nan"),
                "saved": (saved - t0) if saved else float("nan"),
                "store": t_store - t0,
                "save_s": float(meta.get("save_s") or float("nan")),
            }
            rows.append(row)
            print(
                f"  {name} notice {i + 1:2d}: seen {row['seen']:.2f} s, saved {row['saved']:.2f}"
                f" s (save {row['save_s']:.2f} s), in the store {row['store']:.2f} s",
                flush=True,
            )
            _tidy(sim, TAG_JOB, job_id)
    finally:
        job.cancel()
        sim.shutdown_server(terminate_all=True)
    return rows


def _latest(root: Path) -> str:
    try:
        return (root / "latest").read_text().strip()
    except OSError:
        return ""


def _training(sim: Any, tag: str, job_id: str, timeout: float = 600) -> tuple[Any, Path]:
    """The live instance once its job has trained two steps since it (re)started."""
    until = time.monotonic() + timeout
    first: dict[str, int] = {}
    while time.monotonic() < until:
        live = [i for i in sim.list({tag: job_id}) if i.state.alive]
        for inst in live:
            rec = sim.sandbox(inst.id)
            if rec.get("notice_at"):
                continue
            work = Path(rec["sandbox"]) / "work"
            step = _read(work / "job-progress.json").get("step")
            if isinstance(step, int):
                first.setdefault(inst.id, step)
                if step >= first[inst.id] + 2:
                    return inst, work
        time.sleep(0.1)
    raise SystemExit("the job never settled into training")


def _tidy(sim: Any, tag: str, job_id: str) -> None:
    """Old attempts' local checkpoints go (a few hundred MB each)."""
    for inst in sim.list({tag: job_id}):
        if not inst.state.alive:
            with_sandbox = sim.sandbox(inst.id).get("sandbox")
            if with_sandbox:
                shutil.rmtree(Path(with_sandbox) / "work" / "checkpoints", ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--notice-s", type=float, default=30.0)
    p.add_argument("--frameworks", nargs="+", default=list(BIG), choices=list(BIG))
    args = p.parse_args(argv)
    summary = []
    for name in args.frameworks:
        with tempfile.TemporaryDirectory(prefix=f"notice-bench-{name}-") as d:
            rows = one_framework(name, args.count, args.notice_s, Path(d))
        summary.append((name, rows))
    print(f"\nnotice -> ..., seconds over {args.count} notices per framework (median / max)")
    print(f"{'framework':<10} {'seen':>12} {'saved':>12} {'in the store':>14} {'save (job)':>11}")
    for name, rows in summary:

        def cell(key: str, rows: list[dict[str, float]] = rows) -> str:
            xs = [r[key] for r in rows if r[key] == r[key]]
            return f"{statistics.median(xs):.2f} / {max(xs):.2f}" if xs else "-"

        save = [r["save_s"] for r in rows if r["save_s"] == r["save_s"]]
        med_save = f"{statistics.median(save):.2f}" if save else "-"
        print(
            f"{name:<10} {cell('seen'):>12} {cell('saved'):>12} {cell('store'):>14} {med_save:>11}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
