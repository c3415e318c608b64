from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from policies import parse_policy
from provisioner.core.strategies import COMPARED, NONE, get_strategy
from provisioner.simulate.engine import Timeline, World, run_window, run_windows
from provisioner.simulate.optimum import lower_bound_cost, optimum, optimum_cost
from provisioner.simulate.replay import replay, total_steps
from provisioner.simulate.scenario import Scenario
from provisioner.simulate.traces import load_trace, step_for, window_starts

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
TRACES = SHARED / "traces" / "cant_be_late" / "availability" / "1-node"
BENCH = parse_policy("name: bench\nrestart:\n  max_restarts: 10000\n  zone_cooldown: 0\n")
STEP = 360.0


def markov(n: int, up_mean: float, down_mean: float, rng: np.random.Generator) -> np.ndarray:
    """0/1 availability with geometric up and down runs (means in steps)."""
    out = np.empty(n, dtype=bool)
    state = rng.random() < up_mean / (up_mean + down_mean)
    for i in range(n):
        out[i] = state
        if rng.random() < 1.0 / (up_mean if state else down_mean):
            state = not state
    return out


def synthetic(windows: int, steps: int, zones: int, seed: int) -> np.ndarray:
    """(windows, steps, zones) from a mix of regimes: flappy, long outages, mostly up."""
    rng = np.random.default_rng(seed)
    regimes = [(1.5, 1.5), (8.0, 4.0), (30.0, 3.0), (3.0, 12.0)]
    out = np.empty((windows, steps, zones), dtype=bool)
    for w in range(windows):
        for z in range(zones):
            up, down = regimes[(w + z) % len(regimes)]
            out[w, :, z] = markov(steps, up, down, rng)
    return out


def scenario(work_h: float, frac: float, d_min: float) -> Scenario:
    work = work_h * 3600
    deadline = round(work / frac / STEP) * STEP
    return Scenario(work_s=work, deadline_s=deadline, overhead_s=d_min * 60, step_s=STEP)


CASES = [(6.0, 0.8, 12.0, 1), (6.0, 0.5, 6.0, 1), (6.0, 0.9, 12.0, 3), (4.0, 0.7, 6.0, 3)]


@pytest.mark.parametrize(("work_h", "frac", "d_min", "zones"), CASES)
def test_the_four_properties_on_synthetic_windows(
    work_h: float, frac: float, d_min: float, zones: int
) -> None:
    sc = scenario(work_h, frac, d_min)
    avail = synthetic(24, total_steps(sc), zones, seed=zones * 10 + int(d_min))
    opt = optimum_cost(avail, sc)
    assert np.all(lower_bound_cost(avail, sc) <= opt + 1e-9)
    for name in COMPARED:
        r = replay(get_strategy(name), avail, sc)
        assert np.all(opt <= r.cost + 1e-9), name
        assert not r.missed.any(), name
    free = Scenario(work_s=sc.work_s, deadline_s=sc.deadline_s, overhead_s=0.0, step_s=STEP)
    greedy = replay(get_strategy("greedy"), avail, free)
    assert np.allclose(greedy.cost, optimum_cost(avail, free), rtol=0, atol=1e-9)


def _brute_force(avail: np.ndarray, sc: Scenario) -> float:
    """Cheapest feasible schedule by enumerating every per-step choice (tiny cases only)."""
    n, n_z = avail.shape
    c, k = round(sc.work_s / sc.step_s), round(sc.overhead_s / sc.step_s)
    a, b = sc.price_on_demand * sc.step_s / 3600, sc.price_spot * sc.step_s / 3600
    best = np.inf
    price = [0.0, a] + [b] * n_z
    plain = 2 + n_z  # then the switches made before break, to mode 1, 2, ...
    for seq in itertools.product(range(plain + 1 + n_z), repeat=n):  # 0 idle, 1 od, 2+z spot
        prev, pend, done, cost, old, handing = 0, 0, 0, 0.0, 0, 0
        for t, m in enumerate(seq):
            if done >= c:
                break
            before = m >= plain
            m = m - plain + 1 if before else m
            bad = (handing and (before or m != prev)) or (m >= 2 and not avail[t, m - 2])
            if bad or (handing and old >= 2 and not avail[t, old - 2]):
                cost = np.inf
                break
            if m == 0:
                prev = 0
                continue
            if before:  # the old one works on and bills for the k steps of the changeover
                gone = prev >= 2 and not avail[t, prev - 2]
                if prev == 0 or m == prev or k == 0 or pend or gone:  # from a settled one
                    cost = np.inf
                    break
                old, handing, pend = prev, k, k
            elif m != prev:
                pend = k
            prev = m
            cost += price[m]
            if handing:
                cost += price[old]
                done += 1
                handing -= 1
                pend -= 1
            elif pend:
                pend -= 1
            else:
                done += 1
        if done >= c:
            best = min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_the_optimum_is_exact_on_tiny_windows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    zones = 1 if seed < 4 else 2
    n = 7 if zones == 1 else 6
    sc = Scenario(
        work_s=(3 + seed % 2) * STEP,
        deadline_s=n * STEP,
        overhead_s=(1 + seed % 2) * STEP,
        step_s=STEP,
    )
    avail = rng.random((n, zones)) < 0.6
    assert optimum_cost(avail[None], sc)[0] == pytest.approx(_brute_force(avail, sc), abs=1e-9)


