"""Tencent Cloud CVM behind the provider interface, on the official SDK (tencentcloud-sdk-python-cvm).

What the cloud is asked, and how its answers are read:

- **offers**: ``DescribeZoneInstanceConfigInfos`` filtered to ``SPOTPAID`` and
  ``POSTPAID_BY_HOUR``: one row per (zone, type, charge type) with cores, memory, GPU count,
  sale status and price; GPU types become one offer per (zone, type), with the pay-as-you-go
  price and, where spot is on sale, the spot price. The GPU model comes from the catalog by
  instance type, else from the family (GN7 -> T4, ...).
- **prices**: ``InquiryPriceRunInstances`` (``Price.InstancePrice.UnitPriceDiscount``, else
  ``UnitPrice``) per (zone, GPU type) for ``SPOTPAID`` and ``POSTPAID_BY_HOUR``, for the
  charge types the listing says are on sale there (two calls per pair at most: restrict with
  ``instance_types`` in a large region). It needs an image id; without one the prices in
  ``DescribeZoneInstanceConfigInfos`` are used.
- **launch**: ``RunInstances`` with ``InstanceChargeType=SPOTPAID`` and ``InstanceMarketOptions
  {MarketType: spot, SpotOptions: {MaxPrice: "<cap>", SpotInstanceType: one-time}}`` for spot
  (the on-demand price is the cap when none is given: Tencent requires one), or
  ``POSTPAID_BY_HOUR``; ``ClientToken`` = the launch token, ``TagSpecification`` = the job and
  attempt tags, ``Placement.Zone``, ``InstanceName``, ``UserData`` (base64). Before sending,
  the instance carrying this attempt's tags is looked for and returned if it exists.
- **preemption**: a ``SPOTPAID`` instance that is going away (``SHUTDOWN``/``TERMINATING``)
  without having been terminated by us (``LatestOperation`` is not ``TerminateInstances``,
  ``IsolatedSource`` is not ``MANMADE``, and this adapter did not terminate it) is PREEMPTED; a
  spot instance this adapter saw alive that vanishes without being terminated is too. (Tencent
  documents the reclaim notice only through the VM's metadata; the API side is inferred.)
- **errors**: HTTP 200 with ``{"Response": {"Error": {"Code", "Message"}, "RequestId"}}``.
  The SDK raises them only when the answer's Content-Type is exactly ``application/json``; with
  ``application/json; charset=utf-8`` (a proxy, a gateway, a fake server) its typed methods
  return an empty response instead. So every call goes through ``CvmClient.call_json`` and the
  envelope is checked here, whatever the Content-Type. Codes are classified in
  :func:`classify_code`. ``UnsupportedOperation.NoInstanceTypeSupportSpot`` (the type has no
  spot market in that zone) is CAPACITY: the planner takes the next offer, as for a sold-out
  zone; it is never retried in place.

Credentials: ``credentials=`` (``{"secret_id", "secret_key"}`` or a pair), else
``TENCENTCLOUD_SECRET_ID``/``TENCENTCLOUD_SECRET_KEY``, else the SDK's profile file
(``~/.tencentcloud/credentials``); both values are registered for redaction, and the SDK's
DEBUG lines are redacted after rendering.

Prices and ``MaxPrice`` are in the account's currency: CNY on a China-site account, USD on an
international one. Tencent's price answers (``DescribeZoneInstanceConfigInfos``,
``InquiryPriceRunInstances``: ``ItemPrice`` has no currency field in API 2017-03-12) do not
name it, so it must be configured (``currency=``); a ``Currency`` the cloud does report in a
price answer is taken and wins, and a configured currency it contradicts refuses launches.
Prices are converted to USD with a rate the user sees and sets (``cny_to_usd``, ``fx_rates``);
with no currency known they are left out (None), never passed off as USD, and a spot launch
(which always carries a ``MaxPrice``) is refused with INVALID ``UnknownCurrency``. The USD cap
is converted back and rounded *down* to 4 decimals, so it never exceeds the cap.

The SDK is imported lazily (inside :meth:`TencentProvider._client`), never at module import.
"""

from __future__ import annotations

