"""Each cloud declares its facts once (``providers/<cloud>/facts.py``); the consumers read them.

The registry is the ``provisioner.clouds`` entry point group; the notice parsers are pure
functions on each cloud's documented answers; the sim, a real server process, bills each cloud
it mimics by that cloud's :class:`~provisioner.core.billing.Billing`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import pytest

from providers.bootstrap import BootstrapError, user_data_limit
from providers.facts import BUILTIN, GROUP, CloudFacts, billing_for, cloud_facts, known_clouds
from providers.sim import SimProvider
from provisioner.agent.spec import AgentSpec
from provisioner.cli.providers_cmd import expand_path
from provisioner.core.models import LaunchRequest, Market

REPO = Path(__file__).resolve().parents[2]
FIVE = {"aws", "gcp", "azure", "alibaba", "tencent"}
#: fields that may be zero or False for a cloud (the rest must be set)
MAY_BE_FALSY = {"spot_protection_s", "user_data_limit_encoded"}


def test_the_entry_point_group_lists_the_five_clouds() -> None:
    eps = {ep.name: ep for ep in entry_points(group=GROUP)}
    assert set(eps) == FIVE == set(BUILTIN)
    assert set(known_clouds()) == FIVE
    for name, ep in eps.items():
        assert ep.value == f"providers.{name}.facts:FACTS"
        assert ep.load() is cloud_facts(name)


@pytest.mark.parametrize("name", sorted(FIVE))
def test_every_cloud_has_complete_facts(name: str) -> None:
    facts = cloud_facts(name)
    assert isinstance(facts, CloudFacts) and facts.name == name
    for f in dataclasses.fields(CloudFacts):
        value = getattr(facts, f.name)
        if f.name == "early":  # an early signal before the notice: AWS's only (docs/daemon.md)
            assert (value is not None) is (name == "aws"), name
            continue
        assert value is not None, f.name
        if f.name not in MAY_BE_FALSY:
            assert value, f.name  # non-empty, non-zero
    assert facts.billing.increment_s >= 1 and facts.billing.minimum_s >= 0 and facts.billing.rule
    assert 0 < facts.notice_s <= 600 and facts.spot_protection_s >= 0
    assert 1024 <= facts.user_data_limit <= 1024 * 1024
    assert facts.metadata_base.startswith("http://")
    poll = facts.notice
    assert poll.path.startswith("/") and poll.formats
    assert poll.parse(404, "") is None  # "no notice" in every format
    if poll.token is not None:
        assert poll.token.path.startswith("/") and poll.token.header and poll.token.expired
    probe = facts.credentials
    assert probe.env or probe.files
    assert all(names and all(n.isupper() for n in names) for names in probe.env)
    assert probe.hint
    # the SDK the CLI looks for is the one the cloud's extra installs
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(req.startswith(facts.sdk) for req in extras[name]), (facts.sdk, extras[name])
    assert facts.sdk_module.split(".")[0].replace("_", "").isalnum()
    assert facts.zone_suffixes and len(set(facts.zone_suffixes)) == len(facts.zone_suffixes)


def test_a_cloud_from_another_package_is_found_by_its_entry_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The built-in five are imported directly; any other name is looked up in the group."""
    import providers.facts as mod

    sixth = EntryPoint(name="sixth", value="providers.gcp.facts:FACTS", group=GROUP)
    monkeypatch.setattr(mod, "_registered", lambda: {"sixth": sixth})
    mod.cloud_facts.cache_clear()
    try:
        assert mod.cloud_facts("sixth") is mod.cloud_facts("gcp")
        assert "sixth" in mod.known_clouds()
        wrong = EntryPoint(name="odd", value="providers.facts:GROUP", group=GROUP)
        monkeypatch.setattr(mod, "_registered", lambda: {"odd": wrong})
        with pytest.raises(TypeError, match="'odd' are not a CloudFacts"):
            mod.cloud_facts("odd")
    finally:
        mod.cloud_facts.cache_clear()


def test_an_unknown_cloud_is_a_clear_value_error() -> None:
    with pytest.raises(ValueError, match=r"unknown cloud 'oracle' \(known: alibaba, aws, azure"):
        cloud_facts("oracle")
    with pytest.raises(BootstrapError, match="unknown cloud 'oracle'"):
        user_data_limit("oracle")
    with pytest.raises(ValueError, match="unknown cloud"):
        billing_for("oracle")


def test_consumers_take_the_facts() -> None:
    tencent = cloud_facts("tencent")
    assert user_data_limit("tencent") == (tencent.user_data_limit, True)
    assert user_data_limit("sim")[0] >= 1024 * 1024  # the sim keeps its own, large limit
    spec = AgentSpec(
        job_id="j", attempt=1, command=["true"], checkpoint_uri="file:///x", cloud="gcp"
    )
    assert spec.base_metadata_url == cloud_facts("gcp").metadata_base
    assert billing_for("sim") is cloud_facts("aws").billing  # the sim bills like AWS by default
    assert billing_for("azure").billed_seconds(61) == 120
    assert billing_for("alibaba").billed_seconds(0) == 0


