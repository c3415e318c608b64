"""The planner: (policy, offers, context) -> ranked placements and rejections with reasons.

A pure function. Every hard rule is applied as a vectorised mask over the catalog's columns,
in a fixed order, and each candidate (an offer on a market the policy allows) is rejected
for the *first* rule it breaks, so the counts by reason add up to the candidates examined.
Eligible candidates are scored (lower is better) by the policy's preference weights:

* cost: the estimated job cost where the workload is sized (price × estimated hours), else
  the hourly price; relative to the cheapest eligible candidate (1.0 = cheapest);
* latency: the weighted mean RTT to the policy's targets, per 100 ms;
* interruption risk: the monthly interruption band's share for spot (unknown: 10%),
  relative to 10%; on-demand has none;
* TFLOPS per dollar: best eligible value divided by the candidate's (1.0 = best).

Where probes measured an (provider, instance type, GPU) (``context.measured``, see
:mod:`provisioner.probe.measured`), its datasheet TFLOPS are scaled by the measured fraction
in the TFLOPS-per-dollar term and its estimated hours divided by it; under the policy's
``resources.min_measured_fraction`` it is rejected ("measured").

score = Σ wᵢ·termᵢ / Σ wᵢ.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from policies.gpus import canonical_gpu, gpu_specs
from policies.model import Policy
from provisioner.core.admission import SHARED_RULES, PlanRow, Standing, billing_of
from provisioner.core.admission import over_budget as adm_over_budget
from provisioner.core.catalog import Catalog
from provisioner.core.measured import Measured
from provisioner.core.models import Market, Offer, Placement, Reservation
from provisioner.core.network import SPREAD_ONLY_GROUPS, spread_only_why, wants_interconnect
from provisioner.core.planrows import (
    PlanError,
    interconnect_mask,
    measured_speed,
    placement_reasons,
    region_verdicts,
    score_rows,
)
from provisioner.core.quotas import Quota, blocking
from provisioner.core.quotas import why as quota_why
from provisioner.core.reserved import matches as reservation_matches
from provisioner.core.reserved import notice_at as reservation_notice
from provisioner.core.reserved import usable as reservation_usable
from provisioner.core.rules import spot_caps
from provisioner.core.sizing import VRAMEstimate, estimate_hours, estimate_vram
from provisioner.core.views import CHANGEOVER_H
from provisioner.core.zone_priors import Key, ZoneRisk, risk_column

if TYPE_CHECKING:
    import numpy as np

# Reasons, in the order the rules are applied.
REASONS = (
    "provider",  # cloud not in residency.providers
    "gpu_model",  # GPU not in resources.gpus (or excluded)
    "vram",  # GPU memory below the need
    "gpu_count",  # fewer/more GPUs than resources.gpu_count
    "cpu_memory",  # below min_vcpus / min_memory_gib
    "interconnect",  # GPU links, network bandwidth or RDMA fabric below resources.interconnect
    "measured",  # probes measured it below resources.min_measured_fraction of its datasheet
    "residency",  # region outside the allowed jurisdictions/countries, or denied ones
    "denied_region",  # region listed in deny_regions / not in allow_regions
    "market",  # no price on this market (e.g. no spot market)
    "bid_cap",  # spot price above the bid cap
    "budget_hourly",  # price above budget.max_price_per_hour
    "latency",  # estimated RTT above latency.max_rtt_ms (or unknown with a limit)
    "deadline",  # estimated duration ends after the deadline
    "budget_total",  # what the launch costs at least (billing minimum, work left) > budget left
    "cooldown",  # zone recently preempted (restart.zone_cooldown)
    "unavailable",  # reported without capacity by the caller's context
    "gang_capacity",  # fewer nodes known to be there than resources.nodes (a gang)
    "quota",  # more than the account's remaining quota (PlanContext.quotas)
    "window",  # outside the policy's time windows now (the job waits for the next one)
    "reservation",  # held capacity the policy does not name, not usable now, or too small
)
_CODE = {r: i + 1 for i, r in enumerate(REASONS)}
EXAMPLES_PER_REASON = 3


@dataclass(frozen=True)
class PlanContext:
    """What the planner needs besides the policy and the offers. Time is passed in: ``now``
    is required (the core reads no clock)."""

    now: datetime
    submitted_at: datetime | None = None  # for deadlines given as a duration
    cooldown: frozenset[tuple[str, str]] = frozenset()  # (provider, zone or region)
    unavailable: frozenset[tuple[str, str, str]] = frozenset()  # (provider, location, type)
    measured_rtt_ms: dict[str, float] = field(default_factory=dict)  # "provider:region" -> ms
    hours_done: float = 0.0  # work already done (shortens the remaining duration)
    #: (provider, instance_type, gpu) -> provisioner.core.measured.Measured (probe results)
    measured: Mapping[tuple[str, str, str], Measured] = field(default_factory=dict)
    #: (provider, location, type, market) -> how many instances of that market are known to
    #: be there now (a gang launch that got only some of its nodes says so); a gang larger
    #: than that is rejected on that market (spot short of nodes leaves on-demand open)
    node_capacity: Mapping[tuple[str, str, str, str], int] = field(default_factory=dict)
    #: the plan judges launches now ("deadline", "budget_total", "window"); False for a
    #: running job's candidates: decide() paces the job against what is left and fails it,
    #: saying why, when nothing can pay for it (a planner that dropped them left it waiting
    #: forever)
    pacing: bool = True
    #: the job's side of the budget rule (:class:`provisioner.core.admission.Standing`: spent,
    #: work left, each cloud's billing rule, the pass interval): the one decide() applies
    standing: Standing = field(default_factory=Standing)
    #: the account's quotas (provisioner.core.quotas.Quota, cached in the store by
    #: `provisioner quotas --refresh`); an offer beyond what is left of one is rejected
    quotas: tuple[Quota, ...] = ()
    #: the clouds' availability priors per (provider, zone or region, type) (zone_risks() of
    #: `provisioner priors --refresh`): a spot offer's interruption risk where one is known
    priors: Mapping[Key, ZoneRisk] = field(default_factory=dict)
    #: the capacity the account holds (providers with the HeldCapacity capability list it): a
    #: policy whose market allows ``reserved`` gets a placement in each one it names that is
    #: usable now and matches an offer passing the hard rules, ranked first (marginal $0/h)
    reservations: tuple[Reservation, ...] = ()
    #: a reservation whose end notice comes within this long is not launched into (the job
    #: would do no work on it before moving on): the changeover, launch to restored
    changeover_h: float = CHANGEOVER_H


@dataclass(frozen=True)
class Rejection:
    reason: str
    count: int
    examples: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    policy: Policy
    placements: list[Placement]
    rejections: dict[str, Rejection]
    eligible: int
    candidates: int
    required_vram_gb: float | None
    vram_estimate: VRAMEstimate | None
    deadline: datetime | None
    notes: tuple[str, ...] = ()
    #: with ``with_rows=True``: every candidate judged by a rule the daemon judges too (eligible or
    #: rejected by one of :data:`provisioner.core.admission.SHARED_RULES`), with its reason
    rows: tuple[PlanRow, ...] = ()

    @property
    def rejected(self) -> dict[str, int]:
        """Rejected candidates by reason (only reasons that rejected something)."""
        return {r: rej.count for r, rej in self.rejections.items()}

    @property
    def best(self) -> Placement | None:
        return self.placements[0] if self.placements else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.name,
            "placements": [p.as_dict() for p in self.placements],
            "rejected": self.rejected,
            "rejected_examples": {r: list(rej.examples) for r, rej in self.rejections.items()},
            "eligible": self.eligible,
            "candidates": self.candidates,
            "required_vram_gb": None
            if self.required_vram_gb is None
            else round(self.required_vram_gb, 2),
            "vram_estimate": self.vram_estimate.as_dict() if self.vram_estimate else None,
            "deadline": self.deadline.isoformat() if self.deadline else None,
            "notes": list(self.notes),
        }


# -- helpers -------------------------------------------------------------------------------


def required_vram(policy: Policy) -> tuple[float | None, VRAMEstimate | None]:
    res = policy.resources
    est = estimate_vram(res.workload, res.gpu_count) if res.workload else None
    needs = [v for v in (res.min_vram_gb, est.total_gb if est else None) if v is not None]
    return (max(needs) if needs else None), est


def _gpu_models(policy: Policy) -> tuple[set[str] | None, set[str]]:
    res = policy.resources
    allowed: set[str] | None = None
    if res.gpus is not None:
        allowed = set()
        for name in res.gpus:
            model = canonical_gpu(name)
            if model is None:
                raise PlanError(f"resources.gpus: unknown GPU {name!r}")
            allowed.add(model)
    excluded = {canonical_gpu(n) or n for n in res.exclude_gpus}
    return allowed, excluded


def _describe(o: Offer, market: Market) -> str:
    price = o.price_for(market)
    where = o.zone or o.region
    p = f"${price:.4g}/h" if price is not None else "no price"
    return f"{o.provider}:{where} {o.instance_type} ({o.gpu_count}x{o.gpu}) {market.value} {p}"


# -- the planner ---------------------------------------------------------------------------


def plan_offers(
    policy: Policy,
    catalog: Catalog,
    context: PlanContext,
    *,
    top: int | None = 10,
    with_rows: bool = False,
) -> Plan:
    """Rank the catalog's offers for ``policy``. Pure: no I/O, no clock (time is in context).
    ``with_rows``: keep each candidate a shared rule judged (``Plan.rows``, for the invariant that
    plan and the daemon agree: :func:`provisioner.core.admission.plan_daemon_disagreements`)."""
    import numpy as np

    ctx = context
    cols = catalog.columns
    n_total = len(catalog.offers)
    specs = gpu_specs()
    need_vram, vram_est = required_vram(policy)
    allowed_models, excluded_models = _gpu_models(policy)
    markets: list[Market] = []
    if policy.allows_spot:
        markets.append(Market.SPOT)
    if policy.allows_on_demand:
        markets.append(Market.ON_DEMAND)
    n_markets = len(markets)
    deadline = policy.deadline_at(ctx.submitted_at or ctx.now)

    counts = dict.fromkeys(REASONS, 0)
    examples: dict[str, list[str]] = {r: [] for r in REASONS}

    # 1. GPU model and VRAM via the index: only rows of usable GPU models go further.
    keep_rows: list[np.ndarray] = []
    for model, rows in cols.by_gpu.items():
        spec = specs.get(model)
        reason = None
        if (allowed_models is not None and model not in allowed_models) or model in excluded_models:
            reason = "gpu_model"
        elif need_vram is not None and (spec is None or spec.vram_gb + 1e-9 < need_vram):
            reason = "vram"
        if reason is None:
            keep_rows.append(rows)
            continue
        counts[reason] += len(rows) * n_markets
        if len(examples[reason]) < EXAMPLES_PER_REASON and len(rows):
            o = catalog.offers[int(rows[0])]
            detail = (
                f" ({spec.vram_gb:g} GB < {need_vram:.1f} GB)"
                if reason == "vram" and spec and need_vram
                else ""
            )
            examples[reason].append(_describe(o, (markets or [Market.RESERVED])[0]) + detail)
    rows = np.sort(np.concatenate(keep_rows)) if keep_rows else np.empty(0, dtype=np.int64)

    # Per-row facts (columns gathered once for the surviving rows).
    res = policy.resources
    region_verdict, region_worst_rtt, region_mean_rtt = region_verdicts(policy, cols, _CODE)
    rv = (
        np.asarray(region_verdict, dtype=np.int16)[cols.region[rows]]
        if len(rows)
        else np.empty(0, np.int16)
    )
    worst_rtt = np.asarray(region_worst_rtt)[cols.region[rows]] if len(rows) else np.empty(0)
    mean_rtt = np.asarray(region_mean_rtt)[cols.region[rows]] if len(rows) else np.empty(0)
    gpu_count = cols.gpu_count[rows]
    on_demand = cols.price[rows]
    spot = cols.spot_price[rows]
    gpu_codes = cols.gpu[rows]
    tflops_by_code = np.asarray(
        [(specs[g].tensor_tflops if g in specs else 0.0) for g in cols.gpu_names] or [0.0]
    )
    tflops = tflops_by_code[gpu_codes] * gpu_count

    base = np.zeros(len(rows), dtype=np.int16)
    provider_ok = rv != _CODE["provider"]
    base[~provider_ok] = _CODE["provider"]
    # gpu_count: exact match of GPUs per instance
    base[(base == 0) & (gpu_count != res.gpu_count)] = _CODE["gpu_count"]
    if res.min_vcpus is not None or res.min_memory_gib is not None:
        low = np.zeros(len(rows), dtype=bool)
        if res.min_vcpus is not None:
            low |= cols.vcpus[rows] < res.min_vcpus
        if res.min_memory_gib is not None:
            low |= cols.memory_gib[rows] < res.min_memory_gib
        base[(base == 0) & low] = _CODE["cpu_memory"]
    nodes = res.nodes
    why_row: dict[tuple[str, int], str] = {}  # (reason, row position) -> why, for the examples
    #: the same for the rules judged per market (quota, gang capacity): (reason, row position,
    #: market index) -> why; a row's spot and on-demand candidates meet different limits
    why_market: dict[tuple[str, int, int], str] = {}
    if wants_interconnect(res.interconnect, nodes):
        bad = interconnect_mask(policy, catalog, rows, why_row)
        base[(base == 0) & bad] = _CODE["interconnect"]
    if nodes > 1 and res.interconnect.inter_node == "placement-group":
        for pos in np.flatnonzero(base == 0).tolist():
            provider = catalog.offers[int(rows[pos])].provider
            if provider in SPREAD_ONLY_GROUPS:
                base[pos] = _CODE["interconnect"]
                why_row[("interconnect", pos)] = spread_only_why(provider)
    speed, measured_at = measured_speed(catalog, rows, ctx.measured)
    if measured_at and res.min_measured_fraction is not None:
        base[(base == 0) & (speed < res.min_measured_fraction)] = _CODE["measured"]
    sel = (base == 0) & (rv != 0)
    base[sel] = rv[sel]
    if policy.latency.max_rtt_ms is not None and policy.latency.targets:
        slow = ~(worst_rtt <= policy.latency.max_rtt_ms)  # NaN (unknown) counts as too slow
        latency_bad = slow
    else:
        latency_bad = np.zeros(len(rows), dtype=bool)

    # Duration per row, where the job is sized.
    hours = np.full(len(rows), np.nan)
    w = res.workload
    if w is not None and w.tokens_b is not None:
        for code in sorted(set(gpu_codes.tolist())):  # not np.unique: it imports numpy.ma
            m = gpu_codes == code
            per = estimate_hours(w, float(tflops_by_code[code]), 1)
            if per is not None:
                hours[m] = per / (gpu_count[m] * nodes)
    elif policy.job.compute_hours is not None:
        ref = specs.get(canonical_gpu(policy.job.reference_gpu) or "")
        ref_tflops = ref.tensor_tflops if ref else 0.0
        if ref_tflops > 0:
            with np.errstate(divide="ignore", invalid="ignore"):
                hours = policy.job.compute_hours * ref_tflops / (tflops * nodes)
    if measured_at:  # probes say how fast these rows really are
        tflops = tflops * speed
        hours = hours / speed
    hours = np.maximum(hours - ctx.hours_done, 0.0) if ctx.hours_done else hours

    cooldown_mask = np.zeros(len(rows), dtype=bool)
    unavailable_mask = np.zeros(len(rows), dtype=bool)
    short_mask = {m: np.zeros(len(rows), dtype=bool) for m in markets}
    short = nodes > 1 and bool(ctx.node_capacity)
    if ctx.cooldown or ctx.unavailable or short:
        for j, i in enumerate(rows):
            o = catalog.offers[int(i)]
            if ctx.cooldown and (
                (o.provider, o.zone) in ctx.cooldown or (o.provider, o.region) in ctx.cooldown
            ):
                cooldown_mask[j] = True
            if ctx.unavailable and (o.provider, o.location, o.instance_type) in ctx.unavailable:
                unavailable_mask[j] = True
            for m in markets if short else ():
                there = ctx.node_capacity.get((o.provider, o.location, o.instance_type, m.value))
                if there is not None and there < nodes:
                    short_mask[m][j] = True
                    why_market[("gang_capacity", j, markets.index(m))] = (
                        f"only {there} of {nodes} nodes of {o.instance_type} {m.value} in "
                        f"{o.location}"
                    )

    budget = policy.budget
    # the least billed time of a launch per row (its cloud's rule, one pass at least)
    st = ctx.standing
    secs_by = [
        billing_of(st.billing, name).billed_seconds(st.step_s) for name in cols.provider_names
    ]
    first_s = np.asarray(secs_by or [0], dtype=float)[cols.provider[rows]] if len(rows) else hours
    window_shut = False
    if policy.windows and ctx.pacing:
        from provisioner.core.admission import window_refusal

        window_shut = window_refusal(policy, ctx.now) is not None
    cand_rows: list[np.ndarray] = []
    cand_market: list[int] = []
    cand_price: list[np.ndarray] = []
    cand_cap: list[np.ndarray] = []
    cand_reason: list[np.ndarray] = []
    for mi, market in enumerate(markets):
        cand = base.copy()
        price = spot if market is Market.SPOT else on_demand
        cand[(cand == 0) & np.isnan(price)] = _CODE["market"]
        cap = np.full(len(rows), np.inf)
        if market is Market.SPOT:
            cap = spot_caps(policy, gpu_count, on_demand)
            cand[(cand == 0) & ~(price <= cap)] = _CODE["bid_cap"]
        if budget.max_price_per_hour is not None:  # the whole gang's hour
            over_h = ~(price * nodes <= budget.max_price_per_hour)
            cand[(cand == 0) & over_h] = _CODE["budget_hourly"]
        cand[(cand == 0) & latency_bad] = _CODE["latency"]
        if deadline is not None and ctx.pacing:
            remaining_h = (deadline - ctx.now).total_seconds() / 3600.0
            late = hours > remaining_h  # NaN (unsized) passes: decide() watches the clock
            cand[(cand == 0) & late] = _CODE["deadline"]
            if remaining_h <= 0:
                cand[cand == 0] = _CODE["deadline"]
        if budget.max_total is not None and ctx.pacing:
            broke = adm_over_budget(policy, ctx.standing, price * nodes, hours, first_s)
            cand[(cand == 0) & broke] = _CODE["budget_total"]
        cand[(cand == 0) & cooldown_mask] = _CODE["cooldown"]
        cand[(cand == 0) & unavailable_mask] = _CODE["unavailable"]
        cand[(cand == 0) & short_mask[market]] = _CODE["gang_capacity"]
        if ctx.quotas:
            for pos in np.flatnonzero(cand == 0).tolist():
                row = catalog.offers[int(rows[pos])]
                over = blocking(ctx.quotas, row, market, nodes)
                if over is not None:
                    cand[pos] = _CODE["quota"]
                    why_market[("quota", pos, mi)] = quota_why(over, row, nodes)
        if window_shut:
            cand[cand == 0] = _CODE["window"]
        cand_rows.append(rows)
        cand_market.append(mi)
        cand_price.append(price)
        cand_cap.append(cap)
        cand_reason.append(cand)

    judged: tuple[PlanRow, ...] = ()
    if with_rows:
        judged = _rows(catalog, rows_=cand_rows, markets=markets, reasons=cand_reason,
                       prices=cand_price, caps=cand_cap, hours=hours, nodes=nodes)  # fmt: skip

    # Count rejections and gather examples.
    for mi, codes in enumerate(cand_reason):
        binc = np.bincount(codes, minlength=len(REASONS) + 1)
        for r, code in _CODE.items():
            c = int(binc[code])
            if not c:
                continue
            counts[r] += c
            if len(examples[r]) < EXAMPLES_PER_REASON:
                idx = np.flatnonzero(codes == code)[: EXAMPLES_PER_REASON - len(examples[r])]
                for j in idx:
                    o = catalog.offers[int(rows[j])]
                    text = _example(o, markets[mi], r, cand_cap[mi][j], worst_rtt[j], hours[j])
                    why = (
                        why_market.get((r, int(j), mi))
                        or why_row.get((r, int(j)))
                        or _shared_why(
                            policy, ctx, r, o, markets[mi], cand_price[mi][j], hours[j], nodes
                        )
                    )
                    examples[r].append(f"{text}: {why}" if why else text)

    # Score eligible candidates.
    elig_j: list[np.ndarray] = [np.flatnonzero(r == 0) for r in cand_reason]
    n_elig = int(sum(len(e) for e in elig_j))
    placements: list[Placement] = []
    if n_elig:
        j_all = np.concatenate(elig_j)
        m_all = np.concatenate([np.full(len(e), mi) for mi, e in enumerate(elig_j)])
        price_all = np.concatenate([cand_price[mi][e] for mi, e in enumerate(elig_j)])
        cap_all = np.concatenate([cand_cap[mi][e] for mi, e in enumerate(elig_j)])
        hours_all = hours[j_all]
        cost = np.where(np.isnan(hours_all), price_all, price_all * hours_all) * nodes
        sized = not np.isnan(hours_all).all()
        if sized:  # compare jobs where sized; unsized rows fall back to price per hour
            cost = np.where(np.isnan(hours_all), np.nan, cost)
            cost = np.where(
                np.isnan(cost), np.nanmax(cost) * 2 if np.isfinite(np.nanmax(cost)) else 1.0, cost
            )
        rtt_all = mean_rtt[j_all]
        is_spot = np.asarray([markets[m] is Market.SPOT for m in m_all], dtype=bool)
        risk_all = risk_column(cols.band_risk[rows][j_all], rows[j_all], catalog.offers, ctx.priors)
        score, tpd = score_rows(policy, cost, price_all, rtt_all, risk_all, is_spot, tflops[j_all])
        k = len(score) if top is None else min(top, len(score))
        part = np.argpartition(score, k - 1)[:k] if k < len(score) else np.arange(len(score))
        order = part[np.lexsort((price_all[part], score[part]))]
        for rank, q in enumerate(order, start=1):
            j = int(j_all[q])
            market = markets[int(m_all[q])]
            o = catalog.offers[int(rows[j])]
            cap_q = float(cap_all[q])
            h = float(hours_all[q])
            price_q = float(price_all[q])
            reasons_txt = placement_reasons(
                market,
                price_q,
                cap_q,
                nodes,
                res.interconnect.inter_node,
                measured_at.get(j),
                float(tflops[j]),
                float(speed[j]),
            )
            placements.append(
                Placement(
                    offer=o,
                    market=market,
                    price_per_hour=price_q,
                    bid_cap_per_hour=cap_q if math.isfinite(cap_q) else None,
                    score=float(score[q]),
                    rank=rank,
                    est_rtt_ms=None if math.isnan(rtt_all[q]) else float(rtt_all[q]),
                    est_hours=None if math.isnan(h) else h,
                    est_job_cost=None if math.isnan(h) else h * price_q * nodes,
                    tflops_per_dollar=float(tpd[q])
                    if math.isfinite(tpd[q]) and tpd[q] > 0
                    else None,
                    reasons=tuple(reasons_txt),
                    nodes=nodes,
                )
            )

    held: list[Placement] = []
    n_held = 0
    if policy.allows_reserved and ctx.reservations:
        n_held = len(ctx.reservations)
        held = _reserved(
            policy, catalog, ctx, rows, base, latency_bad, unavailable_mask, hours, first_s,
            deadline, window_shut, counts, examples,
        )  # fmt: skip
        if held:
            for rank, p in enumerate(placements, start=len(held) + 1):
                placements[rank - len(held) - 1] = replace(p, rank=rank)
            placements = held + placements
            if top is not None:
                placements = placements[: max(top, len(held))]
    rejections = {r: Rejection(r, counts[r], tuple(examples[r])) for r in REASONS if counts[r]}
    notes: list[str] = []
    spread = (
        sorted({p.offer.provider for p in placements} & SPREAD_ONLY_GROUPS) if nodes > 1 else []
    )
    for provider in spread:
        notes.append(
            f"a gang on {provider} has no proximity guarantee: its placement groups only spread "
            "instances apart (the nodes share a zone)"
        )
    if policy.windows:
        from policies.cron import in_window, next_window_start

        wins = [(win.cron, win.duration) for win in policy.windows]
        if not in_window(wins, ctx.now):
            nxt = next_window_start(wins, ctx.now)
            notes.append(
                f"outside the policy's time windows; next opens {nxt.isoformat() if nxt else 'never'}"
            )
    return Plan(
        policy=policy,
        placements=placements,
        rejections=rejections,
        eligible=n_elig + len(held),
        candidates=n_total * n_markets + n_held,
        required_vram_gb=need_vram,
        vram_estimate=vram_est,
        deadline=deadline,
        notes=tuple(notes),
        rows=judged,
    )


def _reserved(
    policy: Policy,
    catalog: Catalog,
    ctx: PlanContext,
    rows: np.ndarray,
    base: np.ndarray,
    latency_bad: np.ndarray,
    unavailable: np.ndarray,
    hours: np.ndarray,
    first_s: np.ndarray,
    deadline: datetime | None,
    window_shut: bool,
    counts: dict[str, int],
    examples: dict[str, list[str]],
) -> list[Placement]:
    """A ``reserved`` placement per held reservation the policy allows, usable now, matching
    an offer of the catalog that passes the hard rules (the offer's row codes, then the rules
    judged per market at a marginal price of zero): ranked first, open-ended capacity before
    capacity that ends, later ends first. The rest are counted under the first rule each
    breaks (``reservation``: not named by the policy, not usable now, too small)."""
    import numpy as np

    nodes = policy.resources.nodes
    at: dict[tuple[str, str], list[int]] = {}
    for j, i in enumerate(rows.tolist()):
        o = catalog.offers[int(i)]
        at.setdefault((o.provider, o.instance_type), []).append(j)
    out: list[tuple[tuple[float, int], Placement]] = []

    def reject(reason: str, r: Reservation, why: str) -> None:
        counts[reason] += 1
        if len(examples[reason]) < EXAMPLES_PER_REASON:
            examples[reason].append(
                f"{r.provider}:{r.zone or r.region} {r.instance_type} reserved {r.id}: {why}"
            )

    for r in ctx.reservations:
        if not policy.reservation_allowed(r.id):
            reject("reservation", r, "not among the policy's reservations")
            continue
        bad = reservation_usable(r, ctx.now, ctx.changeover_h)
        if bad is None and r.free < nodes:
            bad = f"{r.free} free, the job needs {nodes}"
        if bad is not None:
            reject("reservation", r, bad)
            continue
        js = [
            j
            for j in at.get((r.provider, r.instance_type), [])
            if reservation_matches(
                r,
                r.provider,
                catalog.offers[int(rows[j])].region,
                catalog.offers[int(rows[j])].zone,
                r.instance_type,
            )
        ]
        if not js:
            any_offer = any(
                reservation_matches(r, o.provider, o.region, o.zone, o.instance_type)
                for o in catalog.offers
            )
            reject(
                "gpu_model" if any_offer else "reservation",
                r,
                "its GPU is not one the policy takes"
                if any_offer
                else "no offer of its type there in the catalog",
            )
            continue
        j = js[0]
        o = catalog.offers[int(rows[j])]
        code = int(base[j])
        reason = REASONS[code - 1] if code else None
        h = float(hours[j])
        if reason is None and latency_bad[j]:
            reason = "latency"
        if reason is None and deadline is not None and ctx.pacing:
            left_h = (deadline - ctx.now).total_seconds() / 3600.0
            if left_h <= 0 or (not math.isnan(h) and h > left_h):
                reason = "deadline"
        if reason is None and policy.budget.max_total is not None and ctx.pacing:
            broke = adm_over_budget(
                policy, ctx.standing, np.zeros(1), hours[j : j + 1], first_s[j : j + 1]
            )
            if bool(broke[0]):
                reason = "budget_total"
        if reason is None and unavailable[j]:
            reason = "unavailable"
        if reason is None and ctx.quotas:  # held instances count against the account's quota
            over = blocking(ctx.quotas, o, Market.ON_DEMAND, nodes)
            if over is not None:
                reason = "quota"
        if reason is None and window_shut:
            reason = "window"
        if reason is not None:
            reject(reason, r, "the offer there breaks this rule")
            continue
        held = "unknown" if r.held_usd_per_hour is None else f"${r.held_usd_per_hour:.4g}/h"
        why = [
            f"reserved {r.kind.value} {r.id}: {r.free} of {r.total} free; marginal $0/h "
            f"(held {held} whether used or not)"
        ]
        due = reservation_notice(r)
        if due is not None:
            why.append(f"ends: the job moves on at {due.isoformat()}")
            if not math.isnan(h) and ctx.now + timedelta(hours=h) > due:
                why.append("before the job's estimated end")
        end_s = math.inf if due is None else due.timestamp()
        p = Placement(
            offer=o,
            market=Market.RESERVED,
            price_per_hour=0.0,
            bid_cap_per_hour=None,
            score=0.0,
            est_hours=None if math.isnan(h) else h,
            est_job_cost=None if math.isnan(h) else 0.0,
            reasons=tuple(why),
            nodes=nodes,
            reservation=r,
        )
        out.append(((-end_s, -r.free), p))
    out.sort(key=lambda kp: kp[0])
    return [replace(p, rank=k) for k, (_, p) in enumerate(out, start=1)]


_SHARED_CODES = frozenset([0, *(_CODE[r] for r in SHARED_RULES if r in _CODE)])


def _rows(
    catalog: Catalog,
    *,
    rows_: list[np.ndarray],
    markets: list[Market],
    reasons: list[np.ndarray],
    prices: list[np.ndarray],
    caps: list[np.ndarray],
    hours: np.ndarray,
    nodes: int,
) -> tuple[PlanRow, ...]:
    """Each candidate judged by a shared rule, as the placement it would be launched as."""
    out: list[PlanRow] = []
    for mi, market in enumerate(markets):
        codes = reasons[mi]
        for j in range(len(codes)):
            code = int(codes[j])
            if code not in _SHARED_CODES:
                continue
            price = float(prices[mi][j])
            cap = float(caps[mi][j])
            h = float(hours[j])
            p = Placement(
                offer=catalog.offers[int(rows_[mi][j])],
                market=market,
                price_per_hour=price,
                bid_cap_per_hour=cap if market is Market.SPOT and math.isfinite(cap) else None,
                score=0.0,
                est_hours=None if math.isnan(h) else h,
                nodes=nodes,
            )
            out.append(PlanRow(p, None if code == 0 else REASONS[code - 1]))
    return tuple(out)


def _shared_why(
    policy: Policy,
    ctx: PlanContext,
    reason: str,
    o: Offer,
    market: Market,
    price: float,
    hours: float,
    nodes: int,
) -> str | None:
    """Why the one predicate refused an example (budget, windows), in its own words."""
    from provisioner.core.admission import budget_refusal, window_refusal

    if reason == "budget_total":
        h = None if math.isnan(hours) else float(hours)
        p = Placement(o, market, float(price), None, score=0.0, est_hours=h, nodes=nodes)
        got = budget_refusal(policy, p, ctx.standing)
    elif reason == "window":
        got = window_refusal(policy, ctx.now)
    else:
        return None
    return None if got is None else got.why


def _example(o: Offer, market: Market, reason: str, cap: float, rtt: float, hours: float) -> str:
    text = _describe(o, market)
    if reason == "bid_cap" and math.isfinite(cap):
        text += f" > cap ${cap:.4g}/h"
    elif reason == "latency" and not math.isnan(rtt):
        text += f" ~{rtt:.0f} ms"
    elif reason == "deadline" and not math.isnan(hours):
        text += f" ~{hours:.1f} h"
    return text
