"""The policy: what the user wants, as a pydantic v2 model.

A policy says which GPUs a job may run on (by model list, by VRAM, or sized from a workload
description), on which market, at what price at most, within which budget and deadline, where
the data may go (residency), how close to users or data it should be (latency), what to prefer
among eligible offers, and how to checkpoint and restart. ``policies.loader`` reads it from
YAML with errors that name file:line:column.
"""

from __future__ import annotations

import enum
import re
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    field_validator,
    model_validator,
)

from policies.durations import (
    DURATION_RE,
    non_negative_duration,
    parse_duration,
    positive_duration,
)
from policies.enforcement import CapEnforce
from policies.job import Job
from policies.notify import Notify
from policies.resources import (
    GPUName,
    Interconnect,
    Method,
    Precision,
    Resources,
    Workload,
)
from policies.strict import StrictModel as _Model

__all__ = [
    "GPUName",
    "Interconnect",
    "MarketChoice",
    "Method",
    "Policy",
    "Precision",
    "Resources",
    "Workload",
    "parse_duration",
]


class MarketChoice(str, enum.Enum):
    SPOT = "spot"
    ON_DEMAND = "on-demand"
    SPOT_THEN_ON_DEMAND = "spot-then-on-demand"
    #: held capacity (``reservations:``) first, then the named markets
    RESERVED = "reserved"
    RESERVED_THEN_SPOT = "reserved-then-spot"
    RESERVED_THEN_ON_DEMAND = "reserved-then-on-demand"
    RESERVED_THEN_SPOT_THEN_ON_DEMAND = "reserved-then-spot-then-on-demand"

    @property
    def names(self) -> tuple[str, ...]:
        """The markets it allows, in order: ("reserved", "spot", "on-demand") or a part."""
        return tuple(self.value.split("-then-"))


class BidCap(_Model):
    """The most the job bids for spot capacity; the tightest of the given caps applies."""

    max_spot_price_per_hour: float | None = Field(None, gt=0, description="USD per instance-hour.")
    max_spot_price_per_gpu_hour: float | None = Field(None, gt=0, description="USD per GPU-hour.")
    max_fraction_of_on_demand: float | None = Field(
        None, gt=0, le=1, description="Spot price at most this share of the on-demand price."
    )
    enforce: CapEnforce | None = Field(
        None,
        description="Who holds the job to the cap: `cloud` (sent as the cloud's maximum price; "
        "the cloud reclaims the instance once its price passes it) or `daemon` (no maximum "
        "price sent; the daemon reads the running price every pass and moves the job, made "
        "before break, once it passes the cap). Unset: the cloud's default (docs/clouds.md). "
        "A cloud that takes no maximum price (GCP) is always `daemon`.",
    )


class Budget(_Model):
    max_price_per_hour: float | None = Field(
        None,
        gt=0,
        description="USD per hour for the whole job (all its nodes; one instance unless "
        "resources.nodes says more), any market.",
    )
    max_total: float | None = Field(None, gt=0, description="USD for the whole job.")
    on_exhausted: Literal["stop", "pause"] = Field(
        "stop", description="What to do when the total budget would be exceeded."
    )


class Residency(_Model):
    """Where the job and its data may run."""

    allow: list[str] = Field(
        default_factory=list,
        description="Jurisdiction tags (EU, EEA, GDPR, CN-mainland, US, ...) or ISO countries.",
    )
    deny: list[str] = Field(default_factory=list, description="Tags or countries never allowed.")
    allow_regions: list[str] = Field(
        default_factory=list, description="Only these regions (`region` or `provider:region`)."
    )
    deny_regions: list[str] = Field(default_factory=list, description="Never these regions.")
    providers: list[str] = Field(default_factory=list, description="Only these clouds.")


#: The clouds a ``provider:region`` may name (the sim mimics their region names).
PROVIDERS = ("aws", "gcp", "azure", "alibaba", "tencent", "sim")
_REGION = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
#: A measured round trip longer than a minute is a typo (or seconds given as ms).
MAX_RTT_MS = 60_000.0


