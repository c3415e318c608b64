"""What the planner is told besides the policy and the catalog: :class:`PlanContext` (the
time, what the job and the account have seen). Its own module so that the planner's steps
can name it without importing the package that runs them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from provisioner.core.admission import Standing
from provisioner.core.measured import Measured
from provisioner.core.models import Reservation
from provisioner.core.quotas import Quota
from provisioner.core.views import CHANGEOVER_H, ZoneRisk
from provisioner.core.zone_priors import Key


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
