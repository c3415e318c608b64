"""What the estimate believes of a zone: its step, a history of outages, a placement score, and
how sure it says it is (provisioner/simulate/estimate.py, provisioner/simulate/priors.py)."""

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
from provisioner.core.billing import Billing
from provisioner.core.models import CostEstimate, Market, Offer, Placement
from provisioner.core.views import CHANGEOVER_H
from provisioner.core.zone_priors import PLACEMENT_SCORE, ZonePrior, score_share, zone_risks
from provisioner.simulate import estimate as est
from provisioner.simulate import priors

REPO = Path(__file__).resolve().parents[2]
FINETUNE = str(REPO / "policies" / "spot-finetune.yaml")
RULES = {"aws": est.CloudRule(Billing(1, 60), 0.0, 120.0)}
STEP = 300.0
DAY = int(24 * 3600 / STEP)


def _placement(zone: str = "z1", hours: float = 12.0, band: str = ">20%") -> Placement:
    o = Offer("aws", "us-east-1", zone, "p3.2xlarge", "V100", 1, 8, 61.0, 3.06, 0.97, "", band)
    return Placement(o, Market.SPOT, 0.97, None, 0.0, est_hours=hours, est_job_cost=0.97 * hours)


def _policy(tmp_path: Path) -> Policy:
    p = tmp_path / "p.yaml"
    p.write_text("name: t\njob:\n  compute_hours: 12\nmarket: spot-then-on-demand\n")
    return load_policy(p)


def _one(policy: Policy, rates: priors.Rates, hours: float = 12.0) -> CostEstimate:
    [got] = est.estimate_placements([_placement(hours=hours)], policy, 15.0, rules=RULES,
                                    rates={0: rates})  # fmt: skip
    assert got.estimate is not None
    return got.estimate


def _od_only(hours: float = 12.0) -> float:
    return 3.06 * RULES["aws"].billing.billed_seconds((hours + CHANGEOVER_H) * 3600) / 3600


def test_a_zone_down_for_days_is_estimated_near_the_on_demand_cost(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    base = priors.new_account_rates(">20%")
    # a busy zone's week (up and down every few hours), then the last three days without spot
    rng = np.random.default_rng(3)
    week = np.repeat(rng.random(7 * 8) < 0.6, DAY // 8)
    hist = np.concatenate([week[: 4 * DAY], np.zeros(3 * DAY, dtype=bool)])
    r = priors.fit_rates(hist, STEP, base, priors.HISTORY_HALF_LIFE_H)
    # the outage going on now counts whole, not as the half-life's last few hours
    assert r.up_now is False and r.down_h > 60.0
    e = _one(policy, r)
    assert e.mean_usd >= 0.95 * _od_only()
    assert e.spot_h < 0.5
    # a zone that came back an hour ago after the same outage is another matter
    back = np.concatenate([hist, np.ones(12, dtype=bool)])
    e_back = _one(policy, priors.fit_rates(back, STEP, base, priors.HISTORY_HALF_LIFE_H))
    assert e_back.mean_usd < 0.8 * _od_only()


def test_the_current_period_is_the_run_of_the_last_state() -> None:
    a = np.array([1, 1, 0, 0, 0], dtype=bool)
    assert priors.current_run(a) == 3
    assert priors.current_run(np.ones(4, dtype=bool)) == 4
    assert priors.current_run(np.zeros(0, dtype=bool)) == 0
    # an up period going on for days is believed as well: failures are rare there
    up = priors.fit_rates(np.ones(3 * DAY, dtype=bool), STEP, priors.new_account_rates(">20%"),
                          priors.HISTORY_HALF_LIFE_H)  # fmt: skip
    assert up.up_now is True and up.up_h > 60.0


def test_the_estimate_runs_at_the_realised_cost_s_step() -> None:
    # a 12 h job by 15 h and a 48 h job by 60 h: the 300 s step the realised costs are at
    assert est.decision_step(15.0, 12.0) == est.FINE_STEP_S == 300.0
    assert est.decision_step(60.0, 48.0) == 300.0
    # only a horizon past MAX_STEPS fine steps is coarser, and then within the budget
    long = est.decision_step(400.0, 100.0)
    assert long > 300.0
    assert (400.0 + 100.0 + CHANGEOVER_H) * 3600.0 / long <= est.MAX_STEPS + 1e-9


def test_placements_drawn_together_are_drawn_as_alone() -> None:
    a = priors.new_account_rates(">20%")
    b = priors.fit_rates(np.zeros(DAY, dtype=bool), STEP, a)
    both = est.sample_many([(a, 11), (b, 12)], 64, 90, STEP)
    assert np.array_equal(both[0], est.sample_availability(a, 64, 90, STEP, 11))
    assert np.array_equal(both[1], est.sample_availability(b, 64, 90, STEP, 12))
    assert not both[1][:, 0].any()  # down now: every run starts down


def test_a_placement_score_tells_zones_of_one_band_apart(tmp_path: Path) -> None:
    policy = _policy(tmp_path)

    def scored(score: float) -> priors.Rates:
        zp = ZonePrior("aws", "us-east-1", "z1", "p3.2xlarge", PLACEMENT_SCORE, score)
        [zr] = zone_risks([zp]).values()
        assert zr.up_share == pytest.approx(score_share(score))
        return priors.new_account_rates(">20%", zr)

    low, high = scored(2), scored(10)
    assert low.p_up == pytest.approx(0.15) and high.p_up == pytest.approx(0.95)
    # the model's share of time up is the score's
    for r in (low, high):
        assert r.up_h / (r.up_h + r.down_h) == pytest.approx(r.p_up)
    e_low, e_high = _one(policy, low), _one(policy, high)
    assert e_low.mean_usd > e_high.mean_usd * 1.5
    # without a score the band alone, the same for both zones
    assert priors.new_account_rates(">20%").p_up is None


def test_each_estimate_says_how_sure_it_is_by_its_prior(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    band = priors.new_account_rates(">20%")
    hist = priors.fit_rates(np.ones(DAY, dtype=bool), STEP, band)
    zp = ZonePrior("aws", "us-east-1", "z1", "p3.2xlarge", PLACEMENT_SCORE, 7)
    score = priors.new_account_rates(">20%", zone_risks([zp])[("aws", "z1", "p3.2xlarge")])
    for r, kind in ((band, "band"), (hist, "history"), (score, "score")):
        assert est.prior_kind(r) == kind
        short, long = est.ERROR_BY_PRIOR[kind]
        assert _one(policy, r).error == short
        assert _one(policy, r, hours=30.0).error == long
    # an on-demand placement is exact: nothing to be unsure of
    od = Placement(_placement().offer, Market.ON_DEMAND, 3.06, None, 0.0, est_hours=2.0)
    [got] = est.estimate_placements([od], policy, 15.0, rules=RULES)
    assert got.estimate is not None and got.estimate.error is None


def test_plan_says_how_sure_each_estimate_is() -> None:
    res = CliRunner().invoke(cli, ["plan", "--policy", FINETUNE, "--json", "--top", "3"])
    assert res.exit_code == 0
    for p in json.loads(res.stdout)["placements"]:
        e = p["estimate"]
        assert e["error"] == est.ERROR_BY_PRIOR["band"][0]  # no priors cached, short job
    res = CliRunner().invoke(cli, ["plan", "--policy", FINETUNE, "--top", "3"])
    assert res.exit_code == 0
    assert re.search(r"±\d+%", res.stdout)
    assert "mean error per job, measured on recorded traces" in res.stdout


@pytest.mark.data
def test_the_bench_compares_the_score_and_history_priors_held_out() -> None:
    from tests.conftest import SHARED_DATA, shared_data

    shared_data("traces", "cant_be_late", "preemption", "1-node", "aws-04-19-2023")
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "estimate_bench.py"), "--windows", "2",
         "--data", str(SHARED_DATA), "--sets", "04-19", "--prior", "score", "--prior", "trace"],
        capture_output=True, text=True, timeout=600, check=True, cwd=REPO,
    ).stdout  # fmt: skip
    assert "every AWS set pooled" in out
    assert re.search(r"prior score .*under P10 .*over P90 .*zone bias [+-]\d+%\.\.[+-]\d+%", out)
    assert re.search(r"48 h job  prior trace", out)