def test_the_optimum_schedule_adds_up() -> None:
    sc = scenario(6.0, 0.8, 12.0)
    avail = synthetic(12, total_steps(sc), 2, seed=5)
    res = optimum(avail, sc, schedule=True)
    assert res.od_hours is not None and res.spot_hours is not None
    assert np.allclose(res.cost, sc.price_on_demand * res.od_hours + sc.price_spot * res.spot_hours)
    assert np.allclose(res.od_work_hours + res.spot_work_hours, 6.0)  # type: ignore[operator]
    assert np.allclose(res.cost, optimum_cost(avail, sc))


@pytest.mark.parametrize("observed", [True, False], ids=["observed", "oracle"])
@pytest.mark.parametrize("zones", [1, 3])
def test_replay_and_decide_agree_on_synthetic_windows(zones: int, observed: bool) -> None:
    """Both paths, told what a daemon knows (the default) or the oracle's knowledge."""
    sc = scenario(6.0, 0.75, 12.0)
    avail = synthetic(6, total_steps(sc), zones, seed=zones)
    world = World([f"us-east-1{'abc'[z]}" for z in range(zones)])
    for name in COMPARED:
        fast = replay(get_strategy(name), avail, sc, observed=observed)
        slow = run_windows(BENCH, avail, sc, world, strategy=name, observed=observed)
        for field in ("cost", "od_hours", "spot_hours", "finish_h", "launches", "preemptions"):
            assert np.allclose(getattr(fast, field), getattr(slow, field), rtol=0, atol=1e-9), (
                name,
                field,
            )


def test_what_the_daemon_cannot_know_changes_the_runs() -> None:
    """The default (what a daemon knows) is not the oracle: ours returns from on-demand on
    how long spot has been up, which a daemon learns only from its own refused launches and
    preemptions; both paths agree on that difference."""
    sc = scenario(6.0, 0.75, 12.0)
    avail = synthetic(6, total_steps(sc), 1, seed=1)
    ours = get_strategy("provisioner")
    observed, oracle = replay(ours, avail, sc), replay(ours, avail, sc, observed=False)
    assert not np.allclose(observed.cost, oracle.cost)
    slow = run_windows(BENCH, avail, sc, World(["us-east-1a"]), strategy="provisioner")
    assert np.allclose(slow.cost, observed.cost, rtol=0, atol=1e-9)


def test_checkpoint_loss_is_counted_and_the_deadline_still_holds() -> None:
    sc = scenario(6.0, 0.8, 12.0)
    lossy = Scenario(sc.work_s, sc.deadline_s, sc.overhead_s, sc.step_s, checkpoint_s=1800.0)
    avail = synthetic(8, total_steps(sc), 1, seed=11)
    r = run_windows(BENCH, avail, lossy, World(["z1a"]))
    assert r.lost_work_hours.sum() > 0
    assert not r.missed.any()


def test_restart_limit_and_budget_end_the_job() -> None:
    sc = scenario(6.0, 0.8, 12.0)
    flappy = np.tile(np.array([True, False]), total_steps(sc))[: total_steps(sc), None]
    limited = parse_policy("name: t\nrestart:\n  max_restarts: 1\n  zone_cooldown: 0\n")
    row = run_window(limited, flappy, sc, World(["z1a"]), strategy="greedy")
    assert "restarts exhausted" in row["failed"] and row["deadline_missed"]
    poor = parse_policy("name: t\nbudget:\n  max_total: 5\n")
    row = run_window(poor, flappy, sc, World(["z1a"]), strategy="on-demand")
    assert "budget" in row["failed"] and row["cost"] <= 5.0


