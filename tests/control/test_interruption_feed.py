"""The interruption feed keeps each provider's notices apart.

A notice is served once by the cloud, but decide() reads it on every pass until the capacity
goes; with jobs on two providers (two sim servers here: two state directories), observing the
second must not drop the first one's notice (it did: the notices were one dict, and each
provider's pass dropped every instance it did not list)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from providers.sim import SimProvider
from provisioner.control.observe import InterruptionFeed
from provisioner.control.records import PassReport
from provisioner.control.store import Store
from provisioner.core.models import TAG_MANAGED, Instance, LaunchRequest, Market


@pytest.fixture
def two_sims(tmp_path: Path) -> Iterator[tuple[SimProvider, SimProvider]]:
    sims = tuple(
        SimProvider(tmp_path / name, mimic="aws", mtbp_hours=None, idle_exit_s=60, api_notices=True)
        for name in ("sim-a", "sim-b")
    )
    yield sims  # type: ignore[misc]
    for sim in sims:
        sim.shutdown_server(terminate_all=True)


def test_a_notice_at_one_provider_outlives_the_other_providers_pass(
    tmp_path: Path, two_sims: tuple[SimProvider, SimProvider]
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    feed = InterruptionFeed(store)
    sim_a, sim_b = two_sims
    launched = {}
    for job, sim in (("job-a", sim_a), ("job-b", sim_b)):
        offer = next(o for o in sim.offers(["us-east-1"]) if o.spot_price)
        launched[job] = sim.launch(
            LaunchRequest(job_id=job, attempt=1, offer=offer, market=Market.SPOT)
        )
    sim_a.preempt(launched["job-a"].id, notice_s=600)  # a long notice: it stands all test

    t0 = datetime.now(UTC)

    def observe(key: str, sim: SimProvider, later_s: float = 0.0) -> dict[str, list[Any]]:
        by_job: dict[str, list[Instance]] = {}
        for inst in sim.list({TAG_MANAGED: "true"}):
            by_job.setdefault(str(inst.job_id), []).append(inst)
        got = feed.collect(key, sim, by_job, t0 + timedelta(seconds=later_s), PassReport())
        return got

    first = observe("sim:a", sim_a, later_s=60)  # a pass a minute after the notice
    assert [it.kind for it in first["job-a"]] == ["notice"]
    assert observe("sim:b", sim_b, later_s=61) == {}
    # the next pass asks from where the last left off (less 5 s): the cloud does not serve
    # the notice again, the feed keeps it
    again = observe("sim:a", sim_a, later_s=62)
    assert [it.kind for it in again.get("job-a", [])] == ["notice"]
    assert len([e for e in store.events("job-a") if e.kind == "notice"]) == 1
