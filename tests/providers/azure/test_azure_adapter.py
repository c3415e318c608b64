"""Azure adapter tests beyond the contract suite: the NIC and Spot VM bodies on the wire, the
max price, errors dispatched on ``error.code``, long-running operations, evictions with either
policy, and the Retail Prices API.

Everything runs the real azure-mgmt-compute / azure-mgmt-network SDKs against
tests/fakes/azure_server.py on 127.0.0.1.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("azure.mgmt.compute")
pytest.importorskip("azure.mgmt.network")

from fakes.azure_server import AzureServer, odata_match

from providers.azure import AzureProvider, classify, max_price
from providers.base import ErrorKind, ProviderError, RetryPolicy, redact
from provisioner.core.models import TAG_JOB, InstanceState, LaunchRequest, Market, Offer

TOKEN = "eyJ0eXAi.adapter-test-azure-token.0123456789"
FAST = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)
USER_DATA = "#!/bin/sh\necho hello from azure\n"


@pytest.fixture
def server() -> Iterator[AzureServer]:
    with AzureServer(token=TOKEN) as s:
        yield s


def make_provider(server: AzureServer, **kw: object) -> AzureProvider:
    options: dict[str, object] = {
        "subscription_id": server.subscription_id,
        "resource_group": server.resource_group,
        "location": "eastus",
        "subnet_id": server.subnet_id,
        "endpoint": server.endpoint,
        "credentials": TOKEN,
        "ssh_public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake test@provisioner",
        "retry": FAST,
        "polling_interval": 0,
    }
    options.update(kw)
    return AzureProvider(**options)  # type: ignore[arg-type]


@pytest.fixture
def provider(server: AzureServer) -> Iterator[AzureProvider]:
    p = make_provider(server)
    yield p
    p.close()


def t4_offer(zone: str = "eastus-1") -> Offer:
    return Offer("azure", "eastus", zone, "Standard_NC4as_T4_v3", "T4", 1, 4, 28.0, 0.526, 0.062699)


def request(
    market: Market = Market.SPOT,
    cap: float | None = 0.123456789,
    job: str = "job-a",
    zone: str = "eastus-1",
) -> LaunchRequest:
    return LaunchRequest(job, 1, t4_offer(zone), market, bid_cap_per_hour=cap, user_data=USER_DATA)


# -- the wire -------------------------------------------------------------------------------------


def test_spot_vm_put_carries_priority_eviction_max_price_tags_and_custom_data(
    server: AzureServer, provider: AzureProvider
) -> None:
    req = request()
    inst = provider.launch(req)

    puts = [r for r in server.requests if r.method == "PUT"]
    assert [r.path.rsplit("/", 2)[-2] for r in puts] == ["networkInterfaces", "virtualMachines"]
    nic, vm = puts
    assert nic.path.endswith(f"/networkInterfaces/{req.name}-nic")
    assert (
        nic.body["properties"]["ipConfigurations"][0]["properties"]["subnet"]["id"]
        == server.subnet_id
    )
    assert nic.body["tags"] == req.tags

    assert vm.path.endswith(f"/virtualMachines/{req.name}")
    assert vm.query["api-version"]
    props = vm.body["properties"]
    assert props["priority"] == "Spot"
    assert props["evictionPolicy"] == "Delete"
    assert props["billingProfile"] == {"maxPrice": 0.12345}  # floored to 5 decimals
    assert vm.body["tags"] == req.tags
    assert vm.body["zones"] == ["1"]
    assert vm.body["location"] == "eastus"
    assert props["hardwareProfile"] == {"vmSize": "Standard_NC4as_T4_v3"}
    assert base64.b64decode(props["osProfile"]["customData"]).decode() == USER_DATA
    assert props["networkProfile"]["networkInterfaces"] == [
        {
            "id": provider.client.nic_id(req.name),
            "properties": {"primary": True, "deleteOption": "Detach"},
        }
    ]
    assert props["storageProfile"]["osDisk"]["deleteOption"] == "Delete"

    assert inst.id == provider.client.vm_id(req.name)
    assert (inst.zone, inst.region) == ("eastus-1", "eastus")
    assert inst.private_ip == "10.0.0.4"
    assert inst.state is InstanceState.RUNNING
    # Azure never returns customData on GET; the server kept what was sent
    assert server.custom_data(req.name) == props["osProfile"]["customData"]


def test_no_cap_is_minus_one_and_on_demand_is_regular(
    server: AzureServer, provider: AzureProvider
) -> None:
    provider.launch(request(cap=None, job="spot-nocap"))
    provider.launch(request(Market.ON_DEMAND, cap=None, job="regular", zone=""))

    spot, regular = (r.body for r in server.launch_requests())
    assert spot["properties"]["billingProfile"] == {"maxPrice": -1}
    assert regular["properties"]["priority"] == "Regular"
    assert "billingProfile" not in regular["properties"]
    assert "evictionPolicy" not in regular["properties"]
    assert "zones" not in regular


def test_max_price() -> None:
    assert max_price(None) == -1
    assert max_price(0.5) == 0.5
    assert max_price(0.123456789) == 0.12345
    assert max_price(0.1) == 0.1  # no float fuzz pushes it under
    assert max_price(0.00001) == 0.00001
    with pytest.raises(ProviderError) as caught:
        max_price(0.000004)
    assert caught.value.kind is ErrorKind.PRICE_TOO_LOW


def test_second_launch_finds_the_vm_and_a_failed_vm_is_put_again(server: AzureServer) -> None:
    first = make_provider(server).launch(request())
    again = make_provider(server).launch(request())
    assert again.id == first.id
    assert len(server.launch_requests()) == 1

    server.inject_error("AllocationFailed", operation="vm.put")
    other = request(job="job-b")
    with pytest.raises(ProviderError):
        make_provider(server).launch(other)
    assert server.vm(other.name) is None and server.nic(f"{other.name}-nic") is None
    assert make_provider(server).launch(other).state is InstanceState.RUNNING


def test_long_running_operations_are_polled_on_our_endpoint(server: AzureServer) -> None:
    server.polls = 3
    provider = make_provider(server)
    provider.launch(request())

    polls = [r for r in server.requests if "/operations/" in r.path]
    compute = [r for r in polls if "/Microsoft.Compute/locations/eastus/" in r.path]
    assert len(compute) == 4  # three InProgress, then Succeeded
    assert all(r.method == "GET" for r in polls)


# -- errors by code ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("SkuNotAvailable", ErrorKind.CAPACITY),  # a 409: ResourceExistsError in the SDK
        ("ZonalAllocationFailed", ErrorKind.CAPACITY),  # a failed operation
        ("OverconstrainedAllocationRequest", ErrorKind.CAPACITY),
        ("SpotPriceGreaterThanProvidedMaxPrice", ErrorKind.PRICE_TOO_LOW),
        ("MaxPriceValueInvalid", ErrorKind.INVALID),
        ("OperationNotAllowed", ErrorKind.QUOTA),
        ("InvalidAuthenticationToken", ErrorKind.AUTH),
        ("AuthorizationFailed", ErrorKind.AUTH),
    ],
)
def test_launch_errors_are_classified_by_code_and_leave_nothing(
    server: AzureServer, provider: AzureProvider, code: str, kind: ErrorKind
) -> None:
    req = request()
    server.inject_error(code, operation="launch")

    with pytest.raises(ProviderError) as caught:
        provider.launch(req)

    assert (caught.value.kind, caught.value.code, caught.value.provider) == (kind, code, "azure")
    assert len(server.launch_requests()) == 1
    assert server.vm(req.name) is None
    assert server.nic(f"{req.name}-nic") is None
    assert provider.list() == []


def test_operation_not_allowed_without_quota_is_invalid(
    server: AzureServer, provider: AzureProvider
) -> None:
    server.inject_error(
        "OperationNotAllowed",
        operation="launch",
        message="Operation 'start' is not allowed since the VM is marked for deletion.",
    )
    with pytest.raises(ProviderError) as caught:
        provider.launch(request())
    assert caught.value.kind is ErrorKind.INVALID


@pytest.mark.parametrize(
    ("code", "kind", "calls"),
    [
        ("TooManyRequests", ErrorKind.THROTTLED, FAST.attempts),
        ("InternalServerError", ErrorKind.TRANSIENT, FAST.attempts),
        ("ServiceUnavailable", ErrorKind.TRANSIENT, FAST.attempts),
        ("ResourceNotFound", ErrorKind.NOT_FOUND, 1),
    ],
)
def test_errors_on_list_are_classified_and_retried_only_when_retryable(
    server: AzureServer, provider: AzureProvider, code: str, kind: ErrorKind, calls: int
) -> None:
    server.inject_error(code, operation="vm.list", times=10)

    with pytest.raises(ProviderError) as caught:
        provider.list()

    assert (caught.value.kind, caught.value.code) == (kind, code)
    lists = [
        r for r in server.requests if r.path.endswith("/virtualMachines") and r.method == "GET"
    ]
    assert len(lists) == calls


def test_wrong_token_is_auth_and_the_token_is_a_registered_secret(server: AzureServer) -> None:
    wrong = "eyJ0eXAi.wrong-token.000000000000"
    provider = make_provider(server, credentials=wrong)
    with pytest.raises(ProviderError) as caught:
        provider.get("prov-any-a1")
    assert (caught.value.kind, caught.value.code) == (ErrorKind.AUTH, "InvalidAuthenticationToken")
    assert wrong not in str(caught.value)
    assert redact(wrong) == "***"
    assert all("Authorization" not in r.headers for r in server.requests)


def test_classify_leaves_foreign_errors_alone() -> None:
    assert classify(KeyError("x")) is None
    err = classify(ConnectionResetError("peer"))
    assert err is not None and err.kind is ErrorKind.TRANSIENT


# -- evictions --------------------------------------------------------------------------------------


def test_eviction_with_delete_policy_via_simulate_eviction(
    server: AzureServer, provider: AzureProvider
) -> None:
    inst = provider.launch(request())
    since = datetime.now(UTC) - timedelta(seconds=5)
    name = inst.id.rsplit("/", 1)[-1]
    provider.client.compute.virtual_machines.simulate_eviction(
        server.resource_group, name
    )  # the SDK's own call

    assert server.vm(name) is None
    got = provider.get(inst.id)
    assert (got.state, got.tags[TAG_JOB]) == (InstanceState.PREEMPTED, "job-a")
    [listed] = provider.list({TAG_JOB: "job-a"})
    assert listed.state is InstanceState.PREEMPTED
    [found] = provider.interruptions(since)
    assert (found.instance_id, found.kind, found.provider) == (inst.id, "preempted", "azure")
    assert found.at >= since

    provider.terminate([inst.id])  # removes the NIC that stood for the evicted VM
    assert server.nic(f"{name}-nic") is None
    with pytest.raises(ProviderError) as caught:
        provider.get(inst.id)
    assert caught.value.kind is ErrorKind.NOT_FOUND
    assert provider.interruptions(since) == []


def test_eviction_with_deallocate_policy_keeps_the_vm(server: AzureServer) -> None:
    provider = make_provider(server, eviction_policy="Deallocate")
    inst = provider.launch(request())
    assert server.launch_requests()[0].body["properties"]["evictionPolicy"] == "Deallocate"
    since = datetime.now(UTC) - timedelta(seconds=5)
    server.preempt(inst.id.rsplit("/", 1)[-1])

    got = provider.get(inst.id)
    assert (got.state, got.raw_state, got.state_reason) == (
        InstanceState.PREEMPTED,
        "deallocated",
        "evicted",
    )
    [found] = provider.interruptions(since)
    assert found.instance_id == inst.id
    assert provider.interruptions(datetime.now(UTC) + timedelta(minutes=1)) == []

    provider.terminate([inst.id])
    assert server.vm(inst.id.rsplit("/", 1)[-1]) is None


def test_terminate_takes_bare_names_and_unknown_ids(
    server: AzureServer, provider: AzureProvider
) -> None:
    inst = provider.launch(request())
    provider.terminate([inst.id.rsplit("/", 1)[-1], provider.client.vm_id("prov-unknown-a1")])
    assert server.vm(inst.id.rsplit("/", 1)[-1]) is None
    assert provider.list() == []


# -- prices and offers ------------------------------------------------------------------------------


def test_prices_from_the_retail_api_follow_next_page_link(
    server: AzureServer, provider: AzureProvider
) -> None:
    quotes = {q.instance_type: q for q in provider.prices(["eastus"])}

    t4 = quotes["Standard_NC4as_T4_v3"]
    assert (t4.spot_price, t4.on_demand_price) == (
        0.062699,
        0.526,
    )  # Linux, not Windows/Low Priority
    assert quotes["Standard_NC24ads_A100_v4"].spot_price == 0.444433
    assert "Standard_D4s_v5" not in quotes  # not a GPU size
    pages = [r for r in server.requests if r.path == "/api/retail/prices"]
    assert len(pages) > 1
    assert "armRegionName eq 'eastus'" in pages[0].query["$filter"]
    assert "priceType eq 'Consumption'" in pages[0].query["$filter"]
    assert all("Authorization" not in r.headers for r in pages)
    # filtered on the GPU sizes: no page carries a meter of another size
    assert "armSkuName eq 'Standard_NC4as_T4_v3'" in " ".join(p.query["$filter"] for p in pages)
    firsts = [p for p in pages if "$skip" not in p.query]  # one query per batch of sizes
    assert len(pages) > len(firsts)  # and NextPageLink followed past the first page


def test_a_price_refresh_names_the_gpu_sizes_and_reads_only_their_meters(
    server: AzureServer,
) -> None:
    provider = make_provider(server, vm_sizes=["Standard_NC4as_T4_v3", "Standard_NC24ads_A100_v4"])
    quotes = provider.prices(["eastus"])
    assert {q.instance_type for q in quotes} == {"Standard_NC4as_T4_v3", "Standard_NC24ads_A100_v4"}
    pages = [r for r in server.requests if r.path == "/api/retail/prices"]
    everything = [i for i in server.prices if i["armRegionName"] == "eastus"]
    wanted = [i for i in everything if i["armSkuName"] in provider.client.vm_sizes]
    assert len(wanted) < len(everything)
    # the pages hold just those sizes' meters (7 items a page in the fake)
    assert len(pages) == -(-len(wanted) // server.price_page_size)
    expr = pages[0].query["$filter"]
    assert (
        "(armSkuName eq 'Standard_NC4as_T4_v3' or armSkuName eq 'Standard_NC24ads_A100_v4')" in expr
    )

    west = provider.prices(["westus2"])
    assert {q.region for q in west} == {"westus2"}


def test_offers_take_live_prices_once_fetched(server: AzureServer, provider: AzureProvider) -> None:
    before = [o for o in provider.offers(["eastus"]) if o.instance_type == "Standard_NC4as_T4_v3"]
    if not before:
        pytest.skip("the catalog has no Azure T4 offer in eastus")
    provider.prices(["eastus"])
    after = [o for o in provider.offers(["eastus"]) if o.instance_type == "Standard_NC4as_T4_v3"]
    assert after[0].spot_price == 0.062699
    assert all(o.provider == "azure" and o.gpu_count >= 1 for o in after)


def test_fake_odata_filter() -> None:
    item = {
        "serviceName": "Virtual Machines",
        "type": "Consumption",
        "armRegionName": "eastus",
        "meterName": "NC4as T4 v3 Spot",
    }
    assert odata_match(item, "serviceName eq 'Virtual Machines' and priceType eq 'Consumption'")
    assert odata_match(item, "(armRegionName eq 'westus' or armRegionName eq 'eastus')")
    assert odata_match(item, "contains(meterName, 'Spot')")
    assert not odata_match(item, "armRegionName eq 'EastUS'")  # values are case sensitive
    with pytest.raises(ValueError):
        odata_match(item, "armRegionName gt 'a'")


def test_job_spec_becomes_custom_data(server: AzureServer, provider: AzureProvider) -> None:
    spec = {"job_id": "job-a", "attempt": 1, "command": ["python", "train.py"]}
    req = LaunchRequest("job-a", 1, t4_offer(), Market.SPOT, bid_cap_per_hour=0.5, job_spec=spec)
    provider.launch(req)

    custom = server.launch_requests()[0].body["properties"]["osProfile"]["customData"]
    script = base64.b64decode(custom).decode()
    assert script.startswith("#!")
    assert '"cloud": "azure"' in script and "train.py" in script


def test_install_options_reach_the_custom_data(server: AzureServer) -> None:
    spec = {"job_id": "job-a", "attempt": 1, "command": ["python", "train.py"]}
    wheel = "provisioner[azure] @ https://pkgs.example.com/provisioner-0.1.0-py3-none-any.whl"
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
            LaunchRequest(job, 1, t4_offer(), Market.SPOT, 0.5, job_spec={**spec, "job_id": job})
        )
        custom = server.launch_requests()[-1].body["properties"]["osProfile"]["customData"]
        scripts.append(base64.b64decode(custom).decode())
        p.close()
    installs, preinstalled = scripts
    assert f"PACKAGE='{wheel}'" in installs
    assert 'pip install -q --index-url https://pypi.example/simple "$PACKAGE"' in installs
    assert "pip install" not in preinstalled and "-m venv" not in preinstalled
    assert "import provisioner.agent" in preinstalled


# -- the VM's managed identity ----------------------------------------------------------------------


def _user_assigned(server: AzureServer, name: str = "provisioner-job") -> str:
    return (
        f"/subscriptions/{server.subscription_id}/resourceGroups/identities/providers/"
        f"Microsoft.ManagedIdentity/userAssignedIdentities/{name}"
    )


@pytest.mark.parametrize("kind", ["system", "user"])
def test_the_vm_put_carries_its_managed_identity(server: AzureServer, kind: str) -> None:
    """``identity`` in the VM PUT as the Compute REST reference's ``VirtualMachineIdentity``
    has it: ``{"type": "SystemAssigned"}``, or ``{"type": "UserAssigned",
    "userAssignedIdentities": {ARM id: {}}}`` (keys of the form ``/subscriptions/{sub}/
    resourceGroups/{rg}/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{name}``).
    https://learn.microsoft.com/en-us/rest/api/compute/virtual-machines/create-or-update
    https://learn.microsoft.com/en-us/entra/identity/managed-identities-azure-resources/qs-configure-rest-vm
    Sent as a dict through either SDK model generation (.ci/azure-min-versions runs this)."""
    uai = _user_assigned(server)
    option, wire = {
        "system": ("system", {"type": "SystemAssigned"}),
        "user": (uai, {"type": "UserAssigned", "userAssignedIdentities": {uai: {}}}),
    }[kind]
    p = make_provider(server, identity=option)
    req = request(job=f"job-{kind}")
    p.launch(req)
    p.close()

    (put,) = server.launch_requests()
    assert put.body["identity"] == wire
    kept = server.vm(req.name)
    assert kept is not None
    if kind == "system":  # Azure made the identity: its read-only ids come back
        assert kept["identity"]["type"] == "SystemAssigned" and kept["identity"]["principalId"]
    else:
        assert set(kept["identity"]["userAssignedIdentities"]) == {uai}


def test_without_the_option_the_vm_has_no_identity_and_a_bad_one_is_refused(
    server: AzureServer, provider: AzureProvider
) -> None:
    provider.launch(request(job="job-none"))
    (put,) = server.launch_requests()
    assert "identity" not in put.body
    for bad in ("yes", "provisioner-job", "/subscriptions/s/resourceGroups/g/providers/x/y/z"):
        with pytest.raises(ValueError, match="userAssignedIdentities/NAME"):
            make_provider(server, identity=bad)


def test_the_fake_refuses_identities_arm_refuses(server: AzureServer) -> None:
    """What ARM answers to a malformed identity (so the fake cannot pass a wrong body)."""
    import json
    import urllib.error
    import urllib.request

    p = make_provider(server)
    nic = p.launcher._ensure_nic("vm-bad", "eastus", {})
    p.close()
    body = {
        "location": "eastus",
        "properties": {"networkProfile": {"networkInterfaces": [{"id": nic["id"]}]}},
    }
    uai = _user_assigned(server)
    cases = {
        "InvalidParameter": {"type": "UserAssigned"},
        "BadRequest": {"type": "SystemAssigned", "userAssignedIdentities": {uai: {}}},
        "InvalidIdentityValues": {
            "type": "UserAssigned",
            "userAssignedIdentities": {uai: {"principalId": "p"}},
        },
    }
    for code, identity in cases.items():
        put = urllib.request.Request(
            f"{server.endpoint}{p.client.vm_id('vm-bad')}?api-version=2026-04-01",
            data=json.dumps({**body, "identity": identity}).encode(),
            method="PUT",
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(put, timeout=10)
        assert json.loads(caught.value.read())["error"]["code"] == code


# -- both generations of SDK models ---------------------------------------------------------------

NIC_WIRE = {
    "id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/n-nic",
    "name": "n-nic",
    "location": "eastus",
    "tags": {"provisioner-job": "job-1"},
    "properties": {
        "provisioningState": "Succeeded",
        "ipConfigurations": [{"name": "ipconfig1", "properties": {"privateIPAddress": "10.0.0.4"}}],
    },
}


def _sdk_model(cls: Any, wire: dict[str, Any]) -> Any:
    """``wire`` as the installed SDK's own model (msrest-style or the newer mapping models)."""
    if hasattr(cls, "_attribute_map"):  # azure-mgmt-network < 26, azure-mgmt-compute <= 33
        return cls.deserialize(wire)
    return cls(wire)


