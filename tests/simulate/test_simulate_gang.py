"""Gangs in the simulator (issue 10): gang availability, billing x nodes, the optimum on the
same availability and prices, a lost node restarts the whole gang, ``--nodes`` checked.

Everything here runs on small synthetic per-node traces; only the last test reads the
multi-node sets of ../shared/data (and is skipped without them)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from policies import parse_policy
from provisioner.core.strategies import COMPARED, get_strategy
from provisioner.simulate.engine import World, run_window, run_windows
from provisioner.simulate.optimum import lower_bound_cost, optimum
from provisioner.simulate.replay import replay, total_steps
from provisioner.simulate.run import SimulateError, scenario_for, simulate
from provisioner.simulate.scenario import Scenario
from provisioner.simulate.traces import Trace, TraceError, nodes_trace, window_starts
from tests.conftest import shared_data

BENCH = parse_policy("name: bench\nrestart:\n  max_restarts: 10000\n  zone_cooldown: 0\n")
STEP = 360.0


def per_node_markov(ticks: int, nodes: int, seed: int) -> np.ndarray:
    """(ticks, nodes) of 0/1: each node up and down on its own (geometric runs), plus zone-wide
    outages that take every node (the multi-node traces are mostly all or none)."""
    rng = np.random.default_rng(seed)
    out = np.ones((ticks, nodes), dtype=np.int64)
    for j in range(nodes):
        up = True
        for i in range(ticks):
            if rng.random() < (1 / 40 if up else 1 / 3):
                up = not up
            out[i, j] = up
    zone_up = True
    for i in range(ticks):
        if rng.random() < (1 / 60 if zone_up else 1 / 8):
            zone_up = not zone_up
        if not zone_up:
            out[i] = 0
    return out


def gang_windows(nodes: int, count: int, sc: Scenario, zones: int, seed: int) -> np.ndarray:
    """(windows, steps, zones): the gang availability of ``nodes`` out of 8 per-node columns."""
    k = total_steps(sc)
    ticks = 6 * k
    cols = []
    for z in range(zones):
        tr = nodes_trace(per_node_markov(ticks, 8, seed + z), STEP, f"z{z}")
        cols.append(tr.available_on(STEP, nodes))
    full = np.stack(cols, axis=1)
    starts = window_starts(len(full) - k, sc.window_steps, count, seed)
    return full[starts[:, None] + np.arange(k)[None, :]]


def test_a_gang_is_up_while_at_least_n_of_its_zone_s_nodes_are() -> None:
    per_node = [
        [1, 1, 1, 1],
        [1, 1, 0, 1],  # node 2 is lost
        [0, 0, 1, 1],
        [0, 0, 0, 0],
        [1, 1, 1, 1],
        [1, 1, 1, 1],
    ]
    tr = nodes_trace(per_node, 300.0, "us-west-2a_v100_4")
    assert tr.zone == "us-west-2a" and tr.peak == 4
    assert tr.values.tolist() == [4, 3, 2, 0, 4, 4]
    assert tr.available(4).tolist() == [True, False, False, False, True, True]
    assert tr.available(3).tolist() == [True, True, False, False, True, True]
    assert tr.available(1).tolist() == [True, True, True, False, True, True]
    # on a coarser step the gang is up only where it was up for the whole step
    assert tr.available_on(600.0, 4).tolist() == [False, False, True]
    assert tr.available_on(600.0, 2).tolist() == [True, False, True]
    with pytest.raises(TraceError, match="0 or 1"):
        nodes_trace([[1, 2]], 300.0)
    with pytest.raises(TraceError, match=r"\(ticks, nodes\)"):
        nodes_trace(np.asarray([1, 0, 1]), 300.0)


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_a_gang_pays_every_node_in_every_driver(nodes: int) -> None:
    """Where the gang's availability is the single node's (every node moves together), every
    figure is the single node's times ``nodes``: engine, replay, optimum, lower bound."""
    # a gang's switches are made before break, as the single node's
    one = Scenario(work_s=4 * 3600, deadline_s=6 * 3600, overhead_s=720, step_s=STEP)
    gang = Scenario(work_s=4 * 3600, deadline_s=6 * 3600, overhead_s=720, step_s=STEP, nodes=nodes)
    col = per_node_markov(6 * total_steps(one), 1, seed=nodes)
    lockstep = nodes_trace(np.repeat(col, nodes, axis=1), STEP)
    single = nodes_trace(col, STEP)
    assert np.array_equal(lockstep.available_on(STEP, nodes), single.available_on(STEP))
    k = total_steps(one)
    starts = window_starts(len(col) - k, one.window_steps, 6, seed=3)
    av = single.available_on(STEP)[starts[:, None] + np.arange(k)[None, :]][:, :, None]
    assert gang.on_demand_cost == pytest.approx(nodes * one.on_demand_cost)
    opt1, optn = optimum(av, one).cost, optimum(av, gang).cost
    assert np.allclose(optn, nodes * opt1, rtol=1e-12)
    assert np.allclose(lower_bound_cost(av, gang), nodes * lower_bound_cost(av, one))
    world = World(["us-west-2a"])
    for name in ("greedy", "provisioner"):
        r1, rn = replay(get_strategy(name), av, one), replay(get_strategy(name), av, gang)
        assert np.allclose(rn.cost, nodes * r1.cost, rtol=1e-12), name
        assert np.array_equal(rn.launches, r1.launches), name  # one changeover per gang launch
        en = run_windows(BENCH, av, gang, world, strategy=name)
        assert np.allclose(en.cost, rn.cost, rtol=0, atol=1e-9), name  # engine == replay


