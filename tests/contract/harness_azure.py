"""The contract harness for Azure: the real adapter, azure-mgmt-compute and azure-mgmt-network
against tests/fakes/azure_server.py.

Capacity is injected as ``AllocationFailed``, which Azure reports as a *failed long-running
operation* after an accepted PUT (the VM is left ``Failed``; the adapter removes it and its
NIC). Quota is ``OperationNotAllowed`` (409, quota message), price-too-low
``SpotPriceGreaterThanProvidedMaxPrice`` (409), auth ``AuthorizationFailed`` (403), throttling
``TooManyRequests`` (429 with Retry-After). A gang's node names its proximity placement group
as the VM's ``properties.proximityPlacementGroup.id`` (``wire_placement``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fakes.azure_server import AzureServer
from harness import CONTRACT_RETRY

from providers.azure import AzureProvider
from providers.base import ErrorKind
from provisioner.core.models import Market, Offer

#: the bearer token the adapter is given; the server insists on it
TOKEN = "eyJ0eXAiOiJKV1Qi.fake-azure-access-token.0123456789abcdef"
REGION = "eastus"


class AzureHarness:
    name = "azure"
    error_codes: dict[ErrorKind, str] = {  # noqa: RUF012 - read-only table
        ErrorKind.CAPACITY: "AllocationFailed",
        ErrorKind.QUOTA: "OperationNotAllowed",
        ErrorKind.PRICE_TOO_LOW: "SpotPriceGreaterThanProvidedMaxPrice",
        ErrorKind.AUTH: "AuthorizationFailed",
        ErrorKind.THROTTLED: "TooManyRequests",
    }
    #: subnet/IP exhaustion and image-not-here codes: placement failures, next offer
    placement_codes = ["SubnetIsFull"]  # noqa: RUF012
    secret = TOKEN

    def __init__(self, server: AzureServer) -> None:
        self.server = server
        self.missing_id = (
            f"/subscriptions/{server.subscription_id}/resourceGroups/{server.resource_group}"
            "/providers/Microsoft.Compute/virtualMachines/prov-missing-a9"
        )

    def provider(self) -> AzureProvider:
        return AzureProvider(
            subscription_id=self.server.subscription_id,
            resource_group=self.server.resource_group,
            location=REGION,
            subnet_id=self.server.subnet_id,
            endpoint=self.server.endpoint,
            credentials=TOKEN,
            ssh_public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests provisioner@test",
            retry=CONTRACT_RETRY,
            polling_interval=0,
        )

    def offer(self, market: Market) -> Offer:
        return Offer(
            provider="azure",
            region=REGION,
            zone=f"{REGION}-1",
            instance_type="Standard_NC4as_T4_v3",
            gpu="T4",
            gpu_count=1,
            vcpus=4,
            memory_gib=28.0,
            price=0.526,
            spot_price=0.062699,
        )

    def inject_error(self, code: str, *, times: int = 1, operation: str = "launch") -> None:
        self.server.inject_error(code, operation=operation, times=times)

    def preempt(self, instance_id: str) -> None:
        self.server.preempt(instance_id.rstrip("/").rsplit("/", 1)[-1])

    def launch_requests(self) -> list[dict[str, Any]]:
        return [
            {"path": r.path, "query": r.query, "body": r.body}
            for r in self.server.launch_requests()
        ]

    def wire_market(self, request: dict[str, Any]) -> tuple[Market, float | None]:
        props = (request.get("body") or {}).get("properties") or {}
        if props.get("priority") in ("Spot", "Low"):
            price = (props.get("billingProfile") or {}).get("maxPrice")
            return Market.SPOT, None if price in (None, -1) else float(price)
        return Market.ON_DEMAND, None

    def wire_placement(self, request: dict[str, Any]) -> str | None:
        """The VM's ``properties.proximityPlacementGroup.id`` (None: in no group)."""
        props = (request.get("body") or {}).get("properties") or {}
        ref = props.get("proximityPlacementGroup") or {}
        return str(ref["id"]) if ref.get("id") else None

    def close(self) -> None:
        self.server.close()


@contextmanager
def make_harness() -> Iterator[AzureHarness]:
    server = AzureServer(token=TOKEN)
    harness = AzureHarness(server)
    try:
        yield harness
    finally:
        harness.close()
