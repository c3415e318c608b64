"""How good is `plan`'s interruption-aware estimate? Replays recorded spot traces.

For each random window of each trace, the estimate made at the window's start
(:func:`provisioner.simulate.estimate.estimate_placements`, the model `plan` uses, at its
step) is set against the cost the simulator then realised on the trace's real availability
with the same strategy through the same replay, at the same step. Two jobs: 12 h of work with
a 15 h deadline and 48 h with a 60 h deadline (C/D = 0.8). Two priors:

* ``new``: what a new account gets (:func:`provisioner.simulate.estimate.band_rates`): the
  zone's Spot Advisor band for its instance type and region (the shared Spot Advisor feed;
  no band for GCP), a mixture over plausible rates, the state now unknown. It is one estimate
  per zone, whatever the window: exactly what `plan` prints for that zone.
* ``trace``: the Gamma posterior after the week of the trace before the window (half of
  what the trace has beside one window where it is shorter) and the zone's state now
  (:func:`provisioner.simulate.estimate.fit_rates`): what an account that records its zones'
  history knows.

The prior's figures were fitted on the 2022-10-26 set alone (``--calibrate`` refits and
prints them): that set is marked "calibration", every other set is held out.

Prints, per trace set, job and prior: the windows, the mean realised cost, the bias of the
mean (mean estimate / mean realised - 1), the mean absolute error of the expected cost per
window (relative to the realised cost) and the share of windows whose realised cost falls
inside the estimate's P10-P90. The target for the new account's prior: coverage 75-85% and
bias within 5% for both jobs on every set.

    .venv/bin/python benchmarks/estimate_bench.py [--windows 150] [--quick] [--calibrate]
        [--convergence]

``--convergence`` prints the new account's estimate of both jobs at finer and coarser steps
(where it stops moving) and the time per placement. Needs ../shared/data beside the repo (or
--data); without it, says so and exits 0.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from policies.loader import load_policy  # noqa: E402
from provisioner.core.models import CostEstimate, Market, Offer, Placement  # noqa: E402
from provisioner.core.views import CHANGEOVER_H  # noqa: E402
from provisioner.core.zone_priors import PLACEMENT_SCORE, ZonePrior, zone_risks  # noqa: E402
from provisioner.simulate import estimate as est  # noqa: E402
from provisioner.simulate import priors  # noqa: E402
from provisioner.simulate.replay import replay  # noqa: E402
from provisioner.simulate.scenario import Scenario  # noqa: E402
from provisioner.simulate.traces import Trace, load_trace, window_starts  # noqa: E402

ADVISOR = "catalog/aws_spot_advisor_2025-06-28_flat.csv"
HISTORY_H = 168.0  # the week before a window the trace prior is fitted on
JOBS = ((12.0, 15.0), (48.0, 60.0))  # (work, deadline) hours
P_OD, P_SPOT = 3.06, 0.97  # p3.2xlarge, us-east-1 (the simulator's reference prices)
PRIORS = ("new", "cross", "score", "trace")
SCORE_DAY_H = 24.0  # the placement score proxy: the share of this many hours up


@dataclass(frozen=True)
class Zone:
    """One trace: the file, its zone, region, instance type and Spot Advisor band."""

    trace: Trace
    region: str
    instance_type: str
    band: str


def trace_sets(data: Path) -> Iterator[tuple[str, list[Path]]]:
    """Every folder of JSON traces under ``data/traces``, files deduplicated by content (the
    three us-central1 GCP files are one trace)."""
    root = data / "traces"
    for d in sorted({p.parent for p in root.rglob("*.json")}):
        seen: set[str] = set()
        files = []
        for f in sorted(d.glob("*.json")):
            h = hashlib.sha1(f.read_bytes()).hexdigest()
            if h not in seen:
                seen.add(h)
                files.append(f)
        yield str(d.relative_to(root)), files


def zones(data: Path, files: list[Path], bands: dict[tuple[str, str], str]) -> list[Zone]:
    """The traces with their instance type and region (``traces/index.csv``) and band."""
    meta: dict[str, dict[str, str]] = {}
    index = data / "traces" / "index.csv"
    if index.is_file():
        with index.open(newline="") as f:
            meta = {row["file"]: row for row in csv.DictReader(f)}
    out = []
    for path in files:
        tr = load_trace(path)
        row = meta.get(str(path.relative_to(data / "traces")), {})
        itype = row.get("instance_type") or "p3.2xlarge"
        region = (row.get("region") or tr.region).rstrip("-")
        band = bands.get((region, itype), "") if row.get("cloud", "aws") == "aws" else ""
        out.append(Zone(tr, region, itype, band))
    return out


def placement(z: Zone, work_h: float) -> Placement:
    offer = Offer(
        "aws", z.region, z.trace.zone, z.instance_type, "", 1, 8, 61.0, P_OD, P_SPOT, "", z.band
    )
    return Placement(offer, Market.SPOT, P_SPOT, None, 0.0, est_hours=work_h)


def proxy_score(av: np.ndarray, s: int, step: float) -> int:
    """The placement score (1-10) taken to be read at step ``s``: the share of the last
    :data:`SCORE_DAY_H` the zone had capacity, in tenths (a proxy: AWS's own scores were not
    recorded with these traces)."""
    n = max(1, int(SCORE_DAY_H * 3600 / step))
    share = float(av[max(0, s - n) : s + 1].mean())
    return int(min(max(np.ceil(share * 10.0), 1), 10))


def score_rates(z: Zone, score: int, ref: priors.Reference | None) -> priors.Rates:
    """A new account's prior for ``z`` with a placement score of ``score`` cached for it."""
    zp = ZonePrior("aws", z.region, z.trace.zone, z.instance_type, PLACEMENT_SCORE, score)
    [zr] = zone_risks([zp]).values()
    return priors.new_account_rates(z.band, zr, ref)


