"""plan and the daemon agree (issue 39, defect 3 and its invariant).

For the same store state (policy, spend, work done, the time), the offers ``plan`` lists as
eligible are exactly those the daemon may launch: the predicate of
:mod:`provisioner.core.admission` (budget with the billing minimum, bid caps, residency, the
hourly budget, windows), and decide() itself launches a candidate alone exactly when plan
lists it. ``up`` refuses a job that no offer can be launched for, naming the rule and what to
change, instead of submitting one the daemon fails at once.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import parse_policy
from policies.model import Policy
from provisioner.core.admission import (
    Standing,
    launch_refusal,
    plan_daemon_disagreements,
)
from provisioner.core.billing import PER_SECOND, PER_SECOND_60S_MINIMUM, PER_STARTED_MINUTE
from provisioner.core.catalog import Catalog
from provisioner.core.decide import JobView, Launch, Observations, decide
from provisioner.core.models import Offer
from provisioner.core.planner import PlanContext, plan_offers
from provisioner.core.views import CHANGEOVER_H

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
BILLING = {"aws": PER_SECOND_60S_MINIMUM, "azure": PER_STARTED_MINUTE, "alibaba": PER_SECOND}
REGIONS = [
    ("aws", "us-east-1"),
    ("aws", "eu-west-1"),
    ("azure", "westeurope"),
    ("alibaba", "eu-central-1"),
    ("aws", "nowhere-9"),  # unknown: outside any jurisdiction rule
]
GPUS = [("T4", "g4dn.xlarge"), ("A10G", "g5.xlarge"), ("A100", "p4d.xlarge")]


def maybe(s: st.SearchStrategy[float]) -> st.SearchStrategy[float | None]:
    return st.one_of(st.none(), s)


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    doc: dict[str, object] = {
        "name": "agree",
        "resources": {"gpus": ["T4", "A10G", "A100"], "gpu_count": 1},
        "job": {"command": ["true"], "reference_gpu": "A10G"},
        "market": draw(st.sampled_from(["spot", "on-demand", "spot-then-on-demand"])),
        "residency": {"allow": draw(st.sampled_from([[], ["EU"], ["US"]]))},
    }
    hours = draw(maybe(st.floats(0.0005, 5.0)))
    if hours is not None:
        doc["job"] = {**doc["job"], "compute_hours": hours}  # type: ignore[dict-item]
    cap = draw(maybe(st.floats(0.1, 3.0)))
    if cap is not None:
        doc["bid_cap"] = {"max_spot_price_per_hour": cap}
    budget = {
        k: v
        for k, v in {
            "max_price_per_hour": draw(maybe(st.floats(0.1, 4.0))),
            "max_total": draw(maybe(st.floats(0.0005, 20.0))),
            "on_exhausted": draw(st.sampled_from(["stop", "pause"])),
        }.items()
        if v is not None
    }
    doc["budget"] = budget
    if draw(st.booleans()):  # a window: 09:00-17:00 on weekdays
        doc["windows"] = [{"cron": "0 9 * * 1-5", "duration": "8h"}]
    return Policy.model_validate(doc)


@st.composite
def catalogs(draw: st.DrawFn) -> list[Offer]:
    out = []
    for i, (provider, region) in enumerate(REGIONS):
        for gpu, itype in draw(st.lists(st.sampled_from(GPUS), min_size=1, max_size=2)):
            od = draw(maybe(st.floats(0.05, 4.0)))
            spot = draw(maybe(st.floats(0.01, 3.0)))
            if od is None and spot is None:
                od = 1.0
            out.append(Offer(provider, region, f"{region}-z{i}", itype, gpu, 1, 8, 32, od, spot))
    return out


def job_view(policy: Policy, spent: float, done: float, step_s: float) -> JobView:
    total = policy.job.compute_hours
    return JobView.new(
        "j1",
        policy,
        T0,
        deadline=None,
        spent_usd=spent,
        work_done_h=0.0 if total is None else total * done,
        changeover_h=CHANGEOVER_H,
        step_h=step_s / 3600.0,
        billing=BILLING,
    )


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=policies(),
    offers=catalogs(),
    spent_share=st.floats(0.0, 1.2),
    done=st.floats(0.0, 0.99),  # all done: decide() finishes the job, plan has no say
    step_s=st.sampled_from([1.0, 5.0, 30.0, 90.0]),
    hours_on=st.floats(0.0, 24 * 7),
)
def test_plan_s_eligible_set_is_the_daemon_s_launchable_set(
    policy: Policy,
    offers: list[Offer],
    spent_share: float,
    done: float,
    step_s: float,
    hours_on: float,
) -> None:
    now = T0 + timedelta(hours=hours_on)
    spent = spent_share * (policy.budget.max_total or 1.0)
    job = job_view(policy, spent, done, step_s)
    catalog = Catalog.from_offers(offers)
    standing = Standing.of(job)
    plan = plan_offers(
        policy, catalog, PlanContext(now=now, standing=standing), top=None, with_rows=True
    )
    # the daemon's candidates: its own plan (nothing judged but what only the planner judges)
    daemon = plan_offers(policy, catalog, PlanContext(now=now, pacing=False), top=None)
    launchable = {
        (p.offer.zone, p.offer.instance_type, p.market, p.price_per_hour)
        for p in daemon.placements
        if launch_refusal(policy, p, standing, now) is None
    }
    eligible = {
        (p.offer.zone, p.offer.instance_type, p.market, p.price_per_hour) for p in plan.placements
    }
    assert eligible == launchable
    assert plan_daemon_disagreements(job, plan.rows, now) == []
    # and decide() itself: a candidate alone is launched exactly when plan lists it
    for p in daemon.placements[:6]:
        out = decide(job, Observations(candidates=(p,)), now)
        key = (
            p.offer.zone,
            p.offer.instance_type,
            p.market,
            p.price_per_hour,
        )  # a catalog may list one type twice
        assert any(isinstance(a, Launch) for a in out) is (key in eligible), (key, out)


def test_the_invariant_names_a_disagreement() -> None:
    """The invariant itself: rows the daemon would judge otherwise are reported."""
    pol = parse_policy("name: t\nmarket: spot\nbudget: {max_total: 0.004}\n")
    o = Offer("aws", "eu-south-2", "eu-south-2b", "g6.xlarge", "L4", 1, 4, 16, 0.9, 0.30)
    plan = plan_offers(pol, Catalog.from_offers([o]), PlanContext(now=T0), with_rows=True)
    assert plan.placements  # planned without billing rules: per second, $0.30/h fits
    job = job_view(pol, 0.0, 0.0, 5.0)  # the daemon bills it as AWS: 60 s, $0.005
    (bad,) = plan_daemon_disagreements(job, plan.rows, T0)
    assert "plan lists it eligible; the daemon refuses it (budget_total" in bad


# -- the repro: compute_hours 0.001, max_total 0.003 ---------------------------------

REPRO = """name: tiny
job:
  command: ["python", "-c", "print(1)"]
  compute_hours: 0.001
