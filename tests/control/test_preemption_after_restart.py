"""Alibaba and Tencent preemptions are read from what the cloud and the store say, not from
what one adapter process remembers (issue 16, item 5).

Both clouds release a reclaimed spot instance: it shows ``Recycling`` (Alibaba) or
``TERMINATING`` (Tencent) for a few minutes, then is gone from every list. A daemon down for
longer (a restart, an upgrade) comes back to a running spot attempt whose instance no list
shows. The adapters used to know such an instance was a spot one only from memory (the
instances they had seen alive), so a fresh process ended the attempt as "instance gone": no
zone cooldown, no restart counted. Each pass now derives it level-triggered: the attempt in the
store says spot, the cloud's list says gone, and the store has no termination of ours for it:
it was preempted.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from providers.base import Provider, RetryPolicy
from provisioner.api import submit
from provisioner.control.reconciler import Reconciler
from provisioner.control.store import Store
from provisioner.core.catalog import Catalog
from provisioner.core.models import TAG_JOB, Offer

FAST = RetryPolicy(attempts=2, base_delay=0.0, max_delay=0.0)
#: what a VM installs (a wheel of this project: PyPI's `provisioner` is another one)
WHEEL = "https://pkgs.example.com/provisioner-0.1.0-py3-none-any.whl"
POLICY = """\
name: restart-check
resources: {gpus: [A10, T4], gpu_count: 1}
market: spot
bid_cap: {max_spot_price_per_hour: 1.0}
restart: {zone_cooldown: 30m}
checkpoint: {shared: true}  # no agent runs here: nothing reaches the store but this process
"""


@contextmanager
def alibaba() -> Iterator[tuple[Any, Callable[[], Provider], Offer]]:
    pytest.importorskip("alibabacloud_ecs20140526")
    from fakes.alibaba_server import AlibabaFakeServer

    from providers.alibaba import AlibabaProvider

    with AlibabaFakeServer() as server:

        def make() -> Provider:
            return AlibabaProvider(
                region=server.region,
                endpoint=server.endpoint,
                credentials={"access_key_id": "LTAI5tRestartKey01", "access_key_secret": "s" * 30},
                image_id="ubuntu_22_04_x64_20G_alibase_20240101.vhd",
                vswitch_id="vsw-restart",
                security_group_id="sg-restart",
                retry=FAST,
            )

        offer = Offer("alibaba", server.region, "cn-hangzhou-h", "ecs.gn7i-c8g1.2xlarge", "A10", 1, 8, 30.0, 1.20, 0.36)  # fmt: skip
        yield server, make, offer


@contextmanager
def tencent() -> Iterator[tuple[Any, Callable[[], Provider], Offer]]:
    pytest.importorskip("tencentcloud.cvm")
    from fakes.tencent_server import TencentFakeServer

    from providers.tencent import TencentProvider

    with TencentFakeServer() as server:

        def make() -> Provider:
            return TencentProvider(
                region=server.region,
                endpoint=server.endpoint,
                credentials={"secret_id": "AKIDrestart000000000001", "secret_key": "k" * 32},
                image_id="img-eb30mz89",
                currency="USD",
                retry=FAST,
            )

        offer = Offer("tencent", server.region, "ap-guangzhou-3", "GN7.2XLARGE32", "T4", 1, 8, 32.0, 1.30, 0.41)  # fmt: skip
        yield server, make, offer


CLOUDS = {"alibaba": alibaba, "tencent": tencent}


def run_job(cloud: str, *, ours: bool) -> tuple[Store, str, Any]:
    """Launch a spot job, stop the 'daemon', let the instance go (reclaimed, or terminated by
    us when ``ours``), start a fresh reconciler and provider, run one pass."""
    tmp = tempfile.mkdtemp()
    clock = {"now": datetime.now(UTC)}
    with CLOUDS[cloud]() as (server, make, offer):
        store = Store(f"sqlite:///{tmp}/s.db")
        path = Path(tmp) / "p.yaml"
        path.write_text(POLICY)
        options = {"package_spec": f"provisioner[{cloud}] @ {WHEEL}"}
        _, job_id = submit(
            path,
            provider=cloud,
            provider_defaults=False,
            provider_options=options,
            store=store,
            now=clock["now"],
        )

        def reconciler(provider: Provider) -> Reconciler:
            return Reconciler(
                store,
                catalog=Catalog.from_offers([offer]),
                provider_factory=lambda _n, _o: provider,
                clock=lambda: clock["now"],
            )

        first_provider = make()
        first = reconciler(first_provider)
        first.run_pass()
        [attempt] = store.attempts(job_id)
        assert attempt.state == "running" and attempt.market == "spot"
        [inst] = [i for i in first_provider.list({TAG_JOB: job_id}) if i.state.alive]
        first.run_pass()  # seen alive (the old adapters remembered this)
        first.close()
        first_provider.close()

        if ours:  # a termination the daemon recorded, then crashed before the next pass
            store.add_event(
                job_id, "terminate", f"terminated {inst.id}", at=clock["now"], instance=inst.id
            )
            make().terminate([inst.id])
            make().terminate([inst.id])  # Tencent: out of the recycle bin too
        else:  # reclaimed and released while no daemon ran
            server.preempt(inst.id)
            server.release(inst.id)
        clock["now"] += timedelta(minutes=10)

        provider = make()  # a restart: a new process knows nothing of the instance
        again = reconciler(provider)
        again.run_pass()
        again.close()
        provider.close()
        return store, job_id, inst


@pytest.mark.parametrize("cloud", sorted(CLOUDS))
def test_a_spot_instance_released_while_the_daemon_was_down_is_a_preemption(cloud: str) -> None:
    store, job_id, inst = run_job(cloud, ours=False)
    attempts = store.attempts(job_id)
    assert attempts[0].state == "preempted", attempts[0].end_reason
    job = store.job(job_id)
    assert job is not None and job.restarts == 1
    now = datetime.now(UTC) + timedelta(minutes=10)
    assert (cloud, inst.zone) in store.cooldowns(job_id, now)
    kinds = [e.kind for e in store.events(job_id)]
    assert "preempted" in kinds and "lost" not in kinds
    store.close()


@pytest.mark.parametrize("cloud", sorted(CLOUDS))
def test_an_instance_we_terminated_that_is_gone_is_not_a_preemption(cloud: str) -> None:
    store, job_id, _ = run_job(cloud, ours=True)
    first = store.attempts(job_id)[0]
    assert first.state == "ended", first.end_reason
    job = store.job(job_id)
    assert job is not None and job.restarts == 0
    store.close()


def test_an_alibaba_reclaim_notice_leaves_the_instance_to_checkpoint() -> None:
    """The Recycling lock is the notice: the controller keeps the locked instance (its job
    checkpoints on the metadata's termination time) instead of ending it at once; its release
    minutes later is the preemption (restart counted, zone cooled)."""
    tmp = tempfile.mkdtemp()
    clock = {"now": datetime.now(UTC)}
    with alibaba() as (server, make, offer):
        store = Store(f"sqlite:///{tmp}/s.db")
        path = Path(tmp) / "p.yaml"
        path.write_text(POLICY)
        _, job_id = submit(
            path, provider="alibaba", provider_defaults=False, store=store, now=clock["now"],
            provider_options={"package_spec": f"provisioner[alibaba] @ {WHEEL}"},
        )  # fmt: skip
        provider = make()
        rec = Reconciler(
            store,
            catalog=Catalog.from_offers([offer]),
            provider_factory=lambda _n, _o: provider,
            clock=lambda: clock["now"],
        )
        rec.run_pass()
        [inst] = [i for i in provider.list({TAG_JOB: job_id}) if i.state.alive]
        server.preempt(inst.id)  # locked: Recycling
        for _ in range(3):  # passes while the lock stands
            clock["now"] += timedelta(seconds=20)
            rec.run_pass()
        assert provider.get(inst.id).state.alive  # not terminated by us
        assert not [e for e in store.events(job_id) if e.kind == "terminate"]
        [first] = store.attempts(job_id)
        assert first.state == "running"
        notices = [e for e in store.events(job_id) if e.kind == "notice"]
        assert len(notices) == 1 and inst.id in notices[0].message
        server.release(inst.id)  # ECS takes it
        clock["now"] += timedelta(minutes=3)
        rec.run_pass()
        attempts = store.attempts(job_id)
        assert attempts[0].state == "preempted", attempts[0].end_reason
        job = store.job(job_id)
        assert job is not None and job.restarts == 1
        rec.close()
        provider.close()
        store.close()
