"""Planning speed on a 100,000-offer catalog, and the cold start of `provisioner plan`.

Builds the catalog from the real rows in ../shared/data/catalog (AWS zone-level SkyPilot rows,
Azure SkyPilot rows, the GCP price list) and the built-in catalog, spread over more zones
(each real row copied into synthetic zones with a few percent of price jitter) until it holds
100,000 offers. Prints the median warm time per plan for three policies, then the cold start
of `provisioner plan` in a fresh interpreter in which every cloud SDK import is blocked (as if
none were installed).

    .venv/bin/python benchmarks/plan_bench.py [--offers 100000] [--repeat 30]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from policies import parse_policy  # noqa: E402
from provisioner.catalog_files import builtin_catalog, read_offers  # noqa: E402
from provisioner.core.catalog import Catalog  # noqa: E402
from provisioner.core.models import Offer  # noqa: E402
from provisioner.core.planner import PlanContext, plan_offers  # noqa: E402

SHARED = REPO.parent / "shared" / "data" / "catalog"

POLICIES = {
    "gpu-list": """
name: gpu-list
market: spot-then-on-demand
resources: {gpus: [A100, A100-80GB, H100, L40S], gpu_count: 1}
bid_cap: {max_spot_price_per_gpu_hour: 2.5}
""",
    "workload-vram": """
name: workload-vram
market: spot
resources:
  gpu_count: 1
  workload: {parameters_b: 13, method: qlora, sequence_length: 4096, batch_size: 2, tokens_b: 0.2}
budget: {max_price_per_hour: 6, max_total: 400}
deadline: 72h
""",
    "eu-latency": """
name: eu-latency
market: spot-then-on-demand
resources: {min_vram_gb: 24}
residency: {allow: [EU]}
latency: {targets: [{name: paris, lat: 48.86, lon: 2.35}, {name: frankfurt, lat: 50.11, lon: 8.68}], max_rtt_ms: 30}
preferences: {price: 1, latency: 0.5, interruption_risk: 0.3}
""",
}


def real_rows() -> list[Offer]:
    rows: list[Offer] = list(builtin_catalog().offers)
    sources = {
        "aws_skypilot_v8_gpu_subset.csv": "aws",
        "azure_skypilot_v6_gpu.csv": "azure",
        "gcp_compute_pricing_cyclenerd_2026-07-30.csv": "gcp",
    }
    for name, provider in sources.items():
        p = SHARED / name
        if p.exists():
            rows.extend(read_offers(p, provider))
        else:
            print(f"note: {p} not found; using the built-in catalog rows only")
    return rows


def spread(rows: list[Offer], target: int, seed: int = 7) -> list[Offer]:
    rng = random.Random(seed)
    out = list(rows)
    k = 0
    while len(out) < target:
        k += 1
        for o in rows:
            if len(out) >= target:
                break
            jitter = 1 + rng.uniform(-0.05, 0.05)
            out.append(
                replace(
                    o,
                    zone=f"{o.zone or o.region}-x{k}",
                    spot_price=None if o.spot_price is None else round(o.spot_price * jitter, 5),
                )
            )
    return out


def bench_plans(catalog: Catalog, repeat: int) -> None:
    t0 = time.perf_counter()
    _ = catalog.columns  # build the index once (part of loading, not of planning)
    print(f"index build: {1000 * (time.perf_counter() - t0):.0f} ms for {len(catalog):,} offers")
    for name, text in POLICIES.items():
        policy = parse_policy(text, name)
        ctx = PlanContext(now=datetime.now(UTC))
        plan_offers(policy, catalog, ctx)  # warm
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            result = plan_offers(policy, catalog, ctx)
            times.append(time.perf_counter() - t)
        med = statistics.median(times) * 1000
        print(
            f"plan {name:<14} median {med:6.2f} ms  p90 {sorted(times)[int(0.9 * len(times))] * 1000:6.2f} ms"
            f"  eligible {result.eligible:>6,}  rejected {sum(result.rejected.values()):>7,}"
            f"  {'OK' if med <= 20 else 'OVER'} (aim <= 20 ms)"
        )


BLOCKER = """
import sys
BLOCKED = ("boto3", "botocore", "google.cloud", "googleapiclient", "azure", "alibabacloud", "tencentcloud")
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.startswith(BLOCKED):
            raise ImportError(f"{name} blocked: measuring with no cloud SDK installed")
        return None
sys.meta_path.insert(0, _Block())
"""


def bench_cold_start(runs: int = 7) -> None:
    with tempfile.TemporaryDirectory() as d:
        Path(d, "sitecustomize.py").write_text(BLOCKER)
        env = dict(os.environ, PYTHONPATH=d + os.pathsep + str(REPO), NO_COLOR="1")
        cmd = [
            sys.executable,
            "-m",
            "provisioner",
            "plan",
            "--policy",
            str(REPO / "policies" / "spot-finetune.yaml"),
        ]
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            times.append(time.perf_counter() - t)
            if proc.returncode != 0:
                print(proc.stderr)
                raise SystemExit(f"provisioner plan failed with exit {proc.returncode}")
        med = statistics.median(times)
        print(
            f"cold start `provisioner plan` (no cloud SDK importable): median {med:.3f} s over {runs} runs"
            f"  {'OK' if med <= 0.5 else 'OVER'} (aim <= 0.5 s)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--offers", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    rows = real_rows()
    print(f"real rows: {len(rows):,} (built-in catalog + ../shared/data/catalog)")
    catalog = Catalog.from_offers(spread(rows, args.offers), "bench")
    bench_plans(catalog, args.repeat)
    bench_cold_start()


if __name__ == "__main__":
    main()