# -- the notice parsers: pure functions on each cloud's documented answers -----------------


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_aws_notice() -> None:
    parse = cloud_facts("aws").notice.parse
    body = '{"action": "terminate", "time": "2017-09-18T08:22:00Z"}'
    reading = parse(200, body)
    assert reading is not None and reading.deadline == at("2017-09-18T08:22:00")
    assert reading.raw == body
    assert parse(200, '{"action": "none"}') is None
    assert cloud_facts("aws").notice.token is not None


def test_gcp_notice() -> None:
    parse = cloud_facts("gcp").notice.parse
    assert parse(200, "FALSE") is None
    reading = parse(200, "TRUE\n")
    assert reading is not None and reading.deadline is None and reading.raw == "TRUE"
    assert cloud_facts("gcp").notice.headers == {"Metadata-Flavor": "Google"}


def test_azure_notice_and_its_approval() -> None:
    poll = cloud_facts("azure").notice
    assert poll.parse(200, '{"DocumentIncarnation": 1, "Events": []}') is None
    freeze = '{"EventId": "f", "EventType": "Freeze", "NotBefore": ""}'
    preempt = (
        '{"EventId": "e-1", "EventType": "Preempt", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"}'
    )
    reading = poll.parse(200, f'{{"Events": [{freeze}, {preempt}]}}')
    assert reading is not None and reading.event_id == "e-1"
    assert reading.deadline == at("2016-09-19T18:29:47")
    assert poll.acknowledge is not None
    req = poll.acknowledge("e-1")
    assert (req.method, req.path) == ("POST", poll.path)
    assert req.body == b'{"StartRequests": [{"EventId": "e-1"}]}'
    assert cloud_facts("gcp").notice.acknowledge is None


def test_alibaba_and_tencent_termination_times() -> None:
    ali = cloud_facts("alibaba").notice
    reading = ali.parse(200, "2015-01-05T18:02:00Z")
    assert reading is not None and reading.deadline == at("2015-01-05T18:02:00")
    assert ali.token is not None and ali.token.optional and 403 in ali.token.expired
    tencent = cloud_facts("tencent").notice
    reading = tencent.parse(200, "2018-08-18 12:05:33")
    assert reading is not None and reading.deadline == at("2018-08-18T04:05:33")  # no zone: UTC+8
    assert tencent.parse(200, "  ") is None and tencent.token is None


def test_credential_file_templates(tmp_path: Path) -> None:
    aws = cloud_facts("aws").credentials.files[0]
    assert expand_path(aws, {}, tmp_path) == tmp_path / ".aws" / "credentials"
    assert expand_path(aws, {"AWS_SHARED_CREDENTIALS_FILE": "/c"}, tmp_path) == Path("/c")
    gcp = cloud_facts("gcp").credentials.files
    assert expand_path(gcp[0], {}, tmp_path) is None  # GOOGLE_APPLICATION_CREDENTIALS unset
    assert expand_path(gcp[1], {"CLOUDSDK_CONFIG": "/g"}, tmp_path) == Path(
        "/g/application_default_credentials.json"
    )
    for name in FIVE:  # every template expands with an empty environment, or names its variable
        for template in cloud_facts(name).credentials.files:
            path = expand_path(template, {}, tmp_path)
            if path is None:
                assert template.startswith("${"), template
            else:
                assert path.is_absolute(), template


# -- the sim bills each cloud by that cloud's Billing (a real server process) --------------


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[list[SimProvider]]:
    made: list[SimProvider] = []
    yield made
    for sim in made:
        sim.shutdown_server(terminate_all=True)


def started(sims: list[SimProvider], state_dir: Path, seconds_per_hour: float) -> SimProvider:
    sim = SimProvider(
        state_dir, mimic="all", seconds_per_hour=seconds_per_hour, mtbp_hours=None, idle_exit_s=60
    )
    sims.append(sim)
    return sim


def launch(sim: SimProvider, cloud: str, job: str) -> str:
    offer = next(o for o in sim.offers() if o.spot_price and sim.zone_cloud(o.zone) == cloud)
    inst = sim.launch(LaunchRequest(job_id=job, attempt=1, offer=offer, market=Market.SPOT))
    return inst.id


