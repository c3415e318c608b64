"""decide()'s inputs: one contract, two sources, the same constants.

:func:`provisioner.core.decide.decide` reads a :class:`JobView` (the job as the store knows
it) and :class:`Observations` (what the providers say now). Two drivers build them:

* the daemon's reconciler, from the store, the provider's list and the checkpoint store
  (:mod:`provisioner.control.inputs`);
* the trace simulator, from a spot-availability trace (:mod:`provisioner.simulate.engine`).

Both fill every field below, and take the timings from the same place:

=============================  ===============================================================
``JobView.changeover_h``       :data:`CHANGEOVER_H` (launch + setup + restore), both drivers
``JobView.step_h``             :func:`step_h` of the real interval between decisions (the
                               reconciler's pass interval; the simulator's trace step)
``JobView.work_done_h``        checkpointed progress in hours
``JobView.current``            the latest attempt (:class:`AttemptView`), alive or not
``JobView.cooldowns``          zone cooldowns in force (:func:`cooldowns_in_force`: one
                               ending exactly now is over, :func:`cooldown_over`)
``JobView.agent``              the agent's last report (:class:`AgentReport`), or None
``JobView.cancel_requested``   the user asked to stop
``JobView.launch_failures``    consecutive launch failures another offer would not cure
``JobView.boot_s``             :data:`BOOT_S` (launch to a running agent), or the provider's
``JobView.setup_failures``     earlier attempts ended by a failed setup (the daemon only: a
                               trace has none)
``JobView.looks``              the look schedule per spot location
                               (:func:`provisioner.core.looks.schedule` of the spot events)
``JobView.launch_calls``       the launch calls sent in the last hour (the call budget)
``JobView.billing``            each cloud's billing rule (its facts; the sim's: AWS's)
``Observations.interruptions`` notices and preemptions for the job's instances, a draining
                               one's (overlap) included
``Observations.candidates``    the planner's ranked placements, both markets
``Observations.capacity_errors``  launches answered "no capacity" within
                               :data:`CAPACITY_ERRORS_WITHIN`
``Observations.spot_up_since`` per usable spot location, since when capacity is up: the
                               latest outage seen there (:func:`spot_up_since`), else the
                               driver's start (job submitted / window start)
``Observations.spot_history``  per spot location, what was seen there so far
                               (:class:`ZoneHistory`, built by :func:`zone_history` from the
                               same events in both drivers: the store's attempts, the
                               simulator's replayed prefix)
=============================  ===============================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from policies.model import Policy
from provisioner.core.models import Instance, InstanceState, Interruption, Market, Placement
from provisioner.core.states import AgentState

if TYPE_CHECKING:
    from provisioner.core.billing import Billing

Location = tuple[str, str]  # (provider, zone or region)
#: One launch call: (provider, when it was sent) (``JobView.launch_calls``; the call budget
#: of :mod:`provisioner.core.looks`).
Call = tuple[str, datetime]


@dataclass(frozen=True, slots=True)
class ZoneLooks:
    """A spot location's launches refused in a row (0: the latest launch there held) and the
    latest refusal's time (``JobView.looks``, built by :func:`provisioner.core.looks.schedule`)."""

    refused: int = 0
    last: datetime | None = None


@dataclass(frozen=True, slots=True)
class ZoneRisk:
    """A zone's risk from its priors, and the figures it came from (for ``plan``'s reasons;
    ``JobView.zone_priors``, built by :func:`provisioner.core.zone_priors.zone_risks`)."""

    risk: float | None  # None: only a volatility is known (it scales the zone's own risk)
    factor: float  # what the price volatility multiplies the risk by (1.0: none known)
    source: str
    # the share of the time the zone has spot capacity, as its placement scores say (a score
    # of s out of 10: (s - 0.5) / 10); None: no score known
    up_share: float | None = None

    def apply(self, base: float) -> float:
        return (base if self.risk is None else self.risk) * self.factor


#: Assumed changeover (launch, setup, restore) of a new instance, in hours: Can't Be Late's
#: d, the figure the cost benchmark is measured with. Daemon and simulator alike.
CHANGEOVER_H = 0.2
#: The shortest decision interval decide() is told (a pass cannot come back sooner).
MIN_STEP_S = 1.0
#: How recent a "no capacity" answer must be to count as no capacity now.
CAPACITY_ERRORS_WITHIN = timedelta(minutes=5)
#: How long a replacement takes from its launch to a running agent (``JobView.boot_s``): an
#: interruption notice with at least this long left is overlapped (the replacement launched
#: during the notice, :mod:`provisioner.core.overlap`). AWS's two-minute notice is; GCP's and
#: Azure's 30 s are not. A driver that knows better (the sim boots in about a second) says so.
BOOT_S = 60.0


