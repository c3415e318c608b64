"""Who holds a spot instance to its bid cap: a plain enum, importable without the policy model.

The clouds' facts (:mod:`providers.facts`) say which side each cloud's default is, and the
sim cloud's server and the node agent read those facts: importing the enum from here keeps
pydantic and the policy model out of those processes.
"""

from __future__ import annotations

import enum


class CapEnforce(str, enum.Enum):
    """Who holds a spot instance to the bid cap."""

    CLOUD = "cloud"  # the cap is sent as the cloud's maximum price: the cloud reclaims above it
    DAEMON = "daemon"  # no maximum price is sent: the daemon reads the price and moves the job
