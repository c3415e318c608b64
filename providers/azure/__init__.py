"""Azure virtual machines through ``azure-mgmt-compute`` and ``azure-mgmt-network``.

What this adapter does, and the Azure facts behind it (see shared/reference/clouds.md):

- A VM needs a NIC: ``launch`` creates ``<name>-nic`` in the configured subnet, then PUTs the
  VM ``<name>`` (``request.name``) with ``priority: Spot``, ``evictionPolicy`` (``Delete`` by
  default), ``billingProfile.maxPrice`` (the bid cap rounded *down* to 5 decimals, so it never
  exceeds the cap; ``-1``, no price eviction, when there is no cap), the tags, and
  ``osProfile.customData`` = base64 of the request's user data (else of the bootstrap script
  rendered from its job spec). PUT is idempotent; the adapter
  still looks the VM up first and returns it if it exists.
- Errors are dispatched on ``e.error.code``, never on the exception class (a 409
  ``SkuNotAvailable`` arrives as ``ResourceExistsError``). ``SpotPriceGreaterThanProvidedMaxPrice``
  is price-too-low. ``MaxPriceValueInvalid`` is *invalid*: it says the value is malformed
  (not -1, not above 0, more than 5 decimals), which the adapter never sends, so trying another
  offer would not help. ``OperationNotAllowed`` is quota when its message speaks of quota,
  invalid otherwise. Allocation failures arrive as a failed long-running operation; the VM is
  then left ``Failed`` and the adapter deletes it and its NIC before raising.
- The SDK's own retry policy is switched off (``retry_total=0``): every error is classified
  here and only throttled/transient ones are retried, with jitter (``call_with_retries``).
- **Evictions.** With ``Deallocate`` an evicted VM stays, ``PowerState/deallocated`` (this tool
  never deallocates, so a deallocated Spot VM is an eviction). With ``Delete`` the VM is gone;
  the NIC is attached with ``deleteOption: Detach`` so that it outlives the VM and carries its
  tags: a managed NIC with no VM is an evicted attempt, reported by ``get``/``list`` as
  PREEMPTED and by ``interruptions`` (time: the NIC's ``systemData.lastModifiedAt`` where ARM
  gives it, else the time it is observed). ``terminate`` deletes the VM, then the NIC.
  (The same picture arises if the process died between creating the NIC and the VM; the
  reconciler then terminates that attempt, which removes the NIC.)
- Instance ids are ARM resource ids of the VM; ``get``/``terminate`` also take a bare name.
"""

from __future__ import annotations

import base64
import builtins
import functools
import json
import logging
import os
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from providers._common import (
    ErrorTable,
    cap_decimal,
    has_tags,
    normalise_state,
    now_utc,
    utc,
    wanted_tags,
)
from providers.base import (
    ErrorKind,
    PriceQuote,
    Provider,
    ProviderError,
    ProviderUnavailable,
    RetryPolicy,
    call_with_retries,
    redact,
    register_secret,
)
from provisioner.core.models import (
    TAG_MANAGED,
    Instance,
    InstanceState,
    Interruption,
    LaunchRequest,
    Market,
    Offer,
)

log = logging.getLogger("provisioner.providers.azure")

T = TypeVar("T")

ARM_ENDPOINT = "https://management.azure.com"
PRICES_ENDPOINT = "https://prices.azure.com"
DEFAULT_IMAGE = "microsoft-dsvm:ubuntu-hpc:2204:latest"
#: GPU sizes named in one Retail Prices query (an OData ``or`` list; keeps the URL short)
SKUS_PER_QUERY = 10
_SKU_NAME = re.compile(r"Standard_[A-Za-z0-9_]+")

