"""A small Alibaba Cloud ECS API on 127.0.0.1, speaking the wire format the real SDK expects.

The official SDK (alibabacloud-ecs20140526 with tea-openapi, ACS3-HMAC-SHA256) sends
``POST /`` with every parameter in the query string (``Tag.1.Key=...``), the action in the
``x-acs-action`` header and the signature in ``Authorization``. It reads a JSON body; errors are
HTTP 4xx/5xx with ``{"Code", "Message", "RequestId"}``.

The server keeps instances, honours ``ClientToken`` (a repeated RunInstances answers with the
instances of the first one, as ECS does), checks a spot price limit against its spot price,
records every request (action, decoded parameters, headers without the signature), can be
told to fail the next calls of an action with a given code, and can take a spot instance back
as ECS does (``OperationLocks.LockReason = "Recycling"``, then released).

Signatures are not verified; their presence is.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.fakes import LocalHTTPServer
from tests.fakes.alibaba_capacity import CapacityReservations
from tests.fakes.alibaba_sets import DeploymentSets

DEFAULT_REGION = "cn-hangzhou"
DEFAULT_ZONES = ("cn-hangzhou-h", "cn-hangzhou-i", "cn-hangzhou-j")

#: The HTTP status ECS answers each code with (by documentation; 400 when unknown).
STATUS: dict[str, int] = {
    "OperationDenied.NoStock": 403,
    "Zone.NotOnSale": 403,
    "Zone.NotOpen": 403,
    "QuotaExceeded.PrivateIpAddress": 400,
    "QuotaExceed.ElasticQuota": 403,
    "QuotaExceed.PostPaidInstance": 403,
    "InvalidInstanceType.ValueUnauthorized": 403,
    "InvalidSpotPriceLimit.LowerThanPublicPrice": 400,
    "InvalidAccessKeyId.NotFound": 404,
    "SignatureDoesNotMatch": 400,
    "IncompleteSignature": 400,
    "Forbidden.RAM": 403,
    "InvalidInstanceId.NotFound": 404,
    "InvalidDeploymentSetId.NotFound": 404,
    "IncorrectInstanceStatus": 403,
    "Throttling": 400,
    "Throttling.User": 400,
    "Throttling.Api": 400,
    "ServiceUnavailable": 503,
    "InternalError": 500,
    "UnknownError": 500,
    "InvalidAction.NotFound": 404,
}

_SECRET_HEADER_WORDS = ("authorization", "signature", "security-token", "accesskey")


@dataclass(frozen=True, slots=True)
class GpuType:
    instance_type: str
    gpu_spec: str
    gpu_amount: int
    cpu: int
    memory_gib: float
    price: float  # pay-as-you-go, per hour
    spot: dict[str, float]  # zone -> spot price; a zone missing here has no stock


def default_types(zones: tuple[str, ...] = DEFAULT_ZONES) -> list[GpuType]:
    h, i, j = (list(zones) + list(zones) * 3)[:3]
    return [
        GpuType("ecs.gn7i-c8g1.2xlarge", "NVIDIA A10", 1, 8, 30.0, 1.20, {h: 0.36, i: 0.40}),
        GpuType("ecs.gn6i-c4g1.xlarge", "NVIDIA T4", 1, 4, 15.0, 0.80, {h: 0.22, i: 0.24, j: 0.21}),
        GpuType("ecs.gn7e-c16g1.4xlarge", "NVIDIA A100", 1, 16, 125.0, 4.00, {i: 1.20}),
        GpuType("ecs.sgn7i-vws-m2.xlarge", "NVIDIA A10*1/12", 1, 2, 8.0, 0.30, {h: 0.09}),
    ]


@dataclass(slots=True)
class Recorded:
    """One request as the SDK sent it."""

    action: str
    params: dict[str, str]
    headers: dict[str, str]
    body: bytes = b""


@dataclass(slots=True)
class _Failure:
    code: str
    times: int
    status: int
    message: str
    body: bytes | None = None  # a raw (non-JSON) body, as a gateway in front of ECS sends


class ApiError(Exception):
    def __init__(
        self, code: str, message: str = "", status: int | None = None, body: bytes | None = None
    ) -> None:
        super().__init__(code)
        self.code = code
        self.message = message or code
        self.status = status or STATUS.get(code, 400)
        self.body = body


@dataclass
class _State:
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)
    tokens: dict[str, list[str]] = field(default_factory=dict)  # ClientToken -> ids
    released: dict[str, dict[str, Any]] = field(default_factory=dict)
    fresh: set[str] = field(default_factory=set)  # created, not yet described
    #: instance id -> the instance RAM role RunInstances named (``RamRoleName``); ECS reports
    #: it through DescribeInstanceRamRole, not DescribeInstances
    ram_roles: dict[str, str] = field(default_factory=dict)
    #: instance id -> the ``UserData`` RunInstances sent (base64), as the VM reads it
    user_data: dict[str, str] = field(default_factory=dict)
    #: capacity reservations by private pool id (alibaba_capacity.py)
    pools: dict[str, dict[str, Any]] = field(default_factory=dict)


def _now_text(moment: datetime | None = None) -> str:
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%MZ")


def _indexed(params: dict[str, str], prefix: str) -> list[str]:
    """``InstanceId.1=a&InstanceId.2=b`` -> ``[a, b]``."""
    items = []
    for key, value in params.items():
        head, _, index = key.rpartition(".")
        if head == prefix and index.isdigit():
            items.append((int(index), value))
    return [v for _, v in sorted(items)]


def _tags(params: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    n = 1
    while f"Tag.{n}.Key" in params:
        out[params[f"Tag.{n}.Key"]] = params.get(f"Tag.{n}.Value", "")
        n += 1
    return out


class AlibabaFakeServer(CapacityReservations, DeploymentSets, LocalHTTPServer):
    """ECS on 127.0.0.1:<port>; ``endpoint`` is what the SDK's ``Config(endpoint=...)`` takes."""

    _api_error = ApiError

    def __init__(
        self,
        *,
        region: str = DEFAULT_REGION,
        zones: tuple[str, ...] = DEFAULT_ZONES,
        types: list[GpuType] | None = None,
        currency: str = "USD",
        known_key_ids: set[str] | None = None,
    ) -> None:
        self.region = region
        self.zones = zones
        self.types = {t.instance_type: t for t in (types or default_types(zones))}
        self.currency = currency
        #: the most rows one page holds, below what the request asks for (the service caps
        #: pages: DescribeInstances 100, DescribeInstanceTypes 1600); small: every list pages
        self.max_page = 1600
        self.known_key_ids = known_key_ids
        self.requests: list[Recorded] = []
        self._failures: dict[str, list[_Failure]] = {}
        self._state = _State()
        self._sets: dict[str, dict[str, Any]] = {}  # deployment sets (alibaba_sets.py)
        #: DescribeAccountAttributes: attribute name -> its ``Value`` (the vCPU quotas)
        self.account_attributes: dict[str, str] = {
            "max-postpaid-instance-vcpu-count": "500",
            "used-postpaid-instance-vcpu-count": "0",
            "max-spot-instance-vcpu-count": "500",
            "used-spot-instance-vcpu-count": "0",
        }
        #: DescribeSpotAdvice: (zone, instance type) -> (InterruptionRate, InterruptRateDesc)
        self.spot_advice: dict[tuple[str, str], tuple[float, str]] = {}
        #: zones the account may not buy in (RunInstances there: Zone.NotOpen)
        self.closed_zones: set[str] = set()
        #: vSwitches without a free private IP (RunInstances: QuotaExceeded.PrivateIpAddress)
        self.full_vswitches: set[str] = set()
        self._lock = threading.RLock()

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- test controls ---------------------------------------------------------------------

    def reset(self) -> None:
        with self._lock:
            self._state = _State()
            self._sets = {}
            self._failures.clear()
            self.requests.clear()

    def inject_error(
        self,
        action: str,
        code: str,
        *,
        times: int = 1,
        status: int | None = None,
        message: str | None = None,
        body: bytes | None = None,
    ) -> None:
        """The next ``times`` calls of ``action`` fail with ``code`` as ECS sends it (or, with
        ``body``, with that raw body and ``status``, as a gateway in front of it would)."""
        with self._lock:
            self._failures.setdefault(action, []).append(
                _Failure(
                    code,
                    times,
                    status or STATUS.get(code, 400),
                    message or f"{code} (injected)",
                    body,
                )
            )

    def preempt(self, instance_id: str) -> None:
        """Take a spot instance back: ECS locks it with ``Recycling`` minutes before release."""
        with self._lock:
            inst = self._state.instances[instance_id]
            if inst.get("SpotStrategy") not in ("SpotWithPriceLimit", "SpotAsPriceGo"):
                raise ValueError(f"{instance_id} is not a spot instance")
            inst["OperationLocks"] = {"LockReason": [{"LockReason": "Recycling"}]}
            self._state.fresh.discard(instance_id)

    def release(self, instance_id: str) -> None:
        """What follows the Recycling lock: the instance is gone."""
        with self._lock:
            self._state.released[instance_id] = self._state.instances.pop(instance_id)

    def set_spot_price(self, instance_type: str, zone: str, price: float | None) -> None:
        """Change a spot price (None: no stock in that zone)."""
        with self._lock:
            t = self.types[instance_type]
            spot = dict(t.spot)
            if price is None:
                spot.pop(zone, None)
            else:
                spot[zone] = price
            self.types[instance_type] = GpuType(
                t.instance_type, t.gpu_spec, t.gpu_amount, t.cpu, t.memory_gib, t.price, spot
            )

    def instances(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return json.loads(json.dumps(self._state.instances))

    def user_data(self, instance_id: str) -> str:
        """The instance's user data (base64), as RunInstances sent it."""
        with self._lock:
            return self._state.user_data.get(instance_id, "")

    def calls(self, action: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.action == action]

    def ram_role(self, instance_id: str) -> str | None:
        """The instance RAM role ``instance_id`` was created with (None: none)."""
        with self._lock:
            return self._state.ram_roles.get(instance_id)

    # -- HTTP ----------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        url = urlsplit(h.path)
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        ctype = h.headers.get("content-type", "")
        if body and ctype.startswith("application/x-www-form-urlencoded"):
            params.update(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
        action = h.headers.get("x-acs-action") or params.get("Action", "")
        headers = {
            k.lower(): v
            for k, v in h.headers.items()
            if not any(word in k.lower() for word in _SECRET_HEADER_WORDS)
        }
        request_id = str(uuid.uuid4()).upper()
        with self._lock:
            self.requests.append(Recorded(action, params, headers, body))
        try:
            if h.command != "POST" or url.path != "/":
                raise ApiError("InvalidAction.NotFound", f"{h.command} {url.path}", 404)
            auth = h.headers.get("Authorization", "")
            if not auth.startswith("ACS3-HMAC-SHA256 ") or "Signature=" not in auth:
                raise ApiError("IncompleteSignature", "The request signature is missing.")
            if self.known_key_ids is not None:
                key_id = auth.partition("Credential=")[2].partition(",")[0]
                if key_id not in self.known_key_ids:
                    raise ApiError(
                        "InvalidAccessKeyId.NotFound", "Specified access key is not found."
                    )
            self._maybe_fail(action)
            handler = getattr(self, f"_do_{action}", None)
            if handler is None:
                raise ApiError("InvalidAction.NotFound", f"Specified api {action} is not found.")
            with self._lock:
                payload = handler(params)
            payload["RequestId"] = request_id
            self._send(h, 200, payload)
        except ApiError as err:
            if err.body is not None:
                self._send_raw(h, err.status, err.body, "text/html")
                return
            self._send(
                h,
                err.status,
                {
                    "RequestId": request_id,
                    "HostId": "ecs.aliyuncs.com",
                    "Code": err.code,
                    "Message": err.message,
                    "Recommend": f"https://api.aliyun.com/troubleshoot?q={err.code}",
                },
            )

    def _maybe_fail(self, action: str) -> None:
        with self._lock:
            queue = self._failures.get(action)
            if not queue:
                return
            failure = queue[0]
            failure.times -= 1
            if failure.times <= 0:
                queue.pop(0)
        raise ApiError(failure.code, failure.message, failure.status, failure.body)

    @classmethod
    def _send(cls, h: BaseHTTPRequestHandler, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode("utf-8")
        cls._send_raw(h, status, data, "application/json;charset=utf-8")

    @staticmethod
    def _send_raw(h: BaseHTTPRequestHandler, status: int, data: bytes, ctype: str) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    # -- actions ---------------------------------------------------------------------------

    def _region(self, params: dict[str, str]) -> str:
        region = params.get("RegionId", "")
        if not region:
            raise ApiError("MissingRegionId", "RegionId is mandatory for this action.")
        if region != self.region:
            raise ApiError("InvalidRegionId.NotFound", f"The region {region} does not exist.", 404)
        return region

    def _do_RunInstances(self, params: dict[str, str]) -> dict[str, Any]:
        region = self._region(params)
        for required in ("InstanceType", "ImageId"):
            if not params.get(required):
                raise ApiError(f"Missing{required}", f"{required} is mandatory for this action.")
        token = params.get("ClientToken")
        if token and token in self._state.tokens:
            ids = self._state.tokens[token]
            return {"InstanceIdSets": {"InstanceIdSet": list(ids)}, "TradePrice": 0}
        itype = self.types.get(params["InstanceType"])
        if itype is None:
            raise ApiError(
                "InvalidInstanceType.ValueNotSupported",
                f"The specified InstanceType {params['InstanceType']} is not valid.",
            )
        zone = params.get("ZoneId") or ""
        if zone and zone not in self.zones:
            raise ApiError("InvalidZoneId.NotFound", f"The zone {zone} does not exist.", 404)
        if zone in self.closed_zones:
            raise ApiError(
                "Zone.NotOpen", "The specified zone is not granted to you to buy resources yet."
            )
        if params.get("VSwitchId") in self.full_vswitches:
            raise ApiError(
                "QuotaExceeded.PrivateIpAddress", "Don't have enough private IPs in this switch"
            )
        strategy = params.get("SpotStrategy") or "NoSpot"
        spot = strategy in ("SpotWithPriceLimit", "SpotAsPriceGo")
        if spot:
            in_stock = {z: p for z, p in itype.spot.items() if not zone or z == zone}
            if not in_stock:
                raise ApiError(
                    "OperationDenied.NoStock",
                    "The requested resource is sold out in the specified zone; try other types "
                    "of resources or other regions and zones.",
                )
            zone = zone or min(in_stock, key=lambda z: in_stock[z])
            price = in_stock[zone]
            if strategy == "SpotWithPriceLimit":
                limit = float(params.get("SpotPriceLimit") or 0)
                if limit < price:
                    raise ApiError(
                        "InvalidSpotPriceLimit.LowerThanPublicPrice",
                        "The specified parameter SpotPriceLimit can't be lower than current "
                        "public price.",
                    )
        else:
            zone = zone or self.zones[0]
            price = itype.price
        deployment_set = self._check_set(params)
        held = self._pool_for(params, zone, itype.instance_type)
        if held is not None and spot:
            raise ApiError("InvalidParameter", "A spot instance cannot use a private pool.")
        amount = int(params.get("Amount") or 1)
        ids = []
        for _ in range(amount):
            iid = "i-" + uuid.uuid4().hex[:20]
            self._state.user_data[iid] = params.get("UserData", "")
            self._state.instances[iid] = {
                "InstanceId": iid,
                "InstanceName": params.get("InstanceName") or iid,
                "RegionId": region,
                "ZoneId": zone,
                "InstanceType": itype.instance_type,
                "ImageId": params["ImageId"],
                "Status": "Pending",
                "InstanceChargeType": params.get("InstanceChargeType") or "PostPaid",
                "SpotStrategy": strategy,
                "SpotPriceLimit": float(params.get("SpotPriceLimit") or 0),
                "SpotInterruptionBehavior": params.get("SpotInterruptionBehavior") or "Terminate",
                "Cpu": itype.cpu,
                "Memory": int(itype.memory_gib * 1024),
                "GPUAmount": itype.gpu_amount,
                "GPUSpec": itype.gpu_spec,
                "CreationTime": _now_text(),
                "StartTime": _now_text(),
                "OperationLocks": {"LockReason": []},
                "Tags": {"Tag": [{"TagKey": k, "TagValue": v} for k, v in _tags(params).items()]},
                "VpcAttributes": {
                    "VSwitchId": params.get("VSwitchId", ""),
                    "PrivateIpAddress": {
                        "IpAddress": [f"172.16.0.{len(self._state.instances) + 10}"]
                    },
                },
                "PublicIpAddress": {"IpAddress": []},
                "SecurityGroupIds": {"SecurityGroupId": [params.get("SecurityGroupId", "")]},
                "KeyPairName": params.get("KeyPairName", ""),
                "DeploymentSetId": deployment_set or "",
            }
            if held is not None:
                self._take(held, +1)
                self._state.instances[iid]["EcsCapacityReservationAttr"] = {
                    "CapacityReservationId": params["PrivatePoolOptions.Id"],
                    "CapacityReservationPreference": "Target",
                }
            self._state.fresh.add(iid)
            if params.get("RamRoleName"):
                self._state.ram_roles[iid] = params["RamRoleName"]
            ids.append(iid)
        if token:
            self._state.tokens[token] = ids
        return {"InstanceIdSets": {"InstanceIdSet": ids}, "TradePrice": price * amount}

    def _do_DescribeAccountAttributes(self, params: dict[str, str]) -> dict[str, Any]:
        """The account's attributes in the region (``AttributeName.N``: which; none: all),
        each as ``AttributeValues.ValueItem`` (``Value``, ``Count``)."""
        asked = [v for k, v in sorted(params.items()) if k.startswith("AttributeName.")]
        names = asked or sorted(self.account_attributes)
        items = [
            {
                "AttributeName": n,
                "AttributeValues": {
                    "ValueItem": [{"Value": self.account_attributes[n], "Count": 1}]
                },
            }
            for n in names
            if n in self.account_attributes
        ]
        return {"AccountAttributeItems": {"AccountAttributeItem": items}}

    def _do_DescribeSpotAdvice(self, params: dict[str, str]) -> dict[str, Any]:
        """The 30-day interruption rate of spot types per zone of the region (``RegionId``
        required; ``InstanceTypes.N``, at most 10, and ``ZoneId`` narrow it), as
        ``AvailableSpotZones.AvailableSpotZone[].AvailableSpotResources.AvailableSpotResource[]``."""
        region = self._region(params)
        types = [v for k, v in sorted(params.items()) if k.startswith("InstanceTypes.")]
        if len(types) > 10:
            raise ApiError("InvalidParameter", "InstanceTypes: at most 10 instance types.")
        zones: dict[str, list[dict[str, Any]]] = {}
        for (zone, itype), (rate, desc) in sorted(self.spot_advice.items()):
            if not zone.startswith(region) or (types and itype not in types):
                continue
            if params.get("ZoneId") and zone != params["ZoneId"]:
                continue
            zones.setdefault(zone, []).append(
                {
                    "InstanceType": itype,
                    "InterruptionRate": rate,
                    "InterruptRateDesc": desc,
                    "AverageSpotDiscount": 35,
                }
            )
        rows = [
            {"ZoneId": z, "AvailableSpotResources": {"AvailableSpotResource": r}}
            for z, r in zones.items()
        ]
        return {"RegionId": region, "AvailableSpotZones": {"AvailableSpotZone": rows}}

    def _do_DescribeInstances(self, params: dict[str, str]) -> dict[str, Any]:
        region = self._region(params)
        rows = [i for i in self._state.instances.values() if i["RegionId"] == region]
        if params.get("InstanceIds"):
            wanted = json.loads(params["InstanceIds"])
            rows = [i for i in rows if i["InstanceId"] in wanted]
        for key in ("ZoneId", "InstanceType", "Status", "InstanceName"):
            if params.get(key):
                rows = [i for i in rows if i.get(key) == params[key]]
        if params.get("LockReason"):
            rows = [
                i
                for i in rows
                if any(
                    lock.get("LockReason") == params["LockReason"]
                    for lock in i["OperationLocks"]["LockReason"]
                )
            ]
        for key, value in _tags(params).items():
            rows = [
                i
                for i in rows
                if any(t["TagKey"] == key and t["TagValue"] == value for t in i["Tags"]["Tag"])
            ]
        size = min(int(params.get("MaxResults") or params.get("PageSize") or 10), self.max_page)
        if size > 100:
            raise ApiError("InvalidParameter.MaxResults", "MaxResults is at most 100.")
        start = int(params.get("NextToken") or 0)
        page = rows[start : start + size]
        for inst in page:  # a new instance is Pending once, then Running
            if inst["InstanceId"] in self._state.fresh:
                self._state.fresh.discard(inst["InstanceId"])
            elif inst["Status"] == "Pending":
                inst["Status"] = "Running"
                inst["PublicIpAddress"] = {"IpAddress": ["47.96.0.1"]}
        answer = json.loads(json.dumps(page))
        nxt = str(start + size) if start + size < len(rows) else ""
        return {
            "TotalCount": len(rows),
            "PageSize": size,
            "NextToken": nxt,
            "Instances": {"Instance": answer},
        }

    def _do_DeleteInstances(self, params: dict[str, str]) -> dict[str, Any]:
        region = self._region(params)
        ids = _indexed(params, "InstanceId")
        if not ids:
            raise ApiError("MissingInstanceId", "InstanceId is mandatory for this action.")
        for iid in ids:
            inst = self._state.instances.get(iid)
            if inst is None or inst["RegionId"] != region:
                raise ApiError(
                    "InvalidInstanceId.NotFound", f"The specified InstanceId {iid} does not exist."
                )
            if inst["Status"] == "Running" and params.get("Force", "false").lower() != "true":
                raise ApiError(
                    "IncorrectInstanceStatus",
                    "The current status of the resource does not support this operation.",
                )
        for iid in ids:
            self._state.released[iid] = self._state.instances.pop(iid)
            self._give_back(self._state.released[iid])
        return {}

    def _do_DescribeInstanceTypes(self, params: dict[str, str]) -> dict[str, Any]:
        wanted = _indexed(params, "InstanceTypes")
        rows: list[dict[str, Any]] = [
            {
                "InstanceTypeId": t.instance_type,
                "InstanceTypeFamily": t.instance_type.split("-")[0],
                "CpuCoreCount": t.cpu,
                "MemorySize": t.memory_gib,
                "GPUAmount": t.gpu_amount,
                "GPUSpec": t.gpu_spec,
                "InstanceCategory": "GPU-accelerated",
            }
            for t in self.types.values()
            if not wanted or t.instance_type in wanted
        ]
        rows.append(  # a CPU type, so that the GPU filter is exercised
            {
                "InstanceTypeId": "ecs.g7.large",
                "CpuCoreCount": 2,
                "MemorySize": 8.0,
                "GPUAmount": 0,
                "GPUSpec": "",
            }
        )
        minimum = int(params.get("MinimumGPUAmount") or 0)
        rows = [r for r in rows if int(r["GPUAmount"]) >= minimum]
        if wanted:
            rows = [r for r in rows if r["InstanceTypeId"] in wanted]
        size = min(int(params.get("MaxResults") or 1600), self.max_page)
        start = int(params.get("NextToken") or 0)
        nxt = str(start + size) if start + size < len(rows) else ""
        return {"InstanceTypes": {"InstanceType": rows[start : start + size]}, "NextToken": nxt}

    def _do_DescribeAvailableResource(self, params: dict[str, str]) -> dict[str, Any]:
        self._region(params)
        zones = []
        for zone in self.zones:
            supported = [
                {
                    "Value": t.instance_type,
                    "Status": "Available" if zone in t.spot else "SoldOut",
                    "StatusCategory": "WithStock" if zone in t.spot else "WithoutStock",
                }
                for t in self.types.values()
            ]
            zones.append(
                {
                    "ZoneId": zone,
                    "RegionId": self.region,
                    "Status": "Available",
                    "StatusCategory": "WithStock",
                    "AvailableResources": {
                        "AvailableResource": [
                            {
                                "Type": "InstanceType",
                                "SupportedResources": {"SupportedResource": supported},
                            }
                        ]
                    },
                }
            )
        return {"AvailableZones": {"AvailableZone": zones}}

    def _do_DescribeSpotPriceHistory(self, params: dict[str, str]) -> dict[str, Any]:
        self._region(params)
        for required in ("InstanceType", "NetworkType"):
            if not params.get(required):
                raise ApiError(f"Missing{required}", f"{required} is mandatory for this action.")
        itype = self.types.get(params["InstanceType"])
        if itype is None:
            raise ApiError(
                "InvalidInstanceType.ValueNotSupported", "The specified InstanceType is not valid."
            )
        now = datetime.now(UTC)
        points = []
        for zone, price in sorted(itype.spot.items()):
            if params.get("ZoneId") and zone != params["ZoneId"]:
                continue
            for age, factor in ((timedelta(hours=1), 1.1), (timedelta(0), 1.0)):
                points.append(
                    {
                        "ZoneId": zone,
                        "InstanceType": itype.instance_type,
                        "IoOptimized": "optimized",
                        "NetworkType": params["NetworkType"],
                        "Timestamp": (now - age).strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "SpotPrice": round(price * factor, 4),
                        "OriginPrice": itype.price,
                    }
                )
        start = int(params.get("Offset") or 0)  # paged by Offset / NextOffset
        page = points[start : start + self.max_page]
        nxt = start + len(page) if start + len(page) < len(points) else 0
        return {
            "Currency": self.currency,
            "NextOffset": nxt,
            "SpotPrices": {"SpotPriceType": page},
        }