def test_the_sim_charges_each_cloud_by_its_billing(tmp_path: Path, sims: list[SimProvider]) -> None:
    # one simulated hour = 3600 real seconds: an instance ended at once ran a few seconds
    sim = started(sims, tmp_path / "real", 3600)
    ids = {cloud: launch(sim, cloud, f"short-{cloud}") for cloud in sorted(FIVE)}
    sim.terminate(list(ids.values()))
    for cloud, iid in ids.items():
        billing = cloud_facts(cloud).billing
        bill = sim.billing(iid)
        assert (bill.cloud, bill.rule, bill.running) == (cloud, billing.rule, False)
        assert bill.sim_seconds < 60
        assert bill.billed_seconds == billing.billed_seconds(bill.sim_seconds)
        if cloud in ("aws", "gcp", "azure"):
            assert bill.billed_seconds == 60  # the minimum (Azure: the first started minute)
        else:  # Alibaba, Tencent: per second, no minimum
            assert bill.billed_seconds == math.ceil(bill.sim_seconds - 1e-9) < 60

    # 1 real second = 100 simulated seconds: Azure bills whole started minutes, Tencent seconds
    scaled = started(sims, tmp_path / "scaled", 36)
    azure, tencent = launch(scaled, "azure", "long-azure"), launch(scaled, "tencent", "long-t")
    time.sleep(1.0)  # the behaviour under test: a second of run (100 simulated seconds) billed
    scaled.terminate([azure, tencent])
    a, t = scaled.billing(azure), scaled.billing(tencent)
    assert a.sim_seconds > 60 and t.sim_seconds > 60
    assert a.billed_seconds % 60 == 0 and a.sim_seconds <= a.billed_seconds < a.sim_seconds + 60
    assert a.billed_seconds == cloud_facts("azure").billing.billed_seconds(a.sim_seconds)
    assert t.billed_seconds == math.ceil(t.sim_seconds - 1e-9)
    assert a.cost == pytest.approx(a.billed_seconds / 3600 * (a.price_per_hour or 0), abs=1e-6)


def test_reading_every_clouds_facts_imports_no_sdk() -> None:
    """The agent on a VM and ``provisioner providers`` read facts; no cloud SDK may load."""
    code = (
        "import json, sys\n"
        "from providers.facts import cloud_facts, known_clouds\n"
        "from provisioner.agent.notices import NoticeReader\n"
        "for c in known_clouds():\n"
        "    cloud_facts(c)\n"
        "    NoticeReader(c, 'http://127.0.0.1:9')\n"
        "roots = ('boto3', 'botocore', 'azure', 'alibabacloud_ecs20140526', 'tencentcloud', 'grpc')\n"
        "print(json.dumps(sorted(m for m in sys.modules\n"
        "    if m.split('.')[0] in roots or m.startswith('google.cloud'))))\n"
    )
    assert printed_json(code) == []


def printed_json(code: str) -> Any:
    """What a fresh interpreter running ``code`` printed last, as JSON (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_sim_server_and_the_agent_load_no_policy_model() -> None:
    """The sim cloud's server and the node agent read the clouds' facts (a cloud's default
    cap enforcement among them) but parse no policy: neither may load the policy model or
    pydantic (a fifth of a second of every sim server's and agent's start)."""
    code = (
        "import json, sys\n"
        "import providers.sim.server, provisioner.agent.__main__\n"
        "from providers.facts import cloud_facts, known_clouds\n"
        "defaults = sorted({cloud_facts(c).bid.default.value for c in known_clouds()})\n"
        "loaded = sorted(m for m in sys.modules\n"
        "    if m in ('policies', 'policies.model', 'policies.loader') or m.startswith('pydantic'))\n"
        "print(json.dumps([defaults, loaded]))\n"
    )
    defaults, loaded = printed_json(code)
    assert defaults == ["cloud", "daemon"]  # the facts were read, enum and all
    assert loaded == ["policies"]  # the package itself, not its model (imported when asked)


def test_the_policies_package_still_offers_its_names() -> None:
    """``from policies import Policy`` (the Python API's import) loads the model when asked."""
    import policies
    from policies.enforcement import CapEnforce
    from policies.model import CapEnforce as FromModel

    assert policies.Policy.__name__ == "Policy" and callable(policies.load_policy)
    assert FromModel is CapEnforce
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = policies.Nothing  # type: ignore[attr-defined]


#: codes whose kind the adapter reads off the message, not the code alone
MESSAGE_DEPENDENT = {"azure": ("OperationNotAllowed",)}  # quota when the message says quota


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure", "alibaba", "tencent"])
def test_the_sims_error_codes_mean_to_each_adapter_what_the_sim_means(cloud: str) -> None:
    """The sim answers with each cloud's own error codes; the cloud's error table (declared in
    its facts, used by its adapter) must read every one of them as the kind the sim means."""
    from providers.base import ErrorKind
    from providers.facts import cloud_facts
    from providers.sim.rules import rules_for

    table, rules = cloud_facts(cloud).errors, rules_for(cloud)
    meant = {
        rules.capacity_code: ErrorKind.CAPACITY,
        rules.quota_code: ErrorKind.QUOTA,
        rules.throttle_code: ErrorKind.THROTTLED,
        rules.auth_code: ErrorKind.AUTH,
        rules.not_found_code: ErrorKind.NOT_FOUND,
    }
    if rules.price_code is not None:
        meant[rules.price_code] = ErrorKind.PRICE_TOO_LOW
    for code in MESSAGE_DEPENDENT.get(cloud, ()):  # the table alone cannot tell: INVALID
        assert table.kind_of(code) is ErrorKind.INVALID
        meant.pop(code)
    assert {code: table.kind_of(code) for code in meant} == meant
    assert table.provider == cloud