def test_as_dict_gives_the_wire_shape_whatever_the_model_generation() -> None:
    """The extras allow azure-mgmt-network >= 25 and azure-mgmt-compute >= 33, whose models are
    msrest-style (``as_dict()`` is flattened snake_case); newer ones are mappings over the wire
    JSON. The adapter reads the wire shape from both (.ci/azure-min-versions runs this file at
    the lowest versions)."""
    from azure.mgmt.compute.models import VirtualMachine
    from azure.mgmt.network.models import NetworkInterface

    from providers.azure import as_dict, private_ip

    nic = as_dict(_sdk_model(NetworkInterface, NIC_WIRE))
    assert nic["id"] == NIC_WIRE["id"]
    assert nic["tags"] == {"provisioner-job": "job-1"}
    assert nic["properties"]["provisioningState"] == "Succeeded"
    assert private_ip(nic) == "10.0.0.4"
    vm = as_dict(
        _sdk_model(
            VirtualMachine,
            {
                "location": "eastus",
                "properties": {"priority": "Spot", "billingProfile": {"maxPrice": 0.5}},
            },
        )
    )
    assert vm["properties"]["priority"] == "Spot"
    assert vm["properties"]["billingProfile"]["maxPrice"] == 0.5


def test_vm_and_nic_lists_follow_next_link(server: AzureServer, provider: AzureProvider) -> None:
    server.list_page_size = 1  # one VM (one NIC) a page
    launched = [provider.launch(request(job=f"job-{n}")) for n in range(3)]
    evicted = launched[0].id.rsplit("/", 1)[-1]
    provider.client.compute.virtual_machines.simulate_eviction(server.resource_group, evicted)
    found = {i.id: i for i in provider.list()}
    assert set(found) == {i.id for i in launched}
    assert found[launched[0].id].state is InstanceState.PREEMPTED  # its NIC was on a later page
    for kind in ("virtualMachines", "networkInterfaces"):
        pages = [r for r in server.requests if r.method == "GET" and r.path.endswith(kind)]
        assert any("$skiptoken" in r.query for r in pages), f"{kind}: nextLink not followed"


