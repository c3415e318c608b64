"""An account's quotas, and whether an offer fits in what is left of them (pure).

Each cloud limits GPU capacity per account and region in its own unit: AWS in vCPUs per
instance family and market (Service Quotas), GCP in GPUs per model and market (a region's
``quotas``), Azure in vCPUs per VM family and for all spot VMs of a region (the usage API). A
:class:`Quota` says which offers it covers (``market``, ``families``), in which ``unit`` an
offer draws on it, its ``limit`` and what is ``used`` (None: not read, and the whole limit
counts as left), and where those figures come from (``source``: :data:`SOURCES`), so that
`provisioner quotas` can say which are live. :func:`blocking` names the first quota an offer
would exceed; the planner rejects such an offer with reason ``quota``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from provisioner.core.models import Market, Offer

VCPU = "vcpu"
GPU = "gpu"
INSTANCE = "instance"
ANY = "any"  # a quota of both markets

#: where a quota's figures come from, all read at its ``at``
FROM_CLOUD = "cloud"  # the limit and the usage, as the cloud reports them
FROM_COUNT = "counted"  # the limit from the cloud; the usage counted from its running instances
FROM_LIMIT = "limit"  # the limit from the cloud; no usage read (the whole limit counts as left)
FROM_LAUNCH = "launch"  # no figure: a launch the cloud refused for quota (nothing more fits)
SOURCES = (FROM_CLOUD, FROM_COUNT, FROM_LIMIT, FROM_LAUNCH)


@dataclass(frozen=True, slots=True)
class Quota:
    """One limit of one account in one region (or zone)."""

    provider: str
    region: str
    name: str  # the cloud's own name or code (what the user asks the cloud to raise)
    unit: str  # VCPU, GPU or INSTANCE: what an offer draws on it
    limit: float
    used: float | None  # None: not reported (the whole limit is taken as left)
    market: str  # "spot", "on-demand" or ANY
    families: tuple[str, ...] = ()  # which offers it covers (per cloud, see covers()); () all
    at: datetime | None = None  # when it was read
    zone: str = ""  # a zonal quota (Tencent); "" for the region
    note: str = ""  # the cloud's description, for `provisioner quotas`
    source: str = ""  # one of SOURCES ("": a row stored before sources were kept; see origin)

    @property
    def remaining(self) -> float:
        return max(self.limit - (self.used or 0.0), 0.0)

    @property
    def origin(self) -> str:
        """Where the figures come from (:data:`SOURCES`); for a row stored without one, what
        its figures say (a usage: the cloud's; none: the limit only)."""
        if self.source:
            return self.source
        return FROM_LIMIT if self.used is None else FROM_CLOUD

    @property
    def live(self) -> tuple[str, ...]:
        """Which figures were read from the cloud (at ``at``): ``("limit", "used")``,
        ``("limit",)`` or ``()`` (a refused launch's row)."""
        return {FROM_LIMIT: ("limit",), FROM_LAUNCH: ()}.get(self.origin, ("limit", "used"))

    def as_dict(self, now: datetime | None = None) -> dict[str, Any]:
        age = None if self.at is None or now is None else (now - self.at).total_seconds()
        return {
            "provider": self.provider,
            "region": self.region,
            "zone": self.zone,
            "name": self.name,
            "note": self.note,
            "unit": self.unit,
            "limit": self.limit,
            "used": self.used,
            "remaining": self.remaining,
            "market": self.market,
            "families": list(self.families),
            "source": self.origin,
            "live": list(self.live),
            "at": None if self.at is None else self.at.isoformat(),
            "age_s": None if age is None else round(age, 1),
        }


def aws_family(instance_type: str) -> str:
    """``p4d.24xlarge`` -> ``p4d``."""
    return instance_type.split(".", 1)[0].lower()


def azure_family_key(text: str) -> str:
    """A VM size or a usage family name reduced to compare: ``Standard_NC24ads_A100_v4`` and
    ``standardNCADSA100v4Family`` both give ``ncadsa100v4``."""
    t = text.lower()
    if t.startswith("standard_"):  # a size: the first part's digits are its vCPU count
        head, _, rest = t.removeprefix("standard_").partition("_")
        t = re.sub(r"\d+", "", head) + rest
    else:  # a usage family name
        t = t.removeprefix("standard").removesuffix("family")
    return t.replace("_", "").replace(" ", "")


def gcp_gpu_metric(gpu: str, market: Market) -> str:
    """The regional quota metric of a GPU model: ``A100-80GB`` on spot ->
    ``PREEMPTIBLE_NVIDIA_A100_80GB_GPUS``."""
    name = "NVIDIA_" + re.sub(r"[^A-Z0-9]+", "_", gpu.upper()).strip("_") + "_GPUS"
    return ("PREEMPTIBLE_" + name) if market is Market.SPOT else name


def covers(q: Quota, offer: Offer, market: Market) -> bool:
    """Whether an offer on a market draws on ``q``."""
    if q.provider != offer.provider or q.region != offer.region:
        return False
    if q.zone and offer.zone and q.zone != offer.zone:
        return False
    if q.market != ANY and q.market != market.value:
        return False
    if not q.families:
        return True
    if offer.provider == "aws":  # families are instance-family prefixes: ("g", "vt"), ("p",)
        fam = aws_family(offer.instance_type)
        return any(fam.startswith(f) for f in q.families)  # g4dn, g5, gr6: all G
    if offer.provider == "gcp":  # families are GPU quota metrics (a standard one may be ANY)
        metrics = {gcp_gpu_metric(offer.gpu, market), gcp_gpu_metric(offer.gpu, Market.ON_DEMAND)}
        return bool(metrics & set(q.families))
    if offer.provider == "azure":  # families are VM family names
        key = azure_family_key(offer.instance_type)
        return any(azure_family_key(f) == key for f in q.families)
    return offer.instance_type in q.families


def amount(q: Quota, offer: Offer, nodes: int = 1) -> float:
    """What ``nodes`` instances of ``offer`` draw on ``q``, in its unit."""
    if q.unit == VCPU:
        return offer.vcpus * nodes
    if q.unit == GPU:
        return float(offer.gpu_count * nodes)
    return float(nodes)


def blocking(quotas: Iterable[Quota], offer: Offer, market: Market, nodes: int = 1) -> Quota | None:
    """The first quota that ``nodes`` instances of ``offer`` would exceed; None: they fit."""
    for q in quotas:
        if covers(q, offer, market) and amount(q, offer, nodes) > q.remaining:
            return q
    return None


def why(q: Quota, offer: Offer, nodes: int = 1) -> str:
    """``needs 96 vcpu of quota L-7212CCBC (All P Spot Instance Requests): 0 of 0 left``."""
    label = f"{q.name} ({q.note})" if q.note else q.name
    return (
        f"needs {amount(q, offer, nodes):g} {q.unit} of quota {label}: "
        f"{q.remaining:g} of {q.limit:g} left"
    )


def refused_at_launch(offer: Offer, market: Market, code: str, at: datetime) -> Quota:
    """What a launch the cloud refused for quota says: nothing more of this kind fits there
    (the family's on AWS, the GPU model's on GCP, the size's elsewhere), until the next
    ``provisioner quotas --refresh`` reads the real figures."""
    if offer.provider == "aws":
        family = re.match(r"[a-z]+", aws_family(offer.instance_type))
        families: tuple[str, ...] = (family.group(0) if family else offer.instance_type,)
    elif offer.provider == "gcp":
        families = (gcp_gpu_metric(offer.gpu, market),)
    else:
        families = (offer.instance_type,)
    return Quota(
        provider=offer.provider,
        region=offer.region,
        name=f"{code} at launch: {families[0]}",
        unit=INSTANCE,
        limit=0.0,
        used=None,
        market=market.value,
        families=families,
        at=at,
        note=f"{offer.instance_type} {market.value} refused with {code}",
        source=FROM_LAUNCH,
    )
