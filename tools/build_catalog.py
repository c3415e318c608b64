#!/usr/bin/env python3
"""Build provisioner/data/offers.csv, the offline built-in offer catalog.

Sources (see provisioner/data/SOURCES.md for dates and which figures are estimates):

* AWS: the ec2instances.info GPU price snapshot of 2025-11-30 in the shared data folder
  (region-level on-demand and spot min/avg/max, Spot Advisor interruption band).
* GCP: Cyclenerd's price list of 2026-07-30 in the shared data folder (A2, A3, G2, G4 machine
  types), plus N1 machine types with attached T4/V100/P100/P4 GPUs, priced as the N1 host from
  the same list plus the per-GPU prices in ``GCP_N1_GPUS`` below.
* Azure: SkyPilot's v6 Azure catalog (US regions) in the shared data folder; other regions are
  estimated from the East US price with the multipliers in ``AZURE_REGIONS`` below.
* Alibaba Cloud and Tencent Cloud: hand-written instance shapes and estimated prices below.

The shared data folder is ``../shared/data`` next to the repository, or ``$PROVISIONER_SHARED_DATA``.
When a shared file is missing, the rows of that provider are carried over unchanged from the
existing offers.csv, so the script always writes a complete catalog. Output is deterministic:
the same inputs give the same bytes.

Usage: ``python tools/build_catalog.py [--check] [--shared DIR] [--out FILE]``
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "provisioner" / "data"
OUT = DATA / "offers.csv"

COLUMNS = [
    "provider", "region", "zone", "instance_type", "gpu", "gpu_count", "vcpus", "memory_gib",
    "price", "spot_price", "price_date", "interruption_band",
]  # fmt: skip

AWS_FILE = "catalog/aws_ec2instances_gpu_region_prices_2025-11-30.csv"
AWS_DATE = "2025-11-30"
GCP_FILE = "catalog/gcp_compute_pricing_cyclenerd_2026-07-30.csv"
GCP_DATE = "2026-07-30"
AZURE_FILE = "catalog/azure_skypilot_v6_gpu.csv"
#: The SkyPilot v6 Azure catalog carries no date; it is a mid-2024 snapshot (H100 v5 sizes
#: present, no H200/MI300X sizes). Non-US Azure rows are estimated from it, so they share it.
AZURE_DATE = "2024-06-30"
#: Alibaba and Tencent: shapes and prices written by hand for this snapshot date.
CN_DATE = "2026-11-30"
CNY_PER_USD = 7.1

MAX_ZONES = 3

Row = dict[str, str]


# --------------------------------------------------------------------------------------------
# helpers


def _frac(*key: object) -> float:
    """A deterministic number in [0, 1) from a key (stable across runs, unlike hash())."""
    digest = hashlib.sha256("|".join(str(k) for k in key).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def _pick_zones(zones: list[str], *key: object) -> list[str]:
    """2 or 3 of a region's zones (all of them when it has fewer), chosen deterministically."""
    if len(zones) <= 2:
        return list(zones)
    want = min(MAX_ZONES, len(zones)) if _frac("n", *key) < 0.6 else 2
    order = sorted(zones, key=lambda z: _frac("z", z, *key))
    return sorted(order[:want])


def _money(x: float | None) -> str:
    if x is None:
        return ""
    text = f"{x:.5f}".rstrip("0").rstrip(".")
    return text or "0"


def _num(text: str | None) -> float | None:
    text = (text or "").strip()
    if not text:
        return None
    value = float(text)
    return value if value == value else None


