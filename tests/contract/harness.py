"""What every cloud's test harness offers the one contract suite (tests/contract/test_contract.py).

Each cloud has ``tests/contract/harness_<cloud>.py`` with a ``make_harness()`` context manager
yielding an object of this shape: the real adapter, pointed at a local server on 127.0.0.1
that speaks the cloud's wire format to the real SDK (moto's server for AWS).
"""

from __future__ import annotations

from typing import Any, Protocol

from provisioner.models import Market, Offer
from providers.base import ErrorKind, Provider


class Harness(Protocol):
    name: str  # "aws", "gcp", "azure", "alibaba", "tencent"
    #: the cloud's own error codes to inject for each kind the suite checks
    error_codes: dict[ErrorKind, str]

    def provider(self) -> Provider:
        """The adapter under test, configured for the local server (fresh state per test)."""

    def offer(self, market: Market) -> Offer:
        """A GPU offer this cloud (and the local server) accepts."""

    def inject_error(self, code: str, *, times: int = 1, operation: str = "launch") -> None:
        """Make the next ``times`` calls of ``operation`` fail with the cloud's error ``code``,
        exactly as the cloud sends it on the wire (status, body, headers)."""

    def preempt(self, instance_id: str) -> None:
        """Take the spot capacity back as the cloud does, so that get/list/interruptions see it."""

    def launch_requests(self) -> list[dict[str, Any]]:
        """The launch requests the SDK really sent, decoded from the wire, oldest first."""

    def close(self) -> None: ...
