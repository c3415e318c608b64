"""A small Tencent Cloud CVM API on 127.0.0.1, speaking the wire format the real SDK expects.

The official SDK (tencentcloud-sdk-python, TC3-HMAC-SHA256) sends ``POST /`` with a JSON body,
the action in ``X-TC-Action`` (version, region, timestamp in ``X-TC-*`` headers) and the
signature in ``Authorization``. Every answer is HTTP 200 with ``{"Response": {...}}``; an error
is ``{"Response": {"Error": {"Code", "Message"}, "RequestId"}}``, and the SDK notices it only
when the Content-Type is exactly ``application/json`` (what the cloud sends, and what this
server sends unless ``content_type`` is changed to show the trap).

The server keeps instances, honours ``ClientToken`` (a repeated RunInstances answers with the
first one's instances), checks a spot ``MaxPrice`` against its spot price, records every
request (action, decoded JSON body, headers without the signature), can be told to fail the
next calls of an action with a code (or with a bare HTTP status, as a gateway would), and can
take a spot instance back (``preempt``: TERMINATING, then ``release``: gone).

``TerminateInstances`` follows the documentation: the first call moves a pay-as-you-go
instance to the recycle bin (``SHUTDOWN``, ``IsolatedSource=MANMADE``), a second releases it.

Signatures are not verified; their presence is.
"""

from __future__ import annotations

import json
import random
import string
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes import LocalHTTPServer
from tests.fakes.tencent_groups import PlacementGroups

DEFAULT_REGION = "ap-guangzhou"
DEFAULT_ZONES = ("ap-guangzhou-3", "ap-guangzhou-4", "ap-guangzhou-6")
JSON = "application/json"

_SECRET_HEADER_WORDS = ("authorization", "signature", "token", "secret")


@dataclass(frozen=True, slots=True)
class CvmType:
    instance_type: str
    family: str
    type_name: str
    gpu: str
    gpu_count: float
    cpu: int
    memory_gb: int
    price: float  # POSTPAID_BY_HOUR, per hour
    zones: tuple[str, ...]  # zones that sell it pay-as-you-go
    spot: dict[str, float]  # zone -> spot price; a zone missing here has no spot stock


def default_types(zones: tuple[str, ...] = DEFAULT_ZONES) -> list[CvmType]:
    z3, z4, z6 = (list(zones) * 3)[:3]
    return [
        CvmType("GN7.2XLARGE32", "GN7", "GPU Compute GN7", "T4", 1, 8, 32, 1.30, (z3, z4, z6),
                {z3: 0.41, z4: 0.45}),
        CvmType("PNV4.7XLARGE116", "PNV4", "GPU Compute PNV4", "A10", 1, 28, 116, 2.90,
                (z3, z6), {z6: 0.90}),
        CvmType("GT4.4XLARGE96", "GT4", "GPU Compute GT4", "A100", 1, 16, 96, 4.50, (z4,),
                {z4: 1.40}),
        CvmType("GN7vw.LARGE14", "GN7vw", "GPU Rendering GN7vw", "T4", 0.25, 4, 14, 0.45, (z3,),
                {z3: 0.15}),
        CvmType("S5.MEDIUM4", "S5", "Standard S5", "", 0, 2, 4, 0.08, (z3, z4, z6),
                {z3: 0.02}),
    ]  # fmt: skip


@dataclass(slots=True)
class Recorded:
    """One request as the SDK sent it."""

    action: str
    params: dict[str, Any]
    headers: dict[str, str]


@dataclass(slots=True)
class _Failure:
    code: str
    times: int
    status: int
    message: str


class ApiError(Exception):
    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(code)
        self.code = code
        self.message = message or code


@dataclass
class _State:
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)
    tokens: dict[str, list[str]] = field(default_factory=dict)
    released: dict[str, dict[str, Any]] = field(default_factory=dict)
    fresh: set[str] = field(default_factory=set)