ERRORS = ErrorTable(
    "azure",
    {
        ErrorKind.CAPACITY: (
            "SkuNotAvailable",
            "AllocationFailed",
            "ZonalAllocationFailed",
            "OverconstrainedAllocationRequest",
            "OverconstrainedZonalAllocationRequest",
            "AzureSpotIsNotSupportedForThisVMSize",  # no spot for this size here: next offer
            "SubnetIsFull",  # the NIC's subnet has no free IP address: another region's may
        ),
        ErrorKind.PRICE_TOO_LOW: ("SpotPriceGreaterThanProvidedMaxPrice", "BidCapBelowMinimum"),
        ErrorKind.INVALID: ("MaxPriceValueInvalid", "InvalidParameter", "NicInUse"),
        ErrorKind.QUOTA: ("QuotaExceeded", "OperationNotAllowedQuota"),
        ErrorKind.AUTH: (
            "AuthorizationFailed",
            "LinkedAuthorizationFailed",
            "InvalidAuthenticationToken",
            "InvalidAuthenticationTokenTenant",
            "ExpiredAuthenticationToken",
            "AuthenticationFailed",
        ),
        ErrorKind.NOT_FOUND: ("ResourceNotFound", "NotFound", "ResourceGroupNotFound"),
        ErrorKind.THROTTLED: ("TooManyRequests", "SubscriptionRequestsThrottled"),
        ErrorKind.TRANSIENT: (
            "InternalServerError",
            "InternalExecutionError",
            "ServiceUnavailable",
            "GatewayTimeout",
            "RetryableError",
        ),
    },
)

POWER_STATES: dict[str, InstanceState] = {
    "starting": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "deallocating": InstanceState.STOPPING,
    "stopped": InstanceState.TERMINATED,
    "deallocated": InstanceState.TERMINATED,
    # provisioning states, used while there is no power state yet
    "creating": InstanceState.PENDING,
    "updating": InstanceState.PENDING,
    "migrating": InstanceState.PENDING,
    "succeeded": InstanceState.PENDING,
    "deleting": InstanceState.STOPPING,
    "failed": InstanceState.TERMINATED,
    "evicted": InstanceState.TERMINATED,
}


#: ``billingProfile.maxPrice`` takes at most 5 decimals (USD)
PRICE_DECIMALS = 5


def max_price(cap: float | None) -> float:
    """``billingProfile.maxPrice`` for a bid cap: floor to 5 decimals; ``-1`` for no cap."""
    if cap is None:
        return -1
    value = float(cap_decimal(cap, PRICE_DECIMALS))  # decimal arithmetic: never above the cap
    if value <= 0:
        raise ProviderError(
            ErrorKind.PRICE_TOO_LOW,
            "BidCapBelowMinimum",
            f"bid cap {cap!r} is below Azure's smallest max price 0.00001",
            provider="azure",
        )
    return value


def classify(exc: BaseException) -> ProviderError | None:
    """A ProviderError for an azure-core/azure-identity error, by its ARM error code."""
    if isinstance(exc, _RetailError):
        return ERRORS.error(exc.code, exc.message, exc.status)
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ServiceRequestError,
        ServiceResponseError,
    )

    if isinstance(exc, HttpResponseError):
        status = exc.status_code
        code = (exc.error.code if exc.error is not None else None) or ""
        message = (exc.error.message if exc.error is not None else None) or exc.message or str(exc)
        if isinstance(exc, ClientAuthenticationError) and status is None:
            return ProviderError(
                ErrorKind.AUTH, code or type(exc).__name__, message, provider="azure"
            )
        if code == "OperationNotAllowed":
            kind = ErrorKind.QUOTA if "quota" in message.lower() else ErrorKind.INVALID
            return ProviderError(kind, code, message, provider="azure")
        return ERRORS.error(code or f"HTTP{status or ''}", message, status)
    if isinstance(exc, ServiceRequestError | ServiceResponseError | ConnectionError | TimeoutError):
        return ProviderError(ErrorKind.TRANSIENT, type(exc).__name__, str(exc), provider="azure")
    return None


class _RetailError(Exception):
    def __init__(self, status: int | None, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _static_credential(token: str) -> Any:
    from azure.core.credentials import AccessToken

    class StaticToken:
        def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
            return AccessToken(token, int(time.time()) + 3600)

    return StaticToken()


def _bearer_policy(credential: Any, scope: str) -> Any:
    """An auth policy that sets ``Authorization: Bearer`` without insisting on https
    (the SDK's default refuses plain http; used only for an ``http://`` endpoint)."""
    from azure.core.pipeline.policies import SansIOHTTPPolicy

    class BearerPolicy(SansIOHTTPPolicy):
        def __init__(self) -> None:
            self._token: Any = None

        def on_request(self, request: Any) -> None:
            if self._token is None or self._token.expires_on - 300 < time.time():
                self._token = credential.get_token(scope)
                register_secret(self._token.token)
            request.http_request.headers["Authorization"] = f"Bearer {self._token.token}"

    return BearerPolicy()


class AzureProvider(Provider):
    """Azure VMs in one subscription and resource group.

    ``subscription_id`` (default ``$AZURE_SUBSCRIPTION_ID``), ``resource_group``,
    ``location``/``locations`` (regions offers and prices cover), ``subnet_id`` (the subnet the
    NICs join; needed to launch). ``credentials``: an azure-identity credential, a dict with
    ``tenant_id``/``client_id``/``client_secret``, a bearer token string, or None for
    ``DefaultAzureCredential``. ``endpoint``: the ARM root (``http://127.0.0.1:P`` in tests);
    ``prices_endpoint``: the Retail Prices API root. ``image``: ``publisher:offer:sku:version``
    or an image resource id. ``eviction_policy``: ``Delete`` (default) or ``Deallocate``.
    """

    name = "azure"

    def __init__(
        self,
        subscription_id: str | None = None,
        resource_group: str | None = None,
        location: str | None = None,
        locations: Iterable[str] | None = None,
        regions: Iterable[str] | None = None,
        subnet_id: str | None = None,
        endpoint: str | None = None,
        credentials: Any = None,
        prices_endpoint: str | None = None,
        image: str | None = None,
        admin_username: str = "azureuser",
        ssh_public_key: str | None = None,
        eviction_policy: str = "Delete",
        os_disk_type: str = "StandardSSD_LRS",
        accelerated_networking: bool = False,
        retry: RetryPolicy | None = None,
        polling_interval: float = 5.0,
        request_timeout: float = 60.0,
        vm_sizes: Iterable[str] | None = None,
    ) -> None:
        try:
            import azure.core  # noqa: F401  (the management SDKs are imported on first use)
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ProviderUnavailable("azure: pip install 'provisioner[azure]'") from exc
        self.subscription_id = subscription_id or os.environ.get("AZURE_SUBSCRIPTION_ID", "")
        if not self.subscription_id:
            raise ProviderUnavailable("azure: no subscription_id (or AZURE_SUBSCRIPTION_ID)")
        if not resource_group:
            raise ProviderUnavailable("azure: a resource_group is needed")
        self.resource_group = resource_group
        self.locations = list(
            dict.fromkeys([*([location] if location else []), *(locations or ()), *(regions or ())])
        )
        self.subnet_id = subnet_id
        self.endpoint = (endpoint or ARM_ENDPOINT).rstrip("/")
        self.prices_endpoint = (
            prices_endpoint or (endpoint if endpoint else PRICES_ENDPOINT)
        ).rstrip("/")
        self.image = image or DEFAULT_IMAGE
        self.admin_username = admin_username
        self.ssh_public_key = ssh_public_key
        if eviction_policy not in ("Delete", "Deallocate"):
            raise ValueError("eviction_policy must be Delete or Deallocate")
        self.eviction_policy = eviction_policy
        self.os_disk_type = os_disk_type
        self.accelerated_networking = accelerated_networking
        self.retry = retry or RetryPolicy()
        self.polling_interval = polling_interval
        self.request_timeout = request_timeout
        self.vm_sizes = builtins.list(vm_sizes or ())
        self.credential = self._credential(credentials)
        self._compute: Any = None
        self._network: Any = None
        self._lock = threading.Lock()
        self._quotes: dict[tuple[str, str], PriceQuote] = {}

    @staticmethod
    def _credential(credentials: Any) -> Any:
        if isinstance(credentials, str):
            register_secret(credentials)
            return _static_credential(credentials)
        if isinstance(credentials, Mapping):
            from azure.identity import ClientSecretCredential

            register_secret(credentials.get("client_secret"))
            return ClientSecretCredential(
                credentials["tenant_id"], credentials["client_id"], credentials["client_secret"]
            )
        if credentials is None:
            from azure.identity import DefaultAzureCredential

            return DefaultAzureCredential()
        return credentials

    # -- plumbing -----------------------------------------------------------------------------

    def _client_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "base_url": self.endpoint,
            "polling_interval": self.polling_interval,
            "retry_total": 0,  # classified and retried here, by code
            "connection_timeout": 10,
            "read_timeout": self.request_timeout,
        }
        if self.endpoint.startswith("http://"):
            kw["authentication_policy"] = _bearer_policy(
                self.credential, f"{ARM_ENDPOINT}/.default"
            )
        return kw

    @property
    def compute(self) -> Any:
        with self._lock:
            if self._compute is None:
                from azure.mgmt.compute import ComputeManagementClient

                self._compute = ComputeManagementClient(
                    self.credential, self.subscription_id, **self._client_kwargs()
                )
            return self._compute

    @property
    def network(self) -> Any:
        with self._lock:
            if self._network is None:
                from azure.mgmt.network import NetworkManagementClient

                self._network = NetworkManagementClient(
                    self.credential, self.subscription_id, **self._client_kwargs()
                )
            return self._network

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        return call_with_retries(fn, classify, policy=self.retry, what=f"azure {what}")

    def close(self) -> None:
        with self._lock:
            for client in (self._compute, self._network):
                if client is not None:
                    client.close()
            self._compute = self._network = None

    def vm_id(self, name: str) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Compute/virtualMachines/{name}"
        )

    def nic_id(self, vm_name: str) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Network/networkInterfaces/{vm_name}-nic"
        )

    # -- offers and prices ------------------------------------------------------------------------

    def offers(self, regions: Iterable[str] | None = None) -> builtins.list[Offer]:
        """Azure GPU sizes from the catalog (the Resource SKUs list is megabytes per call),
        with live prices from :meth:`prices` laid over where this adapter has fetched them."""
        wanted = set(regions or self.locations)
        try:
            from provisioner.core.catalog import Catalog

            rows = Catalog.load().filter(provider="azure", regions=sorted(wanted) or None)
        except Exception as exc:  # the catalog is optional
            log.warning("azure: no catalog: %s", exc)
            return []
        out = []
        for o in rows:
            quote = self._quotes.get((o.region, o.instance_type))
            if quote is not None:
                o = Offer(
                    **{
                        **{f: getattr(o, f) for f in Offer.__dataclass_fields__},
                        "price": quote.on_demand_price
                        if quote.on_demand_price is not None
                        else o.price,
                        "spot_price": quote.spot_price
                        if quote.spot_price is not None
                        else o.spot_price,
                        "price_date": quote.at.date().isoformat(),
                    }
                )
            out.append(o)
        return out

    def gpu_sizes(self, region: str) -> builtins.list[str]:
        """The GPU sizes to price in ``region``: ``vm_sizes`` if given, else the catalog's."""
        if self.vm_sizes:
            return builtins.list(self.vm_sizes)
        try:
            from provisioner.core.catalog import Catalog

            rows = Catalog.load().filter(provider="azure", regions=[region])
        except Exception as exc:  # the catalog is optional
            log.warning("azure: no catalog to name the GPU sizes: %s", exc)
            return []
        return sorted({o.instance_type for o in rows})

    def _price_filters(self, region: str) -> builtins.list[str]:
        """Retail Prices ``$filter`` expressions for ``region``'s GPU sizes, a few per query.

        Filtering on ``armSkuName`` keeps a refresh to a few pages (a region has thousands of
        VM meters); without any known GPU size the region's VM meters are read and filtered here.
        """
        base = (
            f"serviceName eq 'Virtual Machines' and priceType eq 'Consumption' "
            f"and armRegionName eq '{region}'"
        )
        sizes = [s for s in self.gpu_sizes(region) if _SKU_NAME.fullmatch(s)]
        if not sizes:
            log.warning("azure: no GPU sizes known for %s; reading all its VM meters", region)
            return [base]
        out = []
        for i in range(0, len(sizes), SKUS_PER_QUERY):
            skus = " or ".join(f"armSkuName eq '{s}'" for s in sizes[i : i + SKUS_PER_QUERY])
            out.append(f"{base} and ({skus})")
        return out

    def prices(self, regions: Iterable[str] | None = None) -> builtins.list[PriceQuote]:
        """Linux spot and pay-as-you-go prices of the GPU sizes (``Standard_N*``) from the
        public Retail Prices API, filtered by ``armSkuName``, following ``NextPageLink``."""
        out: list[PriceQuote] = []
        at = now_utc()
        for region in regions or self.locations:
            best: dict[str, dict[str, tuple[str, float]]] = {}
            items = (item for expr in self._price_filters(region) for item in self._retail(expr))
            for item in items:
                size = item.get("armSkuName") or ""
                meter = f"{item.get('meterName', '')} {item.get('skuName', '')}"
                if (
                    not size.startswith("Standard_N")
                    or "Windows" in item.get("productName", "")
                    or "Low Priority" in meter
                    or item.get("unitOfMeasure") != "1 Hour"
                ):
                    continue
                market = "spot" if "Spot" in meter else "on-demand"
                start = str(item.get("effectiveStartDate", ""))
                seen = best.setdefault(size, {})
                if market not in seen or start > seen[market][0]:
                    seen[market] = (
                        start,
                        float(item.get("retailPrice", item.get("unitPrice", 0.0))),
                    )
            for size, markets in sorted(best.items()):
                spot = markets.get("spot")
                od = markets.get("on-demand")
                quote = PriceQuote(
                    "azure",
                    region,
                    "",
                    size,
                    spot[1] if spot else None,
                    od[1] if od else None,
                    at,
                    at if od else None,  # live from the Retail Prices API
                )
                self._quotes[(region, size)] = quote
                out.append(quote)
        return out

    def _retail(self, expr: str) -> Iterable[dict[str, Any]]:
        url: str | None = (
            f"{self.prices_endpoint}/api/retail/prices?$filter={urllib.parse.quote(expr)}"
        )
        while url:
            page: dict[str, Any] = self._call(
                "retail prices", functools.partial(self._get_json, url)
            )
            yield from page.get("Items") or ()
            url = page.get("NextPageLink") or None

    def _get_json(self, url: str) -> dict[str, Any]:
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.request_timeout) as response:
                data: dict[str, Any] = json.loads(response.read())
                return data
        except urllib.error.HTTPError as exc:
            try:
                body = json.loads(exc.read() or b"{}")
                err = body.get("Error") or body.get("error") or {}
                code, message = (
                    err.get("Code") or err.get("code") or "",
                    err.get("Message") or err.get("message") or "",
                )
            except ValueError:
                code, message = "", exc.reason
            raise _RetailError(exc.code, code or f"HTTP{exc.code}", str(message)) from None
        except (urllib.error.URLError, TimeoutError) as exc:
            raise _RetailError(None, "ConnectionError", str(exc)) from None

    # -- launch -------------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> Instance:
        offer = request.offer
        if offer.provider not in ("", "azure"):
            raise ProviderError(
                ErrorKind.INVALID,
                "WrongProvider",
                f"offer is for {offer.provider}",
                provider="azure",
            )
        region = offer.region or (self.locations[0] if self.locations else "")
        if not region:
            raise ProviderError(
                ErrorKind.INVALID, "NoLocation", "the offer names no region", provider="azure"
            )
        if not self.subnet_id:
            raise ProviderError(
                ErrorKind.INVALID,
                "NoSubnet",
                "subnet_id is needed to create the NIC",
                provider="azure",
            )
        name = request.name
        existing = self._get_vm(name)
        if (
            existing is not None
            and existing.get("properties", {}).get("provisioningState") != "Failed"
        ):
            log.info("azure: %s already has VM %s", request.token, name)
            return self._instance(existing, self._get_nic(name))
        spot = request.market is Market.SPOT
        price = max_price(request.bid_cap_per_hour) if spot else None
        nic = self._ensure_nic(name, region, request.tags)
        body = self._vm_body(request, region, nic["id"], price)
        try:
            self._call(
                "create VM",
                lambda: self.compute.virtual_machines.begin_create_or_update(
                    self.resource_group, name, body
                ).result(),
            )
        except ProviderError as err:
            self._clean_up_failed(name, err)
            raise
        instance = self.get(name)
        log.info(
            "azure: launched %s (%s, %s, maxPrice %s) for %s",
            name,
            offer.instance_type,
            request.market.value,
            price,
            request.token,
        )
        return instance

    def _ensure_nic(self, name: str, region: str, tags: Mapping[str, str]) -> dict[str, Any]:
        body = {
            "location": region,
            "tags": dict(tags),
            "properties": {
                "enableAcceleratedNetworking": self.accelerated_networking,
                "ipConfigurations": [
                    {
                        "name": "ipconfig1",
                        "properties": {
                            "subnet": {"id": self.subnet_id},
                            "privateIPAllocationMethod": "Dynamic",
                        },
                    }
                ],
            },
        }
        nic = self._call(
            "create NIC",
            lambda: self.network.network_interfaces.begin_create_or_update(
                self.resource_group, f"{name}-nic", body
            ).result(),
        )
        return _as_dict(nic)

    def _vm_body(
        self, request: LaunchRequest, region: str, nic_id: str, price: float | None
    ) -> dict[str, Any]:
        offer = request.offer
        admin = self.admin_username
        os_profile: dict[str, Any] = {
            "computerName": request.name[:64],
            "adminUsername": admin,
            "linuxConfiguration": {
                "disablePasswordAuthentication": True,
                "ssh": {
                    "publicKeys": [
                        {"path": f"/home/{admin}/.ssh/authorized_keys", "keyData": self._ssh_key()}
                    ]
                },
            },
        }
        script = _user_data(request)
        if script:
            os_profile["customData"] = base64.b64encode(script.encode()).decode()
        props: dict[str, Any] = {
            "hardwareProfile": {"vmSize": offer.instance_type},
            "storageProfile": {
                "imageReference": _image_reference(request.image or self.image),
                "osDisk": {
                    "createOption": "FromImage",
                    "deleteOption": "Delete",
                    "diskSizeGB": request.disk_gb,
                    "managedDisk": {"storageAccountType": self.os_disk_type},
                },
            },
            "osProfile": os_profile,
            "networkProfile": {
                "networkInterfaces": [
                    {"id": nic_id, "properties": {"primary": True, "deleteOption": "Detach"}}
                ]
            },
        }
        if price is not None:
            props.update(
                priority="Spot",
                evictionPolicy=self.eviction_policy,
                billingProfile={"maxPrice": price},
            )
        else:
            props["priority"] = "Regular"
        body: dict[str, Any] = {"location": region, "tags": dict(request.tags), "properties": props}
        zone = _zone_number(offer.zone)
        if zone:
            body["zones"] = [zone]
        return body

    def _ssh_key(self) -> str:
        if self.ssh_public_key:
            return self.ssh_public_key
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        # Azure wants a key for a Linux VM without a password; with none configured, one is
        # made and its private half thrown away: the VM is reached through its agent only.
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ssh_public_key = (
            key.public_key()
            .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
            .decode()
        )
        log.info("azure: no ssh_public_key configured; VMs get a throwaway key")
        return self.ssh_public_key

    def _clean_up_failed(self, name: str, err: ProviderError) -> None:
        """After a failed create: remove the VM (left ``Failed`` by Azure) and the NIC."""
        log.warning(
            "azure: creating %s failed (%s: %s); removing what it left",
            name,
            err.kind.value,
            err.code,
        )
        try:
            self._delete(name)
        except ProviderError as cleanup:
            log.warning("azure: could not clean up after %s: %s", name, cleanup)

    # -- describe -------------------------------------------------------------------------------

    def _get_vm(self, name: str) -> dict[str, Any] | None:
        try:
            vm = self._call(
                "get VM",
                lambda: self.compute.virtual_machines.get(
                    self.resource_group, name, expand="instanceView"
                ),
            )
        except ProviderError as err:
            if err.kind is ErrorKind.NOT_FOUND:
                return None
            raise
        return _as_dict(vm)

    def _get_nic(self, vm_name: str) -> dict[str, Any] | None:
        try:
            nic = self._call(
                "get NIC",
                lambda: self.network.network_interfaces.get(self.resource_group, f"{vm_name}-nic"),
            )
        except ProviderError as err:
            if err.kind is ErrorKind.NOT_FOUND:
                return None
            raise
        return _as_dict(nic)

    def _instance(self, vm: Mapping[str, Any], nic: Mapping[str, Any] | None) -> Instance:
        props = vm.get("properties") or {}
        statuses = (props.get("instanceView") or {}).get("statuses") or []
        power = next(
            (s for s in statuses if str(s.get("code", "")).startswith("PowerState/")), None
        )
        provisioning = str(props.get("provisioningState") or "")
        raw = str(power["code"]).split("/", 1)[1] if power else provisioning.lower()
        spot = props.get("priority") == "Spot"
        # This tool never deallocates: a deallocated Spot VM was evicted (evictionPolicy Deallocate).
        preempted = spot and raw == "deallocated"
        failed = next(
            (s for s in statuses if str(s.get("code", "")).startswith("ProvisioningState/failed")),
            None,
        )
        reason = (
            "evicted"
            if preempted
            else (str(failed.get("code", "")).split("/", 2)[-1] if failed else "")
        )
        state = normalise_state(raw, POWER_STATES, preempted=preempted)
        if provisioning == "Deleting":
            state = InstanceState.STOPPING
        region = str(vm.get("location", ""))
        size = (props.get("hardwareProfile") or {}).get("vmSize", "")
        quote = self._quotes.get((region, size))
        return Instance(
            id=self.vm_id(str(vm.get("name", ""))),
            provider="azure",
            region=region,
            zone=f"{region}-{vm['zones'][0]}" if vm.get("zones") else "",
            instance_type=size,
            market=Market.SPOT if spot else Market.ON_DEMAND,
            state=state,
            raw_state=raw,
            state_reason=reason,
            tags=dict(vm.get("tags") or {}),
            launched_at=_when(props.get("timeCreated")),
            price_per_hour=(quote.spot_price if spot else quote.on_demand_price) if quote else None,
            private_ip=_private_ip(nic),
        )

    def _evicted(self, nic: Mapping[str, Any]) -> Instance:
        """The instance an orphaned managed NIC stands for: its VM was evicted (Delete)."""
        vm_name = str(nic.get("name", "")).removesuffix("-nic")
        return Instance(
            id=self.vm_id(vm_name),
            provider="azure",
            region=str(nic.get("location", "")),
            zone="",
            instance_type="",
            market=Market.SPOT,
            state=InstanceState.PREEMPTED,
            raw_state="deleted",
            state_reason="evicted: the VM is gone and its NIC remains",
            tags=dict(nic.get("tags") or {}),
            private_ip=None,
        )

    @staticmethod
    def _orphan(nic: Mapping[str, Any]) -> bool:
        props = nic.get("properties") or {}
        return (
            not props.get("virtualMachine")
            and str(nic.get("name", "")).endswith("-nic")
            and (nic.get("tags") or {}).get(TAG_MANAGED) == "true"
        )

    def get(self, instance_id: str) -> Instance:
        name = instance_id.rstrip("/").rsplit("/", 1)[-1]
        vm = self._get_vm(name)
        nic = self._get_nic(name)
        if vm is not None:
            return self._instance(vm, nic)
        if nic is not None and self._orphan(nic):
            return self._evicted(nic)
        raise ProviderError(
            ErrorKind.NOT_FOUND,
            "ResourceNotFound",
            f"no VM {name} in resource group {self.resource_group}",
            provider="azure",
        )

    def _all(self) -> tuple[builtins.list[dict[str, Any]], builtins.list[dict[str, Any]]]:
        vms = self._call(
            "list VMs",
            lambda: [
                _as_dict(v)
                for v in self.compute.virtual_machines.list(
                    self.resource_group, expand="instanceView"
                )
            ],
        )
        nics = self._call(
            "list NICs",
            lambda: [
                _as_dict(n) for n in self.network.network_interfaces.list(self.resource_group)
            ],
        )
        return vms, nics

    def list(self, tags: Mapping[str, str] | None = None) -> builtins.list[Instance]:
        """VMs of the resource group carrying ``tags``, and evicted ones (orphaned NICs)."""
        wanted = wanted_tags(tags)
        vms, nics = self._all()
        by_name = {str(n.get("name", "")).lower(): n for n in nics}
        out = [
            self._instance(vm, by_name.get(f"{vm.get('name', '')}-nic".lower()))
            for vm in vms
            if has_tags(vm.get("tags") or {}, wanted)
        ]
        out += [
            self._evicted(n)
            for n in nics
            if self._orphan(n) and has_tags(n.get("tags") or {}, wanted)
        ]
        return out

    # -- terminate ----------------------------------------------------------------------------------

    def terminate(self, instance_ids: Iterable[str]) -> None:
        for name in dict.fromkeys(i.rstrip("/").rsplit("/", 1)[-1] for i in instance_ids):
            self._delete(name)

    def _delete(self, name: str) -> None:
        """Delete VM ``name`` (waiting for it), then its NIC; absent ones are skipped."""
        self._delete_one("delete VM", self.compute.virtual_machines.begin_delete, name)
        self._delete_one("delete NIC", self.network.network_interfaces.begin_delete, f"{name}-nic")

    def _delete_one(self, what: str, begin: Callable[[str, str], Any], name: str) -> None:
        try:
            self._call(what, lambda: begin(self.resource_group, name).result())
        except ProviderError as err:
            if err.kind is not ErrorKind.NOT_FOUND:
                raise

    # -- interruptions ------------------------------------------------------------------------------

    def interruptions(self, since: datetime) -> builtins.list[Interruption]:
        """Evictions seen in the resource group since ``since``.

        Deallocate: managed Spot VMs in ``PowerState/deallocated`` (time of that status).
        Delete: managed NICs whose VM is gone (time: ``systemData.lastModifiedAt`` where ARM
        gives it, else now, so a caller may see one again and should de-duplicate by id).
        """
        since = utc(since)
        vms, nics = self._all()
        out: list[Interruption] = []
        for vm in vms:
            if (vm.get("tags") or {}).get(TAG_MANAGED) != "true":
                continue
            inst = self._instance(vm, None)
            if inst.state is not InstanceState.PREEMPTED:
                continue
            statuses = ((vm.get("properties") or {}).get("instanceView") or {}).get(
                "statuses"
            ) or []
            when = next(
                (
                    _when(s.get("time"))
                    for s in statuses
                    if s.get("code") == "PowerState/deallocated"
                ),
                None,
            )
            at = when or now_utc()
            if at >= since:
                out.append(
                    Interruption(
                        inst.id, "azure", inst.zone, "preempted", at, raw="PowerState/deallocated"
                    )
                )
        for nic in nics:
            if not self._orphan(nic):
                continue
            at = _when((nic.get("systemData") or {}).get("lastModifiedAt")) or now_utc()
            if at >= since:
                inst = self._evicted(nic)
                out.append(
                    Interruption(inst.id, "azure", "", "preempted", at, raw="evicted (VM deleted)")
                )
        return out


