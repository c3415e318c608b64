"""The store's availability priors (``provisioner priors --refresh``) as one risk per zone and
instance type, for the daemon's planner and decide(), re-read at most every
:data:`PRIORS_EVERY` (they change when someone refreshes them, not from pass to pass)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from provisioner.core.views import ZoneRisk
from provisioner.core.zone_priors import Key, zone_risks

if TYPE_CHECKING:
    from provisioner.control.store import Store

log = logging.getLogger(__name__)

PRIORS_EVERY = timedelta(minutes=5)


class PriorFigures:
    """The store's priors as :func:`~provisioner.core.zone_priors.zone_risks`, cached;
    ``version`` moves when they change (plans made on the old ones are not reused)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.version = 0
        self._at: datetime | None = None
        self._value: dict[Key, ZoneRisk] = {}

    def get(self, now: datetime) -> dict[Key, ZoneRisk]:
        if self._at is None or now - self._at >= PRIORS_EVERY:
            try:
                value = zone_risks(self.store.priors())
            except Exception as exc:  # a store hiccup: keep what was read before
                log.warning("cannot read availability priors: %s", exc)
                value = self._value
            if value != self._value:
                self.version += 1
            self._value, self._at = value, now
        return self._value

    def invalidate(self) -> None:
        self._at = None


def figures(store: Store) -> tuple[Any, PriorFigures]:
    """The planner's data from the store: probe figures (jobpass.probes) and priors."""
    from provisioner.control.jobpass.probes import MeasuredFigures

    return MeasuredFigures(store), PriorFigures(store)
