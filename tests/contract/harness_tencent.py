"""The contract harness for Tencent Cloud: the real adapter and SDK against tests/fakes/tencent_server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fakes.tencent_server import TencentFakeServer
from harness import CONTRACT_RETRY

from providers.base import ErrorKind
from providers.tencent import TencentProvider
from provisioner.core.models import Market, Offer

#: the adapter operation -> the CVM action it sends
OPERATIONS = {
    "launch": "RunInstances",
    "get": "DescribeInstances",
    "list": "DescribeInstances",
    "interruptions": "DescribeInstances",
    "terminate": "TerminateInstances",
    "offers": "DescribeZoneInstanceConfigInfos",
    "prices": "InquiryPriceRunInstances",
}

SECRET_ID = "AKIDprovisionerFakeSecretId000001"
SECRET_KEY = "fakeTencentSecretKey-0123456789abcdef"
IMAGE = "img-eb30mz89"


class TencentHarness:
    name = "tencent"
    error_codes: dict[ErrorKind, str] = {  # noqa: RUF012 - read-only table
        ErrorKind.CAPACITY: "ResourceInsufficient.SpecifiedInstanceType",
        ErrorKind.QUOTA: "LimitExceeded.SpotQuota",
        ErrorKind.PRICE_TOO_LOW: "InvalidParameterValue.InsufficientPrice",
        ErrorKind.AUTH: "AuthFailure.SecretIdNotFound",
        ErrorKind.THROTTLED: "RequestLimitExceeded",
    }
    #: subnet/IP exhaustion and image-not-here codes: placement failures, next offer
    placement_codes = [  # noqa: RUF012 - read-only table
        "FailedOperation.NoAvailableIpAddressCountInSubnet",
        "LimitExceeded.VpcSubnetNum",
        "UnsupportedOperation.LocationImageNotSupported",
    ]
    secret = SECRET_KEY
    missing_id = "ins-0missing"

    def __init__(self, server: TencentFakeServer) -> None:
        self.server = server

    def provider(self) -> TencentProvider:
        return TencentProvider(
            region=self.server.region,
            endpoint=self.server.endpoint,
            credentials={"secret_id": SECRET_ID, "secret_key": SECRET_KEY},
            image_id=IMAGE,
            vpc_id="vpc-fake0001",
            subnet_id="subnet-fake0001",
            security_group_ids=["sg-fake0001"],
            currency="USD",  # the fake is an international-site account
            retry=CONTRACT_RETRY,
        )

    def offer(self, market: Market) -> Offer:
        return Offer(
            provider="tencent",
            region=self.server.region,
            zone="ap-guangzhou-3",
            instance_type="GN7.2XLARGE32",
            gpu="T4",
            gpu_count=1,
            vcpus=8,
            memory_gib=32.0,
            price=1.30,
            spot_price=0.41,
        )

    def inject_error(self, code: str, *, times: int = 1, operation: str = "launch") -> None:
        self.server.inject_error(OPERATIONS.get(operation, operation), code, times=times)

    def preempt(self, instance_id: str) -> None:
        self.server.preempt(instance_id)

    def launch_requests(self) -> list[dict[str, Any]]:
        return [dict(r.params) for r in self.server.calls("RunInstances")]

    def wire_market(self, request: dict[str, Any]) -> tuple[Market, float | None]:
        if request.get("InstanceChargeType") == "SPOTPAID":
            options = (request.get("InstanceMarketOptions") or {}).get("SpotOptions") or {}
            price = options.get("MaxPrice")
            return Market.SPOT, float(price) if price else None
        return Market.ON_DEMAND, None

    def wire_placement(self, request: dict[str, Any]) -> str | None:
        ids = request.get("DisasterRecoverGroupIds") or []
        return str(ids[0]) if ids else None

    def close(self) -> None:
        self.server.stop()


@contextmanager
def make_harness() -> Iterator[TencentHarness]:
    with TencentFakeServer() as server:
        harness = TencentHarness(server)
        try:
            yield harness
        finally:
            harness.close()
