"""Cloud regions with their location and jurisdictions (provisioner/data/regions.csv)."""

from __future__ import annotations

import csv
import math
from functools import cache
from importlib import resources

from provisioner.core.models import Region


@cache
def regions() -> dict[tuple[str, str], Region]:
    """Every known region by (provider, region code)."""
    out: dict[tuple[str, str], Region] = {}
    with resources.files("provisioner.data").joinpath("regions.csv").open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            region = Region(
                provider=row["provider"],
                code=row["region"],
                city=row["city"],
                country=row["country"].upper(),
                jurisdictions=frozenset(t for t in row["jurisdictions"].split("|") if t),
                lat=float(row["lat"]),
                lon=float(row["lon"]),
                name=row.get("name") or row["region"],
            )
            out[(region.provider, region.code)] = region
    return out


def region(provider: str, code: str) -> Region | None:
    return regions().get((provider, code))


EARTH_RADIUS_KM = 6371.0088


def great_circle_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Haversine distance in km."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp = p2 - p1
    dl = math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(a)))


# RTT model: light in fibre travels at ~2/3 c (about 200 km per ms one way), real routes are
# longer than the great circle (route factor ~1.5, as measured between cloud regions), and
# every path has a few ms of fixed cost (last mile, switching, TLS-free ping).
FIBRE_KM_PER_MS = 200.0
ROUTE_FACTOR = 1.5
BASE_RTT_MS = 2.0


def estimate_rtt_ms(km: float) -> float:
    """Round-trip time estimated from great-circle distance: 2·d·1.5/(200 km/ms) + 2 ms."""
    return BASE_RTT_MS + 2.0 * km * ROUTE_FACTOR / FIBRE_KM_PER_MS