@pytest.mark.parametrize(("nodes", "zones"), [(4, 1), (8, 1), (4, 3)])
def test_the_optimum_on_gang_availability_is_at_most_every_strategy(nodes: int, zones: int) -> None:
    sc = Scenario(work_s=6 * 3600, deadline_s=7.5 * 3600, overhead_s=720, step_s=STEP, nodes=nodes)
    av = gang_windows(nodes, 16, sc, zones, seed=11 + nodes)
    assert av.any() and not av.all()  # the gang is up some of the time, not all of it
    opt = optimum(av, sc).cost
    assert np.all(np.isfinite(opt))
    assert np.all(lower_bound_cost(av, sc) <= opt + 1e-9)
    assert np.all(opt <= sc.on_demand_cost + 1e-9)
    for name in COMPARED:
        r = replay(get_strategy(name), av, sc)
        assert np.all(opt <= r.cost + 1e-9), name
        assert not r.missed.any(), name
    # the decide()-driven engine agrees with the replay on gang windows too
    world = World([f"us-west-2{'abc'[z]}" for z in range(zones)])
    for name in ("greedy", "learned"):
        fast = replay(get_strategy(name), av[:4], sc)
        slow = run_windows(BENCH, av[:4], sc, world, strategy=name)
        assert np.allclose(fast.cost, slow.cost, rtol=0, atol=1e-9), name
        assert np.array_equal(fast.launches, slow.launches), name


def test_losing_one_node_restarts_the_whole_gang() -> None:
    """A 4-node gang on 4 nodes, node 2 lost for one tick: the gang is preempted (the work
    since its checkpoint lost, once), relaunched whole with one changeover, and billed x 4;
    exactly what a single instance that was lost then costs, times 4. A gang of 3 on the same
    nodes never notices."""
    ticks = 60
    per_node = np.ones((ticks, 4), dtype=np.int64)
    per_node[15, 2] = 0
    tr = nodes_trace(per_node, STEP, "us-west-2a_v100_4")
    one_col = nodes_trace(per_node[:, 2:3], STEP, "us-west-2a_v100_1")
    single = Scenario(2 * 3600, 4 * 3600, 720, STEP, checkpoint_s=1800)
    world = World(["us-west-2a"])
    four = replace(single, nodes=4)
    r4 = run_window(BENCH, tr.available_on(STEP, 4), four, world, strategy="greedy")
    assert r4["preemptions"] == 1 and r4["restarts"] == 1 and r4["launches"] == 2
    # launched at 0, 2 steps of changeover, 13 steps of work to step 15: 1.3 h done, the
    # checkpoint at 1 h: 0.3 h lost, once for the whole gang
    assert r4["lost_work_hours"] == pytest.approx(0.3)
    assert not r4["deadline_missed"]
    r1 = run_window(BENCH, one_col.available_on(STEP), single, world, strategy="greedy")
    assert r4["cost"] == pytest.approx(4 * r1["cost"])
    assert r4["spot_hours"] == pytest.approx(r1["spot_hours"])  # gang-hours: one changeover
    assert r4["finish_hours"] == pytest.approx(r1["finish_hours"])
    # billed: steps 0-14 (1.5 h), then from step 16 one changeover and the 1 h left (1.2 h)
    assert r4["spot_hours"] == pytest.approx(2.7)
    assert r4["cost"] == pytest.approx(4 * single.price_spot * 2.7)
    three = replace(single, nodes=3)
    r3 = run_window(BENCH, tr.available_on(STEP, 3), three, world, strategy="greedy")
    assert r3["preemptions"] == 0 and r3["restarts"] == 0 and r3["lost_work_hours"] == 0
    assert r3["cost"] == pytest.approx(3 * single.price_spot * (2 * 3600 + 720) / 3600)


