"""The offer catalog: every GPU offer we know of, indexed for planning.

Offers are kept both as :class:`Offer` rows and as numpy columns (codes for provider, region,
GPU; prices as floats), with an index from GPU model to row numbers. The planner selects the
rows of the eligible GPU models through the index and evaluates every remaining rule as a
vectorised mask, so a plan over 100,000 offers never loops over them in Python.

Layouts parsed (from lines of text: :mod:`provisioner.catalog_files` opens the files): our own
(``provisioner/data/offers.csv``), SkyPilot's ``vms.csv`` layout (InstanceType, AcceleratorName, AcceleratorCount, vCPUs, MemoryGiB, Price, SpotPrice, Region,
AvailabilityZone; a Provider column or ``provider=``), and the GCP price list flattened from
Cyclenerd's pricing.yml (machine_type, region, gpu_type, gpu_count, hour, hour_spot).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from policies.gpus import canonical_gpu
from provisioner.core.models import Offer
from provisioner.errors import InputError

if TYPE_CHECKING:
    import numpy as np

    from provisioner.core.network import NetworkFacts

OWN_COLUMNS = [
    "provider",
    "region",
    "zone",
    "instance_type",
    "gpu",
    "gpu_count",
    "vcpus",
    "memory_gib",
    "price",
    "spot_price",
    "price_date",
    "interruption_band",
]
SKYPILOT_COLUMNS = {
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "Price",
    "SpotPrice",
    "Region",
}
GCP_PRICELIST_COLUMNS = {"machine_type", "region", "gpu_type", "gpu_count", "hour", "hour_spot"}

BANDS = ("<5%", "5-10%", "10-15%", "15-20%", ">20%")
#: Expected share of spot capacity reclaimed per month, per band (mid-points; >20% taken as 25%)
BAND_RISK = {"<5%": 0.025, "5-10%": 0.075, "10-15%": 0.125, "15-20%": 0.175, ">20%": 0.25}


class CatalogError(InputError, ValueError):
    """A catalog file that cannot be read; the message names the file and line."""


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    value = float(text)
    return value if value == value else None  # NaN -> None


def _provider_from_name(path: str) -> str | None:
    name = os.path.basename(path).lower()
    for p in ("aws", "gcp", "azure", "alibaba", "tencent", "sim"):
        if name.startswith(p) or f"_{p}" in name or f"-{p}" in name:
            return p
    return None


def _band(text: str | None) -> str:
    text = (text or "").strip()
    return text if text in BANDS else ""


def parse_offers(lines: Iterable[str], source: str, provider: str | None = None) -> list[Offer]:
    """Offers from the lines of a catalog CSV in any supported layout (``source`` names the file
    in errors and guesses the provider of SkyPilot rows); rows without a known GPU are skipped.
    Pure: reading the file is :func:`provisioner.catalog_files.read_offers`'s job."""
    p = source
    reader = csv.DictReader(lines)
    cols = set(reader.fieldnames or ())
    try:
        if set(OWN_COLUMNS) <= cols:
            return _read_own(reader, p)
        if cols >= SKYPILOT_COLUMNS:
            prov = provider or _provider_from_name(p)
            return _read_skypilot(reader, p, prov)
        if cols >= GCP_PRICELIST_COLUMNS:
            return _read_gcp_pricelist(reader)
    except (ValueError, KeyError) as exc:
        raise CatalogError(f"{p}:{reader.line_num}: {exc}") from None
    raise CatalogError(
        f"{p}: unknown catalog layout (columns: {', '.join(sorted(cols)) or 'none'}); expected "
        "provisioner's own layout, SkyPilot vms.csv, or the GCP price list"
    )


