"""The job being simulated and what a run of it cost: plain data shared by every simulator.

The model (the Can't Be Late model, made discrete): time advances in steps of ``step_s``;
at the start of each step the strategy picks a market (spot in some zone, on-demand, or
nothing). Spot capacity is known per step from the trace (a zone is either there for the
whole step or not); a spot instance whose zone goes away is preempted at the step boundary.
Every new instance (first launch, restart after a preemption, a switch of market or zone)
first spends the changeover ``overhead_s`` (launch, setup, restore) making no progress, but
billed. The job is done when ``work_s`` of progress is made; billing stops then. With a
checkpoint interval, a preemption also loses the progress made since the last checkpoint.

A gang (``nodes`` > 1, issue 10) is simulated as the one unit ``decide()`` sees after
:func:`provisioner.core.gang.fold`: its zone has spot capacity while the trace shows at least
``nodes`` instances there (:meth:`provisioner.simulate.traces.Trace.available_on`), losing any
node preempts the whole gang (one loss of the work since the checkpoint, one changeover), and
every hour is billed ``nodes`` times, spot and on-demand alike (the prices stay per node, as
a :class:`~provisioner.core.models.Placement`'s do).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from provisioner.core.billing import PER_SECOND, Billing
from provisioner.core.rebalance import RebalanceModel

P3_2XLARGE_ON_DEMAND = 3.06  # USD/h, us-east-1/us-west-2 (SkyPilot catalog, shared/data)
P3_2XLARGE_SPOT = 0.97  # USD/h, the spot price used for the Can't Be Late figures
MAX_NODES = 64  # the policy's resources.nodes allows 1..64


def check_nodes(nodes: object) -> int:
    """``nodes`` as a gang size (1..:data:`MAX_NODES`), or a ValueError that says so."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"nodes must be a whole number from 1 to {MAX_NODES}, not {nodes!r}")
    return nodes


@dataclass(frozen=True)
class Scenario:
    """A job: work, deadline (from the window start), changeover, step, prices (per node),
    and its gang size ``nodes`` (billed ``nodes`` times)."""

    work_s: float
    deadline_s: float
    overhead_s: float
    step_s: float
    price_on_demand: float = P3_2XLARGE_ON_DEMAND
    price_spot: float = P3_2XLARGE_SPOT
    margin_s: float = 0.0
    checkpoint_s: float = 0.0  # 0: progress is saved continuously (or on the notice)
    #: the interruption notice: capacity that goes at a step is served a notice then and the
    #: instance goes ``notice_s`` later (0: at once, at the step boundary)
    notice_s: float = 0.0
    boot_s: float = 60.0  # launch to a running agent (decide()'s JobView.boot_s)
    nodes: int = 1  # a gang of this many instances, launched, lost and billed together
    #: a switch from a running instance is made before break (decide() does, for one
    #: instance and for a gang): False models the old order (stop, then launch) in the replay
    #: and the optimum only, for comparison
    make_before_break: bool = True
    #: early signals: AWS's rebalance recommendation modelled from the trace (its lead time,
    #: how often one precedes an outage, false alarms: provisioner.core.rebalance), on which
    #: decide() may look elsewhere before the notice; None: none served
    rebalance: RebalanceModel | None = None
    #: launch calls per hour at most (the policy's ``restart.launch_calls_per_hour``; the
    #: engine reads the policy's, the replay this)
    launch_calls_per_hour: int = 120
    #: the cloud's billing rule: what a look costs (decide()'s ``JobView.billing``); the
    #: default bills per second, as the model does
    billing: Billing = PER_SECOND

    def __post_init__(self) -> None:
        check_nodes(self.nodes)
        if self.step_s <= 0:
            raise ValueError("step must be positive")
        if self.work_s <= 0 or self.deadline_s <= 0:
            raise ValueError("work and deadline must be positive")
        if self.overhead_s < 0:
            raise ValueError("the changeover must not be negative")

    @property
    def window_steps(self) -> int:
        """Steps up to the deadline (rounded up: the last step may straddle it)."""
        return int(np.ceil(self.deadline_s / self.step_s - 1e-9))

    @property
    def integral(self) -> bool:
        """Work, deadline and changeover are whole numbers of steps (the optimum needs it)."""
        return all(
            abs(v / self.step_s - round(v / self.step_s)) < 1e-9
            for v in (self.work_s, self.deadline_s, self.overhead_s)
        )

    @property
    def on_demand_cost(self) -> float:
        """Cost of the job on on-demand only: one changeover plus the work, every node."""
        return self.price_on_demand * self.nodes * (self.work_s + self.overhead_s) / 3600.0


@dataclass
class RunStats:
    """Per-window outcome of a simulated policy (arrays, one value per window)."""

    cost: np.ndarray
    od_hours: np.ndarray  # billed on-demand hours
    spot_hours: np.ndarray  # billed spot hours
    od_work_hours: np.ndarray  # progress made on on-demand
    spot_work_hours: np.ndarray  # progress made on spot
    finish_h: np.ndarray  # hours from the window start to completion
    missed: np.ndarray  # bool: finished after the deadline
    launches: np.ndarray
    preemptions: np.ndarray
    lost_work_hours: np.ndarray  # progress lost to preemptions (checkpoint interval)
    #: hours two instances were billed at once (a switch made before break, or a notice
    #: overlapped), and spot launches refused for capacity (looks that cost nothing)
    overlap_hours: np.ndarray
    refusals: np.ndarray

    @property
    def restarts(self) -> np.ndarray:
        """Relaunches after an interruption: one per preemption, the daemon's ``restarts``
        and the engine's. A launch the strategy chose (a switch of market or zone) pays a
        changeover but is no restart; ``launches`` counts every one."""
        return self.preemptions.copy()

    def __len__(self) -> int:
        return len(self.cost)

    def row(self, i: int) -> dict[str, Any]:
        return {
            "cost": float(self.cost[i]),
            "on_demand_hours": float(self.od_hours[i]),
            "spot_hours": float(self.spot_hours[i]),
            "on_demand_work_hours": float(self.od_work_hours[i]),
            "spot_work_hours": float(self.spot_work_hours[i]),
            "finish_hours": float(self.finish_h[i]),
            "deadline_missed": bool(self.missed[i]),
            "launches": int(self.launches[i]),
            "restarts": int(self.restarts[i]),
            "preemptions": int(self.preemptions[i]),
            "lost_work_hours": float(self.lost_work_hours[i]),
            "overlap_hours": float(self.overlap_hours[i]),
            "refusals": int(self.refusals[i]),
        }

    @classmethod
    def concat(cls, parts: list[RunStats]) -> RunStats:
        names = [
            "cost", "od_hours", "spot_hours", "od_work_hours", "spot_work_hours", "finish_h",
            "missed", "launches", "preemptions", "lost_work_hours", "overlap_hours", "refusals",
        ]  # fmt: skip
        return cls(**{n: np.concatenate([getattr(p, n) for p in parts]) for n in names})