def provider_region(key: str) -> tuple[str, str]:
    """``aws:eu-west-1`` as ``("aws", "eu-west-1")``, or a ValueError that shows the form."""
    provider, sep, region = key.partition(":")
    if not sep or provider not in PROVIDERS or not _REGION.match(region):
        shown = repr(key) if len(key) <= 40 else repr(key[:37] + "...")
        raise ValueError(
            f"{shown} is not provider:region (like aws:eu-west-1; providers: "
            f"{', '.join(PROVIDERS)})"
        )
    return provider, region


def _provider_region_key(key: str) -> str:
    provider_region(key)
    return key


ProviderRegion = Annotated[str, AfterValidator(_provider_region_key)]
RTT = Annotated[float, Field(gt=0, le=MAX_RTT_MS)]


class LatencyTarget(_Model):
    name: str | None = None
    lat: float | None = Field(None, ge=-90, le=90)
    lon: float | None = Field(None, ge=-180, le=180)
    region: str | None = Field(None, description="`provider:region` instead of coordinates.")
    weight: float = Field(1.0, gt=0)

    @field_validator("region")
    @classmethod
    def _region(cls, v: str | None) -> str | None:
        if v is not None:
            provider_region(v)
        return v

    @model_validator(mode="after")
    def _where(self) -> LatencyTarget:
        has_point = self.lat is not None and self.lon is not None
        if not has_point and not self.region:
            raise ValueError("a latency target needs lat and lon, or region")
        if (self.lat is None) != (self.lon is None):
            raise ValueError("give both lat and lon")
        return self


class Latency(_Model):
    targets: list[LatencyTarget] = Field(default_factory=list)
    max_rtt_ms: float | None = Field(
        None, gt=0, description="Reject offers estimated slower than this."
    )
    measured: dict[ProviderRegion, RTT] = Field(
        default_factory=dict,
        description="Measured RTT in ms by `provider:region`; overrides estimates.",
    )


class Preferences(_Model):
    """Weights of the ranking among eligible offers (relative; 0 ignores a term)."""

    price: float = Field(1.0, ge=0)
    latency: float = Field(0.0, ge=0)
    interruption_risk: float = Field(0.3, ge=0)
    tflops_per_dollar: float = Field(0.0, ge=0)


class Idle(_Model):
    """An idle GPU: utilisation under ``threshold_pct`` on every GPU for ``duration``."""

    threshold_pct: float = Field(
        5.0, ge=0, le=100, description="A GPU under this utilisation (percent) counts as idle."
    )
    duration: Annotated[
        timedelta, Field(description="How long every GPU must stay idle before acting.")
    ] = timedelta(minutes=30)
    action: Literal["report", "stop"] = Field(
        "report", description="report: an event once per attempt; stop: also stop the job."
    )

    _iv = field_validator("duration", mode="before")(
        classmethod(lambda cls, v: non_negative_duration(v))
    )

    @field_validator("duration")
    @classmethod
    def _positive(cls, v: timedelta) -> timedelta:
        if v.total_seconds() <= 0:
            raise ValueError("idle.duration must be longer than 0 (for example 30m)")
        return v