resources:
  gpu_count: 1
market: spot
budget:
  max_total: 0.003
  on_exhausted: stop
checkpoint:
  uri: file://{ck}
"""


def test_plan_lists_nothing_the_daemon_would_fail_and_up_refuses(tmp_path: Path) -> None:
    from provisioner.planning import plan

    path = tmp_path / "tiny.yaml"
    path.write_text(REPRO.format(ck=tmp_path / "ck"))
    got = plan(str(path), top=3, estimate=False)
    assert got.placements == [] and got.rejected["budget_total"] > 0
    # the daemon's first pass on a job of this policy: the same answer
    pol = parse_policy(path.read_text())
    daemon = plan_offers(
        pol,
        __import__("provisioner.catalog_files", fromlist=["x"]).builtin_catalog(),
        PlanContext(now=T0, pacing=False),
        top=50,
    )
    from providers.facts import CLOUD_BILLING

    job = JobView.new("j1", pol, T0, billing=CLOUD_BILLING)  # as the daemon fills it
    out = decide(job, Observations(candidates=tuple(daemon.placements)), T0)
    assert not any(isinstance(a, Launch) for a in out)
    # `up --detach` refuses it before anything is written, saying which rule and what to change
    import os

    store = tmp_path / "s.db"
    repo = str(Path(__file__).resolve().parents[1].parent)
    env = {**os.environ, "HOME": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
    env_py = [sys.executable, "-m", "provisioner", "up", "--detach", "--policy", str(path)]
    done = subprocess.run(
        [*env_py, "--store", f"sqlite:///{store}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 3, done.stderr[-2000:]
    assert "budget.max_total $0.003 cannot pay for any launch" in done.stderr
    assert "raise it to at least $" in done.stderr
    assert not store.exists()
