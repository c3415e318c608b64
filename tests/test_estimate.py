"""The interruption-aware estimate (provisioner/simulate/estimate.py) and its place in `plan`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from policies.loader import load_policy
from policies.model import Policy
from provisioner.cli import cli
from provisioner.core.billing import PER_STARTED_MINUTE, Billing
from provisioner.core.models import CostEstimate, Market, Offer, Placement
from provisioner.core.strategies import get_strategy
from provisioner.core.views import CHANGEOVER_H
from provisioner.simulate import estimate as est
from provisioner.simulate.replay import PerWindow, replay
from provisioner.simulate.scenario import Scenario

REPO = Path(__file__).resolve().parents[1]
FINETUNE = str(REPO / "policies" / "spot-finetune.yaml")
RULES = {"aws": est.CloudRule(Billing(1, 60), 0.0, 120.0)}


def _placement(
    band: str = ">20%", *, market: Market = Market.SPOT, hours: float = 12.0, zone: str = "z1"
) -> Placement:
    o = Offer("aws", "us-east-1", zone, "p3.2xlarge", "V100", 1, 8, 61.0, 3.06, 0.97, "", band)
    price = 0.97 if market is Market.SPOT else 3.06
    return Placement(o, market, price, None, 0.0, est_hours=hours, est_job_cost=price * hours)


def _policy(tmp_path: Path, market: str = "spot-then-on-demand") -> Policy:
    p = tmp_path / "p.yaml"
    p.write_text(f"name: t\njob:\n  compute_hours: 12\nmarket: {market}\n")
    return load_policy(p)


def _one(p: Placement, policy: Policy, horizon: float | None, **kw: object) -> CostEstimate:
    out = est.estimate_placements([p], policy, horizon, rules=RULES, **kw)  # type: ignore[arg-type]
    assert out[0].estimate is not None
    return out[0].estimate


def test_parts_add_up(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    e = _one(_placement(), policy, 15.0)
    assert e.mean_usd == pytest.approx(e.spot_usd + e.on_demand_usd)
    assert e.mean_usd == pytest.approx(0.97 * e.spot_h + 3.06 * e.on_demand_h)
    assert e.changeover_h == pytest.approx((e.restarts + 1) * CHANGEOVER_H)
    # the billed hours hold the work, the changeovers and the lost work, and no more (less
    # where the work ends on an instance handing over, a changeover cut short)
    billed = e.spot_h + e.on_demand_h
    assert 12.0 + e.lost_work_h - 1e-6 <= billed <= 12.0 + e.changeover_h + e.lost_work_h + 1e-6
    assert e.samples == est.SAMPLES and e.prior == "band >20%"


def test_on_demand_placement_is_exact_under_the_billing_rule(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    p = _placement(market=Market.ON_DEMAND, hours=1.01)
    rules = {"aws": est.CloudRule(PER_STARTED_MINUTE)}
    e = est.estimate_placements([p], policy, 10.0, rules=rules)[0].estimate
    assert e is not None
    billed_h = PER_STARTED_MINUTE.billed_seconds((1.01 + CHANGEOVER_H) * 3600) / 3600
    assert e.mean_usd == e.p10_usd == e.p90_usd == pytest.approx(3.06 * billed_h)
    assert e.restarts == 0 and e.spot_h == 0 and e.p_miss_deadline == 0.0


def test_more_interruption_risk_means_more_restarts_and_cost(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    calm = _one(_placement("<5%"), policy, 15.0)
    rough = _one(_placement(">20%"), policy, 15.0)
    assert rough.restarts > calm.restarts
    assert rough.mean_usd > calm.mean_usd
    assert rough.on_demand_h > calm.on_demand_h  # the fallback carries more of the work


@pytest.mark.parametrize("band", ["<5%", "10-15%", ">20%", ""])
def test_p10_mean_p90_in_order(tmp_path: Path, band: str) -> None:
    e = _one(_placement(band), _policy(tmp_path), 15.0)
    assert e.p10_usd <= e.mean_usd <= e.p90_usd
    assert e.p10_usd > 0


def test_deadline_miss_rises_as_the_deadline_tightens(tmp_path: Path) -> None:
    spot_only = _policy(tmp_path, "spot")
    misses = [_one(_placement(), spot_only, h).p_miss_deadline for h in (40.0, 20.0, 14.0)]
    assert all(m is not None for m in misses)
    assert misses == sorted(misses)  # type: ignore[type-var]
    assert misses[-1] > misses[0]  # type: ignore[operator]
    # with the on-demand fallback the safety net meets any deadline on-demand can meet...
    fallback = _policy(tmp_path)
    assert _one(_placement(), fallback, 15.0).p_miss_deadline == 0.0
    # ...and none it cannot
    assert _one(_placement(), fallback, 10.0).p_miss_deadline == 1.0
    assert _one(_placement(), fallback, None).p_miss_deadline is None


def test_alibaba_protection_period_cuts_restarts(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    p = _placement(">20%")
    bare = est.estimate_placements([p], policy, 15.0, rules=RULES)[0].estimate
    guarded = est.estimate_placements(
        [p], policy, 15.0, rules={"aws": est.CloudRule(Billing(), 3600.0, 120.0)}
    )[0].estimate
    assert bare is not None and guarded is not None
    assert guarded.restarts < bare.restarts


def test_estimate_is_deterministic_and_per_placement(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    a, b = _placement(zone="z1"), _placement(zone="z2")
    one = est.estimate_placements([a, b], policy, 15.0, rules=RULES)
    two = est.estimate_placements([a, b], policy, 15.0, rules=RULES)
    assert [p.estimate for p in one] == [p.estimate for p in two]
    alone = est.estimate_placements([a], policy, 15.0, rules=RULES)
    assert alone[0].estimate == one[0].estimate  # a placement's draw does not hang on others
    assert one[0].estimate != one[1].estimate  # zones draw their own runs


def test_one_replay_of_many_jobs_equals_a_replay_per_job() -> None:
    """The per-window replay the estimate uses is the simulator's replay, job by job."""
    rng = np.random.default_rng(3)
    avail = rng.random((6, 120)) > 0.3
    jobs = [(8.0, 12.0, 3.06, 0.97), (5.0, 9.0, 2.0, 0.5), (10.0, 11.0, 4.0, 1.9)]
    step = 720.0
    many = replay(
        get_strategy("provisioner"),
        np.concatenate([avail[2 * i : 2 * i + 2] for i in range(3)]),
        Scenario(10 * 3600, 12 * 3600, 720.0, step),
        per_window=PerWindow(
            work_s=np.repeat([j[0] * 3600 for j in jobs], 2),
            deadline_s=np.repeat([j[1] * 3600 for j in jobs], 2),
            price_on_demand=np.repeat([j[2] for j in jobs], 2),
            price_spot=np.repeat([j[3] for j in jobs], 2),
        ),
    )
    for i, (w, d, od, sp) in enumerate(jobs):
        sc = Scenario(w * 3600, d * 3600, 720.0, step, od, sp)
        alone = replay(get_strategy("provisioner"), avail[2 * i : 2 * i + 2], sc)
        np.testing.assert_allclose(many.cost[2 * i : 2 * i + 2], alone.cost)
        np.testing.assert_array_equal(many.launches[2 * i : 2 * i + 2], alone.launches)


