"""The cloud an attempt ran on: its provider, or for the sim the cloud the sim played there.

The sim bills, notices and fails as the cloud it mimics in each zone (provider option
``mimic``: one cloud, ``all``, or a map of zone to cloud; AWS when not given), so its bill,
billing note and FOCUS row follow that cloud's rules and names. Without the job's options the
region decides, the first of :data:`providers.base.CLOUDS` that has it (as ``mimic: all``
resolves a region two clouds share).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from providers.base import CLOUDS


def played_cloud(
    provider: str, region: str, zone: str | None = None, options: Mapping[str, Any] | None = None
) -> str:
    """The cloud whose rules an attempt on ``provider`` in ``region``/``zone`` followed."""
    if provider != "sim":
        return provider
    mimic: Any = "all" if options is None else options.get("mimic", "aws")
    if isinstance(mimic, Mapping):
        cloud = mimic.get(zone or region, next(iter(mimic.values()), "aws"))
        return str(cloud) if cloud in CLOUDS else "aws"
    if mimic in CLOUDS:
        return str(mimic)
    from provisioner.core.regions import region as find

    return next((c for c in CLOUDS if find(c, region) is not None), "aws")
