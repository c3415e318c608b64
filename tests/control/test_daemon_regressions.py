"""Defects a user found in the daemon's control loop, one test each (numbered as found),
through the daemon's reconciler on moto's EC2 server (the real AWS adapter).

1. a job on on-demand comes back to spot (the daemon fills ``spot_up_since``);
2. one changeover constant for the daemon and the simulator;
3. the step decide() is told is the real pass interval (``up``: 1 s);
4. prices stored after the reconciler was built reach planning;
6. each cloud's billing rule (Azure per started minute, Alibaba per second, no minimum);
7. log records carry the job's fields; failpoints are injected, not read from the environment;
8a. a terminated attempt stops being billed when the job switches market;
8b. a job whose budget cannot pay for the work fails, saying so.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from provisioner.core.views import CHANGEOVER_H

pytest.importorskip("moto")

CONTRACT = Path(__file__).resolve().parents[1] / "contract"
REPO = Path(__file__).resolve().parents[2]
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))

from harness_aws import ACCESS_KEY, SECRET, make_harness  # noqa: E402

from providers.aws import AWSProvider  # noqa: E402
from providers.base import PriceQuote, RetryPolicy  # noqa: E402
from provisioner.api import submit  # noqa: E402
from provisioner.control.reconciler import Reconciler  # noqa: E402
from provisioner.control.store import Store  # noqa: E402
from provisioner.core.catalog import Catalog  # noqa: E402
from provisioner.core.models import TAG_JOB, Offer  # noqa: E402

FAST = RetryPolicy(attempts=2, base_delay=0.0, max_delay=0.0)
OFFER = Offer("aws", "us-east-1", "us-east-1a", "g5.xlarge", "A10G", 1, 4, 16, 1.0, 0.3)
OFFER_B = Offer("aws", "us-east-1", "us-east-1b", "g5.xlarge", "A10G", 1, 4, 16, 1.0, None)


@dataclass
class World:
    store: Store
    provider: AWSProvider
    harness: Any
    clock: dict[str, datetime]
    tmp: Path

    def job(self, policy: str) -> str:
        path = self.tmp / "p.yaml"
        path.write_text(policy)
        options = {
            "package_spec": "provisioner[aws] @ https://pkgs.example.com/provisioner-0.1.0-py3-none-any.whl"
        }
        _, job_id = submit(
            path,
            provider="aws",
            provider_defaults=False,
            provider_options=options,
            store=self.store,
            now=self.clock["now"],
            check=False,  # planned on this world's one-offer catalog, not the built-in one
        )
        return job_id

    def reconciler(self, catalog: Catalog | None = None, **kw: Any) -> Reconciler:
        return Reconciler(
            self.store,
            catalog=catalog if catalog is not None else Catalog.from_offers([OFFER]),
            provider_factory=lambda _n, _o: self.provider,
            clock=lambda: self.clock["now"],
            **kw,
        )

    def later(self, **delta: float) -> None:
        self.clock["now"] += timedelta(**delta)

    def live(self, job_id: str) -> list[Any]:
        return [i for i in self.provider.list({TAG_JOB: job_id}) if i.state.alive]


@contextmanager
def aws_world() -> Iterator[World]:
    with make_harness() as harness, tempfile.TemporaryDirectory() as tmp:
        provider = AWSProvider(
            region="us-east-1",
            regions=("us-east-1",),
            endpoint=harness.endpoint,
            credentials={"aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET},
            image=harness._moto_image(),
            retry=FAST,
        )
        provider.client.ec2("us-east-1").meta.events.register(
            "before-send.ec2", harness._before_send
        )
        store = Store(f"sqlite:///{tmp}/s.db")
        try:
            yield World(store, provider, harness, {"now": datetime.now(UTC)}, Path(tmp))
        finally:
            store.close()
            provider.close()


def policy(**parts: str) -> str:
    base = {
        "name": "defects",
        "resources": "{gpus: [A10G], gpu_count: 1}",
        "market": "spot-then-on-demand",
        "checkpoint": "{uri: 'memory://defects', shared: true}",
    }
    base.update(parts)
    return "".join(f"{k}: {v}\n" for k, v in base.items())


# -- 1: back to spot ------------------------------------------------------------------------


def test_1_a_daemon_job_on_on_demand_returns_to_spot() -> None:
    """No deadline, spot back for an hour after the capacity error that sent the job to
    on-demand: the daemon terminates on-demand and launches spot (it used to say "staying on
    on-demand" at every pass, for ever)."""
    with aws_world() as w:
        job_id = w.job(policy(bid_cap="{max_spot_price_per_hour: 0.5}"))
        rec = w.reconciler(Catalog.from_offers([OFFER, OFFER_B]))
        w.harness.inject_error("InsufficientInstanceCapacity")
        rec.run_pass()
        first = w.store.attempts(job_id)
        assert [a.market for a in first] == ["spot", "on-demand"], first
        assert first[-1].state == "running"
        w.later(hours=1)
        rec.run_pass()
        attempts = w.store.attempts(job_id)
        assert attempts[-1].market == "spot" and attempts[-1].state == "running", attempts
        # made before break: on-demand works on until spot has taken over (its changeover)
        assert attempts[1].state == "running"
        w.later(hours=CHANGEOVER_H)
        rec.run_pass()
        attempts = w.store.attempts(job_id)
        assert attempts[1].state == "ended" and attempts[1].end_reason.startswith("handed over")
        assert [i.market.value for i in w.live(job_id)] == ["spot"]
        rec.close()


# -- 2: one changeover ----------------------------------------------------------------------


def test_2_the_daemon_and_the_simulator_assume_the_same_changeover() -> None:
    from provisioner.control import inputs
    from provisioner.simulate.run import DEFAULT_CHANGEOVER_H

    assert inputs.CHANGEOVER_H == DEFAULT_CHANGEOVER_H


# -- 3: the real pass interval --------------------------------------------------------------


def test_3_up_tells_decide_its_one_second_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.cli.up_cmd import UP_PASS_INTERVAL_S, supervising_reconciler
    from provisioner.core import decide as d

    told: list[float] = []
    real = d.decide

    def spy(job: Any, obs: Any, now: Any, **kw: Any) -> Any:
        told.append(job.step_h)
        return real(job, obs, now, **kw)

    monkeypatch.setattr(d, "decide", spy)
    with aws_world() as w:
        job_id = w.job(policy())
        rec = supervising_reconciler(w.store, job_id)
        rec.base_catalog = Catalog.from_offers([OFFER])
        rec.provider_factory = lambda _n, _o: w.provider
        rec.refresh_prices()
        report = rec.run_pass()
        rec.close()
    assert UP_PASS_INTERVAL_S == 1.0
    assert told and all(h == pytest.approx(1.0 / 3600.0) for h in told), told
    assert report.step_s == 1.0


# -- 4: refreshed prices --------------------------------------------------------------------


def test_4_prices_stored_after_the_reconciler_was_built_reach_planning() -> None:
    """The built-in catalog's g5.xlarge spot prices are above the bid cap: nothing launches;
    a refresh then stores a price under it, and the next pass of the same reconciler
    launches at that price (the prices used to be read once, when it was built)."""
    doc = policy(
        market="spot",
        bid_cap="{max_spot_price_per_hour: 0.05}",
        residency="{allow_regions: [us-east-1]}",
    )
    with aws_world() as w:
        job_id = w.job(doc)
        rec = Reconciler(
            w.store,
            provider_factory=lambda _n, _o: w.provider,
            clock=lambda: w.clock["now"],
        )
        rec.run_pass()
        assert w.store.attempts(job_id) == []
        w.store.save_prices(
            [PriceQuote("aws", "us-east-1", "", "g5.xlarge", 0.04, 1.006, w.clock["now"])]
        )
        w.later(minutes=1)
        rec.run_pass()
        attempts = w.store.attempts(job_id)
        assert len(attempts) == 1 and attempts[0].price_per_hour == pytest.approx(0.04)
        assert attempts[0].state == "running"
        rec.close()


# -- 6: billing -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cloud", "seconds", "usd"),
    [
        ("azure", 61, 3.6 * 120 / 3600),  # per started minute
        ("alibaba", 10, 3.6 * 10 / 3600),  # per second, no minimum
        ("tencent", 10, 3.6 * 10 / 3600),
        ("aws", 10, 3.6 * 60 / 3600),  # per second, 60 s minimum
    ],
)
def test_6_an_attempt_is_billed_by_its_cloud_s_rule(cloud: str, seconds: int, usd: float) -> None:
    from provisioner.control.reconciler import billed_cost

    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert billed_cost(cloud, 3.6, start, start + timedelta(seconds=seconds)) == pytest.approx(usd)


