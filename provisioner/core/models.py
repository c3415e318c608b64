"""The nouns of the field, as plain data.

Every layer speaks these types: the catalog holds :class:`Offer` rows, the planner returns
:class:`Placement`, providers take a :class:`LaunchRequest` and answer with :class:`Instance`
and :class:`Interruption`. They carry no behaviour beyond small derived values, so the pure
core (planner, decide) can be tested without any cloud or database.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class Market(str, enum.Enum):
    """How capacity is bought."""

    SPOT = "spot"
    ON_DEMAND = "on-demand"
    #: capacity the account holds (a reservation, a capacity block, a calendar booking):
    #: already paid for, so its marginal price is zero; never preempted, but a block ends
    RESERVED = "reserved"

    def __str__(self) -> str:
        return self.value


class ReservationKind(str, enum.Enum):
    """What sort of held capacity a :class:`Reservation` is."""

    #: open-ended capacity billed at the on-demand rate whether used or not (AWS On-Demand
    #: Capacity Reservation, GCP reservation, Azure capacity reservation group, Alibaba
    #: private pool / elasticity assurance)
    ON_DEMAND = "on-demand"
    #: GPUs booked for a fixed date range and paid upfront (AWS Capacity Blocks for ML): the
    #: cloud ends the instances at the block's end
    CAPACITY_BLOCK = "capacity-block"
    #: a GCP calendar-mode future reservation: booked ahead for 1-90 days, ends at its end
    CALENDAR = "calendar"

    def __str__(self) -> str:
        return self.value

    @property
    def ends(self) -> bool:
        """Whether the cloud takes the capacity back at a known end time."""
        return self is not ReservationKind.ON_DEMAND


@dataclass(frozen=True, slots=True)
class Reservation:
    """Capacity the account holds in one zone for one instance type, as the cloud lists it.

    ``free`` is how many more instances it takes now. ``ends_at`` is when the cloud takes it
    back (None: open-ended); ``starts_at`` when it becomes usable (a block booked ahead).
    ``held_usd_per_hour`` is what one instance-hour of it costs the team whether used or not
    (the reservation's rate; a block's upfront price over its hours), None where unknown: the
    marginal price of a launch into it is zero either way.
    """

    provider: str
    id: str
    region: str
    zone: str
    instance_type: str
    kind: ReservationKind
    total: int
    free: int
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    held_usd_per_hour: float | None = None
    #: True: only launches that name it land in it (AWS "targeted", GCP
    #: specificReservationRequired); False: any matching launch may use it ("open"/automatic)
    targeted: bool = True
    #: the cloud's own name or ARN where it differs from ``id`` (GCP: the reservation's
    #: self link path, Azure: the capacity reservation group's resource id)
    ref: str = ""
    #: where the adapter knows the end margins better than the clouds' table
    #: (:data:`provisioner.core.reserved.END_MARGINS`): seconds before ``ends_at`` the cloud
    #: warns, and begins to take the instances back (the sim, on its own time scale); None:
    #: the table's
    warn_s: float | None = None
    stop_s: float | None = None

    def usable_at(self, now: datetime) -> bool:
        """Started, not ended, and with room for one more instance."""
        started = self.starts_at is None or self.starts_at <= now
        return started and self.free > 0 and (self.ends_at is None or now < self.ends_at)

    def as_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "id": self.id,
            "region": self.region,
            "zone": self.zone,
            "instance_type": self.instance_type,
            "kind": self.kind.value,
            "total": self.total,
            "free": self.free,
            "starts_at": None if self.starts_at is None else self.starts_at.isoformat(),
            "ends_at": None if self.ends_at is None else self.ends_at.isoformat(),
            "held_usd_per_hour": self.held_usd_per_hour,
            "targeted": self.targeted,
        }


class InstanceState(str, enum.Enum):
    """Instance states, normalised across clouds (the raw one is kept on the instance)."""

    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    TERMINATED = "terminated"
    PREEMPTED = "preempted"

    def __str__(self) -> str:
        return self.value

    @property
    def alive(self) -> bool:
        return self in (InstanceState.PENDING, InstanceState.RUNNING)


@dataclass(frozen=True, slots=True)
class Region:
    """A cloud region with where it is and which legal jurisdictions it falls under."""

    provider: str
    code: str
    city: str
    country: str
    jurisdictions: frozenset[str]
    lat: float
    lon: float
    #: the cloud's own name for it ("US East (N. Virginia)", "East US 2")
    name: str = ""

    def in_any(self, tags: set[str] | frozenset[str]) -> bool:
        """True when the region carries any of ``tags`` (jurisdiction tags or ISO countries)."""
        return bool(tags & self.jurisdictions) or self.country in tags


@dataclass(frozen=True, slots=True)
class Offer:
    """An instance type in a zone (or a whole region, when ``zone`` is empty) at a price."""

    provider: str
    region: str
    zone: str
    instance_type: str
    gpu: str
    gpu_count: int
    vcpus: float
    memory_gib: float
    price: float | None  # on-demand USD per instance-hour
    spot_price: float | None  # USD per instance-hour; None: no spot market known
    price_date: str = ""
    interruption_band: str = ""  # AWS Spot Advisor style: "<5%", "5-10%", ... or ""

    def price_for(self, market: Market) -> float | None:
        """The marginal price per instance-hour on ``market``: held capacity's is zero (it is
        paid for whether used or not)."""
        if market is Market.RESERVED:
            return 0.0
        return self.spot_price if market is Market.SPOT else self.price

    @property
    def location(self) -> str:
        return self.zone or self.region


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """What a placement is expected to cost once interruptions are counted (USD, hours).

    Filled by the faces (``provisioner plan``) from the simulator's model
    (:mod:`provisioner.simulate.estimate`): expected billed hours on spot and on the on-demand
    fallback, restarts, the work lost to them, the changeovers (all billed, inside the hours),
    and the spread of the cost over the simulated runs. ``mean_usd`` is
    ``spot_usd + on_demand_usd``. ``p_miss_deadline`` is None when the job has no deadline.
    """

    mean_usd: float
    p10_usd: float
    p90_usd: float
    p_miss_deadline: float | None
    spot_h: float  # expected billed spot hours (changeovers, lost work and rounding included)
    on_demand_h: float  # expected billed on-demand hours (the fallback)
    restarts: float  # expected relaunches after an interruption (one per preemption)
    lost_work_h: float  # expected work redone after preemptions (since the last checkpoint)
    changeover_h: float  # expected hours of changeover (launch, setup, restore), billed
    spot_usd: float = 0.0
    on_demand_usd: float = 0.0
    samples: int = 0  # simulated runs behind the figures (0: computed exactly)
    prior: str = ""  # where the interruption rates came from (band, default, trace)
    # how sure: the mean absolute error of ``mean_usd`` per job measured for this prior on
    # recorded traces, held out (a fraction; None: not measured, e.g. on-demand, exact)
    error: float | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__slots__:
            v = getattr(self, name)
            out[name] = round(v, 4) if isinstance(v, float) else v
        return out


@dataclass(frozen=True, slots=True)
class Placement:
    """An offer chosen for a job on a market, with what it costs and why it ranks where it does."""

    offer: Offer
    market: Market
    price_per_hour: float
    bid_cap_per_hour: float | None
    score: float
    rank: int = 0
    est_rtt_ms: float | None = None
    est_hours: float | None = None
    est_job_cost: float | None = None
    tflops_per_dollar: float | None = None
    reasons: tuple[str, ...] = ()
    #: the interruption-aware estimate (None: not estimated, e.g. no work estimate)
    estimate: CostEstimate | None = None
    #: instances launched together (a gang, issue 10): ``price_per_hour`` and the bid cap are
    #: per node (each node's launch carries the cap); ``est_job_cost`` is the whole gang's
    nodes: int = 1
    #: the held capacity a ``reserved`` placement launches into (None on spot and on-demand);
    #: its ``price_per_hour`` is the marginal price, zero
    reservation: Reservation | None = None

    @property
    def gang_price_per_hour(self) -> float:
        """What one hour of the whole placement costs (every node)."""
        return self.price_per_hour * self.nodes

    def as_dict(self) -> dict[str, Any]:
        o = self.offer
        return {
            "rank": self.rank,
            "nodes": self.nodes,
            "gang_price_per_hour": round(self.gang_price_per_hour, 6),
            "provider": o.provider,
            "region": o.region,
            "zone": o.zone,
            "instance_type": o.instance_type,
            "gpu": o.gpu,
            "gpu_count": o.gpu_count,
            "vcpus": o.vcpus,
            "memory_gib": o.memory_gib,
            "market": self.market.value,
            "price_per_hour": round(self.price_per_hour, 6),
            "on_demand_price_per_hour": o.price,
            "bid_cap_per_hour": None
            if self.bid_cap_per_hour is None
            else round(self.bid_cap_per_hour, 6),
            "price_date": o.price_date,
            "interruption_band": o.interruption_band or None,
            "est_rtt_ms": None if self.est_rtt_ms is None else round(self.est_rtt_ms, 1),
            "est_hours": None if self.est_hours is None else round(self.est_hours, 3),
            "est_job_cost": None if self.est_job_cost is None else round(self.est_job_cost, 2),
            "tflops_per_dollar": None
            if self.tflops_per_dollar is None
            else round(self.tflops_per_dollar, 3),
            "score": round(self.score, 6),
            "reasons": list(self.reasons),
            "estimate": None if self.estimate is None else self.estimate.as_dict(),
            "reservation": None if self.reservation is None else self.reservation.as_dict(),
        }


@dataclass(frozen=True, slots=True)
class Instance:
    """A VM as a provider reports it."""

    id: str
    provider: str
    region: str
    zone: str
    instance_type: str
    market: Market
    state: InstanceState
    raw_state: str = ""
    state_reason: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    launched_at: datetime | None = None
    price_per_hour: float | None = None
    public_ip: str | None = None
    private_ip: str | None = None
    #: the job and attempt the instance was launched for (from its tags), read once: every
    #: pass groups thousands of instances by them; ``node`` its rank in a gang (0 alone)
    job_id: str | None = field(init=False, repr=False, compare=False)
    attempt: int | None = field(init=False, repr=False, compare=False)
    node: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        value = self.tags.get(TAG_ATTEMPT)
        node = self.tags.get(TAG_NODE)
        object.__setattr__(self, "job_id", self.tags.get(TAG_JOB))
        object.__setattr__(
            self, "attempt", int(value) if value is not None and value.isdigit() else None
        )
        object.__setattr__(self, "node", int(node) if node is not None and node.isdigit() else 0)


@dataclass(frozen=True, slots=True)
class Interruption:
    """A spot interruption: a notice served to the VM, or a preemption seen by the API."""

    instance_id: str
    provider: str
    zone: str
    kind: str  # "notice" | "preempted" | "rebalance"
    at: datetime
    deadline: datetime | None = None  # when the capacity goes away, where the notice says
    raw: str = ""


@dataclass(frozen=True)
class WheelLink:
    """The running provisioner's wheel as a launch carries it (provisioner.agentwheel): where
    the boot script fetches it (a URL that reads that one object until ``expires``), its
    sha256 and its file name."""

    url: str
    sha256: str
    filename: str
    expires: datetime

    def __repr__(self) -> str:  # never the URL: it reads the object until it expires
        return f"WheelLink({self.filename}, sha256={self.sha256[:12]}, expires={self.expires})"


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """What to start, where, on which market, capped at what price, under which token."""

    job_id: str
    attempt: int
    offer: Offer
    market: Market
    #: the spot cap the launch is held to (the adapter refuses a live price above it where it
    #: reads one before launching)
    bid_cap_per_hour: float | None = None
    #: whether the cap goes on the wire as the cloud's maximum price (``bid_cap.enforce:
    #: cloud``); False: no maximum price is sent (the cloud's uncapped bid, providers/facts.py
    #: BidFacts) and the daemon holds the running instance to the cap
    cap_on_wire: bool = True
    image: str | None = None
    disk_gb: int = 100
    user_data: str = ""
    extra_tags: dict[str, str] = field(default_factory=dict)
    ssh_key_name: str | None = None
    #: What the node agent runs (see provisioner.agent.spec): adapters render it into the
    #: bootstrap script (providers.bootstrap) when ``user_data`` is empty; sim starts it.
    job_spec: dict[str, Any] | None = None
    #: A gang (issue 10): this launch is node ``node`` of ``nodes``, all with one attempt.
    node: int = 0
    nodes: int = 1
    #: The id :meth:`providers.capabilities.PlacementGroups.ensure_placement_group` returned:
    #: the node goes into that group (None: no placement construct)
    placement_group: str | None = None
    #: An RDMA network asked for: "efa" (AWS: the node gets an EFA interface), "infiniband"
    #: or "rdma" (the instance type carries it; nothing more to ask), "" none
    fabric: str = ""
    #: The running provisioner's wheel in the job's checkpoint store, linked for this launch
    #: (provisioner.agentwheel): the boot script installs it instead of ``package_spec``;
    #: None: the provider options name the package, or the image has it
    agent_wheel: WheelLink | None = None
    #: ``market`` reserved: the held capacity to launch into (the adapter targets it with the
    #: cloud's own fields: AWS CapacityReservationSpecification or the capacity-block market,
    #: GCP reservationAffinity, Azure capacityReservation)
    reservation: Reservation | None = None

    @property
    def token(self) -> str:
        """Idempotency token derived from (job, attempt) and, in a gang, the node: the same
        launch always carries it."""
        return launch_token(self.job_id, self.attempt, self.node if self.nodes > 1 else None)

    @property
    def name(self) -> str:
        """A VM name usable on every cloud (lowercase letters, digits and dashes, <= 63)."""
        return self.token

    @property
    def tags(self) -> dict[str, str]:
        tags = {TAG_MANAGED: "true", TAG_JOB: self.job_id, TAG_ATTEMPT: str(self.attempt)}
        if self.nodes > 1:
            tags[TAG_NODE] = str(self.node)
            tags[TAG_NODES] = str(self.nodes)
        tags.update(self.extra_tags)
        return tags


TAG_MANAGED = "provisioner-managed"
TAG_JOB = "provisioner-job"
TAG_ATTEMPT = "provisioner-attempt"
TAG_NODE = "provisioner-node"  # a gang node's rank (0 is the one that checkpoints)
TAG_NODES = "provisioner-nodes"  # how many nodes its gang has


def launch_token(job_id: str, attempt: int, node: int | None = None) -> str:
    """``prov-<job>-a<attempt>`` (``-n<node>`` for a gang's node): lowercase, at most 63
    characters, stable for (job, attempt, node)."""
    safe = "".join(c if c.isalnum() else "-" for c in job_id.lower()).strip("-")
    base = f"prov-{safe[:48]}-a{attempt}"
    return base if node is None else f"{base}-n{node}"


def placement_group_name(job_id: str, attempt: int) -> str:
    """The name of a gang attempt's placement group: its (job, attempt) token, so that a
    crash and a second ``ensure_placement_group`` find the same group."""
    return launch_token(job_id, attempt)