def test_decide_sees_the_gang_s_hourly_cost() -> None:
    """The simulated policy is the gang's (resources.nodes = N) and its candidates carry N:
    an hourly budget that one node fits but four do not keeps the gang off that market."""
    policy = parse_policy(
        "name: cap\nbudget:\n  max_price_per_hour: 10\nrestart:\n  zone_cooldown: 0\n"
    )
    av = np.ones(40, dtype=bool)
    one = Scenario(work_s=3600, deadline_s=3 * 3600, overhead_s=720, step_s=STEP)
    four = Scenario(work_s=3600, deadline_s=3 * 3600, overhead_s=720, step_s=STEP, nodes=4)
    world = World(["us-west-2a"])
    assert run_window(policy, av, one, world)["failed"] == ""
    # 4 x 0.97 = 3.88 $/h fits, 4 x 3.06 = 12.24 $/h does not: spot only, never on-demand
    r = run_window(policy, av, four, world)
    assert r["on_demand_hours"] == 0 and r["spot_hours"] > 0 and r["failed"] == ""
    sixteen = Scenario(work_s=3600, deadline_s=3 * 3600, overhead_s=720, step_s=STEP, nodes=16)
    with pytest.raises(SimulateError, match="no trace zone can be used"):
        simulate(policy, [Trace("us-west-2a", "us-west-2a", STEP, np.full(40, 16.0))], sixteen)


def _files(tmp_path: Path, data: list[int], policy: str) -> tuple[Path, Path]:
    trace = tmp_path / "us-west-2a_v100_4.json"
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))
    pol = tmp_path / "p.yaml"
    pol.write_text(policy)
    return trace, pol


def test_nodes_is_checked_1_to_64(tmp_path: Path) -> None:
    from provisioner.cli import cli

    data = [4, 4, 3, 4, 4, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4] * 3
    trace, pol = _files(tmp_path, data, "name: g\njob:\n  compute_hours: 2\ndeadline: 4h\n")
    base = ["simulate", "--policy", str(pol), "--trace", str(trace)]
    for bad in ("0", "65", "-1", "two"):
        out = CliRunner().invoke(cli, [*base, "--nodes", bad])
        assert out.exit_code == 2, (bad, out.output)
        assert "--nodes" in out.output, out.output
    out = CliRunner().invoke(cli, [*base, "--nodes", "65"])
    assert "1<=x<=64" in out.output, out.output
    # a gang larger than any trace shows: said plainly, exit 2
    out = CliRunner().invoke(cli, [*base, "--nodes", "8"])
    assert out.exit_code == 2 and "needs a multi-node trace" in out.output, out.output
    assert "at most 4" in out.output
    ok = CliRunner().invoke(cli, [*base, "--nodes", "4", "--json", "--windows", "3"])
    assert ok.exit_code == 0, ok.output
    rep = json.loads(ok.output)
    assert rep["nodes"] == 4
    s = rep["summary"]
    assert s["on_demand_only_cost"] == pytest.approx(4 * 3.06 * (2 + 0.2))
    assert s["optimum_cost"] <= s["cost_mean"] + 1e-9
    for bad_n in (0, 65, 2.5, True):
        with pytest.raises(ValueError, match="from 1 to 64"):
            Scenario(work_s=1, deadline_s=2, overhead_s=0, step_s=1, nodes=bad_n)  # type: ignore[arg-type]
    t = Trace("z", "z", 600.0, np.asarray(data, dtype=float))
    with pytest.raises(SimulateError, match="from 1 to 64"):
        scenario_for(BENCH, [t], work_h=1, deadline_h=2, nodes=65)


def test_the_policy_s_resources_nodes_is_the_default_gang(tmp_path: Path) -> None:
    from provisioner.cli import cli

    data = [4, 4, 4, 4, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4] * 3
    trace, pol = _files(
        tmp_path, data, "name: g\njob:\n  compute_hours: 2\ndeadline: 4h\nresources:\n  nodes: 4\n"
    )
    out = CliRunner().invoke(cli, ["simulate", "--policy", str(pol), "--trace", str(trace)])
    assert out.exit_code == 0, out.output
    assert "a gang of 4 nodes" in out.output
    rep = json.loads(
        CliRunner()
        .invoke(cli, ["simulate", "--policy", str(pol), "--trace", str(trace), "--json"])
        .output
    )
    assert rep["nodes"] == 4 and rep["windows"][0]["preemptions"] == 1
    one = json.loads(
        CliRunner()
        .invoke(
            cli,
            ["simulate", "--policy", str(pol), "--trace", str(trace), "--json", "--nodes", "1"],
        )
        .output
    )
    assert one["nodes"] == 1 and one["windows"][0]["preemptions"] == 0


