"""The planner's rules judged per (row, market), in the planner's order after the row rules:
a price on the market, the bid cap (:func:`provisioner.core.rules.spot_caps`, the formula the
daemon applies), the hourly budget, latency, the deadline, the total budget and the windows
(the rules the daemon shares: :mod:`provisioner.core.admission`), the caller's context, the
account's quotas. Then the rejections counted and described, and the rows the plan/daemon
invariant reads. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from policies.model import Policy
from provisioner.core.admission import SHARED_RULES, PlanRow
from provisioner.core.admission import over_budget as adm_over_budget
from provisioner.core.catalog import Catalog
from provisioner.core.models import Market, Offer, Placement
from provisioner.core.planner.reasons import CODE, REASONS, Tally, example
from provisioner.core.planner.rowrules import ContextMasks, Rows
from provisioner.core.quotas import blocking
from provisioner.core.quotas import why as quota_why
from provisioner.core.rules import EPS_USD, spot_caps

if TYPE_CHECKING:
    import numpy as np

    from provisioner.core.planner.context import PlanContext


@dataclass(frozen=True)
class Judged:
    """Each market's candidates (one per row): its price, its bid cap (inf: none; spot only)
    and the first rule it breaks (a reason code; 0: eligible)."""

    markets: list[Market]
    prices: list[np.ndarray]
    caps: list[np.ndarray]
    reasons: list[np.ndarray]


def window_shut(policy: Policy, ctx: PlanContext) -> bool:
    """The policy's time windows are shut now (judged only when the plan paces launches)."""
    if policy.windows and ctx.pacing:
        from provisioner.core.admission import window_refusal

        return window_refusal(policy, ctx.now) is not None
    return False


def judge_markets(
    policy: Policy,
    catalog: Catalog,
    ctx: PlanContext,
    r: Rows,
    masks: ContextMasks,
    markets: list[Market],
    deadline: datetime | None,
    first_s: np.ndarray,
    shut: bool,
) -> Judged:
    """Each market's rules over the rows the row rules left (``r.base``)."""
    out = Judged(markets, [], [], [])
    for mi, market in enumerate(markets):
        price, cap, cand = _judge_market(
            policy, catalog, ctx, r, masks, mi, market, deadline, first_s, shut
        )
        out.prices.append(price)
        out.caps.append(cap)
        out.reasons.append(cand)
    return out


def _judge_market(
    policy: Policy,
    catalog: Catalog,
    ctx: PlanContext,
    r: Rows,
    masks: ContextMasks,
    mi: int,
    market: Market,
    deadline: datetime | None,
    first_s: np.ndarray,
    shut: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    import numpy as np

    rows, nodes, budget = r.rows, policy.resources.nodes, policy.budget
    cand = r.base.copy()
    price = r.spot if market is Market.SPOT else r.on_demand
    cand[(cand == 0) & np.isnan(price)] = CODE["market"]
    cap = np.full(len(rows), np.inf)
    if market is Market.SPOT:
        cap = spot_caps(policy, r.gpu_count, r.on_demand)
        # the scalar rules' tolerance (rules.EPS_USD), so that plan and daemon judge alike
        cand[(cand == 0) & ~(price <= cap + EPS_USD)] = CODE["bid_cap"]
    if budget.max_price_per_hour is not None:  # the whole gang's hour
        over_h = ~(price * nodes <= budget.max_price_per_hour + EPS_USD)
        cand[(cand == 0) & over_h] = CODE["budget_hourly"]
    cand[(cand == 0) & r.latency_bad] = CODE["latency"]
    if deadline is not None and ctx.pacing:
        remaining_h = (deadline - ctx.now).total_seconds() / 3600.0
        late = r.hours > remaining_h  # NaN (unsized) passes: decide() watches the clock
        cand[(cand == 0) & late] = CODE["deadline"]
        if remaining_h <= 0:
            cand[cand == 0] = CODE["deadline"]
    if budget.max_total is not None and ctx.pacing:
        broke = adm_over_budget(policy, ctx.standing, price * nodes, r.hours, first_s)
        cand[(cand == 0) & broke] = CODE["budget_total"]
    cand[(cand == 0) & masks.cooldown] = CODE["cooldown"]
    cand[(cand == 0) & masks.unavailable] = CODE["unavailable"]
    cand[(cand == 0) & masks.short[market]] = CODE["gang_capacity"]
    if ctx.quotas:
        for pos in np.flatnonzero(cand == 0).tolist():
            row = catalog.offers[int(rows[pos])]
            over = blocking(ctx.quotas, row, market, nodes)
            if over is not None:
                cand[pos] = CODE["quota"]
                r.why_market[("quota", pos, mi)] = quota_why(over, row, nodes)
    if shut:
        cand[cand == 0] = CODE["window"]
    return price, cap, cand


def tally_rejections(
    policy: Policy, catalog: Catalog, ctx: PlanContext, r: Rows, judged: Judged, tally: Tally
) -> None:
    """Count each market's rejections by reason, and describe the first few of each."""
    import numpy as np

    nodes = policy.resources.nodes
    for mi, codes in enumerate(judged.reasons):
        binc = np.bincount(codes, minlength=len(REASONS) + 1)
        for reason, code in CODE.items():
            c = int(binc[code])
            if not c:
                continue
            tally.counts[reason] += c
            if tally.room(reason) <= 0:
                continue
            for j in np.flatnonzero(codes == code)[: tally.room(reason)]:
                o = catalog.offers[int(r.rows[j])]
                market = judged.markets[mi]
                text = example(o, market, reason, judged.caps[mi][j], r.worst_rtt[j], r.hours[j])
                why = (
                    r.why_market.get((reason, int(j), mi))
                    or r.why_row.get((reason, int(j)))
                    or _shared_why(
                        policy, ctx, reason, o, market, judged.prices[mi][j], r.hours[j], nodes
                    )
                )
                tally.examples[reason].append(f"{text}: {why}" if why else text)


_SHARED_CODES = frozenset([0, *(CODE[r] for r in SHARED_RULES if r in CODE)])


def shared_rows(catalog: Catalog, r: Rows, judged: Judged, nodes: int) -> tuple[PlanRow, ...]:
    """Each candidate judged by a shared rule, as the placement it would be launched as."""
    out: list[PlanRow] = []
    for mi, market in enumerate(judged.markets):
        codes = judged.reasons[mi]
        for j in range(len(codes)):
            code = int(codes[j])
            if code not in _SHARED_CODES:
                continue
            price = float(judged.prices[mi][j])
            cap = float(judged.caps[mi][j])
            h = float(r.hours[j])
            p = Placement(
                offer=catalog.offers[int(r.rows[j])],
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
