"""Per-row facts the planner gathers where a vectorised column does not hold them: the
interconnect verdict of each instance type (:mod:`provisioner.core.network`) and the probes'
measured speed (:mod:`provisioner.core.measured`). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from policies.model import Policy
from provisioner.core.catalog import Catalog
from provisioner.core.measured import Measured
from provisioner.core.network import interconnect_violation

if TYPE_CHECKING:
    import numpy as np


def inter_node_text(inter: str) -> str:
    return {"any": "one region", "same-zone": "one zone"}.get(inter, "one placement group")


def interconnect_mask(
    policy: Policy, catalog: Catalog, rows: np.ndarray, detail: dict[tuple[str, int], str]
) -> np.ndarray:
    """Per row: the instance type does not meet ``resources.interconnect`` (its reason, per
    row position, in ``detail``). One verdict per (provider, type)."""
    import numpy as np

    need, nodes = policy.resources.interconnect, policy.resources.nodes
    table = catalog.network or {}
    bad = np.zeros(len(rows), dtype=bool)
    verdicts: dict[tuple[str, str], str | None] = {}
    offers = catalog.offers
    for j, i in enumerate(rows):
        o = offers[int(i)]
        key = (o.provider, o.instance_type)
        if key not in verdicts:
            verdicts[key] = interconnect_violation(need, table.get(key), gang=nodes > 1)
        why = verdicts[key]
        if why is not None:
            bad[j] = True
            detail[("interconnect", j)] = why
    return bad


def measured_speed(
    catalog: Catalog, rows: np.ndarray, measured: Mapping[tuple[str, str, str], Measured]
) -> tuple[np.ndarray, dict[int, Measured]]:
    """Per row: the measured fraction of the datasheet (1.0 where nothing was measured), and
    the measurements by row position."""
    import numpy as np

    speed = np.ones(len(rows))
    found: dict[int, Measured] = {}
    if not measured:
        return speed, found
    types = {k[1] for k in measured}
    offers = catalog.offers
    for j, i in enumerate(rows):
        o = offers[int(i)]
        if o.instance_type not in types:
            continue
        m = measured.get((o.provider, o.instance_type, o.gpu))
        if m is not None and m.fraction > 0:
            speed[j] = m.fraction
            found[j] = m
    return speed, found
