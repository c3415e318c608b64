"""How good is `plan`'s interruption-aware estimate? Replays recorded spot traces.

For each random window of each trace: the estimate made at the window's start
(:func:`provisioner.simulate.estimate.estimate_placements`, the model `plan` uses) against
the cost the simulator then realised on the trace's real availability with the same strategy
(the vectorised replay, tested equal to decide()). Two priors for the estimate:

* ``trace``: the zone's up/down periods fitted on the trace's last week before the window
  (what a controller that records its traces knows; half the trace beside one window where
  it is shorter), the band prior counted as one period;
* ``band``: the Spot Advisor band alone (">20%" for these instance types), i.e. the fixed
  prior of ``provisioner.simulate.estimate`` (REF_UP_H, DOWN_H), which was calibrated on the
  2022-10-26 set (``--calibrate`` prints the pooled figures): the other sets are held out.

Prints, per trace set and prior: the mean absolute error of the expected cost (relative to the
realised cost, per window), the bias of the mean (mean estimate / mean realised - 1) and the
share of windows whose realised cost falls inside the estimate's P10-P90 (aim: error within
10%, coverage near 80%).

    .venv/bin/python benchmarks/estimate_bench.py [--windows 40] [--quick] [--calibrate]

Needs ../shared/data beside the repo (or --data); without it, says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from policies.loader import load_policy  # noqa: E402
from provisioner.core.models import Market, Offer, Placement  # noqa: E402
from provisioner.core.views import CHANGEOVER_H  # noqa: E402
from provisioner.simulate import estimate as est  # noqa: E402
from provisioner.simulate.replay import replay  # noqa: E402
from provisioner.simulate.scenario import Scenario  # noqa: E402
from provisioner.simulate.traces import Trace, load_trace, window_starts  # noqa: E402

SETS = {
    "aws-10-26-2022 (calibration)": "traces/cant_be_late/availability/1-node/aws-10-26-2022",
    "aws-02-15-2023 (held out)": "traces/cant_be_late/availability/1-node/aws-02-15-2023",
    "aws-04-22-2023 preemption (held out)": "traces/cant_be_late/preemption/1-node/aws-04-22-2023",
}
HISTORY_H = 168.0  # the week before a window the trace prior is fitted on
BAND = ">20%"  # Spot Advisor band of p3.2xlarge / p2 in these regions (shared/data catalog)
P_OD, P_SPOT = 3.06, 0.97


def placement(tr: Trace, work_h: float) -> Placement:
    offer = Offer(
        "aws", tr.region, tr.zone, "p3.2xlarge", "V100", 1, 8, 61.0, P_OD, P_SPOT, "", BAND
    )
    return Placement(offer, Market.SPOT, P_SPOT, None, 0.0, est_hours=work_h)


def run_trace(
    tr: Trace, n: int, work_h: float, deadline_h: float, samples: int, seed: int
) -> dict[str, np.ndarray]:
    step = est.FINE_STEP_S
    av = tr.available_on(step)
    sc = Scenario(work_h * 3600, deadline_h * 3600, CHANGEOVER_H * 3600, step)
    k = sc.window_steps + int(np.ceil((sc.work_s + sc.overhead_s) / step)) + 2
    need = sc.window_steps
    # a week of history, or half of what the trace has beside one window (short traces)
    hist = min(int(HISTORY_H * 3600 / step), max(0, len(av) - need - 1) // 2)
    if hist < 1 or len(av) < hist + need + 1:
        return {}
    starts = hist + window_starts(len(av) - hist, need, n, zlib.crc32(tr.name.encode()) ^ seed)
    padded = np.concatenate([av, np.zeros(k, dtype=bool)])
    real_av = padded[starts[:, None] + np.arange(k)[None, :]]
    strat = est.get_strategy(est.DEFAULT_STRATEGY)
    realised = replay(strat, real_av, sc).cost
    policy = load_policy(REPO / "policies" / "spot-finetune.yaml")
    rule = est.CloudRule(est.cloud_rule("aws").billing, 0.0, 120.0)
    pls = [placement(tr, work_h)] * n
    out: dict[str, np.ndarray] = {"real": realised}
    prior = est.band_rates(BAND)
    for mode in ("trace", "band"):
        rates = {}
        for i, s in enumerate(starts):
            now_up = bool(av[s])
            if mode == "trace":
                rates[i] = est.fit_rates(av[s - hist : s + 1], step, prior)
            else:
                rates[i] = est.Rates(prior.up_h, prior.down_h, prior.source, now_up)
        got = est.estimate_placements(
            pls, policy, deadline_h, samples=samples, seed=seed, rates=rates, rules={"aws": rule}
        )
        e = [g.estimate for g in got]
        assert all(x is not None for x in e)
        out[f"{mode}_mean"] = np.asarray([x.mean_usd for x in e if x])
        out[f"{mode}_p10"] = np.asarray([x.p10_usd for x in e if x])
        out[f"{mode}_p90"] = np.asarray([x.p90_usd for x in e if x])
    return out


def pooled(traces: list[Trace]) -> est.Rates:
    """The mean up and down periods over a set of traces (the band prior's calibration)."""
    step = est.FINE_STEP_S
    up = down = falls = rises = 0.0
    for tr in traces:
        a = tr.available_on(step)
        up += a.sum()
        down += (~a).sum()
        falls += np.sum(a[:-1] & ~a[1:])
        rises += np.sum(~a[:-1] & a[1:])
    h = step / 3600
    return est.Rates(up * h / max(falls, 1), down * h / max(rises, 1), "pooled")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--windows", type=int, default=40, help="random windows per trace")
    ap.add_argument("--samples", type=int, default=est.SAMPLES, help="runs per estimate")
    ap.add_argument("--work", type=float, default=12.0, help="job hours C")
    ap.add_argument("--frac", type=float, default=0.8, help="C / deadline")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="10 windows per trace, 100 runs")
    ap.add_argument("--calibrate", action="store_true", help="print the pooled rates per set")
    args = ap.parse_args(argv)
    if not (args.data / "traces").is_dir():
        print(f"estimate_bench: no traces under {args.data / 'traces'} (give --data); skipped")
        return 0
    if args.quick:
        args.windows, args.samples = 10, 100
    deadline_h = args.work / args.frac
    print(
        f"C = {args.work:g} h, deadline {deadline_h:g} h, d = {CHANGEOVER_H} h, step "
        f"{est.FINE_STEP_S:g} s, {args.windows} windows per trace, {args.samples} runs per "
        f"estimate, strategy {est.DEFAULT_STRATEGY}; prices ${P_OD}/h on-demand, ${P_SPOT}/h spot"
    )
    print(f"band prior: mean up {est.REF_UP_H} h at {BAND}, mean outage {est.DOWN_H} h")
    t0 = time.perf_counter()
    for label, rel in SETS.items():
        files = sorted((args.data / rel).glob("*.json"))
        if not files:
            print(f"{label}: no traces under {args.data / rel}; skipped")
            continue
        traces = [load_trace(f) for f in files]
        if args.calibrate:
            r = pooled(traces)
            print(f"{label}: pooled mean up {r.up_h:.2f} h, mean outage {r.down_h:.2f} h")
        parts = [
            run_trace(tr, args.windows, args.work, deadline_h, args.samples, args.seed)
            for tr in traces
        ]
        parts = [p for p in parts if p]
        if not parts:
            print(f"{label}: traces too short for a week of history and a window; skipped")
            continue
        cat = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        real = cat["real"]
        print(f"== {label}: {len(files)} traces, {len(real)} windows ==")
        print(f"   realised cost: mean ${real.mean():.2f}, P10-P90 ${np.percentile(real, 10):.2f}"
              f"-${np.percentile(real, 90):.2f}")  # fmt: skip
        for mode in ("trace", "band"):
            m = cat[f"{mode}_mean"]
            mae = float(np.mean(np.abs(m - real) / real))
            bias = float(m.mean() / real.mean() - 1)
            inside = float(
                np.mean((cat[f"{mode}_p10"] <= real + 1e-9) & (real <= cat[f"{mode}_p90"] + 1e-9))
            )
            print(f"   prior {mode:<5}  mean abs error {mae:6.1%}   bias of the mean {bias:+6.1%}"
                  f"   inside P10-P90 {inside:6.1%}")  # fmt: skip
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
