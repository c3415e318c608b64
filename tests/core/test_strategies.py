from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from provisioner.core.strategies import (
    COMPARED,
    NONE,
    ON_DEMAND,
    SPOT,
    STRATEGIES,
    EagerNextRegion,
    Greedy,
    SlackAware,
    StepState,
    UniformProgress,
    choose_market,
    first_available,
    get_strategy,
    window_hours_left,
)

D = 0.2  # changeover, h
G = 0.1  # step, h


def state(**kw: float | int | bool) -> StepState:
    base: dict[str, float | int | bool] = {
        "elapsed_h": 10.0,
        "time_left_h": 50.0,
        "work_left_h": 30.0,
        "work_total_h": 48.0,
        "horizon_h": 60.0,
        "running": NONE,
        "pending_h": 0.0,
        "spot_available": True,
        "spot_age_h": 0.0,
        "step_h": G,
        "overhead_h": D,
    }
    base.update(kw)
    return StepState.single(**base)


def pick(name: str, **kw: float | int | bool) -> int:
    return int(choose_market(get_strategy(name), state(**kw))[0])


def test_registry_names_and_unknown_strategy() -> None:
    assert set(COMPARED) <= set(STRATEGIES)
    assert isinstance(get_strategy("provisioner"), SlackAware)
    with pytest.raises(ValueError, match=r"known: .*greedy"):
        get_strategy("cheapest")


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_never_spot_without_capacity(name: str) -> None:
    assert pick(name, spot_available=False) != SPOT


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_done_means_nothing_runs(name: str) -> None:
    assert pick(name, work_left_h=0.0, running=ON_DEMAND) == NONE


def test_greedy_waits_for_spot_until_the_safety_net() -> None:
    assert pick("greedy", spot_available=True) == SPOT
    assert pick("greedy", spot_available=False) == NONE
    # slack 0.25 h < d + step: waiting one more step could miss the deadline
    assert pick("greedy", spot_available=False, time_left_h=30.25) == ON_DEMAND


def test_on_demand_only_never_uses_spot() -> None:
    assert pick("on-demand", spot_available=True) == ON_DEMAND


def test_safety_net_forbids_a_spot_start_without_room_for_two_changeovers() -> None:
    # starting spot makes no progress for a step (d > step), then on-demand needs d: slack
    # must cover step + d = 0.3 h
    assert pick("greedy", time_left_h=30.25, running=ON_DEMAND) == ON_DEMAND
    assert pick("greedy", time_left_h=30.35, running=ON_DEMAND) == SPOT
    # with a step longer than d the spot start makes step - d of progress: slack >= 2d
    assert pick("greedy", time_left_h=30.35, running=ON_DEMAND, step_h=0.5) == ON_DEMAND
    assert pick("greedy", time_left_h=30.45, running=ON_DEMAND, step_h=0.5) == SPOT
    # a productive spot instance may keep running down to a slack of d
    assert pick("greedy", time_left_h=30.2, running=SPOT) == SPOT


def test_uniform_progress_rules() -> None:
    # 10 h in, 30 h left of 48: done 18 >= 8 expected: ahead, so wait without spot
    assert pick("uniform-progress", spot_available=False) == NONE
    # behind the line C0*t/R0 (done 22 < 24 expected at t=30): on-demand
    behind = {"elapsed_h": 30.0, "time_left_h": 30.0, "work_left_h": 26.0}
    assert pick("uniform-progress", spot_available=False, **behind) == ON_DEMAND
    # behind, but spot is there: take the risk
    assert pick("uniform-progress", **behind) == SPOT
    # hysteresis: on on-demand, stay until ahead of the line 2d later
    ahead_a_bit = {
        "elapsed_h": 22.4,
        "time_left_h": 37.6,
        "work_left_h": 30.0,
    }  # done 18 = 0.8*22.5
    assert pick("uniform-progress", running=ON_DEMAND, **ahead_a_bit) == ON_DEMAND
    assert pick("uniform-progress", running=ON_DEMAND, elapsed_h=20.0, time_left_h=40.0) == SPOT