# -- helpers ----------------------------------------------------------------------------------------


def _user_data(request: LaunchRequest) -> str:
    """customData before base64: the request's user data, else its job spec's bootstrap."""
    try:
        from providers._common import user_data_for
    except ImportError:  # pragma: no cover - an older tree
        return request.user_data
    return user_data_for(request, "azure")


def _as_dict(model: Any) -> dict[str, Any]:
    """An SDK model as its wire JSON (camelCase, ``properties`` nested), whatever its generation.

    Two generations of models are in the versions the extras allow: the msrest-style models
    (azure-mgmt-network < 26 and azure-mgmt-compute <= 33, ``_serialization.Model``), whose
    ``as_dict()`` gives flattened snake_case attributes (``ip_configurations``) and whose
    ``serialize(keep_readonly=True)`` gives the wire JSON; and the newer models
    (``model_base.Model``, a mapping over the wire JSON), whose ``as_dict()`` is the wire JSON.
    Everything here reads the wire shape, so each generation is asked for that.
    """
    if isinstance(model, dict):
        return model
    serialize = getattr(model, "serialize", None)
    if callable(serialize) and hasattr(type(model), "_attribute_map"):  # msrest generation
        data: dict[str, Any] = serialize(keep_readonly=True)
        return data
    as_dict = getattr(model, "as_dict", None)
    if callable(as_dict):
        try:
            wire: dict[str, Any] = as_dict()
            return wire
        except TypeError:
            pass
    return dict(model)