class Checkpoint(_Model):
    uri: str = Field(
        "file://./checkpoints",
        description="fsspec URI: file://, s3://, gs://, az:// or abfs:// "
        "(abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX)",
    )
    shared: bool = Field(
        False,
        description="The URI is a filesystem every VM mounts at the same path (EFS, Filestore, "
        "Azure Files, NFS): `up` lets a file:// URI through for a cloud.",
    )
    interval: Annotated[timedelta, Field(description="Periodic checkpoint interval.")] = timedelta(
        minutes=15
    )
    signal: str = Field("SIGUSR1", description="Signal that asks the job to checkpoint now.")
    grace: Annotated[timedelta, Field(description="Longest a checkpoint may take.")] = timedelta(
        seconds=60
    )

    _iv = field_validator("interval", mode="before")(
        classmethod(lambda cls, v: positive_duration(v))
    )
    _gr = field_validator("grace", mode="before")(
        classmethod(lambda cls, v: non_negative_duration(v))
    )

    @field_validator("signal")
    @classmethod
    def _signal(cls, v: str) -> str:
        return checkpoint_signal(v)

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        scheme = v.split("://", 1)[0] if "://" in v else ""
        if scheme in {"oss", "cos", "cosn"}:  # no fsspec store reads them with the VM's role
            raise ValueError(
                f"{scheme}:// is not supported as a checkpoint store: an Alibaba or Tencent VM "
                "can use no bucket with its own role yet; mount a shared filesystem (NAS, "
                "CFS) at the same path on every VM and set checkpoint.shared: true"
            )
        if scheme not in {"file", "s3", "gs", "gcs", "az", "abfs", "memory"}:
            raise ValueError("use a file://, s3://, gs://, az://, abfs:// or memory:// URI")
        return v


#: Signals a job cannot catch: asking for a checkpoint with one would kill or freeze it.
UNCATCHABLE_SIGNALS = frozenset({"SIGKILL", "SIGSTOP"})


def checkpoint_signal(v: str) -> str:
    """The canonical name (``SIGUSR1``) of a signal the job can catch, from ``signal.Signals``
    (``usr1``, ``SIGUSR1`` and ``sigusr1`` all work; ``SIG_DFL`` and numbers do not)."""
    import signal as _signal

    name = v.strip().upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    members = _signal.Signals.__members__
    if name not in members or name in UNCATCHABLE_SIGNALS:
        shown = repr(v) if len(v) <= 20 else repr(v[:17] + "...")
        why = (
            f"{shown} cannot be caught by the job" if name in members else f"unknown signal {shown}"
        )
        raise ValueError(f"{why} (use SIGUSR1, SIGUSR2, SIGTERM or SIGINT)")
    return name


class Restart(_Model):
    max_restarts: int = Field(20, ge=0, le=10_000)
    zone_cooldown: Annotated[
        timedelta,
        Field(
            description=(
                "How long a preempted zone is avoided (and a zone whose launch refusal named "
                "the whole zone: not open to the account, its subnet or vSwitch full)."
            )
        ),
    ] = timedelta(minutes=30)
    launch_calls_per_hour: int = Field(
        120,
        ge=1,
        le=100_000,
        description="Launch calls per cloud in any hour, at most (refused ones count).",
    )
    on_exit_codes: list[Annotated[int, Field(ge=1, le=255)]] = Field(
        default_factory=list,
        description=(
            "Exit codes of the job's command that restart it (a new attempt, counted against "
            "max_restarts) instead of failing it; every other non-zero exit fails the job."
        ),
        max_length=255,
    )
    _iv = field_validator("zone_cooldown", mode="before")(
        classmethod(lambda cls, v: non_negative_duration(v))
    )


class TimeWindow(_Model):
    cron: str = Field(description="Five-field cron expression for when a window opens (UTC).")
    duration: Annotated[timedelta, Field(description="How long each window lasts.")]

    _iv = field_validator("duration", mode="before")(
        classmethod(lambda cls, v: positive_duration(v))
    )

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str) -> str:
        from policies.cron import CronSpec

        CronSpec.parse(v)  # raises ValueError with a precise message
        return v


#: An absolute deadline outside these years is a typo (and far ones overflow date arithmetic).
DEADLINE_YEARS = (2000, 2200)


