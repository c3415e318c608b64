"""Money and residency hold on every launch, across random preemption sequences.

The reconciler, decide() and the real AWS adapter run against moto's server; hypothesis draws
the policy (residency, bid caps, hourly budget, market), the prices in three regions, and a
sequence of events (passes, preemptions of the running instance, capacity errors on the next
launch, time passing). After every pass, every launch the store recorded and every
RunInstances request on the wire is checked against the policy, and no job ever has two live
instances but during a switch made before break (the newer replacing the older), nor three.
"""

from __future__ import annotations

import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("moto")

CONTRACT = Path(__file__).resolve().parents[1] / "contract"
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))

from harness_aws import ACCESS_KEY, SECRET, make_harness  # noqa: E402

from policies.model import Policy  # noqa: E402
from providers.aws import AWSProvider  # noqa: E402
from providers.base import RetryPolicy  # noqa: E402
from provisioner.api import submit  # noqa: E402
from provisioner.control.reconciler import Reconciler  # noqa: E402
from provisioner.control.store import Store  # noqa: E402
from provisioner.core.catalog import Catalog  # noqa: E402
from provisioner.core.models import TAG_ATTEMPT, TAG_JOB, Offer  # noqa: E402
from provisioner.core.regions import regions  # noqa: E402
from provisioner.preflight import NothingEligible, check_submission  # noqa: E402

#: what a VM installs (a wheel of this project: PyPI's `provisioner` is another one)
WHEEL = "https://pkgs.example.com/provisioner-0.1.0-py3-none-any.whl"
REGIONS = ("us-east-1", "eu-west-1", "ap-northeast-1")  # US, EU/EEA/GDPR, JP (GDPR-adequate)
ZONES = [f"{r}{z}" for r in REGIONS for z in "ab"]


@st.composite
def policies(draw: st.DrawFn) -> dict[str, Any]:
    bid = {
        k: v
        for k, v in {
            "max_spot_price_per_hour": draw(st.one_of(st.none(), st.floats(0.1, 3.0))),
            "max_spot_price_per_gpu_hour": draw(st.one_of(st.none(), st.floats(0.1, 3.0))),
            "max_fraction_of_on_demand": draw(st.one_of(st.none(), st.floats(0.1, 1.0))),
        }.items()
        if v is not None
    }
    budget = {"max_price_per_hour": draw(st.floats(0.2, 4.0))}
    return {
        "name": "rules",
        "job": {"command": ["true"], "compute_hours": draw(st.sampled_from([None, 5.0]))},
        "market": draw(st.sampled_from(["spot", "on-demand", "spot-then-on-demand"])),
        "residency": {
            "allow": draw(st.sampled_from([[], ["EU"], ["US"], ["GDPR"], ["JP"], ["EEA", "US"]]))
        },
        "bid_cap": bid,
        "budget": budget,
        "restart": {"max_restarts": 50, "zone_cooldown": "10m"},
        "checkpoint": {"uri": "memory://rules", "shared": True},
    }


@st.composite
def catalogs(draw: st.DrawFn) -> list[Offer]:
    out = []
    for zone in ZONES:
        od = draw(st.floats(0.5, 3.0))
        spot = draw(
            st.one_of(st.none(), st.floats(0.05, 1.0).map(lambda f, od=od: round(f * od, 4)))
        )
        out.append(Offer("aws", zone[:-1], zone, "g5.xlarge", "A10G", 1, 4, 16, round(od, 4), spot))
    return out


events = st.lists(
    st.sampled_from(["pass", "pass", "preempt", "capacity", "later"]), min_size=4, max_size=14
)


def check_launch(policy: Policy, attempt: Any, offer: Offer | None) -> None:
    reg = regions()[("aws", attempt.region)]
    allow = set(policy.residency.allow)
    if allow:
        assert reg.in_any(allow), f"launch in {attempt.region} outside {allow}"
    assert attempt.price_per_hour <= policy.budget.max_price_per_hour + 1e-9  # type: ignore[operator]
    if attempt.market == "spot":
        assert policy.allows_spot
        bid = policy.bid_cap
        if bid.max_spot_price_per_hour is not None:
            assert attempt.price_per_hour <= bid.max_spot_price_per_hour + 1e-9
            assert (
                attempt.bid_cap_per_hour is not None
                and attempt.bid_cap_per_hour <= bid.max_spot_price_per_hour + 1e-9
            )
        if bid.max_spot_price_per_gpu_hour is not None:
            assert (
                attempt.price_per_hour <= bid.max_spot_price_per_gpu_hour * attempt.gpu_count + 1e-9
            )
        if bid.max_fraction_of_on_demand is not None:
            assert offer is not None and offer.price is not None
            assert attempt.price_per_hour <= bid.max_fraction_of_on_demand * offer.price + 1e-9
    else:
        assert policy.allows_on_demand


def check_live(store: Store, job_id: str, live: list[Any]) -> None:
    """One live instance per job; two only during a switch made before break, the newer
    attempt launched to replace the older (its launch event names the one it replaces; the
    older is stopped once the newer has taken over); never three (the daemon's own
    invariant, ``check_live_attempts``: one instance each side of a handover)."""
    assert len(live) <= 2, f"more than two live instances for one job: {live}"
    if len(live) < 2:
        return
    old, new = sorted(live, key=lambda i: int(i.tags[TAG_ATTEMPT]))
    n = int(new.tags[TAG_ATTEMPT])
    launches = [e.message for e in store.events(job_id) if e.kind == "launch"]
    said = [m for m in launches if m.startswith(f"attempt {n}:")]
    assert said and f"make before break: {old.id} runs until attempt {n} takes over" in said[-1], (
        f"two live instances and no handover declared between them: {live}; launches: {said}"
    )


