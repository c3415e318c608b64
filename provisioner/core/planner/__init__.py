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

The package, one step a module, in the order :func:`plan_offers` takes them:

* :mod:`~provisioner.core.planner.reasons`: the rejection reasons in rule order, their tally;
* :mod:`~provisioner.core.planner.rowrules`: the rules judged once per row (the GPU index,
  the row rules, the job's hours on each row, the caller's context);
* :mod:`~provisioner.core.planner.marketrules`: the rules judged per (row, market) (the bid
  cap, the budgets, the deadline, the windows, quotas), the rejections counted;
* :mod:`~provisioner.core.planner.ranking`: the eligible ones scored and ranked, the notes;
* :mod:`~provisioner.core.planner.held`: held capacity (reservations), ranked first;
* :mod:`~provisioner.core.planner.planrows`: per-row helpers (interconnect, measured speed,
  region verdicts, the preference score, each placement's reasons);
* :mod:`~provisioner.core.planner.tco_plan`: a sustained workload's phases placed by the
  planner and costed (:mod:`provisioner.core.tco`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from policies.gpus import gpu_specs
from policies.model import Policy
from provisioner.core.admission import PlanRow
from provisioner.core.catalog import Catalog
from provisioner.core.models import Market, Placement
from provisioner.core.planner import held as held_
from provisioner.core.planner import marketrules as mr
from provisioner.core.planner import ranking as rk
from provisioner.core.planner import rowrules as rr
from provisioner.core.planner.context import PlanContext
from provisioner.core.planner.planrows import PlanError
from provisioner.core.planner.reasons import REASONS, Tally
from provisioner.core.sizing import VRAMEstimate, estimate_vram

__all__ = ["Plan", "PlanContext", "PlanError", "Rejection", "plan_offers", "required_vram"]


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


def required_vram(policy: Policy) -> tuple[float | None, VRAMEstimate | None]:
    res = policy.resources
    est = estimate_vram(res.workload, res.gpu_count) if res.workload else None
    needs = [v for v in (res.min_vram_gb, est.total_gb if est else None) if v is not None]
    return (max(needs) if needs else None), est


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
    ctx = context
    specs = gpu_specs()
    need_vram, vram_est = required_vram(policy)
    markets = [m for m, ok in ((Market.SPOT, policy.allows_spot), (Market.ON_DEMAND, policy.allows_on_demand)) if ok]  # fmt: skip
    tally = Tally()
    # the rules judged once per row, then per (row, market)
    rows = rr.gpu_rows(policy, catalog, specs, need_vram, markets, tally)
    deadline = policy.deadline_at(ctx.submitted_at or ctx.now)
    r = rr.gather(policy, catalog, rows, specs)
    rr.judge_rows(policy, catalog, ctx, r)
    rr.size_rows(policy, ctx, r, specs)
    masks = rr.context_masks(catalog, ctx, r, markets, policy.resources.nodes)
    first_s = rr.first_charge_s(catalog, ctx, r)
    shut = mr.window_shut(policy, ctx)
    judged = mr.judge_markets(policy, catalog, ctx, r, masks, markets, deadline, first_s, shut)
    rows_kept = mr.shared_rows(catalog, r, judged, policy.resources.nodes) if with_rows else ()
    mr.tally_rejections(policy, catalog, ctx, r, judged, tally)
    # the eligible ranked, held capacity first
    placements = rk.rank(policy, catalog, ctx, r, judged, top)
    held: list[Placement] = []
    if policy.allows_reserved and ctx.reservations:
        held = held_.held_placements(policy, catalog, ctx, r, masks, first_s, deadline, shut, tally)
        placements = rk.held_first(held, placements, top)
    n_held = len(ctx.reservations) if policy.allows_reserved else 0
    return Plan(
        policy=policy,
        placements=placements,
        rejections={
            k: Rejection(k, tally.counts[k], tuple(tally.examples[k]))
            for k in REASONS
            if tally.counts[k]
        },
        eligible=rk.eligible_count(judged) + len(held),
        candidates=len(catalog.offers) * len(markets) + n_held,
        required_vram_gb=need_vram,
        vram_estimate=vram_est,
        deadline=deadline,
        notes=rk.notes(policy, placements, ctx.now),
        rows=rows_kept,
    )
