"""What every cloud's test harness offers the one contract suite (tests/contract/test_contract.py).

Each cloud has ``tests/contract/harness_<cloud>.py`` with a ``make_harness()`` context manager
yielding an object of this shape: the real adapter, pointed at a local server on 127.0.0.1
that speaks the cloud's wire format to the real SDK (moto's server for AWS).

How the suite finds a harness (tests/contract/conftest.py): for each cloud in
``providers.base.CLOUDS`` it checks that the cloud's SDK is importable and that
``harness_<cloud>.py`` exists, imports it and calls ``make_harness()`` once per test; a cloud
missing either is skipped with the reason. The conftest puts this directory on ``sys.path``,
so a harness module imports the shared pieces as ``from harness import CONTRACT_RETRY``.

Rules every harness keeps:

- ``provider()`` builds the adapter with ``retry=CONTRACT_RETRY`` (tiny delays; the suite
  counts wire requests against ``CONTRACT_RETRY.attempts``), and with the SDK's own retries
  switched off, so that ``call_with_retries`` is the one retry layer. It may be called more
  than once in a test; every adapter it returns sees the same server state.
- ``launch_requests()`` lists what reached the wire, *including* requests answered by an
  injected error: a capacity error must show exactly one launch request, throttling twice then
  success exactly three.
- ``inject_error(code)`` answers with the cloud's real status, headers and body for ``code``,
  so that the adapter's own parsing and classification run (no exception is raised in-process).
- ``error_codes`` names a code for each of CAPACITY, QUOTA, AUTH and THROTTLED, and for
  PRICE_TOO_LOW where the cloud has a bid (GCP has none: the suite skips that case).
- ``wire_market(request)`` reads a recorded launch request the way the cloud does: the market
  it asks for and the bid cap it carries (None where there is none). This is the one piece of
  per-cloud wire knowledge the suite needs for "spot with a cap was really sent".
- ``secret`` is the fake secret credential the adapter was given; the suite checks that it
  appears in no log record (DEBUG, every logger) and no error message.
- ``missing_id`` is an instance id in the cloud's own shape that the server does not know.
"""

from __future__ import annotations

from typing import Any, Protocol

from providers.base import ErrorKind, Provider, RetryPolicy
from provisioner.core.models import Market, Offer

#: The retry policy every harness gives its adapter: 4 attempts, sub-millisecond delays.
CONTRACT_RETRY = RetryPolicy(attempts=4, base_delay=0.0005, max_delay=0.002)


class Harness(Protocol):
    name: str  # "aws", "gcp", "azure", "alibaba", "tencent"
    #: the cloud's own error codes to inject for each kind the suite checks
    error_codes: dict[ErrorKind, str]
    #: codes meaning "not here" (no free IP in the subnet, image not in the zone): CAPACITY
    placement_codes: list[str]
    #: the fake secret credential given to the adapter (must never be logged)
    secret: str
    #: a well-formed instance id the server does not know
    missing_id: str

    def provider(self) -> Provider:
        """The adapter under test, configured for the local server (fresh state per test),
        built with ``retry=CONTRACT_RETRY``."""

    def offer(self, market: Market) -> Offer:
        """A GPU offer this cloud (and the local server) accepts."""

    def inject_error(self, code: str, *, times: int = 1, operation: str = "launch") -> None:
        """Make the next ``times`` calls of ``operation`` fail with the cloud's error ``code``,
        exactly as the cloud sends it on the wire (status, body, headers)."""

    def preempt(self, instance_id: str) -> None:
        """Take the spot capacity back as the cloud does, so that get/list/interruptions see it."""

    def launch_requests(self) -> list[dict[str, Any]]:
        """The launch requests the SDK really sent, decoded from the wire, oldest first."""

    def wire_market(self, request: dict[str, Any]) -> tuple[Market, float | None]:
        """The market and the bid cap (USD/hour; None: no cap sent) one launch request carries."""

    def close(self) -> None: ...