def _qty(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _row(
    provider: str,
    region: str,
    zone: str,
    itype: str,
    gpu: str,
    count: int,
    vcpus: float,
    mem: float,
    price: float | None,
    spot: float | None,
    date: str,
    band: str = "",
) -> Row:
    if price is not None and spot is not None and spot > price:
        spot = price  # spot is never billed above on-demand (source rounding can say otherwise)
    return {
        "provider": provider,
        "region": region,
        "zone": zone,
        "instance_type": itype,
        "gpu": gpu,
        "gpu_count": str(count),
        "vcpus": _qty(vcpus),
        "memory_gib": _qty(mem),
        "price": _money(price),
        "spot_price": _money(spot),
        "price_date": date,
        "interruption_band": band,
    }


def _read_csv(path: Path) -> list[Row]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# --------------------------------------------------------------------------------------------
# AWS

#: Instance family -> canonical GPU. Families not listed (g2 K520, inf*, trn*, dl2q, the
#: p6e-gb200 UltraServer) are left out: not GPUs, retired, or not rentable as single instances.
AWS_FAMILY_GPU = {
    "p2": "K80", "p3": "V100", "p3dn": "V100-32GB", "p4d": "A100", "p4de": "A100-80GB",
    "p5": "H100", "p5e": "H200", "p5en": "H200", "p6-b200": "B200", "p6-b300": "B300",
    "g3": "M60", "g3s": "M60", "g4dn": "T4", "g4ad": "V520", "g5": "A10G", "g5g": "T4",
    "g6": "L4", "gr6": "L4", "g6f": "L4", "gr6f": "L4", "g6e": "L40S",
}  # fmt: skip

#: Availability-zone letters of each AWS region (the zone names most accounts see).
AWS_ZONES = {
    "us-east-1": "abcdf", "us-east-2": "abc", "us-west-1": "bc", "us-west-2": "abcd",
    "ca-central-1": "abd", "ca-west-1": "abc", "mx-central-1": "abc", "sa-east-1": "abc",
    "eu-west-1": "abc", "eu-west-2": "abc", "eu-west-3": "abc", "eu-central-1": "abc",
    "eu-central-2": "abc", "eu-north-1": "abc", "eu-south-1": "abc", "eu-south-2": "abc",
    "il-central-1": "abc", "me-south-1": "abc", "me-central-1": "abc", "af-south-1": "abc",
    "ap-east-1": "abc", "ap-east-2": "abc", "ap-south-1": "abc", "ap-south-2": "abc",
    "ap-southeast-1": "abc", "ap-southeast-2": "abc", "ap-southeast-3": "abc",
    "ap-southeast-4": "abc", "ap-southeast-5": "abc", "ap-southeast-6": "abc",
    "ap-southeast-7": "abc", "ap-northeast-1": "acd", "ap-northeast-2": "abcd",
    "ap-northeast-3": "abc", "cn-north-1": "abd", "cn-northwest-1": "abc",
}  # fmt: skip


def _aws_zone_spots(
    itype: str, region: str, zones: list[str], lo: float | None, avg: float | None, hi: float | None
) -> list[float | None]:
    """A spot price per zone. The source gives the region's min/avg/max over its zones; when
    they differ the zones get min, avg and max (2 zones: min and max), in a shuffled order;
    when they coincide each zone gets the average moved by up to ±6%."""
    known = [v for v in (lo, avg, hi) if v is not None]
    if not known:
        return [None] * len(zones)
    lo = min(known) if lo is None else lo
    hi = max(known) if hi is None else hi
    avg = sum(known) / len(known) if avg is None else avg
    if hi > lo:
        values = [lo, avg, hi] if len(zones) >= 3 else [lo, hi][: len(zones)]
        values = (values * len(zones))[: len(zones)]
        order = sorted(range(len(zones)), key=lambda i: _frac("spot", itype, region, i))
        return [values[order[i]] for i in range(len(zones))]
    return [avg * (1.0 + 0.12 * (_frac("jit", itype, region, z) - 0.5)) for z in zones]


def aws_rows(path: Path, known_regions: set[str]) -> Iterator[Row]:
    for src in _read_csv(path):
        itype = src["instance_type"]
        gpu = AWS_FAMILY_GPU.get(itype.split(".")[0])
        region = src["region"]
        count = _num(src["GPU"])
        price = _num(src["linux_ondemand"])
        if gpu is None or region not in known_regions or region not in AWS_ZONES:
            continue  # not a GPU family, or a local/wavelength zone or GovCloud
        if count is None or count < 1 or not count.is_integer() or price is None:
            continue  # fractional GPU (g6f) or no Linux price
        zones = _pick_zones([region + z for z in AWS_ZONES[region]], "aws", itype, region)
        spots = _aws_zone_spots(
            itype, region, zones,
            _num(src["linux_spot_min"]), _num(src["linux_spot_avg"]), _num(src["linux_spot_max"]),
        )  # fmt: skip
        band = src["linux_pct_interrupt"].strip() if spots[0] is not None else ""
        for zone, spot in zip(zones, spots, strict=True):
            yield _row(
                "aws", region, zone, itype, gpu, int(count), float(src["vCPU"]),
                float(src["memory_gib"]), price, spot, AWS_DATE, band,
            )  # fmt: skip


# --------------------------------------------------------------------------------------------
# GCP

GCP_GPU = {
    "a100": "A100", "a100-80gb": "A100-80GB", "h100-80gb": "H100", "h100-80gb-mega": "H100",
    "l4": "L4", "rtx6000": "RTX-PRO-6000",
}  # fmt: skip

# Zones where each accelerator-optimized series is offered, from GCP's "GPU regions and zones"
# page as mirrored in SkyPilot's GCP catalog (v8). The price list prices a series in every
# region that has the SKU, which is wider than where it can be launched; only these are kept.
# None: offered in the region but zones not known here -> one region-level row.
_A2_HIGH = {
    "asia-northeast1": "ac", "asia-northeast3": "ab", "asia-southeast1": "abc",
    "europe-west4": "ab", "me-west1": "ac", "us-central1": "abcf", "us-east1": "b",
    "us-west1": "b", "us-west3": "b", "us-west4": "b",
}  # fmt: skip
_A2_MEGA = {"asia-southeast1": "ac", "europe-west4": "ab", "us-central1": "abcf"}
_A2_ULTRA = {
    "asia-southeast1": "c", "europe-west4": "a", "us-central1": "ac", "us-east4": "c",
    "us-east5": "ab",
}  # fmt: skip
_A3_HIGH = {
    "asia-east1": "c", "asia-northeast1": "b", "asia-south1": "c", "asia-south2": "b",
    "asia-southeast1": "bc", "australia-southeast1": "c", "europe-north1": "c",
    "europe-west1": "bc", "europe-west3": "c", "europe-west4": "bc", "europe-west8": "c",
    "europe-west9": "c", "us-central1": "abc", "us-east4": "abc", "us-east5": "a",
    "us-west1": "ab", "us-west4": "a",
}  # fmt: skip
_G2 = {
    "asia-east1": "abc", "asia-northeast1": "abc", "asia-northeast3": "ab", "asia-south1": "abc",
    "asia-southeast1": "abc", "europe-west1": "bc", "europe-west2": "ab", "europe-west3": "ab",
    "europe-west4": "abc", "europe-west6": "bc", "me-central2": "ac",
    "northamerica-northeast1": "bc", "northamerica-northeast2": "ab", "us-central1": "abc",
    "us-east1": "bcd", "us-east4": "ac", "us-west1": "abc", "us-west4": "ac",
}  # fmt: skip


def _gcp_series_zones(machine_type: str) -> dict[str, str | None] | None:
    """Region -> zone letters for a GPU machine type; None for types not in the catalog."""
    if machine_type.startswith("a2-highgpu-"):
        return dict(_A2_HIGH)
    if machine_type.startswith("a2-megagpu-"):
        return dict(_A2_MEGA)
    if machine_type.startswith("a2-ultragpu-"):
        return dict(_A2_ULTRA)
    if machine_type.startswith("a3-highgpu-"):
        return dict(_A3_HIGH)
    if machine_type.startswith("g2-standard-"):
        return dict(_G2)
    if machine_type.startswith(("a3-megagpu-", "g4-standard-")):
        return {}  # every region the price list names; zones unknown here
    return None


#: N1 + attached GPU, per GPU: region -> (zone letters, on-demand $/h, spot $/h). Prices as in
#: GCP's GPU price list (mirrored by SkyPilot's GCP catalog, v8), added to the N1 host's price.
GCP_N1_GPUS: dict[str, tuple[str, tuple[int, ...], dict[str, tuple[str, float, float]]]] = {
    "T4": ("nvidia-tesla-t4", (1, 2, 4), {
        "asia-east1": ("ac", 0.35, 0.1383), "asia-east2": ("ac", 0.44, 0.2004),
        "asia-northeast1": ("ac", 0.37, 0.1311), "asia-northeast3": ("bc", 0.37, 0.1539),
        "asia-south1": ("ab", 0.41, 0.1701), "asia-southeast1": ("abc", 0.37, 0.1645),
        "asia-southeast2": ("ab", 0.4033, 0.1854), "australia-southeast1": ("ac", 0.44, 0.1746),
        "europe-central2": ("bc", 0.41, 0.164), "europe-west1": ("bcd", 0.35, 0.14),
        "europe-west2": ("ab", 0.399, 0.1181), "europe-west3": ("b", 0.41, 0.164),
        "europe-west4": ("abc", 0.3675, 0.175), "me-west1": ("bc", 0.385, 0.1093),
        "northamerica-northeast1": ("c", 0.38538, 0.1868),
        "southamerica-east1": ("abc", 0.48, 0.2329), "us-central1": ("abcf", 0.35, 0.175),
        "us-east1": ("bcd", 0.35, 0.175), "us-east4": ("abc", 0.37, 0.1644),
        "us-west1": ("ab", 0.35, 0.175), "us-west2": ("bc", 0.42074, 0.164),
        "us-west3": ("b", 0.42074, 0.1195), "us-west4": ("ab", 0.37, 0.1258),
    }),
    "V100": ("nvidia-tesla-v100", (1, 2, 4, 8), {
        "asia-east1": ("c", 2.48, 0.6356), "europe-west4": ("abc", 2.604, 1.0443),
        "us-central1": ("abcf", 2.48, 1.0885), "us-east1": ("bc", 2.48, 1.0885),
        "us-west1": ("ab", 2.48, 1.0885),
    }),
    "P100": ("nvidia-tesla-p100", (1, 2, 4), {
        "asia-east1": ("ac", 1.6, 0.144), "australia-southeast1": ("b", 1.6, 0.2839),
        "europe-west1": ("bd", 1.6, 0.2816), "europe-west4": ("a", 1.533, 0.2341),
        "us-central1": ("cf", 1.46, 0.7034), "us-east1": ("bc", 1.46, 0.7034),
        "us-west1": ("ab", 1.46, 0.7034),
    }),
    "P4": ("nvidia-tesla-p4", (1, 2, 4), {
        "asia-southeast1": ("abc", 0.65, 0.0585), "australia-southeast1": ("ab", 0.65, 0.075),
        "europe-west4": ("bc", 0.63, 0.132), "northamerica-northeast1": ("abc", 0.65, 0.0738),
        "us-central1": ("ac", 0.6, 0.2236), "us-east4": ("abc", 0.6, 0.1734),
        "us-west2": ("bc", 0.72, 0.0794),
    }),
}  # fmt: skip

#: N1 host for n attached GPUs: 8 vCPUs per GPU, within every GPU's vCPU limit.
GCP_N1_HOST = {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32", 8: "n1-standard-64"}


def gcp_rows(path: Path, known_regions: set[str]) -> Iterator[Row]:
    src_rows = _read_csv(path)
    hosts: dict[tuple[str, str], Row] = {}
    for src in src_rows:
        mtype, region = src["machine_type"], src["region"]
        if mtype in GCP_N1_HOST.values():
            hosts[(mtype, region)] = src
        gpu = GCP_GPU.get(src["gpu_type"])
        count = _num(src["gpu_count"])
        price = _num(src["hour"])
        if gpu is None or count is None or count < 1 or not count.is_integer() or price is None:
            continue  # not a GPU type, a fractional G4 (vGPU) or no on-demand price
        if region not in known_regions:
            continue
        series = _gcp_series_zones(mtype)
        if series is None or (series and region not in series):
            continue
        letters = series.get(region) if series else None
        zones = _pick_zones([f"{region}-{z}" for z in letters], "gcp", mtype) if letters else [""]
        for zone in zones:
            yield _row(
                "gcp", region, zone, mtype, gpu, int(count), float(src["cpu"]),
                float(src["ram_gb"]), price, _num(src["hour_spot"]), GCP_DATE,
            )  # fmt: skip
    for gpu, (accel, counts, regions) in GCP_N1_GPUS.items():
        for region, (letters, od, spot) in regions.items():
            if region not in known_regions:
                continue
            for n in counts:
                host = hosts.get((GCP_N1_HOST[n], region))
                host_od = _num(host["hour"]) if host else None
                host_spot = _num(host["hour_spot"]) if host else None
                if host is None or host_od is None:
                    continue
                itype = f"{GCP_N1_HOST[n]}+{accel}x{n}"
                total_spot = host_spot + n * spot if host_spot is not None else None
                for zone in _pick_zones([f"{region}-{z}" for z in letters], "gcp", itype):
                    yield _row(
                        "gcp", region, zone, itype, gpu, n, float(host["cpu"]),
                        float(host["ram_gb"]), host_od + n * od, total_spot, GCP_DATE,
                    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# Azure

#: Sizes kept from the SkyPilot v6 catalog: size -> (GPU, count). Left out: NC/NCv3/ND40rs_v2
#: (K80/V100, retired), NV and NVv3/NVv4 (M60/MI25 graphics sizes, retired or retiring),
#: NCads_A10_v4 and ND40s_v3 (no GPU named in the source), NG (V620) and NP (FPGA), *_Promo.
AZURE_SIZES = {
    "Standard_NC4as_T4_v3": ("T4", 1), "Standard_NC8as_T4_v3": ("T4", 1),
    "Standard_NC16as_T4_v3": ("T4", 1), "Standard_NC64as_T4_v3": ("T4", 4),
    "Standard_NV36ads_A10_v5": ("A10", 1), "Standard_NV36adms_A10_v5": ("A10", 1),
    "Standard_NV72ads_A10_v5": ("A10", 2),
    "Standard_NC24ads_A100_v4": ("A100-80GB", 1), "Standard_NC48ads_A100_v4": ("A100-80GB", 2),
    "Standard_NC96ads_A100_v4": ("A100-80GB", 4),
    "Standard_ND96asr_v4": ("A100", 8), "Standard_ND96amsr_A100_v4": ("A100-80GB", 8),
    # NC H100 v5 carries H100 NVL (94 GB); ND H100 v5 has 8 H100 SXM (the source says 12).
    "Standard_NC40ads_H100_v5": ("H100-NVL", 1), "Standard_NC80adis_H100_v5": ("H100-NVL", 2),
    "Standard_NCC40ads_H100_v5": ("H100-NVL", 1), "Standard_ND96isr_H100_v5": ("H100", 8),
}  # fmt: skip

#: US regions with availability zones (the others get one region-level row).
AZURE_US_ZONED = {"eastus", "eastus2", "centralus", "southcentralus", "westus2", "westus3"}

#: Estimated regions outside the US: region -> (on-demand multiplier over East US, size groups).
#: Multipliers follow the usual spread of Azure's regional VM prices (estimates, not quotes).
AZURE_REGIONS: dict[str, tuple[float, str]] = {
    "westeurope": (1.10, "t4 a10 a100 nda100 ndm h100nc ndh100"),
    "northeurope": (1.04, "t4 a10 a100"),
    "swedencentral": (1.05, "t4 a10 a100 ndm h100nc ndh100"),
    "francecentral": (1.13, "t4 a10"),
    "germanywestcentral": (1.13, "t4 a10"),
    "uksouth": (1.10, "t4 a10 a100 ndm ndh100"),
    "switzerlandnorth": (1.25, "t4 a10"),
    "norwayeast": (1.20, "t4"),
    "italynorth": (1.12, "t4"),
    "polandcentral": (1.12, "t4"),
    "japaneast": (1.20, "t4 a10 a100 nda100 ndh100"),
    "koreacentral": (1.15, "t4 a10 a100"),
    "southeastasia": (1.14, "t4 a10 a100 nda100"),
    "eastasia": (1.22, "t4"),
    "australiaeast": (1.22, "t4 a10 a100"),
    "centralindia": (1.02, "t4 a10 a100"),
    "canadacentral": (1.08, "t4 a10 a100"),
    "brazilsouth": (1.45, "t4"),
    "uaenorth": (1.20, "t4 a10"),
}
AZURE_GROUPS = {
    "t4": ("Standard_NC4as_T4_v3", "Standard_NC8as_T4_v3", "Standard_NC16as_T4_v3",
           "Standard_NC64as_T4_v3"),
    "a10": ("Standard_NV36ads_A10_v5", "Standard_NV72ads_A10_v5"),
    "a100": ("Standard_NC24ads_A100_v4", "Standard_NC48ads_A100_v4", "Standard_NC96ads_A100_v4"),
    "nda100": ("Standard_ND96asr_v4",),
    "ndm": ("Standard_ND96amsr_A100_v4",),
    "h100nc": ("Standard_NC40ads_H100_v5", "Standard_NC80adis_H100_v5"),
    "ndh100": ("Standard_ND96isr_H100_v5",),
}  # fmt: skip
AZURE_NO_SPOT = {"H100", "H100-NVL"}  # source has no real H100 spot price (spot == on-demand)


def azure_rows(path: Path, known_regions: set[str]) -> Iterator[Row]:
    base: dict[str, Row] = {}  # size -> East US row (or the first US row) as the estimate base
    for src in _read_csv(path):
        size, region = src["InstanceType"], src["Region"]
        if size not in AZURE_SIZES or region not in known_regions:
            continue
        gpu, count = AZURE_SIZES[size]
        price = _num(src["Price"])
        if price is None:
            continue
        if region == "eastus" or size not in base:
            base[size] = src
        spot = None if gpu in AZURE_NO_SPOT else _num(src["SpotPrice"])
        if size == "Standard_NCC40ads_H100_v5":
            spot = _num(src["SpotPrice"])  # a real spot price (25% of on-demand) in the source
        zones = [f"{region}-{i}" for i in (1, 2, 3)] if region in AZURE_US_ZONED else [""]
        for zone in _pick_zones(zones, "azure", size, region) if zones != [""] else [""]:
            yield _row(
                "azure", region, zone, size, gpu, count, float(src["vCPUs"]),
                float(src["MemoryGiB"]), price, spot, AZURE_DATE,
            )  # fmt: skip
    for region, (mult, groups) in AZURE_REGIONS.items():
        if region not in known_regions:
            continue
        for group in groups.split():
            for size in AZURE_GROUPS[group]:
                ref = base.get(size)
                if ref is None:
                    continue
                gpu, count = AZURE_SIZES[size]
                od_base = float(ref["Price"])
                spot_base = None if gpu in AZURE_NO_SPOT else _num(ref["SpotPrice"])
                price = od_base * mult
                # spot moves with local supply, not only with the list price: 0.95-1.30x
                spot = (
                    spot_base * mult * (0.95 + 0.35 * _frac("azspot", size, region))
                    if spot_base is not None
                    else None
                )
                zones = _pick_zones([f"{region}-{i}" for i in (1, 2, 3)], "azure", size, region)
                for zone in zones:
                    yield _row(
                        "azure", region, zone, size, gpu, count, float(ref["vCPUs"]),
                        float(ref["MemoryGiB"]), price, spot, AZURE_DATE,
                    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# Alibaba Cloud and Tencent Cloud (hand-written; prices are estimates, see SOURCES.md)

# Price model (CNY per hour, pay-as-you-go, mainland China list level):
#   per GPU + vCPUs x per-vCPU + GiB x per-GiB, times the region's multiplier, / CNY_PER_USD.
# Spot: a family- and region-specific 20-45% of on-demand (spot markets there run at deep
# discounts; see SOURCES.md).

ALIBABA_GPU_CNY = {
    "T4": 5.4, "A10": 9.0, "V100": 16.5, "V100-32GB": 19.5, "A100": 24.0, "A100-80GB": 30.0,
    "L20": 10.5, "P100": 9.5, "P4": 4.2,
}  # fmt: skip
ALIBABA_VCPU_CNY = 0.20
ALIBABA_GIB_CNY = 0.03

# family -> [(instance type, GPU, count, vCPUs, memory GiB)]
ALIBABA_FAMILIES: dict[str, list[tuple[str, str, int, int, int]]] = {
    "gn6i": [
        ("ecs.gn6i-c4g1.xlarge", "T4", 1, 4, 15), ("ecs.gn6i-c8g1.2xlarge", "T4", 1, 8, 31),
        ("ecs.gn6i-c16g1.4xlarge", "T4", 1, 16, 62), ("ecs.gn6i-c24g1.6xlarge", "T4", 1, 24, 93),
        ("ecs.gn6i-c40g1.10xlarge", "T4", 1, 40, 155),
        ("ecs.gn6i-c24g1.12xlarge", "T4", 2, 48, 186),
        ("ecs.gn6i-c24g1.24xlarge", "T4", 4, 96, 372),
    ],
    "gn7i": [
        ("ecs.gn7i-c8g1.2xlarge", "A10", 1, 8, 30), ("ecs.gn7i-c16g1.4xlarge", "A10", 1, 16, 60),
        ("ecs.gn7i-c32g1.8xlarge", "A10", 1, 32, 188),
        ("ecs.gn7i-c48g1.12xlarge", "A10", 1, 48, 310),
        ("ecs.gn7i-c56g1.14xlarge", "A10", 1, 56, 346),
        ("ecs.gn7i-c32g1.16xlarge", "A10", 2, 64, 376),
        ("ecs.gn7i-c32g1.32xlarge", "A10", 4, 128, 752),
    ],
    "gn6v": [
        ("ecs.gn6v-c8g1.2xlarge", "V100", 1, 8, 32), ("ecs.gn6v-c8g1.8xlarge", "V100", 4, 32, 128),
        ("ecs.gn6v-c8g1.16xlarge", "V100", 8, 64, 256),
        ("ecs.gn6v-c10g1.20xlarge", "V100", 8, 82, 336),
    ],
    "gn6e": [
        ("ecs.gn6e-c12g1.3xlarge", "V100-32GB", 1, 12, 92),
        ("ecs.gn6e-c12g1.12xlarge", "V100-32GB", 4, 48, 368),
        ("ecs.gn6e-c12g1.24xlarge", "V100-32GB", 8, 96, 736),
    ],
    "gn7": [
        ("ecs.gn7-c12g1.3xlarge", "A100", 1, 12, 94),
        ("ecs.gn7-c13g1.13xlarge", "A100", 4, 52, 378),
        ("ecs.gn7-c13g1.26xlarge", "A100", 8, 104, 756),
    ],
    "gn7e": [
        ("ecs.gn7e-c16g1.4xlarge", "A100-80GB", 1, 16, 125),
        ("ecs.gn7e-c16g1.16xlarge", "A100-80GB", 4, 64, 500),
        ("ecs.gn7e-c16g1.32xlarge", "A100-80GB", 8, 128, 1000),
    ],
    "ebmgn7e": [("ecs.ebmgn7e.32xlarge", "A100-80GB", 8, 128, 1024)],
    "gn8is": [
        ("ecs.gn8is.2xlarge", "L20", 1, 8, 64), ("ecs.gn8is.4xlarge", "L20", 1, 16, 128),
        ("ecs.gn8is-2x.8xlarge", "L20", 2, 32, 256), ("ecs.gn8is-4x.16xlarge", "L20", 4, 64, 512),
        ("ecs.gn8is-8x.32xlarge", "L20", 8, 128, 1024),
    ],
    "gn5": [
        ("ecs.gn5-c4g1.xlarge", "P100", 1, 4, 30), ("ecs.gn5-c8g1.2xlarge", "P100", 1, 8, 60),
        ("ecs.gn5-c8g1.4xlarge", "P100", 2, 16, 120), ("ecs.gn5-c8g1.8xlarge", "P100", 4, 32, 240),
    ],
    "gn5i": [
        ("ecs.gn5i-c2g1.large", "P4", 1, 2, 8), ("ecs.gn5i-c4g1.xlarge", "P4", 1, 4, 16),
        ("ecs.gn5i-c8g1.2xlarge", "P4", 1, 8, 32), ("ecs.gn5i-c16g1.4xlarge", "P4", 1, 16, 64),
        ("ecs.gn5i-c28g1.14xlarge", "P4", 2, 56, 224),
    ],
}  # fmt: skip

# region -> (zone suffixes, price multiplier over mainland list level, families offered)
ALIBABA_REGIONS: dict[str, tuple[str, float, str]] = {
    "cn-beijing": ("ghi", 1.00, "gn6i gn7i gn6v gn6e gn7 gn7e ebmgn7e gn8is gn5 gn5i"),
    "cn-hangzhou": ("hij", 1.00, "gn6i gn7i gn6v gn6e gn7 gn7e gn8is gn5 gn5i"),
    "cn-shanghai": ("efg", 1.00, "gn6i gn7i gn6v gn6e gn7 gn7e gn8is gn5"),
    "cn-shenzhen": ("cde", 1.00, "gn6i gn7i gn6v gn6e gn5 gn5i"),
    "cn-zhangjiakou": ("abc", 0.95, "gn6i gn7i gn6v gn7e gn8is"),
    "cn-wulanchabu": ("abc", 0.92, "gn7i gn7 gn7e ebmgn7e gn8is"),
    "cn-huhehaote": ("ab", 0.95, "gn6i gn6v"),
    "cn-qingdao": ("bc", 1.00, "gn6i gn5i"),
    "cn-chengdu": ("ab", 1.00, "gn6i gn7i"),
    "cn-hongkong": ("bcd", 1.25, "gn6i gn7i gn6v gn5"),
    "ap-southeast-1": ("abc", 1.20, "gn6i gn7i gn6v gn6e gn7 gn7e ebmgn7e gn5"),
    "ap-southeast-3": ("ab", 1.20, "gn6i"),
    "ap-southeast-5": ("ab", 1.20, "gn6i gn7i"),
    "ap-northeast-1": ("ab", 1.30, "gn6i gn7i gn6v gn7e"),
    "ap-northeast-2": ("a", 1.30, "gn6i gn7i"),
    "eu-central-1": ("ab", 1.25, "gn6i gn7i gn6v gn7e"),
    "eu-west-1": ("ab", 1.30, "gn6i gn7i"),
    "us-west-1": ("ab", 1.10, "gn6i gn7i gn6v gn7e"),
    "us-east-1": ("ab", 1.10, "gn6i gn7i gn6v"),
    "me-east-1": ("a", 1.35, "gn6i"),
}

TENCENT_GPU_CNY = {"T4": 5.8, "P40": 6.5, "V100-32GB": 17.0, "A10": 8.5, "A100": 24.0}
TENCENT_VCPU_CNY = 0.16
TENCENT_GIB_CNY = 0.03

TENCENT_FAMILIES: dict[str, list[tuple[str, str, int, int, int]]] = {
    "GN7": [
        ("GN7.2XLARGE32", "T4", 1, 8, 32), ("GN7.5XLARGE80", "T4", 1, 20, 80),
        ("GN7.8XLARGE128", "T4", 1, 32, 128), ("GN7.10XLARGE160", "T4", 2, 40, 160),
        ("GN7.20XLARGE320", "T4", 4, 80, 320),
    ],
    "GN8": [
        ("GN8.LARGE56", "P40", 1, 6, 56), ("GN8.3XLARGE112", "P40", 2, 14, 112),
        ("GN8.7XLARGE224", "P40", 4, 28, 224), ("GN8.14XLARGE448", "P40", 8, 56, 448),
    ],
    "GN10Xp": [
        ("GN10Xp.2XLARGE40", "V100-32GB", 1, 10, 40), ("GN10Xp.5XLARGE80", "V100-32GB", 2, 20, 80),
        ("GN10Xp.10XLARGE160", "V100-32GB", 4, 40, 160),
        ("GN10Xp.20XLARGE320", "V100-32GB", 8, 80, 320),
    ],
    "PNV4": [
        ("PNV4.7XLARGE116", "A10", 1, 28, 116), ("PNV4.14XLARGE232", "A10", 2, 56, 232),
        ("PNV4.28XLARGE466", "A10", 4, 112, 466), ("PNV4.56XLARGE932", "A10", 8, 224, 932),
    ],
    "GT4": [
        ("GT4.4XLARGE96", "A100", 1, 16, 96), ("GT4.8XLARGE192", "A100", 2, 32, 192),
        ("GT4.20XLARGE474", "A100", 4, 82, 474), ("GT4.41XLARGE948", "A100", 8, 164, 948),
    ],
}  # fmt: skip

TENCENT_REGIONS: dict[str, tuple[str, float, str]] = {
    "ap-guangzhou": ("346", 1.00, "GN7 GN8 GN10Xp PNV4 GT4"),
    "ap-shanghai": ("245", 1.00, "GN7 GN8 GN10Xp PNV4 GT4"),
    "ap-beijing": ("356", 1.00, "GN7 GN8 GN10Xp PNV4 GT4"),
    "ap-nanjing": ("123", 1.00, "GN7 GN10Xp PNV4 GT4"),
    "ap-chengdu": ("12", 1.00, "GN7 GN8 PNV4"),
    "ap-chongqing": ("1", 1.00, "GN7"),
    "ap-hongkong": ("23", 1.20, "GN7 PNV4"),
    "ap-singapore": ("123", 1.15, "GN7 GN10Xp PNV4 GT4"),
    "ap-tokyo": ("12", 1.30, "GN7 PNV4"),
    "ap-seoul": ("12", 1.25, "GN7"),
    "ap-bangkok": ("12", 1.15, "GN7"),
    "ap-jakarta": ("12", 1.15, "GN7"),
    "ap-mumbai": ("12", 1.10, "GN7"),
    "eu-frankfurt": ("12", 1.25, "GN7 GN10Xp PNV4"),
    "na-siliconvalley": ("12", 1.10, "GN7 GN10Xp PNV4 GT4"),
    "na-ashburn": ("12", 1.10, "GN7"),
    "na-toronto": ("1", 1.15, "GN7"),
    "sa-saopaulo": ("1", 1.40, "GN7"),
}


def _cn_rows(
    provider: str,
    families: dict[str, list[tuple[str, str, int, int, int]]],
    regions: dict[str, tuple[str, float, str]],
    gpu_cny: dict[str, float],
    vcpu_cny: float,
    gib_cny: float,
    zone_sep: str,
    known_regions: set[str],
) -> Iterator[Row]:
    for region, (suffixes, mult, fams) in regions.items():
        if region not in known_regions:
            continue
        for fam in fams.split():
            spot_ratio = 0.20 + 0.25 * _frac(provider, "spot", fam, region)
            for itype, gpu, count, vcpus, mem in families[fam]:
                cny = count * gpu_cny[gpu] + vcpus * vcpu_cny + mem * gib_cny
                price = cny * mult / CNY_PER_USD
                zones = _pick_zones([f"{region}{zone_sep}{s}" for s in suffixes], provider, itype)
                for zone in zones:
                    yield _row(
                        provider, region, zone, itype, gpu, count, vcpus, mem, price,
                        price * spot_ratio, CN_DATE,
                    )  # fmt: skip


def alibaba_rows(known_regions: set[str]) -> Iterator[Row]:
    return _cn_rows(
        "alibaba", ALIBABA_FAMILIES, ALIBABA_REGIONS, ALIBABA_GPU_CNY, ALIBABA_VCPU_CNY,
        ALIBABA_GIB_CNY, "-", known_regions,
    )  # fmt: skip


def tencent_rows(known_regions: set[str]) -> Iterator[Row]:
    return _cn_rows(
        "tencent", TENCENT_FAMILIES, TENCENT_REGIONS, TENCENT_GPU_CNY, TENCENT_VCPU_CNY,
        TENCENT_GIB_CNY, "-", known_regions,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------


def _known(path: Path, column: str, provider: str | None = None) -> set[str]:
    rows = _read_csv(path)
    return {r[column] for r in rows if provider is None or r["provider"] == provider}


def build(shared: Path, existing: list[Row]) -> tuple[list[Row], list[str]]:
    """All offer rows, and notes on what was carried over from the existing catalog."""
    regions_csv = DATA / "regions.csv"
    gpus = _known(ROOT / "policies" / "gpus.csv", "model")
    notes: list[str] = []
    rows: list[Row] = []

    def carry(provider: str, missing: Path) -> Iterable[Row]:
        notes.append(f"{provider}: {missing} not found; kept its rows from the existing catalog")
        return [r for r in existing if r["provider"] == provider]

    sources = {
        "aws": (AWS_FILE, aws_rows),
        "gcp": (GCP_FILE, gcp_rows),
        "azure": (AZURE_FILE, azure_rows),
    }
    for provider, (rel, fn) in sources.items():
        known = _known(regions_csv, "region", provider)
        path = shared / rel
        rows.extend(fn(path, known) if path.is_file() else carry(provider, path))
    rows.extend(alibaba_rows(_known(regions_csv, "region", "alibaba")))
    rows.extend(tencent_rows(_known(regions_csv, "region", "tencent")))
    unknown = sorted({r["gpu"] for r in rows} - gpus)
    if unknown:
        raise SystemExit(f"GPU models missing from gpus.csv: {', '.join(unknown)}")
    rows.sort(key=lambda r: (r["provider"], r["region"], r["instance_type"], r["zone"]))
    return rows, notes


def render(rows: list[Row]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def default_shared() -> Path:
    env = os.environ.get("PROVISIONER_SHARED_DATA")
    return Path(env) if env else ROOT.parent / "shared" / "data"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=default_shared(), help="shared data folder")
    ap.add_argument("--out", type=Path, default=OUT, help="catalog to write (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="exit 1 if the catalog is not up to date")
    args = ap.parse_args(argv)
    existing = _read_csv(args.out) if args.out.is_file() else []
    rows, notes = build(args.shared, existing)
    text = render(rows)
    for note in notes:
        print(note, file=sys.stderr)
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is out of date; run tools/build_catalog.py", file=sys.stderr)
            return 1
        print(f"{args.out}: up to date ({len(rows)} offers)")
        return 0
    args.out.write_text(text, encoding="utf-8")
    by_provider: dict[str, int] = {}
    for r in rows:
        by_provider[r["provider"]] = by_provider.get(r["provider"], 0) + 1
    print(f"wrote {args.out}: {len(rows)} offers ({by_provider})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
