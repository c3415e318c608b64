"""How a cloud turns run time into a bill: the increment and the minimum (pure).

One rule per cloud, declared once in that cloud's facts (``providers/<cloud>/facts.py``) and
read by the reconciler (what an attempt cost), the sim (what it charges) and the simulator
(what a plan will cost).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Billing:
    """``increment_s``: granularity (1: per second, 60: per started minute); ``minimum_s``:
    the shortest billed duration (0: none)."""

    increment_s: int = 1
    minimum_s: int = 0
    rule: str = "per second, no minimum"

    def billed_seconds(self, seconds: float) -> int:
        """Seconds charged for ``seconds`` of run time."""
        used = max(0.0, seconds)
        rounded = math.ceil(used / self.increment_s - 1e-9) * self.increment_s
        return int(max(rounded, self.minimum_s))

    def cost(self, price_per_hour: float, seconds: float) -> float:
        """What ``seconds`` of run time at ``price_per_hour`` is billed."""
        return price_per_hour * self.billed_seconds(seconds) / 3600.0


PER_SECOND_60S_MINIMUM = Billing(1, 60, "per second, 60 s minimum")
PER_STARTED_MINUTE = Billing(60, 60, "per started minute")
PER_SECOND = Billing(1, 0, "per second, no minimum")
