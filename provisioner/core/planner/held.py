"""The planner's held capacity: a ``reserved`` placement per reservation the policy allows,
usable now, that matches an offer passing the hard rules (judged at a marginal price of
zero); the rest counted under the first rule each breaks. Pure."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from policies.model import Policy
from provisioner.core.admission import over_budget as adm_over_budget
from provisioner.core.catalog import Catalog
from provisioner.core.models import Market, Offer, Placement, Reservation
from provisioner.core.planner.reasons import REASONS, Tally
from provisioner.core.planner.rowrules import ContextMasks, Rows
from provisioner.core.quotas import blocking
from provisioner.core.reserved import matches as reservation_matches
from provisioner.core.reserved import notice_at as reservation_notice
from provisioner.core.reserved import usable as reservation_usable

if TYPE_CHECKING:
    import numpy as np

    from provisioner.core.planner.context import PlanContext


def held_placements(
    policy: Policy,
    catalog: Catalog,
    ctx: PlanContext,
    r: Rows,
    masks: ContextMasks,
    first_s: np.ndarray,
    deadline: datetime | None,
    window_shut: bool,
    tally: Tally,
) -> list[Placement]:
    """A ``reserved`` placement per held reservation the policy allows, usable now, matching
    an offer of the catalog that passes the hard rules (the offer's row codes, then the rules
    judged per market at a marginal price of zero): ranked first, open-ended capacity before
    capacity that ends, later ends first. The rest are counted under the first rule each
    breaks (``reservation``: not named by the policy, not usable now, too small)."""
    at: dict[tuple[str, str], list[int]] = {}
    for j, i in enumerate(r.rows.tolist()):
        o = catalog.offers[int(i)]
        at.setdefault((o.provider, o.instance_type), []).append(j)
    out: list[tuple[tuple[float, int], Placement]] = []
    for res in ctx.reservations:
        why = _not_usable(policy, ctx, res)
        if why is not None:
            _reject(tally, "reservation", res, why)
            continue
        js = [
            j
            for j in at.get((res.provider, res.instance_type), [])
            if reservation_matches(
                res,
                res.provider,
                catalog.offers[int(r.rows[j])].region,
                catalog.offers[int(r.rows[j])].zone,
                res.instance_type,
            )
        ]
        if not js:
            _reject_unmatched(tally, catalog, res)
            continue
        j = js[0]
        o = catalog.offers[int(r.rows[j])]
        reason = _rule_broken(policy, ctx, r, masks, first_s, deadline, window_shut, j, o)
        if reason is not None:
            _reject(tally, reason, res, "the offer there breaks this rule")
            continue
        p = _placement(ctx, res, o, float(r.hours[j]), policy.resources.nodes)
        due = reservation_notice(res)
        end_s = math.inf if due is None else due.timestamp()
        out.append(((-end_s, -res.free), p))
    out.sort(key=lambda kp: kp[0])
    return [replace(p, rank=k) for k, (_, p) in enumerate(out, start=1)]


def _reject(tally: Tally, reason: str, r: Reservation, why: str) -> None:
    tally.counts[reason] += 1
    if tally.room(reason) > 0:
        tally.examples[reason].append(
            f"{r.provider}:{r.zone or r.region} {r.instance_type} reserved {r.id}: {why}"
        )


def _not_usable(policy: Policy, ctx: PlanContext, r: Reservation) -> str | None:
    """Why the reservation cannot take the job now, whatever the offer there (None: it can):
    not named by the policy, not usable now, too few free for the job's nodes."""
    if not policy.reservation_allowed(r.id):
        return "not among the policy's reservations"
    bad = reservation_usable(r, ctx.now, ctx.changeover_h)
    if bad is None and r.free < policy.resources.nodes:
        bad = f"{r.free} free, the job needs {policy.resources.nodes}"
    return bad


def _reject_unmatched(tally: Tally, catalog: Catalog, r: Reservation) -> None:
    """No candidate row matches it: its GPU is one the policy does not take (an offer of the
    catalog matches), or the catalog has no offer of its type there."""
    any_offer = any(
        reservation_matches(r, o.provider, o.region, o.zone, o.instance_type)
        for o in catalog.offers
    )
    _reject(
        tally,
        "gpu_model" if any_offer else "reservation",
        r,
        "its GPU is not one the policy takes"
        if any_offer
        else "no offer of its type there in the catalog",
    )


def _rule_broken(
    policy: Policy,
    ctx: PlanContext,
    r: Rows,
    masks: ContextMasks,
    first_s: np.ndarray,
    deadline: datetime | None,
    window_shut: bool,
    j: int,
    o: Offer,
) -> str | None:
    """The first rule the offer at row position ``j`` breaks as held capacity (marginal $0/h):
    its row rules, latency, the deadline, the total budget, capacity reported missing, the
    account's quota (held instances count against it), the windows."""
    import numpy as np

    code = int(r.base[j])
    if code:
        return REASONS[code - 1]
    h = float(r.hours[j])
    if r.latency_bad[j]:
        return "latency"
    if deadline is not None and ctx.pacing:
        left_h = (deadline - ctx.now).total_seconds() / 3600.0
        if left_h <= 0 or (not math.isnan(h) and h > left_h):
            return "deadline"
    if policy.budget.max_total is not None and ctx.pacing:
        broke = adm_over_budget(
            policy, ctx.standing, np.zeros(1), r.hours[j : j + 1], first_s[j : j + 1]
        )
        if bool(broke[0]):
            return "budget_total"
    if masks.unavailable[j]:
        return "unavailable"
    if ctx.quotas and blocking(ctx.quotas, o, Market.ON_DEMAND, policy.resources.nodes) is not None:
        return "quota"
    if window_shut:
        return "window"
    return None


def _placement(ctx: PlanContext, r: Reservation, o: Offer, h: float, nodes: int) -> Placement:
    """The held placement (unranked), with why: free capacity at a marginal $0/h, and when
    its end moves the job on."""
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
    return Placement(
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
