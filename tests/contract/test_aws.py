"""AWS-only checks beyond the shared contract: what RunInstances carries, offers, prices, errors.

Runs the real AWSProvider against moto's server through the AWS harness.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto")

from harness import CONTRACT_RETRY
from harness_aws import REGION, ZONE, AWSHarness, make_harness

from providers.aws import ERRORS, AWSProvider, classify
from providers.base import ErrorKind, ProviderError
from provisioner.bootstrap import spec_from_script
from provisioner.models import LaunchRequest, Market


@pytest.fixture
def aws() -> Iterator[AWSHarness]:
    with make_harness() as h:
        yield h


def test_run_instances_carries_bootstrap_tags_disk_and_imdsv2(aws: AWSHarness) -> None:
    provider = aws.provider()
    spec = {"job_id": "job-x", "attempt": 2, "command": ["python", "train.py"]}
    request = LaunchRequest(
        job_id="job-x",
        attempt=2,
        offer=aws.offer(Market.SPOT),
        market=Market.SPOT,
        bid_cap_per_hour=0.123456,
        disk_gb=250,
        job_spec=spec,
    )
    provider.launch(request)

    sent = aws.launch_requests()[-1]
    script = base64.b64decode(sent["UserData"]).decode()
    assert script.startswith("#!/bin/sh")
    assert spec_from_script(script) == {**spec, "cloud": "aws"}
    assert sent["ClientToken"] == request.token
    assert sent["InstanceMarketOptions.SpotOptions.MaxPrice"] == "0.1235"
    assert sent["InstanceMarketOptions.SpotOptions.SpotInstanceType"] == "one-time"
    assert sent["InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior"] == "terminate"
    assert sent["Placement.AvailabilityZone"] == ZONE
    assert sent["MetadataOptions.HttpTokens"] == "required"
    assert sent["BlockDeviceMapping.1.Ebs.VolumeSize"] == "250"
    assert sent["BlockDeviceMapping.1.DeviceName"].startswith("/dev/")
    tags = {
        sent[f"TagSpecification.1.Tag.{i}.Key"]: sent[f"TagSpecification.1.Tag.{i}.Value"]
        for i in range(1, 10)
        if f"TagSpecification.1.Tag.{i}.Key" in sent
    }
    assert tags == {"Name": request.name, **request.tags}
    assert sent["TagSpecification.2.ResourceType"] == "volume"


def test_spec_with_a_secret_is_refused_before_anything_is_sent(aws: AWSHarness) -> None:
    provider = aws.provider()
    request = LaunchRequest(
        job_id="job-x",
        attempt=1,
        offer=aws.offer(Market.SPOT),
        market=Market.SPOT,
        job_spec={"job_id": "job-x", "env": {"HF_TOKEN": "hf_secretvalue"}},
    )
    with pytest.raises(ProviderError) as caught:
        provider.launch(request)
    assert caught.value.kind is ErrorKind.INVALID
    assert "hf_secretvalue" not in str(caught.value)
    assert aws.launch_requests() == []


def test_offers_are_zonal_canonical_and_whole_gpus(aws: AWSHarness) -> None:
    offers = aws.provider().offers([REGION])
    by_key = {(o.zone, o.instance_type): o for o in offers}

    g5 = by_key[(ZONE, "g5.xlarge")]
    assert (g5.gpu, g5.gpu_count, g5.vcpus, g5.memory_gib) == ("A10G", 1, 4.0, 16.0)
    assert g5.price == pytest.approx(1.006)  # from the built-in catalog
    assert {o.gpu for o in offers if o.instance_type == "p4de.24xlarge"} == {"A100-80GB"}
    assert all(o.gpu_count >= 1 for o in offers)
    assert not [o for o in offers if o.instance_type.startswith("g6f.")]  # fractional GPUs
    assert all(o.zone.startswith(REGION) for o in offers)


def test_prices_keep_the_latest_quote_per_zone_and_type(aws: AWSHarness) -> None:
    from botocore.stub import Stubber

    provider = aws.provider()
    provider._gpu_types[REGION] = [{"InstanceType": "g5.xlarge"}]  # skip DescribeInstanceTypes
    now = datetime.now(UTC)
    rows = [
        ("us-east-1a", "0.40", now - timedelta(hours=2)),
        ("us-east-1a", "0.42", now - timedelta(minutes=5)),
        ("us-east-1b", "0.39", now - timedelta(hours=1)),
    ]
    with Stubber(provider.client(REGION)) as stub:
        stub.add_response(
            "describe_spot_price_history",
            {
                "SpotPriceHistory": [
                    {
                        "AvailabilityZone": zone,
                        "InstanceType": "g5.xlarge",
                        "ProductDescription": "Linux/UNIX",
                        "SpotPrice": price,
                        "Timestamp": at,
                    }
                    for zone, price, at in rows
                ]
            },
        )
        quotes = {q.zone: q for q in provider.prices([REGION])}

    assert quotes["us-east-1a"].spot_price == pytest.approx(0.42)
    assert quotes["us-east-1b"].spot_price == pytest.approx(0.39)
    assert quotes["us-east-1a"].on_demand_price == pytest.approx(1.006)
    assert quotes["us-east-1a"].at.tzinfo is not None


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("InsufficientInstanceCapacity", 500, ErrorKind.CAPACITY),
        ("MaxSpotInstanceCountExceeded", 400, ErrorKind.CAPACITY),
        ("Unsupported", 400, ErrorKind.CAPACITY),
        ("SpotMaxPriceTooLow", 400, ErrorKind.PRICE_TOO_LOW),
        ("InstanceLimitExceeded", 400, ErrorKind.QUOTA),
        ("UnauthorizedOperation", 403, ErrorKind.AUTH),
        ("SignatureDoesNotMatch", 403, ErrorKind.AUTH),
        ("InvalidInstanceID.NotFound", 400, ErrorKind.NOT_FOUND),
        ("Throttling", 400, ErrorKind.THROTTLED),
        ("Unavailable", 503, ErrorKind.TRANSIENT),
        ("SomethingNew", 502, ErrorKind.TRANSIENT),
        ("InvalidParameterValue", 400, ErrorKind.INVALID),
    ],
)
def test_error_table(code: str, status: int, kind: ErrorKind) -> None:
    assert ERRORS.kind_of(code, status) is kind


def test_sdk_exceptions_are_classified() -> None:
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError

    err = classify(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"))
    assert err is not None and err.kind is ErrorKind.TRANSIENT
    err = classify(NoCredentialsError())
    assert err is not None and err.kind is ErrorKind.AUTH
    assert classify(KeyError("x")) is None


def test_unreachable_endpoint_is_transient_after_bounded_retries() -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    attempts: list[int] = []
    provider = AWSProvider(
        endpoint=f"http://127.0.0.1:{port}",
        credentials={"aws_access_key_id": "AKIAX", "aws_secret_access_key": "not-a-real-key"},
        retry=CONTRACT_RETRY,
    )
    provider.client().meta.events.register("before-send.ec2", lambda **kw: attempts.append(1))
    with pytest.raises(ProviderError) as caught:
        provider.get("i-0123456789abcdef0")
    assert caught.value.kind is ErrorKind.TRANSIENT
    assert len(attempts) == CONTRACT_RETRY.attempts