def step_h(interval_s: float) -> float:
    """``JobView.step_h`` for decisions ``interval_s`` seconds apart."""
    return max(MIN_STEP_S, float(interval_s)) / 3600.0


def cooldown_over(until: datetime, now: datetime) -> bool:
    """Whether a zone cooldown ending at ``until`` is over at ``now``: it is at its end (one
    ending exactly now no longer keeps the zone away). The one rule for decide(), the
    daemon's store and pass, the planner's input and the simulator."""
    return until <= now


def cooldowns_in_force(
    cooldowns: Mapping[Location, datetime], now: datetime
) -> dict[Location, datetime]:
    """The cooldowns of ``cooldowns`` not over at ``now`` (:func:`cooldown_over`)."""
    return {loc: until for loc, until in cooldowns.items() if not cooldown_over(until, now)}


def spot_up_since(
    locations: Iterable[Location],
    outages: Mapping[Location, datetime],
    start: datetime,
    down: Iterable[Location] = (),
) -> dict[Location, datetime]:
    """Since when spot capacity has been up at each of ``locations``: the latest outage seen
    there (a preemption, a "no capacity" answer, a trace step without capacity), else
    ``start``; locations in ``down`` (no capacity now) are left out."""
    gone = set(down)
    return {
        loc: max(start, outages.get(loc, start))
        for loc in dict.fromkeys(locations)
        if loc not in gone
    }


@dataclass(frozen=True, slots=True)
class ZoneHistory:
    """What one spot location has shown so far: hours spot instances ran there, preemptions,
    and the outages seen to end (first sign of no capacity to the next spot launch) with
    their total hours. :mod:`provisioner.core.availability` turns it into estimates."""

    up_h: float = 0.0
    lost: int = 0
    down_h: float = 0.0
    recovered: int = 0


#: one observation at a spot location: (when, location, kind), kind one of ``up`` (a spot
#: instance launched there), ``stop`` (it was stopped), ``lost`` (preempted), ``refused``
#: (a launch answered "no capacity")
SpotEvent = tuple[datetime, Location, str]


def zone_history(events: Iterable[SpotEvent], now: datetime) -> dict[Location, ZoneHistory]:
    """Each location's :class:`ZoneHistory` from its events (taken in time order; an
    instance still running counts up to ``now``)."""
    up: dict[Location, float] = {}
    lost: dict[Location, int] = {}
    down: dict[Location, float] = {}
    rec: dict[Location, int] = {}
    running: dict[Location, datetime] = {}
    opened: dict[Location, datetime] = {}
    for at, loc, kind in sorted(events, key=lambda e: e[0]):
        if kind == "up":
            if loc in opened:
                down[loc] = down.get(loc, 0.0) + (at - opened.pop(loc)).total_seconds() / 3600
                rec[loc] = rec.get(loc, 0) + 1
            running[loc] = at
            continue
        if kind in ("stop", "lost") and loc in running:
            up[loc] = up.get(loc, 0.0) + (at - running.pop(loc)).total_seconds() / 3600
        if kind == "lost":
            lost[loc] = lost.get(loc, 0) + 1
        if kind in ("lost", "refused"):
            opened.setdefault(loc, at)
    for loc, since in running.items():
        up[loc] = up.get(loc, 0.0) + max(0.0, (now - since).total_seconds() / 3600)
    locs = {*up, *lost, *down, *rec, *opened}
    return {
        loc: ZoneHistory(up.get(loc, 0.0), lost.get(loc, 0), down.get(loc, 0.0), rec.get(loc, 0))
        for loc in locs
    }


@dataclass(frozen=True, slots=True)
class AttemptView:
    """One attempt (one instance) of the job, as recorded in the store."""

    attempt: int
    placement: Placement
    instance_id: str | None = None  # None: launch sent, instance not reported yet
    state: InstanceState | None = None  # last known state (None: not seen yet)
    launched_at: datetime | None = None  # when the launch was sent: the changeover starts
    ended_at: datetime | None = None  # when it stopped (preempted or terminated)
    last_checkpoint_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class AgentReport:
    """What the job's agent last wrote (its progress file): ``running``, ``done`` (the
    command exited 0 and its output is up), ``failed`` (it exited ``exit_code``) or
    ``setup-failed`` (it never started: see ``setup_message``)."""

    state: AgentState | None = None
    attempt: int | None = None  # the attempt the agent runs in
    exit_code: int | None = None
    updated_at: datetime | None = None
    #: ``setup-failed``: a step before the job (code, secrets, image, setup) failed; what,
    #: and the failure's fingerprint (the same on another VM for the same failure)
    setup_message: str = ""
    setup_fingerprint: str = ""