def preempt(instance_id: str, region: str) -> None:
    from moto.backends import get_backend
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models.instances import StateReason

    inst = get_backend("ec2")[DEFAULT_ACCOUNT_ID][region].get_instance(instance_id)
    inst.terminate()
    inst.state_reason = StateReason(
        "Server.SpotInstanceTermination: Spot instance termination",
        "Server.SpotInstanceTermination",
    )


# 25 drawn worlds, each a policy submitted and a reconciler driven against moto: 45 s alone,
# over the suite's 300 s at the end of a loaded 2-core CI run (the slow tests finish together)
@pytest.mark.timeout(900)
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(doc=policies(), offers=catalogs(), seq=events)
def test_every_launch_keeps_the_rules(
    doc: dict[str, Any], offers: list[Offer], seq: list[str]
) -> None:
    policy = Policy.model_validate(doc)
    by_zone = {o.zone: o for o in offers}
    clock = {"now": datetime.now(UTC)}
    with make_harness() as harness, tempfile.TemporaryDirectory() as tmp:
        image = harness._moto_image()
        provider = AWSProvider(
            region=REGIONS[0],
            regions=REGIONS,
            endpoint=harness.endpoint,
            credentials={"aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET},
            image=image,
            retry=RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02),
        )
        for r in REGIONS:
            provider.client.ec2(r).meta.events.register("before-send.ec2", harness._before_send)
        store = Store(f"sqlite:///{tmp}/s.db")
        path = Path(tmp) / "p.yaml"
        path.write_text(yaml.safe_dump(doc))
        options = {"package_spec": f"provisioner[aws] @ {WHEEL}"}
        catalog = Catalog.from_offers(offers)
        # the submission's check judges this world's catalog, the one the daemon runs on (the
        # built-in one refuses an on-demand job under a low hourly budget, whatever is drawn)
        try:
            check_submission(policy, str(path), "aws", options, catalog)
        except NothingEligible as exc:
            # refused before anything is written: no job, and nothing ever launched
            assert not exc.plan.placements
            assert store.jobs() == [] and harness.launch_requests() == []
            return
        _, job_id = submit(
            path,
            provider="aws",
            provider_defaults=False,
            provider_options=options,
            store=store,
            now=clock["now"],
            check=False,
        )
        rec = Reconciler(
            store,
            catalog=catalog,
            provider_factory=lambda _n, _o: provider,
            clock=lambda: clock["now"],
        )
        try:
            for ev in seq:
                if ev == "preempt":
                    live = [i for i in provider.list({TAG_JOB: job_id}) if i.state.alive]
                    for inst in live:
                        preempt(inst.id, inst.region)
                elif ev == "capacity":
                    harness.inject_error("InsufficientInstanceCapacity")
                elif ev == "later":
                    clock["now"] += timedelta(minutes=11)
                rec.run_pass()
                live = [i for i in provider.list({TAG_JOB: job_id}) if i.state.alive]
                check_live(store, job_id, live)
                for a in store.attempts(job_id):
                    if a.state != "failed" or a.instance_id:
                        check_launch(policy, a, by_zone.get(a.zone))
            # a switch left in flight ends: once the newer has taken over, the older goes
            live = [i for i in provider.list({TAG_JOB: job_id}) if i.state.alive]
            if len(live) == 2:
                older = min(live, key=lambda i: int(i.tags[TAG_ATTEMPT])).id
                for _ in range(4):
                    clock["now"] += timedelta(minutes=11)
                    rec.run_pass()
                    live = [i for i in provider.list({TAG_JOB: job_id}) if i.state.alive]
                    check_live(store, job_id, live)
                    if older not in {i.id for i in live}:
                        break
                assert older not in {i.id for i in live}, f"{older} billed on after the handover"
            for req in harness.launch_requests():
                zone = req.get("Placement.AvailabilityZone", "")
                offer = by_zone.get(zone)
                assert offer is not None, f"launch in a zone outside the catalog: {zone}"
                allow = set(policy.residency.allow)
                if allow:
                    assert regions()[("aws", offer.region)].in_any(allow)
                if req.get("InstanceMarketOptions.MarketType") == "spot":
                    # the bid sent (bid_cap.enforce: cloud), else the price launched at: both
                    # within every cap of the policy
                    sent = req.get("InstanceMarketOptions.SpotOptions.MaxPrice")
                    assert offer.spot_price is not None
                    cap = offer.spot_price if sent is None else float(sent)
                    assert offer.spot_price <= cap + 1e-4
                    bid = policy.bid_cap
                    for limit in (
                        bid.max_spot_price_per_hour,
                        None
                        if bid.max_spot_price_per_gpu_hour is None
                        else bid.max_spot_price_per_gpu_hour * offer.gpu_count,
                        None
                        if bid.max_fraction_of_on_demand is None or offer.price is None
                        else bid.max_fraction_of_on_demand * offer.price,
                    ):
                        if limit is not None:
                            assert cap <= limit + 1e-4, f"{cap} sent or paid above the cap {limit}"
                else:
                    assert policy.allows_on_demand
        finally:
            rec.close()
            store.close()
            provider.close()