def _when(text: Any) -> datetime | None:
    if not text:
        return None
    if isinstance(text, datetime):
        return utc(text)
    value = str(text).replace("Z", "+00:00")
    if "." in value:  # Python wants at most 6 fraction digits; ARM sends 7
        head, _, rest = value.partition(".")
        digits = "".join(c for c in rest if c.isdigit())
        value = f"{head}.{digits[:6]}{rest[len(digits) :]}"
    try:
        return utc(datetime.fromisoformat(value))
    except ValueError:
        return None


def _zone_number(zone: str) -> str:
    """An Azure zone (``1``/``2``/``3``) from ``eastus-1``, ``1`` or ``""``."""
    tail = zone.rsplit("-", 1)[-1] if zone else ""
    return tail if tail.isdigit() else ""


def _image_reference(image: str) -> dict[str, str]:
    if image.startswith("/"):
        return {"id": image}
    parts = image.split(":")
    if len(parts) != 4:
        raise ProviderError(
            ErrorKind.INVALID,
            "InvalidImage",
            f"image {redact(image)!r} is not publisher:offer:sku:version or a resource id",
            provider="azure",
        )
    return dict(zip(("publisher", "offer", "sku", "version"), parts, strict=True))


def _private_ip(nic: Mapping[str, Any] | None) -> str | None:
    if not nic:
        return None
    for config in (nic.get("properties") or {}).get("ipConfigurations") or []:
        ip = (config.get("properties") or {}).get("privateIPAddress")
        if ip:
            return str(ip)
    return None
