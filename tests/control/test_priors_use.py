"""What the availability priors change, as pure parts: the risk each cloud's figure reads as,
the planner's interruption term, decide()'s zone lifetime for a zone with no history, the
estimate's prior, the daemon's cached copy; and that nothing changes where none is known."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from provisioner.control.priorfigures import PRIORS_EVERY, PriorFigures
from provisioner.control.store import Store
from provisioner.core import availability as av
from provisioner.core.catalog import BAND_RISK
from provisioner.core.models import Market, Offer
from provisioner.core.views import ZoneHistory
from provisioner.core.zone_priors import (
    EVICTION_RATE,
    PLACEMENT_SCORE,
    PRICE_VOLATILITY,
    SPOT_ADVICE,
    ZonePrior,
    eviction_risk,
    for_offer,
    prior_life_h,
    risk_column,
    score_risk,
    volatility,
    zone_risks,
)
from provisioner.simulate.estimate import band_rates, prior_rates
from provisioner.simulate.priors import new_account_rates

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

AT = datetime(2026, 12, 5, tzinfo=UTC)


def _offer(zone: str, region: str = "us-east-1", provider: str = "aws") -> Offer:
    return Offer(provider, region, zone, "p3.2xlarge", "V100", 1, 8, 61, 3.06, 0.97)


def _score(zone: str, value: float) -> ZonePrior:
    return ZonePrior("aws", "us-east-1", zone, "p3.2xlarge", PLACEMENT_SCORE, value, "", AT)


def test_each_figure_reads_as_a_monthly_risk() -> None:
    assert [score_risk(s) for s in (10, 9, 8, 7, 6, 5, 4, 3, 2, 1)] == [
        0.025, 0.025, 0.075, 0.075, 0.125, 0.125, 0.175, 0.175, 0.25, 0.25,
    ]  # fmt: skip
    assert [eviction_risk(x) for x in ("0-5", "5-10", "10-15", "15-20", "20+", "5-10%")] == [
        0.025, 0.075, 0.125, 0.175, 0.25, 0.075,
    ]  # fmt: skip
    assert eviction_risk("unknown") is None
    assert volatility([1.0]) is None and volatility([1.0, 1.0, 1.0]) == 0.0
    assert abs((volatility([0.9, 1.1]) or 0) - 0.1414) < 1e-3
    risks = zone_risks(
        [
            _score("us-east-1a", 9),
            ZonePrior("aws", "us-east-1", "us-east-1a", "p3.2xlarge", PRICE_VOLATILITY, 0.2),
            ZonePrior("aws", "us-east-1", "us-east-1b", "p3.2xlarge", PRICE_VOLATILITY, 3.0),
            ZonePrior("azure", "eastus", "", "p3.2xlarge", EVICTION_RATE, 0.075, "5-10"),
            ZonePrior("alibaba", "cn-hangzhou", "cn-hangzhou-h", "p3.2xlarge", SPOT_ADVICE, 0.03),
        ]
    )
    a = for_offer(risks, _offer("us-east-1a"))
    assert a is not None and abs(a.apply(0.10) - 0.025 * 1.2) < 1e-12
    assert "placement score 9" in a.source and "price volatility" in a.source
    b = for_offer(risks, _offer("us-east-1b"))  # a volatility alone scales the zone's own risk
    assert b is not None and b.apply(0.10) == 0.10 * 1.5
    assert for_offer(risks, _offer("us-east-1c")) is None
    # Azure's figures are per region: every zone of it takes them
    az = for_offer(risks, _offer("eastus-2", "eastus", "azure"))
    assert az is not None and az.apply(0.10) == 0.075
    ali = for_offer(risks, _offer("cn-hangzhou-h", "cn-hangzhou", "alibaba"))
    assert ali is not None and ali.apply(0.25) == 0.03


def test_without_priors_the_planner_and_decide_inputs_are_untouched() -> None:
    base = np.array([np.nan, 0.25])
    offers = [_offer("us-east-1a"), _offer("us-east-1b")]
    assert risk_column(base, np.arange(2), offers, {}) is base
    assert prior_life_h({}, offers) is None
    # priors for other zones only: decide() keeps its default lifetime everywhere
    assert prior_life_h(zone_risks([_score("us-east-1z", 9)]), offers) is None
    with_b = risk_column(base, np.arange(2), offers, zone_risks([_score("us-east-1b", 9)]))
    assert np.isnan(with_b[0]) and with_b[1] == 0.025


def test_a_prior_seeds_a_zone_with_no_history_and_history_takes_over() -> None:
    offers = [_offer("us-east-1a"), _offer("us-east-1b")]
    risks = zone_risks([_score("us-east-1a", 2), _score("us-east-1b", 9)])
    seed = prior_life_h(risks, offers)
    assert seed is not None and seed[1] > av.PRIOR_LIFE_H > seed[0]
    known = np.array([True, True])
    ages = np.array([np.inf, np.inf])
    hist = [ZoneHistory(), ZoneHistory()]
    _, _, flat = av.for_options(hist, known, ages)
    assert flat[0] == flat[1]  # no prior: the zones are alike
    _, _, seeded = av.for_options(hist, known, ages, None, seed)
    assert seeded[1] > seeded[0]
    # a long history in the zone rated 9 that lost capacity often overrides its prior

    bad = ZoneHistory(up_h=20.0, lost=40, down_h=0.0, recovered=0)
    _, _, after = av.for_options([ZoneHistory(), bad], known, ages, None, seed)
    assert after[1] < after[0]


def test_decide_s_learned_strategy_launches_in_the_zone_its_prior_favours() -> None:
    from test_decide import NOW, T0, cands, job

    from provisioner.core.decide import Launch, Observations, decide

    # the learned strategy picks the spot zone whose launch buys the most expected hours;
    # both zones up since the job came in (as the daemon reads them from its attempts)
    up = {("aws", "us-east-1a"): T0, ("aws", "us-east-1b"): T0}
    obs = Observations(candidates=cands("us-east-1a", "us-east-1b"), spot_up_since=up)
    plain = decide(job(), obs, NOW, strategy="learned")
    assert isinstance(plain[0], Launch) and plain[0].placement.offer.zone == "us-east-1a"
    risks = zone_risks([_score("us-east-1a", 2), _score("us-east-1b", 9)])
    obs = Observations(
        candidates=cands("us-east-1a", "us-east-1b"), spot_up_since=up, zone_priors=risks
    )
    out = decide(job(), obs, NOW, strategy="learned")
    assert isinstance(out[0], Launch) and out[0].placement.market is Market.SPOT
    assert out[0].placement.offer.zone == "us-east-1b"


def test_the_estimate_prior_refines_the_band() -> None:
    band = new_account_rates(">20%")
    assert band_rates(">20%") == band  # no prior: as before
    risks = zone_risks([_score("us-east-1a", 9)])
    zr = for_offer(risks, _offer("us-east-1a"))
    refined = new_account_rates(">20%", zr)
    assert refined.up_h == pytest.approx(band.up_h * BAND_RISK[">20%"] / 0.025)
    assert "placement score 9" in refined.source
    # a score of 9 says the zone has spot 85% of the time: its outages are as long as that
    # needs, and a run starts with spot with that probability
    assert refined.p_up == pytest.approx(0.85)
    assert refined.up_h / (refined.up_h + refined.down_h) == pytest.approx(0.85)
    from test_decide import place

    placements = [place(_offer("us-east-1a")), place(_offer("us-east-1b"))]
    got = prior_rates(placements, risks)
    assert set(got) == {0} and got[0].up_h > new_account_rates("").up_h


def test_the_daemon_reads_the_store_s_priors_on_a_beat(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    figures = PriorFigures(store)
    assert figures.get(AT) == {} and figures.version == 0
    store.save_priors([_score("us-east-1b", 9)], replace="aws")
    assert figures.get(AT + timedelta(seconds=1)) == {}  # within the beat: the cached copy
    later = figures.get(AT + PRIORS_EVERY)
    assert figures.version == 1 and ("aws", "us-east-1b", "p3.2xlarge") in later
    assert figures.get(AT + 2 * PRIORS_EVERY) == later and figures.version == 1
    store.close()


def test_the_daemon_s_plan_ranks_by_prior(tmp_path: Path) -> None:
    from policies import parse_policy
    from provisioner.control.inputs import candidate_plan
    from provisioner.core.catalog import Catalog

    offers = [_offer("us-east-1a"), _offer("us-east-1b")]
    pol = parse_policy("name: t\nresources:\n  gpus: [V100]\nmarket: spot\n")
    cat = Catalog(offers)
    plain = candidate_plan(pol, cat, frozenset(), AT)
    assert [p.offer.zone for p in plain.placements] == ["us-east-1a", "us-east-1b"]
    risks = zone_risks([_score("us-east-1a", 2), _score("us-east-1b", 9)])
    ranked = candidate_plan(pol, cat, frozenset(), AT, priors=risks)
    assert [p.offer.zone for p in ranked.placements] == ["us-east-1b", "us-east-1a"]
