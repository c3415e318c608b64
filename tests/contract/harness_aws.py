"""AWS contract harness: the real AWSProvider and boto3 against moto's server on 127.0.0.1.

- One ``ThreadedMotoServer`` per test process (port 0), reset with ``POST /moto-api/reset``
  for every harness.
- Launch requests are recorded from the wire: a ``before-send.ec2`` hook on the adapter's own
  client sees the signed request just before it goes out, and its form body is decoded.
- Errors are injected by the same hook answering with EC2's real XML error document and
  HTTP status, so botocore parses it and the adapter classifies it as it would in the cloud.
- A preemption is made in moto's backend, in-process: the instance is terminated and its state
  reason set to ``Server.SpotInstanceTermination`` (moto internals; moto is pinned < 5.3).
- moto has no placement groups: tests/fakes/aws_placement.py adds EC2's three actions (and
  ``Placement.GroupName`` at RunInstances) to moto's server before it starts; a launch's group
  is read off the wire as its ``Placement.GroupName`` (``wire_placement``).
"""

from __future__ import annotations

import atexit
import threading
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, ClassVar
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

from fakes.aws_placement import install as install_placement_groups
from harness import CONTRACT_RETRY

from providers.aws import AWSProvider
from providers.base import ErrorKind
from provisioner.core.models import Market, Offer

REGION = "us-east-1"
ZONE = "us-east-1a"
ACCESS_KEY = "AKIAPROVISIONERTEST"
SECRET = "contract-aws-secret-KEY/never+logged0123456789"

#: adapter operation -> EC2 action
OPERATIONS = {
    "launch": "RunInstances",
    "get": "DescribeInstances",
    "list": "DescribeInstances",
    "terminate": "TerminateInstances",
    "offers": "DescribeInstanceTypes",
    "prices": "DescribeSpotPriceHistory",
    "ensure-group": "CreatePlacementGroup",
    "list-groups": "DescribePlacementGroups",
    "delete-group": "DeletePlacementGroup",
}
#: HTTP status EC2 sends with each error code (client errors are 400 unless listed)
STATUS = {
    "InsufficientInstanceCapacity": 500,
    "InternalError": 500,
    "Unavailable": 503,
    "RequestLimitExceeded": 503,
    "AuthFailure": 401,
    "UnauthorizedOperation": 403,
}

_server: Any = None
_image: str | None = None
_server_lock = threading.Lock()


def _endpoint() -> str:
    """The moto server's URL, started on first use and stopped when the process exits."""
    global _server
    with _server_lock:
        if _server is None:
            from moto.server import ThreadedMotoServer

            install_placement_groups()
            _list_fewer_instance_types()
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            server.start()
            atexit.register(server.stop)
            _server = server
        host, port = _server.get_host_and_port()
    return f"http://{host}:{port}"


def _list_fewer_instance_types() -> None:
    """moto lists all of its 1,395 instance types in every DescribeInstanceTypes without
    names (seconds of XML, made and parsed, for each adapter that lists its offers): the
    listing here holds the 65 types with a GPU (whole or fractional) and every 40th other
    one, which the adapter must leave out. A type asked for by name is found as before."""
    from moto.ec2.models.instance_types import INSTANCE_TYPES, InstanceTypeBackend

    every = InstanceTypeBackend.describe_instance_types
    names = sorted(INSTANCE_TYPES)
    others = [n for n in names if not INSTANCE_TYPES[n].get("GpuInfo")]
    listed = {n for n in names if INSTANCE_TYPES[n].get("GpuInfo")} | set(others[::40])

    def describe(self: Any, instance_types: Any = None, filters: Any = None) -> Any:
        found = every(self, instance_types, filters)
        return found if instance_types else [t for t in found if t["InstanceType"] in listed]

    InstanceTypeBackend.describe_instance_types = describe  # type: ignore[method-assign]