@pytest.mark.data
@pytest.mark.parametrize("nodes", [4, 8, 16])
def test_gangs_on_the_16_node_set(nodes: int) -> None:
    """Benchmark-style: the 2023-08-27 16-node availability traces (counts of 16 p3.2xlarge),
    a few windows per zone: the optimum is at most every strategy, none misses a deadline,
    and a bigger gang is up less often (so its optimum costs more per node)."""
    d = shared_data("traces", "cant_be_late", "availability", "16-node", "aws-08-27-2023")
    from provisioner.simulate.traces import load_trace, step_for

    traces = [load_trace(p) for p in sorted(d.glob("*.json"))]
    assert [t.peak for t in traces] == [16, 16, 16]
    step = step_for(720, traces[0].gap_s)
    sc = Scenario(24 * 3600, 30 * 3600, 720, step, nodes=nodes)
    k = total_steps(sc)
    for t in traces:
        gang, single = t.available_on(step, nodes), t.available_on(step)
        assert gang.mean() <= single.mean() and np.all(single[gang])
        starts = window_starts(len(gang) - k, sc.window_steps, 8, seed=nodes)
        av = gang[starts[:, None] + np.arange(k)[None, :]][:, :, None]
        opt = optimum(av, sc).cost
        for name in COMPARED:
            r = replay(get_strategy(name), av, sc)
            assert np.all(opt <= r.cost + 1e-9) and not r.missed.any(), (t.zone, name)


def test_restarts_mean_one_thing_in_the_engine_and_the_replay() -> None:
    """A restart is a relaunch after an interruption (the daemon's ``job.restarts``: its
    preempted attempts): the decide()-driven engine, the vectorised replay (cost_bench, the
    estimate) and so ``provisioner simulate`` count the same, and a switch of market or zone
    the strategy chose is a launch but not a restart."""
    sc = Scenario(work_s=6 * 3600, deadline_s=7.5 * 3600, overhead_s=720, step_s=STEP, nodes=4)
    av = gang_windows(4, 12, sc, 3, seed=5)
    world = World(["us-west-2a", "us-west-2b", "us-west-2c"])
    fast = replay(get_strategy("provisioner"), av, sc)
    slow = run_windows(BENCH, av, sc, world, strategy="provisioner")
    rows = [slow.row(i) for i in range(len(slow))]
    assert np.array_equal(fast.restarts, fast.preemptions)
    assert np.array_equal(fast.restarts, [r["restarts"] for r in rows])
    assert np.array_equal(fast.launches, [r["launches"] for r in rows])


@pytest.mark.data
def test_simulate_nodes_4_prints_the_replay_s_restarts() -> None:
    """`provisioner simulate --nodes 4` on the 4-node preemption set prints, per window, the
    restarts the vectorised replay counts on the same windows."""
    from provisioner.simulate.traces import load_trace

    d = shared_data("traces", "cant_be_late", "preemption", "4-node", "aws-08-03-2023")
    traces = [load_trace(p) for p in sorted(d.glob("*.json"))]
    sc = scenario_for(BENCH, traces, work_h=12.0, deadline_h=15.0, nodes=4, checkpoint_loss=False)
    rep = simulate(BENCH, traces, sc, windows=12, seed=0, strategy="provisioner")
    n = min(t.steps(sc.step_s) for t in traces)
    avail = np.stack([t.available_on(sc.step_s, 4)[:n] for t in traces], axis=1)
    k = total_steps(sc)
    rows = rep["windows"]
    starts = [round(r["start_hours"] * 3600 / sc.step_s) for r in rows]
    fast = replay(get_strategy("provisioner"), np.stack([avail[s : s + k] for s in starts]), sc)
    assert [r["restarts"] for r in rows] == [int(x) for x in fast.restarts]
    # the strategy's own switches are launches, not restarts (where `launches - 1` was read
    # as restarts, `simulate` and the replay disagreed)
    assert any(r["launches"] - 1 > r["restarts"] for r in rows)
    assert rep["summary"]["restarts"] == pytest.approx(float(fast.restarts.mean()))