def test_commitment_prices_are_the_retail_apis_reservations(
    server: AzureServer, provider: AzureProvider
) -> None:
    from providers.capabilities import Commitments

    assert isinstance(provider, Commitments)
    quotes = provider.commitment_prices(["eastus"])
    a100 = {
        (q.term_months, q.payment): q
        for q in quotes
        if q.instance_type == "Standard_NC24ads_A100_v4"
    }
    year = round(3.673 * 0.62 * 8760, 2)  # the fake's 1-year term price, whole
    three = round(3.673 * 0.4 * 26280, 2)  # and its 3-year one
    assert a100[(12, "all")].upfront == pytest.approx(year)
    assert a100[(12, "all")].per_hour == 0.0
    assert a100[(12, "no")].upfront == 0.0
    assert a100[(12, "no")].per_hour == pytest.approx(year / 8760)
    assert a100[(36, "all")].upfront == pytest.approx(three)
    assert a100[(36, "no")].per_hour == pytest.approx(three / 26280)
    # as rows of commitments.csv, paid upfront or monthly: the same effective rate
    rows = [a100[(12, p)].as_commitment() for p in ("all", "no")]
    assert [(r.option, r.term, r.payment) for r in rows if r] == [
        ("reservation", "1y", "all"),
        ("reservation", "1y", "no"),
    ]
    assert all(r and r.hourly == pytest.approx(3.673 * 0.62) for r in rows)
    assert {q.term_months for q in quotes} == {12, 36}
    assert all(q.kind == "reservation" and q.region == "eastus" for q in quotes)
    assert "Standard_D4s_v5" not in {q.instance_type for q in quotes}  # not a GPU size
    pages = [r for r in server.requests if r.path == "/api/retail/prices"]
    assert pages and all("priceType eq 'Reservation'" in p.query["$filter"] for p in pages)


def test_a_cap_held_by_the_daemon_sends_minus_one(
    server: AzureServer, provider: AzureProvider
) -> None:
    """``bid_cap.enforce: daemon`` (Azure's default): maxPrice -1, never evicted for price."""
    provider.launch(replace(request(cap=0.5, job="held"), cap_on_wire=False))
    [sent] = [r.body for r in server.launch_requests()]
    assert sent["properties"]["billingProfile"] == {"maxPrice": -1}


def test_the_subscription_is_the_account_each_launch_is_billed_to(
    provider: AzureProvider, server: AzureServer
) -> None:
    """The launch event keeps it; the FOCUS export's BillingAccountId reads it there."""
    from provisioner.control.jobpass.launch import _billing

    assert provider.account_id() == server.subscription_id
    assert _billing(provider) == {
        "currency": "USD", "usd_per_unit": 1.0, "account": server.subscription_id,
    }  # fmt: skip