class _Raw:
    """The body of a canned response, in the shape botocore reads (``stream()``)."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def error_response(code: str, message: str) -> tuple[int, dict[str, str], bytes]:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{escape(code)}</Code>"
        f"<Message>{escape(message)}</Message></Error></Errors>"
        f"<RequestID>{uuid.uuid4()}</RequestID></Response>"
    ).encode()
    headers = {"Content-Type": "text/xml;charset=UTF-8", "Server": "AmazonEC2"}
    return STATUS.get(code, 400), headers, body


class AWSHarness:
    name = "aws"
    error_codes: ClassVar[dict[ErrorKind, str]] = {
        ErrorKind.CAPACITY: "InsufficientInstanceCapacity",
        ErrorKind.QUOTA: "VcpuLimitExceeded",
        ErrorKind.PRICE_TOO_LOW: "SpotMaxPriceTooLow",
        ErrorKind.AUTH: "AuthFailure",
        ErrorKind.THROTTLED: "RequestLimitExceeded",
    }
    #: subnet/IP exhaustion and image-not-here codes: placement failures, next offer
    placement_codes = ["InsufficientFreeAddressesInSubnet"]  # noqa: RUF012
    secret = SECRET
    missing_id = "i-0123456789abcdef0"

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._sent: dict[str, list[dict[str, str]]] = defaultdict(list)
        self._inject: dict[str, list[str]] = defaultdict(list)
        self._providers: list[AWSProvider] = []

    # -- the adapter ------------------------------------------------------------------------

    def provider(self, **options: Any) -> AWSProvider:
        p = AWSProvider(
            region=REGION,
            endpoint=self.endpoint,
            credentials={"aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET},
            image=self._moto_image(),
            retry=CONTRACT_RETRY,
            **options,
        )
        p.client.ec2(REGION).meta.events.register("before-send.ec2", self._before_send)
        self._providers.append(p)
        return p

    def _moto_image(self) -> str:
        """One of moto's stock AMIs (so DescribeImages finds its root device), read from the
        server's backend in this process: a DescribeImages of all of them made and parsed
        1,366 images of XML, over a second of CPU for each test process."""
        global _image
        if _image is None:  # the stock AMIs keep their ids across resets
            from moto.backends import get_backend
            from moto.core import DEFAULT_ACCOUNT_ID

            amis = get_backend("ec2")[DEFAULT_ACCOUNT_ID][REGION].amis
            _image = sorted(i.id for i in amis.values() if i.root_device_name)[0]
        return _image

    def offer(self, market: Market) -> Offer:
        return Offer(
            provider="aws",
            region=REGION,
            zone=ZONE,
            instance_type="g5.xlarge",
            gpu="A10G",
            gpu_count=1,
            vcpus=4,
            memory_gib=16,
            price=1.006,
            spot_price=0.45,
        )

    # -- the wire -------------------------------------------------------------------------------

    def sent(self, action: str) -> list[dict[str, str]]:
        """The requests of ``action`` that reached the wire (decoded form bodies)."""
        return list(self._sent[action])

    def _before_send(self, request: Any, event_name: str, **_: Any) -> Any:
        action = event_name.rsplit(".", 1)[-1]
        body = request.body
        if isinstance(body, bytes):
            body = body.decode()
        self._sent[action].append(dict(parse_qsl(body or "", keep_blank_values=True)))
        pending = self._inject.get(action)
        if not pending:
            return None
        code = pending.pop(0)
        from botocore.awsrequest import AWSResponse

        status, headers, payload = error_response(code, f"injected {code} for {action}")
        return AWSResponse(request.url, status, headers, _Raw(payload))

    def inject_error(self, code: str, *, times: int = 1, operation: str = "launch") -> None:
        self._inject[OPERATIONS.get(operation, operation)].extend([code] * times)

    def launch_requests(self) -> list[dict[str, Any]]:
        return list(self._sent["RunInstances"])

    def wire_market(self, request: dict[str, Any]) -> tuple[Market, float | None]:
        if request.get("InstanceMarketOptions.MarketType") != "spot":
            return Market.ON_DEMAND, None
        cap = request.get("InstanceMarketOptions.SpotOptions.MaxPrice")
        return Market.SPOT, float(cap) if cap is not None else None

    def wire_placement(self, request: dict[str, Any]) -> str | None:
        """The placement group a RunInstances request names (``Placement.GroupName``)."""
        return request.get("Placement.GroupName") or None

    # -- the cloud's own doings ---------------------------------------------------------------

    def preempt(self, instance_id: str) -> None:
        from moto.backends import get_backend
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.ec2.models.instances import StateReason

        instance = get_backend("ec2")[DEFAULT_ACCOUNT_ID][REGION].get_instance(instance_id)
        instance.terminate()
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
        instance._reason = f"Service initiated ({when} GMT)"
        instance.state_reason = StateReason(
            "Server.SpotInstanceTermination: Spot instance termination",
            "Server.SpotInstanceTermination",
        )

    def close(self) -> None:
        for p in self._providers:
            p.close()


@contextmanager
def make_harness() -> Iterator[AWSHarness]:
    endpoint = _endpoint()
    reset = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    with urllib.request.urlopen(reset, timeout=30) as answer:
        answer.read()
    harness = AWSHarness(endpoint)
    try:
        yield harness
    finally:
        harness.close()