def run_zone(
    z: Zone,
    n: int,
    work_h: float,
    deadline_h: float,
    seed: int,
    modes: tuple[str, ...],
    half_life_h: float | None = priors.HISTORY_HALF_LIFE_H,
    cross: priors.Reference | None = None,
    drift: float | None = None,
) -> dict[str, np.ndarray]:
    """Realised costs of ``n`` windows and each prior's estimate made at their starts."""
    step = est.FINE_STEP_S  # the truth at the finest step, whatever step the estimate takes
    av = z.trace.available_on(step)
    sc = Scenario(work_h * 3600, deadline_h * 3600, CHANGEOVER_H * 3600, step)
    k = sc.window_steps + int(np.ceil((sc.work_s + sc.overhead_s) / step)) + 2
    need = sc.window_steps
    hist = min(int(HISTORY_H * 3600 / step), max(0, len(av) - need - 1) // 2)
    if hist < 1 or len(av) < hist + need + 1:
        return {}
    starts = hist + window_starts(len(av) - hist, need, n, zlib.crc32(z.trace.name.encode()) ^ seed)
    padded = np.concatenate([av, np.zeros(k, dtype=bool)])  # after its end: no spot
    real_av = padded[starts[:, None] + np.arange(k)[None, :]]
    strat = est.get_strategy(est.DEFAULT_STRATEGY)
    out: dict[str, np.ndarray] = {"real": replay(strat, real_av, sc).cost}
    policy = load_policy(REPO / "policies" / "spot-finetune.yaml")
    rule = {"aws": est.CloudRule(est.cloud_rule("aws").billing, 0.0, 120.0)}
    pl = placement(z, work_h)

    def estimates(rates: list[priors.Rates]) -> list[CostEstimate]:
        got = est.estimate_placements(
            [pl] * len(rates), policy, deadline_h, seed=seed, rules=rule,
            rates=dict(enumerate(rates)),
        )  # fmt: skip
        return [g.estimate for g in got if g.estimate is not None]

    for mode in modes:
        if mode in ("cross", "score") and cross is None:
            continue
        if mode == "new":  # one estimate per zone: what `plan` prints, whatever the window
            e = estimates([est.band_rates(z.band)]) * n
        elif mode == "cross":  # the new account's prior, refitted without this set
            e = estimates([priors.new_account_rates(z.band, None, cross)]) * n
        elif mode == "score":  # and the zone's placement score at the window's start
            scores = [proxy_score(av, int(s), step) for s in starts]
            uniq = sorted(set(scores))
            by = dict(zip(uniq, estimates([score_rates(z, c, cross) for c in uniq]), strict=True))
            e = [by[c] for c in scores]
        else:  # the zone's history, on the held-out prior where there is one
            base = priors.new_account_rates(z.band, None, cross)
            e = estimates([est.fit_rates(av[s - hist : s + 1], step, base, half_life_h, drift)
                           for s in starts])  # fmt: skip
        out[f"{mode}_mean"] = np.asarray([x.mean_usd for x in e])
        out[f"{mode}_p10"] = np.asarray([x.p10_usd for x in e])
        out[f"{mode}_p90"] = np.asarray([x.p90_usd for x in e])
    return out


def fit_reference(files: list[Path]) -> priors.Reference:
    """The reference figures fitted on the days of ``files`` as the module's are
    (:func:`calibrate`)."""
    step, chunk = priors.CALIBRATION_STEP_S, priors.CALIBRATION_CHUNK_H
    rows = np.concatenate([priors.chunk_counts(load_trace(f).available_on(step), step, chunk)
                           for f in files])  # fmt: skip
    k_up, m_up = priors.fit_gamma(rows[:, 0], rows[:, 1])
    k_dn, m_dn = priors.fit_gamma(rows[:, 2], rows[:, 3])
    return priors.Reference(k_up, m_up, k_dn, m_dn)


def by_zone(data: Path, windows: int, seed: int) -> None:
    """The realised mean cost of each zone and instance type that appears in several trace
    sets (different weeks): what any prior made before history gives it is one figure."""
    advisor = data / ADVISOR
    bands = priors.load_advisor_bands(advisor) if advisor.is_file() else {}
    seen: dict[tuple[str, str, float], list[tuple[str, float]]] = {}
    for label, files in trace_sets(data):
        for z in zones(data, files, bands):
            for work_h, deadline_h in JOBS:
                got = run_zone(z, windows, work_h, deadline_h, seed, ())
                if got:
                    key = (z.trace.zone, z.instance_type, work_h)
                    seen.setdefault(key, []).append(
                        (label.rsplit("/", 1)[-1], float(got["real"].mean()))
                    )
    print("the same zone and type in different weeks (realised mean cost per set):")
    for (zone, itype, work_h), weeks in sorted(seen.items()):
        if len(weeks) < 2:
            continue
        vals = [m for _, m in weeks]
        each = "  ".join(f"{lab} ${m:.2f}" for lab, m in weeks)
        print(f"   {zone} {itype} {work_h:g} h: {each}  max/min {max(vals) / min(vals):.2f}")


def reference_files(data: Path, leave_out: str | None = None) -> list[Path]:
    """The traces the new account's reference prior is fitted on: every AWS trace (the
    reference band, ``>20%``, is theirs), each distinct file once; ``leave_out``: without the
    files of that set (byte for byte, wherever else they appear)."""
    sets = dict(trace_sets(data))
    digest = {f: hashlib.sha1(f.read_bytes()).hexdigest() for fs in sets.values() for f in fs}
    skip = {digest[f] for f in sets.get(leave_out or "", [])}
    out, seen = [], set(skip)
    for label, files in sets.items():
        if "gcp" in label:
            continue
        for f in files:
            if digest[f] not in seen:
                seen.add(digest[f])
                out.append(f)
    return out


def cross_fits(data: Path) -> dict[str, priors.Reference]:
    """For each trace set, the reference refitted on every other set's AWS traces: the
    prior a new account gets, measured on traces it was not fitted on."""
    return {label: fit_reference(reference_files(data, label)) for label, _ in trace_sets(data)}


def calibrate(data: Path) -> None:
    """Refit the new account's reference prior on every AWS trace and print it."""
    files = reference_files(data)
    ref = fit_reference(files)
    k_up, m_up, k_dn, m_dn = ref.fail_shape, ref.fail_rate, ref.back_shape, ref.back_rate
    print(
        f"calibration (every AWS trace, {len(files)} distinct files, days at "
        f"{priors.CALIBRATION_STEP_S:g} s): failure rate Gamma shape {k_up:.3f} mean "
        f"{m_up:.3f}/h; recovery rate shape {k_dn:.3f} mean {m_dn:.3f}/h (in use: "
        f"{priors.FAIL_SHAPE:g}, {priors.REF_FAIL_RATE:g}; {priors.BACK_SHAPE:g}, "
        f"{priors.REF_BACK_RATE:g})"
    )


def convergence(seed: int, samples: int) -> None:
    """The new account's estimate of both jobs at several steps, and the time it takes."""
    policy = load_policy(REPO / "policies" / "spot-finetune.yaml")
    rule = {"aws": est.CloudRule(est.cloud_rule("aws").billing, 0.0, 120.0)}
    tr = Trace("us-east-1a", "us-east-1a", 300.0, np.ones(2))
    z = Zone(tr, "us-east-1", "p3.2xlarge", ">20%")
    fine, most = est.FINE_STEP_S, est.MAX_STEPS
    try:
        for work_h, deadline_h in JOBS:
            for step in (1800.0, 1200.0, 900.0, 600.0, 300.0, 150.0):
                est.FINE_STEP_S, est.MAX_STEPS = step, 10**6
                t0 = time.perf_counter()
                [got] = est.estimate_placements(
                    [placement(z, work_h)], policy, deadline_h, samples=samples, seed=seed,
                    rules=rule,
                )  # fmt: skip
                dt = time.perf_counter() - t0
                e = got.estimate
                assert e is not None
                steps = (deadline_h + work_h + CHANGEOVER_H) * 3600 / step
                print(
                    f"   {work_h:g} h job, step {step:6.0f} s ({steps:5.0f} steps): mean "
                    f"${e.mean_usd:7.2f}  P10-P90 ${e.p10_usd:.2f}-${e.p90_usd:.2f}  "
                    f"restarts {e.restarts:4.2f}  {dt * 1000:6.0f} ms a placement"
                )
    finally:
        est.FINE_STEP_S, est.MAX_STEPS = fine, most


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--windows", type=int, default=150, help="random windows per trace")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--samples", type=int, default=est.SAMPLES, help="runs per estimate (--convergence)"
    )
    ap.add_argument("--quick", action="store_true", help="30 windows per trace")
    ap.add_argument("--prior", choices=PRIORS, action="append", help="only this prior")
    ap.add_argument("--calibrate", action="store_true", help="refit the prior and print it")
    ap.add_argument(
        "--half-life",
        type=float,
        default=priors.HISTORY_HALF_LIFE_H,
        help="hours after which history counts half (trace prior; 0: all alike)",
    )
    ap.add_argument("--sets", default="", help="only the trace sets whose path holds this")
    ap.add_argument("--convergence", action="store_true", help="the estimate against the step")
    ap.add_argument(
        "--by-zone", action="store_true", help="each zone's realised cost in each week it appears"
    )
    ap.add_argument("--zones", action="store_true", help="each zone's figures too")
    ap.add_argument(
        "--drift", type=float, default=None, help="the history's drift per hour (trace prior)"
    )
    args = ap.parse_args(argv)
    if not (args.data / "traces").is_dir():
        print(f"estimate_bench: no traces under {args.data / 'traces'} (give --data); skipped")
        return 0
    if args.quick:
        args.windows = 30
    modes = tuple(args.prior or PRIORS)
    if args.by_zone:
        by_zone(args.data, args.windows, args.seed)
        return 0
    fits = cross_fits(args.data) if {"cross", "score", "trace"} & set(modes) else {}
    if args.calibrate:
        calibrate(args.data)
    if args.convergence:
        convergence(args.seed, args.samples)
        return 0
    advisor = args.data / ADVISOR
    bands = priors.load_advisor_bands(advisor) if advisor.is_file() else {}
    print(
        f"jobs {', '.join(f'{w:g} h by {d:g} h' for w, d in JOBS)}; d = {CHANGEOVER_H} h; "
        f"{args.windows} windows per trace, {est.SAMPLES} runs per estimate, strategy "
        f"{est.DEFAULT_STRATEGY}; ${P_OD}/h on-demand, ${P_SPOT}/h spot; bands from "
        f"{ADVISOR if bands else 'nowhere (no feed)'}"
    )
    t0 = time.perf_counter()
    half_life = args.half_life or None
    pooled: dict[tuple[str, float], list[dict[str, np.ndarray]]] = {}
    for label, files in trace_sets(args.data):
        if args.sets not in label:
            continue
        zs = zones(args.data, files, bands)
        tag = "AWS: in the new prior's fit" if "gcp" not in label else "not in the fit"
        band_list = ", ".join(sorted({z.band or "none" for z in zs}))
        print(f"== {label} ({tag}): {len(zs)} traces, bands {band_list} ==")
        for work_h, deadline_h in JOBS:
            got = [
                (z, run_zone(z, args.windows, work_h, deadline_h, args.seed, modes, half_life,
                             fits.get(label), args.drift))
                for z in zs
            ]  # fmt: skip
            parts = [(z, p) for z, p in got if p]
            if not parts:
                print(f"   {work_h:g} h job: traces too short for a window and history; skipped")
                continue
            for mode in modes:
                zp = [p for _, p in parts if f"{mode}_mean" in p]
                if not zp:
                    continue
                print(f"   {work_h:2g} h job  prior {mode:<5}  " + summary(zp, mode))
                if "gcp" not in label:
                    pooled.setdefault((mode, work_h), []).extend(zp)
                if args.zones:
                    for z, p in parts:
                        print(
                            f"      {z.trace.zone:<14} {z.instance_type:<12} " + summary([p], mode)
                        )
    if pooled:
        print("== every AWS set pooled (each zone and week one zone) ==")
        for (mode, work_h), zp in sorted(pooled.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            print(f"   {work_h:2g} h job  prior {mode:<5}  " + summary(zp, mode))
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0


def summary(parts: list[dict[str, np.ndarray]], mode: str) -> str:
    """Windows, realised mean, bias, abs error per window, the share inside P10-P90, under
    P10 and over P90, and the range of the per-zone bias (mean estimate over mean realised of
    each zone, minus 1) of one prior over ``parts`` (one per zone)."""
    real = np.concatenate([p["real"] for p in parts])
    m = np.concatenate([p[f"{mode}_mean"] for p in parts])
    lo = np.concatenate([p[f"{mode}_p10"] for p in parts])
    hi = np.concatenate([p[f"{mode}_p90"] for p in parts])
    mae = float(np.mean(np.abs(m - real) / real))
    bias = float(m.mean() / real.mean() - 1)
    under = float(np.mean(real < lo - 1e-9))
    over = float(np.mean(real > hi + 1e-9))
    zb = [float(p[f"{mode}_mean"].mean() / p["real"].mean() - 1) for p in parts]
    return (
        f"windows {len(real):4d}  realised ${real.mean():6.2f}  bias {bias:+6.1%}  "
        f"abs error {mae:5.1%}  inside {1 - under - over:5.1%} (under P10 {under:4.1%}, "
        f"over P90 {over:5.1%})  zone bias {min(zb):+.0%}..{max(zb):+.0%}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
