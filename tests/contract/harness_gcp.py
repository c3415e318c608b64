"""The contract harness for GCP: the real adapter and google-cloud-compute (REST) against
tests/fakes/gcp_server.py.

GCP takes no bid, so there is no cloud error for a price under the market: ``error_codes`` has
no PRICE_TOO_LOW and the suite skips that case. The adapter enforces the cap before launch
instead (tests/providers/gcp/test_gcp_adapter.py checks that nothing is sent then). Capacity and quota are
injected the way GCP reports them: the insert is accepted and its operation fails with
``error.errors[0].code``; auth and throttling are HTTP errors (403 ``forbidden``, 429
``rateLimitExceeded``). A 401 is not used here: google-auth answers it by refreshing the token
and retrying, and a token that cannot be refreshed ends in ``RefreshError`` (also AUTH).
A gang's placement is its compact placement policy, read off the insert's ``resourcePolicies``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fakes.gcp_server import GCPServer
from harness import CONTRACT_RETRY

from providers.base import ErrorKind
from providers.gcp import GCPProvider
from provisioner.core.models import Market, Offer

PROJECT = "provisioner-contract"
ZONE = "us-central1-a"
#: the OAuth access token the adapter is given; the server insists on it
TOKEN = "ya29.fake-gcp-access-token-0123456789abcdef"


class GCPHarness:
    name = "gcp"
    error_codes: dict[ErrorKind, str] = {  # noqa: RUF012 - read-only table
        ErrorKind.CAPACITY: "ZONE_RESOURCE_POOL_EXHAUSTED",
        ErrorKind.QUOTA: "QUOTA_EXCEEDED",
        ErrorKind.AUTH: "forbidden",  # 403; a 401 makes google-auth refresh the token first
        ErrorKind.THROTTLED: "rateLimitExceeded",
    }
    #: subnet/IP exhaustion and image-not-here codes: placement failures, next offer
    placement_codes = ["IP_SPACE_EXHAUSTED"]  # noqa: RUF012
    secret = TOKEN
    missing_id = f"{ZONE}/prov-missing-a9"

    def __init__(self, server: GCPServer) -> None:
        self.server = server

    def provider(self) -> GCPProvider:
        from google.oauth2.credentials import Credentials

        return GCPProvider(
            project=PROJECT,
            zones=[ZONE],
            endpoint=self.server.endpoint,
            credentials=Credentials(token=TOKEN),
            retry=CONTRACT_RETRY,
        )

    def offer(self, market: Market) -> Offer:
        return Offer(
            provider="gcp",
            region="us-central1",
            zone=ZONE,
            instance_type="g2-standard-4",
            gpu="L4",
            gpu_count=1,
            vcpus=4,
            memory_gib=16.0,
            price=0.706832,
            spot_price=0.397336,
        )

    def inject_error(self, code: str, *, times: int = 1, operation: str = "launch") -> None:
        self.server.inject_error(code, operation=operation, times=times)

    def preempt(self, instance_id: str) -> None:
        zone, _, name = instance_id.rpartition("/")
        self.server.preempt(name, zone or None)

    def launch_requests(self) -> list[dict[str, Any]]:
        return [{"query": r.query, "body": r.body} for r in self.server.launch_requests()]

    def wire_market(self, request: dict[str, Any]) -> tuple[Market, float | None]:
        scheduling = (request.get("body") or {}).get("scheduling") or {}
        spot = scheduling.get("provisioningModel") == "SPOT" or scheduling.get("preemptible")
        return (Market.SPOT if spot else Market.ON_DEMAND), None  # GCP takes no bid

    def wire_placement(self, request: dict[str, Any]) -> str | None:
        """The placement policy an instance insert names (its ``resourcePolicies``), as the
        path after ``/compute/v1/`` where a full URL was sent."""
        policies = (request.get("body") or {}).get("resourcePolicies") or []
        if not policies:
            return None
        return str(policies[0]).split("/compute/v1/", 1)[-1]

    def close(self) -> None:
        self.server.close()


@contextmanager
def make_harness() -> Iterator[GCPHarness]:
    server = GCPServer(PROJECT, token=TOKEN)
    harness = GCPHarness(server)
    try:
        yield harness
    finally:
        harness.close()
