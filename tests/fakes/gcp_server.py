"""A small Compute Engine (and Cloud Billing Catalog) API on 127.0.0.1 for the real SDK.

It speaks the REST wire format ``google-cloud-compute`` (``transport="rest"``) expects:

- ``POST   /compute/v1/projects/P/zones/Z/instances?requestId=U`` answers a zone operation
  (``RUNNING``); the same ``requestId`` again answers the same operation, as GCP does.
- ``GET    .../zones/Z/instances/N``, ``GET .../zones/Z/instances?filter=``,
  ``GET /compute/v1/projects/P/aggregated/instances?filter=``, ``DELETE .../instances/N``.
- ``GET    .../zones/Z/operations/O``, ``POST .../operations/O/wait`` (finishes it),
  ``GET .../zones/Z/operations?filter=``, ``GET .../aggregated/operations?filter=``.
- ``GET    .../aggregated/machineTypes`` and ``.../aggregated/acceleratorTypes``.
- ``GET    /v1/services/6F81-5844-456A/skus`` (Cloud Billing Catalog, paged by
  ``nextPageToken``) with a few real-shaped GPU, core and RAM SKUs.
- Resource policies (``.../regions/R/resourcePolicies``: insert, get, delete, list,
  aggregatedList) and region operations, and an instance's ``resourcePolicies``: see
  :mod:`fakes.gcp_policies`.
- Reservations and future reservations (aggregatedList, list), an instance's
  ``reservationAffinity``, and the ``FLEX_START`` and ``RESERVATION_BOUND`` provisioning models
  at insert: see :mod:`fakes.gcp_reservations`.

Errors use GCP's envelope ``{"error": {"code": <status>, "message", "errors": [{"reason",
"domain", "message"}], "status"}}``. Capacity and quota errors are not HTTP errors on GCP: the
insert is accepted and its *operation* ends ``DONE`` with ``error.errors[0].code`` set
(``ZONE_RESOURCE_POOL_EXHAUSTED``, ``QUOTA_EXCEEDED``) and the instance never appears; the
server injects them that way.

``preempt(name)`` does what Compute Engine does to a Spot VM: it records a
``compute.instances.preempted`` system operation and then, per the instance's
``scheduling.instanceTerminationAction``, deletes it (``DELETE``) or leaves it ``TERMINATED``
(``STOP``).

With ``token=...`` every request must carry ``Authorization: Bearer <token>`` (401
``authError`` otherwise). Every request is recorded (method, path, query, headers without ``Authorization``, decoded
JSON body) so tests assert on what the SDK really sent.
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
from urllib.parse import parse_qs, urlsplit

from tests.fakes import LocalHTTPServer

from .gcp_policies import ResourcePolicies
from .gcp_reservations import Reservations

BILLING_SERVICE = "6F81-5844-456A"  # Compute Engine in the Cloud Billing Catalog

#: Errors that GCP reports in a finished operation rather than as an HTTP error.
OPERATION_ERRORS: dict[str, tuple[int, str, str]] = {
    "ZONE_RESOURCE_POOL_EXHAUSTED": (
        503,
        "SERVICE UNAVAILABLE",
        "The zone '{zone}' does not have enough resources available to fulfill the request. "
        "Try a different zone, or try again later.",
    ),
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": (
        503,
        "SERVICE UNAVAILABLE",
        "The zone '{zone}' does not have enough resources available to fulfill the request. "
        "'(resource type:compute)'.",
    ),
    "IP_SPACE_EXHAUSTED": (  # the subnetwork has no free address (an operation error)
        400,
        "BAD REQUEST",
        "IP space of 'projects/{project}/regions/{region}/subnetworks/default' is exhausted.",
    ),
    "QUOTA_EXCEEDED": (
        403,
        "FORBIDDEN",
        "Quota 'PREEMPTIBLE_NVIDIA_L4_GPUS' exceeded.  Limit: 0.0 in region {region}.",
    ),
}

#: Errors GCP answers synchronously: reason -> (HTTP status, canonical status).
HTTP_ERRORS: dict[str, tuple[int, str]] = {
    "authError": (401, "UNAUTHENTICATED"),
    "forbidden": (403, "PERMISSION_DENIED"),
    "notFound": (404, "NOT_FOUND"),
    "alreadyExists": (409, "ALREADY_EXISTS"),
    "invalid": (400, "INVALID_ARGUMENT"),
    "badRequest": (400, "INVALID_ARGUMENT"),
    "rateLimitExceeded": (429, "RESOURCE_EXHAUSTED"),
    "userRateLimitExceeded": (403, "PERMISSION_DENIED"),
    "quotaExceeded": (403, "PERMISSION_DENIED"),
    "backendError": (503, "UNAVAILABLE"),
    "internalError": (500, "INTERNAL"),
}

# Machine types with GPUs built in (a few zones' worth) and the attachable accelerators.
MACHINE_TYPES: dict[str, tuple[int, int, str, int]] = {
    # name: (vCPUs, memory MiB, accelerator, count)
    "g2-standard-4": (4, 16384, "nvidia-l4", 1),
    "g2-standard-8": (8, 32768, "nvidia-l4", 1),
    "g2-standard-24": (24, 98304, "nvidia-l4", 2),
    "a2-highgpu-1g": (12, 87040, "nvidia-tesla-a100", 1),
    "a2-ultragpu-1g": (12, 174080, "nvidia-a100-80gb", 1),
    "a3-highgpu-8g": (208, 1916928, "nvidia-h100-80gb", 8),
}
ZONE_MACHINE_TYPES: dict[str, tuple[str, ...]] = {
    "us-central1-a": ("g2-standard-4", "g2-standard-8", "g2-standard-24", "a2-highgpu-1g"),
    "us-central1-b": ("g2-standard-4", "g2-standard-8", "a2-ultragpu-1g", "a3-highgpu-8g"),
    "europe-west4-a": ("g2-standard-4", "g2-standard-8", "a2-highgpu-1g"),
}
ZONE_ACCELERATORS: dict[str, tuple[tuple[str, str, int], ...]] = {
    # zone: ((name, description, maximumCardsPerInstance), ...)
    "us-central1-a": (
        ("nvidia-l4", "NVIDIA L4", 8),
        ("nvidia-tesla-a100", "NVIDIA A100 40GB", 16),
        ("nvidia-tesla-t4", "NVIDIA T4", 4),
    ),
    "us-central1-b": (
        ("nvidia-tesla-t4", "NVIDIA T4", 4),
        ("nvidia-h100-80gb", "NVIDIA H100 80GB", 8),
    ),
    "europe-west4-a": (("nvidia-l4", "NVIDIA L4", 8), ("nvidia-tesla-v100", "NVIDIA V100", 8)),
}


def _sku(
    sku_id: str, description: str, usage: str, group: str, region: str, unit: str, price: float
) -> dict[str, Any]:
    units = int(price)
    nanos = round((price - units) * 1e9)
    return {
        "name": f"services/{BILLING_SERVICE}/skus/{sku_id}",
        "skuId": sku_id,
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute",
            "resourceGroup": group,
            "usageType": usage,
        },
        "serviceRegions": [region],
        "pricingInfo": [
            {
                "summary": "",
                "pricingExpression": {
                    "usageUnit": unit,
                    "displayQuantity": 1,
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {
                                "currencyCode": "USD",
                                "units": str(units),
                                "nanos": nanos,
                            },
                        }
                    ],
                    "usageUnitDescription": "hour" if unit == "h" else "gibibyte hour",
                    "baseUnit": "s" if unit == "h" else "By.s",
                    "baseUnitDescription": "second" if unit == "h" else "byte second",
                    "baseUnitConversionFactor": 3600 if unit == "h" else 3865470566400,
                },
                "currencyConversionRate": 1,
                "effectiveTime": "2026-07-30T06:13:17.000Z",
            }
        ],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": "REGIONAL", "regions": [region]},
    }


def default_skus() -> list[dict[str, Any]]:
    """Component SKUs (USD/h) shaped like the Billing Catalog's, for two regions.

    us-central1 adds up to the list prices of 2026-07: g2-standard-4 0.706832 on demand and
    0.397336 spot; a2-highgpu-1g 3.673385 on demand and 1.92802 spot.
    """
    rows = [
        # (id, description, usageType, resourceGroup, region, unit, price)
        (
            "C001-0001-0001",
            "G2 Instance Core running in Americas",
            "OnDemand",
            "CPU",
            "us-central1",
            "h",
            0.02492,
        ),
        (
            "C001-0001-0002",
            "G2 Instance Ram running in Americas",
            "OnDemand",
            "RAM",
            "us-central1",
            "GiBy.h",
            0.002919,
        ),
        (
            "C001-0001-0003",
            "Nvidia L4 GPU running in Americas",
            "OnDemand",
            "GPU",
            "us-central1",
            "h",
            0.560448,
        ),
        (
            "C001-0001-0004",
            "Spot Preemptible G2 Instance Core running in Americas",
            "Preemptible",
            "CPU",
            "us-central1",
            "h",
            0.014017,
        ),
        (
            "C001-0001-0005",
            "Spot Preemptible G2 Instance Ram running in Americas",
            "Preemptible",
            "RAM",
            "us-central1",
            "GiBy.h",
            0.00164,
        ),
        (
            "C001-0001-0006",
            "Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas",
            "Preemptible",
            "GPU",
            "us-central1",
            "h",
            0.315028,
        ),
        (
            "C001-0001-0007",
            "A2 Instance Core running in Americas",
            "OnDemand",
            "CPU",
            "us-central1",
            "h",
            0.031611,
        ),
        (
            "C001-0001-0008",
            "A2 Instance Ram running in Americas",
            "OnDemand",
            "RAM",
            "us-central1",
            "GiBy.h",
            0.004237,
        ),
        (
            "C001-0001-0009",
            "Nvidia Tesla A100 GPU running in Americas",
            "OnDemand",
            "GPU",
            "us-central1",
            "h",
            2.933908,
        ),
        (
            "C001-0001-0010",
            "Spot Preemptible A2 Instance Core running in Americas",
            "Preemptible",
            "CPU",
            "us-central1",
            "h",
            0.01659,
        ),
        (
            "C001-0001-0011",
            "Spot Preemptible A2 Instance Ram running in Americas",
            "Preemptible",
            "RAM",
            "us-central1",
            "GiBy.h",
            0.00222,
        ),
        (
            "C001-0001-0012",
            "Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in Americas",
            "Preemptible",
            "GPU",
            "us-central1",
            "h",
            1.540017,
        ),
        (
            "C001-0001-0013",
            "Commitment v1: G2 Cpu in Americas for 1 Year",
            "Commit1Yr",
            "CPU",
            "us-central1",
            "h",
            0.0157,
        ),
        (
            "C001-0001-0014",
            "Storage PD Capacity",
            "OnDemand",
            "SSD",
            "us-central1",
            "GiBy.h",
            0.00005,
        ),
        (
            "C002-0001-0001",
            "G2 Instance Core running in Netherlands",
            "OnDemand",
            "CPU",
            "europe-west4",
            "h",
            0.027374,
        ),
        (
            "C002-0001-0002",
            "G2 Instance Ram running in Netherlands",
            "OnDemand",
            "RAM",
            "europe-west4",
            "GiBy.h",
            0.003207,
        ),
        (
            "C002-0001-0003",
            "Nvidia L4 GPU running in Netherlands",
            "OnDemand",
            "GPU",
            "europe-west4",
            "h",
            0.58672,
        ),
        (
            "C002-0001-0004",
            "Spot Preemptible G2 Instance Core running in Netherlands",
            "Preemptible",
            "CPU",
            "europe-west4",
            "h",
            0.0138,
        ),
        (
            "C002-0001-0005",
            "Spot Preemptible G2 Instance Ram running in Netherlands",
            "Preemptible",
            "RAM",
            "europe-west4",
            "GiBy.h",
            0.00161,
        ),
        (
            "C002-0001-0006",
            "Nvidia L4 GPU attached to Spot Preemptible VMs running in Netherlands",
            "Preemptible",
            "GPU",
            "europe-west4",
            "h",
            0.30892,
        ),
    ]
    return [_sku(*row) for row in rows]


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
class _State:
    instances: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    operations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    request_ids: dict[str, tuple[str, str]] = field(default_factory=dict)
    pending_error: dict[tuple[str, str], str] = field(default_factory=dict)
    policies: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    region_operations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    policy_request_ids: dict[str, tuple[str, str]] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)
    reservations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    future_reservations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _lookup(resource: dict[str, Any], path: str) -> Any:
    value: Any = resource
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


_TERM = re.compile(
    r"""(?P<field>[A-Za-z_][\w.\-]*)\s*(?P<op>!=|=|:|\beq\b|\bne\b)\s*"""
    r"""(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<bare>[^\s()]+))"""
)


def matches_filter(resource: dict[str, Any], expr: str) -> bool:
    """GCP list ``filter``: ``a = "x"``, ``a != "x"``, ``a eq "re"``, ``a:*``; all must hold.

    Terms may be parenthesised and joined with ``AND`` (or juxtaposed); ``OR`` is refused.
    """
    expr = expr.strip()
    if not expr:
        return True
    if re.search(r"\bOR\b", expr):
        raise ValueError("OR is not supported by this fake")
    terms = list(_TERM.finditer(expr))
    rest = _TERM.sub("", expr)
    if not terms or re.sub(r"[\s()]|\bAND\b", "", rest):
        raise ValueError(
            f"Invalid value for field 'filter': '{expr}'. Invalid list filter expression."
        )
    for t in terms:
        literal = t.group("dq") if t.group("dq") is not None else t.group("sq")
        if literal is None:
            literal = t.group("bare")
        actual = _lookup(resource, t.group("field"))
        text = (
            ""
            if actual is None
            else str(actual).lower()
            if isinstance(actual, bool)
            else str(actual)
        )
        op = t.group("op")
        if op == ":":
            ok = actual is not None if literal == "*" else literal in text
        elif op == "=":
            ok = actual is not None and text == literal
        elif op == "!=":
            ok = actual is None or text != literal
        else:
            ok = re.fullmatch(literal, text) is not None
            if op == "ne":
                ok = not ok
        if not ok:
            return False
    return True


class GCPServer(Reservations, ResourcePolicies, LocalHTTPServer):
    """The fake, started on 127.0.0.1 on a free port; use as a context manager or call close()."""

    def __init__(
        self, project: str = "test-project", *, token: str | None = None, auto_finish: bool = False
    ) -> None:
        self.project = project
        #: the OAuth access token every request must carry (None: no check)
        self.token = token
        #: finish operations as soon as they are created (default: on the first get/wait)
        self.auto_finish = auto_finish
        self.requests: list[Recorded] = []
        self.skus: list[dict[str, Any]] = default_skus()
        self.sku_page_size = 8
        #: the most results one list page holds (Compute Engine: ``maxResults``, default and
        #: most 500); a smaller value makes every list cross pages (``nextPageToken``)
        self.list_page_size = 500
        self._state = _State()
        self._inject: dict[str, list[_Injected]] = {}
        self._lock = threading.RLock()
        self._seq = 0
        #: region -> the ``quotas`` of ``regions.get`` (Compute Engine's ``Quota``: ``metric``,
        #: ``limit``, ``usage``; https://cloud.google.com/compute/docs/reference/rest/v1/regions)
        self.region_quotas: dict[str, list[dict[str, Any]]] = {}
        #: what ``simulateMaintenanceEvent`` does to a Spot VM: None preempts it at once; a
        #: callable (name, zone) plays Compute Engine's order instead (``instance/preempted``
        #: TRUE on the VM's metadata server first, the preemption about 30 s later)
        self.on_maintenance_event: Callable[[str, str], Any] | None = None
        self.start()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return type("Handler", (_Handler,), {"fake": self})

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        with self._lock:
            self._state = _State()
            self._inject.clear()
            self.requests.clear()

    # -- test controls -------------------------------------------------------------------------

    def inject_error(
        self,
        code: str,
        *,
        operation: str = "insert",
        times: int = 1,
        status: int | None = None,
        message: str | None = None,
    ) -> None:
        """Make the next ``times`` calls of ``operation`` fail with ``code``.

        ``operation``: insert, get, list, aggregatedList, delete, wait, operations, billing
        (or ``launch``/``terminate``), policy-insert, policy-get, policy-delete, policy-list,
        region-wait. Codes in :data:`OPERATION_ERRORS` make an insert's
        operation fail (as GCP does); any other code is an HTTP error with that ``reason`` (a
        bare number such as ``"503"`` is that status).
        """
        operation = {"launch": "insert", "terminate": "delete", "describe": "get"}.get(
            operation, operation
        )
        with self._lock:
            self._inject.setdefault(operation, []).append(_Injected(code, times, status, message))

    def preempt(self, name: str, zone: str | None = None) -> dict[str, Any]:
        """Preempt a Spot VM as Compute Engine does; returns the system operation."""
        with self._lock:
            key = self._find(name, zone)
            inst = self._state.instances[key]
            z = key[0]
            op = self._new_op(z, "compute.instances.preempted", inst, user="system@google.com")
            op["name"] = (
                f"systemevent-{int(datetime.now(UTC).timestamp() * 1000)}-{uuid.uuid4().hex[:12]}"
            )
            op["status"] = "DONE"
            op["progress"] = 100
            op["statusMessage"] = "Instance was preempted."
            op["endTime"] = _now()
            del self._state.operations[(z, op.pop("_key"))]
            self._state.operations[(z, op["name"])] = op
            action = inst.get("scheduling", {}).get("instanceTerminationAction", "STOP")
            if action == "DELETE":
                del self._state.instances[key]
            else:
                inst["status"] = "TERMINATED"
                inst["lastStopTimestamp"] = _now()
            return op

    def instance(self, name: str, zone: str | None = None) -> dict[str, Any] | None:
        with self._lock:
            try:
                return self._state.instances[self._find(name, zone)]
            except KeyError:
                return None

    def instances(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._state.instances.values())

    def launch_requests(self) -> list[Recorded]:
        """The instance inserts the SDK sent, oldest first."""
        return [
            r
            for r in self.requests
            if r.method == "POST" and re.search(r"/zones/[^/]+/instances$", r.path)
        ]

    # -- internals -----------------------------------------------------------------------------

    def _find(self, name: str, zone: str | None) -> tuple[str, str]:
        if zone:
            key = (zone, name)
            if key in self._state.instances:
                return key
            raise KeyError(name)
        for key in self._state.instances:
            if key[1] == name:
                return key
        raise KeyError(name)

    def _take_injected(self, operation: str) -> _Injected | None:
        with self._lock:
            queue = self._inject.get(operation) or []
            if not queue:
                return None
            item = queue[0]
            item.times -= 1
            if item.times <= 0:
                queue.pop(0)
            return item

    def _url(self, *parts: str) -> str:
        return f"{self.endpoint}/compute/v1/projects/{self.project}/" + "/".join(parts)

    def _next_id(self) -> str:
        self._seq += 1
        return str(7_000_000_000_000_000_000 + self._seq)

    def _new_op(
        self, zone: str, op_type: str, inst: dict[str, Any], user: str = "fake@example.com"
    ) -> dict[str, Any]:
        name = f"operation-{int(datetime.now(UTC).timestamp() * 1000)}-{uuid.uuid4().hex[:13]}"
        op = {
            "kind": "compute#operation",
            "id": self._next_id(),
            "name": name,
            "zone": self._url("zones", zone),
            "operationType": op_type,
            "targetLink": inst["selfLink"],
            "targetId": inst["id"],
            "status": "RUNNING",
            "user": user,
            "progress": 0,
            "insertTime": _now(),
            "startTime": _now(),
            "selfLink": self._url("zones", zone, "operations", name),
            "_key": name,
        }
        self._state.operations[(zone, name)] = op
        return op

    def _finish(self, zone: str, op: dict[str, Any]) -> None:
        if op["status"] == "DONE":
            return
        op["status"] = "DONE"
        op["progress"] = 100
        op["endTime"] = _now()
        code = self._state.pending_error.pop((zone, op["name"]), None)
        name = op["targetLink"].rsplit("/", 1)[-1]
        if code is not None:
            status, status_text, template = OPERATION_ERRORS[code]
            region = zone.rsplit("-", 1)[0]
            message = template.format(
                zone=f"projects/{self.project}/zones/{zone}", region=region, project=self.project
            )
            op["error"] = {"errors": [{"code": code, "message": message}]}
            op["httpErrorStatusCode"] = status
            op["httpErrorMessage"] = status_text
            self._state.instances.pop((zone, name), None)
            return
        if op["operationType"] == "insert":
            inst = self._state.instances.get((zone, name))
            if inst is not None:
                inst["status"] = "RUNNING"
                inst["lastStartTimestamp"] = _now()
        elif op["operationType"] == "delete":
            self._state.instances.pop((zone, name), None)

    @staticmethod
    def _public(op: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in op.items() if not k.startswith("_")}

    # -- request handling (called by the handler, under the lock) ------------------------------

    def handle(
        self, method: str, path: str, query: dict[str, str], body: Any, auth: str | None = None
    ) -> tuple[int, Any]:
        with self._lock:
            if self.token is not None and auth != f"Bearer {self.token}":
                return _error(
                    401,
                    "authError",
                    "Request had invalid authentication credentials. Expected "
                    "OAuth 2 access token, login cookie or other valid authentication credential.",
                )
            for pattern, verb, fn in self._routes():
                if verb != method:
                    continue
                m = re.fullmatch(pattern, path)
                if m:
                    return fn(query, body, **m.groupdict())
        return _error(404, "notFound", f"The requested URL {path} was not found on this server.")

    def _routes(self) -> Iterator[tuple[str, str, Callable[..., tuple[int, Any]]]]:
        p = r"/compute/v1/projects/(?P<project>[^/]+)"
        yield p + r"/zones/(?P<zone>[^/]+)/instances", "POST", self._insert
        yield p + r"/zones/(?P<zone>[^/]+)/instances", "GET", self._list
        yield p + r"/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)", "GET", self._get
        yield p + r"/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)", "DELETE", self._delete
        yield (
            p + r"/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)/simulateMaintenanceEvent",
            "POST",
            self._maintenance,
        )
        yield p + r"/aggregated/instances", "GET", self._aggregated_instances
        yield p + r"/zones/(?P<zone>[^/]+)/operations/(?P<name>[^/]+)", "GET", self._op_get
        yield p + r"/zones/(?P<zone>[^/]+)/operations/(?P<name>[^/]+)/wait", "POST", self._op_wait
        yield p + r"/zones/(?P<zone>[^/]+)/operations", "GET", self._op_list
        yield p + r"/aggregated/operations", "GET", self._aggregated_ops
        yield p + r"/aggregated/machineTypes", "GET", self._machine_types
        yield p + r"/regions/(?P<region>[^/]+)", "GET", self._region
        yield p + r"/aggregated/acceleratorTypes", "GET", self._accelerator_types
        yield rf"/v1/services/{BILLING_SERVICE}/skus", "GET", self._skus
        yield from self._policy_routes()
        yield from self._reservation_routes()

    def _region(self, _query: Any, _body: Any, project: str, region: str) -> tuple[int, Any]:
        """``regions.get``: the region with its quotas (a region the fake has no quotas for
        answers the usual CPU ones only)."""
        if project != self.project:
            return _error(403, "forbidden", f"Project {project} is not the fake's")
        quotas = self.region_quotas.get(region, [{"metric": "CPUS", "limit": 24.0, "usage": 0.0}])
        return 200, {
            "kind": "compute#region",
            "id": str(abs(hash(region)) % 10**12),
            "name": region,
            "status": "UP",
            "selfLink": f"{self.endpoint}/compute/v1/projects/{project}/regions/{region}",
            "quotas": quotas,
        }

    def _injected(self, operation: str) -> tuple[int, Any] | None:
        item = self._take_injected(operation)
        if item is None:
            return None
        if item.code in OPERATION_ERRORS and operation == "insert":
            return (0, item.code)  # the insert is accepted; its operation fails
        if item.code.isdigit():
            status = item.status or int(item.code)
            reason = {
                401: "authError",
                403: "forbidden",
                404: "notFound",
                429: "rateLimitExceeded",
            }.get(status, "backendError" if status >= 500 else "invalid")
        else:
            reason = item.code
            status = item.status or HTTP_ERRORS.get(reason, (400, ""))[0]
        message = item.message or {
            "authError": "Request had invalid authentication credentials. Expected OAuth 2 "
            "access token, login cookie or other valid authentication credential.",
            "rateLimitExceeded": "Rate Limit Exceeded",
            "backendError": "Internal error. Please try again or contact Google Support.",
            "forbidden": "Required 'compute.instances.create' permission for 'projects/"
            + self.project
            + "'",
        }.get(reason, f"Injected error {item.code}")
        return _error(status, reason, message)

    def _project_ok(self, project: str) -> tuple[int, Any] | None:
        if project != self.project:
            return _error(404, "notFound", f"The resource 'projects/{project}' was not found")
        return None

    def _insert(self, query: dict[str, str], body: Any, project: str, zone: str) -> tuple[int, Any]:
        bad = self._project_ok(project)
        if bad:
            return bad
        request_id = query.get("requestId")
        if request_id and request_id in self._state.request_ids:
            z, op_name = self._state.request_ids[request_id]
            return 200, self._public(self._state.operations[(z, op_name)])
        injected = self._injected("insert")
        op_error: str | None = None
        if injected is not None:
            if injected[0] != 0:
                return injected
            op_error = str(injected[1])
        if not isinstance(body, dict) or not body.get("name"):
            return _error(400, "required", "Required field 'resource.name' not specified")
        name = body["name"]
        if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name):
            return _error(400, "invalid", f"Invalid value for field 'resource.name': '{name}'.")
        for key, value in (body.get("labels") or {}).items():
            if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", key) or not re.fullmatch(
                r"[a-z0-9_-]{0,63}", value
            ):
                return _error(
                    400, "invalid", f"Invalid value for field 'resource.labels': '{key}'."
                )
        if (zone, name) in self._state.instances:
            return _error(
                409,
                "alreadyExists",
                f"The resource 'projects/{project}/zones/{zone}/instances/{name}' already exists",
            )
        mt = str(body.get("machineType", "")).rsplit("/", 1)[-1]
        if mt not in ZONE_MACHINE_TYPES.get(zone, ()) and not mt.startswith("n1-"):
            return _error(
                400,
                "invalid",
                f"Invalid value for field 'resource.machineType': '{body.get('machineType')}'. "
                f"Machine type with name '{mt}' does not exist in zone '{zone}'.",
            )
        policies, bad = self._instance_policies(body, zone)
        if bad:
            return bad
        held, bad = self._instance_reservation(body, zone, mt)
        if bad:
            return bad
        inst = json.loads(json.dumps(body))
        if policies:
            inst["resourcePolicies"] = policies
        inst.update(
            {
                "kind": "compute#instance",
                "id": self._next_id(),
                "creationTimestamp": _now(),
                "zone": self._url("zones", zone),
                "machineType": self._url("zones", zone, "machineTypes", mt),
                "status": "PROVISIONING",
                "selfLink": self._url("zones", zone, "instances", name),
                "labelFingerprint": "42WmSpB8rSM=",
                "cpuPlatform": "Unknown CPU Platform",
            }
        )
        for n, nic in enumerate(inst.get("networkInterfaces") or [{}]):
            nic["networkIP"] = f"10.128.0.{10 + self._seq % 200}"
            nic["name"] = f"nic{n}"
            for ac in nic.get("accessConfigs") or []:
                ac["natIP"] = f"34.123.{self._seq % 250}.{10 + n}"
        if "metadata" in inst:
            inst["metadata"]["fingerprint"] = "qb0dGfHw0Ec="
            inst["metadata"]["kind"] = "compute#metadata"
        self._state.instances[(zone, name)] = inst
        if held is not None and not op_error:
            self._consume(held, +1)
        op = self._new_op(zone, "insert", inst)
        if op_error:
            self._state.pending_error[(zone, op["name"])] = op_error
        if request_id:
            self._state.request_ids[request_id] = (zone, op["name"])
        if self.auto_finish:
            self._finish(zone, op)
        return 200, self._public(op)

    def _get(
        self, query: dict[str, str], body: Any, project: str, zone: str, name: str
    ) -> tuple[int, Any]:
        injected = self._injected("get")
        if injected:
            return injected
        inst = self._state.instances.get((zone, name))
        if inst is None or project != self.project:
            return _error(
                404,
                "notFound",
                f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found",
            )
        return 200, inst

    def _filtered(self, items: list[dict[str, Any]], query: dict[str, str]) -> list[dict[str, Any]]:
        expr = query.get("filter", "")
        return [i for i in items if matches_filter(i, expr)]

    def _page(self, rows: list[Any], query: dict[str, str]) -> tuple[list[Any], str]:
        """One page of ``rows`` by ``maxResults``/``pageToken``, and the next page's token."""
        size = min(int(query.get("maxResults") or 500), 500, self.list_page_size)
        start = int(query.get("pageToken") or 0)
        nxt = start + size
        return rows[start:nxt], (str(nxt) if nxt < len(rows) else "")

    def _list(self, query: dict[str, str], body: Any, project: str, zone: str) -> tuple[int, Any]:
        injected = self._injected("list")
        if injected:
            return injected
        try:
            items = self._filtered(
                [i for (z, _), i in self._state.instances.items() if z == zone], query
            )
        except ValueError as exc:
            return _error(400, "invalid", str(exc))
        out: dict[str, Any] = {
            "kind": "compute#instanceList",
            "id": f"projects/{project}/zones/{zone}/instances",
            "selfLink": self._url("zones", zone, "instances"),
        }
        items, token = self._page(items, query)
        if items:
            out["items"] = items
        if token:
            out["nextPageToken"] = token
        return 200, out

    def _aggregated(
        self, kind: str, key: str, per_zone: dict[str, list[dict[str, Any]]], query: dict[str, str]
    ) -> tuple[int, Any]:
        items: dict[str, Any] = {}
        try:
            for zone in sorted(set(ZONE_MACHINE_TYPES) | set(per_zone)):
                found = self._filtered(per_zone.get(zone, []), query)
                if found:
                    items[f"zones/{zone}"] = {key: found}
                else:
                    items[f"zones/{zone}"] = {
                        "warning": {
                            "code": "NO_RESULTS_ON_PAGE",
                            "message": "There are no results for scope 'zones/"
                            + zone
                            + "' on this page.",
                            "data": [{"key": "scope", "value": f"zones/{zone}"}],
                        }
                    }
        except ValueError as exc:
            return _error(400, "invalid", str(exc))
        scopes, token = self._page(sorted(items.items()), query)  # a page holds whole scopes
        out = {
            "kind": kind,
            "id": f"projects/{self.project}/aggregated/{key}",
            "items": dict(scopes),
            "selfLink": self._url("aggregated", key),
        }
        if token:
            out["nextPageToken"] = token
        return 200, out

    def _aggregated_instances(
        self, query: dict[str, str], body: Any, project: str
    ) -> tuple[int, Any]:
        injected = self._injected("aggregatedList") or self._injected("list")
        if injected:
            return injected
        per_zone: dict[str, list[dict[str, Any]]] = {}
        for (zone, _), inst in self._state.instances.items():
            per_zone.setdefault(zone, []).append(inst)
        return self._aggregated("compute#instanceAggregatedList", "instances", per_zone, query)

    def _delete(
        self, query: dict[str, str], body: Any, project: str, zone: str, name: str
    ) -> tuple[int, Any]:
        injected = self._injected("delete")
        if injected:
            return injected
        request_id = query.get("requestId")
        if request_id and request_id in self._state.request_ids:
            z, op_name = self._state.request_ids[request_id]
            return 200, self._public(self._state.operations[(z, op_name)])
        inst = self._state.instances.get((zone, name))
        if inst is None:
            return _error(
                404,
                "notFound",
                f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found",
            )
        inst["status"] = "STOPPING"
        affinity = inst.get("reservationAffinity") or {}
        if affinity.get("consumeReservationType") == "SPECIFIC_RESERVATION":
            named = str((affinity.get("values") or [""])[0]).rsplit("/", 1)[-1]
            if (zone, named) in self._state.reservations:
                self._consume(self._state.reservations[(zone, named)], -1)
        op = self._new_op(zone, "delete", inst)
        if request_id:
            self._state.request_ids[request_id] = (zone, op["name"])
        if self.auto_finish:
            self._finish(zone, op)
        return 200, self._public(op)

    def _maintenance(
        self, query: dict[str, str], body: Any, project: str, zone: str, name: str
    ) -> tuple[int, Any]:
        """``instances.simulateMaintenanceEvent``: on a Spot VM (``onHostMaintenance:
        TERMINATE``) the event is a preemption; the call answers with its operation."""
        bad = self._project_ok(project) or self._injected("maintenance")
        if bad:
            return bad
        inst = self._state.instances.get((zone, name))
        if inst is None:
            return _error(
                404,
                "notFound",
                f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found",
            )
        op = self._new_op(zone, "compute.instances.simulateMaintenanceEvent", inst)
        self._finish(zone, op)
        if self.on_maintenance_event is not None:
            self.on_maintenance_event(name, zone)
        else:
            self.preempt(name, zone)
        return 200, self._public(op)

    def _op(self, zone: str, name: str, operation: str) -> tuple[int, Any]:
        injected = self._injected(operation)
        if injected:
            return injected
        op = self._state.operations.get((zone, name))
        if op is None:
            return _error(
                404,
                "notFound",
                f"The resource 'projects/{self.project}/zones/{zone}/operations/{name}' was not found",
            )
        self._finish(zone, op)
        return 200, self._public(op)

    def _op_get(
        self, query: dict[str, str], body: Any, project: str, zone: str, name: str
    ) -> tuple[int, Any]:
        return self._op(zone, name, "operations")

    def _op_wait(
        self, query: dict[str, str], body: Any, project: str, zone: str, name: str
    ) -> tuple[int, Any]:
        return self._op(zone, name, "wait")

    def _op_list(
        self, query: dict[str, str], body: Any, project: str, zone: str
    ) -> tuple[int, Any]:
        injected = self._injected("operations")
        if injected:
            return injected
        try:
            items = self._filtered(
                [self._public(o) for (z, _), o in self._state.operations.items() if z == zone],
                query,
            )
        except ValueError as exc:
            return _error(400, "invalid", str(exc))
        out: dict[str, Any] = {
            "kind": "compute#operationList",
            "id": f"projects/{project}/zones/{zone}/operations",
            "selfLink": self._url("zones", zone, "operations"),
        }
        items, token = self._page(items, query)
        if items:
            out["items"] = items
        if token:
            out["nextPageToken"] = token
        return 200, out

    def _aggregated_ops(self, query: dict[str, str], body: Any, project: str) -> tuple[int, Any]:
        injected = self._injected("operations")
        if injected:
            return injected
        per_zone: dict[str, list[dict[str, Any]]] = {}
        for (zone, _), op in self._state.operations.items():
            per_zone.setdefault(zone, []).append(self._public(op))
        return self._aggregated("compute#operationAggregatedList", "operations", per_zone, query)

    def _machine_types(self, query: dict[str, str], body: Any, project: str) -> tuple[int, Any]:
        injected = self._injected("machineTypes")
        if injected:
            return injected
        per_zone: dict[str, list[dict[str, Any]]] = {}
        for zone, names in ZONE_MACHINE_TYPES.items():
            for name in names:
                cpus, mem, acc, count = MACHINE_TYPES[name]
                per_zone.setdefault(zone, []).append(
                    {
                        "kind": "compute#machineType",
                        "id": str(abs(hash((zone, name))) % 10**12),
                        "name": name,
                        "description": f"{cpus} vCPUs, {mem // 1024} GB RAM, {count} GPU",
                        "guestCpus": cpus,
                        "memoryMb": mem,
                        "maximumPersistentDisks": 128,
                        "maximumPersistentDisksSizeGb": "263168",
                        "zone": zone,
                        "isSharedCpu": False,
                        "accelerators": [
                            {"guestAcceleratorType": acc, "guestAcceleratorCount": count}
                        ],
                        "architecture": "X86_64",
                        "selfLink": self._url("zones", zone, "machineTypes", name),
                    }
                )
        return self._aggregated(
            "compute#machineTypeAggregatedList", "machineTypes", per_zone, query
        )

    def _accelerator_types(self, query: dict[str, str], body: Any, project: str) -> tuple[int, Any]:
        injected = self._injected("acceleratorTypes")
        if injected:
            return injected
        per_zone: dict[str, list[dict[str, Any]]] = {}
        for zone, accs in ZONE_ACCELERATORS.items():
            for name, desc, most in accs:
                per_zone.setdefault(zone, []).append(
                    {
                        "kind": "compute#acceleratorType",
                        "id": str(abs(hash((zone, name))) % 10**12),
                        "name": name,
                        "description": desc,
                        "zone": self._url("zones", zone),
                        "maximumCardsPerInstance": most,
                        "selfLink": self._url("zones", zone, "acceleratorTypes", name),
                    }
                )
        return self._aggregated(
            "compute#acceleratorTypeAggregatedList", "acceleratorTypes", per_zone, query
        )

    def _skus(self, query: dict[str, str], body: Any) -> tuple[int, Any]:
        injected = self._injected("billing")
        if injected:
            return injected
        start = int(query.get("pageToken") or 0)
        size = min(int(query.get("pageSize") or self.sku_page_size), self.sku_page_size)
        page = self.skus[start : start + size]
        nxt = start + size
        return 200, {"skus": page, "nextPageToken": str(nxt) if nxt < len(self.skus) else ""}


def _error(status: int, reason: str, message: str) -> tuple[int, Any]:
    canonical = HTTP_ERRORS.get(reason, (status, ""))[1]
    body: dict[str, Any] = {
        "error": {
            "code": status,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
        }
    }
    if canonical:
        body["error"]["status"] = canonical
    return status, body


class _Handler(BaseHTTPRequestHandler):
    fake: GCPServer
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
        status, payload = self.fake.handle(
            self.command, parts.path, query, body, self.headers.get("Authorization")
        )
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve
