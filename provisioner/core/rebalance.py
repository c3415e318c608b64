"""A model of AWS's rebalance recommendation, driven by a capacity trace (pure, seeded).

AWS serves an EC2 instance rebalance recommendation on the instance metadata
(``/latest/meta-data/events/recommendations/rebalance``) when its spot instance is at an
elevated risk of interruption, often before the two-minute interruption notice, sometimes
with no interruption after it. How long before, and how often, AWS does not publish: this is a
*model*, stated and tunable, that the sim cloud (``providers/sim``) and both simulator drivers
(:mod:`provisioner.simulate.engine`, :mod:`provisioner.simulate.replay`) share, so that what
the simulator measures is what the daemon does on the sim:

* each outage of a zone (capacity up, then down at ``T``) is preceded, with probability
  ``precede_p``, by a recommendation served from ``T - lead_s`` until ``T`` to the spot
  instances running there (a uniform draw seeded by ``(seed, key, T)``);
* false alarms: recommendations not followed by an interruption, ``false_per_day`` per zone
  per day (a Poisson process seeded by ``(seed, key)``), each served for ``lead_s``; one that
  would overlap an outage (or the ``lead_s`` before one) is dropped (it would not be false).

``key`` names the zone (its name in the sim and the engine, its index in the vectorised
replay unless the caller names the zones). An instance sees a recommendation that is being
served at some time while it runs; its ``noticeTime`` is the later of the recommendation's
start and the instance's launch. ``lead_s`` of 0 turns the model off.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: the model's defaults: ten minutes of lead, four outages in five signalled, one false
#: alarm per zone every two days
LEAD_S, PRECEDE_P, FALSE_PER_DAY = 600.0, 0.8, 0.5


@dataclass(frozen=True, slots=True)
class RebalanceModel:
    """When rebalance recommendations are served, given a zone's outages (see the module)."""

    lead_s: float = LEAD_S
    precede_p: float = PRECEDE_P
    false_per_day: float = FALSE_PER_DAY
    seed: int = 0

    def __post_init__(self) -> None:
        if self.lead_s < 0 or not 0.0 <= self.precede_p <= 1.0 or self.false_per_day < 0:
            raise ValueError(
                "rebalance model: lead_s >= 0, 0 <= precede_p <= 1, false_per_day >= 0"
            )

    @property
    def on(self) -> bool:
        return self.lead_s > 0

    def windows(
        self, key: str, outages: Sequence[tuple[float, float]], horizon_s: float
    ) -> list[tuple[float, float]]:
        """The ``[start, end)`` spans (seconds) in which the zone named ``key`` serves a
        recommendation, up to ``horizon_s``, given its ``outages`` (``[down, up)`` spans,
        ascending; an outage at time 0 is not announced: it was there before)."""
        if not self.on:
            return []
        out = [
            (max(0.0, down - self.lead_s), down)
            for down, _ in outages
            if down > 0 and _draw(self.seed, key, down) < self.precede_p
        ]
        if self.false_per_day > 0:
            rng = random.Random(f"{self.seed}:{key}:false")
            rate = self.false_per_day / 86400.0
            t = 0.0
            while True:
                t += rng.expovariate(rate)
                if t >= horizon_s:
                    break
                near = any(  # inside an outage, or one begins within two leads after
                    down < t + 2 * self.lead_s and t - self.lead_s < up for down, up in outages
                )
                if not near:
                    out.append((t, t + self.lead_s))
        return sorted(out)

    def served_since(
        self, windows: Sequence[tuple[float, float]], launched_s: float, now_s: float
    ) -> float | None:
        """The ``noticeTime`` an instance launched at ``launched_s`` sees at ``now_s`` (None:
        no recommendation is being served to it)."""
        for start, end in windows:
            if start <= now_s < end and end > launched_s:
                return max(start, launched_s)
        return None


def _draw(seed: int, key: str, at: float) -> float:
    """A uniform draw in [0, 1) fixed by ``(seed, key, at)`` (whole seconds)."""
    return random.Random(f"{seed}:{key}:{round(at)}").random()


def outages_of(up: Sequence[bool], step_s: float) -> list[tuple[float, float]]:
    """The ``[down, up)`` spans (seconds) of a zone's availability grid (one value per step;
    an outage still open at the end runs to the end of the grid)."""
    out: list[tuple[float, float]] = []
    down: float | None = None
    for k, v in enumerate(up):
        if not v and down is None:
            down = k * step_s
        elif v and down is not None:
            out.append((down, k * step_s))
            down = None
    if down is not None:
        out.append((down, len(up) * step_s))
    return out


def grid(
    model: RebalanceModel, avail: np.ndarray, step_s: float, keys: Sequence[str]
) -> np.ndarray:
    """For each step (at its start) and zone of ``avail`` (steps, zones), when the
    recommendation being served there began (seconds; NaN: none)."""
    import numpy as np  # the simulator's; the sim cloud's server asks for spans only

    steps, zones = avail.shape
    out = np.full((steps, zones), np.nan)
    if not model.on:
        return out
    at = np.arange(steps) * step_s
    for z in range(zones):
        spans = model.windows(keys[z], outages_of(avail[:, z].tolist(), step_s), steps * step_s)
        for start, end in spans:
            hit = (at >= start) & (at < end)
            out[hit, z] = np.where(np.isnan(out[hit, z]), start, out[hit, z])
    return out