@pytest.mark.data
def test_a_recorded_week_without_spot_is_believed(tmp_path: Path) -> None:
    """The us-west-2b p2.xlarge trace of 2022-10-26 has no spot for its last two weeks: after
    a week of it, the 12 h job is estimated at the on-demand cost it then realises ($37.84;
    the half-life alone made it $32.72, as if the outage would end within hours)."""
    from provisioner.simulate.traces import load_trace
    from tests.conftest import shared_data

    path = shared_data("traces", "cant_be_late", "availability", "1-node", "aws-10-26-2022",
                       "us-west-2b_k80_1.json")  # fmt: skip

    av = load_trace(path).available_on(STEP)
    week, s = 7 * DAY, 7000
    assert not av[s - week : s + 1].any()
    r = priors.fit_rates(av[s - week : s + 1], STEP, priors.new_account_rates(">20%"),
                         priors.HISTORY_HALF_LIFE_H)  # fmt: skip
    e = _one(_policy(tmp_path), r)
    assert e.mean_usd >= 0.97 * _od_only()


def test_a_history_s_rates_drift_more_the_further_ahead_the_job_runs() -> None:
    hist = priors.fit_rates(np.tile(np.repeat([True, False], 12), 14), STEP,
                            priors.new_account_rates(">20%"), priors.HISTORY_HALF_LIFE_H)  # fmt: skip
    assert hist.drift == priors.HISTORY_DRIFT > 0

    def cv(horizon_h: float) -> float:
        lam, _ = priors.draw_rates(hist, 20_000, np.random.default_rng(5), horizon_h)
        return float(lam.std() / lam.mean())

    assert cv(0.0) < cv(15.0) < cv(60.0)
    # the new account's prior is the spread between days and zones already: it does not drift
    band = priors.new_account_rates(">20%")
    a = priors.draw_rates(band, 100, np.random.default_rng(5), 0.0)
    b = priors.draw_rates(band, 100, np.random.default_rng(5), 60.0)
    assert band.drift == 0.0 and np.array_equal(a[0], b[0])
