"""Tencent adapter: what reaches the wire, how answers and errors are read (beyond the contract).

Every test drives the real adapter and the real tencentcloud SDK against the local CVM API in
tests/fakes/tencent_server.py.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fakes.tencent_server import TencentFakeServer

from providers.base import ErrorKind, ProviderError, ProviderUnavailable, RetryPolicy
from providers.tencent import TencentProvider, classify_code, gpu_for, price_text
from provisioner.core.models import TAG_JOB, InstanceState, LaunchRequest, Market, Offer

pytest.importorskip("tencentcloud.cvm")

FAST = RetryPolicy(attempts=3, base_delay=0.0005, max_delay=0.002)
SECRET_ID = "AKIDadapterTestSecretId000000001"
SECRET_KEY = "adapter-test-tencent-key-0123456789"
IMAGE = "img-eb30mz89"
T4 = "GN7.2XLARGE32"
CHARSET = "application/json; charset=utf-8"


@pytest.fixture
def server() -> Iterator[TencentFakeServer]:
    with TencentFakeServer() as srv:
        yield srv


def make_provider(server: TencentFakeServer, **options: Any) -> TencentProvider:
    settings: dict[str, Any] = {
        "region": server.region,
        "endpoint": server.endpoint,
        "credentials": {"secret_id": SECRET_ID, "secret_key": SECRET_KEY},
        "image_id": IMAGE,
        "vpc_id": "vpc-test0001",
        "subnet_id": "subnet-test0001",
        "security_group_ids": ["sg-test0001"],
        "currency": "USD",  # Tencent's price answers do not say; an international account
        "retry": FAST,
    }
    settings.update(options)
    return TencentProvider(**settings)


@pytest.fixture
def provider(server: TencentFakeServer) -> Iterator[TencentProvider]:
    p = make_provider(server)
    yield p
    p.close()


def offer(
    zone: str = "ap-guangzhou-3", instance_type: str = T4, price: float | None = 1.30
) -> Offer:
    return Offer(
        provider="tencent",
        region="ap-guangzhou",
        zone=zone,
        instance_type=instance_type,
        gpu="T4",
        gpu_count=1,
        vcpus=8,
        memory_gib=32,
        price=price,
        spot_price=0.41,
    )


def request(
    market: Market = Market.SPOT,
    *,
    cap: float | None = 0.5,
    job: str = "job-1",
    zone: str = "ap-guangzhou-3",
    instance_type: str = T4,
    price: float | None = 1.30,
) -> LaunchRequest:
    return LaunchRequest(
        job_id=job,
        attempt=1,
        offer=offer(zone, instance_type, price),
        market=market,
        bid_cap_per_hour=cap,
        user_data="#!/bin/sh\necho hi\n",
        extra_tags={"team": "ml"},
    )


# -- import and construction -----------------------------------------------------------------


def test_module_import_does_not_import_the_sdk() -> None:
    code = (
        "import sys, providers.tencent; "
        "bad = [m for m in sys.modules if m.startswith('tencentcloud')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_sdk_missing_is_provider_unavailable(
    server: TencentFakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tencentcloud.cvm.v20170312", None)
    with pytest.raises(ProviderUnavailable):
        make_provider(server).list()


def test_no_credentials_is_auth(
    server: TencentFakeServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TENCENTCLOUD_SECRET_ID", raising=False)
    monkeypatch.delenv("TENCENTCLOUD_SECRET_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ProviderError) as caught:
        TencentProvider(endpoint=server.endpoint, retry=FAST).list()
    assert (caught.value.kind, caught.value.code) == (ErrorKind.AUTH, "MissingCredentials")
    assert server.requests == []


def test_credentials_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENCENTCLOUD_SECRET_ID", "AKIDfromEnvironment0001")
    monkeypatch.setenv("TENCENTCLOUD_SECRET_KEY", "key-from-env-0123456789")
    with TencentFakeServer(known_secret_ids={"AKIDfromEnvironment0001"}) as srv:
        assert TencentProvider(endpoint=srv.endpoint, retry=FAST).list() == []
        wrong = TencentProvider(
            endpoint=srv.endpoint, credentials=(SECRET_ID, SECRET_KEY), retry=FAST
        )
        with pytest.raises(ProviderError) as caught:
            wrong.list()
    assert (caught.value.kind, caught.value.code) == (
        ErrorKind.AUTH,
        "AuthFailure.SecretIdNotFound",
    )


def test_credentials_come_from_the_sdk_profile_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TENCENTCLOUD_SECRET_ID", raising=False)
    monkeypatch.delenv("TENCENTCLOUD_SECRET_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".tencentcloud").mkdir()
    (tmp_path / ".tencentcloud" / "credentials").write_text(
        "[default]\nsecret_id = AKIDfromProfile0001\nsecret_key = key-from-profile-0123456789\n"
    )
    with TencentFakeServer(known_secret_ids={"AKIDfromProfile0001"}) as srv:
        assert TencentProvider(endpoint=srv.endpoint, retry=FAST).list() == []


@pytest.mark.parametrize(
    ("cap", "text"),
    [(0.5, "0.50"), (1, "1.00"), (0.123, "0.123"), (0.12345, "0.1234"), (2.999999, "2.9999")],
)
def test_max_price_text_never_exceeds_the_cap(cap: float, text: str) -> None:
    assert price_text(cap) == text
    assert float(price_text(cap)) <= cap


def test_gpu_names() -> None:
    assert gpu_for("GN7.2XLARGE32") == "T4"
    assert gpu_for("GN10Xp.2XLARGE40") in ("V100", "V100-32GB")
    assert gpu_for("NEWFAM.2XLARGE", "NEWFAM", "GPU Compute NEWFAM 1*L40") == "L40"


# -- the launch on the wire -------------------------------------------------------------------


def test_spot_launch_sends_spotpaid_market_options_token_tags_and_user_data(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    req = request(cap=0.5)
    inst = provider.launch(req)

    [sent] = server.calls("RunInstances")
    p = sent.params
    assert p["InstanceChargeType"] == "SPOTPAID"
    assert p["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {"MaxPrice": "0.50", "SpotInstanceType": "one-time"},
    }
    assert p["ClientToken"] == req.token
    assert p["InstanceName"] == req.name
    assert p["Placement"] == {"Zone": "ap-guangzhou-3"}
    assert p["InstanceType"] == T4
    assert p["ImageId"] == IMAGE
    assert p["InstanceCount"] == 1
    assert p["SystemDisk"] == {"DiskSize": 100}
    assert p["VirtualPrivateCloud"] == {"VpcId": "vpc-test0001", "SubnetId": "subnet-test0001"}
    assert p["SecurityGroupIds"] == ["sg-test0001"]
    [spec] = p["TagSpecification"]
    assert spec["ResourceType"] == "instance"
    assert {t["Key"]: t["Value"] for t in spec["Tags"]} == req.tags
    assert base64.b64decode(p["UserData"]).decode() == req.user_data
    # the SDK's wire format: a JSON body, the action and version in X-TC-* headers
    assert sent.headers["x-tc-action"] == "RunInstances"
    assert sent.headers["x-tc-version"] == "2017-03-12"
    assert sent.headers["x-tc-region"] == "ap-guangzhou"
    assert sent.headers["content-type"] == "application/json"
    assert "authorization" not in sent.headers

    assert inst.market is Market.SPOT
    assert inst.state is InstanceState.PENDING
    assert inst.tags == req.tags


def test_on_demand_launch_is_postpaid_by_hour(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    inst = provider.launch(request(Market.ON_DEMAND, cap=None))
    [sent] = server.calls("RunInstances")
    assert sent.params["InstanceChargeType"] == "POSTPAID_BY_HOUR"
    assert "InstanceMarketOptions" not in sent.params
    assert inst.market is Market.ON_DEMAND


def test_spot_without_a_cap_bids_the_on_demand_price(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    provider.launch(request(cap=None))
    options = server.calls("RunInstances")[0].params["InstanceMarketOptions"]
    assert options["SpotOptions"]["MaxPrice"] == "1.30"


def test_spot_without_any_price_is_invalid_and_nothing_is_sent(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    with pytest.raises(ProviderError) as caught:
        provider.launch(request(cap=None, price=None))
    assert (caught.value.kind, caught.value.code) == (ErrorKind.INVALID, "MissingMaxPrice")
    assert server.calls("RunInstances") == []


def test_a_job_spec_becomes_the_bootstrap_script(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    spec = {"job_id": "job-1", "attempt": 1, "command": ["python", "train.py"]}
    req = dataclasses.replace(request(), user_data="", job_spec=spec)
    provider.launch(req)
    script = base64.b64decode(server.calls("RunInstances")[0].params["UserData"]).decode()
    assert script.startswith("#!/bin/sh")
    assert "train.py" in script and '"cloud": "tencent"' in script


def test_the_cam_role_goes_out_as_cam_role_name(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    """RunInstances takes the CVM's CAM role by name, ``CamRoleName`` (the VM's identity for
    SSM secrets), and the instance reports it back: Tencent's RunInstances reference.
    https://www.tencentcloud.com/document/api/213/15730"""
    p = make_provider(server, cam_role="provisioner-job")
    with_role = p.launch(request(job="job-role"))
    p.close()
    without = provider.launch(request(job="job-none"))

    sent_with, sent_without = (c.params for c in server.calls("RunInstances"))
    assert sent_with["CamRoleName"] == "provisioner-job"
    assert "CamRoleName" not in sent_without
    kept = server.instances()
    assert kept[with_role.id]["CamRoleName"] == "provisioner-job"
    assert kept[without.id]["CamRoleName"] == ""