@dataclass(frozen=True, slots=True)
class JobView:
    """A job as the store knows it. Hours are on the job's instance type."""

    id: str
    policy: Policy
    submitted_at: datetime
    deadline: datetime | None = None
    work_total_h: float | None = None
    work_done_h: float = 0.0  # checkpointed progress
    restarts: int = 0  # relaunches after interruptions so far
    attempt: int = 0  # number of the latest attempt (0: none yet)
    spent_usd: float = 0.0
    current: AttemptView | None = None  # the latest attempt, alive or not
    cooldowns: Mapping[Location, datetime] = field(default_factory=dict)
    changeover_h: float = CHANGEOVER_H  # launch + setup + restore of a new instance
    step_h: float = 1.0 / 60.0  # how soon decide() will be called again
    checkpoint_on_notice: bool = True  # a preemption keeps the progress made up to it
    strategy: str | None = None  # None: chosen by the policy's market
    cancel_requested: bool = False  # the user asked to stop the job
    agent: AgentReport | None = None  # what the job's agent last reported (None: nothing)
    launch_failures: int = 0  # consecutive launch failures another offer would not cure
    last_launch_failure_at: datetime | None = None  # when the latest of those failed
    boot_s: float = BOOT_S  # launch to a running agent: a notice this long is overlapped
    #: fingerprints of the earlier attempts' setup failures, oldest first
    setup_failures: tuple[str, ...] = ()
    #: the look schedule per spot location (:func:`provisioner.core.looks.schedule`)
    looks: Mapping[Location, ZoneLooks] = field(default_factory=dict)
    #: launch calls of the last hour, (provider, sent at): the policy's call budget
    launch_calls: tuple[Call, ...] = ()
    #: each cloud's billing rule by provider (the cost of a look; absent: per second)
    billing: Mapping[str, Billing] = field(default_factory=dict)
    #: the current attempt's probe measured under ``resources.min_measured_fraction``: why
    #: ("" : it did not, or no probe yet); decide() replaces the instance and cools its zone
    probe_below: str = ""
    #: since when the current attempt's agent has seen every GPU idle (None: it has not);
    #: decide() stops the job after ``idle.duration`` where ``idle.action`` is ``stop``
    gpu_idle_since: datetime | None = None

    @classmethod
    def new(cls, id: str, policy: Policy, submitted_at: datetime, **kw: object) -> JobView:
        """A job view with deadline and work taken from the policy (override with ``kw``)."""
        kw.setdefault("deadline", policy.deadline_at(submitted_at))
        kw.setdefault("work_total_h", policy.job.compute_hours)
        return cls(id, policy, submitted_at, **kw)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class CapacityError:
    """A launch that the provider answered with "no capacity"."""

    provider: str
    location: str
    instance_type: str
    market: Market
    at: datetime


@dataclass(frozen=True, slots=True)
class Observations:
    """What the providers report now for this job."""

    instances: tuple[Instance, ...] = ()
    interruptions: tuple[Interruption, ...] = ()
    candidates: tuple[Placement, ...] = ()  # ranked by the planner, both markets
    capacity_errors: tuple[CapacityError, ...] = ()  # recent ones: treated as no capacity
    spot_up_since: Mapping[Location, datetime] = field(default_factory=dict)
    spot_history: Mapping[Location, ZoneHistory] = field(default_factory=dict)
    #: the clouds' availability priors (provisioner.core.zone_priors.zone_risks): a spot
    #: option's zone with no history starts from its prior's lifetime, not the default
    zone_priors: Mapping[tuple[str, str, str], ZoneRisk] = field(default_factory=dict)
    #: the spot price in effect now (USD/h) of the job's running spot instance, by (region,
    #: zone, instance type), where the caller holds it to the bid cap (``bid_cap.enforce:
    #: daemon``, provisioner.control.pricewatch); above the cap, decide() moves or stops it
    spot_prices: Mapping[tuple[str, str, str], float] = field(default_factory=dict)
