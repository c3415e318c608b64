"""The sim provider: a real detached server, real sandboxes (process groups), real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from providers.base import ErrorKind, ProviderError
from providers.sim import SimProvider
from providers.sim.market import Market as SimMarket
from providers.sim.market import StochasticZone, load_trace
from providers.sim.rules import RULES, api_reports_notices
from provisioner.agent.notices import NoticeReader
from provisioner.catalog_files import Catalog
from provisioner.core.models import TAG_JOB, InstanceState, LaunchRequest, Market, Offer
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[3]
SHARED_TRACES = REPO.parent / "shared" / "data" / "traces"


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "sim"
    yield d
    # whatever a test left running: kill every instance and stop the server
    SimProvider(d).shutdown_server(terminate_all=True)


def make(state_dir: Path, **kw: Any) -> SimProvider:
    kw.setdefault("mtbp_hours", None)
    kw.setdefault("idle_exit_s", 60)
    return SimProvider(state_dir, **kw)


def request(
    offer: Offer,
    job: str = "job-a",
    attempt: int = 1,
    market: Market = Market.SPOT,
    cap: float | None = None,
    spec: dict[str, Any] | None = None,
) -> LaunchRequest:
    return LaunchRequest(
        job_id=job, attempt=attempt, offer=offer, market=market, bid_cap_per_hour=cap, job_spec=spec
    )


def aws_offer(sim: SimProvider, zone: str = "us-east-1a") -> Offer:
    return next(o for o in sim.offers(["us-east-1"]) if o.zone == zone and o.spot_price)


# -- offers --------------------------------------------------------------------------------


def test_offers_come_from_the_catalog_relabelled_sim(state_dir: Path) -> None:
    catalog = Catalog.load()
    sim = make(state_dir, mimic="aws", catalog=catalog)
    offers = sim.offers()
    assert offers and {o.provider for o in offers} == {"sim"}
    assert len(offers) == len(catalog.filter(provider="aws"))
    assert {o.zone for o in sim.offers(["us-east-1"])} >= {"us-east-1a", "us-east-1b"}

    gcp = make(state_dir, mimic="gcp", catalog=catalog)
    region_level = {
        (o.region, o.instance_type) for o in catalog.filter(provider="gcp") if not o.zone
    }
    region, itype = sorted(region_level)[0]
    zones = {o.zone for o in gcp.offers([region]) if o.instance_type == itype}
    assert zones == {f"{region}-a", f"{region}-b", f"{region}-c"}  # spread over three zones
    assert all(gcp.zone_cloud(z) == "gcp" for z in zones)

    mixed = make(state_dir, mimic={"us-east-1a": "aws", "europe-west4-a": "gcp"}, catalog=catalog)
    assert {o.zone for o in mixed.offers()} == {"us-east-1a", "europe-west4-a"}
    assert mixed.zone_cloud("europe-west4-a") == "gcp"
    with pytest.raises(ValueError):
        SimProvider(state_dir, mimic="ibm")


# -- launch, list, get, terminate ----------------------------------------------------------


def test_listing_filters_by_tag_on_the_server_and_shows_a_summary(state_dir: Path) -> None:
    """``GET /v1/instances?tag:K=V`` filters on the server, as EC2's ``tag:`` filters do, and
    a listing shows a summary (no job spec or launch token: ``get`` has the full record); an
    instance whose summary did not change comes back as the same object."""
    from providers.sim.client import request as raw

    sim = make(state_dir)
    offer = aws_offer(sim)
    spec = {"command": ["sleep", "30"], "note": "x" * 2000}
    a = sim.launch(request(offer, job="job-a", cap=100.0, spec=spec))
    b = sim.launch(request(offer, job="job-b", market=Market.ON_DEMAND))
    assert [i.id for i in sim.list({TAG_JOB: "job-b"})] == [b.id]
    first = {i.id: i for i in sim.list()}
    assert set(first) == {a.id, b.id}
    again = {i.id: i for i in sim.list()}
    assert again[a.id] is first[a.id] and again[b.id] is first[b.id]
    sim.terminate([b.id])
    after = {i.id: i for i in sim.list()}
    assert after[a.id] is first[a.id]  # unchanged: the same Instance
    assert after[b.id] is not first[b.id] and not after[b.id].state.alive
    assert after[b.id].job_id == "job-b" and after[b.id].attempt == 1

    listed = raw(sim.url + f"/v1/instances?tag:{TAG_JOB}=job-a")["instances"]
    assert [d["id"] for d in listed] == [a.id]
    full = raw(sim.url + f"/v1/instances/{a.id}")
    assert {"token", "sandbox"} <= set(full) and not {"token", "sandbox"} & set(listed[0])
    assert set(listed[0]) < set(full)


def test_launch_get_list_terminate_and_idempotent_token(state_dir: Path) -> None:
    sim = make(state_dir)
    offer = aws_offer(sim)
    inst = sim.launch(request(offer, cap=100.0))
    assert (inst.provider, inst.market, inst.state) == ("sim", Market.SPOT, InstanceState.RUNNING)
    assert (inst.zone, inst.instance_type, inst.job_id, inst.attempt) == (
        offer.zone,
        offer.instance_type,
        "job-a",
        1,
    )
    assert inst.price_per_hour == offer.spot_price

    again = sim.launch(request(offer, cap=100.0))  # same (job, attempt): same token
    assert again.id == inst.id
    other = sim.launch(request(offer, job="job-b", market=Market.ON_DEMAND))
    assert other.market is Market.ON_DEMAND and other.price_per_hour == offer.price

    assert [i.id for i in sim.list({TAG_JOB: "job-a"})] == [inst.id]
    assert {i.id for i in sim.list()} == {inst.id, other.id}
    assert sim.get(inst.id).state is InstanceState.RUNNING
    with pytest.raises(ProviderError) as missing:
        sim.get("sim-000000000000")
    assert missing.value.kind is ErrorKind.NOT_FOUND

    pgid = int(sim.sandbox(inst.id)["pid"])
    assert not group_gone(pgid)
    sim.terminate([inst.id, "sim-000000000000"])  # unknown ids are fine
    got = sim.get(inst.id)
    assert (got.state, got.raw_state) == (InstanceState.TERMINATED, "terminated")
    wait_for(lambda: group_gone(pgid), timeout=10)
    assert sim.launch(request(offer, cap=100.0)).id == inst.id  # token stays bound


def test_capacity_error_in_an_unavailable_zone(state_dir: Path, tmp_path: Path) -> None:
    trace = tmp_path / "us-east-1b.csv"
    trace.write_text("timestamp,available,price\n0,0,\n3600,0,\n")
    sim = make(state_dir, trace={"us-east-1b": str(trace)})
    with pytest.raises(ProviderError) as caught:
        sim.launch(request(aws_offer(sim, "us-east-1b")))
    assert caught.value.kind is ErrorKind.CAPACITY
    assert caught.value.code == "InsufficientInstanceCapacity"
    assert sim.list() == []
    assert sim.availability(["us-east-1a", "us-east-1b"]) == {
        "us-east-1a": True,
        "us-east-1b": False,
    }
    # on-demand capacity is there
    od = sim.launch(request(aws_offer(sim, "us-east-1b"), market=Market.ON_DEMAND))
    assert od.state is InstanceState.RUNNING

    # options are the server's: the last adapter to connect sets them (same trace here)
    tencent = make(state_dir, mimic={"us-east-1b": "tencent"}, trace={"us-east-1b": str(trace)})
    fake = Offer("sim", "us-east-1", "us-east-1b", "GN7.2XLARGE32", "T4", 1, 8, 32, 1.0, 0.3)
    with pytest.raises(ProviderError) as t:
        tencent.launch(request(fake, job="t"))
    assert t.value.code == "ResourceInsufficient.AvailabilityZoneSoldOut"


def test_bid_cap_under_the_spot_price_is_price_too_low(state_dir: Path) -> None:
    sim = make(state_dir)
    offer = aws_offer(sim)
    assert offer.spot_price is not None
    with pytest.raises(ProviderError) as caught:
        sim.launch(request(offer, cap=offer.spot_price / 2))
    assert (caught.value.kind, caught.value.code) == (ErrorKind.PRICE_TOO_LOW, "SpotMaxPriceTooLow")


def test_preemption_serves_a_notice_then_kills_the_process_group(state_dir: Path) -> None:
    sim = make(state_dir, notice_floor_s=1.0)
    since = datetime.now(UTC) - timedelta(seconds=1)
    inst = sim.launch(request(aws_offer(sim)))
    pgid = int(sim.sandbox(inst.id)["pid"])
    assert not group_gone(pgid)

    sim.preempt(inst.id, notice_s=1.5)
    # as on AWS: the notice is served to the VM (its metadata endpoint), not through the API
    notice = NoticeReader("aws", sim.sandbox(inst.id)["metadata_url"]).poll()
    assert notice is not None and notice.seconds_left() <= 1.5
    assert [i.kind for i in sim.interruptions(since) if i.instance_id == inst.id] == []
    assert sim.get(inst.id).state is InstanceState.RUNNING  # still running during the notice
    assert not group_gone(pgid)

    wait_for(lambda: sim.get(inst.id).state is InstanceState.PREEMPTED, timeout=10)
    got = sim.get(inst.id)
    assert got.raw_state == "terminated"
    assert got.state_reason.startswith("Server.SpotInstanceTermination")
    found = [i for i in sim.interruptions(since) if i.instance_id == inst.id]
    assert [i.kind for i in found] == ["preempted"]
    assert found[0].at >= notice.deadline - timedelta(milliseconds=1)
    assert found[0].provider == "sim" and found[0].zone == inst.zone
    wait_for(lambda: group_gone(pgid), timeout=5)


def test_market_preemption_from_a_trace(state_dir: Path, tmp_path: Path) -> None:
    # each trace point lasts half a simulated hour = 1 real second (seconds_per_hour=2)
    trace = tmp_path / "z.json"
    trace.write_text(
        json.dumps(
            {
                "metadata": {"gap_seconds": 1800},
                "data": [1, 1, 0, 0, 0, 0],
                "prices": [0.5, 0.6, 9, 9, 9, 9],
            }
        )
    )
    sim = make(
        state_dir, trace={"us-east-1c": str(trace)}, seconds_per_hour=2.0, notice_floor_s=1.0
    )
    since = datetime.now(UTC) - timedelta(seconds=1)
    inst = sim.launch(request(aws_offer(sim, "us-east-1c")))
    assert inst.price_per_hour in (0.5, 0.6)  # the trace's price, not the catalog's
    pgid = int(sim.sandbox(inst.id)["pid"])
    wait_for(lambda: sim.get(inst.id).state is InstanceState.PREEMPTED, timeout=10)
    kinds = [i.kind for i in sim.interruptions(since) if i.instance_id == inst.id]
    assert kinds == ["preempted"]  # the notice went to the VM only, as AWS's does
    served = [
        json.loads(line)["kind"]
        for line in (state_dir / "events.jsonl").read_text().splitlines()
        if json.loads(line)["instance_id"] == inst.id
    ]
    assert served == ["notice", "preempted"]
    wait_for(lambda: group_gone(pgid), timeout=5)
    with pytest.raises(ProviderError) as caught:
        sim.launch(request(aws_offer(sim, "us-east-1c"), attempt=2))
    assert caught.value.kind is ErrorKind.CAPACITY


def test_demo_scenario_preempts_the_first_spot_instance_of_a_job(state_dir: Path) -> None:
    sim = make(state_dir, preempt_first_after_s=1.0, notice_floor_s=1.0, demo_outage_s=30)
    first = sim.launch(request(aws_offer(sim, "us-east-1a")))
    wait_for(lambda: sim.get(first.id).state is InstanceState.PREEMPTED, timeout=10)
    with pytest.raises(ProviderError):  # its zone has no capacity for a while
        sim.launch(request(aws_offer(sim, "us-east-1a"), attempt=2))
    second = sim.launch(request(aws_offer(sim, "us-east-1b"), attempt=3))
    time.sleep(2.5)  # the behaviour under test: nothing happens to it for a while
    assert sim.get(second.id).state is InstanceState.RUNNING  # only the first one goes


# -- billing -------------------------------------------------------------------------------


def test_billing_rules_per_cloud() -> None:
    assert RULES["aws"].billed_seconds(1.2) == 60 and RULES["aws"].billed_seconds(61.2) == 62
    assert RULES["gcp"].billed_seconds(0) == 60
    assert RULES["azure"].billed_seconds(61) == 120 and RULES["azure"].billed_seconds(120) == 120
    assert RULES["alibaba"].billed_seconds(1.2) == 2 and RULES["tencent"].billed_seconds(0) == 0


def test_billing_of_a_short_instance_has_the_minimum(state_dir: Path) -> None:
    # one simulated hour = 3600 real seconds: billing in real seconds
    sim = make(
        state_dir, seconds_per_hour=3600, mimic={"us-east-1a": "aws", "ap-bangkok-1": "tencent"}
    )
    offer = aws_offer(sim)
    inst = sim.launch(request(offer))
    sim.terminate([inst.id])
    bill = sim.billing(inst.id)
    assert not bill.running and bill.real_seconds < 5
    assert bill.billed_seconds == 60 and bill.rule == "per second, 60 s minimum"
    assert bill.cost == pytest.approx(60 / 3600 * (offer.spot_price or 0), abs=1e-6)

    t_offer = next(o for o in sim.offers() if o.zone == "ap-bangkok-1" and o.spot_price)
    t = sim.launch(request(t_offer, job="t"))
    sim.terminate([t.id])
    assert sim.billing(t.id).billed_seconds < 5  # per second, no minimum

    scaled = make(state_dir, seconds_per_hour=36)  # 1 real second = 100 simulated seconds
    s = scaled.launch(request(aws_offer(scaled), job="s"))
    time.sleep(1.0)  # the behaviour under test: a second of run (100 simulated seconds) billed
    bill = scaled.billing(s.id)
    assert bill.running and 100 <= bill.sim_seconds < 400 and bill.billed_seconds >= 100


# -- the server: its own process -----------------------------------------------------------

LAUNCH_AND_DIE = """
import os, signal, sys
from providers.sim import SimProvider
from provisioner.core.models import LaunchRequest, Market
sim = SimProvider(sys.argv[1], mtbp_hours=None, idle_exit_s=60)
offer = next(o for o in sim.offers(["us-east-1"]) if o.zone == "us-east-1a")
inst = sim.launch(LaunchRequest(job_id="survivor", attempt=1, offer=offer, market=Market.SPOT))
print(inst.id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_server_outlives_the_controller_that_started_it(state_dir: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-c", LAUNCH_AND_DIE, str(state_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    iid = out.stdout.strip()
    info = json.loads((state_dir / "server.json").read_text())
    server_pid = info["pid"]
    assert pid_alive(server_pid)

    sim = make(state_dir)  # another controller, another process
    got = sim.get(iid)
    assert got.state is InstanceState.RUNNING and got.job_id == "survivor"
    assert json.loads((state_dir / "server.json").read_text())["pid"] == server_pid

    # a restarted server sees the same instances (they are persisted)
    sim.shutdown_server(terminate_all=False)
    assert not (state_dir / "server.json").exists()
    wait_for(lambda: not pid_alive(server_pid), timeout=5)
    again = make(state_dir)
    assert again.get(iid).state is InstanceState.RUNNING
    restarted = json.loads((state_dir / "server.json").read_text())
    assert restarted["pid"] != server_pid
    assert restarted["url"] == info["url"]  # same port: running agents keep their metadata URL


START = """
import sys
from providers.sim.client import ensure_server
print(ensure_server(__import__("pathlib").Path(sys.argv[1])))
"""


def test_concurrent_controllers_start_one_server(state_dir: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", START, str(state_dir)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    urls = {p.communicate(timeout=30)[0].strip() for p in procs}
    assert len(urls) == 1 and next(iter(urls)).startswith("http://127.0.0.1:")


def test_idle_server_exits_by_itself(state_dir: Path, tmp_path: Path) -> None:
    sim = make(state_dir, idle_exit_s=0.5)
    # an instance whose job has ended: still "running" (a VM), but it keeps nobody busy
    spec = {
        "job_id": "short",
        "attempt": 1,
        "command": [sys.executable, "-c", "pass"],
        "checkpoint_uri": f"file://{tmp_path}/store",
    }
    inst = sim.launch(request(aws_offer(sim), job="short", spec=spec))
    pid = json.loads((state_dir / "server.json").read_text())["pid"]
    wait_for(lambda: not pid_alive(pid), timeout=15)
    assert not (state_dir / "server.json").exists()
    assert make(state_dir).get(inst.id).state is InstanceState.RUNNING  # a new server knows it


# -- the market model ----------------------------------------------------------------------


def test_stochastic_market_is_seeded() -> None:
    def series(seed: int, zone: str) -> list[bool]:
        model = StochasticZone(seed, zone, mtbp_s=3600.0, outage_s=600.0)
        return [model.available_at(t * 60.0) for t in range(2000)]

    a = series(1, "us-east-1a")
    assert a == series(1, "us-east-1a")
    assert a != series(2, "us-east-1a") and a != series(1, "us-east-1b")
    assert a[0] and 0.6 < sum(a) / len(a) < 0.98
    assert SimMarket(mtbp_hours=None).available("x", 1e9)


def test_recorded_traces_load() -> None:
    if not SHARED_TRACES.exists():
        pytest.skip("needs ../shared/data/traces")
    files = sorted(SHARED_TRACES.rglob("*.json"))
    assert files
    for path in files[:5]:
        trace = load_trace(path)
        doc = json.loads(path.read_text())
        gap = doc["metadata"]["gap_seconds"]
        for i in (0, len(doc["data"]) // 2, len(doc["data"]) - 1):
            assert trace.available_at(i * gap + gap / 2) == (doc["data"][i] >= 1)
        assert trace.available_at(trace.period + 1) == trace.available_at(1)  # loops


def test_the_market_reads_a_trace_as_the_simulator_does(tmp_path: Path) -> None:
    """One parser for both: an irregular CSV (ISO times, a header, a gap of 20 min among
    10-min rows, a count above 1, prices) and a JSON trace give the sim's market, at every
    moment, the availability and price the simulator's trace has at that tick."""
    from provisioner.simulate.traces import load_trace as simulator_trace

    csv_path = tmp_path / "eu-west-1a.csv"
    csv_path.write_text(
        "timestamp,available,price\n"
        "2023-02-15T00:00:00Z,1,0.91\n"
        "2023-02-15T00:10:00Z,0,0.95\n"
        "2023-02-15T00:20:00Z,2,0.97\n"
        "2023-02-15T00:40:00Z,1,0.90\n"
        "2023-02-15T00:50:00Z,0,1.20\n",
        encoding="utf-8",
    )
    json_path = tmp_path / "us-east-1b_v100_1.json"
    json_path.write_text(
        json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 1, 0, 3, 0, 1]}),
        encoding="utf-8",
    )
    market = SimMarket(traces={"a": str(csv_path), "b": str(json_path)})
    for zone, path in (("a", csv_path), ("b", json_path)):
        grid = simulator_trace(path)
        ticks = len(grid)
        assert ticks == 6  # the CSV's 20-minute row holds for two 10-minute ticks
        for k in range(ticks * 10):  # every minute, twice round the loop
            t = k * 60.0 + 30.0
            i = int(t // grid.gap_s) % ticks
            assert market.available(zone, t) == bool(grid.values[i] >= 1), (zone, t)
            want = None if grid.prices is None else float(grid.prices[i])
            assert market.price(zone, t) == want, (zone, t)
    assert [market.available("a", m * 600.0 + 1) for m in range(6)] == [
        True,
        False,
        True,
        True,
        True,
        False,
    ]


def test_a_bad_trace_stops_the_market_with_the_file_named(tmp_path: Path) -> None:
    from provisioner.core.traces import TraceError

    bad = tmp_path / "z.csv"
    bad.write_text("0,1\n60,1\n30,0\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"z\.csv: timestamps must increase"):
        SimMarket(traces={"z": str(bad)})
    with pytest.raises(TraceError, match=r"nope\.json: cannot read trace"):
        SimMarket(traces={"z": str(tmp_path / "nope.json")})


@pytest.mark.parametrize(
    ("cloud", "prefix", "denied"),
    [("aws", "X-aws-ec2-metadata-token", 401), ("alibaba", "X-aliyun-ecs-metadata-token", 403)],
)
def test_the_hardened_metadata_modes_hand_out_and_check_tokens(
    cloud: str, prefix: str, denied: int
) -> None:
    """AWS's IMDSv2 and Alibaba's hardened mode, as the sim serves them: a token only by PUT
    with a TTL of 1-21600 s, echoed under the cloud's own header; a read without a live token
    of this instance is refused with the cloud's status."""
    from providers.sim.metadata import MetadataService, MetadataView

    meta = MetadataService(approve=lambda _id: None)
    one = MetadataView("i-1", "z-1", "spot", cloud, None, "e-1")
    other = MetadataView("i-2", "z-1", "spot", cloud, None, "e-2")
    ttl = f"{prefix}-ttl-seconds"
    read = "/latest/meta-data/instance-id"

    def call(inst: MetadataView, method: str, path: str, headers: dict[str, str]) -> Any:
        return meta.handle(inst, method, path, {}, headers, b"")

    assert call(one, "GET", "/latest/api/token", {ttl: "60"})[0] == 405
    assert call(one, "PUT", "/latest/api/token", {})[0] == 400
    assert call(one, "PUT", "/latest/api/token", {ttl: "21601"})[0] == 400
    assert call(one, "PUT", "/latest/api/token", {ttl: "soon"})[0] == 400
    status, headers, token = call(one, "PUT", "/latest/api/token", {ttl: "60"})
    assert status == 200 and headers[ttl] == "60" and len(token) > 20
    assert call(one, "GET", read, {})[0] == denied
    assert call(one, "GET", read, {prefix: "not-a-token"})[0] == denied
    assert call(other, "GET", read, {prefix: token.decode()})[0] == denied  # another VM's
    assert call(one, "GET", read, {prefix.upper(): token.decode()})[:3:2] == (200, b"i-1")


@pytest.mark.parametrize("cloud", sorted(RULES))
def test_the_api_reports_a_notice_only_where_the_mimicked_clouds_does(cloud: str) -> None:
    facts = RULES[cloud].facts
    assert api_reports_notices(cloud) is facts.notice_sources.api_read
    if facts.notice_sources.api_read:
        assert facts.notice_sources.api, "a notice read through the API names its source"
    assert facts.notice_sources.vm and facts.notice_sources.docs.startswith("https://")


def test_preempt_first_after_0_turns_the_demo_preemption_off(state_dir: Path) -> None:
    """``up -o preempt_first_after_s=0`` (docs/agent.md: a quieter market) means no demo
    preemption, not one at once; a negative value is refused where it is given."""
    from provisioner.api import job_provider_options
    from provisioner.cli.checks import parse_provider_options

    options = job_provider_options("sim", parse_provider_options(("preempt_first_after_s=0",)))
    assert options["preempt_first_after_s"] == 0  # over the demo default of 12
    sim = make(state_dir, preempt_first_after_s=options["preempt_first_after_s"])
    inst = sim.launch(request(aws_offer(sim, "us-east-1a")))
    sim.set_clock(datetime.now(UTC) + timedelta(hours=1))  # the scheduler ran an hour later
    assert sim.get(inst.id).state is InstanceState.RUNNING
    assert sim.sandbox(inst.id)["demo_at_real"] is None
    with pytest.raises(ValueError, match="preempt_first_after_s must be >= 0"):
        make(state_dir, preempt_first_after_s=-1)


def test_a_reused_server_starts_the_agent_of_the_checkout_that_launched(
    state_dir: Path, tmp_path: Path
) -> None:
    """One server serves a state directory for every ``up``: started from this checkout, it
    starts the agent of another checkout's controller from that checkout, not its own."""
    import shutil

    from provisioner.agent.spec import AgentSpec

    make(state_dir).availability(["us-east-1a"])  # this checkout starts the server
    other = tmp_path / "other"
    for pkg in ("provisioner", "providers", "policies"):
        shutil.copytree(REPO / pkg, other / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    agent_main = other / "provisioner" / "agent" / "__main__.py"
    text = agent_main.read_text()
    agent_main.write_text(
        text.replace("def main(", 'print("agent of", __file__)\n\n\ndef main(', 1)
    )
    spec = AgentSpec(
        job_id="other",
        attempt=1,
        command=[sys.executable, "-c", "print('job ran')"],
        checkpoint_uri=f"file://{tmp_path / 'ck'}",
        probe="off",
    )
    script = (
        "from providers.sim import SimProvider\n"
        "from provisioner.core.models import LaunchRequest, Market\n"
        f"sim = SimProvider({str(state_dir)!r}, mtbp_hours=None, idle_exit_s=60)\n"
        "offer = next(o for o in sim.offers(['us-east-1']) if o.zone == 'us-east-1a')\n"
        "req = LaunchRequest(job_id='other', attempt=1, offer=offer, market=Market.ON_DEMAND,\n"
        f"                    job_spec={spec.to_dict()!r})\n"
        "print(sim.launch(req).id)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=other,
        env={**os.environ, "PYTHONPATH": str(other)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    iid = done.stdout.split()[-1]
    log = Path(make(state_dir).sandbox(iid)["sandbox"]) / "agent.log"
    wait_for(lambda: "job exited" in log.read_text(), timeout=30)
    said = log.read_text()
    assert f"agent of {agent_main}" in said, said


def test_an_ended_instance_s_disk_goes_and_a_new_server_sweeps_what_a_dead_one_left(
    state_dir: Path,
) -> None:
    """A terminated or preempted instance's sandbox loses its disk (``work/``, the spec) once
    nothing of it runs; its record and console log stay, so the server still lists it. A
    server that starts removes what a dead one left: an ended instance's disk, a sandbox
    without its record, the code cache when no instance is live."""
    sim = make(state_dir)
    gone = sim.launch(request(aws_offer(sim), job="t"))
    taken = sim.launch(request(aws_offer(sim), job="p"))
    boxes = {i.id: Path(sim.sandbox(i.id)["sandbox"]) for i in (gone, taken)}
    for box in boxes.values():
        (box / "work" / "big.bin").write_bytes(b"\0" * (1 << 20))
    sim.terminate([gone.id])
    sim.preempt(taken.id, notice_s=0.5)
    for iid, box in boxes.items():
        work = box / "work"
        wait_for(lambda: not work.exists(), timeout=15)  # noqa: B023 - waited on at once
        assert sorted(p.name for p in box.iterdir()) == ["agent.log", "instance.json"]
        assert sim.get(iid).state in (InstanceState.TERMINATED, InstanceState.PREEMPTED)
    assert {i.id for i in sim.list()} == set(boxes)

    sim.shutdown_server(terminate_all=True)
    # what a server killed before its sweep leaves behind
    record = json.loads((boxes[gone.id] / "instance.json").read_text())
    record["swept"] = False
    (boxes[gone.id] / "instance.json").write_text(json.dumps(record))
    (boxes[gone.id] / "work").mkdir()
    (boxes[gone.id] / "work" / "big.bin").write_bytes(b"\0" * 1024)
    half = state_dir / "instances" / "sim-000000000000"
    (half / "work").mkdir(parents=True)
    (state_dir / "vm-cache" / "code").mkdir(parents=True)
    (state_dir / "vm-cache" / "code" / "sha256-x.tar.gz").write_bytes(b"x")
    make(state_dir).list()  # a new server starts
    assert not (boxes[gone.id] / "work").exists()
    assert not half.exists() and not (state_dir / "vm-cache").exists()
    assert (boxes[gone.id] / "agent.log").exists()


def test_a_server_ends_its_instances_and_exits_when_its_owner_is_gone(tmp_path: Path) -> None:
    """``PROVISIONER_SIM_OWNER_PID`` (the test suite sets it to itself): a server started
    under it terminates every instance and exits once that process is gone, so no server
    and no agent outlives the tests that started them."""
    from providers.sim.client import ENV_OWNER

    owner = subprocess.Popen(["sleep", "600"])
    state = tmp_path / "sim"
    script = (
        "from providers.sim import SimProvider\n"
        "from provisioner.core.models import LaunchRequest, Market\n"
        f"sim = SimProvider({str(state)!r}, mtbp_hours=None)\n"
        "offer = next(o for o in sim.offers(['us-east-1']) if o.zone == 'us-east-1a')\n"
        "print(sim.launch(LaunchRequest(job_id='o', attempt=1, offer=offer,\n"
        "                               market=Market.ON_DEMAND)).id)\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONPATH": str(REPO), ENV_OWNER: str(owner.pid)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        info = json.loads((state / "server.json").read_text())
        assert info["owner_pid"] == owner.pid
        iid = done.stdout.split()[-1]
        pgid = int(json.loads((state / "instances" / iid / "instance.json").read_text())["pid"])
        assert not group_gone(pgid) and pid_alive(info["pid"])
    finally:
        owner.kill()
        owner.wait()
    wait_for(lambda: not pid_alive(info["pid"]) or _zombie(info["pid"]), timeout=20)
    wait_for(lambda: group_gone(pgid), timeout=10)
    record = json.loads((state / "instances" / iid / "instance.json").read_text())
    assert record["state"] == "terminated"


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return True