def test_time_windows_are_respected() -> None:
    sc = Scenario(work_s=6 * 3600, deadline_s=36 * 3600, overhead_s=720, step_s=STEP)
    nightly = parse_policy("name: t\nwindows:\n  - cron: '0 0 * * *'\n    duration: 8h\n")
    tl = Timeline()
    up = np.ones((total_steps(sc), 1), dtype=bool)
    row = run_window(nightly, up, sc, World(["z1a"]), timeline=tl)  # starts at 00:00
    t = np.asarray(tl.t_h)
    market = np.asarray(tl.market)
    assert not row["deadline_missed"]
    assert np.all(market[(t % 24) >= 8] == NONE)


def _trace_file(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    data = markov(400, 20, 5, rng).astype(int).tolist()
    p = tmp_path / "us-east-1a_v100_1.json"
    p.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))
    return p


def test_cli_simulate_json_and_plot(tmp_path: Path) -> None:
    from provisioner.cli import cli

    pol = tmp_path / "p.yaml"
    pol.write_text("name: cli\njob:\n  compute_hours: 8\ndeadline: 10h\n")
    png = tmp_path / "run.png"
    res = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--policy",
            str(pol),
            "--trace",
            str(_trace_file(tmp_path)),
            "--windows",
            "3",
            "--json",
            "--plot",
            str(png),
        ],
    )
    assert res.exit_code in (0, 6), res.output
    doc = json.loads(res.output)
    assert doc["strategy"] == "provisioner" and len(doc["windows"]) == 3
    s = doc["summary"]
    assert s["lower_bound_cost"] <= s["optimum_cost"] + 1e-9
    assert png.exists() and png.stat().st_size > 10_000
    text = CliRunner().invoke(
        cli, ["simulate", "--policy", str(pol), "--trace", str(_trace_file(tmp_path))]
    )
    assert "reference (mean)" in text.output and "offline optimum" in text.output
    assert "oracle" not in text.output
    told = json.loads(
        CliRunner()
        .invoke(cli, ["simulate", "--policy", str(pol), "--trace", str(_trace_file(tmp_path)),
                      "--windows", "3", "--json"])
        .output
    )  # fmt: skip
    assert told["knowledge"] == "daemon"  # the default: what the daemon can know
    argv = ["simulate", "--policy", str(pol), "--trace", str(_trace_file(tmp_path)), "--oracle"]
    oracle = CliRunner().invoke(cli, [*argv, "--windows", "3", "--json"])
    assert json.loads(oracle.output)["knowledge"] == "oracle", oracle.output
    assert "upper bound no daemon reaches" in CliRunner().invoke(cli, argv).output


def test_cli_simulate_counts_a_failed_window_once(tmp_path: Path) -> None:
    """Every window ends on the budget: none met (not -N of N), exit 6, and no cost / optimum
    drawn from spend that paid for no finished job."""
    from provisioner.cli import cli

    pol = tmp_path / "p.yaml"
    pol.write_text(
        "name: poor\njob:\n  compute_hours: 8\ndeadline: 10h\n"
        "budget:\n  max_total: 1\n  on_exhausted: stop\n"
    )
    argv = ["simulate", "--policy", str(pol), "--trace", str(_trace_file(tmp_path))]
    res = CliRunner().invoke(cli, [*argv, "--windows", "2", "--json"])
    assert res.exit_code == 6, res.output
    s = json.loads(res.output)["summary"]
    assert s["failed"] == 2 and s["deadlines_met"] == 0 and "cost_over_optimum" not in s
    text = CliRunner().invoke(cli, [*argv, "--windows", "2"], env={"COLUMNS": "160"}).output
    assert "0/2 met" in text and "-2/2" not in text and "cost / optimum" not in text


def test_cli_simulate_plot_without_matplotlib_says_how_to_install_it(tmp_path: Path) -> None:
    """On a plain install (no `plot` extra) --plot exits 2 naming the extra, no traceback: a
    real subprocess in which importing matplotlib fails as if it were not installed."""
    import os
    import subprocess
    import sys

    pol = tmp_path / "p.yaml"
    pol.write_text("name: cli\njob:\n  compute_hours: 8\ndeadline: 10h\n")
    png = tmp_path / "run.png"
    argv = ["simulate", "--policy", str(pol), "--trace", str(_trace_file(tmp_path))]
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'matplotlib':\n"
        "            raise ImportError(f'No module named {name!r}')\n"
        "        return None\n"
        "sys.meta_path.insert(0, Block())\n"
        "from provisioner.cli import main\n"
        f"main({[*argv, '--plot', str(png)]!r})\n"
    )
    env = {**os.environ, "COLUMNS": "200"}  # one line, however wide the terminal
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 2, done.stderr
    assert "pip install 'provisioner[plot]'" in done.stderr
    assert "Traceback" not in done.stderr and not png.exists()


