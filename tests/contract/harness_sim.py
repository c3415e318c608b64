"""The contract harness for the sim cloud: the real SimProvider against a real sim server.

Each harness gets its own state directory, so its own detached server (fresh state per test);
``close`` kills every sandbox and stops the server. Errors are injected in the server
(``POST /v1/inject``) and answered on the wire like any other API error; launch requests are
the bodies the server received, including those answered by an injected error. A preemption
is served with no notice, so that get/list/interruptions see it at once.

The sim takes no credentials; ``secret`` is a value the adapter is never given, so the
"never logged" check holds trivially. Enable the sim in the suite by adding ``"sim"`` to the
clouds tests/contract/conftest.py parametrises over (no SDK to check).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness import CONTRACT_RETRY

from providers.base import ErrorKind
from providers.sim import SimProvider
from providers.sim.rules import RULES
from provisioner.core.models import InstanceState, Market, Offer
from tests.waiting import wait_for

CLOUD = "aws"


class SimHarness:
    name = "sim"
    error_codes: dict[ErrorKind, str] = {  # noqa: RUF012 - read-only table
        ErrorKind.CAPACITY: RULES[CLOUD].capacity_code,
        ErrorKind.QUOTA: RULES[CLOUD].quota_code,
        ErrorKind.PRICE_TOO_LOW: RULES[CLOUD].price_code or "",
        ErrorKind.AUTH: RULES[CLOUD].auth_code,
        ErrorKind.THROTTLED: RULES[CLOUD].throttle_code,
    }
    secret = "sim-takes-no-credentials-0123456789"
    missing_id = "sim-000000000000"

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._control = self.provider()
        self._kinds = {code: kind for kind, code in self.error_codes.items()}
        self._offer: Offer | None = None

    def provider(self) -> SimProvider:
        return SimProvider(
            self.state_dir, mimic=CLOUD, mtbp_hours=None, idle_exit_s=60, retry=CONTRACT_RETRY
        )

    def offer(self, market: Market) -> Offer:
        if self._offer is None:  # cheap enough for the suite's 0.5 USD/h bid cap
            self._offer = next(
                o
                for o in self._control.offers(["us-east-1"])
                if o.spot_price and o.spot_price < 0.4 and o.price
            )
        return self._offer

    def inject_error(self, code: str, *, times: int = 1, operation: str = "launch") -> None:
        status = {ErrorKind.THROTTLED: 503, ErrorKind.AUTH: 401}.get(self._kinds[code], 400)
        self._control.inject_error(
            self._kinds[code], code, operation=operation, times=times, status=status
        )

    def preempt(self, instance_id: str) -> None:
        self._control.preempt(instance_id, notice_s=0)
        wait_for(
            lambda: self._control.get(instance_id).state is InstanceState.PREEMPTED,
            timeout=10,
            every=0.02,
        )

    def launch_requests(self) -> list[dict[str, Any]]:
        return self._control.launch_requests()

    def wire_market(self, request: dict[str, Any]) -> tuple[Market, float | None]:
        cap = request.get("bid_cap")
        return Market(request["market"]), None if cap is None else float(cap)

    def wire_placement(self, request: dict[str, Any]) -> str | None:
        group = request.get("placement_group")
        return None if group is None else str(group)

    def close(self) -> None:
        self._control.shutdown_server(terminate_all=True)


@contextmanager
def make_harness() -> Iterator[SimHarness]:
    with tempfile.TemporaryDirectory(prefix="sim-contract-") as tmp:
        harness = SimHarness(Path(tmp) / "sim")
        try:
            yield harness
        finally:
            harness.close()