def _now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _new_id() -> str:
    return "ins-" + "".join(random.choices(string.ascii_lowercase + string.digits, k=8))


class TencentFakeServer(PlacementGroups, LocalHTTPServer):
    """CVM on 127.0.0.1:<port>; ``endpoint`` is what ``HttpProfile(endpoint=...)`` takes."""

    _api_error = ApiError

    def __init__(
        self,
        *,
        region: str = DEFAULT_REGION,
        zones: tuple[str, ...] = DEFAULT_ZONES,
        types: list[CvmType] | None = None,
        known_secret_ids: set[str] | None = None,
    ) -> None:
        self.region = region
        self.zones = zones
        self.types = {t.instance_type: t for t in (types or default_types(zones))}
        self.known_secret_ids = known_secret_ids
        #: ``DescribeAccountQuota``'s ``AccountQuota`` sets by name (``PostPaidQuotaSet``,
        #: ``SpotPaidQuotaSet``, ...: lists of ``{Zone, UsedQuota, RemainingQuota,
        #: TotalQuota}``, instances per zone; CVM API 2017-03-12, ``AccountQuota``)
        self.account_quota: dict[str, list[dict[str, Any]]] = {
            "PostPaidQuotaSet": [
                {"Zone": z, "UsedQuota": 0, "RemainingQuota": 30, "TotalQuota": 30} for z in zones
            ],
            "SpotPaidQuotaSet": [
                {"Zone": z, "UsedQuota": 0, "RemainingQuota": 30, "TotalQuota": 30} for z in zones
            ],
        }
        #: subnets without a free IP (RunInstances into one: ``LimitExceeded.VpcSubnetNum``)
        self.full_subnets: set[str] = set()
        #: the Content-Type of every answer; the cloud's is exactly ``application/json``
        self.content_type = JSON
        #: CVM's ``ItemPrice`` (API 2017-03-12) names no currency; a test may set one here to
        #: play an answer that does (``Price.InstancePrice.Currency``)
        self.price_currency = ""
        #: the most instances one DescribeInstances page holds, below ``Limit`` (the service
        #: may answer fewer; ``TotalCount`` says how many match): small, every list pages
        self.max_page = 100
        self.requests: list[Recorded] = []
        self._failures: dict[str, list[_Failure]] = {}
        self._state = _State()
        self._groups: dict[str, dict[str, Any]] = {}  # placement groups (tencent_groups.py)
        self._lock = threading.RLock()

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- test controls ---------------------------------------------------------------------

    def reset(self) -> None:
        with self._lock:
            self._state = _State()
            self._groups = {}
            self._failures.clear()
            self.requests.clear()
            self.content_type = JSON

    def inject_error(
        self,
        action: str,
        code: str = "InternalError",
        *,
        times: int = 1,
        status: int = 200,
        message: str | None = None,
    ) -> None:
        """The next ``times`` calls of ``action`` fail with ``code`` in the 200 error envelope,
        or, with ``status`` other than 200, with that bare HTTP status (a gateway's answer)."""
        with self._lock:
            self._failures.setdefault(action, []).append(
                _Failure(code, times, status, message or f"{code} (injected)")
            )

    def preempt(self, instance_id: str) -> None:
        """Take a spot instance back: it goes TERMINATING (then ``release`` removes it)."""
        with self._lock:
            inst = self._state.instances[instance_id]
            if inst["InstanceChargeType"] != "SPOTPAID":
                raise ValueError(f"{instance_id} is not a spot instance")
            inst["InstanceState"] = "TERMINATING"
            self._state.fresh.discard(instance_id)

    def release(self, instance_id: str) -> None:
        with self._lock:
            self._state.released[instance_id] = self._state.instances.pop(instance_id)

    def instances(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return json.loads(json.dumps(self._state.instances))

    def calls(self, action: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.action == action]

    # -- HTTP ----------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        action = h.headers.get("X-TC-Action", "")
        headers = {
            k.lower(): v
            for k, v in h.headers.items()
            if not any(word in k.lower() for word in _SECRET_HEADER_WORDS)
        }
        try:
            params = json.loads(raw) if raw else {}
        except ValueError:
            params = {"_raw": raw.decode("utf-8", "replace")}
        with self._lock:
            self.requests.append(Recorded(action, params, headers))
        request_id = str(uuid.uuid4())
        try:
            if h.command != "POST" or h.path != "/":
                raise ApiError("UnsupportedProtocol", f"{h.command} {h.path}")
            auth = h.headers.get("Authorization", "")
            if not auth.startswith("TC3-HMAC-SHA256 ") or "Signature=" not in auth:
                raise ApiError("AuthFailure.SignatureFailure", "The request has no signature.")
            if self.known_secret_ids is not None:
                secret_id = auth.partition("Credential=")[2].partition("/")[0]
                if secret_id not in self.known_secret_ids:
                    raise ApiError("AuthFailure.SecretIdNotFound", "The SecretId is not found.")
            for header in ("X-TC-Version", "X-TC-Timestamp", "X-TC-Region"):
                if not h.headers.get(header):
                    raise ApiError("MissingParameter", f"The header {header} is missing.")
            if h.headers["X-TC-Region"] != self.region:
                raise ApiError("UnsupportedRegion", f"{h.headers['X-TC-Region']} is not supported.")
            failure = self._next_failure(action)
            if failure is not None:
                if failure.status != 200:
                    self._send_raw(h, failure.status, b"<html>502 Bad Gateway</html>", "text/html")
                    return
                raise ApiError(failure.code, failure.message)
            handler = getattr(self, f"_do_{action}", None)
            if handler is None:
                raise ApiError("InvalidAction", f"The action {action} does not exist.")
            if not isinstance(params, dict):
                raise ApiError("InvalidParameter", "The body is not a JSON object.")
            with self._lock:
                payload = handler(params)
            payload["RequestId"] = request_id
            self._send(h, {"Response": payload})
        except ApiError as err:
            self._send(
                h,
                {
                    "Response": {
                        "Error": {"Code": err.code, "Message": err.message},
                        "RequestId": request_id,
                    }
                },
            )

    def _next_failure(self, action: str) -> _Failure | None:
        with self._lock:
            queue = self._failures.get(action)
            if not queue:
                return None
            failure = queue[0]
            failure.times -= 1
            if failure.times <= 0:
                queue.pop(0)
            return failure

    def _send(self, h: BaseHTTPRequestHandler, payload: dict[str, Any]) -> None:
        self._send_raw(h, 200, json.dumps(payload).encode("utf-8"), self.content_type)

    @staticmethod
    def _send_raw(h: BaseHTTPRequestHandler, status: int, data: bytes, ctype: str) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    # -- actions ---------------------------------------------------------------------------

    def _type(self, params: dict[str, Any]) -> CvmType:
        name = params.get("InstanceType")
        if not name:
            raise ApiError("MissingParameter", "The parameter InstanceType is missing.")
        itype = self.types.get(str(name))
        if itype is None:
            raise ApiError(
                "InvalidParameterValue.InstanceTypeNotFound",
                f"The instance type {name} is unknown.",
            )
        return itype

    def _zone(self, params: dict[str, Any]) -> str:
        zone = str((params.get("Placement") or {}).get("Zone") or "")
        if not zone:
            raise ApiError("MissingParameter", "The parameter Placement.Zone is missing.")
        if zone not in self.zones:
            raise ApiError(
                "InvalidZone.MismatchRegion", f"The zone {zone} is not in {self.region}."
            )
        return zone

    def _spot_price(self, itype: CvmType, zone: str, params: dict[str, Any]) -> float:
        market = params.get("InstanceMarketOptions") or {}
        if market.get("MarketType") != "spot":
            raise ApiError(
                "InvalidParameterValue.InvalidInstanceMarketOptions",
                "SPOTPAID needs InstanceMarketOptions.MarketType=spot.",
            )
        if zone not in itype.spot:
            raise ApiError(
                "ResourcesSoldOut.SpecifiedInstanceType",
                f"The spot {itype.instance_type} is sold out in {zone}.",
            )
        return itype.spot[zone]

    def _do_RunInstances(self, params: dict[str, Any]) -> dict[str, Any]:
        itype = self._type(params)
        zone = self._zone(params)
        if not params.get("ImageId"):
            raise ApiError("MissingParameter", "The parameter ImageId is missing.")
        token = params.get("ClientToken")
        if token and token in self._state.tokens:
            return {"InstanceIdSet": list(self._state.tokens[token])}
        subnet = (params.get("VirtualPrivateCloud") or {}).get("SubnetId")
        if subnet in self.full_subnets:
            raise ApiError("LimitExceeded.VpcSubnetNum", f"The subnet {subnet} has no free IP.")
        charge = params.get("InstanceChargeType") or "POSTPAID_BY_HOUR"
        if charge == "SPOTPAID":
            price = self._spot_price(itype, zone, params)
            options = (params.get("InstanceMarketOptions") or {}).get("SpotOptions") or {}
            if float(options.get("MaxPrice") or 0) < price:
                raise ApiError(
                    "InvalidParameterValue.InsufficientPrice",
                    "The MaxPrice is lower than the current spot price.",
                )
        elif charge == "POSTPAID_BY_HOUR":
            if zone not in itype.zones:
                raise ApiError(
                    "ResourceInsufficient.SpecifiedInstanceType",
                    f"{itype.instance_type} is sold out in {zone}.",
                )
        else:
            raise ApiError("InvalidParameterValue", f"InstanceChargeType {charge} is not valid.")
        tags = [
            {"Key": t.get("Key"), "Value": t.get("Value")}
            for spec in params.get("TagSpecification") or ()
            if spec.get("ResourceType") == "instance"
            for t in spec.get("Tags") or ()
        ]
        group = self._check_group(params)
        ids = []
        for _ in range(int(params.get("InstanceCount") or 1)):
            iid = _new_id()
            self._state.instances[iid] = {
                "InstanceId": iid,
                "InstanceName": params.get("InstanceName") or "未命名",
                "InstanceType": itype.instance_type,
                "Placement": {"Zone": zone, "ProjectId": 0},
                "CPU": itype.cpu,
                "Memory": itype.memory_gb,
                "InstanceChargeType": charge,
                "InstanceState": "PENDING",
                "RestrictState": "NORMAL",
                "ImageId": params["ImageId"],
                "CreatedTime": _now_text(),
                "ExpiredTime": None,
                "Tags": tags,
                "PrivateIpAddresses": [f"10.0.0.{len(self._state.instances) + 10}"],
                "PublicIpAddresses": None,
                "LatestOperation": "RunInstances",
                "LatestOperationState": "SUCCESS",
                "LatestOperationRequestId": str(uuid.uuid4()),
                "IsolatedSource": "NOTISOLATED",
                "StopChargingMode": "NOT_APPLICABLE",
                "GPUInfo": {"GPUCount": itype.gpu_count, "GPUType": [itype.gpu]},
                "VirtualPrivateCloud": params.get("VirtualPrivateCloud") or {},
                "CamRoleName": params.get("CamRoleName") or "",  # as the Instance reports it
                "_UserData": params.get("UserData", ""),
                "_Group": group,
            }
            self._state.fresh.add(iid)
            ids.append(iid)
        if token:
            self._state.tokens[token] = ids
        return {"InstanceIdSet": ids}

    def _matches(self, inst: dict[str, Any], name: str, values: list[Any]) -> bool:
        if name.startswith("tag:"):
            key = name[4:]
            return any(t["Key"] == key and t["Value"] in values for t in inst["Tags"])
        if name == "tag-key":
            return any(t["Key"] in values for t in inst["Tags"])
        field_of = {
            "instance-charge-type": inst["InstanceChargeType"],
            "zone": inst["Placement"]["Zone"],
            "instance-id": inst["InstanceId"],
            "instance-name": inst["InstanceName"],
            "instance-state": inst["InstanceState"],
            "instance-type": inst["InstanceType"],
        }
        if name not in field_of:
            raise ApiError("InvalidFilter", f"The filter {name} is not supported.")
        return field_of[name] in values

    def _do_DescribeInstances(self, params: dict[str, Any]) -> dict[str, Any]:
        ids = params.get("InstanceIds")
        filters = params.get("Filters")
        if ids and filters:
            raise ApiError(
                "InvalidParameter", "InstanceIds and Filters cannot be specified together."
            )
        if filters and len(filters) > 10:
            raise ApiError("InvalidParameterValue.LimitExceeded", "At most 10 filters.")
        if any(len(f.get("Values") or ()) > 5 for f in filters or ()):
            raise ApiError("InvalidParameterValue.LimitExceeded", "At most 5 values a filter.")
        rows = list(self._state.instances.values())
        if ids:
            for iid in ids:
                if not str(iid).startswith("ins-"):
                    raise ApiError("InvalidInstanceId.Malformed", f"{iid} is malformed.")
            rows = [i for i in rows if i["InstanceId"] in ids]
        for f in filters or ():
            rows = [i for i in rows if self._matches(i, str(f.get("Name")), list(f.get("Values")))]
        limit = int(params.get("Limit") or 20)
        if limit > 100:
            raise ApiError("InvalidParameterValue.LimitExceeded", "Limit is at most 100.")
        offset = int(params.get("Offset") or 0)
        page = rows[offset : offset + min(limit, self.max_page)]
        for inst in page:  # a new instance is PENDING once, then RUNNING
            if inst["InstanceId"] in self._state.fresh:
                self._state.fresh.discard(inst["InstanceId"])
            elif inst["InstanceState"] == "PENDING":
                inst["InstanceState"] = "RUNNING"
                inst["PublicIpAddresses"] = ["129.204.0.1"]
        answer = [{k: v for k, v in i.items() if not k.startswith("_")} for i in page]
        answer = json.loads(json.dumps(answer))
        return {"TotalCount": len(rows), "InstanceSet": answer}

    def _do_TerminateInstances(self, params: dict[str, Any]) -> dict[str, Any]:
        ids = [str(i) for i in params.get("InstanceIds") or ()]
        if not ids:
            raise ApiError("MissingParameter", "The parameter InstanceIds is missing.")
        if len(ids) > 100:
            raise ApiError("InvalidParameterValue.LimitExceeded", "At most 100 instances.")
        for iid in ids:
            if not iid.startswith("ins-"):
                raise ApiError("InvalidInstanceId.Malformed", f"{iid} is malformed.")
            if iid not in self._state.instances:
                raise ApiError("InvalidInstanceId.NotFound", f"The instance {iid} does not exist.")
        for iid in ids:
            inst = self._state.instances[iid]
            if inst["InstanceState"] in ("SHUTDOWN", "TERMINATING"):
                self._state.released[iid] = self._state.instances.pop(iid)  # second call: gone
                continue
            inst["InstanceState"] = "SHUTDOWN"  # first call: the recycle bin
            inst["IsolatedSource"] = "MANMADE"
            inst["LatestOperation"] = "TerminateInstances"
            inst["LatestOperationState"] = "SUCCESS"
            self._state.fresh.discard(iid)
        return {}

    def _zone_rows(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for t in self.types.values():
            for zone in self.zones:
                for charge in ("POSTPAID_BY_HOUR", "SPOTPAID"):
                    if zone not in t.zones and zone not in t.spot:
                        continue
                    selling = zone in (t.spot if charge == "SPOTPAID" else t.zones)
                    price = t.spot.get(zone, t.price) if charge == "SPOTPAID" else t.price
                    rows.append(
                        {
                            "Zone": zone,
                            "InstanceType": t.instance_type,
                            "InstanceChargeType": charge,
                            "NetworkCard": 0,
                            "Externals": {},
                            "Cpu": t.cpu,
                            "Memory": t.memory_gb,
                            "InstanceFamily": t.family,
                            "TypeName": t.type_name,
                            "LocalDiskTypeList": [],
                            "Status": "SELL" if selling else "SOLD_OUT",
                            "StatusCategory": "EnoughStock" if selling else "WithoutStock",
                            "SoldOutReason": "" if selling else "Insufficient resources",
                            "Price": {
                                "UnitPrice": t.price,
                                "ChargeUnit": "HOUR",
                                "UnitPriceDiscount": price,
                                "Discount": round(100 * price / t.price, 1),
                            },
                            "InstanceBandwidth": 10,
                            "InstancePps": 100,
                            "StorageBlockAmount": 0,
                            "CpuType": "Intel Xeon Cascade Lake 8255C(2.5 GHz)",
                            "Gpu": int(t.gpu_count),
                            "GpuCount": t.gpu_count,
                            "Fpga": 0,
                            "Frequency": "2.5/3.1GHz",
                            "Remark": f"{t.type_name} {t.gpu}" if t.gpu else t.type_name,
                        }
                    )
        return rows

    def _do_DescribeAccountQuota(self, params: dict[str, Any]) -> dict[str, Any]:
        """The account's quotas in the region (``Filters``: ``zone``, ``quota-type``)."""
        sets = {k: list(v) for k, v in self.account_quota.items()}
        for f in params.get("Filters") or ():
            values = f.get("Values") or ()
            if f.get("Name") == "zone":
                sets = {k: [r for r in v if r.get("Zone") in values] for k, v in sets.items()}
            elif f.get("Name") == "quota-type":
                sets = {k: v for k, v in sets.items() if k.removesuffix("Set") in values}
            else:
                raise ApiError("InvalidFilter", f"The filter {f.get('Name')} is not supported.")
        return {
            "AppId": 1250000000,
            "AccountQuotaOverview": {"Region": self.region, "AccountQuota": sets},
        }

    def _do_DescribeZoneInstanceConfigInfos(self, params: dict[str, Any]) -> dict[str, Any]:
        keys = {
            "zone": "Zone",
            "instance-family": "InstanceFamily",
            "instance-type": "InstanceType",
            "instance-charge-type": "InstanceChargeType",
        }
        rows = self._zone_rows()
        for f in params.get("Filters") or ():
            key = keys.get(str(f.get("Name")))
            if key is None:
                raise ApiError("InvalidFilter", f"The filter {f.get('Name')} is not supported.")
            rows = [r for r in rows if r[key] in (f.get("Values") or ())]
        return {"InstanceTypeQuotaSet": rows}

    def _do_InquiryPriceRunInstances(self, params: dict[str, Any]) -> dict[str, Any]:
        itype = self._type(params)
        zone = self._zone(params)
        if not params.get("ImageId"):
            raise ApiError("MissingParameter", "The parameter ImageId is missing.")
        charge = params.get("InstanceChargeType") or "POSTPAID_BY_HOUR"
        if charge == "SPOTPAID":
            price = self._spot_price(itype, zone, params)
        elif zone in itype.zones:
            price = itype.price
        else:
            raise ApiError(
                "ResourceInsufficient.SpecifiedInstanceType",
                f"{itype.instance_type} is sold out in {zone}.",
            )
        answer: dict[str, Any] = {
            "Price": {
                "InstancePrice": {
                    "UnitPrice": itype.price,
                    "ChargeUnit": "HOUR",
                    "UnitPriceDiscount": price,
                    "Discount": round(100 * price / itype.price, 1),
                },
                "BandwidthPrice": {"UnitPrice": 0.0, "ChargeUnit": "GB", "Discount": 100},
            }
        }
        if self.price_currency:
            answer["Price"]["InstancePrice"]["Currency"] = self.price_currency
        return answer
