"""The one interface every cloud adapter implements.

Providers translate; they hold no policy. A provider turns a :class:`LaunchRequest` into SDK
calls and SDK answers into :class:`Instance` and :class:`Interruption`, and classifies every
cloud error by its *code* onto :class:`ErrorKind`. Which offer to take, at what cap, and what
to do after a failure is decided elsewhere (planner, decide()).
"""

from __future__ import annotations

import abc
import builtins
import functools
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, ClassVar, TypeVar

from provisioner.core.models import Instance, Interruption, LaunchRequest
from provisioner.errors import CloudError

log = logging.getLogger("provisioner.providers")

T = TypeVar("T")


class ErrorKind(str, Enum):
    """The small taxonomy every cloud error is mapped onto."""

    CAPACITY = "capacity"  # no capacity for this type here now: take the next offer
    QUOTA = "quota"  # account limit: fail fast, tell the user
    PRICE_TOO_LOW = "price-too-low"  # the bid cap is under the market: next offer
    AUTH = "auth"  # credentials missing/invalid/forbidden
    NOT_FOUND = "not-found"
    THROTTLED = "throttled"  # retry with backoff
    TRANSIENT = "transient"  # 5xx, timeouts: retry with backoff
    INVALID = "invalid"  # our request is wrong: do not retry

    @property
    def retryable(self) -> bool:
        return self in (ErrorKind.THROTTLED, ErrorKind.TRANSIENT)

    @property
    def try_next_offer(self) -> bool:
        return self in (ErrorKind.CAPACITY, ErrorKind.PRICE_TOO_LOW)


class ErrorScope(str, Enum):
    """How far a refusal reaches: what another launch must change to stand a chance.

    A launch refused with a ``ZONE`` error is refused for everything in that zone (the zone is
    not open to the account, its subnet or vSwitch has no free address): the job avoids the
    zone for a while, and the region is not blocked. ``REGION`` is the account's limit in the
    region (a quota), ``ACCOUNT`` the account anywhere (credentials, balance). ``OFFER`` is
    this type on this market in this zone (sold out, price)."""

    OFFER = "offer"
    ZONE = "zone"
    REGION = "region"
    ACCOUNT = "account"

    @classmethod
    def of(cls, kind: ErrorKind) -> ErrorScope:
        """The usual scope of a kind (a cloud's table names the codes that differ)."""
        if kind is ErrorKind.QUOTA:
            return cls.REGION
        if kind is ErrorKind.AUTH:
            return cls.ACCOUNT
        return cls.OFFER


class ProviderError(CloudError):
    """A classified cloud error. ``code`` is the cloud's own error code; never a credential.
    ``scope`` says how far the refusal reaches (:class:`ErrorScope`; the kind's usual one
    unless the cloud's table says otherwise)."""

    def __init__(
        self,
        kind: ErrorKind,
        code: str,
        message: str,
        *,
        provider: str = "",
        scope: ErrorScope | None = None,
    ) -> None:
        self.kind = kind
        self.code = code
        self.provider = provider
        self.scope = ErrorScope.of(kind) if scope is None else scope
        self.message = redact(message)
        super().__init__(f"{provider or 'provider'}: {kind.value}: {code}: {self.message}")


class ProviderUnavailable(CloudError):
    """The provider's SDK is not installed or it is not configured."""


@dataclass(frozen=True, slots=True)
class PriceQuote:
    provider: str
    region: str
    zone: str
    instance_type: str
    spot_price: float | None  # USD per instance-hour (converted from the account's currency)
    on_demand_price: float | None  # USD per instance-hour
    #: when the price was read: the quote is the price in effect at that time, and plan ranks
    #: it against the catalog's rows by this time
    at: datetime
    #: when the on-demand price was fetched live (None: from the catalog, not live)
    on_demand_at: datetime | None = None
    #: the currency the cloud quoted in, and the USD per unit it was converted at
    currency: str = "USD"
    usd_per_unit: float = 1.0
    #: when the cloud last changed the spot price, where it says (AWS: the spot price
    #: history's timestamp, which may be months before ``at``); None: not said
    changed_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    name: str
    sdk: str  # distribution name of the official SDK ("" for sim)
    sdk_installed: bool
    credentials_found: bool
    detail: str = ""


class Provider(abc.ABC):
    """One cloud behind one small interface (cf. Karpenter's CloudProvider).

    What an adapter may do beyond this (live prices, its own offer list, placement groups,
    commitments) is a protocol of :mod:`providers.capabilities`, checked with ``isinstance``.
    How a bid cap is honoured is the adapter's business: sent with the launch where the cloud
    takes one, checked against the known price before launch where it does not (GCP).
    """

    name: ClassVar[str]

    @abc.abstractmethod
    def launch(self, request: LaunchRequest) -> Instance:
        """Start one instance. Idempotent on ``request.token``: a second call returns the first."""

    @abc.abstractmethod
    def get(self, instance_id: str) -> Instance:
        """One instance; raises ProviderError(NOT_FOUND) when the cloud has no such instance."""

    @abc.abstractmethod
    def list(self, tags: Mapping[str, str] | None = None) -> builtins.list[Instance]:
        """Instances carrying all of ``tags`` (default: every instance this tool manages)."""

    @abc.abstractmethod
    def terminate(self, instance_ids: Iterable[str]) -> None:
        """Terminate; unknown or already-gone ids are not an error."""

    @abc.abstractmethod
    def interruptions(self, since: datetime) -> builtins.list[Interruption]:
        """Preemptions and notices the API reports since ``since``. A notice served only to
        the VM is not here: the agent reports it (``CloudFacts.notice_sources`` says which
        clouds' APIs report one and whether this adapter reads it)."""

    def account_billing(self) -> dict[str, Any]:
        """The account's billing currency and its USD rate: ``{"currency", "usd_per_unit",
        "source", "note"}`` (prices and caps are USD everywhere else; clouds that bill in the
        account's currency convert at this rate)."""
        return {"currency": "USD", "usd_per_unit": 1.0, "source": "cloud", "note": "USD"}

    def account_id(self) -> str | None:
        """The id of the account launches are billed to, where the provider knows it without
        a call (Azure: the subscription, GCP: the project); None where it does not. Kept with
        each launch for the FOCUS export's BillingAccountId."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients and sockets."""


