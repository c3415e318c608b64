"""Alibaba Cloud ECS behind the provider interface, on the official SDK (alibabacloud-ecs20140526).

What the cloud is asked, and how its answers are read:

- **offers**: ``DescribeInstanceTypes`` (``MinimumGPUAmount=1``: GPU types with ``GPUSpec``,
  ``GPUAmount``, cores, memory; vGPU slices such as ``sgn7i``/``vgn6i`` are left out) and ``DescribeAvailableResource`` (which zones have the type in
  stock for pay-as-you-go/spot), one offer per (zone, type). Prices are filled from the catalog
  where it knows the type; live prices come from :meth:`AlibabaProvider.prices`.
- **prices**: ``DescribeSpotPriceHistory`` per GPU type (``SpotPrice`` and ``OriginPrice``, the
  pay-as-you-go price), the newest point per zone.
- **launch**: ``RunInstances`` with ``InstanceChargeType=PostPaid``, for spot
  ``SpotStrategy=SpotWithPriceLimit`` + ``SpotPriceLimit`` (the bid cap; ``SpotAsPriceGo`` when
  there is none) and ``SpotInterruptionBehavior=Terminate``, ``NoSpot`` for on-demand;
  ``ClientToken`` = the launch token, ``Tag.N.Key/Value`` = the job/attempt tags, ``Amount=1``.
  Before sending, the instance carrying this attempt's tags is looked for and returned if it
  exists (ClientToken alone only protects for a while).
- **preemption**: ``DescribeInstances`` shows ``OperationLocks.LockReason == "Recycling"`` on a
  spot instance being taken back (minutes before it is released); that instance is reported
  PREEMPTED and as an :class:`Interruption`. A spot instance this adapter saw alive that
  vanishes without being terminated by it is reported too ("gone").
- **errors**: HTTP 4xx/5xx with ``{"Code", "Message", "RequestId"}``, raised by the SDK as
  ``ClientException``/``ServerException`` with ``.code``; classified by code in
  :func:`classify_code`.

Credentials: ``credentials=`` (``{"access_key_id", "access_key_secret"}`` or a pair), else
``ALIBABA_CLOUD_ACCESS_KEY_ID``/``ALIBABA_CLOUD_ACCESS_KEY_SECRET``, else the SDK's default
chain (profile file, RAM role); the key pair is registered for redaction.

Prices and bids are in the account's currency, which every ``DescribeSpotPriceHistory`` answer
names (``Currency``: CNY on a China-site account, USD on an international one). The adapter
takes the currency from those answers (``currency=`` is only a fallback, and a configured
currency the cloud contradicts refuses launches), converts prices to USD for the planner with a
rate the user sees and sets (``cny_to_usd``, ``fx_rates``), and converts a USD bid cap back for
``SpotPriceLimit``, rounded *down* to the 3 decimals Alibaba takes, so it never exceeds the cap.
A spot launch with a cap first asks for the type's price history when no answer has named the
currency yet, and is refused (INVALID, ``UnknownCurrency``) while it stays unknown.

The SDK is imported lazily (inside :meth:`AlibabaProvider._client`), never at module import.
"""

from __future__ import annotations

import base64
import builtins
import importlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from providers._common import DEFAULT_CNY_TO_USD, AccountCurrency, cap_decimal, user_data_for
from providers.base import (
    ErrorKind,
    PriceQuote,
    Provider,
    ProviderError,
    ProviderUnavailable,
    RedactingFilter,
    RetryPolicy,
    call_with_retries,
    redact,
    register_secret,
)
from provisioner.core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_MANAGED,
    Instance,
    InstanceState,
    Interruption,
    LaunchRequest,
    Market,
    Offer,
)

log = logging.getLogger("provisioner.providers.alibaba")

T = TypeVar("T")

NAME = "alibaba"
DEFAULT_REGION = "cn-hangzhou"
ENV_KEY_ID = "ALIBABA_CLOUD_ACCESS_KEY_ID"
ENV_KEY_SECRET = "ALIBABA_CLOUD_ACCESS_KEY_SECRET"
RECYCLING = "Recycling"
SPOT_STRATEGIES = frozenset({"SpotWithPriceLimit", "SpotAsPriceGo"})
PAGE = 100