# -- 7: log fields and failpoints -----------------------------------------------------------


def test_7_a_job_pass_logs_with_the_job_s_fields(caplog: pytest.LogCaptureFixture) -> None:
    import json

    from provisioner.logs import JSONFormatter

    with aws_world() as w:
        job_id = w.job(policy(market="on-demand"))
        rec = w.reconciler()
        with caplog.at_level(logging.INFO, logger="provisioner"):
            rec.run_pass()
        rec.close()
    mine = [r for r in caplog.records if r.name.startswith("provisioner.control")]
    launch = [r for r in mine if "attempt 1:" in r.getMessage()]
    assert launch, [r.getMessage() for r in mine]
    doc = json.loads(JSONFormatter().format(launch[0]))
    assert doc["job"] == job_id and doc["attempt"] == 1 and doc["provider"] == "aws"
    assert doc["instance"] and doc["zone"] == "us-east-1a" and doc["event"] == "launch"


def test_7_failpoints_are_injected_not_read_from_the_environment() -> None:
    """With ``PROVISIONER_CRASH_AT`` set, the package's own entry points do not crash (the
    old ``crash_point`` exited 137 right after writing the attempt row); a reconciler given
    failpoints reports each one it passes."""
    with aws_world() as w:
        job_id = w.job(policy(market="on-demand"))
        code = (
            "import sys; sys.path.insert(0, 'tests/contract');"
            "from datetime import UTC, datetime;"
            "from providers.aws import AWSProvider; from providers.base import RetryPolicy;"
            "from provisioner.control.reconciler import Reconciler;"
            "from provisioner.control.store import Store;"
            "from provisioner.core.catalog import Catalog; from provisioner.core.models import Offer;"
            f"p = AWSProvider(region='us-east-1', regions=('us-east-1',), endpoint={w.harness.endpoint!r},"
            f" credentials={{'aws_access_key_id': {ACCESS_KEY!r}, 'aws_secret_access_key': {SECRET!r}}},"
            f" image={w.harness._moto_image()!r}, retry=RetryPolicy(attempts=2, base_delay=0, max_delay=0));"
            f"s = Store('sqlite:///{w.tmp}/s.db');"
            f"r = Reconciler(s, catalog=Catalog.from_offers([{OFFER!r}]), provider_factory=lambda n, o: p);"
            "r.run_pass(); r.close()"
        )
        env = {"PROVISIONER_CRASH_AT": "any", "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
        res = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr[-2000:]
        assert [a.state for a in w.store.attempts(job_id)] == ["running"]

        from provisioner.control.failpoints import CRASH_POINTS, Failpoints

        hits: list[str] = []

        class Record(Failpoints):
            def hit(self, name: str) -> None:
                hits.append(name)

        other = w.job(policy(market="on-demand", name="defects-2"))
        rec = w.reconciler(failpoints=Record(), job_ids=[other])
        rec.run_pass()
        rec.close()
    assert hits[:3] == ["after-attempt-row", "after-launch-call", "after-instance-record"]
    assert set(hits) <= set(CRASH_POINTS)


# -- 8a: no bill after a switch -------------------------------------------------------------


def test_8a_a_terminated_attempt_is_no_longer_billed() -> None:
    """Spot for 3 h without progress, then the deadline forces on-demand: the spot attempt
    is terminated, ends, and costs its 3 h; an hour on, the job has spent 3 h of spot and 1 h
    of on-demand (the terminated attempt used to be billed on and on)."""
    with aws_world() as w:
        job_id = w.job(
            policy(
                job="{command: ['true'], compute_hours: 5, reference_gpu: A10G}",
                deadline="8h",
                bid_cap="{max_spot_price_per_hour: 0.5}",
            )
        )
        rec = w.reconciler()
        rec.run_pass()
        assert [a.market for a in w.store.attempts(job_id)] == ["spot"]
        w.later(hours=3)
        rec.run_pass()
        attempts = w.store.attempts(job_id)
        assert [a.market for a in attempts] == ["spot", "on-demand"], attempts
        # made before break: spot works on (and bills) until on-demand has taken over
        assert attempts[0].state == "running"
        w.later(hours=CHANGEOVER_H)
        rec.run_pass()
        attempts = w.store.attempts(job_id)
        assert attempts[0].state == "ended"
        spot_h = 3 + CHANGEOVER_H
        assert attempts[0].cost_usd == pytest.approx(spot_h * 0.3, rel=1e-3)
        w.later(hours=1)
        rec.run_pass()
        job = w.store.job(job_id)
        assert job is not None
        od = w.store.attempts(job_id)[1]
        assert od.launched_at is not None  # moto's own clock: the test's runs ahead of it
        od_h = (w.clock["now"] - od.launched_at).total_seconds() / 3600.0
        assert job.spent_usd == pytest.approx(spot_h * 0.3 + od_h * 1.0, rel=1e-3)
        rec.close()


# -- 8b: a budget that cannot pay fails the job ---------------------------------------------


def test_8b_a_job_whose_budget_cannot_pay_fails_with_the_reason() -> None:
    """10 compute hours at $1/h on-demand against a $5 budget: the job fails at once, saying
    the budget cannot pay (the planner used to drop every offer, and the job waited for
    ever)."""
    doc = policy(
        market="on-demand", job="{command: ['true'], compute_hours: 10}", budget="{max_total: 5}"
    )
    with aws_world() as w:
        job_id = w.job(doc)
        rec = w.reconciler()
        rec.run_pass()
        w.later(minutes=1)
        rec.run_pass()
        rec.close()
        job = w.store.job(job_id)
        assert job is not None
        assert job.state == "failed", (job.state, job.reason)
        assert "budget" in job.reason
        assert w.store.attempts(job_id) == []
        assert w.live(job_id) == []


# -- 9: a cooldown ending now is over --------------------------------------------------------


def test_9_a_zone_cooldown_ending_exactly_now_is_over() -> None:
    """A zone cooldown is over at its end (``views.cooldown_over``): the store no longer holds
    it, the pass no longer hands it to the planner (which kept the zone out) nor to decide(),
    as the simulator (and decide() itself) take it. The equivalence test's budget scenario
    failed a step late on this."""
    from policies import parse_policy
    from provisioner.control.jobpass.state import PassEnv, PassState
    from provisioner.control.records import PassBatch
    from provisioner.core.views import cooldown_over, cooldowns_in_force

    a, b = ("aws", "us-east-1a"), ("aws", "us-east-1b")
    with aws_world() as w:
        jid = w.job(policy(restart="{zone_cooldown: 30m}"))
        now = w.clock["now"]
        later = now + timedelta(seconds=1)
        assert cooldown_over(now, now) and not cooldown_over(later, now)
        assert cooldowns_in_force({a: now, b: later}, now) == {b: later}
        w.store.cool_down(jid, *a, now, "preempted")
        w.store.cool_down(jid, *b, later, "preempted")
        assert w.store.cooldowns(jid, now) == {b: later}
        assert w.store.cooldowns_for([jid], now) == {jid: {b: later}}
        job = w.store.job(jid)
        assert job is not None
        rec = w.reconciler(catalog=Catalog.from_offers([OFFER, OFFER_B]))
        try:
            env = PassEnv(
                w.store, "t", timedelta(minutes=1), lambda: now, rec.plan_for, PassBatch(), None
            )
            held = {a: now, b: later}  # as the reconciler hands them in, read a moment ago
            run = PassState(env, job, parse_policy(job.policy_yaml), w.provider, [], now,
                            cooled=held)  # fmt: skip
            assert run.cooldowns() == {b: later}
            plan = rec.plan_for(job, run.policy, frozenset(run.cooldowns()), now)
            zones = {p.offer.zone for p in plan.placements}
            assert "us-east-1a" in zones, plan.rejected
        finally:
            rec.close()