def test_uniform_progress_leaves_on_demand_for_spot_only_where_the_variant_waits() -> None:
    # on on-demand, well ahead of the line (done 18 > 0.8 * 10.4), spot gone: the authors' code
    # keeps on-demand; the project's earlier variant stops it and waits
    ahead = {"running": ON_DEMAND, "spot_available": False}
    assert pick("uniform-progress", **ahead) == ON_DEMAND
    assert pick("uniform-progress-variant", **ahead) == NONE
    # the paper's own net: idle with W + 2d steps or fewer left: on-demand, even with spot there
    near = {"time_left_h": 30.3, "work_left_h": 30.0}
    assert pick("uniform-progress", **near) == ON_DEMAND
    assert pick("uniform-progress-variant", **near) == SPOT


def test_slack_aware_waits_only_above_its_reserve() -> None:
    s = SlackAware()
    # the share of the time left: 7% + 6%·R/H, 13% at the start (R = H = 60 h), 7% at the end
    share = 0.07 + 0.06 * 50.0 / 60.0
    st = state(time_left_h=50.0, work_left_h=30.0)  # slack 20 h; reserve 0.5 + 6 = 6.5 h
    assert float(s.reserve_h(st)[0]) == pytest.approx(2 * D + G + share * 50.0)
    start = state(time_left_h=60.0)
    assert float(s.reserve_h(start)[0]) == pytest.approx(2 * D + G + 0.13 * 60.0)
    end = state(time_left_h=0.0, work_left_h=0.0)
    assert float(s.reserve_h(end)[0]) == pytest.approx(2 * D + G)
    assert pick("provisioner", spot_available=False) == NONE
    assert pick("provisioner", spot_available=False, time_left_h=35.0) == NONE  # 5 > 4.18 h
    assert pick("provisioner", spot_available=False, time_left_h=33.5) == ON_DEMAND  # 3.5 < 3.97
    # no horizon (no deadline): the share stays at its start value, nothing breaks
    far = state(time_left_h=float("inf"), horizon_h=float("inf"))
    assert float(s.reserve_h(far)[0]) == float("inf")


def test_slack_aware_holds_on_demand_for_ten_changeovers() -> None:
    # slack 7 h, reserve 0.5 + 3.96 = 4.46 h: idle waits; at 35.5 h left (slack 5.5 h, reserve
    # 4.25 h), on-demand holds: 4.25 + 2 > 5.5
    kw = {"spot_available": False, "time_left_h": 37.0, "work_left_h": 30.0}
    assert pick("provisioner", **kw) == NONE
    assert (
        pick(
            "provisioner",
            running=ON_DEMAND,
            time_left_h=35.5,
            work_left_h=30.0,
            spot_available=False,
        )
        == ON_DEMAND
    )


def test_slack_aware_returns_to_spot_after_the_break_even_time() -> None:
    st = state()
    be = float(SlackAware.breakeven_h(st))
    assert be == pytest.approx(D * (3.06 + 0.97) / (3.06 - 0.97))
    short = {"running": ON_DEMAND, "time_left_h": 34.0}  # slack 4 h < reserve 4.04 + hold 2 h
    assert pick("provisioner", spot_age_h=be / 2, **short) == ON_DEMAND
    assert pick("provisioner", spot_age_h=be, **short) == SPOT
    assert pick("provisioner", running=NONE, spot_age_h=0.0) == SPOT  # idle: take spot at once
    # on-demand no longer needed: to spot at once rather than through a wait
    assert pick("provisioner", running=ON_DEMAND, spot_age_h=0.0) == SPOT
    # a zone whose spot runs last less than the break-even stint: the wait is stretched
    stint = 2 * D * 3.06 / (3.06 - 0.97)
    life = stint / 2  # half of it: twice the wait
    assert pick("provisioner", spot_age_h=be, spot_life_h=life, **short) == ON_DEMAND
    assert pick("provisioner", spot_age_h=1.9 * be, spot_life_h=life, **short) == ON_DEMAND
    assert pick("provisioner", spot_age_h=2.0 * be, spot_life_h=life, **short) == SPOT
    assert pick("provisioner", spot_age_h=be, spot_life_h=2 * stint, **short) == SPOT


def test_zone_choice_sticky_first_oldest_and_next_in_turn() -> None:
    avail = np.array([[True, True, True], [False, True, True], [True, False, True]])
    age = np.array([[1.0, 5.0, 2.0], [0.0, 1.0, 3.0], [1.0, 0.0, 1.0]])
    cur = np.array([2, -1, -1])
    last = np.array([-1, 1, 2])
    assert Greedy().pick_zone(avail, age, cur, last).tolist() == [2, 1, 0]
    assert SlackAware().pick_zone(avail, age, cur, last).tolist() == [2, 2, 0]
    # eager: after zone 1, try zone 2; after zone 2, wrap to zone 0
    assert EagerNextRegion().pick_zone(avail, age, cur, last).tolist() == [2, 2, 0]
    assert first_available(np.zeros((2, 3), dtype=bool)).tolist() == [-1, -1]


