"""The planner's eligible candidates scored and ranked into placements (the preference score
of :func:`provisioner.core.planner.planrows.score_rows`, ties by price), held capacity put
first, and the plan's notes. Pure."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from policies.model import Policy
from provisioner.core.catalog import Catalog
from provisioner.core.models import Market, Placement
from provisioner.core.network import SPREAD_ONLY_GROUPS
from provisioner.core.planner.marketrules import Judged
from provisioner.core.planner.planrows import placement_reasons, score_rows
from provisioner.core.planner.rowrules import Rows
from provisioner.core.zone_priors import risk_column

if TYPE_CHECKING:
    import numpy as np

    from provisioner.core.planner.context import PlanContext


def eligible_count(judged: Judged) -> int:
    import numpy as np

    return int(sum(len(np.flatnonzero(codes == 0)) for codes in judged.reasons))


def rank(
    policy: Policy,
    catalog: Catalog,
    ctx: PlanContext,
    r: Rows,
    judged: Judged,
    top: int | None,
) -> list[Placement]:
    """The eligible candidates (no rule broken), best ``top`` first: lowest score, then
    lowest price."""
    import numpy as np

    elig_j: list[np.ndarray] = [np.flatnonzero(codes == 0) for codes in judged.reasons]
    if not sum(len(e) for e in elig_j):
        return []
    nodes = policy.resources.nodes
    j_all = np.concatenate(elig_j)
    m_all = np.concatenate([np.full(len(e), mi) for mi, e in enumerate(elig_j)])
    price_all = np.concatenate([judged.prices[mi][e] for mi, e in enumerate(elig_j)])
    cap_all = np.concatenate([judged.caps[mi][e] for mi, e in enumerate(elig_j)])
    hours_all = r.hours[j_all]
    cost = _job_cost(price_all, hours_all, nodes)
    rtt_all = r.mean_rtt[j_all]
    is_spot = np.asarray([judged.markets[m] is Market.SPOT for m in m_all], dtype=bool)
    risk_all = risk_column(
        catalog.columns.band_risk[r.rows][j_all], r.rows[j_all], catalog.offers, ctx.priors
    )
    score, tpd = score_rows(policy, cost, price_all, rtt_all, risk_all, is_spot, r.tflops[j_all])
    k = len(score) if top is None else min(top, len(score))
    part = np.argpartition(score, k - 1)[:k] if k < len(score) else np.arange(len(score))
    order = part[np.lexsort((price_all[part], score[part]))]
    placements: list[Placement] = []
    for place, q in enumerate(order, start=1):
        j = int(j_all[q])
        market = judged.markets[int(m_all[q])]
        cap_q = float(cap_all[q])
        h = float(hours_all[q])
        price_q = float(price_all[q])
        reasons_txt = placement_reasons(
            market,
            price_q,
            cap_q,
            nodes,
            policy.resources.interconnect.inter_node,
            r.measured_at.get(j),
            float(r.tflops[j]),
            float(r.speed[j]),
        )
        placements.append(
            Placement(
                offer=catalog.offers[int(r.rows[j])],
                market=market,
                price_per_hour=price_q,
                bid_cap_per_hour=cap_q if math.isfinite(cap_q) else None,
                score=float(score[q]),
                rank=place,
                est_rtt_ms=None if math.isnan(rtt_all[q]) else float(rtt_all[q]),
                est_hours=None if math.isnan(h) else h,
                est_job_cost=None if math.isnan(h) else h * price_q * nodes,
                tflops_per_dollar=float(tpd[q]) if math.isfinite(tpd[q]) and tpd[q] > 0 else None,
                reasons=tuple(reasons_txt),
                nodes=nodes,
            )
        )
    return placements


def _job_cost(price: np.ndarray, hours: np.ndarray, nodes: int) -> np.ndarray:
    """What each candidate costs: the job where sized (price × hours), else the hour; with
    some sized, the unsized ones count as twice the dearest sized job."""
    import numpy as np

    cost = np.where(np.isnan(hours), price, price * hours) * nodes
    if not np.isnan(hours).all():  # compare jobs where sized; unsized rows fall back
        cost = np.where(np.isnan(hours), np.nan, cost)
        cost = np.where(
            np.isnan(cost), np.nanmax(cost) * 2 if np.isfinite(np.nanmax(cost)) else 1.0, cost
        )
    return cost


def held_first(
    held: list[Placement], placements: list[Placement], top: int | None
) -> list[Placement]:
    """Held capacity ranked before the rest (the rest's ranks moved down), ``top`` kept (and
    every held one)."""
    if not held:
        return placements
    placements = list(placements)
    for place, p in enumerate(placements, start=len(held) + 1):
        placements[place - len(held) - 1] = replace(p, rank=place)
    placements = held + placements
    if top is not None:
        placements = placements[: max(top, len(held))]
    return placements


def notes(policy: Policy, placements: list[Placement], now: datetime) -> tuple[str, ...]:
    """What the plan should say beside its placements: a gang on spread-only placement
    groups, the policy's windows shut now."""
    out: list[str] = []
    spread = (
        sorted({p.offer.provider for p in placements} & SPREAD_ONLY_GROUPS)
        if policy.resources.nodes > 1
        else []
    )
    for provider in spread:
        out.append(
            f"a gang on {provider} has no proximity guarantee: its placement groups only spread "
            "instances apart (the nodes share a zone)"
        )
    if policy.windows:
        from policies.cron import in_window, next_window_start

        wins = [(win.cron, win.duration) for win in policy.windows]
        if not in_window(wins, now):
            nxt = next_window_start(wins, now)
            out.append(
                f"outside the policy's time windows; next opens {nxt.isoformat() if nxt else 'never'}"
            )
    return tuple(out)