def test_install_options_reach_the_bootstrap_script(server: TencentFakeServer) -> None:
    spec = {"job_id": "job-1", "attempt": 1, "command": ["python", "train.py"]}
    p = make_provider(server, agent_preinstalled=True)
    p.launch(dataclasses.replace(request(), user_data="", job_spec=spec))
    p.close()
    script = base64.b64decode(server.calls("RunInstances")[0].params["UserData"]).decode()
    assert "pip install" not in script and "import provisioner.agent" in script


def test_usd_cap_is_converted_for_a_cny_account(server: TencentFakeServer) -> None:
    make_provider(server, currency="CNY", cny_to_usd=0.14).launch(request(cap=0.5))
    options = server.calls("RunInstances")[0].params["InstanceMarketOptions"]
    assert options["SpotOptions"]["MaxPrice"] == "3.5714"


def test_an_unknown_currency_refuses_a_spot_launch_and_leaves_prices_out(
    server: TencentFakeServer,
) -> None:
    provider = make_provider(server, currency=None)
    with pytest.raises(ProviderError) as caught:
        provider.launch(request(cap=0.5))
    assert (caught.value.kind, caught.value.code) == (ErrorKind.INVALID, "UnknownCurrency")
    assert "currency" in caught.value.message
    assert server.calls("RunInstances") == []
    offers = provider.offers()
    assert offers and all(o.price is None and o.spot_price is None for o in offers)
    # on-demand carries no price: it may go ahead
    assert provider.launch(request(Market.ON_DEMAND, cap=None)).market is Market.ON_DEMAND