# -- secrets never leave -------------------------------------------------------------------

_SECRET_VALUES: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember a credential so that :func:`redact` scrubs it from any message or log line."""
    if value and len(value) >= 4:
        _SECRET_VALUES.add(value)


def redact(text: str) -> str:
    for secret in _SECRET_VALUES:
        if secret in text:
            text = text.replace(secret, "***")
    return text


class RedactingFilter(logging.Filter):
    """Logging filter that scrubs registered secrets from every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Scrub the formatted message, so that a secret inside any argument (a mapping, an
        exception) is caught too, and mapping-style arguments (``%(key)s``) still format."""
        if _SECRET_VALUES:
            try:
                message = record.getMessage()
            except Exception:  # a malformed record: the handler reports it as it would
                return True
            clean = redact(message)
            if clean != message:
                record.msg, record.args = clean, None
        return True


# -- retries ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 20.0


def call_with_retries(
    fn: Callable[[], T],
    classify: Callable[[BaseException], ProviderError | None],
    *,
    policy: RetryPolicy = RetryPolicy(),
    what: str = "call",
    on_retry: Callable[[ProviderError, int], None] | None = None,
) -> T:
    """Run ``fn``; classify failures; retry THROTTLED/TRANSIENT ones with jittered backoff.

    Anything else is raised at once as a :class:`ProviderError` (capacity is returned to the
    caller, who takes the next offer; it is never retried in place).
    """
    from tenacity import (
        RetryCallState,
        Retrying,
        retry_if_exception,
        stop_after_attempt,
        wait_random_exponential,
    )

    def _run() -> T:
        try:
            return fn()
        except ProviderError:
            raise
        except Exception as exc:  # classify every SDK error by its code
            err = classify(exc)
            if err is None:
                raise
            raise err from None

    def _log(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, ProviderError):
            log.warning(
                "%s: %s (%s), retry %d", what, exc.kind.value, exc.code, state.attempt_number
            )
            if on_retry:
                on_retry(exc, state.attempt_number)

    retrying = Retrying(
        stop=stop_after_attempt(policy.attempts),
        wait=wait_random_exponential(multiplier=policy.base_delay, max=policy.max_delay),
        retry=retry_if_exception(lambda e: isinstance(e, ProviderError) and e.kind.retryable),
        before_sleep=_log,
        reraise=True,
        sleep=time.sleep,
    )
    return retrying(_run)


# -- registry ---------------------------------------------------------------------------------

ENTRY_POINT_GROUP = "provisioner.providers"
BUILTIN: dict[str, str] = {
    "sim": "providers.sim:SimProvider",
    "aws": "providers.aws:AWSProvider",
    "gcp": "providers.gcp:GCPProvider",
    "azure": "providers.azure:AzureProvider",
    "alibaba": "providers.alibaba:AlibabaProvider",
    "tencent": "providers.tencent:TencentProvider",
}
CLOUDS = ("aws", "gcp", "azure", "alibaba", "tencent")


def _load_target(target: str) -> Any:
    import importlib

    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


@functools.cache
def plugin_entry_points() -> tuple[Any, ...]:
    """The ``provisioner.providers`` entry points (plugins), read once per process: a scan
    of every installed distribution's metadata costs tens of ms, which each submission and
    each provider built paid again (as :func:`providers.facts._registered` does for facts)."""
    from importlib.metadata import entry_points

    return tuple(entry_points(group=ENTRY_POINT_GROUP))


def provider_names() -> list[str]:
    names = dict.fromkeys(BUILTIN)
    for ep in plugin_entry_points():
        names.setdefault(ep.name, None)
    return list(names)


def get(name: str, **options: Any) -> Provider:
    """The provider called ``name``, built with ``options`` (endpoint, credentials, ...)."""
    target: Any = None
    for ep in plugin_entry_points():
        if ep.name == name:
            target = ep.load()
            break
    if target is None:
        if name not in BUILTIN:
            known = ", ".join(provider_names())
            raise ValueError(f"unknown provider {name!r} (known: {known})")
        target = _load_target(BUILTIN[name])
    provider = target(**options)
    if not isinstance(provider, Provider):
        raise TypeError(f"provider {name!r} does not implement providers.base.Provider")
    return provider


def jitter(rng: random.Random | None = None) -> float:
    return (rng or random).random()