# -- error codes -> ErrorKind ----------------------------------------------------------------

#: Codes matched exactly; then the prefix rules in :func:`classify_code`.
_EXACT: dict[str, ErrorKind] = {
    "OperationDenied.NoStock": ErrorKind.CAPACITY,
    "Zone.NotOnSale": ErrorKind.CAPACITY,
    "InvalidResourceType.NotSupported": ErrorKind.CAPACITY,  # type not sold in that zone
    "ResourceNotAvailable": ErrorKind.CAPACITY,
    "InvalidVSwitchId.IpNotEnough": ErrorKind.CAPACITY,  # the zone's vSwitch has no free IP
    "InvalidInstanceType.ValueUnauthorized": ErrorKind.QUOTA,  # account not allowed this type
    "InvalidAccountStatus.NotEnoughBalance": ErrorKind.QUOTA,
    "Account.Arrearage": ErrorKind.QUOTA,
    "InvalidSpotPriceLimit.LowerThanPublicPrice": ErrorKind.PRICE_TOO_LOW,
    "InvalidAccessKeyId.NotFound": ErrorKind.AUTH,
    "InvalidAccessKeyId.Inactive": ErrorKind.AUTH,
    "InvalidAccessKeyId": ErrorKind.AUTH,
    "SignatureDoesNotMatch": ErrorKind.AUTH,
    "IncompleteSignature": ErrorKind.AUTH,
    "InvalidCredentials": ErrorKind.AUTH,
    "NoPermission": ErrorKind.AUTH,
    "InvalidInstanceId.NotFound": ErrorKind.NOT_FOUND,
    "ServiceUnavailable": ErrorKind.TRANSIENT,
    "InternalError": ErrorKind.TRANSIENT,
    "UnknownError": ErrorKind.TRANSIENT,
    "ServiceTimeout": ErrorKind.TRANSIENT,
    "OperationConflict": ErrorKind.TRANSIENT,
    "LastTokenProcessing": ErrorKind.TRANSIENT,  # same ClientToken still being processed
}

_PREFIX: tuple[tuple[str, ErrorKind], ...] = (
    ("QuotaExceed", ErrorKind.QUOTA),  # QuotaExceed.ElasticQuota, QuotaExceeded.*
    ("InvalidSpotPriceLimit", ErrorKind.PRICE_TOO_LOW),
    ("InvalidAccessKeyId", ErrorKind.AUTH),
    ("InvalidSecurityToken", ErrorKind.AUTH),
    ("Forbidden", ErrorKind.AUTH),  # Forbidden.RAM, Forbidden.AccessKeyDisabled, ...
    ("Throttling", ErrorKind.THROTTLED),  # Throttling, Throttling.User, Throttling.Api
    ("InvalidInstanceId.NotFound", ErrorKind.NOT_FOUND),
)


def classify_code(code: str, status: int | None = None) -> ErrorKind:
    """The :class:`ErrorKind` for an Alibaba error code (the HTTP status only as a fallback)."""
    if code in _EXACT:
        return _EXACT[code]
    if "NoStock" in code:  # OperationDenied.NoStock, Invalid.PrivatePoolOptions.NoStock, ...
        return ErrorKind.CAPACITY
    for prefix, kind in _PREFIX:
        if code.startswith(prefix):
            return kind
    if status == 429:
        return ErrorKind.THROTTLED
    if status is not None and status >= 500:
        return ErrorKind.TRANSIENT
    return ErrorKind.INVALID


def classify_error(exc: BaseException) -> ProviderError | None:
    """An SDK exception as a :class:`ProviderError`; None for programming errors (re-raised)."""
    if isinstance(exc, ProviderError):
        return exc
    raw_code = getattr(exc, "code", None)
    code = "" if raw_code in (None, "", "None") else str(raw_code)  # the SDK writes f"{None}"
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    inner = getattr(exc, "inner_exception", None)
    if inner is None and (code or status):
        name = type(exc).__name__
        kind = ErrorKind.THROTTLED if name == "ThrottlingException" else classify_code(code, status)
        message = str(getattr(exc, "message", "") or exc)
        return ProviderError(kind, code or f"HTTP{status}", message, provider=NAME)
    if inner is not None or isinstance(exc, (ConnectionError, TimeoutError, OSError)):
        cause = inner if inner is not None else exc
        return ProviderError(ErrorKind.TRANSIENT, type(cause).__name__, str(cause), provider=NAME)
    if isinstance(exc, ValueError):  # an unreadable answer (not JSON): try again
        return ProviderError(ErrorKind.TRANSIENT, "BadResponse", str(exc), provider=NAME)
    return None