import base64
import builtins
import importlib
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from providers._common import (
    DEFAULT_CNY_TO_USD,
    AccountCurrency,
    cap_decimal,
    has_tags,
    user_data_for,
    utc,
    wanted_tags,
)
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

log = logging.getLogger("provisioner.providers.tencent")

T = TypeVar("T")

NAME = "tencent"
DEFAULT_REGION = "ap-guangzhou"
ENV_SECRET_ID = "TENCENTCLOUD_SECRET_ID"
ENV_SECRET_KEY = "TENCENTCLOUD_SECRET_KEY"
SPOTPAID = "SPOTPAID"
POSTPAID = "POSTPAID_BY_HOUR"
PAGE = 100
MAX_FILTERS = 10
GOING_AWAY = frozenset({"SHUTDOWN", "TERMINATING"})
OUR_OPERATIONS = frozenset({"TerminateInstances", "StopInstances"})

#: Instance family -> GPU model, for types the catalog does not know (from Tencent's docs).
FAMILY_GPU: dict[str, str] = {
    "GN6": "P4",
    "GN6S": "P4",
    "GN7": "T4",
    "GN7VW": "T4",
    "GI3X": "T4",
    "GN8": "P40",
    "GN10X": "V100",
    "GN10XP": "V100-32GB",
    "GT4": "A100",
    "GNV4": "A10",
    "GNV4V": "A10",
    "PNV4": "A10",
    "HCCPNV4H": "A100",
    "HCCG5V": "A800",
}

# -- error codes -> ErrorKind ----------------------------------------------------------------

_EXACT: dict[str, ErrorKind] = {
    "UnsupportedOperation.NoInstanceTypeSupportSpot": ErrorKind.CAPACITY,
    "ResourceUnavailable.InstanceType": ErrorKind.CAPACITY,
    # placement failures: another zone (its subnet, its images, its spot stock) may work
    "FailedOperation.NoAvailableIpAddressCountInSubnet": ErrorKind.CAPACITY,
    "InvalidParameterValue.ZoneNotSupported": ErrorKind.CAPACITY,
    "UnsupportedOperation.LocationImageNotSupported": ErrorKind.CAPACITY,
    "InvalidParameterValue.InsufficientOffering": ErrorKind.CAPACITY,  # spot stock too small
    "InvalidParameterValue.InsufficientPrice": ErrorKind.PRICE_TOO_LOW,
    "InvalidInstanceId.NotFound": ErrorKind.NOT_FOUND,
    "InvalidAccount.InsufficientBalance": ErrorKind.QUOTA,
    "FailedOperation.InsufficientBalance": ErrorKind.QUOTA,
    "InternalError": ErrorKind.TRANSIENT,
    "InternalServerError": ErrorKind.TRANSIENT,
    "ServiceUnavailable": ErrorKind.TRANSIENT,
    "ServerNetworkError": ErrorKind.TRANSIENT,  # the SDK: a non-200 answer
    "ClientNetworkError": ErrorKind.TRANSIENT,  # the SDK: no answer (connection, timeout)
    "MutexOperation.TaskRunning": ErrorKind.TRANSIENT,
    "RequestLimitExceeded": ErrorKind.THROTTLED,
}

_PREFIX: tuple[tuple[str, ErrorKind], ...] = (
    ("ResourceInsufficient", ErrorKind.CAPACITY),  # .SpecifiedInstanceType, .ZoneSoldOut...
    ("ResourcesSoldOut", ErrorKind.CAPACITY),  # .SpecifiedInstanceType
    ("LimitExceeded", ErrorKind.QUOTA),  # .SpotQuota, .UserSpotQuota, .InstanceQuota
    ("AuthFailure", ErrorKind.AUTH),  # .SecretIdNotFound, .SignatureFailure, ...
    ("UnauthorizedOperation", ErrorKind.AUTH),  # CAM policy forbids the action
    ("RequestLimitExceeded", ErrorKind.THROTTLED),  # .UinLimitExceeded, .GlobalRegionUinLimit
    ("InternalError", ErrorKind.TRANSIENT),
)

#: ``terminate`` ignores these: the instance is already going or gone.
_ALREADY_GONE = frozenset(
    {
        "UnsupportedOperation.InstanceStateTerminating",
        "UnsupportedOperation.InstanceStateTerminated",
        "InvalidInstanceId.NotFound",
    }
)