class Policy(_Model):
    """Everything provisioner needs to know about a job's rules."""

    name: str = Field("job", min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    job: Job = Field(default_factory=lambda: Job())
    resources: Resources = Field(default_factory=lambda: Resources())
    market: MarketChoice = MarketChoice.SPOT_THEN_ON_DEMAND
    reservations: list[str] | Literal["any"] = Field(
        "any",
        description="Held capacity a `reserved` market may launch into: reservation or "
        "capacity-block ids (AWS cr-..., GCP reservation names, Azure capacity reservation "
        "group names), or `any`: every matching one the account holds.",
    )
    bid_cap: BidCap = Field(default_factory=lambda: BidCap())
    budget: Budget = Field(default_factory=lambda: Budget())
    deadline: datetime | timedelta | None = Field(
        None, description="ISO time (2026-12-24T18:00:00Z) or a duration from submission (48h)."
    )
    residency: Residency = Field(default_factory=lambda: Residency())
    latency: Latency = Field(default_factory=lambda: Latency())
    preferences: Preferences = Field(default_factory=lambda: Preferences())
    checkpoint: Checkpoint = Field(default_factory=lambda: Checkpoint())
    restart: Restart = Field(default_factory=lambda: Restart())
    windows: list[TimeWindow] = Field(default_factory=list)
    idle: Idle | None = Field(None, description="What to do about a job whose GPUs sit idle.")
    notify: Notify | None = Field(
        None, description="Who hears about the job (targets by name) and about what."
    )
    tags: dict[str, str] = Field(
        default_factory=dict,
        description="Cost-allocation tags put on every instance (GCP labels are lowercased: "
        "`provisioner policy check` says how each one is mapped).",
    )

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not key.strip():
                raise ValueError("a tag key cannot be empty")
            if len(key) > 128 or len(value) > 256:
                raise ValueError(f"tag {key!r}: keys are at most 128 characters, values 256")
            if key.lower().startswith("provisioner-"):
                raise ValueError(f"tag {key!r}: keys starting with provisioner- are reserved")
        return v

    @field_validator("deadline", mode="before")
    @classmethod
    def _deadline(cls, v: Any) -> Any:
        # YAML reads an unquoted 2026-12-24T18:00:00Z as a datetime, 2026-12-24 as a date
        if v is None or isinstance(v, timedelta):
            return v
        help_ = "an ISO time like 2026-12-24T18:00:00Z or a duration like 48h"
        if isinstance(v, datetime):
            dt = v
        elif isinstance(v, date):
            dt = datetime(v.year, v.month, v.day)
        elif isinstance(v, str) and len(v) <= 64 and DURATION_RE.match(v):
            return non_negative_duration(v)
        elif isinstance(v, str) and len(v) <= 64:
            try:
                dt = datetime.fromisoformat(v.strip().replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"must be {help_}, got {v!r}") from None
        else:
            shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
            raise ValueError(f"must be {help_}, got {shown}")
        dt = dt if dt.tzinfo else dt.replace(tzinfo=UTC)
        if not DEADLINE_YEARS[0] <= dt.year <= DEADLINE_YEARS[1]:
            raise ValueError(
                f"must be a time between the years {DEADLINE_YEARS[0]} and {DEADLINE_YEARS[1]}"
            )
        return dt

    def deadline_at(self, submitted: datetime) -> datetime | None:
        if self.deadline is None:
            return None
        if isinstance(self.deadline, timedelta):
            return submitted + self.deadline
        return self.deadline

    @field_validator("reservations")
    @classmethod
    def _reservations(cls, v: list[str] | str) -> list[str] | str:
        if isinstance(v, list):
            if not v:
                raise ValueError("name at least one reservation id, or write `any`")
            for rid in v:
                if not rid.strip() or len(rid) > 256:
                    raise ValueError(f"reservation id {rid!r}: 1 to 256 characters")
        return v

    @property
    def allows_reserved(self) -> bool:
        return "reserved" in self.market.names

    @property
    def allows_spot(self) -> bool:
        return "spot" in self.market.names

    @property
    def allows_on_demand(self) -> bool:
        return "on-demand" in self.market.names

    def reservation_allowed(self, reservation_id: str) -> bool:
        """Whether the policy lets a launch use the reservation ``reservation_id``."""
        if not self.allows_reserved:
            return False
        return self.reservations == "any" or reservation_id in self.reservations
