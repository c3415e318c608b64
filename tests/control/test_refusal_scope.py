"""Refusals classed as each cloud documents them, and how far each reaches (issue 40, part 2).

Every code goes through the cloud's real SDK against the project's fakes, in the cloud's own
wire format: AWS's EC2 XML error document through boto3 (the contract harness on moto's
server), Alibaba's JSON error with its HTTP status through the alibabacloud SDK, Tencent's 200
envelope through tencentcloud-sdk-python. A refusal that names one zone, subnet or vSwitch
cools that zone down for the job and never blocks the region: an Alibaba job refused
``Zone.NotOpen`` in one zone runs in another zone of the region, end to end through the
reconciler. A code no table knows is logged once, with the cloud's message, credentials removed.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from providers.base import ErrorKind, ErrorScope, Provider, ProviderError, RetryPolicy
from provisioner.api import submit
from provisioner.control.reconciler import Reconciler
from provisioner.control.store import Store
from provisioner.core.catalog import Catalog
from provisioner.core.models import LaunchRequest, Market, Offer

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "tests" / "contract"
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))

FAST = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)
ALI_KEY, ALI_SECRET = "LTAI5tScopeTestKey0001", "scope-test-alibaba-secret-0123456789"
TC_ID, TC_KEY = "AKIDscopetest0000000000001", "scope-test-tencent-key-0123456789ab"
A10 = "ecs.gn7i-c8g1.2xlarge"
T4 = "GN7.2XLARGE32"
WHEEL = "https://pkgs.example.com/provisioner-0.1.0-py3-none-any.whl"


def _launch(offer: Offer, job: str = "job-1") -> LaunchRequest:
    return LaunchRequest(
        job_id=job,
        attempt=1,
        offer=offer,
        market=Market.SPOT,
        bid_cap_per_hour=1.0,
        user_data="#!/bin/sh\ntrue\n",
    )


def _refusal(provider: Provider, request: LaunchRequest) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        provider.launch(request)
    return caught.value


# -- the clouds' fakes, each spoken to by the real adapter and SDK ---------------------------


@contextmanager
def alibaba(**options: Any) -> Iterator[tuple[Any, Callable[[], Provider]]]:
    pytest.importorskip("alibabacloud_ecs20140526")
    from fakes.alibaba_server import AlibabaFakeServer

    from providers.alibaba import AlibabaProvider

    with AlibabaFakeServer() as server:

        def make() -> Provider:
            settings: dict[str, Any] = {
                "region": server.region,
                "endpoint": server.endpoint,
                "credentials": {"access_key_id": ALI_KEY, "access_key_secret": ALI_SECRET},
                "image_id": "ubuntu_22_04_x64_20G_alibase_20240101.vhd",
                "vswitch_id": "vsw-default",
                "security_group_id": "sg-scope",
                "retry": FAST,
            }
            return AlibabaProvider(**(settings | options))

        yield server, make


@contextmanager
def tencent(**options: Any) -> Iterator[tuple[Any, Callable[[], Provider]]]:
    pytest.importorskip("tencentcloud.cvm")
    from fakes.tencent_server import TencentFakeServer

    from providers.tencent import TencentProvider

    with TencentFakeServer() as server:

        def make() -> Provider:
            settings: dict[str, Any] = {
                "region": server.region,
                "endpoint": server.endpoint,
                "credentials": {"secret_id": TC_ID, "secret_key": TC_KEY},
                "image_id": "img-eb30mz89",
                "vpc_id": "vpc-scope001",
                "subnet_id": "subnet-default",
                "security_group_ids": ["sg-scope001"],
                "currency": "USD",
                "retry": FAST,
            }
            return TencentProvider(**(settings | options))

        yield server, make


def ali_offer(zone: str, spot: float) -> Offer:
    return Offer("alibaba", "cn-hangzhou", zone, A10, "A10", 1, 8, 30.0, 1.20, spot)


def ali_t4(zone: str, spot: float) -> Offer:
    return Offer(
        "alibaba", "cn-hangzhou", zone, "ecs.gn6i-c4g1.xlarge", "T4", 1, 4, 15.0, 0.80, spot
    )


def tc_offer(zone: str, spot: float) -> Offer:
    return Offer("tencent", "ap-guangzhou", zone, T4, "T4", 1, 8, 32.0, 1.30, spot)


# -- 1. each code in its class and scope, from the wire ------------------------------------


@pytest.mark.parametrize(
    ("code", "kind", "scope"),
    [
        # EC2: not enough spare spot capacity for the request now (was: invalid)
        ("UnfulfillableCapacity", ErrorKind.CAPACITY, ErrorScope.OFFER),
        ("InsufficientFreeAddressesInSubnet", ErrorKind.CAPACITY, ErrorScope.ZONE),
        ("InsufficientInstanceCapacity", ErrorKind.CAPACITY, ErrorScope.OFFER),
        ("VcpuLimitExceeded", ErrorKind.QUOTA, ErrorScope.REGION),
    ],
)
def test_aws_codes_from_ec2s_xml_error(code: str, kind: ErrorKind, scope: ErrorScope) -> None:
    pytest.importorskip("moto")
    from harness_aws import make_harness

    with make_harness() as harness:
        provider = harness.provider()
        harness.inject_error(code)
        err = _refusal(provider, _launch(harness.offer(Market.SPOT)))
        assert (err.kind, err.scope, err.code) == (kind, scope, code)
        assert len(harness.launch_requests()) == 1  # a refusal, not retried in place


def test_alibaba_zone_not_open_refuses_that_zone_only() -> None:
    """ECS answers 403 ``Zone.NotOpen`` where the account may not buy: a quota of that zone
    (the user asks Alibaba to open it), not an invalid request; the next zone launches."""
    with alibaba() as (server, make):
        server.closed_zones.add("cn-hangzhou-h")
        provider = make()
        err = _refusal(provider, _launch(ali_offer("cn-hangzhou-h", 0.36)))
        assert (err.kind, err.scope, err.code) == (ErrorKind.QUOTA, ErrorScope.ZONE, "Zone.NotOpen")
        assert err.kind is not ErrorKind.INVALID
        assert "not granted to you" in err.message  # the cloud's own words
        assert len(server.calls("RunInstances")) == 1
        inst = provider.launch(_launch(ali_offer("cn-hangzhou-i", 0.40), job="job-2"))
        assert inst.zone == "cn-hangzhou-i"


def test_alibaba_vswitch_out_of_ips_is_that_zones_capacity_not_a_quota() -> None:
    """``QuotaExceeded.PrivateIpAddress`` is a full vSwitch (one zone's), despite its prefix."""
    vswitches = {"cn-hangzhou-h": "vsw-h", "cn-hangzhou-i": "vsw-i"}
    with alibaba(vswitch_ids=vswitches) as (server, make):
        server.full_vswitches.add("vsw-h")
        provider = make()
        err = _refusal(provider, _launch(ali_offer("cn-hangzhou-h", 0.36)))
        assert (err.kind, err.scope) == (ErrorKind.CAPACITY, ErrorScope.ZONE)
        assert err.code == "QuotaExceeded.PrivateIpAddress"
        assert server.calls("RunInstances")[0].params["VSwitchId"] == "vsw-h"
        # the rest of the prefix is still the account's quota
        server.inject_error("RunInstances", "QuotaExceed.ElasticQuota")
        quota = _refusal(provider, _launch(ali_offer("cn-hangzhou-i", 0.40), job="job-2"))
        assert (quota.kind, quota.scope) == (ErrorKind.QUOTA, ErrorScope.REGION)


@pytest.mark.parametrize(
    ("code", "kind", "scope"),
    [
        # account limits named ResourceInsufficient (was: capacity, through the prefix)
        ("ResourceInsufficient.InsufficientGroupQuota", ErrorKind.QUOTA, ErrorScope.REGION),
        ("ResourceInsufficient.DisasterRecoverGroupCvmQuota", ErrorKind.QUOTA, ErrorScope.REGION),
        # disk parameters that do not conform: the request, not the stock
        ("ResourceInsufficient.CloudDiskUnavailable", ErrorKind.INVALID, ErrorScope.OFFER),
        # the rest of the prefix is still sold out
        ("ResourceInsufficient.SpecifiedInstanceType", ErrorKind.CAPACITY, ErrorScope.OFFER),
        # a subnet out of IPs, under either name: that zone (was: quota for VpcSubnetNum)
        ("LimitExceeded.VpcSubnetNum", ErrorKind.CAPACITY, ErrorScope.ZONE),
        ("FailedOperation.NoAvailableIpAddressCountInSubnet", ErrorKind.CAPACITY, ErrorScope.ZONE),
        ("LimitExceeded.SpotQuota", ErrorKind.QUOTA, ErrorScope.REGION),
    ],
)
def test_tencent_codes_from_the_envelope(code: str, kind: ErrorKind, scope: ErrorScope) -> None:
    with tencent() as (server, make):
        provider = make()
        server.inject_error("RunInstances", code)
        err = _refusal(provider, _launch(tc_offer("ap-guangzhou-3", 0.41)))
        assert (err.kind, err.scope, err.code) == (kind, scope, code)
        assert len(server.calls("RunInstances")) == 1


def test_tencent_full_subnet_answers_vpc_subnet_num() -> None:
    subnets = {"ap-guangzhou-3": "subnet-z3", "ap-guangzhou-4": "subnet-z4"}
    with tencent(subnet_ids=subnets) as (server, make):
        server.full_subnets.add("subnet-z3")
        provider = make()
        err = _refusal(provider, _launch(tc_offer("ap-guangzhou-3", 0.41)))
        assert (err.code, err.kind, err.scope) == (
            "LimitExceeded.VpcSubnetNum",
            ErrorKind.CAPACITY,
            ErrorScope.ZONE,
        )
        inst = provider.launch(_launch(tc_offer("ap-guangzhou-4", 0.45), job="job-2"))
        assert inst.zone == "ap-guangzhou-4"


# -- 2. a code no table knows: logged once, with the cloud's message -------------------------


def _warnings(caplog: pytest.LogCaptureFixture, code: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "provisioner.providers" and r.levelno == logging.WARNING
        if code in r.getMessage()
    ]


def test_an_unknown_code_is_logged_once_per_cloud_and_code_with_the_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    code = f"Brand.NewRefusal{uuid.uuid4().hex[:8]}"  # unseen by this process
    words = "The zone ran out of widgets for key"
    caplog.set_level(logging.WARNING, logger="provisioner.providers")
    with alibaba() as (server, make):
        provider = make()
        server.inject_error("RunInstances", code, status=400, message=f"{words} {ALI_SECRET}")
        first = _refusal(provider, _launch(ali_offer("cn-hangzhou-h", 0.36)))
        server.inject_error("RunInstances", code, status=400, message=f"{words} again")
        second = _refusal(provider, _launch(ali_offer("cn-hangzhou-h", 0.36), job="job-2"))
        assert first.kind is second.kind is ErrorKind.INVALID  # by its status, as before
        [logged] = _warnings(caplog, code)
        text = logged.getMessage()
        assert "alibaba" in text and words in text and "invalid" in text
        assert ALI_SECRET not in text and ALI_SECRET not in str(first)
        server.inject_error("RunInstances", "OperationDenied.NoStock")  # a known code: quiet
        _refusal(provider, _launch(ali_offer("cn-hangzhou-h", 0.36), job="job-3"))
        assert not _warnings(caplog, "OperationDenied.NoStock")
    with tencent() as (server, make):  # the same code from another cloud: its own line
        server.inject_error("RunInstances", code, message=words)
        _refusal(make(), _launch(tc_offer("ap-guangzhou-3", 0.41)))
        logged_by = [r.getMessage().split(" ", 1)[0] for r in _warnings(caplog, code)]
        assert logged_by == ["alibaba", "tencent"]


# -- 3. through the reconciler: the zone cools down, the region does not ----------------------

POLICY = """\
name: zone-refusal
resources: {gpus: [A10, T4], gpu_count: 1}
market: spot
bid_cap: {max_spot_price_per_hour: 1.0}
restart: {zone_cooldown: 30m}
checkpoint: {shared: true}  # no agent runs here: nothing reaches the store but this process
"""


def _run(
    cloud: str, make: Callable[[], Provider], offers: list[Offer], passes: int
) -> tuple[Store, str, datetime]:
    """Submit the policy, then run ``passes`` reconciler passes 10 s apart."""
    tmp = tempfile.mkdtemp()
    now = datetime.now(UTC)
    clock = {"now": now}
    store = Store(f"sqlite:///{tmp}/s.db")
    path = Path(tmp) / "p.yaml"
    path.write_text(POLICY)
    _, job_id = submit(
        path,
        provider=cloud,
        provider_defaults=False,
        provider_options={"package_spec": f"provisioner[{cloud}] @ {WHEEL}"},
        store=store,
        now=now,
    )
    provider = make()
    rec = Reconciler(
        store,
        catalog=Catalog.from_offers(offers),
        provider_factory=lambda _n, _o: provider,
        clock=lambda: clock["now"],
    )
    for _ in range(passes):
        rec.run_pass()
        clock["now"] += timedelta(seconds=10)
    rec.close()
    provider.close()
    return store, job_id, clock["now"]


def test_an_alibaba_job_refused_zone_not_open_runs_in_another_zone_of_the_region() -> None:
    """cn-hangzhou-h, the cheapest, with two GPU types, is not open to the account. Before:
    Zone.NotOpen was invalid, the job backed off and sent the same launch to cn-hangzhou-h
    again (4 attempts in 40 s, job `waiting`, cn-hangzhou-i never tried). Now the first
    refusal cools h down for the job (the other type there is not tried either), and the next
    launch, in the same pass, goes to cn-hangzhou-i."""
    with alibaba() as (server, make):
        server.closed_zones.add("cn-hangzhou-h")
        offers = [
            ali_offer("cn-hangzhou-h", 0.36),
            ali_t4("cn-hangzhou-h", 0.22),
            ali_offer("cn-hangzhou-i", 0.40),
        ]
        store, job_id, now = _run("alibaba", make, offers, passes=5)  # 40 s and more
        zones = [c.params.get("ZoneId") for c in server.calls("RunInstances")]
        assert zones == ["cn-hangzhou-h", "cn-hangzhou-i"], zones
        refused, running = store.attempts(job_id)
        assert (refused.zone, refused.state) == ("cn-hangzhou-h", "failed")
        assert refused.end_reason == "quota: Zone.NotOpen"
        assert refused.end_cause == "launch-refused"
        assert (running.zone, running.state) == ("cn-hangzhou-i", "running")
        assert running.instance_type == A10
        job = store.job(job_id)
        assert job is not None and job.state == "running"
        assert ("alibaba", "cn-hangzhou-h") in store.cooldowns(job_id, now)
        assert store.quotas("alibaba") == []  # nothing recorded for the region
        [failed] = [e for e in store.events(job_id) if e.kind == "launch-failed"]
        assert "cn-hangzhou-h cooled down" in failed.message
        store.close()


@pytest.mark.parametrize("cloud", ["alibaba", "tencent"])
def test_a_full_subnet_or_vswitch_moves_the_job_to_another_zone_without_a_quota_row(
    cloud: str,
) -> None:
    """Alibaba ``QuotaExceeded.PrivateIpAddress`` (was: a region-wide limit of 0 for the type)
    and Tencent ``LimitExceeded.VpcSubnetNum`` (was: quota): the zone's subnet is full, so the
    zone is cooled down and the job runs in the next one; the region keeps no quota row."""
    if cloud == "alibaba":
        fake = alibaba(vswitch_ids={"cn-hangzhou-h": "vsw-h", "cn-hangzhou-i": "vsw-i"})
        first, second = "cn-hangzhou-h", "cn-hangzhou-i"
        offers = [ali_offer(first, 0.36), ali_t4(first, 0.22), ali_offer(second, 0.40)]
        code = "QuotaExceeded.PrivateIpAddress"
    else:
        fake = tencent(subnet_ids={"ap-guangzhou-3": "subnet-z3", "ap-guangzhou-4": "subnet-z4"})
        first, second = "ap-guangzhou-3", "ap-guangzhou-4"
        offers = [tc_offer(first, 0.41), tc_offer(second, 0.45)]
        code = "LimitExceeded.VpcSubnetNum"
    with fake as (server, make):
        if cloud == "alibaba":
            server.full_vswitches.add("vsw-h")
        else:
            server.full_subnets.add("subnet-z3")
        store, job_id, now = _run(cloud, make, offers, passes=3)
        refused, running = store.attempts(job_id)
        assert (refused.zone, refused.end_reason) == (first, f"capacity: {code}")
        assert (running.zone, running.state) == (second, "running")
        assert (cloud, first) in store.cooldowns(job_id, now)
        assert store.quotas(cloud) == []
        assert len(server.calls("RunInstances")) == 2
        store.close()


# -- 4. the tables themselves -------------------------------------------------------------------


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure", "alibaba", "tencent"])
def test_zone_scoped_codes_are_refusals_the_job_moves_on_from(cloud: str) -> None:
    """The reconciler cools a zone down only for a refusal it moves on from (capacity, price,
    quota): a zone scope on any other kind would never be acted on."""
    from providers.facts import cloud_facts

    table = cloud_facts(cloud).errors
    for code in table.scopes.get(ErrorScope.ZONE, ()):
        kind = table.kind_of(code)
        assert kind.try_next_offer or kind is ErrorKind.QUOTA, (cloud, code, kind)


def test_a_scope_for_a_code_the_table_does_not_class_is_refused() -> None:
    from providers._errors import ErrorTable

    with pytest.raises(ValueError, match=r"Zone\.NotOpen"):
        ErrorTable("x", {ErrorKind.CAPACITY: ("A",)}, scopes={ErrorScope.ZONE: ("Zone.NotOpen",)})
