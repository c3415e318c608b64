"""A small AWS Price List Query API (``pricing``) on 127.0.0.1, in its own wire format.

moto implements no part of the Pricing API (0 of its 5 operations), so this speaks it to the
real boto3 client, as documented (API 2017-10-15, botocore's ``pricing`` model):

- awsJson1.1: ``POST /`` with ``X-Amz-Target: AWSPriceListService.GetProducts``,
  ``Content-Type: application/x-amz-json-1.1`` and a SigV4 ``Authorization`` (its presence is
  checked, the signature is not).
- ``GetProducts`` takes ``ServiceCode``, ``Filters`` (``Type`` TERM_MATCH/EQUALS/CONTAINS/
  ANY_OF/NONE_OF, ``Field``, ``Value``: every filter must hold), ``FormatVersion`` (aws_v1),
  ``MaxResults`` (1-100) and ``NextToken``; it answers ``{"FormatVersion", "PriceList": [<JSON
  text of one product>...], "NextToken"}``. Each product is ``{"product": {"productFamily",
  "attributes", "sku"}, "serviceCode", "terms": {"OnDemand": {<offer term>: {"priceDimensions":
  {<rate code>: {"unit": "Hrs", "pricePerUnit": {"USD": "..."}}}}}}, "version",
  "publicationDate"}``, the layout of the public price list.
- Errors: HTTP 400 with ``{"__type": "...#InvalidParameterException", "Message"}`` (also
  ``ThrottlingException``, ``NotFoundException``), as awsJson services send them.

The catalog holds, for each instance type and region, the Linux shared-tenancy on-demand row
and the rows a careless filter would also match (Windows, dedicated tenancy, SQL Server
pre-installed, capacity reservations), so that the adapter's filters are what picks the price.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes import LocalHTTPServer

AMZ_JSON = "application/x-amz-json-1.1"
TARGET_PREFIX = "AWSPriceListService."

#: (instance type, region code) -> Linux shared on-demand USD per hour
ON_DEMAND: dict[tuple[str, str], float] = {
    ("p4d.24xlarge", "us-east-1"): 32.7726,
    ("g5.xlarge", "us-east-1"): 1.006,
    ("g5.2xlarge", "us-east-1"): 1.212,
    ("p5.48xlarge", "us-east-1"): 98.32,
    ("g4dn.xlarge", "us-east-1"): 0.526,
    ("g6.xlarge", "us-east-1"): 0.8048,
    ("g5.xlarge", "us-west-2"): 1.006,
    ("p4d.24xlarge", "us-west-2"): 32.7726,
}

#: (instance type, region code) -> Reserved terms of the Linux shared row, as the price list
#: gives them: (LeaseContractLength, OfferingClass, PurchaseOption, upfront USD, USD per hour)
RESERVED: dict[tuple[str, str], tuple[tuple[str, str, str, float, float], ...]] = {
    ("p4d.24xlarge", "us-east-1"): (
        ("1yr", "standard", "All Upfront", 168_000.0, 0.0),
        ("1yr", "standard", "No Upfront", 0.0, 20.5),
        ("1yr", "standard", "Partial Upfront", 84_000.0, 9.6),
        ("3yr", "standard", "All Upfront", 315_000.0, 0.0),
        ("3yr", "convertible", "No Upfront", 0.0, 17.1),
    ),
}

LOCATIONS = {"us-east-1": "US East (N. Virginia)", "us-west-2": "US West (Oregon)"}

#: the variants of each row: (operatingSystem, tenancy, preInstalledSw, capacitystatus, factor)
VARIANTS = (  # the service's order is its own: the plain Linux row is not first
    ("Linux", "Shared", "SQL Std", "Used", 1.6),
    ("Windows", "Shared", "NA", "Used", 1.18),
    ("Linux", "Shared", "NA", "Used", 1.0),
    ("Linux", "Dedicated", "NA", "Used", 1.1),
    ("Linux", "Shared", "NA", "UnusedCapacityReservation", 0.5),
)


@dataclass(slots=True)
class Recorded:
    target: str
    body: dict[str, Any]
    headers: dict[str, str]


class PricingError(Exception):
    def __init__(self, kind: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.kind, self.message, self.status = kind, message, status


def product(
    itype: str, region: str, price: float, variant: tuple[str, str, str, str, float]
) -> str:
    """One price list entry, as the JSON text GetProducts puts in ``PriceList``."""
    os_, tenancy, software, capacity, factor = variant
    sku = uuid.uuid5(uuid.NAMESPACE_URL, f"{itype}/{region}/{variant}").hex[:16].upper()
    term = f"{sku}.JRTCKXETXF"
    doc = {
        "product": {
            "productFamily": "Compute Instance",
            "attributes": {
                "servicecode": "AmazonEC2",
                "instanceType": itype,
                "instanceFamily": "GPU instance",
                "regionCode": region,
                "location": LOCATIONS.get(region, region),
                "locationType": "AWS Region",
                "operatingSystem": os_,
                "tenancy": tenancy,
                "preInstalledSw": software,
                "capacitystatus": capacity,
                "licenseModel": "No License required",
                "operation": "RunInstances",
                "usagetype": f"BoxUsage:{itype}",
            },
            "sku": sku,
        },
        "serviceCode": "AmazonEC2",
        "terms": {
            "OnDemand": {
                term: {
                    "priceDimensions": {
                        f"{term}.6YS6EN2CT7": {
                            "unit": "Hrs",
                            "endRange": "Inf",
                            "description": f"${price * factor:.4f} per On Demand {os_} "
                            f"{itype} Instance Hour",
                            "appliesTo": [],
                            "rateCode": f"{term}.6YS6EN2CT7",
                            "beginRange": "0",
                            "pricePerUnit": {"USD": f"{price * factor:.10f}"},
                        }
                    },
                    "sku": sku,
                    "effectiveDate": "2026-11-01T00:00:00Z",
                    "offerTermCode": "JRTCKXETXF",
                    "termAttributes": {},
                }
            },
            "Reserved": _reserved(sku, RESERVED.get((itype, region), ()), factor),
        },
        "version": "20261101000000",
        "publicationDate": "2026-11-01T00:00:00Z",
    }
    return json.dumps(doc)


def _reserved(
    sku: str, terms: tuple[tuple[str, str, str, float, float], ...], factor: float
) -> dict[str, Any]:
    """The ``terms.Reserved`` of a product: one offer term per lease, class and purchase
    option, its upfront fee in a ``Quantity`` dimension and its rate in an ``Hrs`` one."""
    out: dict[str, Any] = {}
    for lease, klass, option, upfront, hourly in terms:
        code = uuid.uuid5(uuid.NAMESPACE_URL, f"{sku}/{lease}/{klass}/{option}").hex[:10].upper()
        term = f"{sku}.{code}"
        dims = {
            f"{term}.2TG2D8R56U": {
                "unit": "Quantity",
                "description": "Upfront Fee",
                "rateCode": f"{term}.2TG2D8R56U",
                "pricePerUnit": {"USD": f"{upfront * factor:.0f}"},
                "appliesTo": [],
            },
            f"{term}.6YS6EN2CT7": {
                "unit": "Hrs",
                "endRange": "Inf",
                "beginRange": "0",
                "description": f"{option} {klass} reserved hour",
                "rateCode": f"{term}.6YS6EN2CT7",
                "pricePerUnit": {"USD": f"{hourly * factor:.10f}"},
                "appliesTo": [],
            },
        }
        out[term] = {
            "priceDimensions": dims,
            "sku": sku,
            "effectiveDate": "2026-11-01T00:00:00Z",
            "offerTermCode": code,
            "termAttributes": {
                "LeaseContractLength": lease,
                "OfferingClass": klass,
                "PurchaseOption": option,
            },
        }
    return out


def _holds(attrs: dict[str, str], f: dict[str, Any]) -> bool:
    kind, field, value = f.get("Type"), str(f.get("Field", "")), str(f.get("Value", ""))
    have = attrs.get(field)
    if kind in ("TERM_MATCH", "EQUALS"):
        return have == value
    if kind == "CONTAINS":
        return have is not None and value in have
    if kind in ("ANY_OF", "NONE_OF"):
        values = [v.strip() for v in value.split(",")]
        return (have in values) if kind == "ANY_OF" else (have not in values)
    raise PricingError("InvalidParameterException", f"Invalid filter type {kind!r}")


class PricingServer(LocalHTTPServer):
    """GetProducts on 127.0.0.1; ``endpoint`` is what ``boto3.client("pricing", endpoint_url=)``
    takes. ``max_page`` caps a page below ``MaxResults`` (the service may return fewer)."""

    verbs = ("POST",)

    def __init__(self, *, max_page: int = 100) -> None:
        self.max_page = max_page
        self.requests: list[Recorded] = []
        self.fail_next: list[tuple[str, int]] = []  # (exception kind, status)
        self.rows = [
            (itype, region, product(itype, region, price, v))
            for (itype, region), price in sorted(ON_DEMAND.items())
            for v in VARIANTS
        ]
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def calls(self, operation: str = "GetProducts") -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.target == TARGET_PREFIX + operation]

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        target = h.headers.get("X-Amz-Target", "")
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        headers = {k.lower(): v for k, v in h.headers.items() if k.lower() != "authorization"}
        with self._lock:
            self.requests.append(Recorded(target, body, headers))
            failure = self.fail_next.pop(0) if self.fail_next else None
        try:
            if failure is not None:
                raise PricingError(failure[0], f"{failure[0]} (injected)", failure[1])
            if not h.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256 "):
                raise PricingError("MissingAuthenticationTokenException", "Missing token", 403)
            if h.headers.get("Content-Type", "").split(";")[0] != AMZ_JSON:
                raise PricingError("SerializationException", "wrong Content-Type")
            if target != TARGET_PREFIX + "GetProducts":
                raise PricingError("UnknownOperationException", f"unknown {target!r}")
            payload = self._get_products(body)
            self._send(h, 200, payload)
        except PricingError as err:
            self._send(
                h,
                err.status,
                {"__type": f"com.amazonaws.pricing#{err.kind}", "Message": err.message},
            )

    def _get_products(self, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("ServiceCode") != "AmazonEC2":
            raise PricingError("NotFoundException", f"no service {body.get('ServiceCode')!r}")
        if body.get("FormatVersion", "aws_v1") != "aws_v1":
            raise PricingError("InvalidParameterException", "FormatVersion must be aws_v1")
        size = int(body.get("MaxResults") or 100)
        if not 1 <= size <= 100:
            raise PricingError("InvalidParameterException", "MaxResults must be 1 to 100")
        filters = body.get("Filters") or []
        rows = []
        for _, _, text in self.rows:
            attrs = json.loads(text)["product"]["attributes"]
            if all(_holds(attrs, f) for f in filters):
                rows.append(text)
        start = int(body.get("NextToken") or 0)
        step = min(size, self.max_page)
        page = rows[start : start + step]
        out: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": page}
        if start + step < len(rows):
            out["NextToken"] = str(start + step)
        return out

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", AMZ_JSON)
        h.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