def _read_own(reader: csv.DictReader[str], path: str) -> list[Offer]:
    # The rows as lists (the DictReader's own csv.reader), by column position: the built-in
    # catalog is read on every cold `provisioner plan`, and dicts per row cost a third of it.
    at = {name: i for i, name in enumerate(reader.fieldnames or ())}
    cols = [at[c] for c in OWN_COLUMNS]
    width = max(cols) + 1
    gpu_names: dict[str, str] = {}
    out = []
    for row in reader.reader:
        if not row:
            continue
        if len(row) < width:
            raise ValueError(f"{len(row)} fields, expected {len(at)}")
        (prov, region, zone, itype, gpu_text, count, vcpus, mem, price, spot, date, band) = (
            row[i] for i in cols
        )
        gpu = gpu_names.get(gpu_text)
        if gpu is None:
            gpu = gpu_names[gpu_text] = canonical_gpu(gpu_text) or gpu_text
        out.append(
            Offer(
                provider=prov,
                region=region,
                zone=zone,
                instance_type=itype,
                gpu=gpu,
                gpu_count=int(float(count)),
                vcpus=float(vcpus or 0),
                memory_gib=float(mem or 0),
                price=_num(price),
                spot_price=_num(spot),
                price_date=date,
                interruption_band=_band(band),
            )
        )
    return out


def _read_skypilot(reader: csv.DictReader[str], path: str, provider: str | None) -> list[Offer]:
    out = []
    for row in reader:
        prov = (row.get("Provider") or row.get("Cloud") or provider or "").lower()
        if not prov:
            raise ValueError("no Provider column: pass --provider (aws, gcp, azure, ...)")
        gpu = canonical_gpu(row["AcceleratorName"])
        count = _num(row["AcceleratorCount"])
        if gpu is None or not count or count < 1:  # fractional-GPU shapes are not whole GPUs
            continue
        price, spot = _num(row["Price"]), _num(row["SpotPrice"])
        if price is None and spot is None:
            continue
        out.append(
            Offer(
                provider=prov,
                region=row["Region"],
                zone=(row.get("AvailabilityZone") or "").strip(),
                instance_type=row["InstanceType"],
                gpu=gpu,
                gpu_count=int(count),
                vcpus=_num(row.get("vCPUs")) or 0.0,
                memory_gib=_num(row.get("MemoryGiB")) or 0.0,
                price=price,
                spot_price=spot,
                price_date=(row.get("PriceDate") or "").strip(),
                interruption_band=_band(row.get("InterruptionBand")),
            )
        )
    return out


def _read_gcp_pricelist(reader: csv.DictReader[str]) -> list[Offer]:
    out = []
    for row in reader:
        gpu = canonical_gpu(row["gpu_type"])
        count = _num(row["gpu_count"])
        if gpu is None or not count or count < 1 or not row["region"]:
            continue
        price, spot = _num(row["hour"]), _num(row["hour_spot"])
        if price is None and spot is None:
            continue
        out.append(
            Offer(
                provider="gcp",
                region=row["region"],
                zone="",
                instance_type=row["machine_type"],
                gpu=gpu,
                gpu_count=int(count),
                vcpus=_num(row.get("cpu")) or 0.0,
                memory_gib=_num(row.get("ram_gb")) or 0.0,
                price=price,
                spot_price=spot,
            )
        )
    return out


@dataclass
class Catalog:
    """Offers with columnar indexes. Build with :meth:`from_offers` (from files:
    :func:`provisioner.catalog_files.load_catalog`)."""

    offers: list[Offer]
    sources: list[str] = field(default_factory=list)
    #: network and GPU-link facts by (provider, instance type) (:mod:`provisioner.core.network`;
    #: None: not known, and a policy asking for an interconnect finds nothing that meets it)
    network: Mapping[tuple[str, str], NetworkFacts] | None = None

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def from_offers(cls, offers: Iterable[Offer], source: str = "<memory>") -> Catalog:
        return cls(list(offers), [source])

    def with_prices(self, quotes: Iterable[Any]) -> Catalog:
        """A catalog priced by live quotes (provider, region, zone, type, read ``at``), as
        ``plan`` prices it: :func:`provisioner.core.price_age.freshest` (a quote replaces a
        row's prices unless the row is newer; a quote with an empty zone covers the region's
        zones; a quote for a zone the catalog has no row of its type in is an offer of its own).
        """
        from provisioner.core.price_age import freshest

        return freshest(self, quotes)[0]

    def merged(self, other: Catalog) -> Catalog:
        network = {**(self.network or {}), **(other.network or {})}
        return Catalog(
            self.offers + other.offers,
            self.sources + other.sources,
            network if (self.network is not None or other.network is not None) else None,
        )

    def __len__(self) -> int:
        return len(self.offers)

    # -- queries ----------------------------------------------------------------------------

    def filter(
        self,
        *,
        provider: str | None = None,
        gpu: str | None = None,
        regions: Sequence[str] | None = None,
        instance_type: str | None = None,
    ) -> list[Offer]:
        """Offers matching every given criterion (GPU names are normalised)."""
        idx = self.columns
        rows: Iterable[int]
        if gpu is not None:
            model = canonical_gpu(gpu) or gpu
            rows = idx.by_gpu.get(model, ())
        else:
            rows = range(len(self.offers))
        region_set = set(regions) if regions else None
        out = []
        for i in rows:
            o = self.offers[i]
            if provider and o.provider != provider:
                continue
            if region_set and o.region not in region_set:
                continue
            if instance_type and o.instance_type != instance_type:
                continue
            out.append(o)
        return out

    @cached_property
    def columns(self) -> CatalogColumns:
        return CatalogColumns.build(self.offers)