def test_cli_simulate_bad_input(tmp_path: Path) -> None:
    from provisioner.cli import cli

    pol = tmp_path / "p.yaml"
    pol.write_text("name: cli\n")  # no work, no deadline
    bad = CliRunner().invoke(
        cli, ["simulate", "--policy", str(pol), "--trace", str(_trace_file(tmp_path))]
    )
    assert bad.exit_code == 2 and "--work" in bad.output
    missing = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--policy",
            str(pol),
            "--trace",
            str(tmp_path / "none.json"),
            "--work",
            "1h",
            "--deadline",
            "2h",
        ],
    )
    assert missing.exit_code == 2


def _real(
    name: str, d_s: float, frac: float, windows: int, seed: int
) -> tuple[np.ndarray, Scenario]:
    path = TRACES / name
    if not path.exists():
        pytest.skip("needs ../shared/data beside the repo")
    tr = load_trace(path)
    step = step_for(d_s, tr.gap_s)
    sc = Scenario(
        work_s=24 * 3600,
        deadline_s=round(24 * 3600 / frac / step) * step,
        overhead_s=d_s,
        step_s=step,
    )
    av = tr.available_on(step)
    k = total_steps(sc)
    starts = window_starts(len(av) - k, sc.window_steps, windows, seed)
    return av[starts[:, None] + np.arange(k)[None, :]][:, :, None], sc


@pytest.mark.data
@pytest.mark.parametrize(
    ("name", "d_s", "frac"),
    [
        ("aws-10-26-2022/us-west-2b_v100_8.json", 720.0, 0.8),
        ("aws-02-15-2023/us-east-1c_v100_1.json", 360.0, 0.9),
    ],
)
def test_the_four_properties_on_real_windows(name: str, d_s: float, frac: float) -> None:
    avail, sc = _real(name, d_s, frac, 12, seed=1)
    opt = optimum_cost(avail, sc)
    assert np.all(lower_bound_cost(avail, sc) <= opt + 1e-9)
    for strat in COMPARED:
        r = replay(get_strategy(strat), avail, sc)
        assert np.all(opt <= r.cost + 1e-9) and not r.missed.any(), strat
    # with no changeover Greedy is the optimum, told every zone's capacity now (the oracle): a
    # daemon remembers a refused launch for 5 min, longer than this trace's 3 min step
    free = Scenario(sc.work_s, sc.deadline_s, 0.0, sc.step_s)
    oracle = replay(get_strategy("greedy"), avail, free, observed=False)
    assert np.allclose(oracle.cost, optimum_cost(avail, free), atol=1e-9)


@pytest.mark.data
@pytest.mark.parametrize("observed", [True, False], ids=["observed", "oracle"])
def test_replay_and_decide_agree_on_real_windows(observed: bool) -> None:
    avail, sc = _real("aws-10-26-2022/us-west-2a_v100_8.json", 720.0, 0.8, 3, seed=2)
    world = World(["us-west-2a"])
    for name in COMPARED:
        fast = replay(get_strategy(name), avail, sc, observed=observed)
        slow = run_windows(BENCH, avail, sc, world, strategy=name, observed=observed)
        assert np.allclose(fast.cost, slow.cost, rtol=0, atol=1e-9), name
        assert np.array_equal(fast.launches, slow.launches), name


def test_a_policy_that_allows_no_trace_zone_is_refused_with_reasons(tmp_path: Path) -> None:
    from policies import parse_policy
    from provisioner.simulate.run import SimulateError, scenario_for, simulate
    from provisioner.simulate.traces import load_trace

    trace = tmp_path / "us-west-2a_v100_1.json"
    trace.write_text(
        '{"metadata": {"gap_seconds": 600}, "data": [1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1]}'
    )
    policy = parse_policy(
        "name: eu\nresidency: {allow: [EU]}\njob: {compute_hours: 0.5}\ndeadline: 1h\n"
    )
    t = load_trace(str(trace))
    with pytest.raises(SimulateError, match="outside the policy's residency"):
        simulate(policy, [t], scenario_for(policy, [t]))
