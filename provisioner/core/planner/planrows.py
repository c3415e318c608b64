"""The planner's helpers: per-row facts a vectorised column does not hold (the interconnect
verdict of each instance type, :mod:`provisioner.core.network`, and the probes' measured
speed, :mod:`provisioner.core.measured`), the preference score of the eligible rows, and each
placement's reasons. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from policies.model import Policy
from provisioner.core.catalog import Catalog, CatalogColumns
from provisioner.core.measured import Measured
from provisioner.core.models import Market
from provisioner.core.network import interconnect_violation
from provisioner.core.regions import estimate_rtt_ms, great_circle_km, regions
from provisioner.core.rules import residency_violation
from provisioner.errors import InputError

if TYPE_CHECKING:
    import numpy as np


class PlanError(InputError, ValueError):
    """The policy cannot be planned as written (e.g. an unknown GPU name)."""


#: the interruption risk of a spot offer with no Spot Advisor band, and the risk that counts
#: as one unit of the ``interruption_risk`` preference
DEFAULT_SPOT_RISK = 0.10
RISK_SCALE = 0.10


def score_rows(
    policy: Policy,
    cost: np.ndarray,
    price: np.ndarray,
    rtt: np.ndarray,
    band_risk: np.ndarray,
    is_spot: np.ndarray,
    tflops: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The preference score of each eligible (row, market) (lower is better) and its TFLOPS
    per dollar: cost relative to the cheapest, RTT, interruption risk (spot only) and TFLOPS
    per dollar relative to the best, weighted by ``policy.preferences``."""
    import numpy as np

    prefs = policy.preferences
    wsum = prefs.price + prefs.latency + prefs.interruption_risk + prefs.tflops_per_dollar
    score = np.zeros(len(cost))
    min_cost = float(np.min(cost)) if len(cost) else 1.0
    score += prefs.price * (cost / min_cost if min_cost > 0 else cost)
    if prefs.latency and policy.latency.targets:
        score += prefs.latency * np.nan_to_num(rtt, nan=300.0) / 100.0
    risk = np.where(np.isnan(band_risk), DEFAULT_SPOT_RISK, band_risk)
    risk = np.where(is_spot, risk, 0.0)
    score += prefs.interruption_risk * risk / RISK_SCALE
    with np.errstate(divide="ignore", invalid="ignore"):
        tpd = tflops / price
    if prefs.tflops_per_dollar:
        best_tpd = float(np.nanmax(tpd)) if np.isfinite(np.nanmax(tpd)) else 0.0
        score += prefs.tflops_per_dollar * np.where(tpd > 0, best_tpd / tpd, 10.0)
    return (score / wsum if wsum > 0 else price), tpd


def placement_reasons(
    market: Market,
    price: float,
    cap: float,
    nodes: int,
    inter_node: str,
    measured: Measured | None,
    tflops: float,
    speed: float,
) -> list[str]:
    """Why a placement is where it is: its price, its cap, its gang, its measured speed."""
    out = [f"{market.value} ${price:.4g}/h"]
    if market is Market.SPOT and math.isfinite(cap):
        out.append(f"under bid cap ${cap:.4g}/h")
    if nodes > 1:
        out.append(f"gang of {nodes} ({inter_node_text(inter_node)}): ${price * nodes:.4g}/h")
    if measured is not None and price > 0 and speed > 0:
        sheet = tflops / speed / price
        out.append(
            f"measured {sheet * measured.fraction:.0f} TFLOPS/$ over {measured.runs} run(s) "
            f"({measured.fraction:.0%} of datasheet, {sheet:.0f})"
        )
    return out


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


def region_verdicts(
    policy: Policy, cols: CatalogColumns, codes: Mapping[str, int]
) -> tuple[list[int], list[float], list[float]]:
    """Per region code: (reason code in ``codes`` or 0, worst RTT ms, weighted mean RTT ms)."""
    table = regions()
    lat = policy.latency
    targets: list[tuple[float, float, float, str | None]] = []
    for t in lat.targets:
        if t.lat is not None and t.lon is not None:
            targets.append((t.lat, t.lon, t.weight, t.name))
        elif t.region:
            p, _, r = t.region.partition(":")
            reg = table.get((p, r)) if r else None
            if reg is None:
                raise PlanError(
                    f"latency.targets: unknown region {t.region!r} (use provider:region)"
                )
            targets.append((reg.lat, reg.lon, t.weight, t.name))
    verdicts: list[int] = []
    worst: list[float] = []
    mean: list[float] = []
    for provider, code in cols.region_keys:
        reg = table.get((provider, code))
        why = residency_violation(policy, provider, code)  # the scalar rule, per region
        verdict = 0 if why is None else codes[why]
        verdicts.append(verdict)
        if targets:
            key = f"{provider}:{code}"
            rtts = []
            for t_lat, t_lon, w, _name in targets:
                measured = lat.measured.get(key)
                if measured is not None:
                    rtts.append((measured, w))
                elif reg is not None:
                    rtts.append(
                        (estimate_rtt_ms(great_circle_km(t_lat, t_lon, reg.lat, reg.lon)), w)
                    )
                else:
                    rtts.append((math.nan, w))
            worst.append(max(r for r, _ in rtts))
            total_w = sum(w for _, w in rtts)
            mean.append(sum(r * w for r, w in rtts) / total_w)
        else:
            worst.append(math.nan)
            mean.append(math.nan)
    return verdicts, worst, mean
