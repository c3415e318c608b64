"""Tencent CVM requests asserted field by field against the published API (version 2017-03-12)
and ../shared/reference/clouds.md, as the real SDK puts them on the wire.

What the reference says, and is checked here on every request of each action:

- Common: ``POST /``, JSON body, ``Content-Type: application/json``, the action in
  ``X-TC-Action``, ``X-TC-Version: 2017-03-12``, ``X-TC-Region``, ``X-TC-Timestamp`` (Unix
  seconds), a ``TC3-HMAC-SHA256`` ``Authorization`` (the fake checks it and does not record it).
- RunInstances: ``InstanceChargeType`` SPOTPAID (spot) or POSTPAID_BY_HOUR, ``Placement.Zone``,
  ``InstanceType``, ``ImageId``, ``InstanceCount``, ``ClientToken`` (at most 64 ASCII
  characters), ``TagSpecification`` [{``ResourceType: instance``, ``Tags`` [{Key, Value}]}],
  ``UserData`` (base64, at most 16 KB), ``InstanceMarketOptions`` {``MarketType: spot``,
  ``SpotOptions`` {``MaxPrice`` (a String), ``SpotInstanceType: one-time``}}; answer
  ``InstanceIdSet``.
- DescribeInstances: ``InstanceIds`` or ``Filters`` (never both; at most 10 filters of at most 5
  values), ``Offset`` and ``Limit`` (Integers; Limit 20 by default, at most 100); answer
  ``TotalCount``, ``InstanceSet``.
- TerminateInstances: ``InstanceIds`` (at most 100) and nothing else.
- InquiryPriceRunInstances: the RunInstances placement fields; answer ``Price.InstancePrice``
  (``UnitPrice``, ``UnitPriceDiscount``, ``ChargeUnit: HOUR``).
- Errors: HTTP 200 ``{"Response": {"Error": {"Code", "Message"}, "RequestId"}}``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("tencentcloud.cvm")

from fakes.tencent_server import Recorded, TencentFakeServer

from providers.base import ErrorKind, ProviderError, RetryPolicy
from providers.tencent import TencentProvider
from provisioner.core.models import TAG_ATTEMPT, TAG_JOB, TAG_MANAGED, LaunchRequest, Market, Offer

SECRET_ID = "AKIDwireTestSecretId0000000001"
SECRET_KEY = "wireTestSecretKey-0123456789abcdef"
IMAGE = "img-eb30mz89"
ZONE = "ap-guangzhou-3"
T4 = "GN7.2XLARGE32"
FAST = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)


@pytest.fixture
def server() -> Iterator[TencentFakeServer]:
    with TencentFakeServer() as srv:
        yield srv


@pytest.fixture
def provider(server: TencentFakeServer) -> Iterator[TencentProvider]:
    p = TencentProvider(
        region=server.region,
        endpoint=server.endpoint,
        credentials={"secret_id": SECRET_ID, "secret_key": SECRET_KEY},
        image_id=IMAGE,
        vpc_id="vpc-wire0001",
        subnet_id="subnet-wire0001",
        security_group_ids=["sg-wire0001"],
        currency="USD",
        instance_types=[T4],
        retry=FAST,
    )
    yield p
    p.close()


def request(market: Market = Market.SPOT, cap: float | None = 0.51237) -> LaunchRequest:
    offer = Offer("tencent", "ap-guangzhou", ZONE, T4, "T4", 1, 8, 32.0, 1.30, 0.41)
    return LaunchRequest(
        job_id="job-wire",
        attempt=3,
        offer=offer,
        market=market,
        bid_cap_per_hour=cap,
        user_data="#!/bin/sh\necho wire\n",
        extra_tags={"team": "ml"},
    )


def common_headers(r: Recorded, action: str, region: str) -> None:
    h = r.headers
    assert h["x-tc-action"] == action
    assert h["x-tc-version"] == "2017-03-12"
    assert h["x-tc-region"] == region
    assert h["x-tc-timestamp"].isdigit()
    assert h["content-type"].split(";")[0] == "application/json"
    assert "authorization" not in h  # sent and checked by the fake, never recorded


def describe_fields_ok(params: dict[str, Any]) -> None:
    assert set(params) <= {"InstanceIds", "Filters", "Offset", "Limit"}
    assert not ("InstanceIds" in params and "Filters" in params)
    assert isinstance(params["Offset"], int) and isinstance(params["Limit"], int)
    assert 1 <= params["Limit"] <= 100
    for f in params.get("Filters") or ():
        assert set(f) == {"Name", "Values"} and isinstance(f["Values"], list)
        assert 1 <= len(f["Values"]) <= 5
    assert len(params.get("Filters") or ()) <= 10
    assert len(params.get("InstanceIds") or ()) <= 100


def test_run_instances_spot_field_by_field(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    req = request()
    provider.launch(req)
    [sent] = server.calls("RunInstances")
    common_headers(sent, "RunInstances", server.region)
    p = sent.params
    assert set(p) == {
        "Placement",
        "InstanceType",
        "ImageId",
        "InstanceCount",
        "InstanceName",
        "ClientToken",
        "SystemDisk",
        "TagSpecification",
        "VirtualPrivateCloud",
        "SecurityGroupIds",
        "UserData",
        "InstanceChargeType",
        "InstanceMarketOptions",
    }
    assert p["Placement"] == {"Zone": ZONE}
    assert (p["InstanceType"], p["ImageId"], p["InstanceCount"]) == (T4, IMAGE, 1)
    assert p["InstanceChargeType"] == "SPOTPAID"
    assert p["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {"MaxPrice": "0.5123", "SpotInstanceType": "one-time"},
    }
    assert isinstance(p["InstanceMarketOptions"]["SpotOptions"]["MaxPrice"], str)
    assert p["ClientToken"] == req.token and len(p["ClientToken"]) <= 64
    assert p["ClientToken"].isascii()
    assert p["InstanceName"] == req.name and len(p["InstanceName"]) <= 128
    assert p["SystemDisk"] == {"DiskSize": req.disk_gb}
    assert p["VirtualPrivateCloud"] == {"VpcId": "vpc-wire0001", "SubnetId": "subnet-wire0001"}
    assert p["SecurityGroupIds"] == ["sg-wire0001"]
    [spec] = p["TagSpecification"]
    assert spec["ResourceType"] == "instance"
    assert {t["Key"]: t["Value"] for t in spec["Tags"]} == {
        TAG_MANAGED: "true",
        TAG_JOB: "job-wire",
        TAG_ATTEMPT: "3",
        "team": "ml",
    }
    assert all(set(t) == {"Key", "Value"} for t in spec["Tags"])
    assert base64.b64decode(p["UserData"]).decode() == req.user_data
    assert len(p["UserData"]) <= 16 * 1024


def test_run_instances_on_demand_field_by_field(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    provider.launch(request(Market.ON_DEMAND, cap=None))
    [sent] = server.calls("RunInstances")
    assert sent.params["InstanceChargeType"] == "POSTPAID_BY_HOUR"
    assert "InstanceMarketOptions" not in sent.params


def test_describe_instances_field_by_field(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    server.max_page = 1
    ids = [provider.launch(request()).id]
    provider.get(ids[0])
    provider.list()
    provider.list({TAG_JOB: "job-wire", TAG_ATTEMPT: "3"})
    calls = server.calls("DescribeInstances")
    assert calls
    for c in calls:
        common_headers(c, "DescribeInstances", server.region)
        describe_fields_ok(c.params)
    by_id = [c for c in calls if "InstanceIds" in c.params]
    assert by_id and all(c.params["InstanceIds"] == ids for c in by_id)
    tagged = [c for c in calls if "Filters" in c.params]
    assert {"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]} in tagged[0].params["Filters"]


def test_terminate_instances_field_by_field(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    inst = provider.launch(request())
    provider.terminate([inst.id])
    [sent] = server.calls("TerminateInstances")
    common_headers(sent, "TerminateInstances", server.region)
    assert sent.params == {"InstanceIds": [inst.id]}


def test_inquiry_price_field_by_field(server: TencentFakeServer, provider: TencentProvider) -> None:
    quotes = provider.prices()
    assert quotes
    calls = server.calls("InquiryPriceRunInstances")
    assert {c.params["InstanceChargeType"] for c in calls} == {"SPOTPAID", "POSTPAID_BY_HOUR"}
    for c in calls:
        common_headers(c, "InquiryPriceRunInstances", server.region)
        p = c.params
        assert set(p) <= {
            "Placement",
            "ImageId",
            "InstanceChargeType",
            "InstanceType",
            "InstanceCount",
            "InstanceMarketOptions",
        }
        assert p["ImageId"] == IMAGE and p["InstanceType"] == T4 and p["InstanceCount"] == 1
        assert set(p["Placement"]) == {"Zone"}
        if p["InstanceChargeType"] == "SPOTPAID":
            assert p["InstanceMarketOptions"] == {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time"},
            }
        else:
            assert "InstanceMarketOptions" not in p


def test_the_error_envelope_is_read_field_by_field(
    server: TencentFakeServer, provider: TencentProvider
) -> None:
    server.inject_error("RunInstances", "LimitExceeded.SpotQuota", message="spot quota")
    with pytest.raises(ProviderError) as caught:
        provider.launch(request())
    err = caught.value
    assert (err.kind, err.code, err.provider) == (
        ErrorKind.QUOTA,
        "LimitExceeded.SpotQuota",
        "tencent",
    )
    assert "spot quota" in err.message and "request " in err.message  # RequestId carried