def test_a_currency_the_price_answer_reports_is_taken(server: TencentFakeServer) -> None:
    server.price_currency = "CNY"  # should a price answer name its currency, it wins
    provider = make_provider(server, currency=None, instance_types=[T4])
    quotes = {q.zone: q for q in provider.prices()}
    assert provider.currency == "CNY"
    assert quotes["ap-guangzhou-3"].spot_price == pytest.approx(0.41 * 0.14)
    mismatch = make_provider(server, currency="USD", instance_types=[T4])
    mismatch.prices()
    with pytest.raises(ProviderError) as caught:
        mismatch.launch(request(cap=0.5))
    assert caught.value.code == "CurrencyMismatch"


def test_client_token_makes_a_resent_launch_return_the_first_instance(
    server: TencentFakeServer, provider: TencentProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    req = request()
    first = provider.launch(req)
    monkeypatch.setattr(
        provider.instances, "_describe", lambda region, **kw: []
    )  # lookup misses it
    monkeypatch.setattr(provider.instances, "get", lambda iid: first)
    again = provider.launch(req)

    assert again.id == first.id
    sent = server.calls("RunInstances")
    assert len(sent) == 2 and {s.params["ClientToken"] for s in sent} == {req.token}
    assert list(server.instances()) == [first.id]


def test_the_lookup_is_by_job_and_attempt_not_extra_tags(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    first = provider.launch(request())
    again = provider.launch(dataclasses.replace(request(), extra_tags={"team": "other"}))
    assert again.id == first.id
    assert len(server.calls("RunInstances")) == 1


def test_an_existing_tagged_instance_is_returned_without_a_launch(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    first = provider.launch(request())
    again = make_provider(server).launch(request())
    assert again.id == first.id
    assert len(server.calls("RunInstances")) == 1
    lookup = server.calls("DescribeInstances")[0].params
    assert {f["Name"] for f in lookup["Filters"]} >= {
        "tag:provisioner-job",
        "tag:provisioner-attempt",
    }


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("ResourceInsufficient.SpecifiedInstanceType", ErrorKind.CAPACITY),
        ("ResourcesSoldOut.SpecifiedInstanceType", ErrorKind.CAPACITY),
        ("ResourceInsufficient.ZoneSoldOutForSpecifiedInstance", ErrorKind.CAPACITY),
        ("ResourceInsufficient.AvailabilityZoneSoldOut", ErrorKind.CAPACITY),
        ("UnsupportedOperation.NoInstanceTypeSupportSpot", ErrorKind.CAPACITY),
        ("LimitExceeded.SpotQuota", ErrorKind.QUOTA),
        ("LimitExceeded.UserSpotQuota", ErrorKind.QUOTA),
        ("LimitExceeded.InstanceQuota", ErrorKind.QUOTA),
        ("InvalidParameterValue.InsufficientPrice", ErrorKind.PRICE_TOO_LOW),
        ("AuthFailure.SecretIdNotFound", ErrorKind.AUTH),
        ("AuthFailure.SignatureFailure", ErrorKind.AUTH),
        ("UnauthorizedOperation", ErrorKind.AUTH),
        ("InvalidInstanceId.NotFound", ErrorKind.NOT_FOUND),
        ("RequestLimitExceeded", ErrorKind.THROTTLED),
        ("RequestLimitExceeded.UinLimitExceeded", ErrorKind.THROTTLED),
        ("InternalError", ErrorKind.TRANSIENT),
        ("InternalError.TradeUnknownError", ErrorKind.TRANSIENT),
        ("ServiceUnavailable", ErrorKind.TRANSIENT),
        ("InvalidParameterValue", ErrorKind.INVALID),
        ("MissingParameter", ErrorKind.INVALID),
    ],
)
def test_codes_are_classified(code: str, kind: ErrorKind) -> None:
    assert classify_code(code) is kind


@pytest.mark.parametrize("content_type", ["application/json", CHARSET])
def test_error_envelope_is_classified_whatever_the_content_type(
    server: TencentFakeServer, provider: TencentProvider, content_type: str
) -> None:
    """The trap: with ``; charset=utf-8`` the SDK does not raise; the adapter still must."""
    server.content_type = content_type
    server.inject_error("RunInstances", "ResourceInsufficient.SpecifiedInstanceType")
    with pytest.raises(ProviderError) as caught:
        provider.launch(request())
    assert caught.value.kind is ErrorKind.CAPACITY
    assert caught.value.code == "ResourceInsufficient.SpecifiedInstanceType"
    assert len(server.calls("RunInstances")) == 1


def test_the_sdk_alone_misses_an_error_sent_with_a_charset(server: TencentFakeServer) -> None:
    """Why the adapter reads the envelope itself: the typed SDK call returns an empty answer."""
    from tencentcloud.common import credential
    from tencentcloud.common.profile.client_profile import ClientProfile
    from tencentcloud.common.profile.http_profile import HttpProfile
    from tencentcloud.cvm.v20170312 import cvm_client, models

    server.content_type = CHARSET
    server.inject_error("RunInstances", "ResourceInsufficient.SpecifiedInstanceType")
    profile = ClientProfile(httpProfile=HttpProfile(endpoint=server.endpoint, protocol="http"))
    client = cvm_client.CvmClient(
        credential.Credential(SECRET_ID, SECRET_KEY), server.region, profile
    )
    answer = client.RunInstances(models.RunInstancesRequest())
    assert answer.InstanceIdSet is None  # no exception: the error vanished


def test_throttling_with_a_charset_is_still_retried(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    server.content_type = CHARSET
    server.inject_error("RunInstances", "RequestLimitExceeded", times=2)
    inst = provider.launch(request())
    assert len(server.calls("RunInstances")) == 3
    assert inst.tags[TAG_JOB] == "job-1"


def test_the_server_itself_refuses_a_cap_under_the_spot_price(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    with pytest.raises(ProviderError) as caught:
        provider.launch(request(cap=0.1))  # spot is 0.41 in ap-guangzhou-3
    assert (caught.value.kind, caught.value.code) == (
        ErrorKind.PRICE_TOO_LOW,
        "InvalidParameterValue.InsufficientPrice",
    )


def test_the_server_itself_answers_sold_out(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    with pytest.raises(ProviderError) as caught:
        provider.launch(request(zone="ap-guangzhou-6"))  # no spot T4 there
    assert caught.value.kind is ErrorKind.CAPACITY


def test_a_gateway_5xx_is_retried_then_succeeds(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    server.inject_error("DescribeInstances", status=502, times=2)
    assert provider.list() == []
    assert len(server.calls("DescribeInstances")) == 3


def test_a_gateway_5xx_retries_are_bounded(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    server.inject_error("DescribeInstances", status=502, times=10)
    with pytest.raises(ProviderError) as caught:
        provider.list()
    assert (caught.value.kind, caught.value.code) == (ErrorKind.TRANSIENT, "ServerNetworkError")
    assert len(server.calls("DescribeInstances")) == FAST.attempts


def test_no_server_is_transient() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider = TencentProvider(
        endpoint=f"127.0.0.1:{port}", credentials=(SECRET_ID, SECRET_KEY), retry=FAST, timeout_s=1
    )
    with pytest.raises(ProviderError) as caught:
        provider.list()
    assert caught.value.kind is ErrorKind.TRANSIENT


def test_secret_echoed_by_the_cloud_is_redacted_from_errors_and_logs(
    server: TencentFakeServer, provider: TencentProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.inject_error("DescribeInstances", "RequestLimitExceeded")
    provider.list()  # one logged retry; the SDK logs every request at DEBUG
    server.inject_error(
        "RunInstances",
        "AuthFailure.SignatureFailure",
        message=f"signature computed with {SECRET_KEY} for {SECRET_ID}",
    )
    with pytest.raises(ProviderError) as caught:
        provider.launch(request())
    assert caught.value.kind is ErrorKind.AUTH
    for text in (str(caught.value), repr(caught.value), caught.value.message, caplog.text):
        assert SECRET_KEY not in text
        assert SECRET_ID not in text
    assert any(r.name == "tencentcloud_sdk_common" for r in caplog.records)
    assert any(r.name.startswith("provisioner") for r in caplog.records)


# -- reading answers: offers, prices, instances ----------------------------------------------


def test_offers_are_whole_gpu_types_on_sale(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    offers = {(o.zone, o.instance_type): o for o in provider.offers()}
    assert set(offers) == {
        ("ap-guangzhou-3", T4),
        ("ap-guangzhou-4", T4),
        ("ap-guangzhou-6", T4),
        ("ap-guangzhou-3", "PNV4.7XLARGE116"),
        ("ap-guangzhou-6", "PNV4.7XLARGE116"),
        ("ap-guangzhou-4", "GT4.4XLARGE96"),
    }  # no vGPU slice (GN7vw), no CPU type (S5)
    t4 = offers[("ap-guangzhou-3", T4)]
    assert (t4.gpu, t4.gpu_count, t4.vcpus, t4.memory_gib) == ("T4", 1, 8.0, 32.0)
    assert (t4.price, t4.spot_price) == (pytest.approx(1.30), pytest.approx(0.41))
    assert offers[("ap-guangzhou-6", T4)].spot_price is None  # spot sold out there
    assert offers[("ap-guangzhou-4", "GT4.4XLARGE96")].gpu == "A100"
    [sent] = server.calls("DescribeZoneInstanceConfigInfos")
    assert sent.params["Filters"] == [
        {"Name": "instance-charge-type", "Values": ["SPOTPAID", "POSTPAID_BY_HOUR"]}
    ]


def test_prices_come_from_inquiry_for_both_markets(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    quotes = {(q.zone, q.instance_type): q for q in provider.prices()}
    q = quotes[("ap-guangzhou-3", T4)]
    assert (q.spot_price, q.on_demand_price) == (pytest.approx(0.41), pytest.approx(1.30))
    assert quotes[("ap-guangzhou-6", T4)].spot_price is None  # sold out: no quote
    inquiries = server.calls("InquiryPriceRunInstances")
    assert len(inquiries) == 10  # 6 pairs on sale pay-as-you-go, 4 of them as spot too
    spot = [i.params for i in inquiries if i.params["InstanceChargeType"] == "SPOTPAID"]
    assert spot and all(p["InstanceMarketOptions"]["MarketType"] == "spot" for p in spot)
    assert {i.params["InstanceChargeType"] for i in inquiries} == {"SPOTPAID", "POSTPAID_BY_HOUR"}
    assert all(i.params["ImageId"] == IMAGE for i in inquiries)


def test_prices_without_an_image_come_from_the_zone_listing(server: TencentFakeServer) -> None:
    quotes = {(q.zone, q.instance_type): q for q in make_provider(server, image_id=None).prices()}
    assert quotes[("ap-guangzhou-3", T4)].spot_price == pytest.approx(0.41)
    assert server.calls("InquiryPriceRunInstances") == []


def test_cny_prices_are_converted(server: TencentFakeServer) -> None:
    provider = make_provider(server, currency="CNY", cny_to_usd=0.14, instance_types=[T4])
    quotes = {q.zone: q for q in provider.prices()}
    assert quotes["ap-guangzhou-3"].spot_price == pytest.approx(0.41 * 0.14)


def test_instances_read_pending_then_running(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    inst = provider.launch(request())
    assert inst.state is InstanceState.PENDING
    later = provider.get(inst.id)
    assert (later.state, later.raw_state) == (InstanceState.RUNNING, "RUNNING")
    assert later.public_ip and later.private_ip and later.launched_at
    assert later.zone == "ap-guangzhou-3"


def test_launch_failed_reads_terminated_with_the_reason(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    inst = provider.launch(request())
    with server._lock:
        raw = server._state.instances[inst.id]
        raw["InstanceState"] = "LAUNCH_FAILED"
        raw["LatestOperationErrorMsg"] = "image not usable"
    got = provider.get(inst.id)
    assert got.state is InstanceState.TERMINATED
    assert got.state_reason == "image not usable"


def test_list_pages_by_offset(
    server: TencentFakeServer, provider: TencentProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(provider.client, "page", 2)
    ids = {provider.launch(request(job=f"job-{n}")).id for n in range(5)}
    before = len(server.calls("DescribeInstances"))
    assert {i.id for i in provider.list()} == ids
    listed = server.calls("DescribeInstances")[before:]
    assert [c.params["Offset"] for c in listed] == [0, 2, 4]


def test_preemption_is_a_spot_instance_going_away_that_we_did_not_terminate(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    inst = provider.launch(request())
    server.preempt(inst.id)

    got = provider.get(inst.id)
    assert (got.state, got.raw_state) == (InstanceState.PREEMPTED, "TERMINATING")
    [found] = provider.interruptions(since)
    assert (found.instance_id, found.kind, found.zone) == (inst.id, "preempted", "ap-guangzhou-3")
    filters = server.calls("DescribeInstances")[-1].params["Filters"]
    assert {"Name": "instance-charge-type", "Values": ["SPOTPAID"]} in filters
    assert provider.interruptions(datetime.now(UTC) + timedelta(seconds=1)) == []

    server.release(inst.id)
    with pytest.raises(ProviderError) as caught:
        provider.get(inst.id)
    assert caught.value.kind is ErrorKind.NOT_FOUND
    assert provider.interruptions(since) == []  # released: in no list any more


def test_preemption_is_read_from_the_cloud_on_every_call_not_remembered(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    inst = provider.launch(request())
    server.preempt(inst.id)
    fresh = make_provider(server)  # a restarted daemon: it never saw the instance alive
    assert fresh.get(inst.id).state is InstanceState.PREEMPTED
    for adapter in (fresh, provider, provider):  # level-triggered: while it is going away
        assert [i.instance_id for i in adapter.interruptions(since)] == [inst.id]
    server.release(inst.id)  # released: in no list; the control loop reads that from the store
    assert fresh.interruptions(since) == [] and provider.interruptions(since) == []
    assert provider.list() == []


def test_own_termination_is_not_a_preemption_even_for_a_fresh_adapter(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    inst = provider.launch(request())
    provider.terminate([inst.id])
    fresh = make_provider(server)  # no memory of the terminate: the cloud's fields tell
    got = fresh.get(inst.id)
    assert (got.state, got.raw_state) == (InstanceState.TERMINATED, "SHUTDOWN")
    assert fresh.interruptions(since) == []
    assert provider.interruptions(since) == []


def test_terminate_twice_releases_from_the_recycle_bin(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    a = provider.launch(request(job="job-a"))
    b = provider.launch(request(job="job-b"))
    provider.terminate([a.id, b.id])
    assert {i["InstanceState"] for i in server.instances().values()} == {"SHUTDOWN"}
    provider.terminate([a.id, "ins-unknown1", b.id])  # a gone id fails the batch: one by one
    assert server.instances() == {}
    assert len(server.calls("TerminateInstances")) == 1 + 1 + 3
    provider.terminate([a.id])  # gone: not an error


def test_short_pages_from_the_server_are_followed_to_total_count(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    server.max_page = 2  # the server answers fewer than Limit=100 asks for
    ids = {provider.launch(request(job=f"job-{n}")).id for n in range(5)}
    before = len(server.calls("DescribeInstances"))
    assert {i.id for i in provider.list()} == ids
    listed = server.calls("DescribeInstances")[before:]
    assert [(c.params["Offset"], c.params["Limit"]) for c in listed] == [
        (0, 100),
        (2, 100),
        (4, 100),
    ]
    server.preempt(sorted(ids)[-1])
    since = datetime.now(UTC) - timedelta(seconds=5)
    assert [i.instance_id for i in provider.interruptions(since)] == [sorted(ids)[-1]]


def test_a_cap_held_by_the_daemon_bids_the_on_demand_price(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    """``bid_cap.enforce: daemon``: Tencent takes no spot launch without a MaxPrice, so the
    on-demand price goes, not the cap."""
    provider.launch(replace(request(cap=0.5), cap_on_wire=False))
    options = server.calls("RunInstances")[0].params["InstanceMarketOptions"]
    assert options["SpotOptions"]["MaxPrice"] == "1.30"
