"""The sim server's options (:class:`SimConfig`) and its API error (:class:`SimError`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from provisioner.core.rebalance import RebalanceModel
from provisioner.errors import CloudError


class SimError(CloudError):
    """An API error in the mimicked cloud's words: HTTP status, kind (ErrorKind value), code."""

    def __init__(self, status: int, kind: str, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.status, self.kind, self.code, self.message = status, kind, code, message

    def as_dict(self) -> dict[str, Any]:
        return {"error": {"kind": self.kind, "code": self.code, "message": self.message}}


@dataclass
class SimConfig:
    """Options that shape the market and the timing (sent by the adapter, kept in config.json)."""

    seconds_per_hour: float = 60.0  # one simulated hour lasts this many real seconds
    seed: int = 0
    mtbp_hours: float | None = 12.0  # mean simulated hours between losses of a zone; None: never
    outage_hours: float = 0.5  # mean simulated hours a zone stays unavailable
    traces: dict[str, str] = field(default_factory=dict)  # zone -> trace file (JSON or CSV)
    trace_offset_hours: float = 0.0  # where in the traces simulated time 0 falls
    #: demo: the first spot instance of a job goes after N real seconds; None or 0: never
    preempt_first_after_s: float | None = None
    demo_outage_s: float = 60.0  # demo: its zone then has no capacity for N real seconds
    notice_floor_s: float = 5.0  # a notice lasts at least this many real seconds
    idle_exit_s: float = 600.0  # the server exits after this long idle with nothing alive
    #: with no API call for this long, the server terminates every instance and exits, live
    #: ones too (nobody is supervising them); None: never
    abandon_exit_s: float | None = 3600.0
    terminate_grace_s: float = 2.0  # SIGTERM, then SIGKILL after this long, on terminate
    #: True: an ended instance's sandbox (its work/, the "disk") stays, for a test to look in;
    #: False: it goes once nothing of the instance runs (its record and agent.log stay)
    keep_sandboxes: bool = False
    epoch: float = 0.0  # real time of simulated time 0 (set when the market is (re)defined)
    #: instance type -> share of its datasheet its simulated GPUs deliver (what the agent's
    #: probe reports on the sim, which has no GPU); a type not named reports nothing measured
    gpu_speed: dict[str, float] = field(default_factory=dict)
    #: the notice (simulated seconds) the market serves when it takes capacity back; None: the
    #: mimicked cloud's (120 s on AWS...); 0: none, the instance goes at once
    market_notice_s: float | None = None
    #: False: an instance is a record only (no agent, no process group): for drivers that play
    #: the job themselves (the equivalence test writes its progress on a virtual clock)
    run_agent: bool = True
    #: whether the API reports the notices it serves on the metadata endpoint: None, as the
    #: mimicked cloud's API does (``CloudFacts.notice_sources.api_read``: of the five, only
    #: Alibaba's, whose Recycling lock is the notice); True, every one; False, none
    api_notices: bool | None = None
    #: a virtual clock (epoch seconds), moved only by ``POST /v1/clock``; None: the real clock.
    #: Under it the market, launches, notices, preemptions and billing all read this time.
    clock: float | None = None
    #: early signals: AWS's rebalance recommendation, served on an AWS-mimicking spot
    #: instance's metadata from the market's outages (provisioner.core.rebalance, a model):
    #: this many simulated seconds before its zone's capacity goes (0: none served), before
    #: that share of outages, and false alarms (not followed by one) at this rate per zone
    rebalance_lead_s: float = 600.0
    rebalance_precede_p: float = 0.8
    rebalance_false_per_day: float = 0.5
    #: the capacity the account holds: reservations and capacity blocks (providers/sim/held.py
    #: checks them: :func:`providers.sim.held.config_of`)
    reservations: list[dict[str, Any]] = field(default_factory=list)

    MARKET_KEYS = (
        "seconds_per_hour",
        "seed",
        "mtbp_hours",
        "outage_hours",
        "traces",
        "trace_offset_hours",
        "rebalance_lead_s",
        "rebalance_precede_p",
        "rebalance_false_per_day",
    )

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> SimConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise SimError(400, "invalid", "InvalidParameter", f"unknown option(s): {unknown}")
        cfg = cls(**doc)
        if cfg.seconds_per_hour <= 0:
            raise SimError(400, "invalid", "InvalidParameter", "seconds_per_hour must be > 0")
        if cfg.preempt_first_after_s is not None:
            if cfg.preempt_first_after_s < 0:
                raise SimError(
                    400,
                    "invalid",
                    "InvalidParameter",
                    "preempt_first_after_s must be >= 0 (0: no demo preemption)",
                )
            cfg.preempt_first_after_s = float(cfg.preempt_first_after_s) or None  # 0: off
        if cfg.abandon_exit_s is not None and cfg.abandon_exit_s <= 0:
            raise SimError(400, "invalid", "InvalidParameter", "abandon_exit_s must be > 0")
        if cfg.market_notice_s is not None and cfg.market_notice_s < 0:
            raise SimError(400, "invalid", "InvalidParameter", "market_notice_s must be >= 0")
        try:
            cfg.rebalance_model()
        except ValueError as exc:
            raise SimError(400, "invalid", "InvalidParameter", str(exc)) from None
        return cfg

    def rebalance_model(self) -> RebalanceModel:
        return RebalanceModel(
            self.rebalance_lead_s, self.rebalance_precede_p, self.rebalance_false_per_day, self.seed
        )

    def market_options(self) -> dict[str, Any]:
        """What :class:`providers.sim.market.Market` is made of."""
        return {
            "traces": self.traces,
            "seed": self.seed,
            "mtbp_hours": self.mtbp_hours,
            "outage_hours": self.outage_hours,
            "rebalance": self.rebalance_model(),
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def time_scale(self) -> float:
        """Simulated seconds per real second."""
        return 3600.0 / self.seconds_per_hour
