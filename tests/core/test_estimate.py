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

REPO = Path(__file__).resolve().parents[2]
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
    # every launch pays a changeover (the first at least; one cut short by a preemption
    # counts its part); restarts are the relaunches after an interruption, not every launch
    assert e.changeover_h >= CHANGEOVER_H - 1e-9 and e.restarts >= 0
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
    r = est.fit_rates(a, 360.0, est.Rates(0.0, 0.0, "none"), half_life_h=None)
    # 15 h up over 5 falls, 5 h down over 4 rises; the prior counts as one period of each
    assert r.up_h == pytest.approx(15.0 / 6)
    assert r.down_h == pytest.approx(5.0 / 5)
    assert r.up_now is False
    long = est.fit_rates(np.tile(a, 20), 360.0, est.Rates(9.0, 9.0, "prior"), half_life_h=None)
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
        # the mean may lie above the P90: fewer than one run in ten finding no spot and
        # paying on-demand for the whole job pull it up (docs/money.md)
        assert e["p10_usd"] <= e["p90_usd"] and e["p10_usd"] <= e["mean_usd"]
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


def _od_only(hours: float = 12.0) -> float:
    """The on-demand-only cost of the test placement: one launch, the work, AWS's billing."""
    return 3.06 * RULES["aws"].billing.billed_seconds((hours + CHANGEOVER_H) * 3600) / 3600


def test_a_zone_with_no_spot_capacity_has_a_p90_of_at_least_the_on_demand_only_cost(
    tmp_path: Path,
) -> None:
    policy = _policy(tmp_path)
    # two days of history without spot: the posterior starts down, with long outages
    none = est.fit_rates(np.zeros(576, dtype=bool), 300.0, est.band_rates(">20%"))
    assert none.up_now is False and none.down_h > 40
    e = _one(_placement(), policy, 15.0, rates={0: none})
    assert e.p90_usd >= _od_only() - 1e-9
    # a zone that never has spot: every run pays at least the on-demand-only cost (more
    # where the strategy stops on-demand to look for spot and pays the changeover again)
    never = est.Rates(1.0, 1e9, "none", up_now=False)
    e = _one(_placement(), policy, 15.0, rates={0: never})
    assert e.p10_usd >= _od_only() - 1e-9 and e.spot_h == 0.0
    # a new account's zone may have no spot: its P90 is not below the on-demand-only cost
    e = _one(_placement(), policy, 15.0)
    assert e.p90_usd >= _od_only() - 1e-9


