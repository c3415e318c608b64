"""Early signals in the simulator: both drivers (the decide()-driven engine and the vectorised
replay) model AWS's rebalance recommendation from the trace with the same seeded model
(provisioner/core/rebalance.py) and act on it as decide() does (provisioner/core/decide/signals.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from provisioner.core.rebalance import RebalanceModel, grid, outages_of
from provisioner.core.strategies import get_strategy
from provisioner.simulate.engine import World, run_windows
from provisioner.simulate.replay import replay, total_steps
from tests.simulate.test_simulate import BENCH, COMPARED, scenario, synthetic

MODEL = RebalanceModel(lead_s=720.0, precede_p=0.8, false_per_day=2.0, seed=3)
FIELDS = ("cost", "od_hours", "spot_hours", "finish_h", "launches", "preemptions", "overlap_hours")


@pytest.mark.parametrize("observed", [True, False], ids=["observed", "oracle"])
@pytest.mark.parametrize("zones", [1, 3])
def test_replay_and_decide_agree_with_early_signals(zones: int, observed: bool) -> None:
    sc = replace(scenario(6.0, 0.75, 12.0), rebalance=MODEL)
    avail = synthetic(6, total_steps(sc), zones, seed=zones)
    world = World([f"us-east-1{'abc'[z]}" for z in range(zones)])
    keys = [world.zones] * len(avail)
    for name in COMPARED:
        fast = replay(get_strategy(name), avail, sc, observed=observed, zone_keys=keys)
        slow = run_windows(BENCH, avail, sc, world, strategy=name, observed=observed)
        for field in FIELDS:
            assert np.allclose(getattr(fast, field), getattr(slow, field), rtol=0, atol=1e-9), (
                name,
                field,
                getattr(fast, field),
                getattr(slow, field),
            )


def test_the_signals_change_the_runs() -> None:
    """With three zones, recommendations start looks elsewhere: more overlap, other runs
    (same windows, same strategy)."""
    sc = scenario(6.0, 0.75, 12.0)
    avail = synthetic(12, total_steps(sc), 3, seed=7)
    ours = get_strategy("provisioner")
    off = replay(ours, avail, sc)
    on = replay(ours, avail, replace(sc, rebalance=MODEL))
    assert on.overlap_hours.sum() > off.overlap_hours.sum()
    assert not np.allclose(on.cost, off.cost)


def test_the_model_is_deterministic_under_its_seed() -> None:
    rng = np.random.default_rng(0)
    up = rng.random((400, 2)) < 0.9
    a = grid(MODEL, up, 600.0, ["a", "b"])
    b = grid(MODEL, up, 600.0, ["a", "b"])
    assert np.array_equal(a, b, equal_nan=True)
    c = grid(replace(MODEL, seed=4), up, 600.0, ["a", "b"])
    assert not np.array_equal(a, c, equal_nan=True)


def test_the_model_leads_outages_and_raises_false_alarms() -> None:
    up = [True] * 20 + [False] * 3 + [True] * 2000
    outages = outages_of(up, 600.0)
    assert outages == [(12000.0, 13800.0)]
    always = RebalanceModel(lead_s=1200.0, precede_p=1.0, false_per_day=0.0)
    assert always.windows("z", outages, 1e6) == [(10800.0, 12000.0)]
    never = RebalanceModel(lead_s=1200.0, precede_p=0.0, false_per_day=0.0)
    assert never.windows("z", outages, 1e6) == []
    noisy = RebalanceModel(lead_s=600.0, precede_p=0.0, false_per_day=4.0)
    spans = noisy.windows("z", outages, 2023 * 600.0)
    days = 2023 * 600.0 / 86400.0
    assert 0.3 * 4 * days < len(spans) < 2.0 * 4 * days  # about the stated rate
    for start, end in spans:  # false: no outage during it or just after
        assert end - start == 600.0
        assert not 12000.0 - 1200.0 < start < 13800.0
    # served to an instance from its launch at the earliest, while the span lasts
    assert always.served_since([(100.0, 700.0)], launched_s=300.0, now_s=400.0) == 300.0
    assert always.served_since([(100.0, 700.0)], launched_s=0.0, now_s=700.0) is None
    assert RebalanceModel(lead_s=0.0).windows("z", outages, 1e6) == []
    with pytest.raises(ValueError, match="precede_p"):
        RebalanceModel(precede_p=1.5)
