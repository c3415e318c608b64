"""AWS-only checks beyond the shared contract: what RunInstances carries, offers, prices, errors.

Runs the real AWSProvider against moto's server through the AWS harness.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.stub import ANY

pytest.importorskip("boto3")
pytest.importorskip("moto")

from harness import CONTRACT_RETRY
from harness_aws import ACCESS_KEY, REGION, SECRET, ZONE, AWSHarness, make_harness

from providers.aws import ERRORS, AWSProvider, classify
from providers.base import ErrorKind, ProviderError
from providers.bootstrap import spec_from_script
from provisioner.core.models import LaunchRequest, Market


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
    assert sent["InstanceMarketOptions.SpotOptions.MaxPrice"] == "0.1234"  # toward the cap
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


def test_the_instance_profile_goes_out_by_name_or_arn(aws: AWSHarness) -> None:
    """``IamInstanceProfile`` (an ``IamInstanceProfileSpecification``: ``Arn`` or ``Name``) is
    the VM's role, for the bucket and the secrets; moto, like EC2, refuses a profile that does
    not exist and reports the instance's profile back.
    https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_RunInstances.html
    https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_IamInstanceProfileSpecification.html"""
    import boto3

    iam = boto3.client(
        "iam",
        region_name=REGION,
        endpoint_url=aws.endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
    )
    arn = iam.create_instance_profile(InstanceProfileName="provisioner-job")["InstanceProfile"][
        "Arn"
    ]
    iam.close()
    for n, (option, key) in enumerate([("provisioner-job", "Name"), (arn, "Arn")]):
        provider = aws.provider(instance_profile=option)
        request = LaunchRequest(f"job-{n}", 1, aws.offer(Market.SPOT), Market.SPOT, 0.5)
        inst = provider.launch(request)
        sent = aws.launch_requests()[-1]
        assert sent[f"IamInstanceProfile.{key}"] == option
        assert not any(
            k.startswith("IamInstanceProfile.") and k != f"IamInstanceProfile.{key}" for k in sent
        )
        described = provider.client.ec2(REGION).describe_instances(InstanceIds=[inst.id])
        assert described["Reservations"][0]["Instances"][0]["IamInstanceProfile"]["Arn"] == arn
    aws.provider().launch(LaunchRequest("job-none", 1, aws.offer(Market.SPOT), Market.SPOT, 0.5))
    assert not any(k.startswith("IamInstanceProfile") for k in aws.launch_requests()[-1])


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
    provider.pricing.gpu_types[REGION] = [
        {"InstanceType": "g5.xlarge"}
    ]  # skip DescribeInstanceTypes
    now = datetime.now(UTC)
    rows = [
        ("us-east-1a", "0.40", now - timedelta(hours=2)),
        ("us-east-1a", "0.42", now - timedelta(minutes=5)),
        ("us-east-1b", "0.39", now - timedelta(hours=1)),
    ]
    with Stubber(provider.client.ec2(REGION)) as stub:
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
        ("MaxSpotInstanceCountExceeded", 400, ErrorKind.QUOTA),
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
    provider.client.ec2().meta.events.register("before-send.ec2", lambda **kw: attempts.append(1))
    with pytest.raises(ProviderError) as caught:
        provider.get("i-0123456789abcdef0")
    assert caught.value.kind is ErrorKind.TRANSIENT
    assert len(attempts) == CONTRACT_RETRY.attempts


# -- live on-demand prices (Price List Query API) and pages -------------------------------------


@pytest.fixture
def pricing() -> Iterator[Any]:
    from fakes.aws_pricing_server import PricingServer

    from providers.aws.offers import forget_on_demand_prices

    # the cache is the process's, keyed by endpoint: a server on a reused port is a new one
    forget_on_demand_prices()
    with PricingServer(max_page=1) as server:  # one product a page: every type crosses pages
        yield server


def _stub_spot(provider: AWSProvider, types: list[str]) -> Any:
    """DescribeSpotPriceHistory in two pages (moto ignores MaxResults for it): the real
    client, answered by botocore's Stubber, must follow ``NextToken``."""
    from botocore.stub import Stubber

    now = datetime.now(UTC)
    stub = Stubber(provider.client.ec2(REGION))
    rows = [
        {
            "AvailabilityZone": zone,
            "InstanceType": itype,
            "ProductDescription": "Linux/UNIX",
            "SpotPrice": "0.3000",
            "Timestamp": now,
        }
        for itype in types
        for zone in ("us-east-1a", "us-east-1b")
    ]
    half = len(rows) // 2
    stub.add_response(
        "describe_spot_price_history", {"SpotPriceHistory": rows[:half], "NextToken": "page-2"}
    )
    stub.add_response(
        "describe_spot_price_history",
        {"SpotPriceHistory": rows[half:], "NextToken": ""},
        {
            "InstanceTypes": types,
            "ProductDescriptions": ["Linux/UNIX"],
            "StartTime": ANY,
            "NextToken": "page-2",
        },
    )
    return stub


def test_on_demand_prices_are_live_from_the_pricing_api(aws: AWSHarness, pricing: Any) -> None:
    provider = aws.provider(pricing_endpoint=pricing.endpoint)
    types = ["g5.xlarge", "p4d.24xlarge"]
    provider.pricing.gpu_types[REGION] = [{"InstanceType": t} for t in types]
    before = datetime.now(UTC)
    with _stub_spot(provider, types) as stub:
        quotes = {(q.zone, q.instance_type): q for q in provider.prices([REGION])}
        stub.assert_no_pending_responses()  # both spot pages were read

    assert len(quotes) == 4
    g5 = quotes[("us-east-1b", "g5.xlarge")]  # on the second spot page
    assert g5.on_demand_price == pytest.approx(1.006)  # Linux, shared, no SQL, not reserved
    assert quotes[("us-east-1a", "p4d.24xlarge")].on_demand_price == pytest.approx(32.7726)
    assert g5.on_demand_at is not None and g5.on_demand_at >= before  # its age is known
    # on the wire: one GetProducts query per type, filtered as documented, every page read
    calls = pricing.calls("GetProducts")
    assert len(calls) == 4  # two products match each type's filters: two pages each
    first = calls[0]
    assert first.headers["x-amz-target"] == "AWSPriceListService.GetProducts"
    assert first.headers["content-type"].startswith("application/x-amz-json-1.1")
    assert first.body["ServiceCode"] == "AmazonEC2"
    assert first.body["FormatVersion"] == "aws_v1"
    assert first.body["MaxResults"] == 100
    assert {(f["Type"], f["Field"], f["Value"]) for f in first.body["Filters"]} == {
        ("TERM_MATCH", "instanceType", "g5.xlarge"),
        ("TERM_MATCH", "regionCode", REGION),
        ("TERM_MATCH", "operatingSystem", "Linux"),
        ("TERM_MATCH", "tenancy", "Shared"),
        ("TERM_MATCH", "capacitystatus", "Used"),
    }
    assert "NextToken" not in first.body and calls[1].body["NextToken"] == "1"
    assert "authorization" not in first.headers  # the recorder drops it; it was sent (checked)


def test_on_demand_prices_are_cached_then_fetched_again(aws: AWSHarness, pricing: Any) -> None:
    provider = aws.provider(pricing_endpoint=pricing.endpoint)
    prices, at = provider.pricing.on_demand_prices(REGION, ["g5.xlarge"])
    assert prices == {"g5.xlarge": pytest.approx(1.006)} and at is not None
    again, again_at = provider.pricing.on_demand_prices(REGION, ["g5.xlarge"])
    assert (again, again_at) == (prices, at)
    # a new adapter (the daemon builds one per refresh) uses the same cache
    other = aws.provider(pricing_endpoint=pricing.endpoint)
    assert other.pricing.on_demand_prices(REGION, ["g5.xlarge"]) == (prices, at)
    assert len(pricing.calls("GetProducts")) == 2  # cached: no new query
    provider.client.on_demand_ttl_s = 0  # expired
    _, fresh_at = provider.pricing.on_demand_prices(REGION, ["g5.xlarge"])
    assert fresh_at is not None and fresh_at >= at
    assert len(pricing.calls("GetProducts")) == 4
    # a type the list does not carry is asked once, and has no price
    assert provider.pricing.on_demand_prices(REGION, ["x9.nothing"])[0] == {}


def test_without_the_pricing_api_the_catalog_price_is_used_and_said_so(
    aws: AWSHarness, pricing: Any, caplog: pytest.LogCaptureFixture
) -> None:
    pricing.fail_next = [("AccessDeniedException", 400)]
    provider = aws.provider(pricing_endpoint=pricing.endpoint)
    provider.pricing.gpu_types[REGION] = [{"InstanceType": "g5.xlarge"}]
    with _stub_spot(provider, ["g5.xlarge"]):
        quotes = provider.prices([REGION])
    assert quotes and all(q.on_demand_at is None for q in quotes)  # not live, and it says so
    assert "not live" in caplog.text
    # moto as the EC2 endpoint and no pricing endpoint: the Pricing API is not asked at all
    assert aws.provider().pricing.on_demand_prices(REGION, ["g5.xlarge"]) == ({}, None)


def test_describe_instances_crosses_pages(aws: AWSHarness) -> None:
    provider = aws.provider(page_size=5)
    launched = {
        provider.launch(
            LaunchRequest(
                job_id=f"job-{n}", attempt=1, offer=aws.offer(Market.SPOT), market=Market.SPOT
            )
        ).id
        for n in range(7)
    }
    found = {i.id for i in provider.list()}
    assert launched <= found
    listing = [
        r
        for r in aws.sent("DescribeInstances")
        if r.get("Filter.1.Name") == "tag:provisioner-managed"
    ]
    assert [r.get("MaxResults") for r in listing[-2:]] == ["5", "5"]
    assert listing[-1].get("NextToken")  # the second page was asked for


def test_offers_follow_next_token_of_instance_types_and_offerings(aws: AWSHarness) -> None:
    """moto answers DescribeInstanceTypes and DescribeInstanceTypeOfferings in one page
    whatever MaxResults says; the real client, answered by botocore's Stubber, must follow
    ``NextToken`` through two pages of each."""
    from botocore.stub import Stubber

    provider = aws.provider(page_size=5)

    def gpu_type(name: str, gpu: str, mib: int) -> dict[str, Any]:
        return {
            "InstanceType": name,
            "VCpuInfo": {"DefaultVCpus": 4},
            "MemoryInfo": {"SizeInMiB": 16384},
            "GpuInfo": {
                "Gpus": [
                    {
                        "Name": gpu,
                        "Manufacturer": "NVIDIA",
                        "Count": 1,
                        "MemoryInfo": {"SizeInMiB": mib},
                    }
                ]
            },
        }

    with Stubber(provider.client.ec2(REGION)) as stub:
        stub.add_response(
            "describe_instance_types",
            {"InstanceTypes": [gpu_type("g5.xlarge", "A10G", 24576)], "NextToken": "t2"},
            {"MaxResults": 5},
        )
        stub.add_response(
            "describe_instance_types",
            {"InstanceTypes": [gpu_type("g4dn.xlarge", "T4", 16384)]},
            {"MaxResults": 5, "NextToken": "t2"},
        )
        offering = {"LocationType": "availability-zone", "Filters": ANY, "MaxResults": 5}
        stub.add_response(
            "describe_instance_type_offerings",
            {
                "InstanceTypeOfferings": [
                    {
                        "InstanceType": "g5.xlarge",
                        "LocationType": "availability-zone",
                        "Location": ZONE,
                    }
                ],
                "NextToken": "o2",
            },
            offering,
        )
        stub.add_response(
            "describe_instance_type_offerings",
            {
                "InstanceTypeOfferings": [
                    {
                        "InstanceType": "g4dn.xlarge",
                        "LocationType": "availability-zone",
                        "Location": "us-east-1b",
                    }
                ]
            },
            {**offering, "NextToken": "o2"},
        )
        offers = provider.offers([REGION])
        stub.assert_no_pending_responses()
    assert {(o.instance_type, o.zone) for o in offers} == {
        ("g5.xlarge", ZONE),
        ("g4dn.xlarge", "us-east-1b"),
    }


def test_commitment_prices_are_the_reserved_terms_of_the_pricing_api(
    aws: AWSHarness, pricing: Any
) -> None:
    from providers.capabilities import Commitments

    provider = aws.provider(pricing_endpoint=pricing.endpoint)
    assert isinstance(provider, Commitments)
    provider.pricing.gpu_types[REGION] = [{"InstanceType": "p4d.24xlarge"}]
    quotes = provider.commitment_prices([REGION])
    # only the plain Linux row's terms (the SQL Server row, also matched, is left out)
    got = {(q.kind, q.term_months, q.payment): (q.upfront, q.per_hour) for q in quotes}
    assert got == {
        ("reserved-instance", 12, "all"): (168_000.0, 0.0),
        ("reserved-instance", 12, "no"): (0.0, pytest.approx(20.5)),
        ("reserved-instance", 12, "partial"): (84_000.0, pytest.approx(9.6)),
        ("reserved-instance", 36, "all"): (315_000.0, 0.0),
        ("reserved-instance-convertible", 36, "no"): (0.0, pytest.approx(17.1)),
    }
    # as rows of commitments.csv: hourly is the effective rate, the upfront spread over the term
    rows = {(c.option, c.term, c.payment): c for q in quotes if (c := q.as_commitment())}
    assert rows[("reserved-instance", "1y", "all")].hourly == pytest.approx(168_000 / 8760)
    assert rows[("reserved-instance", "1y", "partial")].hourly == pytest.approx(9.6 + 84_000 / 8760)
    assert rows[("reserved-instance", "3y", "all")].hourly == pytest.approx(315_000 / 26_280)
    assert {(q.provider, q.region, q.instance_type) for q in quotes} == {
        ("aws", REGION, "p4d.24xlarge")
    }
    assert all(q.source.startswith("AWS Price List API") for q in quotes)
    assert {f["Field"] for f in pricing.calls("GetProducts")[0].body["Filters"]} >= {
        "instanceType",
        "regionCode",
        "operatingSystem",
        "tenancy",
        "capacitystatus",
    }
    # no Pricing endpoint (a custom EC2 endpoint): nothing live, and nothing invented
    assert aws.provider().commitment_prices([REGION]) == []


def test_reserved_quotes_round_trip_through_a_commitments_file(
    aws: AWSHarness, pricing: Any, tmp_path: Any
) -> None:
    """What `catalog refresh --commitments-out` writes for AWS, `tco --commitments` reads back."""
    from provisioner.catalog_files import read_commitments, write_commitments

    provider = aws.provider(pricing_endpoint=pricing.endpoint)
    provider.pricing.gpu_types[REGION] = [{"InstanceType": "p4d.24xlarge"}]
    rows = [c for q in provider.commitment_prices([REGION]) if (c := q.as_commitment())]
    path = tmp_path / "live.csv"
    assert write_commitments(rows, path) == 5
    back = {(c.option, c.term, c.payment): c for c in read_commitments(path)}
    assert back.keys() == {(c.option, c.term, c.payment) for c in rows}
    partial = back[("reserved-instance", "1y", "partial")]
    assert (partial.upfront, partial.monthly) == (84_000.0, pytest.approx(9.6 * 730))
    assert partial.hourly == pytest.approx(9.6 + 84_000 / 8760)
    assert back[("reserved-instance", "3y", "all")].monthly == 0.0
    assert partial.source == "AWS Price List API (Reserved)" and partial.region == REGION
