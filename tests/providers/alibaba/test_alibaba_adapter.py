"""Alibaba adapter: what reaches the wire, how answers and errors are read (beyond the contract).

Every test drives the real adapter and the real alibabacloud SDK against the local ECS API in
tests/fakes/alibaba_server.py.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fakes.alibaba_server import AlibabaFakeServer

from providers.alibaba import AlibabaProvider, classify_code, parse_endpoint, parse_time
from providers.base import ErrorKind, ProviderError, ProviderUnavailable, RetryPolicy
from provisioner.core.models import TAG_JOB, InstanceState, LaunchRequest, Market, Offer

pytest.importorskip("alibabacloud_ecs20140526")

FAST = RetryPolicy(attempts=3, base_delay=0.0005, max_delay=0.002)
KEY_ID = "LTAI5tAdapterTestKeyId01"
SECRET = "adapter-test-alibaba-secret-0123456789"
IMAGE = "ubuntu_22_04_x64_20G_alibase_20240101.vhd"
A10 = "ecs.gn7i-c8g1.2xlarge"


@pytest.fixture
def server() -> Iterator[AlibabaFakeServer]:
    with AlibabaFakeServer() as srv:
        yield srv


def make_provider(server: AlibabaFakeServer, **options: Any) -> AlibabaProvider:
    settings: dict[str, Any] = {
        "region": server.region,
        "endpoint": server.endpoint,
        "credentials": {"access_key_id": KEY_ID, "access_key_secret": SECRET},
        "image_id": IMAGE,
        "vswitch_id": "vsw-bp1test",
        "security_group_id": "sg-bp1test",
        "retry": FAST,
    }
    settings.update(options)
    return AlibabaProvider(**settings)


@pytest.fixture
def provider(server: AlibabaFakeServer) -> Iterator[AlibabaProvider]:
    p = make_provider(server)
    yield p
    p.close()


def offer(zone: str = "cn-hangzhou-h", instance_type: str = A10) -> Offer:
    return Offer(
        provider="alibaba",
        region="cn-hangzhou",
        zone=zone,
        instance_type=instance_type,
        gpu="A10",
        gpu_count=1,
        vcpus=8,
        memory_gib=30,
        price=1.2,
        spot_price=0.36,
    )


def request(
    market: Market = Market.SPOT,
    *,
    cap: float | None = 0.5,
    job: str = "job-1",
    attempt: int = 1,
    zone: str = "cn-hangzhou-h",
    instance_type: str = A10,
) -> LaunchRequest:
    return LaunchRequest(
        job_id=job,
        attempt=attempt,
        offer=offer(zone, instance_type),
        market=market,
        bid_cap_per_hour=cap,
        user_data="#!/bin/sh\necho hi\n",
        extra_tags={"team": "ml"},
    )


def tags_sent(params: dict[str, str]) -> dict[str, str]:
    out = {}
    n = 1
    while f"Tag.{n}.Key" in params:
        out[params[f"Tag.{n}.Key"]] = params[f"Tag.{n}.Value"]
        n += 1
    return out


# -- import and construction -----------------------------------------------------------------


def test_module_import_does_not_import_the_sdk() -> None:
    code = (
        "import sys, providers.alibaba; "
        "bad = [m for m in sys.modules if m.startswith(('alibabacloud', 'darabonba', 'Tea'))]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_sdk_missing_is_provider_unavailable(
    server: AlibabaFakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "alibabacloud_ecs20140526", None)
    monkeypatch.setitem(sys.modules, "alibabacloud_ecs20140526.client", None)
    with pytest.raises(ProviderUnavailable):
        make_provider(server).list()


def test_endpoint_forms() -> None:
    assert parse_endpoint("127.0.0.1:8080") == ("127.0.0.1:8080", "http")
    assert parse_endpoint("http://127.0.0.1:9/") == ("127.0.0.1:9", "http")
    assert parse_endpoint("ecs.cn-hangzhou.aliyuncs.com") == (
        "ecs.cn-hangzhou.aliyuncs.com",
        "https",
    )
    assert parse_endpoint(None) == (None, "https")


def test_times_in_alibabas_forms() -> None:
    assert parse_time("2017-12-10T04:04Z") == datetime(2017, 12, 10, 4, 4, tzinfo=UTC)
    assert parse_time("2017-12-10T04:04:05Z") == datetime(2017, 12, 10, 4, 4, 5, tzinfo=UTC)
    assert parse_time("") is None and parse_time("yesterday") is None


# -- the launch on the wire -------------------------------------------------------------------


def test_spot_launch_sends_price_limit_token_tags_and_user_data(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    req = request(cap=0.5)
    inst = provider.launch(req)

    [sent] = server.calls("RunInstances")
    p = sent.params
    assert p["RegionId"] == "cn-hangzhou"
    assert p["ZoneId"] == "cn-hangzhou-h"
    assert p["InstanceType"] == A10
    assert p["InstanceChargeType"] == "PostPaid"
    assert p["SpotStrategy"] == "SpotWithPriceLimit"
    assert float(p["SpotPriceLimit"]) == pytest.approx(0.5)
    assert p["SpotInterruptionBehavior"] == "Terminate"
    assert p["ClientToken"] == req.token
    assert p["InstanceName"] == req.name
    assert p["Amount"] == "1"
    assert p["ImageId"] == IMAGE
    assert p["VSwitchId"] == "vsw-bp1test"
    assert p["SecurityGroupId"] == "sg-bp1test"
    assert p["SystemDisk.Size"] == "100"
    assert tags_sent(p) == req.tags
    assert base64.b64decode(p["UserData"]).decode() == req.user_data
    # the SDK's wire format: POST / with everything in the query, the action in a header
    assert sent.body == b""
    assert sent.headers["x-acs-action"] == "RunInstances"
    assert sent.headers["x-acs-version"] == "2014-05-26"
    assert "authorization" not in sent.headers

    assert inst.market is Market.SPOT
    assert inst.state is InstanceState.PENDING
    assert inst.tags == req.tags
    assert inst.price_per_hour == pytest.approx(0.5)  # the limit the cloud holds


def test_spot_without_a_cap_bids_as_price_goes(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    provider.launch(request(cap=None))
    [sent] = server.calls("RunInstances")
    assert sent.params["SpotStrategy"] == "SpotAsPriceGo"
    assert "SpotPriceLimit" not in sent.params


def test_on_demand_launch_is_no_spot(server: AlibabaFakeServer, provider: AlibabaProvider) -> None:
    inst = provider.launch(request(Market.ON_DEMAND, cap=None))
    [sent] = server.calls("RunInstances")
    assert sent.params["InstanceChargeType"] == "PostPaid"
    assert sent.params["SpotStrategy"] == "NoSpot"
    assert "SpotPriceLimit" not in sent.params
    assert "SpotInterruptionBehavior" not in sent.params
    assert inst.market is Market.ON_DEMAND


def test_usd_cap_is_converted_for_a_cny_account(server: AlibabaFakeServer) -> None:
    server.currency = "CNY"  # a China-site account: its price answers say CNY
    provider = make_provider(server, cny_to_usd=0.14)  # no currency configured
    provider.launch(request(cap=0.5))
    [sent] = server.calls("RunInstances")
    assert sent.params["SpotPriceLimit"] == "3.571"  # 0.5 / 0.14, rounded down
    asked = [r.action for r in server.requests]
    assert "DescribeSpotPriceHistory" in asked
    assert asked.index("DescribeSpotPriceHistory") < asked.index("RunInstances")
    assert provider.currency == "CNY"
    assert provider.client.account.describe() == "CNY (reported by the cloud) at 0.1400 USD/CNY"


def test_the_rate_is_the_users(server: AlibabaFakeServer) -> None:
    server.currency = "CNY"
    make_provider(server, cny_to_usd=0.125).launch(request(cap=0.5))
    assert server.calls("RunInstances")[0].params["SpotPriceLimit"] == "4.0"


def test_a_usd_account_bids_the_cap_itself(server: AlibabaFakeServer) -> None:
    make_provider(server).launch(request(cap=0.51237))
    assert server.calls("RunInstances")[0].params["SpotPriceLimit"] == "0.512"


def test_a_configured_currency_the_cloud_contradicts_refuses_the_launch(
    server: AlibabaFakeServer,
) -> None:
    server.currency = "CNY"
    provider = make_provider(server, currency="USD")  # wrong: the account bills in CNY
    with pytest.raises(ProviderError) as caught:
        provider.launch(request(cap=0.5))
    assert (caught.value.kind, caught.value.code) == (ErrorKind.INVALID, "CurrencyMismatch")
    assert "CNY" in caught.value.message and "currency" in caught.value.message
    assert server.calls("RunInstances") == []


def test_an_unknown_currency_refuses_a_capped_launch(server: AlibabaFakeServer) -> None:
    server.currency = ""  # an answer that does not name its currency
    provider = make_provider(server)
    with pytest.raises(ProviderError) as caught:
        provider.launch(request(cap=0.5))
    assert (caught.value.kind, caught.value.code) == (ErrorKind.INVALID, "UnknownCurrency")
    assert server.calls("RunInstances") == []
    server.currency = "HKD"  # a currency with no rate set
    with pytest.raises(ProviderError) as no_rate:
        make_provider(server).launch(request(cap=0.5))
    assert no_rate.value.code == "NoExchangeRate" and "fx_rates" in no_rate.value.message
    make_provider(server, fx_rates={"HKD": 0.128}).launch(request(cap=0.5))
    assert server.calls("RunInstances")[0].params["SpotPriceLimit"] == "3.906"


def test_a_job_spec_becomes_the_bootstrap_script(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    spec = {"job_id": "job-1", "attempt": 1, "command": ["python", "train.py"]}
    req = dataclasses.replace(request(), user_data="", job_spec=spec)
    provider.launch(req)
    script = base64.b64decode(server.calls("RunInstances")[0].params["UserData"]).decode()
    assert script.startswith("#!/bin/sh")
    assert "train.py" in script and '"cloud": "alibaba"' in script


def test_the_ram_role_goes_out_as_ram_role_name(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    """RunInstances takes the instance RAM role by name, ``RamRoleName`` (the VM's identity
    for KMS secrets): Alibaba's RunInstances reference.
    https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-runinstances"""
    p = make_provider(server, ram_role="provisioner-job")
    with_role = p.launch(request(job="job-role"))
    p.close()
    without = provider.launch(request(job="job-none"))

    sent_with, sent_without = (c.params for c in server.calls("RunInstances"))
    assert sent_with["RamRoleName"] == "provisioner-job"
    assert "RamRoleName" not in sent_without
    assert server.ram_role(with_role.id) == "provisioner-job"
    assert server.ram_role(without.id) is None


def test_install_options_reach_the_bootstrap_script(server: AlibabaFakeServer) -> None:
    spec = {"job_id": "job-1", "attempt": 1, "command": ["python", "train.py"]}
    p = make_provider(server, agent_preinstalled=True)
    p.launch(dataclasses.replace(request(), user_data="", job_spec=spec))
    p.close()
    script = base64.b64decode(server.calls("RunInstances")[0].params["UserData"]).decode()
    assert "pip install" not in script and "import provisioner.agent" in script


def test_a_job_spec_carrying_a_credential_is_refused_before_the_wire(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    spec = {"job_id": "job-1", "env": {"AWS_SECRET_ACCESS_KEY": "x" * 40}}
    req = dataclasses.replace(request(), user_data="", job_spec=spec)
    with pytest.raises(ProviderError) as caught:
        provider.launch(req)
    assert caught.value.kind is ErrorKind.INVALID
    assert server.calls("RunInstances") == []


def test_zone_vswitch_map_wins(server: AlibabaFakeServer) -> None:
    provider = make_provider(server, vswitch_ids={"cn-hangzhou-i": "vsw-zone-i"})
    provider.launch(request(zone="cn-hangzhou-i"))
    assert server.calls("RunInstances")[0].params["VSwitchId"] == "vsw-zone-i"


def test_missing_image_is_invalid_and_nothing_is_sent(server: AlibabaFakeServer) -> None:
    provider = make_provider(server, image_id=None)
    with pytest.raises(ProviderError) as caught:
        provider.launch(request())
    assert caught.value.kind is ErrorKind.INVALID
    assert server.calls("RunInstances") == []


def test_client_token_makes_a_resent_launch_return_the_first_instance(
    server: AlibabaFakeServer, provider: AlibabaProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    req = request()
    first = provider.launch(req)
    # the tag lookup misses the new instance (eventual consistency): the token still holds
    monkeypatch.setattr(provider.instances, "_describe", lambda region, **kw: [])
    monkeypatch.setattr(provider.instances, "get", lambda iid: first)
    again = provider.launch(req)

    assert again.id == first.id
    sent = server.calls("RunInstances")
    assert len(sent) == 2 and {s.params["ClientToken"] for s in sent} == {req.token}
    assert list(server.instances()) == [first.id]


def test_the_lookup_is_by_job_and_attempt_not_extra_tags(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    first = provider.launch(request())
    again = provider.launch(dataclasses.replace(request(), extra_tags={"team": "other"}))
    assert again.id == first.id
    assert len(server.calls("RunInstances")) == 1


def test_an_existing_tagged_instance_is_returned_without_a_launch(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    first = provider.launch(request())
    # a new adapter (after a crash) finds the attempt's instance by its tags
    again = make_provider(server).launch(request())
    assert again.id == first.id
    assert len(server.calls("RunInstances")) == 1


# -- errors: by code, with the cloud's status --------------------------------------------------


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("OperationDenied.NoStock", ErrorKind.CAPACITY),
        ("Invalid.PrivatePoolOptions.NoStock", ErrorKind.CAPACITY),
        ("Zone.NotOnSale", ErrorKind.CAPACITY),
        ("QuotaExceed.ElasticQuota", ErrorKind.QUOTA),
        ("QuotaExceed.PostPaidInstance", ErrorKind.QUOTA),
        ("InvalidInstanceType.ValueUnauthorized", ErrorKind.QUOTA),
        ("InvalidSpotPriceLimit.LowerThanPublicPrice", ErrorKind.PRICE_TOO_LOW),
        ("InvalidAccessKeyId.NotFound", ErrorKind.AUTH),
        ("SignatureDoesNotMatch", ErrorKind.AUTH),
        ("Forbidden.RAM", ErrorKind.AUTH),
        ("InvalidInstanceId.NotFound", ErrorKind.NOT_FOUND),
        ("Throttling", ErrorKind.THROTTLED),
        ("Throttling.User", ErrorKind.THROTTLED),
        ("ServiceUnavailable", ErrorKind.TRANSIENT),
        ("InternalError", ErrorKind.TRANSIENT),
        ("InvalidParameter", ErrorKind.INVALID),
        ("InvalidImageId.NotFound", ErrorKind.INVALID),
    ],
)
def test_codes_are_classified(code: str, kind: ErrorKind) -> None:
    assert classify_code(code) is kind


def test_unknown_code_with_a_5xx_is_transient() -> None:
    assert classify_code("SomethingNew", 502) is ErrorKind.TRANSIENT
    assert classify_code("SomethingNew", 400) is ErrorKind.INVALID
    assert classify_code("SomethingNew", 429) is ErrorKind.THROTTLED


def test_an_unknown_403_or_404_is_invalid_not_auth_or_gone() -> None:
    # ECS answers many plain refusals with 403/404: an unknown one is not read as bad
    # credentials, nor (for DeleteInstances) as "already gone"
    assert classify_code("IncorrectInstanceStatus", 403) is ErrorKind.INVALID
    assert classify_code("InvalidImageId.NotFound", 404) is ErrorKind.INVALID
    assert classify_code("InvalidInstanceId.NotFound", 404) is ErrorKind.NOT_FOUND


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("OperationDenied.NoStock", 403, ErrorKind.CAPACITY),
        ("QuotaExceed.ElasticQuota", 403, ErrorKind.QUOTA),
        ("Forbidden.RAM", 403, ErrorKind.AUTH),
        ("SignatureDoesNotMatch", 400, ErrorKind.AUTH),
        ("InvalidParameter", 400, ErrorKind.INVALID),
    ],
)
def test_wire_errors_are_classified_and_not_retried(
    server: AlibabaFakeServer, provider: AlibabaProvider, code: str, status: int, kind: ErrorKind
) -> None:
    server.inject_error("RunInstances", code, status=status)
    with pytest.raises(ProviderError) as caught:
        provider.launch(request())
    assert (caught.value.kind, caught.value.code) == (kind, code)
    assert len(server.calls("RunInstances")) == 1


def test_the_server_itself_refuses_a_cap_under_the_spot_price(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    with pytest.raises(ProviderError) as caught:
        provider.launch(request(cap=0.1))  # the spot price in cn-hangzhou-h is 0.36
    assert caught.value.kind is ErrorKind.PRICE_TOO_LOW
    assert caught.value.code == "InvalidSpotPriceLimit.LowerThanPublicPrice"


def test_the_server_itself_answers_no_stock(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    with pytest.raises(ProviderError) as caught:
        provider.launch(request(instance_type="ecs.gn7e-c16g1.4xlarge", zone="cn-hangzhou-h"))
    assert caught.value.kind is ErrorKind.CAPACITY
    assert caught.value.code == "OperationDenied.NoStock"


def test_5xx_is_retried_then_succeeds(server: AlibabaFakeServer, provider: AlibabaProvider) -> None:
    inst = provider.launch(request())
    server.inject_error("DescribeInstances", "ServiceUnavailable", times=2)
    assert provider.get(inst.id).id == inst.id
    assert len(server.calls("DescribeInstances")) >= 3


def test_5xx_retries_are_bounded(server: AlibabaFakeServer, provider: AlibabaProvider) -> None:
    server.inject_error("DescribeInstances", "InternalError", times=10)
    with pytest.raises(ProviderError) as caught:
        provider.list()
    assert caught.value.kind is ErrorKind.TRANSIENT
    assert len(server.calls("DescribeInstances")) == FAST.attempts


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (502, b"<html>502 Bad Gateway</html>", ErrorKind.TRANSIENT),
        (503, b'{"Message": "busy"}', ErrorKind.TRANSIENT),  # 5xx JSON without a Code
        (429, b'{"Message": "slow down"}', ErrorKind.THROTTLED),
    ],
)
def test_gateway_answers_without_a_code_are_classified_by_status(
    server: AlibabaFakeServer,
    provider: AlibabaProvider,
    status: int,
    body: bytes,
    kind: ErrorKind,
) -> None:
    server.inject_error("DescribeInstances", "", status=status, body=body, times=10)
    with pytest.raises(ProviderError) as caught:
        provider.list()
    assert caught.value.kind is kind
    assert len(server.calls("DescribeInstances")) == FAST.attempts  # retried, bounded


def test_no_server_is_transient() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider = AlibabaProvider(
        endpoint=f"127.0.0.1:{port}",
        credentials=(KEY_ID, SECRET),
        retry=FAST,
        connect_timeout_ms=500,
        read_timeout_ms=500,
    )
    with pytest.raises(ProviderError) as caught:
        provider.list()
    assert caught.value.kind is ErrorKind.TRANSIENT


def test_credentials_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "LTAI5tFromEnv000001")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "secret-from-env-0123456789")
    with AlibabaFakeServer(known_key_ids={"LTAI5tFromEnv000001"}) as srv:
        provider = AlibabaProvider(endpoint=srv.endpoint, retry=FAST, image_id=IMAGE)
        assert provider.list() == []
        wrong = AlibabaProvider(endpoint=srv.endpoint, credentials=(KEY_ID, SECRET), retry=FAST)
        with pytest.raises(ProviderError) as caught:
            wrong.list()
    assert caught.value.kind is ErrorKind.AUTH
    assert caught.value.code == "InvalidAccessKeyId.NotFound"
    assert "secret-from-env-0123456789" not in repr(provider)


def test_secret_echoed_by_the_cloud_is_redacted_from_errors_and_logs(
    server: AlibabaFakeServer, provider: AlibabaProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.inject_error("DescribeInstances", "Throttling.User")
    provider.list()  # one logged retry
    server.inject_error(
        "RunInstances",
        "SignatureDoesNotMatch",
        message=f"string to sign used key {SECRET} and id {KEY_ID}",
    )
    with pytest.raises(ProviderError) as caught:
        provider.launch(request())
    for text in (str(caught.value), repr(caught.value), caught.value.message, caplog.text):
        assert SECRET not in text
        assert KEY_ID not in text
    assert "***" in caught.value.message
    assert any(r.name.startswith("provisioner") for r in caplog.records)


# -- reading answers: offers, prices, instances ----------------------------------------------


def test_offers_are_gpu_types_in_zones_with_stock(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    offers = provider.offers()
    by_type: dict[str, set[str]] = {}
    for o in offers:
        by_type.setdefault(o.instance_type, set()).add(o.zone)
    assert by_type == {
        A10: {"cn-hangzhou-h", "cn-hangzhou-i"},
        "ecs.gn6i-c4g1.xlarge": {"cn-hangzhou-h", "cn-hangzhou-i", "cn-hangzhou-j"},
        "ecs.gn7e-c16g1.4xlarge": {"cn-hangzhou-i"},
    }
    a10 = next(o for o in offers if o.instance_type == A10)
    assert (a10.gpu, a10.gpu_count, a10.vcpus, a10.memory_gib) == ("A10", 1, 8.0, 30.0)
    assert {o.gpu for o in offers} == {"A10", "T4", "A100"}
    assert server.calls("DescribeInstanceTypes")[0].params["MinimumGPUAmount"] == "1"


def test_prices_take_the_newest_point_per_zone(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    quotes = {(q.instance_type, q.zone): q for q in provider.prices()}
    a10h = quotes[(A10, "cn-hangzhou-h")]
    assert a10h.spot_price == pytest.approx(0.36)  # not the hour-old 0.396
    assert a10h.on_demand_price == pytest.approx(1.20)
    assert a10h.at > datetime.now(UTC) - timedelta(minutes=5)
    assert (A10, "cn-hangzhou-j") not in quotes
    sent = server.calls("DescribeSpotPriceHistory")
    assert {s.params["InstanceType"] for s in sent} == {
        A10,
        "ecs.gn6i-c4g1.xlarge",
        "ecs.gn7e-c16g1.4xlarge",
    }
    assert all(s.params["NetworkType"] == "vpc" for s in sent)


def test_prices_in_cny_are_converted_to_usd() -> None:
    with AlibabaFakeServer(currency="CNY") as srv:
        provider = make_provider(srv, cny_to_usd=0.14, instance_types=[A10])
        quotes = {q.zone: q for q in provider.prices()}
    assert quotes["cn-hangzhou-h"].spot_price == pytest.approx(0.36 * 0.14)
    assert quotes["cn-hangzhou-h"].on_demand_price == pytest.approx(1.20 * 0.14)
    assert provider.currency == "CNY"


def test_prices_in_an_unknown_currency_are_left_out() -> None:
    with AlibabaFakeServer(currency="EUR") as srv:  # no EUR rate set: not comparable to USD
        quotes = make_provider(srv, instance_types=[A10]).prices()
    assert quotes and all(q.spot_price is None and q.on_demand_price is None for q in quotes)


def test_instances_read_pending_then_running(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    inst = provider.launch(request())
    assert inst.state is InstanceState.PENDING
    later = provider.get(inst.id)
    assert later.state is InstanceState.RUNNING
    assert later.raw_state == "Running"
    assert later.public_ip and later.private_ip
    assert later.launched_at is not None
    assert later.zone == "cn-hangzhou-h"


def test_list_follows_next_token(
    server: AlibabaFakeServer, provider: AlibabaProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(provider.client, "page", 2)
    ids = {provider.launch(request(job=f"job-{n}")).id for n in range(5)}
    before = len(server.calls("DescribeInstances"))
    assert {i.id for i in provider.list()} == ids
    listed = server.calls("DescribeInstances")[before:]
    assert len(listed) == 3
    assert [c.params.get("NextToken") for c in listed] == [None, "2", "4"]


def test_the_recycling_lock_is_the_reclaim_notice(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    """ECS locks a reclaimed spot instance with ``Recycling`` minutes before it releases it:
    the instance still runs (its job checkpoints on the metadata's termination time), so the
    lock is a notice, not the preemption; the release is."""
    since = datetime.now(UTC) - timedelta(seconds=1)
    inst = provider.launch(request())
    server.preempt(inst.id)

    got = provider.get(inst.id)
    assert got.state is InstanceState.RUNNING and got.state.alive
    assert got.raw_state == "Running"  # still there, locked, until ECS releases it
    assert "Recycling" in got.state_reason
    [found] = provider.interruptions(since)
    assert (found.instance_id, found.kind, found.zone) == (inst.id, "notice", "cn-hangzhou-h")
    assert found.deadline is None  # the API does not say when: the VM's metadata does
    assert "Recycling" in found.raw
    # dated when seen: a window that starts after this call has nothing yet
    assert provider.interruptions(datetime.now(UTC) + timedelta(seconds=1)) == []

    server.release(inst.id)
    with pytest.raises(ProviderError) as caught:
        provider.get(inst.id)
    assert caught.value.kind is ErrorKind.NOT_FOUND
    assert provider.interruptions(since) == []  # released: in no list any more


def test_preemption_is_read_from_the_cloud_on_every_call_not_remembered(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    inst = provider.launch(request())
    server.preempt(inst.id)
    fresh = make_provider(server)  # a restarted daemon: it never saw the instance alive
    assert fresh.get(inst.id).state is InstanceState.RUNNING  # locked: under notice
    for adapter in (fresh, provider, provider):  # level-triggered: while the lock stands
        assert [i.instance_id for i in adapter.interruptions(since)] == [inst.id]
    assert server.calls("DescribeInstances")[-1].params["LockReason"] == "Recycling"
    server.release(inst.id)  # released: in no list; the control loop reads that from the store
    assert fresh.interruptions(since) == [] and provider.interruptions(since) == []
    assert provider.list() == []


def test_own_termination_is_not_an_interruption(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    inst = provider.launch(request())
    provider.terminate([inst.id])
    assert provider.interruptions(since) == []


def test_terminate_forces_and_skips_unknown_ids(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    a = provider.launch(request(job="job-a"))
    b = provider.launch(request(job="job-b"))
    provider.get(a.id)  # Running: needs Force
    provider.terminate([a.id, "i-unknown0000000000000", b.id])

    assert server.instances() == {}
    deletes = server.calls("DeleteInstances")
    assert all(d.params["Force"].lower() == "true" for d in deletes)  # the SDK sends "True"
    assert len(deletes) == 4  # the batch (refused: one unknown id), then one by one
    assert provider.list({TAG_JOB: "job-a"}) == []


def test_interruptions_accept_a_naive_since(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    inst = provider.launch(request())
    server.preempt(inst.id)
    naive = datetime.now(UTC).replace(tzinfo=None) - timedelta(seconds=5)
    assert [i.instance_id for i in provider.interruptions(naive)] == [inst.id]


def test_recorded_requests_are_json_decodable_for_instance_ids(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    inst = provider.launch(request())
    provider.get(inst.id)
    last = server.calls("DescribeInstances")[-1]
    assert json.loads(last.params["InstanceIds"]) == [inst.id]


def test_every_list_and_price_call_crosses_pages(server: AlibabaFakeServer) -> None:
    server.max_page = 1  # one row a page, whatever MaxResults asks for
    provider = make_provider(server)
    ids = {provider.launch(request(job=f"job-{n}")).id for n in range(3)}
    server.requests.clear()
    assert {i.id for i in provider.list()} == ids
    offers = provider.offers()
    assert len({o.instance_type for o in offers}) > 1
    quotes = provider.prices()
    assert len({q.zone for q in quotes if q.instance_type == A10}) > 1

    def tokens(action: str, key: str) -> list[str | None]:
        return [r.params.get(key) for r in server.calls(action)]

    assert tokens("DescribeInstances", "NextToken")[:3] == [None, "1", "2"]
    assert "1" in tokens("DescribeInstanceTypes", "NextToken")
    assert "1" in tokens("DescribeSpotPriceHistory", "Offset")  # NextOffset followed


def test_a_cap_held_by_the_daemon_bids_as_price_goes(
    server: AlibabaFakeServer, provider: AlibabaProvider
) -> None:
    """``bid_cap.enforce: daemon`` (Alibaba's default): SpotAsPriceGo, no price limit."""
    provider.launch(replace(request(cap=0.5), cap_on_wire=False))
    [sent] = server.calls("RunInstances")
    assert sent.params["SpotStrategy"] == "SpotAsPriceGo"
    assert "SpotPriceLimit" not in sent.params