def test_fit_rates_reads_a_trace() -> None:
    a = np.asarray(([True] * 30 + [False] * 10) * 5)  # up 30 steps, down 10, five times
    r = est.fit_rates(a, 360.0, est.Rates(0.0, 0.0, "none"))
    # 15 h up over 5 falls, 5 h down over 4 rises; the prior counts as one period of each
    assert r.up_h == pytest.approx(15.0 / 6)
    assert r.down_h == pytest.approx(5.0 / 5)
    assert r.up_now is False
    long = est.fit_rates(np.tile(a, 20), 360.0, est.Rates(9.0, 9.0, "prior"))
    assert long.up_h == pytest.approx(3.0, rel=0.05)  # the history outweighs the prior


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.stdout


def test_plan_json_carries_the_estimate() -> None:
    code, out = _cli("plan", "--policy", FINETUNE, "--json", "--top", "3")
    assert code == 0
    placements = json.loads(out)["placements"]
    for p in placements:
        e = p["estimate"]
        keys = {"mean_usd", "p10_usd", "p90_usd", "p_miss_deadline", "spot_h", "on_demand_h"}
        assert keys | {"restarts", "lost_work_h", "changeover_h"} <= set(e)
        assert e["p10_usd"] <= e["mean_usd"] <= e["p90_usd"]
        assert e["mean_usd"] >= p["est_job_cost"]  # interruptions only add to hours x price
        assert 0.0 <= e["p_miss_deadline"] <= 1.0
    _, again = _cli("plan", "--policy", FINETUNE, "--json", "--top", "3")
    assert [p["estimate"] for p in json.loads(again)["placements"]] == [
        p["estimate"] for p in placements
    ]


def test_plan_table_shows_the_range_and_the_deadline_risk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "220")
    code, out = _cli("plan", "--policy", FINETUNE, "--top", "3")
    assert code == 0
    assert "P10-P90 USD" in out and "miss" in out
    rows = [ln for ln in out.splitlines() if re.match(r"\s*[123]\s+\w", ln)]
    assert len(rows) == 3
    for ln in rows:
        lo, hi = map(float, re.search(r"(\d+\.\d\d)-(\d+\.\d\d)", ln).groups())  # type: ignore[union-attr]
        assert lo <= hi
        assert re.search(r"\d+%", ln)


def test_the_percentile_is_numpys_to_the_bit() -> None:
    """P10/P90 come from a sort, not np.percentile (which imports numpy.ma); same figures."""
    from provisioner.simulate.estimate import percentile

    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 10, 128, 129):
        for scale in (1e-3, 1.0, 1e6):
            values = rng.gamma(2.0, 10.0, n) * scale
            for pct in (0.0, 10.0, 37.5, 50.0, 90.0, 100.0):
                assert percentile(values, pct) == float(np.percentile(values, pct)), (n, pct)
    with pytest.raises(ValueError, match="no values"):
        percentile(np.array([]), 10)