def classify_code(code: str) -> ErrorKind:
    """The :class:`ErrorKind` for a Tencent Cloud error code."""
    if code in _EXACT:
        return _EXACT[code]
    for prefix, kind in _PREFIX:
        if code.startswith(prefix):
            return kind
    return ErrorKind.INVALID


def envelope_error(data: Mapping[str, Any]) -> ProviderError | None:
    """The error in a ``{"Response": {"Error": ...}}`` answer, classified; None when it succeeded."""
    response = data.get("Response")
    if not isinstance(response, Mapping):
        return ProviderError(
            ErrorKind.TRANSIENT, "BadResponse", "answer without a Response object", provider=NAME
        )
    error = response.get("Error")
    if not isinstance(error, Mapping):
        return None
    code = str(error.get("Code") or "UnknownError")
    message = f"{error.get('Message', '')} (request {response.get('RequestId', '?')})"
    return ProviderError(classify_code(code), code, message, provider=NAME)


def classify_error(exc: BaseException) -> ProviderError | None:
    """An SDK exception as a :class:`ProviderError`; None for programming errors (re-raised)."""
    if isinstance(exc, ProviderError):
        return exc
    code = getattr(exc, "code", None)
    if code and type(exc).__name__ == "TencentCloudSDKException":
        message = getattr(exc, "message", None)
        text = message.decode("utf-8", "replace") if isinstance(message, bytes) else str(message)
        request_id = getattr(exc, "requestId", None)
        if request_id:  # as for an envelope read here: the RequestId support asks for
            text = f"{text} (request {request_id})"
        return ProviderError(classify_code(str(code)), str(code), text, provider=NAME)
    if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
        return ProviderError(ErrorKind.TRANSIENT, type(exc).__name__, str(exc), provider=NAME)
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
    """``2020-03-10T02:43:51Z`` (Tencent's usual form) or any ISO 8601 time."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return utc(parsed)


#: decimals of ``MaxPrice`` (Tencent's examples: "1.50"; prices are quoted to 4 places)
PRICE_DECIMALS = 4


def price_text(value: float, usd_per_unit: float = 1.0) -> str:
    """A USD cap as Tencent's MaxPrice wants it: in the account's currency (``usd_per_unit``
    USD per unit), rounded *down* to 4 places, at least 2 shown (``"1.50"``)."""
    text = f"{cap_decimal(value, PRICE_DECIMALS, usd_per_unit=usd_per_unit):f}".rstrip("0")
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.ljust(2, '0')}"


def gpu_for(instance_type: str, family: str = "", hint: str = "") -> str:
    """The GPU model of a CVM type: catalog first, then the family table, then ``hint``."""
    for offer in catalog_offers(NAME):
        if offer.instance_type == instance_type and offer.gpu:
            return offer.gpu
    fam = (family or instance_type.split(".")[0]).upper()
    if fam in FAMILY_GPU:
        return FAMILY_GPU[fam]
    match = re.search(r"\b(A100|A10|A800|H800|H20|L20|L40|T4|V100|P40|P4)\b", hint or "")
    return match.group(1) if match else fam


_CATALOG: list[Offer] | None = None


def catalog_offers(provider: str) -> list[Offer]:
    """Offers the shared catalog knows for ``provider`` ([] when there is no catalog)."""
    global _CATALOG
    if _CATALOG is None:
        try:
            module = importlib.import_module("provisioner.core.catalog")
            catalog = module.Catalog.load()
            if callable(getattr(catalog, "filter", None)):
                rows = catalog.filter(provider=NAME)
            else:
                rows = catalog.offers
            _CATALOG = [o for o in rows or () if isinstance(o, Offer) and o.provider == NAME]
        except Exception as exc:  # optional: the catalog is enrichment, not a requirement
            log.debug("catalog not used: %s", type(exc).__name__)
            _CATALOG = []
    return _CATALOG if provider == NAME else []


def _num(value: Any) -> float | None:
    try:
        return None if value is None or value == "" else float(value)
    except (TypeError, ValueError):
        return None


def _unit_price(price: Any) -> float | None:
    """``ItemPrice``: the discounted hourly price, else the list hourly price."""
    if not isinstance(price, Mapping):
        return None
    discounted = _num(price.get("UnitPriceDiscount"))
    return discounted if discounted else _num(price.get("UnitPrice"))


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
    for name in ("provisioner.providers", log.name, "tencentcloud_sdk_common"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _RenderedRedactor) for f in logger.filters):
            logger.addFilter(_RenderedRedactor())


# -- the adapter -------------------------------------------------------------------------------


class TencentProvider(Provider):
    """Tencent Cloud CVM spot and pay-as-you-go instances."""

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
        vpc_id: str | None = None,
        subnet_id: str | None = None,
        subnet_ids: Mapping[str, str] | None = None,
        security_group_ids: Sequence[str] | None = None,
        key_ids: Sequence[str] | None = None,
        instance_types: Iterable[str] | None = None,
        system_disk_type: str | None = None,
        currency: str | None = None,
        cny_to_usd: float = DEFAULT_CNY_TO_USD,
        fx_rates: Mapping[str, float] | None = None,
        retry: RetryPolicy | None = None,
        package_spec: str = "provisioner",
        pip_args: Iterable[str] = (),
        timeout_s: int = 30,
    ) -> None:
        listed = list(regions or ())
        self.regions: list[str] = listed or [region or DEFAULT_REGION]
        self.default_region = region or self.regions[0]
        self.endpoint, self.protocol = parse_endpoint(endpoint)
        self.image_id = image_id
        self.vpc_id = vpc_id
        self.subnet_id = subnet_id
        self.subnet_ids = dict(subnet_ids or {})
        self.security_group_ids = list(security_group_ids or ())
        self.key_ids = list(key_ids or ())
        self.instance_types = list(instance_types) if instance_types else None
        self.system_disk_type = system_disk_type
        self.account = AccountCurrency(NAME, currency, {"CNY": cny_to_usd, **(fx_rates or {})})
        self.retry = retry or RetryPolicy()
        self.package_spec = package_spec
        self.pip_args = list(pip_args)
        self.timeout_s = timeout_s
        self._secret_id, self._secret_key = self._resolve_credentials(credentials)
        register_secret(self._secret_id)
        register_secret(self._secret_key)
        _install_log_filters()
        self._clients: dict[str, Any] = {}
        self._region_of: dict[str, str] = {}
        self._first_seen: dict[str, datetime] = {}
        self._alive_spot: dict[str, Instance] = {}
        self._terminated: set[str] = set()
        self._warned_currency = False

    def __repr__(self) -> str:  # never the credentials
        return f"TencentProvider(regions={self.regions!r}, endpoint={self.endpoint!r})"

    # -- plumbing ------------------------------------------------------------------------

    @staticmethod
    def _resolve_credentials(
        credentials: Mapping[str, str] | tuple[str, str] | None,
    ) -> tuple[str | None, str | None]:
        if isinstance(credentials, Mapping):
            secret_id = credentials.get("secret_id") or credentials.get("id")
            secret_key = credentials.get("secret_key") or credentials.get("secret")
            return secret_id, secret_key
        if isinstance(credentials, tuple):
            return credentials[0], credentials[1]
        return os.environ.get(ENV_SECRET_ID), os.environ.get(ENV_SECRET_KEY)

    def _client(self, region: str) -> Any:
        client = self._clients.get(region)
        if client is not None:
            return client
        try:
            from tencentcloud.common import credential
            from tencentcloud.common.profile.client_profile import ClientProfile
            from tencentcloud.common.profile.http_profile import HttpProfile
            from tencentcloud.cvm.v20170312 import cvm_client
        except ImportError as exc:
            raise ProviderUnavailable(
                "the Tencent Cloud SDK is not installed: pip install 'provisioner[tencent]'"
            ) from exc
        if not (self._secret_id and self._secret_key):  # the SDK's profile file, if any
            found = credential.ProfileCredential().get_credential()
            if found is not None:
                self._secret_id, self._secret_key = found.secret_id, found.secret_key
                register_secret(self._secret_id)
                register_secret(self._secret_key)
        if not (self._secret_id and self._secret_key):
            raise ProviderError(
                ErrorKind.AUTH,
                "MissingCredentials",
                f"no credentials: pass credentials=, set {ENV_SECRET_ID}/{ENV_SECRET_KEY}, "
                "or write ~/.tencentcloud/credentials",
                provider=NAME,
            )
        http = HttpProfile(
            protocol=self.protocol, endpoint=self.endpoint, reqTimeout=self.timeout_s
        )
        profile = ClientProfile(httpProfile=http, language="en-US")
        cred = credential.Credential(self._secret_id, self._secret_key)
        client = cvm_client.CvmClient(cred, region, profile)
        self._clients[region] = client
        return client

    def _request(self, region: str, action: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """One API call, with the envelope checked here (see the module notes on Content-Type)."""
        client = self._client(region)

        def once() -> dict[str, Any]:
            data = client.call_json(action, dict(params))
            if not isinstance(data, Mapping):
                raise ProviderError(
                    ErrorKind.TRANSIENT,
                    "BadResponse",
                    f"{action}: not a JSON object",
                    provider=NAME,
                )
            err = envelope_error(data)
            if err is not None:
                raise err
            return dict(data["Response"])

        return self._call(action, once)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        return call_with_retries(fn, classify_error, policy=self.retry, what=f"tencent {what}")

    @property
    def currency(self) -> str | None:
        """The account's currency: as a price answer reports it, else as configured."""
        return self.account.code

    def _to_usd(self, price: float | None) -> float | None:
        usd = self.account.to_usd(price)
        if price is not None and usd is None and not self._warned_currency:
            self._warned_currency = True
            log.warning(
                "tencent: prices left out: %s (CNY on a China-site account, USD on an "
                "international one)",
                self.account.describe(),
            )
        return usd

    def account_billing(self) -> dict[str, Any]:
        return self.account.billing()

    def _observe_currency(self, body: Mapping[str, Any]) -> None:
        """Take the currency from a price answer, wherever it names one."""
        node: Any = body
        for key in ("", "Price", "InstancePrice"):
            node = node.get(key) if key else node
            if not isinstance(node, Mapping):
                return
            if node.get("Currency"):
                self.account.observe(node["Currency"])
                return

    # -- offers and prices ----------------------------------------------------------------

    def _zone_configs(self, region: str) -> builtins.list[dict[str, Any]]:
        """GPU rows of DescribeZoneInstanceConfigInfos for spot and pay-as-you-go."""
        body = self._request(
            region,
            "DescribeZoneInstanceConfigInfos",
            {"Filters": [{"Name": "instance-charge-type", "Values": [SPOTPAID, POSTPAID]}]},
        )
        self._observe_currency(body)
        rows = []
        for row in body.get("InstanceTypeQuotaSet") or ():
            gpus = _num(row.get("GpuCount")) or _num(row.get("Gpu")) or 0.0
            if gpus < 1:  # CPU types, and vGPU slices (a fraction of a card)
                continue
            if self.instance_types and row.get("InstanceType") not in self.instance_types:
                continue
            rows.append(row)
        return rows

    def offers(self, regions: Iterable[str] | None = None) -> builtins.list[Offer]:
        out: builtins.list[Offer] = []
        for region in builtins.list(regions or self.regions):
            merged: dict[tuple[str, str], dict[str, Any]] = {}
            for row in self._zone_configs(region):
                key = (str(row.get("Zone", "")), str(row.get("InstanceType", "")))
                entry = merged.setdefault(key, {"row": row, "on_sale": False})
                selling = row.get("Status", "SELL") == "SELL"
                entry["on_sale"] = entry["on_sale"] or selling
                price = self._to_usd(_unit_price(row.get("Price")))
                if row.get("InstanceChargeType") == SPOTPAID:
                    entry["spot"] = price if selling else None
                else:
                    entry["price"] = price
            for (zone, itype), entry in sorted(merged.items()):
                if not entry["on_sale"]:
                    continue
                row = entry["row"]
                gpus = _num(row.get("GpuCount")) or _num(row.get("Gpu")) or 0.0
                out.append(
                    Offer(
                        provider=NAME,
                        region=region,
                        zone=zone,
                        instance_type=itype,
                        gpu=gpu_for(
                            itype,
                            str(row.get("InstanceFamily", "")),
                            f"{row.get('TypeName', '')} {row.get('Remark', '')}",
                        ),
                        gpu_count=round(gpus),
                        vcpus=float(_num(row.get("Cpu")) or 0),
                        memory_gib=float(_num(row.get("Memory")) or 0),
                        price=entry.get("price"),
                        spot_price=entry.get("spot"),
                        price_date=datetime.now(UTC).date().isoformat(),
                    )
                )
        return out

    def _inquire(self, region: str, zone: str, itype: str, charge: str) -> float | None:
        params: dict[str, Any] = {
            "Placement": {"Zone": zone},
            "ImageId": self.image_id,
            "InstanceChargeType": charge,
            "InstanceType": itype,
            "InstanceCount": 1,
        }
        if charge == SPOTPAID:
            params["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time"},
            }
        try:
            body = self._request(region, "InquiryPriceRunInstances", params)
        except ProviderError as exc:
            if exc.kind in (ErrorKind.CAPACITY, ErrorKind.INVALID):
                return None  # not sold (or not as spot) there: no quote
            raise
        self._observe_currency(body)
        return self._to_usd(_unit_price((body.get("Price") or {}).get("InstancePrice")))

    def prices(self, regions: Iterable[str] | None = None) -> builtins.list[PriceQuote]:
        out: builtins.list[PriceQuote] = []
        for region in builtins.list(regions or self.regions):
            now = datetime.now(UTC)
            if not self.image_id:  # InquiryPriceRunInstances needs an image: use the listing
                out.extend(
                    PriceQuote(
                        provider=NAME,
                        region=region,
                        zone=o.zone,
                        instance_type=o.instance_type,
                        spot_price=o.spot_price,
                        on_demand_price=o.price,
                        at=now,
                        on_demand_at=datetime.now(UTC),
                        currency=self.account.code or "",
                        usd_per_unit=self.account.usd_per_unit() or 0.0,
                    )
                    for o in self.offers([region])
                )
                continue
            selling: dict[tuple[str, str], set[str]] = {}  # (zone, type) -> charge types on sale
            for r in self._zone_configs(region):
                key = (str(r.get("Zone", "")), str(r.get("InstanceType", "")))
                charges = selling.setdefault(key, set())
                if r.get("Status", "SELL") == "SELL":
                    charges.add(str(r.get("InstanceChargeType", "")))
            for (zone, itype), charges in sorted(selling.items()):
                if not charges:
                    continue
                spot = self._inquire(region, zone, itype, SPOTPAID) if SPOTPAID in charges else None
                od = self._inquire(region, zone, itype, POSTPAID) if POSTPAID in charges else None
                out.append(
                    PriceQuote(
                        provider=NAME,
                        region=region,
                        zone=zone,
                        instance_type=itype,
                        spot_price=spot,
                        on_demand_price=od,
                        at=datetime.now(UTC),
                        on_demand_at=datetime.now(UTC),
                        currency=self.account.code or "",
                        usd_per_unit=self.account.usd_per_unit() or 0.0,
                    )
                )
        return out

    # -- instances ---------------------------------------------------------------------------

    def _instance(self, raw: Mapping[str, Any], region: str) -> Instance:
        iid = str(raw.get("InstanceId", ""))
        raw_state = str(raw.get("InstanceState", ""))
        market = Market.SPOT if raw.get("InstanceChargeType") == SPOTPAID else Market.ON_DEMAND
        operation = str(raw.get("LatestOperation") or "")
        isolated = str(raw.get("IsolatedSource") or "")
        reason = ""
        if raw_state in ("PENDING", "STARTING"):
            state = InstanceState.PENDING
        elif raw_state in ("RUNNING", "REBOOTING"):
            state = InstanceState.RUNNING
        elif raw_state in ("STOPPING", "STOPPED"):
            state = InstanceState.STOPPING
        elif raw_state == "LAUNCH_FAILED":
            state = InstanceState.TERMINATED
            reason = str(raw.get("LatestOperationErrorMsg") or "LAUNCH_FAILED")
        else:  # SHUTDOWN (recycle bin), TERMINATING, anything unknown
            state = InstanceState.TERMINATED
        if (
            market is Market.SPOT
            and raw_state in GOING_AWAY
            and operation not in OUR_OPERATIONS
            and isolated != "MANMADE"
            and iid not in self._terminated
        ):
            state = InstanceState.PREEMPTED
            reason = f"spot instance reclaimed ({raw_state})"
        elif not reason and operation:
            reason = f"{operation}:{raw.get('LatestOperationState') or ''}".rstrip(":")
        tags = {
            str(t.get("Key")): str(t.get("Value", ""))
            for t in raw.get("Tags") or ()
            if t.get("Key") is not None
        }
        placement = raw.get("Placement") or {}
        public = raw.get("PublicIpAddresses") or []
        private = raw.get("PrivateIpAddresses") or []
        self._region_of[iid] = region
        return Instance(
            id=iid,
            provider=NAME,
            region=region,
            zone=str(placement.get("Zone", "")),
            instance_type=str(raw.get("InstanceType", "")),
            market=market,
            state=state,
            raw_state=raw_state,
            state_reason=reason,
            tags=tags,
            launched_at=parse_time(raw.get("CreatedTime")),
            public_ip=str(public[0]) if public else None,
            private_ip=str(private[0]) if private else None,
        )

    def _describe(
        self,
        region: str,
        *,
        ids: Sequence[str] = (),
        tags: Mapping[str, str] | None = None,
        extra: Sequence[Mapping[str, Any]] = (),
    ) -> builtins.list[Instance]:
        wanted = dict(tags or {})
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in wanted.items()]
        filters.extend(dict(f) for f in extra)
        out: builtins.list[Instance] = []
        offset = 0
        while True:
            params: dict[str, Any] = {"Offset": offset, "Limit": PAGE}
            if ids:  # InstanceIds and Filters cannot be combined
                params["InstanceIds"] = builtins.list(ids)
            elif filters:
                params["Filters"] = filters[:MAX_FILTERS]
            body = self._request(region, "DescribeInstances", params)
            rows = body.get("InstanceSet") or []
            for raw in rows:
                inst = self._instance(raw, region)
                if has_tags(inst.tags, wanted):
                    out.append(inst)
            offset += len(rows)
            if not rows or offset >= int(body.get("TotalCount") or 0) or ids:
                return out

    def _note(self, instances: Iterable[Instance]) -> None:
        for inst in instances:
            if inst.market is Market.SPOT and inst.state.alive:
                self._alive_spot[inst.id] = inst

    def get(self, instance_id: str) -> Instance:
        regions = [self._region_of[instance_id]] if instance_id in self._region_of else self.regions
        for region in regions:
            found = [i for i in self._describe(region, ids=[instance_id]) if i.id == instance_id]
            if found:
                self._note(found)
                return found[0]
        raise ProviderError(
            ErrorKind.NOT_FOUND,
            "InvalidInstanceId.NotFound",
            f"no instance {instance_id} in {', '.join(regions)}",
            provider=NAME,
        )

    def list(self, tags: Mapping[str, str] | None = None) -> builtins.list[Instance]:
        out: builtins.list[Instance] = []
        for region in self.regions:
            out.extend(self._describe(region, tags=wanted_tags(tags)))
        self._note(out)
        return out

    def launch(self, request: LaunchRequest) -> Instance:
        offer = request.offer
        region = offer.region or self.default_region
        attempt_tags = {k: request.tags[k] for k in sorted(request.tags)}
        identity = {k: attempt_tags[k] for k in (TAG_MANAGED, TAG_JOB, TAG_ATTEMPT)}
        for inst in self._describe(region, tags=identity):
            if inst.state is not InstanceState.TERMINATED:
                log.info("tencent: %s already has instance %s", request.token, inst.id)
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
        params: dict[str, Any] = {
            "Placement": {"Zone": offer.zone},
            "InstanceType": offer.instance_type,
            "ImageId": image,
            "InstanceCount": 1,
            "InstanceName": request.name,
            "ClientToken": request.token,
            "SystemDisk": {"DiskSize": request.disk_gb},
            "TagSpecification": [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in attempt_tags.items()],
                }
            ],
        }
        if self.system_disk_type:
            params["SystemDisk"]["DiskType"] = self.system_disk_type
        subnet = self.subnet_ids.get(offer.zone) or self.subnet_id
        if self.vpc_id and subnet:
            params["VirtualPrivateCloud"] = {"VpcId": self.vpc_id, "SubnetId": subnet}
        if self.security_group_ids:
            params["SecurityGroupIds"] = builtins.list(self.security_group_ids)
        keys = [request.ssh_key_name] if request.ssh_key_name else self.key_ids
        if keys:
            params["LoginSettings"] = {"KeyIds": builtins.list(keys)}
        user_data = user_data_for(
            request, NAME, package_spec=self.package_spec, pip_args=self.pip_args
        )
        if user_data:
            params["UserData"] = base64.b64encode(user_data.encode("utf-8")).decode("ascii")
        if request.market is Market.SPOT:
            cap = request.bid_cap_per_hour if request.bid_cap_per_hour is not None else offer.price
            if cap is None:
                raise ProviderError(
                    ErrorKind.INVALID,
                    "MissingMaxPrice",
                    "Tencent spot needs a maximum price: give a bid cap or an on-demand price",
                    provider=NAME,
                )
            _, rate = self.account.for_launch()
            if cap_decimal(cap, PRICE_DECIMALS, usd_per_unit=rate) <= 0:
                raise ProviderError(
                    ErrorKind.PRICE_TOO_LOW,
                    "BidCapBelowMinimum",
                    f"the cap {cap!r} USD/h rounds to 0 at Tencent's 4 decimals",
                    provider=NAME,
                )
            params["InstanceChargeType"] = SPOTPAID
            params["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {
                    "MaxPrice": price_text(cap, rate),
                    "SpotInstanceType": "one-time",
                },
            }
        else:
            params["InstanceChargeType"] = POSTPAID
        body = self._request(region, "RunInstances", params)
        ids = body.get("InstanceIdSet") or []
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
            raw_state="PENDING",
            tags=dict(attempt_tags),
            launched_at=datetime.now(UTC),
        )
        self._note([inst])
        return inst

    def terminate(self, instance_ids: Iterable[str]) -> None:
        ids = [i for i in dict.fromkeys(instance_ids) if i]
        if not ids:
            return
        self._terminated.update(ids)
        by_region: dict[str, builtins.list[str]] = {}
        unknown = [i for i in ids if i not in self._region_of]
        for iid in ids:
            if iid in self._region_of:
                by_region.setdefault(self._region_of[iid], []).append(iid)
        for region in self.regions:
            if unknown:
                by_region.setdefault(region, []).extend(unknown)
        for region, batch_ids in by_region.items():
            for start in range(0, len(batch_ids), PAGE):
                self._terminate(region, batch_ids[start : start + PAGE])
        for iid in ids:
            self._alive_spot.pop(iid, None)

    def _terminate(self, region: str, ids: Sequence[str]) -> None:
        def run(batch: Sequence[str]) -> None:
            self._request(region, "TerminateInstances", {"InstanceIds": builtins.list(batch)})

        try:
            run(ids)
        except ProviderError as exc:
            if exc.code not in _ALREADY_GONE and exc.kind is not ErrorKind.NOT_FOUND:
                raise
            if len(ids) == 1:
                return
            for iid in ids:  # one gone id fails the batch: terminate the rest one by one
                try:
                    run([iid])
                except ProviderError as one:
                    if one.code not in _ALREADY_GONE and one.kind is not ErrorKind.NOT_FOUND:
                        raise

    def interruptions(self, since: datetime) -> builtins.list[Interruption]:
        since = utc(since)
        now = datetime.now(UTC)
        out: builtins.list[Interruption] = []
        present: set[str] = set()
        spot_filter = [{"Name": "instance-charge-type", "Values": [SPOTPAID]}]
        for region in self.regions:
            for inst in self._describe(region, tags={TAG_MANAGED: "true"}, extra=spot_filter):
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
                            raw=f"InstanceState={inst.raw_state}",
                        )
                    )
        for iid, inst in builtins.list(self._alive_spot.items()):
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
