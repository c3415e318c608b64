"""A small Azure Resource Manager (Compute + Network) and Retail Prices API on 127.0.0.1.

It speaks the wire format ``azure-mgmt-compute`` and ``azure-mgmt-network`` expect:

- ``PUT/GET/DELETE /subscriptions/S/resourceGroups/G/providers/Microsoft.Network/
  networkInterfaces/N`` and the list; a NIC attached to a VM cannot be deleted (``NicInUse``).
- ``PUT/GET/DELETE .../Microsoft.Compute/virtualMachines/N`` (``$expand=instanceView``), the
  list, ``/instanceView`` and ``POST .../simulateEviction`` (204, then the eviction happens).
- Long-running operations as ARM does them: the PUT answers 201 (or 200) with the resource in
  ``provisioningState: Creating`` and an ``Azure-AsyncOperation`` header; polling that URL
  answers ``InProgress`` (``polls`` times), then ``Succeeded`` or ``Failed`` with
  ``{"error": {"code", "message"}}``; a DELETE answers 202 the same way.
- ``PUT/GET/DELETE .../Microsoft.Compute/proximityPlacementGroups/N`` and the list by resource
  group (the REST reference's ProximityPlacementGroups operations: synchronous, PUT answers 201
  or 200, DELETE 200). A VM's ``properties.proximityPlacementGroup.id`` must name an existing
  group; the group's read-only ``properties.virtualMachines`` lists the VMs that reference it,
  and a DELETE while that list is not empty is refused (409 ``OperationNotAllowed``); a DELETE
  of an absent group answers 204, as ARM's resource-provider contract has it.
- A VM's ``identity`` (the REST reference's ``VirtualMachineIdentity``): ``type`` one of
  ``SystemAssigned``, ``UserAssigned``, ``SystemAssigned, UserAssigned`` or ``None``; a type with
  ``UserAssigned`` needs ``userAssignedIdentities``, keyed by identities' ARM ids
  (``/subscriptions/S/resourceGroups/G/providers/Microsoft.ManagedIdentity/
  userAssignedIdentities/N``), each value an empty object; answered with the read-only
  ``principalId``/``tenantId`` (and ``principalId``/``clientId`` per user-assigned identity).
  https://learn.microsoft.com/en-us/rest/api/compute/virtual-machines/create-or-update
- ``GET /api/retail/prices?$filter=...`` (unauthenticated) with an OData subset (``eq``,
  ``and``, ``or``, ``contains``, parentheses), paged by ``NextPageLink``.

Errors are ARM's envelope ``{"error": {"code", "message"}}`` with the status ARM uses. Some
codes are synchronous (``SkuNotAvailable`` 409, ``OperationNotAllowed`` 409 for quota,
``SpotPriceGreaterThanProvidedMaxPrice`` 409, ``AuthorizationFailed`` 403, ``TooManyRequests``
429 ...); allocation failures (``AllocationFailed``, ``ZonalAllocationFailed``,
``OverconstrainedAllocationRequest``) arrive as a *failed operation* after an accepted PUT,
leaving the VM in ``provisioningState: Failed``, as on Azure.

Capacity reservation groups and their reservations, and a VM's ``capacityReservation``: see
:mod:`fakes.azure_reservations`.

``preempt(name)`` evicts a Spot VM as Azure does: with ``evictionPolicy: Delete`` the VM is
deleted (its NIC survives unless the VM said ``deleteOption: Delete`` for it, and is detached);
with ``Deallocate`` it stays, ``PowerState/deallocated``.

Requests need ``Authorization: Bearer <token>`` (401 ``InvalidAuthenticationToken``
otherwise); every request is recorded with its headers minus ``Authorization``.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from tests.fakes import LocalHTTPServer
from tests.fakes.azure_reservations import CapacityReservations

COMPUTE_API = "2026-04-01"

#: code -> (HTTP status, "sync" or "async"); async: the PUT is accepted, the operation fails
ERRORS: dict[str, tuple[int, str]] = {
    "SkuNotAvailable": (409, "sync"),
    "AllocationFailed": (200, "async"),
    "ZonalAllocationFailed": (200, "async"),
    "OverconstrainedAllocationRequest": (200, "async"),
    "SpotPriceGreaterThanProvidedMaxPrice": (409, "sync"),
    "MaxPriceValueInvalid": (400, "sync"),
    "OperationNotAllowed": (409, "sync"),
    "AuthorizationFailed": (403, "sync"),
    "InvalidAuthenticationToken": (401, "sync"),
    "AuthenticationFailed": (401, "sync"),
    "ResourceNotFound": (404, "sync"),
    "NotFound": (404, "sync"),
    "TooManyRequests": (429, "sync"),
    "InternalServerError": (500, "sync"),
    "ServiceUnavailable": (503, "sync"),
    "InvalidParameter": (400, "sync"),
}
MESSAGES: dict[str, str] = {
    "SkuNotAvailable": "The requested VM size for resource 'Following SKUs have failed for Capacity "
    "Restrictions: {size}' is currently not available in location '{location}'. Please try "
    "another size or deploy to a different location or different zone.",
    "AllocationFailed": "Allocation failed. We do not have sufficient capacity for the requested VM "
    "size in this region.",
    "ZonalAllocationFailed": "Allocation failed. We do not have sufficient capacity for the requested "
    "VM size in this zone.",
    "SpotPriceGreaterThanProvidedMaxPrice": "Unable to perform operation 'Create VM' since the "
    "provided max price '{max_price} USD' is lower than the current spot price '0.30000 USD' for "
    "Azure Spot VM size '{size}' in location '{location}'.",
    "OperationNotAllowed": "Operation could not be completed as it results in exceeding approved "
    "LowPriorityCores quota. Location: {location}, Current Limit: 0, Current Usage: 0, "
    "Additional Required: 4.",
    "AuthorizationFailed": "The client does not have authorization to perform action "
    "'Microsoft.Compute/virtualMachines/write' over scope '{scope}'.",
    "InvalidAuthenticationToken": "The access token is invalid.",
    "TooManyRequests": "The request is being throttled as the limit has been reached for "
    "operation type - Write_30Min.",
    "InternalServerError": "An internal execution error occurred. Please retry later.",
}

GPU_SIZES = {
    # size: (meter name, product)
    "Standard_NC4as_T4_v3": ("NC4as T4 v3", "Virtual Machines NCasT4_v3 Series"),
    "Standard_NC8as_T4_v3": ("NC8as T4 v3", "Virtual Machines NCasT4_v3 Series"),
    "Standard_NC24ads_A100_v4": ("NC24ads A100 v4", "Virtual Machines NCadsA100v4 Series"),
    "Standard_NV36ads_A10_v5": ("NV36ads A10 v5", "Virtual Machines NVadsA10v5 Series"),
    "Standard_D4s_v5": ("D4s v5", "Virtual Machines Dsv5 Series"),
}
#: (size, region) -> (on-demand, spot, low priority) USD/h, Linux (spot from the 2024 catalog)
RETAIL: dict[tuple[str, str], tuple[float, float, float]] = {
    ("Standard_NC4as_T4_v3", "eastus"): (0.526, 0.062699, 0.1052),
    ("Standard_NC8as_T4_v3", "eastus"): (0.752, 0.087541, 0.1504),
    ("Standard_NC24ads_A100_v4", "eastus"): (3.673, 0.444433, 0.7346),
    ("Standard_NV36ads_A10_v5", "eastus"): (3.2, 0.64, 0.64),
    ("Standard_D4s_v5", "eastus"): (0.192, 0.0224, 0.0384),
    ("Standard_NC4as_T4_v3", "westus2"): (0.526, 0.061595, 0.1052),
    ("Standard_NC24ads_A100_v4", "westus2"): (3.673, 0.615962, 0.7346),
}
LOCATIONS = {"eastus": "US East", "westus2": "US West 2", "westeurope": "EU West"}


def retail_items() -> list[dict[str, Any]]:
    """Retail Prices API items: Linux, Windows, Spot, Low Priority and a 1- and a 3-year
    reservation per size (its ``retailPrice`` is the whole term's, as the API gives it)."""
    items: list[dict[str, Any]] = []
    for (size, region), (od, spot, low) in sorted(RETAIL.items()):
        meter, product = GPU_SIZES[size]

        def item(
            meter_name: str,
            product_name: str,
            price: float,
            kind: str = "Consumption",
            term: str = "1 Year",
            size: str = size,
            region: str = region,
        ) -> dict[str, Any]:
            out: dict[str, Any] = {
                "currencyCode": "USD",
                "tierMinimumUnits": 0.0,
                "retailPrice": price,
                "unitPrice": price,
                "armRegionName": region,
                "location": LOCATIONS[region],
                "effectiveStartDate": "2024-06-01T00:00:00Z",
                "meterId": str(
                    uuid.uuid5(
                        uuid.NAMESPACE_URL,
                        f"{size}/{region}/{meter_name}/{product_name}/{kind}"
                        + (f"/{term}" if kind == "Reservation" else ""),
                    )
                ),
                "meterName": meter_name,
                "productId": "DZH318Z0" + size[-4:].upper(),
                "skuId": "DZH318Z0" + size[-4:].upper() + "/00" + str(len(meter_name) % 10),
                "productName": product_name,
                "skuName": meter_name,
                "serviceName": "Virtual Machines",
                "serviceId": "DZH313Z7MMC8",
                "serviceFamily": "Compute",
                "unitOfMeasure": "1 Hour",
                "type": kind,
                "isPrimaryMeterRegion": True,
                "armSkuName": size,
            }
            if kind == "Reservation":  # the price of the whole term, though "1 Hour"
                out["reservationTerm"] = term
                out["unitOfMeasure"] = "1 Hour"
            return out

        items += [
            item(meter, product, od),
            item(f"{meter} Spot", product, spot),
            item(f"{meter} Low Priority", product, low),
            item(meter, f"{product} Windows", round(od * 1.35, 4)),
            item(f"{meter} Spot", f"{product} Windows", round(spot * 1.8, 6)),
            item(meter, product, round(od * 0.62 * 8760, 2), kind="Reservation"),
            item(meter, product, round(od * 0.4 * 26280, 2), kind="Reservation", term="3 Years"),
        ]
    return items


# -- a small OData $filter evaluator ---------------------------------------------------------

_TOKENS = re.compile(r"\s*(?:(\()|(\))|(,)|'((?:[^']|'')*)'|([A-Za-z_][\w.]*))")
FIELD_ALIASES = {"priceType": "type"}


def _tokenize(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKENS.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"Invalid OData filter near {text[pos : pos + 20]!r}")
        pos = m.end()
        if m.group(1):
            out.append(("(", "("))
        elif m.group(2):
            out.append((")", ")"))
        elif m.group(3):
            out.append((",", ","))
        elif m.group(4) is not None:
            out.append(("str", m.group(4).replace("''", "'")))
        else:
            out.append(("name", m.group(5)))
    return out


def odata_match(item: dict[str, Any], expr: str) -> bool:
    """Evaluate an OData ``$filter`` (eq, ne, and, or, contains, startswith, parens) on ``item``.

    Field names compare case-insensitively; values exactly (the Retail API is case sensitive)."""
    tokens = _tokenize(expr)
    pos = 0

    def peek() -> tuple[str, str] | None:
        return tokens[pos] if pos < len(tokens) else None

    def take(kind: str | None = None) -> tuple[str, str]:
        nonlocal pos
        tok = peek()
        if tok is None or (kind and tok[0] != kind):
            raise ValueError(f"Invalid OData filter: expected {kind} at token {pos}")
        pos += 1
        return tok

    def value(name: str) -> str:
        name = FIELD_ALIASES.get(name, name)
        for k, v in item.items():
            if k.lower() == name.lower():
                return str(v)
        return ""

    def primary() -> bool:
        tok = take()
        if tok[0] == "(":
            result = disjunction()
            take(")")
            return result
        if tok[0] != "name":
            raise ValueError("Invalid OData filter")
        if tok[1] in ("contains", "startswith") and peek() == ("(", "("):
            take("(")
            fname = take("name")[1]
            take(",")
            literal = take("str")[1]
            take(")")
            v = value(fname)
            return literal in v if tok[1] == "contains" else v.startswith(literal)
        op = take("name")[1].lower()
        literal = take("str")[1]
        if op == "eq":
            return value(tok[1]) == literal
        if op == "ne":
            return value(tok[1]) != literal
        raise ValueError(f"Invalid OData operator {op!r}")

    def conjunction() -> bool:
        result = primary()
        while peek() == ("name", "and"):
            take()
            result = primary() and result
        return result

    def disjunction() -> bool:
        result = conjunction()
        while peek() == ("name", "or"):
            take()
            result = conjunction() or result
        return result

    result = disjunction()
    if pos != len(tokens):
        raise ValueError("Invalid OData filter: trailing tokens")
    return result


# -- the server -----------------------------------------------------------------------------------


@dataclass
class Recorded:
    """One request as the server received it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class _Injected:
    code: str
    times: int
    status: int | None
    message: str | None


@dataclass
class _Op:
    id: str
    provider: str  # Microsoft.Compute | Microsoft.Network
    location: str
    polls_left: int
    on_success: Callable[[], None] | None = None
    on_failure: Callable[[], None] | None = None
    error: tuple[str, str] | None = None
    status: str = "InProgress"
    start: str = ""


@dataclass
class _State:
    vms: dict[str, dict[str, Any]] = field(default_factory=dict)
    nics: dict[str, dict[str, Any]] = field(default_factory=dict)
    ppgs: dict[str, dict[str, Any]] = field(default_factory=dict)
    ops: dict[str, _Op] = field(default_factory=dict)
    custom_data: dict[str, str] = field(default_factory=dict)
    #: capacity reservation groups by lower-case name: {"group": ..., "reservations": {...}}
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"


class AzureServer(CapacityReservations, LocalHTTPServer):
    """The fake, on 127.0.0.1 on a free port; a context manager (or call close())."""

    def __init__(
        self,
        subscription_id: str = "00000000-0000-0000-0000-0000000000a1",
        resource_group: str = "rg-provisioner-test",
        *,
        token: str = "fake-azure-access-token",
        polls: int = 1,
        price_page_size: int = 7,
    ) -> None:
        self.subscription_id = subscription_id
        self.resource_group = resource_group
        self.token = token
        #: how many polls of an operation answer InProgress before it ends
        self.polls = polls
        self.price_page_size = price_page_size
        #: the most items an ARM list page holds before ``nextLink`` (ARM decides; 1000 here)
        self.list_page_size = 1000
        self.requests: list[Recorded] = []
        self.prices: list[dict[str, Any]] = retail_items()
        #: location -> the ``value`` of Usage - List (Microsoft.Compute usages: ``unit``,
        #: ``currentValue``, ``limit``, ``name.value``, ``name.localizedValue``;
        #: https://learn.microsoft.com/rest/api/compute/usage/list)
        self.usages: dict[str, list[dict[str, Any]]] = {}
        #: Resource Graph's SpotResources rows (tests/fakes/azure_graph.py spot_row), answered
        #: ``graph_page_size`` at a time
        self.spot_resources: list[dict[str, Any]] = []
        self.graph_page_size = 2
        #: what simulateEviction does: None evicts at once; a callable (the VM's name) plays
        #: Azure's order instead: the ``Preempt`` scheduled event first, the eviction after
        self.on_simulate_eviction: Callable[[str], Any] | None = None
        self._state = _State()
        self._inject: dict[str, list[_Injected]] = {}
        self._lock = threading.RLock()
        self.start()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return type("Handler", (_Handler,), {"fake": self})

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def subnet_id(self) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}/providers/"
            "Microsoft.Network/virtualNetworks/vnet-test/subnets/default"
        )

    def reset(self) -> None:
        with self._lock:
            self._state = _State()
            self._inject.clear()
            self.requests.clear()

    # -- test controls --------------------------------------------------------------------------

    def inject_error(
        self,
        code: str,
        *,
        operation: str = "vm.put",
        times: int = 1,
        status: int | None = None,
        message: str | None = None,
    ) -> None:
        """Make the next ``times`` calls of ``operation`` fail with ARM error ``code``.

        ``operation``: vm.put, vm.get, vm.list, vm.delete, nic.put, nic.get, nic.list,
        nic.delete, ppg.put, ppg.get, ppg.list, ppg.delete, poll, prices (``launch`` = vm.put, ``terminate`` = vm.delete). Codes marked
        ``async`` in :data:`ERRORS` fail the PUT's operation instead of the PUT.
        """
        operation = {
            "launch": "vm.put",
            "terminate": "vm.delete",
            "describe": "vm.get",
            "get": "vm.get",
            "list": "vm.list",
        }.get(operation, operation)
        with self._lock:
            self._inject.setdefault(operation, []).append(_Injected(code, times, status, message))

    def preempt(self, name: str) -> None:
        """Evict Spot VM ``name`` now, per its evictionPolicy (as simulateEviction ends)."""
        with self._lock:
            vm = self._state.vms[name.lower()]
            policy = vm["properties"].get("evictionPolicy", "Deallocate")
            if policy == "Delete":
                self._remove_vm(name)
            else:
                vm["_power"] = ("PowerState/deallocated", "VM deallocated", _now())

    def vm(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            vm = self._state.vms.get(name.lower())
            return self._public_vm(vm, True) if vm else None

    def nic(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._state.nics.get(name.lower())

    def ppg(self, name: str) -> dict[str, Any] | None:
        """Proximity placement group ``name`` as a GET returns it (None: there is none)."""
        with self._lock:
            found = self._state.ppgs.get(name.lower())
            return self._public_ppg(found) if found else None

    def custom_data(self, name: str) -> str | None:
        """The customData a VM was created with (Azure never returns it on GET)."""
        return self._state.custom_data.get(name.lower())

    def launch_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.method == "PUT" and "/virtualMachines/" in r.path]

    # -- internals ---------------------------------------------------------------------------------

    def _take_injected(self, operation: str) -> _Injected | None:
        queue = self._inject.get(operation) or []
        if not queue:
            return None
        item = queue[0]
        item.times -= 1
        if item.times <= 0:
            queue.pop(0)
        return item

    def _rg_prefix(self) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}/providers"
        )

    def _vm_id(self, name: str) -> str:
        return f"{self._rg_prefix()}/Microsoft.Compute/virtualMachines/{name}"

    def _nic_id(self, name: str) -> str:
        return f"{self._rg_prefix()}/Microsoft.Network/networkInterfaces/{name}"

    def _ppg_id(self, name: str) -> str:
        return f"{self._rg_prefix()}/Microsoft.Compute/proximityPlacementGroups/{name}"

    def _new_op(self, provider: str, location: str, **kw: Any) -> tuple[_Op, dict[str, str]]:
        op = _Op(
            id=str(uuid.uuid4()),
            provider=provider,
            location=location,
            polls_left=self.polls,
            start=_now(),
            **kw,
        )
        self._state.ops[op.id] = op
        url = (
            f"{self.endpoint}/subscriptions/{self.subscription_id}/providers/{provider}/locations/"
            f"{location}/operations/{op.id}?api-version={COMPUTE_API}"
        )
        return op, {"Azure-AsyncOperation": url, "Retry-After": "0"}

    def _error(
        self, code: str, status: int | None = None, message: str | None = None, **fmt: str
    ) -> tuple[int, Any, dict[str, str]]:
        st = status or ERRORS.get(code, (400, "sync"))[0]
        if st == 200:
            st = 409
        text = message or MESSAGES.get(code, f"{code}").format_map(_Default(fmt))
        headers = {"x-ms-failure-cause": "gateway"} if st in (401, 403) else {}
        if st == 429:
            headers["Retry-After"] = "0"
        return st, {"error": {"code": code, "message": text}}, headers

    def _injected(self, operation: str, **fmt: str) -> tuple[int, Any, dict[str, str]] | str | None:
        item = self._take_injected(operation)
        if item is None:
            return None
        status, mode = ERRORS.get(item.code, (item.status or 400, "sync"))
        if mode == "async" and operation == "vm.put":
            return item.code
        return self._error(item.code, item.status or status, item.message, **fmt)

    def _remove_vm(self, name: str) -> None:
        vm = self._state.vms.pop(name.lower(), None)
        if vm is None:
            return
        self._release(self._vm_id(name))
        self._state.custom_data.pop(name.lower(), None)
        for ref in vm["properties"].get("networkProfile", {}).get("networkInterfaces", []):
            nic_name = ref.get("id", "").rsplit("/", 1)[-1].lower()
            nic = self._state.nics.get(nic_name)
            if nic is None:
                continue
            if (ref.get("properties") or {}).get("deleteOption") == "Delete":
                del self._state.nics[nic_name]
            else:
                nic["properties"].pop("virtualMachine", None)
                nic["systemData"]["lastModifiedAt"] = _now()
                nic["etag"] = f'W/"{uuid.uuid4()}"'

    def _public_vm(self, vm: dict[str, Any], expand: bool) -> dict[str, Any]:
        out = {k: json.loads(json.dumps(v)) for k, v in vm.items() if not k.startswith("_")}
        out["properties"].get("osProfile", {}).pop("customData", None)
        out["properties"].get("osProfile", {}).pop("adminPassword", None)
        if expand:
            out["properties"]["instanceView"] = self._instance_view(vm)
        return out

    @staticmethod
    def _instance_view(vm: dict[str, Any]) -> dict[str, Any]:
        state = vm["properties"]["provisioningState"]
        statuses: list[dict[str, Any]] = [
            {
                "code": f"ProvisioningState/{state.lower()}",
                "level": "Error" if state == "Failed" else "Info",
                "displayStatus": f"Provisioning {state.lower()}",
                "time": vm.get("_changed", vm["properties"].get("timeCreated")),
            }
        ]
        if state == "Failed" and vm.get("_failure"):
            code, message = vm["_failure"]
            statuses[0]["code"] = f"ProvisioningState/failed/{code}"
            statuses[0]["message"] = message
        if vm.get("_power"):
            code, display, when = vm["_power"]
            statuses.append({"code": code, "level": "Info", "displayStatus": display, "time": when})
        return {
            "computerName": vm["properties"].get("osProfile", {}).get("computerName", ""),
            "osName": "ubuntu",
            "statuses": statuses,
        }

    # -- request handling --------------------------------------------------------------------------

    def handle(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        headers: dict[str, str],
        body: Any,
        auth: str | None,
    ) -> tuple[int, Any, dict[str, str]]:
        with self._lock:
            if path == "/api/retail/prices":
                return self._prices(query)
            if auth is None:
                return self._error(
                    "AuthenticationFailed",
                    401,
                    "Authentication failed. The 'Authorization' header is missing.",
                )
            if auth != f"Bearer {self.token}":
                return self._error("InvalidAuthenticationToken", 401)
            for pattern, verb, fn in self._routes():
                if verb != method:
                    continue
                m = re.fullmatch(pattern, path, flags=re.IGNORECASE)
                if m:
                    return fn(query, body, **m.groupdict())
            return self._error(
                "InvalidResourceType", 404, f"The resource type could not be found for {path}."
            )

    def _routes(self) -> Iterator[tuple[str, str, Callable[..., tuple[int, Any, dict[str, str]]]]]:
        rg = r"/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers"
        yield rg + r"/Microsoft\.Network/networkInterfaces/(?P<name>[^/]+)", "PUT", self._nic_put
        yield rg + r"/Microsoft\.Network/networkInterfaces/(?P<name>[^/]+)", "GET", self._nic_get
        yield (
            rg + r"/Microsoft\.Network/networkInterfaces/(?P<name>[^/]+)",
            "DELETE",
            self._nic_delete,
        )
        yield rg + r"/Microsoft\.Network/networkInterfaces", "GET", self._nic_list
        yield rg + r"/Microsoft\.Compute/virtualMachines/(?P<name>[^/]+)", "PUT", self._vm_put
        yield rg + r"/Microsoft\.Compute/virtualMachines/(?P<name>[^/]+)", "GET", self._vm_get
        yield rg + r"/Microsoft\.Compute/virtualMachines/(?P<name>[^/]+)", "DELETE", self._vm_delete
        yield (
            rg + r"/Microsoft\.Compute/virtualMachines/(?P<name>[^/]+)/instanceView",
            "GET",
            self._vm_view,
        )
        yield (
            rg + r"/Microsoft\.Compute/virtualMachines/(?P<name>[^/]+)/simulateEviction",
            "POST",
            self._vm_evict,
        )
        yield rg + r"/Microsoft\.Compute/virtualMachines", "GET", self._vm_list
        ppg = rg + r"/Microsoft\.Compute/proximityPlacementGroups"
        yield ppg + r"/(?P<name>[^/]+)", "PUT", self._ppg_put
        yield ppg + r"/(?P<name>[^/]+)", "GET", self._ppg_get
        yield ppg + r"/(?P<name>[^/]+)", "DELETE", self._ppg_delete
        yield ppg, "GET", self._ppg_list
        yield r"/providers/Microsoft\.ResourceGraph/resources", "POST", self._graph
        yield from self._reservation_routes()
        yield (
            r"/subscriptions/(?P<sub>[^/]+)/providers/Microsoft\.Compute/locations/"
            r"(?P<location>[^/]+)/usages",
            "GET",
            self._usages,
        )
        yield (
            (
                r"/subscriptions/(?P<sub>[^/]+)/providers/(?P<provider>Microsoft\.(?:Compute|Network))/"
                r"locations/(?P<location>[^/]+)/operations/(?P<op>[^/]+)"
            ),
            "GET",
            self._op_get,
        )

    def _graph(self, _query: Any, body: Any) -> tuple[int, Any, dict[str, str]]:
        """Resource Graph ``resources``: the SpotResources eviction rates (azure_graph.py)."""
        from tests.fakes.azure_graph import answer

        return answer(self.spot_resources, self.subscription_id, body, self.graph_page_size)

    def _usages(
        self, _query: Any, _body: Any, sub: str, location: str
    ) -> tuple[int, Any, dict[str, str]]:
        """Usage - List: the subscription's compute usages and limits in a location."""
        if sub != self.subscription_id:
            return self._error(
                "SubscriptionNotFound", 404, f"The subscription '{sub}' could not be found."
            )
        value = self.usages.get(
            location,
            [
                {
                    "unit": "Count",
                    "currentValue": 0,
                    "limit": 10,
                    "name": {"value": "cores", "localizedValue": "Total Regional vCPUs"},
                }
            ],
        )
        return 200, {"value": value}, {}

    def _scope_ok(
        self, sub: str, rg: str, kind: str, name: str
    ) -> tuple[int, Any, dict[str, str]] | None:
        if sub != self.subscription_id:
            return self._error(
                "SubscriptionNotFound", 404, f"The subscription '{sub}' could not be found."
            )
        if rg.lower() != self.resource_group.lower():
            return self._error(
                "ResourceGroupNotFound", 404, f"Resource group '{rg}' could not be found."
            )
        return None

    # NICs

    def _nic_put(
        self, query: dict[str, str], body: Any, sub: str, rg: str, name: str
    ) -> tuple[int, Any, dict[str, str]]:
        bad = self._scope_ok(sub, rg, "nic", name) or self._injected("nic.put")
        if isinstance(bad, tuple):
            return bad
        if not isinstance(body, dict) or not body.get("location"):
            return self._error(
                "LocationRequired", 400, "The location property is required for this definition."
            )
        configs = (body.get("properties") or {}).get("ipConfigurations") or []
        if not configs or not ((configs[0].get("properties") or {}).get("subnet") or {}).get("id"):
            return self._error(
                "InvalidRequestFormat",
                400,
                "Cannot parse the request: a NIC needs an IP configuration with a subnet.",
            )
        existing = self._state.nics.get(name.lower())
        nic_id = self._nic_id(name)
        ip = f"10.0.0.{4 + len(self._state.nics) % 250}"
        nic = {
            "name": name,
            "id": nic_id,
            "etag": f'W/"{uuid.uuid4()}"',
            "type": "Microsoft.Network/networkInterfaces",
            "location": body["location"],
            "tags": body.get("tags") or {},
            "properties": {
                "provisioningState": "Succeeded",
                "resourceGuid": str(uuid.uuid4()),
                "ipConfigurations": [
                    {
                        "name": c.get("name", "ipconfig1"),
                        "id": f"{nic_id}/ipConfigurations/{c.get('name', 'ipconfig1')}",
                        "etag": f'W/"{uuid.uuid4()}"',
                        "type": "Microsoft.Network/networkInterfaces/ipConfigurations",
                        "properties": {
                            "provisioningState": "Succeeded",
                            "privateIPAddress": ip,
                            "privateIPAllocationMethod": "Dynamic",
                            "subnet": (c.get("properties") or {}).get("subnet"),
                            "primary": True,
                            "privateIPAddressVersion": "IPv4",
                        },
                    }
                    for c in configs
                ],
                "enableAcceleratedNetworking": bool(
                    (body.get("properties") or {}).get("enableAcceleratedNetworking")
                ),
                "primary": True,
            },
            "systemData": {"createdAt": _now(), "lastModifiedAt": _now()},
        }
        if existing and existing["properties"].get("virtualMachine"):
            nic["properties"]["virtualMachine"] = existing["properties"]["virtualMachine"]
        self._state.nics[name.lower()] = nic
        _, headers = self._new_op("Microsoft.Network", body["location"])
        return (200 if existing else 201), nic, headers

    def _nic_get(
        self, query: dict[str, str], body: Any, sub: str, rg: str, name: str
    ) -> tuple[int, Any, dict[str, str]]:
        bad = self._scope_ok(sub, rg, "nic", name) or self._injected("nic.get")
        if isinstance(bad, tuple):
            return bad
        nic = self._state.nics.get(name.lower())
        if nic is None:
            return self._error("NotFound", 404, f"Resource {self._nic_id(name)} not found.")
        return 200, nic, {}

    def _nic_list(
        self, query: dict[str, str], body: Any, sub: str, rg: str
    ) -> tuple[int, Any, dict[str, str]]:
        bad = self._scope_ok(sub, rg, "nic", "") or self._injected("nic.list")
        if isinstance(bad, tuple):
            return bad
        path = f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/networkInterfaces"
        return 200, self._arm_page(list(self._state.nics.values()), query, path), {}

    def _arm_page(self, rows: list[Any], query: dict[str, str], path: str) -> dict[str, Any]:
        """One ARM list page (``value``) and, when more follow, its ``nextLink`` (an absolute
        URL carrying ``$skiptoken``, as ARM sends it)."""
        start = int(query.get("$skiptoken") or 0)
        nxt = start + self.list_page_size
        out: dict[str, Any] = {"value": rows[start:nxt]}
        if nxt < len(rows):
            keep = {k: v for k, v in query.items() if k != "$skiptoken"}
            keep["$skiptoken"] = str(nxt)
            out["nextLink"] = f"{self.endpoint}{path}?{urlencode(keep)}"
        return out

    def _nic_delete(
        self, query: dict[str, str], body: Any, sub: str, rg: str, name: str
    ) -> tuple[int, Any, dict[str, str]]:
        bad = self._scope_ok(sub, rg, "nic", name) or self._injected("nic.delete")
        if isinstance(bad, tuple):
            return bad
        nic = self._state.nics.get(name.lower())
        if nic is None:
            return 204, None, {}
        vm_ref = nic["properties"].get("virtualMachine")
        if vm_ref:
            return self._error(
                "NicInUse",
                400,
                f"Network Interface {nic['id']} is used by existing resource "
                f"{vm_ref['id']}. In order to delete the network interface, it must be dissociated from the resource.",
            )
        del self._state.nics[name.lower()]
        _, headers = self._new_op("Microsoft.Network", nic["location"])
        headers["Location"] = headers["Azure-AsyncOperation"]
        return 202, None, headers

    # VMs

    def _vm_put(
        self, query: dict[str, str], body: Any, sub: str, rg: str, name: str
    ) -> tuple[int, Any, dict[str, str]]:
        bad = self._scope_ok(sub, rg, "vm", name)
        if bad:
            return bad
        if not isinstance(body, dict) or not body.get("location"):
            return self._error(
                "LocationRequired", 400, "The location property is required for this definition."
            )
        props = body.get("properties") or {}
        size = (props.get("hardwareProfile") or {}).get("vmSize", "")
        fmt = {
            "size": size,
            "location": body["location"],
            "scope": self._vm_id(name),
            "max_price": str((props.get("billingProfile") or {}).get("maxPrice", -1)),
        }
        injected = self._injected("vm.put", **fmt)
        if isinstance(injected, tuple):
            return injected
        if props.get("priority") == "Spot":
            price = (props.get("billingProfile") or {}).get("maxPrice", -1)
            if not isinstance(price, int | float) or (
                price != -1 and (price <= 0 or round(price, 5) != price)
            ):
                return self._error(
                    "MaxPriceValueInvalid",
                    400,
                    f"The max price '{price}' is invalid: use -1 or a price above 0 with at most 5 decimal places.",
                )
            if props.get("evictionPolicy") not in ("Delete", "Deallocate"):
                return self._error(
                    "InvalidParameter",
                    400,
                    "evictionPolicy must be Delete or Deallocate for a Spot VM.",
                )
        refs = (props.get("networkProfile") or {}).get("networkInterfaces") or []
        if not refs:
            return self._error(
                "InvalidParameter", 400, "Required parameter 'networkProfile' is missing (null)."
            )
        for ref in refs:
            nic = self._state.nics.get(ref.get("id", "").rsplit("/", 1)[-1].lower())
            if nic is None:
                return self._error(
                    "InvalidResourceReference",
                    400,
                    f"Resource {ref.get('id')} referenced by resource {self._vm_id(name)} was not found.",
                )
            attached = nic["properties"].get("virtualMachine")
            if attached and attached["id"].lower() != self._vm_id(name).lower():
                return self._error(
                    "NicInUse", 400, f"Network interface {nic['id']} is in use by {attached['id']}."
                )
        group_ref = (props.get("proximityPlacementGroup") or {}).get("id")
        if group_ref is not None and self._ppg_of(str(group_ref)) is None:
            return self._error(
                "InvalidResourceReference",
                400,
                f"Resource {group_ref} referenced by resource {self._vm_id(name)} was not found. "
                "Please make sure that the referenced resource exists, and that both resources "
                "are in the same region.",
            )
        identity, bad = self._identity(body.get("identity"))
        if bad:
            return bad
        held, bad = self._vm_reservation(props, list(body.get("zones") or []), self._vm_id(name))
        if bad:
            return bad  # type: ignore[no-any-return]
        existing = self._state.vms.get(name.lower())
        custom = (props.get("osProfile") or {}).get("customData")
        if custom is not None:
            self._state.custom_data[name.lower()] = custom
        vm = json.loads(json.dumps(body))
        vm.update(
            {"name": name, "id": self._vm_id(name), "type": "Microsoft.Compute/virtualMachines"}
        )
        if identity is not None:
            vm["identity"] = identity
        vm["properties"]["vmId"] = existing["properties"]["vmId"] if existing else str(uuid.uuid4())
        vm["properties"]["timeCreated"] = (
            existing["properties"]["timeCreated"] if existing else _now()
        )
        vm["properties"]["provisioningState"] = (
            "Updating"
            if existing and existing["properties"]["provisioningState"] == "Succeeded"
            else "Creating"
        )
        vm["_changed"] = _now()
        if existing and existing.get("_power"):
            vm["_power"] = existing["_power"]
        self._state.vms[name.lower()] = vm
        for ref in refs:
            nic = self._state.nics[ref["id"].rsplit("/", 1)[-1].lower()]
            nic["properties"]["virtualMachine"] = {"id": self._vm_id(name)}

        def succeeded() -> None:
            vm["properties"]["provisioningState"] = "Succeeded"
            vm["_changed"] = _now()
            vm["_power"] = ("PowerState/running", "VM running", _now())
            if held is not None and not existing:
                self._associate(held, self._vm_id(name))

        def failed() -> None:
            vm["properties"]["provisioningState"] = "Failed"
            vm["_changed"] = _now()
            vm.pop("_power", None)

        error = None
        if isinstance(injected, str):
            error = (injected, MESSAGES.get(injected, injected).format_map(_Default(fmt)))
            vm["_failure"] = error
        _, headers = self._new_op(
            "Microsoft.Compute",
            body["location"],
            on_success=succeeded,
            on_failure=failed,
            error=error,
        )
        return (200 if existing else 201), self._public_vm(vm, False), headers

    def _identity(
        self, sent: Any
    ) -> tuple[dict[str, Any] | None, tuple[int, Any, dict[str, str]] | None]:
        """A VM's ``identity`` as stored (with its read-only ids), or the error ARM answers."""
        if sent is None:
            return None, None
        kinds = ("SystemAssigned", "UserAssigned", "SystemAssigned, UserAssigned", "None")
        kind = sent.get("type") if isinstance(sent, dict) else None
        if kind not in kinds:
            return None, self._error(
                "InvalidParameter", 400, f"The value '{kind}' of identity.type is not valid."
            )
        users = sent.get("userAssignedIdentities") or {}
        # the messages ARM answers, as users have reported them (Azure/AzOps#538,
        # microsoft/CromwellOnAzure#765, Azure/azure-rest-api-specs#17650)
        if "UserAssigned" in kind and not users:
            return None, self._error(
                "InvalidParameter",
                400,
                f"The identity ids must not be null or empty for '{kind}' identity type.",
            )
        if "UserAssigned" not in kind and users:
            return None, self._error(
                "BadRequest",
                400,
                "The request format was unexpected, a non-UserAssigned identity type should "
                "not contain: userAssignedIdentities",
            )
        pattern = (
            r"/subscriptions/[^/]+/resourceGroups/[^/]+/providers/"
            r"Microsoft\.ManagedIdentity/userAssignedIdentities/[^/]+"
        )
        for key, value in users.items():
            if not re.fullmatch(pattern, key, re.IGNORECASE) or value not in ({}, None):
                return None, self._error(
                    "InvalidIdentityValues",
                    400,
                    "The 'UserAssignedIdentities' property keys should only be empty json "
                    "objects, null or the resource exisiting property.",
                )
        stored: dict[str, Any] = {"type": kind}
        if "SystemAssigned" in kind:
            stored.update(principalId=str(uuid.uuid4()), tenantId=str(uuid.uuid4()))
        if users:
            stored["userAssignedIdentities"] = {
                key: {"principalId": str(uuid.uuid4()), "clientId": str(uuid.uuid4())}
                for key in users
            }
        return stored, None

    def _vm_get(
        self, query: dict[str, str], body: Any, sub: str, rg: str, name: str
    ) -> tuple[int, Any, dict[str, str]]:
        bad = self._scope_ok(sub, rg, "vm", name) or self._injected("vm.get")
        if isinstance(bad, tuple):
            return bad
        vm = self._state.vms.get(name.lower())
        if vm is None:
            return self._error(
                "ResourceNotFound",
                404,
                f"The Resource 'Microsoft.Compute/virtualMachines/{name}' under resource group "
                f"'{rg}' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix",
            )
        expand = query.get("$expand", "").lower() == "instanceview"
        return 200, self._public_vm(vm, expand), {}

    def _vm_view(
        self, query: dict[str, str], body: Any, sub: str, rg: str, name: str
    ) -> tuple[int, Any, dict[str, str]]:
        status, payload, headers = self._vm_get(query, body, sub, rg, name)
        if status != 200:
            return status, payload, headers
        return 200, self._instance_view(self._state.vms[name.lower()]), {}

    def _vm_list(
        self, query: dict[str, str], body: Any, sub: str, rg: str
    ) -> tuple[int, Any, dict[str, str]]:
        bad = self._scope_ok(sub, rg, "vm", "") or self._injected("vm.list")
        if isinstance(bad, tuple):
            return bad
        expand = query.get("$expand", "").lower() == "instanceview"
        rows = [self._public_vm(vm, expand) for vm in self._state.vms.values()]
        path = (
            f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines"
        )
        return 200, self._arm_page(rows, query, path), {}

    def _vm_delete(
        self, query: dict[str, str], body: Any, sub: str, rg: str, name: str
    ) -> tuple[int, Any, dict[str, str]]:
        bad = self._scope_ok(sub, rg, "vm", name) or self._injected("vm.delete")
        if isinstance(bad, tuple):
            return bad
        vm = self._state.vms.get(name.lower())
        if vm is None:
            return 204, None, {}
        vm["properties"]["provisioningState"] = "Deleting"
        _, headers = self._new_op(
            "Microsoft.Compute", vm["location"], on_success=lambda: self._remove_vm(name)
        )
        headers["Location"] = headers["Azure-AsyncOperation"].replace(
            "/operations/", "/operationResults/"
        )
        return 202, None, headers

    def _vm_evict(
        self, query: dict[str, str], body: Any, sub: str, rg: str, name: str
    ) -> tuple[int, Any, dict[str, str]]:
        bad = self._scope_ok(sub, rg, "vm", name) or self._injected("vm.evict")
        if isinstance(bad, tuple):
            return bad
        vm = self._state.vms.get(name.lower())
        if vm is None:
            return self._error(
                "ResourceNotFound",
                404,
                f"The Resource 'Microsoft.Compute/virtualMachines/{name}' was not found.",
            )
        if vm["properties"].get("priority") != "Spot":
            return self._error(
                "OperationNotAllowed",
                409,
                "Simulate eviction is only supported for Azure Spot VMs.",
            )
        if self.on_simulate_eviction is not None:
            self.on_simulate_eviction(name.lower())
        else:
            self.preempt(name)
        return 204, None, {}

    def _op_get(
        self, query: dict[str, str], body: Any, sub: str, provider: str, location: str, op: str
    ) -> tuple[int, Any, dict[str, str]]:
        injected = self._injected("poll")
        if isinstance(injected, tuple):
            return injected
        found = self._state.ops.get(op)
        if found is None:
            return self._error("NotFound", 404, f"Operation {op} not found.")
        if found.status == "InProgress":
            if found.polls_left > 0:
                found.polls_left -= 1
            elif found.error is not None:
                found.status = "Failed"
                if found.on_failure:
                    found.on_failure()
            else:
                found.status = "Succeeded"
                if found.on_success:
                    found.on_success()
        payload: dict[str, Any] = {
            "name": found.id,
            "status": found.status,
            "startTime": found.start,
        }
        if found.status != "InProgress":
            payload["endTime"] = _now()
        if found.status == "Failed" and found.error:
            payload["error"] = {"code": found.error[0], "message": found.error[1]}
        return 200, payload, {"Retry-After": "0"} if found.status == "InProgress" else {}

    # proximity placement groups

    def _ppg_of(self, ref: str) -> dict[str, Any] | None:
        """The group a resource id names (this subscription and resource group only)."""
        head, _, name = ref.rstrip("/").rpartition("/")
        if head.lower() != self._ppg_id("").rstrip("/").lower():
            return None
        return self._state.ppgs.get(name.lower())

    def _ppg_users(self, ppg: dict[str, Any]) -> list[str]:
        """The ids of the VMs whose ``proximityPlacementGroup`` names ``ppg``."""
        return [
            vm["id"]
            for vm in self._state.vms.values()
            if str(
                ((vm["properties"].get("proximityPlacementGroup") or {}).get("id")) or ""
            ).lower()
            == ppg["id"].lower()
        ]

    def _public_ppg(self, ppg: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(json.dumps(ppg))
        props = out.setdefault("properties", {})
        props["virtualMachines"] = [{"id": i} for i in self._ppg_users(ppg)]
        props.setdefault("virtualMachineScaleSets", [])
        props.setdefault("availabilitySets", [])
        return out

    def _ppg_put(
        self, query: dict[str, str], body: Any, sub: str, rg: str, name: str
    ) -> tuple[int, Any, dict[str, str]]:
        bad = self._scope_ok(sub, rg, "ppg", name) or self._injected("ppg.put")
        if isinstance(bad, tuple):
            return bad
        if not isinstance(body, dict) or not body.get("location"):
            return self._error(
                "LocationRequired", 400, "The location property is required for this definition."
            )
        props = body.get("properties") or {}
        kind = props.get("proximityPlacementGroupType", "Standard")
        if kind not in ("Standard", "Ultra"):
            return self._error(
                "InvalidParameter",
                400,
                f"The value '{kind}' of parameter 'proximityPlacementGroupType' is not allowed.",
            )
        zones = body.get("zones") or []
        if (
            not isinstance(zones, list)
            or len(zones) > 1
            or any(z not in ("1", "2", "3") for z in zones)
        ):
            return self._error(
                "InvalidParameter",
                400,
                f"The zones {zones!r} are not valid for a proximity placement group.",
            )
        existing = self._state.ppgs.get(name.lower())
        if existing is not None and existing["location"].lower() != str(body["location"]).lower():
            return self._error(
                "InvalidResourceLocation",
                409,
                f"The resource '{name}' already exists in location '{existing['location']}' in "
                f"resource group '{rg}'. A resource with the same name cannot be created in "
                f"location '{body['location']}'. Please select a new resource name.",
            )
        ppg: dict[str, Any] = {
            "id": existing["id"] if existing else self._ppg_id(name),
            "name": existing["name"] if existing else name,
            "type": "Microsoft.Compute/proximityPlacementGroups",
            "location": body["location"],
            "tags": dict(body.get("tags") or {}),
            "properties": {"proximityPlacementGroupType": kind},
        }
        if zones:
            ppg["zones"] = list(zones)
        if props.get("intent"):
            ppg["properties"]["intent"] = props["intent"]
        self._state.ppgs[name.lower()] = ppg
        return (200 if existing else 201), self._public_ppg(ppg), {}

    def _ppg_get(
        self, query: dict[str, str], body: Any, sub: str, rg: str, name: str
    ) -> tuple[int, Any, dict[str, str]]:
        bad = self._scope_ok(sub, rg, "ppg", name) or self._injected("ppg.get")
        if isinstance(bad, tuple):
            return bad
        ppg = self._state.ppgs.get(name.lower())
        if ppg is None:
            return self._error(
                "ResourceNotFound",
                404,
                f"The Resource 'Microsoft.Compute/proximityPlacementGroups/{name}' under resource "
                f"group '{rg}' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix",
            )
        return 200, self._public_ppg(ppg), {}

    def _ppg_list(
        self, query: dict[str, str], body: Any, sub: str, rg: str
    ) -> tuple[int, Any, dict[str, str]]:
        bad = self._scope_ok(sub, rg, "ppg", "") or self._injected("ppg.list")
        if isinstance(bad, tuple):
            return bad
        rows = [self._public_ppg(p) for p in self._state.ppgs.values()]
        path = f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/proximityPlacementGroups"
        return 200, self._arm_page(rows, query, path), {}

    def _ppg_delete(
        self, query: dict[str, str], body: Any, sub: str, rg: str, name: str
    ) -> tuple[int, Any, dict[str, str]]:
        bad = self._scope_ok(sub, rg, "ppg", name) or self._injected("ppg.delete")
        if isinstance(bad, tuple):
            return bad
        ppg = self._state.ppgs.get(name.lower())
        if ppg is None:
            return 204, None, {}
        users = self._ppg_users(ppg)
        if users:
            return self._error(
                "OperationNotAllowed",
                409,
                f"Proximity placement group '{ppg['id']}' cannot be deleted: virtual machines "
                f"{', '.join(users)} still reference it. Remove them from the group first.",
            )
        del self._state.ppgs[name.lower()]
        return 200, None, {}

    # retail prices

    def _prices(self, query: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        injected = self._injected("prices")
        if isinstance(injected, tuple):
            return injected
        expr = query.get("$filter", "")
        try:
            items = [i for i in self.prices if not expr or odata_match(i, expr)]
        except ValueError as exc:
            return 400, {"Error": {"Code": "BadRequest", "Message": str(exc)}}, {}
        skip = int(query.get("$skip") or 0)
        page = items[skip : skip + self.price_page_size]
        nxt = skip + self.price_page_size
        link = None
        if nxt < len(items):
            link = f"{self.endpoint}/api/retail/prices?$filter={quote(expr)}&$skip={nxt}"
        return (
            200,
            {
                "BillingCurrency": "USD",
                "CustomerEntityId": "Default",
                "CustomerEntityType": "Retail",
                "Items": page,
                "NextPageLink": link,
                "Count": len(page),
            },
            {},
        )


class _Default(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


class _Handler(BaseHTTPRequestHandler):
    fake: AzureServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body leave at once (no 40 ms delayed ACK)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _serve(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k: v for k, v in self.headers.items() if k.lower() != "authorization"}
        with self.fake._lock:
            self.fake.requests.append(Recorded(self.command, parts.path, query, headers, body))
        status, payload, extra = self.fake.handle(
            self.command, parts.path, query, headers, body, self.headers.get("Authorization")
        )
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        if payload is not None:
            self.send_header("Content-Type", "application/json; charset=utf-8")
        for k, v in extra.items():
            self.send_header(k, v)
        self.send_header("x-ms-request-id", str(uuid.uuid4()))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve
