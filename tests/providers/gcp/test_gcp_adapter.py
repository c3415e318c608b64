"""GCP adapter tests beyond the contract suite: what reached the wire, the bid cap enforced
before launch, operation errors, preemption with either termination action, and prices.

Everything runs the real google-cloud-compute SDK (REST transport) against
tests/fakes/gcp_server.py on 127.0.0.1.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("google.cloud.compute_v1")

from fakes.gcp_server import GCPServer, matches_filter

from providers.base import ErrorKind, ProviderError, RetryPolicy, redact
from providers.gcp import (
    GCPProvider,
    accelerator_type,
    classify,
    gpu_name,
    label,
    parse_sku,
    request_id,
)
from provisioner.core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    InstanceState,
    LaunchRequest,
    Market,
    Offer,
)

PROJECT = "adapter-test"
ZONE = "us-central1-a"
TOKEN = "ya29.adapter-test-token-abcdef0123456789"
FAST = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)


@pytest.fixture
def server() -> Iterator[GCPServer]:
    with GCPServer(PROJECT, token=TOKEN) as s:
        yield s


def make_provider(server: GCPServer, **kw: object) -> GCPProvider:
    from google.oauth2.credentials import Credentials

    options: dict[str, object] = {
        "project": PROJECT,
        "zones": [ZONE],
        "endpoint": server.endpoint,
        "credentials": Credentials(token=TOKEN),
        "retry": FAST,
    }
    options.update(kw)
    return GCPProvider(**options)  # type: ignore[arg-type]


@pytest.fixture
def provider(server: GCPServer) -> Iterator[GCPProvider]:
    p = make_provider(server)
    yield p
    p.close()


def g2_offer(spot_price: float | None = 0.397336) -> Offer:
    return Offer(
        "gcp", "us-central1", ZONE, "g2-standard-4", "L4", 1, 4, 16.0, 0.706832, spot_price
    )


def request(
    offer: Offer | None = None,
    market: Market = Market.SPOT,
    cap: float | None = 0.5,
    job: str = "job-a",
    attempt: int = 1,
) -> LaunchRequest:
    return LaunchRequest(
        job,
        attempt,
        offer or g2_offer(),
        market,
        bid_cap_per_hour=cap,
        user_data="#!/bin/sh\necho hi\n",
    )


# -- the wire -------------------------------------------------------------------------------------


def test_spot_insert_carries_scheduling_request_id_labels_and_startup_script(
    server: GCPServer, provider: GCPProvider
) -> None:
    req = request(job="Team.Alpha/Run-1")
    inst = provider.launch(req)

    [sent] = server.launch_requests()
    assert sent.path == f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances"
    assert sent.query["requestId"] == request_id(req.token)
    body = sent.body
    assert body["name"] == req.name
    assert body["machineType"].endswith(f"zones/{ZONE}/machineTypes/g2-standard-4")
    assert body["scheduling"] == {
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "DELETE",
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
    }
    assert "guestAccelerators" not in body  # G2 comes with its L4
    assert body["labels"] == {
        "provisioner-managed": "true",
        "provisioner-job": "team-alpha-run-1",
        "provisioner-attempt": "1",
    }
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert items["startup-script"] == "#!/bin/sh\necho hi\n"
    assert "maxPrice" not in str(body)  # GCP takes no bid

    # the exact tags come back (from metadata), not the sanitised labels
    assert inst.tags[TAG_JOB] == "Team.Alpha/Run-1"
    assert inst.id == f"{ZONE}/{req.name}"
    assert [i.id for i in provider.list({TAG_JOB: "Team.Alpha/Run-1"})] == [inst.id]
    assert provider.list({TAG_JOB: "team-alpha-run-1"}) == []


def test_tags_whose_keys_are_not_label_keys_become_labels_and_stay_in_metadata(
    server: GCPServer, provider: GCPProvider
) -> None:
    import dataclasses
    import json

    from providers.gcp import label_changes, label_key

    tags = {"Team": "ML", "CostCenter": "cc-42", "team.name": "vision", "9lives": "x"}
    provider.launch(dataclasses.replace(request(), extra_tags=tags))
    [sent] = server.launch_requests()
    labels = sent.body["labels"]
    assert labels["team"] == "ml"
    assert labels["costcenter"] == "cc-42"
    assert labels["team_name"] == "vision"
    assert labels["k9lives"] == "x"
    assert all(label_key(k) == k for k in labels)  # every key is a valid label key
    items = {i["key"]: i["value"] for i in sent.body["metadata"]["items"]}
    kept = json.loads(items["provisioner-tags"])
    assert {k: kept[k] for k in tags} == tags  # the originals, exactly
    lines = label_changes(tags)
    assert any("'CostCenter' becomes GCP label 'costcenter'" in line for line in lines)
    assert any("value of tag 'Team' becomes 'ml'" in line for line in lines)
    clash = label_changes({"Team": "a", "team": "b"})
    assert any("already taken" in line for line in clash)


def test_request_id_is_stable_for_a_token_and_a_retried_insert_repeats_it(
    server: GCPServer, provider: GCPProvider
) -> None:
    req = request()
    assert request_id(req.token) == request_id(request().token)
    assert request_id(req.token) != request_id(request(attempt=2).token)
    server.inject_error("backendError", operation="insert")  # 503, then the retry works

    provider.launch(req)

    ids = [r.query["requestId"] for r in server.launch_requests()]
    assert ids == [request_id(req.token)] * 2


def test_on_demand_insert_is_standard_and_restarts(
    server: GCPServer, provider: GCPProvider
) -> None:
    inst = provider.launch(request(market=Market.ON_DEMAND, cap=None))

    scheduling = server.launch_requests()[0].body["scheduling"]
    assert scheduling["provisioningModel"] == "STANDARD"
    assert scheduling["automaticRestart"] is True
    assert "instanceTerminationAction" not in scheduling
    assert inst.market is Market.ON_DEMAND


def test_attached_gpus_are_sent_as_guest_accelerators(
    server: GCPServer, provider: GCPProvider
) -> None:
    offer = Offer("gcp", "us-central1", ZONE, "n1-standard-8", "T4", 1, 8, 30.0, 0.73, 0.18)
    provider.launch(request(offer))

    body = server.launch_requests()[0].body
    assert body["guestAccelerators"] == [
        {"acceleratorType": f"zones/{ZONE}/acceleratorTypes/nvidia-tesla-t4", "acceleratorCount": 1}
    ]


def test_second_launch_finds_the_first_without_inserting(server: GCPServer) -> None:
    first = make_provider(server).launch(request())
    again = make_provider(server).launch(request())  # a fresh adapter: found on the server

    assert again.id == first.id
    assert len(server.launch_requests()) == 1


# -- the bid cap: enforced before launch ----------------------------------------------------------


def test_cap_below_the_known_price_is_refused_before_anything_is_sent(
    server: GCPServer, provider: GCPProvider
) -> None:
    with pytest.raises(ProviderError) as caught:
        provider.launch(request(g2_offer(spot_price=0.6), cap=0.5))

    assert caught.value.kind is ErrorKind.PRICE_TOO_LOW
    assert caught.value.code == "PriceAboveCap"
    assert caught.value.kind.try_next_offer
    assert "before launch" in caught.value.message
    assert server.launch_requests() == []


def test_another_clouds_offer_is_refused_before_anything_is_sent(
    server: GCPServer, provider: GCPProvider
) -> None:
    aws_offer = replace(g2_offer(), provider="aws")
    with pytest.raises(ProviderError) as caught:
        provider.launch(request(aws_offer))
    assert (caught.value.kind, caught.value.code) == (ErrorKind.INVALID, "WrongProvider")
    assert server.launch_requests() == []
    assert provider.launch(request(replace(g2_offer(), provider=""))).provider == "gcp"


def test_live_quote_is_the_known_price(server: GCPServer, provider: GCPProvider) -> None:
    provider.prices(["us-central1"])  # g2-standard-4 spot 0.397336 there
    offer = g2_offer(spot_price=None)

    with pytest.raises(ProviderError) as caught:
        provider.launch(request(offer, cap=0.39))
    assert caught.value.kind is ErrorKind.PRICE_TOO_LOW
    assert server.launch_requests() == []

    inst = provider.launch(request(offer, cap=0.40))
    assert inst.price_per_hour == pytest.approx(0.397336)


def test_unknown_price_launches_and_says_the_cap_was_not_checked(
    server: GCPServer, provider: GCPProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="provisioner.providers.gcp")
    provider.launch(request(g2_offer(spot_price=None), cap=0.01))

    assert len(server.launch_requests()) == 1
    assert "cannot be checked" in caplog.text


# -- operations and errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("ZONE_RESOURCE_POOL_EXHAUSTED", ErrorKind.CAPACITY),
        ("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", ErrorKind.CAPACITY),
        ("QUOTA_EXCEEDED", ErrorKind.QUOTA),
    ],
)
def test_failed_operation_is_classified_by_its_error_code(
    server: GCPServer, provider: GCPProvider, code: str, kind: ErrorKind
) -> None:
    server.inject_error(code, operation="insert")

    with pytest.raises(ProviderError) as caught:
        provider.launch(request())

    assert (caught.value.kind, caught.value.code) == (kind, code)
    # the operation was polled on our endpoint, with our own ZoneOperationsClient
    waits = [r for r in server.requests if r.path.endswith("/wait")]
    assert waits and all(f"/zones/{ZONE}/operations/" in r.path for r in waits)
    assert provider.list() == []


@pytest.mark.parametrize(
    ("reason", "status", "kind"),
    [
        ("forbidden", 403, ErrorKind.AUTH),
        ("quotaExceeded", 403, ErrorKind.QUOTA),
        ("userRateLimitExceeded", 403, ErrorKind.THROTTLED),
        ("rateLimitExceeded", 429, ErrorKind.THROTTLED),
        ("notFound", 404, ErrorKind.NOT_FOUND),
        ("backendError", 503, ErrorKind.TRANSIENT),
        ("internalError", 500, ErrorKind.TRANSIENT),
        ("invalid", 400, ErrorKind.INVALID),
        ("conditionNotMet", 412, ErrorKind.INVALID),
    ],
)
def test_http_errors_are_classified_by_reason_then_status(
    server: GCPServer, provider: GCPProvider, reason: str, status: int, kind: ErrorKind
) -> None:
    server.inject_error(reason, operation="get", status=status, times=10)

    with pytest.raises(ProviderError) as caught:
        provider.get(f"{ZONE}/prov-x-a1")

    assert caught.value.kind is kind
    assert caught.value.code == reason
    gets = [r for r in server.requests if r.method == "GET" and r.path.endswith("/prov-x-a1")]
    assert len(gets) == (FAST.attempts if kind.retryable else 1)


def test_a_401_refresh_failure_is_auth(server: GCPServer) -> None:
    from google.oauth2.credentials import Credentials

    p = make_provider(server, credentials=Credentials(token="ya29.wrong-token-000000"))
    with pytest.raises(ProviderError) as caught:
        p.list()
    assert caught.value.kind is ErrorKind.AUTH


def test_classify_leaves_foreign_errors_alone() -> None:
    assert classify(KeyError("x")) is None
    err = classify(ConnectionResetError("peer"))
    assert err is not None and err.kind is ErrorKind.TRANSIENT


def test_the_access_token_is_registered_as_a_secret(provider: GCPProvider) -> None:
    assert redact(f"Bearer {TOKEN}") == "Bearer ***"


# -- preemption --------------------------------------------------------------------------------------


def test_preempted_and_deleted_spot_vm_reads_preempted(
    server: GCPServer, provider: GCPProvider
) -> None:
    inst = provider.launch(request())
    since = datetime.now(UTC) - timedelta(seconds=5)
    server.preempt(inst.id.rsplit("/", 1)[-1], ZONE)

    got = provider.get(inst.id)
    assert (got.state, got.raw_state) == (InstanceState.PREEMPTED, "DELETED")
    assert "compute.instances.preempted" in got.state_reason
    [found] = provider.interruptions(since)
    assert (found.instance_id, found.kind, found.zone) == (inst.id, "preempted", ZONE)
    assert provider.interruptions(datetime.now(UTC) + timedelta(minutes=1)) == []
    provider.terminate([inst.id])  # already gone: not an error


def test_preempted_and_stopped_spot_vm_reads_preempted_in_get_and_list(server: GCPServer) -> None:
    provider = make_provider(server, termination_action="STOP")
    inst = provider.launch(request())
    assert server.launch_requests()[0].body["scheduling"]["instanceTerminationAction"] == "STOP"
    server.preempt(inst.id.rsplit("/", 1)[-1], ZONE)

    got = provider.get(inst.id)
    assert (got.state, got.raw_state) == (InstanceState.PREEMPTED, "TERMINATED")
    assert got.tags[TAG_ATTEMPT] == "1"
    [listed] = provider.list({TAG_JOB: "job-a"})
    assert listed.state is InstanceState.PREEMPTED

    provider.terminate([inst.id])
    with pytest.raises(ProviderError) as caught:
        provider.get(inst.id)
    assert caught.value.kind is ErrorKind.NOT_FOUND


def test_get_and_terminate_take_a_bare_name(server: GCPServer, provider: GCPProvider) -> None:
    inst = provider.launch(request())
    name = inst.id.rsplit("/", 1)[-1]

    assert provider.get(name).id == inst.id
    provider.terminate([name, "prov-unknown-a1"])
    assert server.instances() == []


# -- offers and prices -------------------------------------------------------------------------------


def test_offers_from_machine_and_accelerator_types(
    server: GCPServer, provider: GCPProvider
) -> None:
    offers = provider.offers(["us-central1"])

    assert {o.zone for o in offers} == {ZONE}  # only the configured zone
    by_type = {(o.instance_type, o.gpu_count): o for o in offers}
    g2 = by_type[("g2-standard-4", 1)]
    assert (g2.gpu, g2.vcpus, g2.memory_gib) == ("L4", 4.0, 16.0)
    assert by_type[("a2-highgpu-1g", 1)].gpu == "A100"
    t4 = [o for o in offers if o.gpu == "T4"]
    assert {(o.instance_type, o.gpu_count) for o in t4} == {
        ("n1-standard-8", 1),
        ("n1-standard-16", 2),
        ("n1-standard-32", 4),
    }
    mt = [r for r in server.requests if r.path.endswith("/aggregated/machineTypes")]
    assert mt[0].query["filter"].startswith('name eq "(')


def test_prices_add_up_component_skus(server: GCPServer, provider: GCPProvider) -> None:
    quotes = {
        (q.region, q.instance_type): q for q in provider.prices(["us-central1", "europe-west4"])
    }

    g2 = quotes[("us-central1", "g2-standard-4")]
    assert g2.spot_price == pytest.approx(4 * 0.014017 + 16 * 0.00164 + 0.315028)
    assert g2.spot_price == pytest.approx(0.397336, abs=1e-6)
    assert g2.on_demand_price == pytest.approx(0.706832, abs=1e-6)
    assert g2.zone == ""
    a2 = quotes[("us-central1", "a2-highgpu-1g")]
    assert a2.spot_price == pytest.approx(12 * 0.01659 + 85 * 0.00222 + 1.540017)
    assert ("europe-west4", "g2-standard-8") in quotes
    assert ("europe-west4", "a2-highgpu-1g") not in quotes  # no A2 SKUs there
    pages = [r for r in server.requests if r.path.endswith("/skus")]
    assert len(pages) == 3  # 20 SKUs, 8 a page, followed by nextPageToken
    assert all(r.query["currencyCode"] == "USD" for r in pages)

    only = provider.prices(["europe-west4"])
    assert {q.region for q in only} == {"europe-west4"}


def test_billing_api_key_goes_in_a_header(server: GCPServer) -> None:
    server.token = None  # an API key instead of OAuth for the Billing API
    key = "AIzaFakeBillingKey0123456789"
    provider = make_provider(server, billing_api_key=key)
    provider.prices(["us-central1"])

    page = next(r for r in server.requests if r.path.endswith("/skus"))
    assert "key" not in page.query
    assert page.headers.get("X-Goog-Api-Key") == key
    assert redact(key) == "***"


@pytest.mark.parametrize(
    ("description", "usage", "expected"),
    [
        ("Spot Preemptible G2 Instance Core running in Americas", "Preemptible", ("G2", "core")),
        ("G2 Instance Ram running in Americas", "OnDemand", ("G2", "ram")),
        ("N1 Predefined Instance Core running in Americas", "OnDemand", ("N1", "core")),
        (
            "Nvidia Tesla T4 GPU attached to Spot Preemptible VMs running in Americas",
            "Preemptible",
            ("nvidia-tesla-t4", "gpu"),
        ),
        ("Nvidia H100 80GB GPU running in Americas", "OnDemand", ("nvidia-h100-80gb", "gpu")),
        ("Nvidia A100 80GB GPU running in Americas", "OnDemand", ("nvidia-a100-80gb", "gpu")),
        ("Commitment v1: G2 Cpu in Americas for 1 Year", "Commit1Yr", None),
        ("Storage PD Capacity", "OnDemand", None),
    ],
)
def test_parse_sku(description: str, usage: str, expected: tuple[str, str] | None) -> None:
    sku = {
        "description": description,
        "category": {"usageType": usage},
        "pricingInfo": [
            {
                "pricingExpression": {
                    "tieredRates": [{"unitPrice": {"units": "1", "nanos": 250000000}}]
                }
            }
        ],
    }
    parsed = parse_sku(sku)
    if expected is None:
        assert parsed is None
    else:
        assert parsed == (usage, *expected, 1.25)


# -- small pieces ------------------------------------------------------------------------------------


def test_names() -> None:
    assert accelerator_type("L4") == "nvidia-l4"
    assert accelerator_type("T4") == "nvidia-tesla-t4"
    assert accelerator_type("A100-80GB") == "nvidia-a100-80gb"
    assert accelerator_type("H100") == "nvidia-h100-80gb"
    with pytest.raises(ProviderError):
        accelerator_type("Voodoo3")
    assert gpu_name("nvidia-tesla-t4") == "T4"
    assert gpu_name("nvidia-l4") == "L4"
    assert label("Team.Alpha/Run_1") == "team-alpha-run_1"
    assert len(label("x" * 100)) == 63


def test_fake_filter_grammar() -> None:
    inst = {"name": "prov-a", "labels": {"provisioner-job": "j"}, "status": "RUNNING"}
    assert matches_filter(inst, '(labels.provisioner-job = "j") AND (status = "RUNNING")')
    assert not matches_filter(inst, 'labels.provisioner-job = "k"')
    assert matches_filter(inst, 'name eq "prov-.*"')
    assert matches_filter(inst, "labels.provisioner-job:*")
    with pytest.raises(ValueError):
        matches_filter(inst, "name ~~ x")


def test_job_spec_becomes_the_startup_script(server: GCPServer, provider: GCPProvider) -> None:
    spec = {"job_id": "job-a", "attempt": 1, "command": ["python", "train.py"]}
    req = LaunchRequest("job-a", 1, g2_offer(), Market.SPOT, bid_cap_per_hour=0.5, job_spec=spec)
    provider.launch(req)

    items = {i["key"]: i["value"] for i in server.launch_requests()[0].body["metadata"]["items"]}
    script = items["startup-script"]
    assert script.startswith("#!")
    assert '"cloud": "gcp"' in script and "train.py" in script


def test_the_vm_runs_as_the_service_account_with_the_cloud_platform_scope(
    server: GCPServer, provider: GCPProvider
) -> None:
    """``instances.insert`` takes ``serviceAccounts[]`` of ``{email, scopes[]}``; the scope is
    ``cloud-platform`` so that the account's IAM roles alone decide what the agent may do with
    the bucket (Storage) and Secret Manager.
    https://cloud.google.com/compute/docs/reference/rest/v1/instances/insert
    https://cloud.google.com/compute/docs/access/create-enable-service-accounts-for-instances"""
    email = "provisioner-job@adapter-test.iam.gserviceaccount.com"
    p = make_provider(server, service_account=email)
    req = request(job="job-sa")
    p.launch(req)
    p.close()
    provider.launch(request(job="job-no-sa"))

    with_sa, without = (r.body for r in server.launch_requests())
    cloud_platform = "https://www.googleapis.com/auth/cloud-platform"
    assert with_sa["serviceAccounts"] == [{"email": email, "scopes": [cloud_platform]}]
    assert "serviceAccounts" not in without
    kept = server.instance(req.name, ZONE)
    assert kept is not None and kept["serviceAccounts"][0]["email"] == email


def test_install_options_reach_the_startup_script(server: GCPServer) -> None:
    spec = {"job_id": "job-a", "attempt": 1, "command": ["python", "train.py"]}
    wheel = "provisioner[gcp] @ https://pkgs.example.com/provisioner-0.1.0-py3-none-any.whl"
    scripts = []
    for n, options in enumerate(
        [
            {"package_spec": wheel, "pip_args": ["--index-url", "https://pypi.example/simple"]},
            {"agent_preinstalled": True},
        ]
    ):
        p = make_provider(server, **options)
        job = f"job-{n}"
        p.launch(
            LaunchRequest(job, 1, g2_offer(), Market.SPOT, 0.5, job_spec={**spec, "job_id": job})
        )
        p.close()
        items = server.launch_requests()[-1].body["metadata"]["items"]
        scripts.append({i["key"]: i["value"] for i in items}["startup-script"])
    installs, preinstalled = scripts
    assert f"PACKAGE='{wheel}'" in installs
    assert 'pip install -q --index-url https://pypi.example/simple "$PACKAGE"' in installs
    assert "pip install" not in preinstalled and "-m venv" not in preinstalled
    assert "import provisioner.agent" in preinstalled


def test_offers_fall_back_on_the_catalog_when_the_api_keeps_failing(
    server: GCPServer, provider: GCPProvider
) -> None:
    server.inject_error("backendError", operation="machineTypes", times=10)

    offers = provider.offers(["us-central1"])

    if not offers:
        pytest.skip("no built-in catalog with GCP offers")
    assert {o.provider for o in offers} == {"gcp"}
    assert {o.region for o in offers} == {"us-central1"}


def test_every_list_and_price_call_crosses_pages(server: GCPServer) -> None:
    """One result (or one zone's scope) a page: the SDK's pagers must follow
    ``nextPageToken`` for instances, operations, machine/accelerator types and SKUs."""
    provider = make_provider(server)
    full_offers = {(o.zone, o.instance_type, o.gpu_count) for o in provider.offers(["us-central1"])}
    server.requests.clear()
    server.list_page_size = 1
    server.sku_page_size = 2
    a = provider.launch(request(job="job-a"))
    b = provider.launch(request(job="job-b"))
    since = datetime.now(UTC) - timedelta(seconds=5)
    assert {i.id for i in provider.list()} == {a.id, b.id}
    for inst in (a, b):
        server.preempt(inst.id.rsplit("/", 1)[-1], ZONE)
    assert {i.instance_id for i in provider.interruptions(since)} == {a.id, b.id}
    assert provider.get(b.id).state is InstanceState.PREEMPTED  # zone operations, paged
    paged = {(o.zone, o.instance_type, o.gpu_count) for o in provider.offers(["us-central1"])}
    assert paged == full_offers
    assert provider.prices(["us-central1"])

    def followed(suffix: str) -> bool:
        return any(r.path.endswith(suffix) and r.query.get("pageToken") for r in server.requests)

    for suffix in (
        "/aggregated/instances",
        "/aggregated/operations",
        f"/zones/{ZONE}/operations",
        "/aggregated/machineTypes",
        "/aggregated/acceleratorTypes",
        "/skus",
    ):
        assert followed(suffix), f"{suffix}: no second page was asked for"


def test_the_project_is_the_account_each_launch_is_billed_to(provider: GCPProvider) -> None:
    """The launch event keeps it; the FOCUS export's BillingAccountId reads it there."""
    from provisioner.control.jobpass.launch import _billing

    assert provider.account_id() == PROJECT
    assert _billing(provider)["account"] == PROJECT