def test_vectorised_and_single_states_agree() -> None:
    rng = np.random.default_rng(3)
    n = 200
    arr = StepState(
        elapsed_h=rng.uniform(0, 60, n),
        time_left_h=rng.uniform(0, 60, n),
        work_left_h=rng.uniform(0, 48, n),
        work_total_h=np.full(n, 48.0),
        horizon_h=np.full(n, 60.0),
        running=rng.integers(0, 3, n).astype(np.int8),
        pending_h=rng.choice([0.0, 0.1, 0.2], n),
        spot_available=rng.random(n) < 0.5,
        spot_age_h=rng.uniform(0, 2, n),
        step_h=G,
        overhead_h=D,
    )
    for name in STRATEGIES:
        strat = get_strategy(name)
        many = choose_market(strat, arr)
        for i in range(0, n, 17):
            one = StepState.single(
                **{
                    f: float(getattr(arr, f)[i])
                    for f in (
                        "elapsed_h",
                        "time_left_h",
                        "work_left_h",
                        "work_total_h",
                        "horizon_h",
                        "pending_h",
                        "spot_age_h",
                    )
                },
                running=int(arr.running[i]),
                spot_available=bool(arr.spot_available[i]),
                step_h=G,
                overhead_h=D,
            )
            assert int(choose_market(strat, one)[0]) == int(many[i]), (name, i)


@settings(max_examples=300, deadline=None)
@given(
    name=hs.sampled_from(sorted(set(STRATEGIES) - {"spot-only"})),
    work=hs.floats(0.01, 48),
    slack=hs.floats(0.0, 20),
    running=hs.sampled_from([NONE, ON_DEMAND, SPOT]),
    pending=hs.floats(0, D),
    spot=hs.booleans(),
    age=hs.floats(0, 5),
    d=hs.floats(0, 0.5),
    g=hs.floats(0.01, 0.3),
)
def test_safety_net_keeps_on_demand_able_to_finish(
    name: str,
    work: float,
    slack: float,
    running: int,
    pending: float,
    spot: bool,
    age: float,
    d: float,
    g: float,
) -> None:
    """From any state where on-demand could still finish, after one step of the chosen market
    (spot lost at its end, progress credited only for a full step on capacity) on-demand still can."""
    pending = min(pending, d) if running != NONE else 0.0
    od_start = pending if running == ON_DEMAND else d
    time_left = work + od_start + slack
    s = state(
        time_left_h=time_left,
        work_left_h=work,
        running=running,
        pending_h=pending,
        spot_available=spot,
        spot_age_h=age,
        overhead_h=d,
        step_h=g,
    )
    c = int(choose_market(get_strategy(name), s)[0])
    if c == ON_DEMAND:
        return  # on-demand finishes from here (slack >= 0)
    if c == NONE:
        assert time_left - g >= work + d - 1e-6
    if c == SPOT:
        pend = pending if running == SPOT else d
        progress = max(0.0, g - pend)
        assert time_left - g >= (work - progress) + d - 1e-6


def test_window_hours_left_counts_only_open_windows() -> None:
    now = datetime(2026, 1, 5, 6, 0, tzinfo=UTC)  # a Monday, 06:00
    wins = [("0 22 * * *", timedelta(hours=8))]  # 22:00-06:00 every day
    deadline = now + timedelta(hours=48)
    # windows opening within 48 h: day 1 22:00-06:00 and day 2 22:00-06:00 = 16 h, 2 openings
    assert window_hours_left(wins, now, deadline, 0.2) == pytest.approx(16 - 0.4)
    inside = datetime(2026, 1, 5, 23, 0, tzinfo=UTC)
    # from 23:00: 7 h of this window, then 22:00-05:00 of the next before 23:00 + 30 h
    assert window_hours_left(wins, inside, inside + timedelta(hours=30), 0.0) == pytest.approx(14.0)


def test_uniform_progress_line_is_the_papers() -> None:
    up = UniformProgress()
    s = state(elapsed_h=30.0, work_left_h=24.0, spot_available=False, time_left_h=30.0)
    assert int(up.want(s)[0]) == NONE  # done 24 == 0.8 * 30: on the line, not behind