# -- small helpers ----------------------------------------------------------------------------


def parse_endpoint(endpoint: str | None) -> tuple[str | None, str]:
    """``"127.0.0.1:PORT"`` or ``"http://host:port"`` -> (host[:port], protocol)."""
    if not endpoint:
        return None, "https"
    if "://" in endpoint:
        scheme, _, rest = endpoint.partition("://")
        return rest.rstrip("/"), scheme.lower()
    local = endpoint.startswith(("127.", "localhost", "[::1]"))
    return endpoint.rstrip("/"), "http" if local else "https"


def parse_time(text: str | None) -> datetime | None:
    """Alibaba writes ``2017-12-10T04:04Z`` (minutes) or ``2017-12-10T04:04:05Z``."""
    if not text:
        return None
    for fmt in ("%Y-%m-%dT%H:%MZ", "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _utcnow() -> datetime:
    return datetime.now(UTC)


#: ``SpotPriceLimit`` "can be accurate to three decimal places" (RunInstances reference)
PRICE_DECIMALS = 3


def gpu_model(spec: str) -> str:
    """``"NVIDIA A10"`` -> ``"A10"`` (the canonical name where the GPU table knows it)."""
    try:
        from policies.gpus import canonical_gpu

        known = canonical_gpu(spec)
        if known:
            return known
    except Exception:  # the table is optional here; fall back to the cloud's own spelling
        pass
    name = spec.strip()
    for prefix in ("NVIDIA ", "Nvidia ", "nvidia ", "Tesla "):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name.replace(" ", "-")


def catalog_offers(provider: str) -> list[Offer]:
    """Offers the shared catalog knows for ``provider`` ([] when there is no catalog)."""
    try:
        module = importlib.import_module("provisioner.core.catalog")
        catalog = module.Catalog.load()
        if callable(getattr(catalog, "filter", None)):
            rows = catalog.filter(provider=provider)
        else:
            rows = catalog.offers
        return [o for o in rows or () if isinstance(o, Offer) and o.provider == provider]
    except Exception as exc:  # optional: the catalog is enrichment, not a requirement
        log.debug("catalog not used: %s", type(exc).__name__)
        return []


def _is_vgpu(itype: Mapping[str, Any]) -> bool:
    """A slice of a GPU (vgn5i, vgn6i, sgn7i, ... or a ``GPUSpec`` like ``NVIDIA A10*1/12``)."""
    family = str(itype.get("InstanceTypeFamily") or itype.get("InstanceTypeId") or "")
    name = family.removeprefix("ecs.")
    return name.startswith(("vgn", "sgn")) or "/" in str(itype.get("GPUSpec") or "")


def _list(node: Any, *keys: str) -> list[Any]:
    """Walk Alibaba's ``{"Instances": {"Instance": [...]}}`` nesting; [] where absent."""
    for key in keys:
        if not isinstance(node, Mapping):
            return []
        node = node.get(key)
    return list(node) if isinstance(node, list) else []


class _RenderedRedactor(RedactingFilter):
    """Scrubs registered secrets from the *rendered* message, whatever its arguments are.

    The SDK logs objects (a pretty-printed response) as arguments, which the plain
    :class:`RedactingFilter` leaves alone; a cloud that echoes a credential in an error body
    would put it in the log. Rendering first closes that gap.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            rendered = record.getMessage()
        except Exception:  # a malformed record: leave it to the handler
            return True
        record.msg = redact(rendered)
        record.args = None
        return True


def _install_log_filters() -> None:
    for name in ("provisioner.providers", log.name, "alibabacloud", "darabonba", "Tea"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _RenderedRedactor) for f in logger.filters):
            logger.addFilter(_RenderedRedactor())


# -- the adapter -------------------------------------------------------------------------------


class AlibabaProvider(Provider):
    """Alibaba Cloud ECS spot and pay-as-you-go instances."""

    name = NAME
    accepts_bid_cap = True

    def __init__(
        self,
        *,
        region: str | None = None,
        regions: Iterable[str] | None = None,
        endpoint: str | None = None,
        credentials: Mapping[str, str] | tuple[str, str] | None = None,
        image_id: str | None = None,
        vswitch_id: str | None = None,
        vswitch_ids: Mapping[str, str] | None = None,
        security_group_id: str | None = None,
        key_pair_name: str | None = None,
        instance_types: Iterable[str] | None = None,
        system_disk_category: str | None = None,
        currency: str | None = None,
        cny_to_usd: float = DEFAULT_CNY_TO_USD,
        fx_rates: Mapping[str, float] | None = None,
        retry: RetryPolicy | None = None,
        package_spec: str = "provisioner",
        pip_args: Iterable[str] = (),
        connect_timeout_ms: int = 5000,
        read_timeout_ms: int = 30000,
    ) -> None:
        listed = list(regions or ())
        self.regions: list[str] = listed or [region or DEFAULT_REGION]
        self.default_region = region or self.regions[0]
        self.endpoint, self.protocol = parse_endpoint(endpoint)
        self.image_id = image_id
        self.vswitch_id = vswitch_id
        self.vswitch_ids = dict(vswitch_ids or {})
        self.security_group_id = security_group_id
        self.key_pair_name = key_pair_name
        self.instance_types = list(instance_types) if instance_types else None
        self.system_disk_category = system_disk_category
        self.account = AccountCurrency(NAME, currency, {"CNY": cny_to_usd, **(fx_rates or {})})
        self.retry = retry or RetryPolicy()
        self.package_spec = package_spec
        self.pip_args = list(pip_args)
        self.connect_timeout_ms = connect_timeout_ms
        self.read_timeout_ms = read_timeout_ms
        self._key_id, self._key_secret = self._resolve_credentials(credentials)
        register_secret(self._key_id)
        register_secret(self._key_secret)
        _install_log_filters()
        self._clients: dict[str, Any] = {}
        self._region_of: dict[str, str] = {}  # instance id -> region
        self._first_seen: dict[str, datetime] = {}  # instance id -> when Recycling was seen
        self._alive_spot: dict[str, Instance] = {}  # spot instances seen alive
        self._terminated: set[str] = set()  # ids this adapter terminated

    def __repr__(self) -> str:  # never the credentials
        return f"AlibabaProvider(regions={self.regions!r}, endpoint={self.endpoint!r})"

    # -- plumbing ------------------------------------------------------------------------

    @staticmethod
    def _resolve_credentials(
        credentials: Mapping[str, str] | tuple[str, str] | None,
    ) -> tuple[str | None, str | None]:
        if isinstance(credentials, Mapping):
            key_id = credentials.get("access_key_id") or credentials.get("id")
            secret = credentials.get("access_key_secret") or credentials.get("secret")
            return key_id, secret
        if isinstance(credentials, tuple):
            return credentials[0], credentials[1]
        return os.environ.get(ENV_KEY_ID), os.environ.get(ENV_KEY_SECRET)

    def _sdk(self) -> tuple[Any, Any, Any]:
        try:
            from alibabacloud_ecs20140526 import models
            from alibabacloud_ecs20140526.client import Client
            from alibabacloud_tea_openapi.models import Config
        except ImportError as exc:
            raise ProviderUnavailable(
                "the Alibaba Cloud SDK is not installed: pip install 'provisioner[alibaba]'"
            ) from exc
        return Client, Config, models

    def _models(self) -> Any:
        return self._sdk()[2]

    def _client(self, region: str) -> Any:
        client = self._clients.get(region)
        if client is None:
            client_cls, config_cls, _ = self._sdk()
            config = config_cls(
                region_id=region,
                endpoint=self.endpoint,
                protocol=self.protocol,
                connect_timeout=self.connect_timeout_ms,
                read_timeout=self.read_timeout_ms,
            )
            if self._key_id and self._key_secret:
                config.access_key_id = self._key_id
                config.access_key_secret = self._key_secret
            # else: the SDK's default credential chain (RAM role, profile file, ...)
            client = client_cls(config)
            self._clients[region] = client
        return client

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        return call_with_retries(fn, classify_error, policy=self.retry, what=f"alibaba {what}")

    def _body(self, response: Any) -> dict[str, Any]:
        body = getattr(response, "body", None)
        return body.to_map() if body is not None else {}

    @property
    def currency(self) -> str | None:
        """The account's currency: as the price answers report it, else as configured."""
        return self.account.code

    def _to_usd(self, price: float | None, currency: str | None) -> float | None:
        return self.account.to_usd(price, currency)

    def _spot_history(self, region: str, itype: str, zone: str | None = None) -> dict[str, Any]:
        """``DescribeSpotPriceHistory`` (the last 3 hours, every page: ``Offset`` from each
        answer's ``NextOffset``) as one answer; notes the currency it names."""
        models = self._models()
        client = self._client(region)
        start = (_utcnow() - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
        points: list[Any] = []
        offset = 0
        while True:
            req = models.DescribeSpotPriceHistoryRequest(
                region_id=region,
                instance_type=itype,
                zone_id=zone or None,
                network_type="vpc",
                ostype="linux",
                start_time=start,
                offset=offset or None,
            )
            body = self._body(
                self._call(
                    "DescribeSpotPriceHistory", partial(client.describe_spot_price_history, req)
                )
            )
            self.account.observe(body.get("Currency"))
            page = _list(body, "SpotPrices", "SpotPriceType")
            points.extend(page)
            nxt = int(body.get("NextOffset") or 0)
            if not page or nxt <= offset:
                body["SpotPrices"] = {"SpotPriceType": points}
                return body
            offset = nxt

    def spot_price_limit(self, cap_usd: float, region: str, offer: Offer) -> float:
        """``SpotPriceLimit`` for a USD cap: in the account's currency, rounded down to 3 places.

        Asks the cloud for the type's price history first when no answer has named the
        account's currency yet; refuses (INVALID) while the currency or its rate is unknown.
        """
        if self.account.reported is None:
            self._spot_history(region, offer.instance_type, offer.zone)
        code, rate = self.account.for_launch()
        limit = cap_decimal(cap_usd, PRICE_DECIMALS, usd_per_unit=rate)
        if limit <= 0:
            raise ProviderError(
                ErrorKind.PRICE_TOO_LOW,
                "BidCapBelowMinimum",
                f"the cap {cap_usd!r} USD/h is below 0.001 {code}/h, the smallest bid Alibaba takes",
                provider=NAME,
            )
        return float(limit)

    # -- offers and prices ----------------------------------------------------------------

    def _gpu_types(self, region: str) -> list[dict[str, Any]]:
        models = self._models()
        client = self._client(region)
        out: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            req = models.DescribeInstanceTypesRequest(
                minimum_gpuamount=1, max_results=PAGE, next_token=token
            )
            if self.instance_types:
                req.instance_types = list(self.instance_types)
            body = self._body(
                self._call("DescribeInstanceTypes", partial(client.describe_instance_types, req))
            )
            out.extend(
                t
                for t in _list(body, "InstanceTypes", "InstanceType")
                if int(t.get("GPUAmount") or 0) > 0 and not _is_vgpu(t)
            )
            token = body.get("NextToken") or None
            if not token:
                return out

    def _zones_in_stock(self, region: str) -> dict[str, list[str]]:
        """Instance type -> zones where pay-as-you-go/spot capacity is in stock."""
        models = self._models()
        client = self._client(region)
        req = models.DescribeAvailableResourceRequest(
            region_id=region,
            destination_resource="InstanceType",
            instance_charge_type="PostPaid",
            spot_strategy="SpotAsPriceGo",
        )
        body = self._body(
            self._call("DescribeAvailableResource", lambda: client.describe_available_resource(req))
        )
        zones: dict[str, list[str]] = {}
        for zone in _list(body, "AvailableZones", "AvailableZone"):
            if zone.get("Status", "Available") != "Available":
                continue
            for res in _list(zone, "AvailableResources", "AvailableResource"):
                for sup in _list(res, "SupportedResources", "SupportedResource"):
                    if sup.get("Status") == "Available":
                        zones.setdefault(sup.get("Value", ""), []).append(zone.get("ZoneId", ""))
        return zones

    def offers(self, regions: Iterable[str] | None = None) -> list[Offer]:
        known = {(o.region, o.zone, o.instance_type): o for o in catalog_offers(NAME)}
        out: list[Offer] = []
        for region in list(regions or self.regions):
            types = self._gpu_types(region)
            zones = self._zones_in_stock(region)
            for t in types:
                itype = t.get("InstanceTypeId", "")
                for zone in zones.get(itype) or [""]:
                    ref = known.get((region, zone, itype)) or known.get((region, "", itype))
                    out.append(
                        Offer(
                            provider=NAME,
                            region=region,
                            zone=zone,
                            instance_type=itype,
                            gpu=gpu_model(str(t.get("GPUSpec") or "")),
                            gpu_count=int(t.get("GPUAmount") or 0),
                            vcpus=float(t.get("CpuCoreCount") or 0),
                            memory_gib=float(t.get("MemorySize") or 0),
                            price=ref.price if ref else None,
                            spot_price=ref.spot_price if ref else None,
                            price_date=ref.price_date if ref else "",
                            interruption_band=ref.interruption_band if ref else "",
                        )
                    )
        return out

    def prices(self, regions: Iterable[str] | None = None) -> list[PriceQuote]:
        out: list[PriceQuote] = []
        for region in list(regions or self.regions):
            types = self.instance_types or [
                t.get("InstanceTypeId", "") for t in self._gpu_types(region)
            ]
            for itype in types:
                body = self._spot_history(region, itype)
                currency = body.get("Currency")
                newest: dict[str, dict[str, Any]] = {}
                for point in _list(body, "SpotPrices", "SpotPriceType"):
                    zone = point.get("ZoneId", "")
                    if zone not in newest or str(point.get("Timestamp", "")) >= str(
                        newest[zone].get("Timestamp", "")
                    ):
                        newest[zone] = point
                for zone, point in sorted(newest.items()):
                    spot = point.get("SpotPrice")
                    origin = point.get("OriginPrice")
                    out.append(
                        PriceQuote(
                            provider=NAME,
                            region=region,
                            zone=zone,
                            instance_type=point.get("InstanceType") or itype,
                            spot_price=self._to_usd(
                                None if spot is None else float(spot), currency
                            ),
                            on_demand_price=self._to_usd(
                                None if origin is None else float(origin), currency
                            ),
                            at=parse_time(point.get("Timestamp")) or _utcnow(),
                            on_demand_at=_utcnow() if origin is not None else None,
                            currency=str(currency or self.account.code or ""),
                            usd_per_unit=self.account.usd_per_unit(currency) or 0.0,
                        )
                    )
        return out

    def account_billing(self) -> dict[str, Any]:
        return self.account.billing()

    # -- instances ---------------------------------------------------------------------------

    def _instance(self, raw: Mapping[str, Any], region: str) -> Instance:
        iid = str(raw.get("InstanceId", ""))
        status = str(raw.get("Status", ""))
        locks = [
            str(lock.get("LockReason", "")) for lock in _list(raw, "OperationLocks", "LockReason")
        ]
        market = Market.SPOT if raw.get("SpotStrategy") in SPOT_STRATEGIES else Market.ON_DEMAND
        reason = ",".join(lock for lock in locks if lock)
        if RECYCLING in locks:
            state = InstanceState.PREEMPTED
        elif status in ("Pending", "Starting"):
            state = InstanceState.PENDING
        elif status == "Running":
            state = InstanceState.RUNNING
        elif status in ("Stopping", "Stopped"):
            state = InstanceState.STOPPING
        else:  # Deleted, Released, anything unknown
            state = InstanceState.TERMINATED
        tags = {
            str(t.get("TagKey")): str(t.get("TagValue", ""))
            for t in _list(raw, "Tags", "Tag")
            if t.get("TagKey") is not None
        }
        public = _list(raw, "PublicIpAddress", "IpAddress") or [
            ip for ip in [(raw.get("EipAddress") or {}).get("IpAddress")] if ip
        ]
        private = _list(raw, "VpcAttributes", "PrivateIpAddress", "IpAddress") or _list(
            raw, "InnerIpAddress", "IpAddress"
        )
        limit = raw.get("SpotPriceLimit")
        region = str(raw.get("RegionId") or region)
        self._region_of[iid] = region
        return Instance(
            id=iid,
            provider=NAME,
            region=region,
            zone=str(raw.get("ZoneId", "")),
            instance_type=str(raw.get("InstanceType", "")),
            market=market,
            state=state,
            raw_state=status,
            state_reason=reason,
            tags=tags,
            launched_at=parse_time(raw.get("StartTime") or raw.get("CreationTime")),
            price_per_hour=self.account.to_usd(float(limit))
            if market is Market.SPOT and limit
            else None,
            public_ip=str(public[0]) if public else None,
            private_ip=str(private[0]) if private else None,
        )

    def _describe(self, region: str, **filters: Any) -> list[Instance]:
        models = self._models()
        client = self._client(region)
        tags: Mapping[str, str] = filters.pop("tags", {}) or {}
        out: list[Instance] = []
        token: str | None = None
        while True:
            req = models.DescribeInstancesRequest(
                region_id=region, max_results=PAGE, next_token=token, **filters
            )
            if tags:
                req.tag = [
                    models.DescribeInstancesRequestTag(key=k, value=v) for k, v in tags.items()
                ]
            body = self._body(
                self._call("DescribeInstances", partial(client.describe_instances, req))
            )
            for raw in _list(body, "Instances", "Instance"):
                inst = self._instance(raw, region)
                if all(inst.tags.get(k) == v for k, v in tags.items()):
                    out.append(inst)
            token = body.get("NextToken") or None
            if not token:
                return out

    def _note(self, instances: Iterable[Instance]) -> None:
        for inst in instances:
            if inst.market is Market.SPOT and inst.state.alive:
                self._alive_spot[inst.id] = inst

    def get(self, instance_id: str) -> Instance:
        regions = [self._region_of[instance_id]] if instance_id in self._region_of else self.regions
        for region in regions:
            found = self._describe(region, instance_ids=json.dumps([instance_id]))
            found = [i for i in found if i.id == instance_id]
            if found:
                self._note(found)
                return found[0]
        raise ProviderError(
            ErrorKind.NOT_FOUND,
            "InvalidInstanceId.NotFound",
            f"no instance {instance_id} in {', '.join(regions)}",
            provider=NAME,
        )

    def list(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        wanted = dict(tags) if tags else {TAG_MANAGED: "true"}
        out: list[Instance] = []
        for region in self.regions:
            out.extend(self._describe(region, tags=wanted))
        self._note(out)
        return out

    def launch(self, request: LaunchRequest) -> Instance:
        offer = request.offer
        region = offer.region or self.default_region
        attempt_tags = {k: request.tags[k] for k in sorted(request.tags)}
        identity = {k: attempt_tags[k] for k in (TAG_MANAGED, TAG_JOB, TAG_ATTEMPT)}
        for inst in self._describe(region, tags=identity):
            if inst.state is not InstanceState.TERMINATED:
                log.info("alibaba: %s already has instance %s", request.token, inst.id)
                self._note([inst])
                return inst
        image = request.image or self.image_id
        if not image:
            raise ProviderError(
                ErrorKind.INVALID,
                "MissingImageId",
                "no image: pass image_id to the provider or set it on the request",
                provider=NAME,
            )
        models = self._models()
        req = models.RunInstancesRequest(
            region_id=region,
            zone_id=offer.zone or None,
            instance_type=offer.instance_type,
            image_id=image,
            instance_name=request.name,
            client_token=request.token,
            amount=1,
            instance_charge_type="PostPaid",
            tag=[models.RunInstancesRequestTag(key=k, value=v) for k, v in attempt_tags.items()],
            security_group_id=self.security_group_id,
            v_switch_id=self.vswitch_ids.get(offer.zone) or self.vswitch_id,
            key_pair_name=request.ssh_key_name or self.key_pair_name,
            system_disk=models.RunInstancesRequestSystemDisk(
                size=str(request.disk_gb), category=self.system_disk_category
            ),
        )
        user_data = user_data_for(
            request, NAME, package_spec=self.package_spec, pip_args=self.pip_args
        )
        if user_data:
            req.user_data = base64.b64encode(user_data.encode("utf-8")).decode("ascii")
        if request.market is Market.SPOT:
            req.spot_interruption_behavior = "Terminate"
            if request.bid_cap_per_hour is not None:
                req.spot_strategy = "SpotWithPriceLimit"
                req.spot_price_limit = self.spot_price_limit(
                    request.bid_cap_per_hour, region, offer
                )
            else:
                req.spot_strategy = "SpotAsPriceGo"
        else:
            req.spot_strategy = "NoSpot"
        client = self._client(region)
        body = self._body(self._call("RunInstances", lambda: client.run_instances(req)))
        ids = _list(body, "InstanceIdSets", "InstanceIdSet")
        if not ids:
            raise ProviderError(
                ErrorKind.TRANSIENT,
                "NoInstanceId",
                f"RunInstances answered without an instance id (request {body.get('RequestId')})",
                provider=NAME,
            )
        iid = str(ids[0])
        self._region_of[iid] = region
        try:
            return self.get(iid)
        except ProviderError as exc:  # not visible yet (eventual consistency): report PENDING
            if exc.kind is not ErrorKind.NOT_FOUND:
                raise
        inst = Instance(
            id=iid,
            provider=NAME,
            region=region,
            zone=offer.zone,
            instance_type=offer.instance_type,
            market=request.market,
            state=InstanceState.PENDING,
            raw_state="Pending",
            tags=dict(attempt_tags),
            launched_at=_utcnow(),
        )
        self._note([inst])
        return inst

    def terminate(self, instance_ids: Iterable[str]) -> None:
        ids = [i for i in dict.fromkeys(instance_ids) if i]
        if not ids:
            return
        self._terminated.update(ids)
        by_region: dict[str, list[str]] = {}
        unknown: list[str] = []
        for iid in ids:
            if iid in self._region_of:
                by_region.setdefault(self._region_of[iid], []).append(iid)
            else:
                unknown.append(iid)
        for region in self.regions:
            if unknown:
                by_region.setdefault(region, []).extend(unknown)
        for region, batch_ids in by_region.items():
            for start in range(0, len(batch_ids), PAGE):
                self._delete(region, batch_ids[start : start + PAGE])
        for iid in ids:
            self._alive_spot.pop(iid, None)

    def _delete(self, region: str, ids: Sequence[str]) -> None:
        models = self._models()
        client = self._client(region)

        def run(batch: Sequence[str]) -> None:
            req = models.DeleteInstancesRequest(
                region_id=region, instance_id=list(batch), force=True
            )
            self._call("DeleteInstances", lambda: client.delete_instances(req))

        try:
            run(ids)
        except ProviderError as exc:
            if exc.kind is not ErrorKind.NOT_FOUND:
                raise
            if len(ids) == 1:
                return  # already gone: not an error
            for iid in ids:  # one unknown id fails the batch: delete the rest one by one
                try:
                    run([iid])
                except ProviderError as one:
                    if one.kind is not ErrorKind.NOT_FOUND:
                        raise

    def interruptions(self, since: datetime) -> builtins.list[Interruption]:
        now = _utcnow()
        if since.tzinfo is None:  # naive: taken as UTC
            since = since.replace(tzinfo=UTC)
        out: list[Interruption] = []
        present: set[str] = set()
        for region in self.regions:
            for inst in self._describe(region, tags={TAG_MANAGED: "true"}):
                present.add(inst.id)
                if inst.state is not InstanceState.PREEMPTED:
                    continue
                self._alive_spot.pop(inst.id, None)
                at = self._first_seen.setdefault(inst.id, now)
                if at >= since:
                    out.append(
                        Interruption(
                            instance_id=inst.id,
                            provider=NAME,
                            zone=inst.zone,
                            kind="preempted",
                            at=at,
                            raw=f"OperationLocks.LockReason={RECYCLING}",
                        )
                    )
        for iid, inst in list(self._alive_spot.items()):
            if iid in present or iid in self._terminated:
                continue
            del self._alive_spot[iid]  # released without us: the spot capacity went back
            at = self._first_seen.setdefault(iid, now)
            if at >= since:
                out.append(
                    Interruption(
                        instance_id=iid,
                        provider=NAME,
                        zone=inst.zone,
                        kind="preempted",
                        at=at,
                        raw="gone",
                    )
                )
        return out

    def close(self) -> None:
        self._clients.clear()