def test_the_new_account_prior_is_a_mixture_over_plausible_rates(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    prior = est.band_rates(">20%")
    assert prior.up_now is None and prior.up_shape and prior.down_shape
    assert prior.source == "band >20%"
    fixed = est.Rates(prior.up_h, prior.down_h, "fixed", up_now=True)
    wide, narrow = (
        _one(_placement(), policy, 15.0),
        _one(_placement(), policy, 15.0, rates={0: fixed}),
    )
    assert wide.p90_usd - wide.p10_usd > narrow.p90_usd - narrow.p10_usd
    # each run draws its own rates: the sampled up share spreads from zone to zone
    av = est.sample_availability(prior, 512, 200, 300.0, seed=1)
    share = av.mean(axis=1)
    assert share.min() < 0.1 and share.max() > 0.9
    # the band scales the failure rate, not the shapes
    calm = est.band_rates("<5%")
    assert calm.up_h == pytest.approx(prior.up_h * 10) and calm.up_shape == prior.up_shape


def test_recorded_history_replaces_the_prior_as_it_grows() -> None:
    prior = est.band_rates(">20%")
    a = np.asarray(([True] * 60 + [False] * 12) * 40)  # up 5 h, down 1 h at 300 s steps
    short = est.fit_rates(a[:144], 300.0, prior, half_life_h=None)
    long = est.fit_rates(a, 300.0, prior, half_life_h=None)
    assert long.up_h == pytest.approx(5.0, rel=0.05) and long.down_h == pytest.approx(1.0, rel=0.1)
    assert abs(short.up_h - 5.0) > abs(long.up_h - 5.0)
    assert prior.up_shape is not None and long.up_shape is not None and short.up_shape is not None
    assert long.up_shape > short.up_shape > prior.up_shape  # the spread narrows as it grows
    assert long.up_now is False and long.source == "trace"
    # with a half-life, what the zone showed long ago counts less: a zone calm for a week
    # and rough in its last day looks rough, where the plain sum still looks calm
    b = np.concatenate([np.ones(2016, dtype=bool), np.tile([True] * 6 + [False] * 6, 24)])
    plain, recent = est.fit_rates(b, 300.0, prior), est.fit_rates(b, 300.0, prior, 24.0)
    assert recent.up_h < plain.up_h / 2


def test_spot_advisor_bands_by_type_and_region(tmp_path: Path) -> None:
    from provisioner.simulate.priors import AdvisorError, load_advisor_bands

    flat = tmp_path / "advisor.csv"
    flat.write_text(
        "region,os,instance_type,savings_pct_vs_ondemand,interrupt_range_index,"
        "interrupt_frequency_label,cores,ram_gb,emr\n"
        "us-east-1,Linux,p3.2xlarge,80,4,>20%,8,61.0,True\n"
        "us-east-2,Linux,r5.16xlarge,65,2,10-15%,64,512.0,True\n"
        "us-east-2,Windows,r5.16xlarge,65,0,<5%,64,512.0,True\n"
    )
    bands = load_advisor_bands(flat)
    assert bands == {("us-east-1", "p3.2xlarge"): ">20%", ("us-east-2", "r5.16xlarge"): "10-15%"}
    feed = tmp_path / "advisor.json"
    feed.write_text(
        json.dumps(
            {
                "ranges": [{"index": 0, "label": "<5%"}, {"index": 4, "label": ">20%"}],
                "spot_advisor": {"eu-west-1": {"Linux": {"g5.xlarge": {"s": 60, "r": 0}}}},
            }
        )
    )
    assert load_advisor_bands(feed) == {("eu-west-1", "g5.xlarge"): "<5%"}
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(AdvisorError, match=r"bad\.json"):
        load_advisor_bands(bad)


@pytest.mark.data
def test_the_shared_spot_advisor_feed_gives_the_traces_bands() -> None:
    from provisioner.simulate.priors import load_advisor_bands
    from tests.conftest import shared_data

    bands = load_advisor_bands(shared_data("catalog", "aws_spot_advisor_2025-06-28_flat.csv"))
    assert bands[("us-east-1", "p3.2xlarge")] == ">20%"
    assert bands[("us-east-2", "r5.16xlarge")] == "10-15%"
    assert load_advisor_bands(shared_data("catalog", "aws_spot_advisor_2025-06-28.json")) == bands


def test_the_daemon_s_launch_estimate_reads_what_the_job_saw_of_the_zone(tmp_path: Path) -> None:
    """The estimate kept at launch (control/records.py) starts from the zone's prior and
    updates it with the job's own history there (the daemon's ZoneHistory)."""
    from provisioner.control.records import launch_cost_estimate
    from provisioner.core.views import ZoneHistory
    from provisioner.simulate.priors import history_rates

    prior = est.band_rates("<5%")
    rough = ZoneHistory(up_h=6.0, lost=12, down_h=6.0, recovered=12)
    post = history_rates(prior, rough)
    assert post.up_h < prior.up_h / 5 and post.source == "band <5%, history"
    assert prior.up_shape is not None and post.up_shape == prior.up_shape + 12
    assert history_rates(prior, ZoneHistory()).up_h == pytest.approx(prior.up_h)
    policy = _policy(tmp_path)
    p = _placement("<5%")
    fresh = launch_cost_estimate(p, policy, None, None)
    seen = launch_cost_estimate(p, policy, None, None, rough)
    assert fresh is not None and seen is not None
    assert fresh.prior == "band <5%" and seen.prior == "band <5%, history"
    assert seen.restarts > fresh.restarts and seen.mean_usd > fresh.mean_usd


def _bench(*args: str) -> tuple[int, str]:
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "estimate_bench.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return res.returncode, res.stdout + res.stderr


def test_estimate_bench_without_the_data_says_so_and_exits_0(tmp_path: Path) -> None:
    code, out = _bench("--data", str(tmp_path))
    assert code == 0 and "no traces under" in out and "skipped" in out


@pytest.mark.data
def test_estimate_bench_prints_coverage_bias_and_error_per_job_and_prior() -> None:
    from tests.conftest import SHARED_DATA, shared_data

    shared_data("traces", "cant_be_late", "preemption", "1-node", "gcp-04-30-2023")
    code, out = _bench("--data", str(SHARED_DATA), "--sets", "gcp-04-30", "--windows", "4")
    assert code == 0, out
    assert "2 traces, bands none" in out  # the three identical us-central1 files count once
    rows = [ln for ln in out.splitlines() if "prior" in ln and "inside" in ln]
    # the 12 h job, each prior (the GCP set is in no pooled figure)
    assert [r.split()[4] for r in rows] == ["new", "cross", "score", "trace"]
    assert "48 h job: traces too short" in out
    for r in rows:
        assert re.search(
            r"bias [+-]\d+\.\d%.*abs error +\d+\.\d%.*inside +\d+\.\d% \(under P10 +\d+\.\d%, "
            r"over P90 +\d+\.\d%\) +zone bias [+-]\d+%\.\.[+-]\d+%",
            r,
        )


def test_the_launch_estimate_is_kept_for_the_same_inputs_and_made_again_for_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relaunch with the same work left, horizon, zone history and policy gets the kept
    estimate (no second replay); any input that changes the figure makes a new one, equal to
    what a fresh replay gives."""
    from provisioner.control import records
    from provisioner.core.views import ZoneHistory
    from provisioner.simulate import estimate as module

    monkeypatch.setattr(records, "_ESTIMATES", {})
    runs: list[int] = []
    real = module.estimate_placements

    def counted(*a: object, **kw: object) -> list[Placement]:
        runs.append(1)
        return real(*a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(module, "estimate_placements", counted)
    policy = _policy(tmp_path)
    p = _placement("<5%", hours=2.0)
    first = records.launch_cost_estimate(p, policy, None, None)
    # the same inputs, ranked differently in another pass's plan: kept
    again = records.launch_cost_estimate(
        Placement(p.offer, p.market, p.price_per_hour, None, 5.0, rank=3, est_hours=2.0),
        policy,
        None,
        None,
    )
    assert again == first and len(runs) == 1
    others = [
        records.launch_cost_estimate(_placement("<5%", hours=1.0), policy, None, None),
        records.launch_cost_estimate(_placement(">20%", hours=2.0), policy, None, None),
        records.launch_cost_estimate(p, _policy(tmp_path, "spot"), None, None),
        records.launch_cost_estimate(p, policy, None, None, ZoneHistory(1.0, 2, 0.5, 1)),
    ]
    assert len(runs) == 5 and all(o is not None and o != first for o in others)
    monkeypatch.setattr(records, "_ESTIMATES", {})
    assert records.launch_cost_estimate(p, policy, None, None) == first  # as made fresh
