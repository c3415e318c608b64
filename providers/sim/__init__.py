"""The sim provider: a local spot market, so everything runs on one machine with no account.

- :mod:`providers.sim.adapter`: :class:`SimProvider`, the ``providers.base.Provider`` adapter
- :mod:`providers.sim.server`: the sim cloud's own process (JSON API + metadata endpoints)
- :mod:`providers.sim.cloud`: instances as sandboxes (process groups), notices, billing
- :mod:`providers.sim.market`: availability per zone from a trace or a seeded model
- :mod:`providers.sim.metadata`: the five clouds' metadata formats
- :mod:`providers.sim.rules`: notice lengths, billing rules and error codes per cloud

See docs/agent.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from providers._lazy import lazy_attributes

if TYPE_CHECKING:
    from providers.sim.adapter import Billing, SimProvider

__all__ = ["Billing", "SimProvider"]

#: what this package offers, imported when first asked for: the sim cloud's own server
#: (``python -m providers.sim serve``, which imports this package first) needs none of the
#: adapter, the policy model or the planner it pulls in (half a second of every server's start)
_LAZY = {"Billing": "providers.sim.adapter", "SimProvider": "providers.sim.adapter"}

__getattr__ = lazy_attributes(__name__, _LAZY)
