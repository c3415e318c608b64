"""The contract harness for Alibaba Cloud: the real adapter and SDK against tests/fakes/alibaba_server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fakes.alibaba_server import AlibabaFakeServer
from harness import CONTRACT_RETRY

from providers.alibaba import AlibabaProvider
from providers.base import ErrorKind
from provisioner.core.models import Market, Offer

#: the adapter operation -> the ECS action it sends
OPERATIONS = {
    "launch": "RunInstances",
    "get": "DescribeInstances",
    "list": "DescribeInstances",
    "interruptions": "DescribeInstances",
    "terminate": "DeleteInstances",
    "offers": "DescribeInstanceTypes",
    "prices": "DescribeSpotPriceHistory",
}

KEY_ID = "LTAI5tFakeAccessKeyId0001"
SECRET = "fakeAlibabaSecret-0123456789abcdefXYZ"
IMAGE = "ubuntu_22_04_x64_20G_alibase_20240101.vhd"


class AlibabaHarness:
    name = "alibaba"
    error_codes: dict[ErrorKind, str] = {  # noqa: RUF012 - read-only table
        ErrorKind.CAPACITY: "OperationDenied.NoStock",
        ErrorKind.QUOTA: "QuotaExceed.ElasticQuota",
        ErrorKind.PRICE_TOO_LOW: "InvalidSpotPriceLimit.LowerThanPublicPrice",
        ErrorKind.AUTH: "InvalidAccessKeyId.NotFound",
        ErrorKind.THROTTLED: "Throttling.User",
    }
    #: subnet/IP exhaustion and image-not-here codes: placement failures, next offer
    placement_codes = ["InvalidVSwitchId.IpNotEnough", "QuotaExceeded.PrivateIpAddress"]  # noqa: RUF012
    secret = SECRET
    missing_id = "i-bp1missing00000000000"

    def __init__(self, server: AlibabaFakeServer) -> None:
        self.server = server

    def provider(self) -> AlibabaProvider:
        return AlibabaProvider(
            region=self.server.region,
            endpoint=self.server.endpoint,
            credentials={"access_key_id": KEY_ID, "access_key_secret": SECRET},
            image_id=IMAGE,
            vswitch_id="vsw-bp1fakevswitch0001",
            security_group_id="sg-bp1fakegroup00001",
            retry=CONTRACT_RETRY,
        )

    def offer(self, market: Market) -> Offer:
        return Offer(
            provider="alibaba",
            region=self.server.region,
            zone="cn-hangzhou-h",
            instance_type="ecs.gn7i-c8g1.2xlarge",
            gpu="A10",
            gpu_count=1,
            vcpus=8,
            memory_gib=30.0,
            price=1.20,
            spot_price=0.36,
        )

    def inject_error(self, code: str, *, times: int = 1, operation: str = "launch") -> None:
        self.server.inject_error(OPERATIONS.get(operation, operation), code, times=times)

    #: ECS shows the reclaim in its API first, as a notice (the Recycling lock on a running
    #: instance), then releases the instance
    reclaim_notice = True

    def preempt(self, instance_id: str) -> None:
        self.server.preempt(instance_id)

    def release(self, instance_id: str) -> None:
        self.server.release(instance_id)

    def launch_requests(self) -> list[dict[str, Any]]:
        return [dict(r.params) for r in self.server.calls("RunInstances")]

    def wire_market(self, request: dict[str, Any]) -> tuple[Market, float | None]:
        strategy = request.get("SpotStrategy", "NoSpot")
        if strategy in ("SpotWithPriceLimit", "SpotAsPriceGo"):
            limit = request.get("SpotPriceLimit")
            cap = float(limit) if strategy == "SpotWithPriceLimit" and limit else None
            return Market.SPOT, cap
        return Market.ON_DEMAND, None

    def wire_placement(self, request: dict[str, Any]) -> str | None:
        return request.get("DeploymentSetId") or None

    def close(self) -> None:
        self.server.stop()


@contextmanager
def make_harness() -> Iterator[AlibabaHarness]:
    with AlibabaFakeServer() as server:
        harness = AlibabaHarness(server)
        try:
            yield harness
        finally:
            harness.close()