@dataclass(frozen=True)
class CatalogColumns:
    """Columnar, integer-coded view of the offers, plus indexes by GPU, provider and region."""

    provider_names: list[str]
    region_keys: list[tuple[str, str]]  # (provider, region) per region code
    gpu_names: list[str]
    provider: np.ndarray  # int16 code per offer
    region: np.ndarray  # int32 code per offer, into region_keys
    gpu: np.ndarray  # int16 code per offer
    gpu_count: np.ndarray
    vcpus: np.ndarray
    memory_gib: np.ndarray
    price: np.ndarray  # NaN when unknown
    spot_price: np.ndarray  # NaN when no spot market
    band_risk: np.ndarray  # NaN when unknown
    by_gpu: dict[str, np.ndarray]  # model -> row numbers
    by_provider: dict[str, np.ndarray]
    by_region: dict[tuple[str, str], np.ndarray]

    @classmethod
    def build(cls, offers: Sequence[Offer]) -> CatalogColumns:
        import numpy as np

        prov_codes: dict[str, int] = {}
        region_codes: dict[tuple[str, str], int] = {}
        gpu_codes: dict[str, int] = {}
        n = len(offers)
        provider = np.empty(n, dtype=np.int16)
        region = np.empty(n, dtype=np.int32)
        gpu = np.empty(n, dtype=np.int16)
        nan = float("nan")
        for i, o in enumerate(offers):
            provider[i] = prov_codes.setdefault(o.provider, len(prov_codes))
            region[i] = region_codes.setdefault((o.provider, o.region), len(region_codes))
            gpu[i] = gpu_codes.setdefault(o.gpu, len(gpu_codes))
        gpu_count = np.fromiter((o.gpu_count for o in offers), dtype=np.float64, count=n)
        vcpus = np.fromiter((o.vcpus for o in offers), dtype=np.float64, count=n)
        mem = np.fromiter((o.memory_gib for o in offers), dtype=np.float64, count=n)
        price = np.fromiter(
            (nan if o.price is None else o.price for o in offers), dtype=np.float64, count=n
        )
        spot = np.fromiter(
            (nan if o.spot_price is None else o.spot_price for o in offers),
            dtype=np.float64,
            count=n,
        )
        risk = np.fromiter(
            (BAND_RISK.get(o.interruption_band, nan) for o in offers), dtype=np.float64, count=n
        )

        def index(codes: np.ndarray, names: dict[Any, int]) -> dict[Any, np.ndarray]:
            order = np.argsort(codes, kind="stable")
            sorted_codes = codes[order]
            bounds = np.searchsorted(sorted_codes, np.arange(len(names) + 1))
            by_code = {c: order[bounds[c] : bounds[c + 1]] for c in range(len(names))}
            return {name: by_code[c] for name, c in names.items()}

        return cls(
            provider_names=list(prov_codes),
            region_keys=list(region_codes),
            gpu_names=list(gpu_codes),
            provider=provider,
            region=region,
            gpu=gpu,
            gpu_count=gpu_count,
            vcpus=vcpus,
            memory_gib=mem,
            price=price,
            spot_price=spot,
            band_risk=risk,
            by_gpu=index(gpu, gpu_codes),
            by_provider=index(provider, prov_codes),
            by_region=index(region, region_codes),
        )
