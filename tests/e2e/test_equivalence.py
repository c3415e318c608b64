"""The daemon does what the simulator measured (issue 16).

Each scenario runs twice: through the simulator's engine, and through the daemon's reconciler
on the sim provider (a real server process following the same trace on a virtual clock, a real
SQLite store), one pass per step. Both must take the same actions at the same steps (launches
with their market and zone, terminations, a failure), end the same way at the same step, and
cost the same within the billing granularity; the daemon's record of the cost must match what
the sim cloud billed. See tests/equivalence_util.py.

The simulator is told what a daemon can know (its default, ``run_window(observed=True)``:
its own refused launches and preemptions), so what ``provisioner simulate`` and the
benchmarks measure is what the daemon does. The oracle simulator (``observed=False``: every
zone without capacity, and how long capacity has been up where it is) is an upper bound no
daemon reaches; :func:`test_the_oracle_knows_what_the_daemon_cannot` shows where it differs.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from provisioner.core.rebalance import RebalanceModel
from tests.equivalence_util import (
    STEP_S,
    Case,
    changeover_h,
    explain,
    run_daemon,
    run_engine,
)

A, B = "us-east-1a", "us-east-1b"
JOB = """
name: equivalence
job:
  command: ["true"]
  compute_hours: {work}
  reference_gpu: V100  # hours on the instance the world has (no sizing between them)
market: spot-then-on-demand
deadline: {deadline}
restart:
  max_restarts: 50
  zone_cooldown: {cooldown}
"""


BUDGET = "budget:\n  max_total: 2.5\n  on_exhausted: stop\n"
GANG = "resources:\n  nodes: 2\n"


def job(work: float, deadline: str, cooldown: str = "0s", extra: str = "") -> str:
    return JOB.format(work=work, deadline=deadline, cooldown=cooldown) + extra


CASES = {
    # spot in A, lost at step 8; B comes up at 10 and is lost at 16; A is back (its cooldown
    # over) from 20: two preemptions, each a restart in the other zone
    "preemptions": Case(
        "preemptions",
        job(2, "12h", cooldown="30m"),
        {A: "U8 D12 U", B: "D10 U6 D4 U"},
    ),
    # no spot for 1.5 h: the slack runs low and the job goes to on-demand; spot is back at
    # step 15 and stays: once it has lasted the break-even time the job goes back to spot
    "spot-returns": Case(
        "spot-returns",
        job(2, "4h"),
        {A: "D15 U", B: "D"},
    ),
    # spot until step 10, then none: the deadline leaves no room to wait, on-demand finishes;
    # at 16 it looks at spot in A (it has not seen it go since), is refused, and on-demand
    # runs on untouched: a refused look costs nothing
    "deadline": Case(
        "deadline",
        job(2, "3h"),
        {A: "U10 D", B: "D"},
    ),
    # two preemptions each cost a changeover again; at the second (step 15) spot is back in
    # A, but the third launch no longer fits the budget: the job fails
    "budget": Case(
        "budget",
        job(2, "12h", cooldown="30m", extra=BUDGET),
        {A: "U10 D5 U", B: "D10 U5 D"},
    ),
    # windows of one hour every two hours: the job stops when one closes, resumes at the next
    "windows": Case(
        "windows",
        job(1.5, "8h", extra='windows:\n  - cron: "0 */2 * * *"\n    duration: 1h\n'),
        {A: "U", B: "U"},
    ),
    # overlap on notice: A's capacity goes at step 8 with a notice of one step (as long as
    # AWS's two minutes are to a 2-minute pass); the replacement starts in B during the notice,
    # both billed for that step, and A is gone at 9: no step without an instance
    "overlap": Case(
        "overlap",
        job(2, "12h", cooldown="30m"),
        {A: "U8 D", B: "U"},
        notice_s=STEP_S,
    ),
    # the budget case without a zone cooldown: after the second preemption (step 15) no zone
    # has spot; the daemon does not know it and fails at once, on the budget (the oracle would
    # wait until B is back, and fail then: see ORACLE_DIFFERS)
    "budget-capacity-unknown": Case(
        "budget-capacity-unknown",
        job(2, "12h", extra=BUDGET),
        {A: "U10 D", B: "D10 U5 D5 U"},
    ),
    # on on-demand, a look at spot in B (never seen down) is refused; on-demand runs on
    "refused-look": Case(
        "refused-look",
        job(2, "4h"),
        {A: "D", B: "D"},
    ),
    # the accepted look (spot-returns): spot launched beside on-demand, which works on until
    # spot's changeover is over (two steps) and is stopped then
    "accepted-look": Case(
        "accepted-look",
        job(2, "4h"),
        {A: "D15 U", B: "D"},
    ),
    # the look accepted at 16 is preempted at 17, inside its changeover: on-demand, still
    # running, carries on; nothing else is launched, nothing is lost
    "look-preempted": Case(
        "look-preempted",
        job(2, "4h"),
        {A: "D16 U1 D", B: "D"},
    ),
    # the accepted look with the daemon killed (-9) before each pass of the overlap: a new
    # process finds the two instances in the store and the cloud and hands over all the same
    "crash-in-overlap": Case(
        "crash-in-overlap",
        job(2, "4h"),
        {A: "D15 U", B: "D"},
        crashes=(18, 19, 20, 21),
    ),
    # a gang of two: the accepted look made before break as for one instance: two spot
    # nodes launched beside the two on-demand ones, which work on until the new gang's
    # changeover is over and are stopped then (both nodes)
    "gang-accepted-look": Case(
        "gang-accepted-look",
        job(2, "4h", extra=GANG),
        {A: "D15 U", B: "D"},
        nodes=2,
    ),
    # the gang's look lost inside its changeover: the on-demand gang carries on
    "gang-look-preempted": Case(
        "gang-look-preempted",
        job(2, "4h", extra=GANG),
        {A: "D16 U1 D", B: "D"},
        nodes=2,
    ),
    # the gang's accepted look with the daemon killed (-9) before each pass of the overlap
    "gang-crash-in-overlap": Case(
        "gang-crash-in-overlap",
        job(2, "4h", extra=GANG),
        {A: "D15 U", B: "D"},
        crashes=(18, 19, 20, 21),
        nodes=2,
    ),
    # held capacity: a capacity block in A ends after 2 h, mid-job; the job runs on it first
    # ($0/h marginal), and from its notice (40 minutes before its end, step 14) moves to spot
    # in B made before break; the block's instance works until its usable end (30 minutes
    # before the end, step 15), when it goes
    "block-ends": Case(
        "block-ends",
        job(2, "12h", cooldown="30m", extra="market: reserved-then-spot-then-on-demand\n").replace(
            "market: spot-then-on-demand\n", "", 1
        ),
        {A: "U", B: "U"},
        blocks=(("cb-1", A, 2.0),),
    ),
    # early signals: a rebalance recommendation three steps before A's capacity goes (step 8)
    # starts a look at 5 in B, made before break; A hands over once B's changeover is over
    # (7), before the notice would have come: nothing lost, no preemption
    "rebalance": Case(
        "rebalance",
        job(2, "12h", cooldown="30m"),
        {A: "U8 D", B: "U"},
        rebalance=RebalanceModel(lead_s=3 * STEP_S, precede_p=1.0, false_per_day=0.0),
    ),
    # a false alarm: recommendations not followed by an interruption (A and B always up);
    # each is worth a look elsewhere, which costs its overlap
    "rebalance-false-alarm": Case(
        "rebalance-false-alarm",
        job(2, "12h"),
        {A: "U", B: "U"},
        rebalance=RebalanceModel(lead_s=3 * STEP_S, precede_p=1.0, false_per_day=12.0, seed=1),
    ),
    # the look on the recommendation is refused (B has no capacity): A runs on untouched
    # until its capacity goes at 8, then the job waits for spot
    "rebalance-refused-look": Case(
        "rebalance-refused-look",
        job(2, "12h"),
        {A: "U8 D", B: "D"},
        rebalance=RebalanceModel(lead_s=3 * STEP_S, precede_p=1.0, false_per_day=0.0),
    ),
}

# Differences found by this test and fixed since (each confirmed by removing it alone): the
# changeover (0.1 h vs 0.2 h), no spot_up_since at all, zone cooldowns dropping on-demand in
# the planner, a terminated attempt billed on, a zone cooldown ending exactly now kept in force
# by the daemon (budget: failed at 16 vs 15), and the simulator's oracle knowledge of spot
# capacity (below: the simulator now measures with what the daemon knows).
#
# A switch is made before break: the new instance is launched first, the running one stopped
# once the new one has taken over; a refused launch leaves it running. Both drivers do exactly
# that; a change of the order must change both.


@pytest.mark.parametrize("name", list(CASES))
def test_daemon_does_what_the_simulator_measured(name: str, tmp_path: Path) -> None:
    _assert_same(CASES[name], tmp_path)


#: Where the oracle simulator does better than any daemon can, and why.
ORACLE_DIFFERS: dict[str, str] = {
    # spot_up_since: while on on-demand the daemon tries no spot, so it sees no outage
    "spot-returns": "the oracle leaves on-demand at 17 (spot up for the break-even time), "
    "the daemon at 16 (it saw no outage, so spot counts as up since the start)",
    # capacity errors: the daemon knows only the zones it tried in the last 5 min
    "budget-capacity-unknown": "the oracle knows no zone has spot at 15 and waits (failing at "
    "20, B back, the launch does not fit); the daemon fails at once on the budget",
    "accepted-look": "as spot-returns",
    "crash-in-overlap": "as spot-returns",
    "gang-accepted-look": "as spot-returns",
    "gang-crash-in-overlap": "as spot-returns",
    "gang-look-preempted": "as look-preempted",
    "look-preempted": "the oracle never looks (spot is not up for the break-even time); the "
    "daemon's look at 16 is lost inside its changeover",
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_oracle_knows_what_the_daemon_cannot(name: str) -> None:
    """The oracle simulator (``observed=False``) differs from the default one exactly in the
    scenarios where knowing spot capacity the daemon cannot see changes the run."""
    told, oracle = run_engine(CASES[name]), run_engine(CASES[name], observed=False)
    same = (told.effects, told.outcome) == (oracle.effects, oracle.outcome)
    assert same == (name not in ORACLE_DIFFERS), ORACLE_DIFFERS.get(name, "") + explain(
        oracle, told
    )


def _assert_same(case: Case, tmp_path: Path) -> None:
    engine = run_engine(case)
    daemon = run_daemon(case, tmp_path)
    why = explain(engine, daemon)
    assert not daemon.notes, why  # every pass ran through
    assert daemon.cloud_bill is not None
    assert abs(daemon.cost - daemon.cloud_bill) <= daemon.granularity(), "record vs bill" + why
    assert daemon.effects == engine.effects, why
    assert daemon.outcome == engine.outcome, why
    assert abs(daemon.cost - engine.cost) <= daemon.granularity(), why


def test_the_scenarios_show_what_they_are_named_for() -> None:
    """The engine's side of each scenario does what the scenario is there to exercise."""
    runs = {n: run_engine(c) for n, c in CASES.items()}
    kinds = {n: [(e.kind, e.market) for e in r.effects] for n, r in runs.items()}
    assert runs["preemptions"].outcome[0] == "succeeded"
    assert sum(k == ("launch", "spot") for k in kinds["preemptions"]) >= 3
    spot_returns = kinds["spot-returns"]
    od = spot_returns.index(("launch", "on-demand"))
    assert ("launch", "spot") in spot_returns[od:], spot_returns
    assert ("launch", "on-demand") in kinds["deadline"]
    assert runs["deadline"].outcome[0] == "succeeded"
    assert runs["budget"].outcome == ("failed", 15)
    assert runs["budget-capacity-unknown"].outcome == ("failed", 15)
    assert run_engine(CASES["budget-capacity-unknown"], observed=False).outcome == ("failed", 20)
    # the replacement launched at the notice (step 8), nothing terminated: A's capacity went
    assert [(e.step, e.kind, e.zone) for e in runs["overlap"].effects] == [
        (0, "launch", A),
        (8, "launch", B),
    ]
    late = run_engine(replace(CASES["overlap"], notice_s=0.0))  # no notice: relaunched at 8
    assert runs["overlap"].outcome[1] < late.outcome[1]  # finished a step sooner
    assert sum(k[0] == "terminate" for k in kinds["windows"]) >= 1
    assert sum(k[0] == "launch" for k in kinds["windows"]) >= 2
    assert runs["windows"].outcome[0] == "succeeded"


def test_the_rebalance_scenarios_show_what_they_are_named_for() -> None:
    from policies import parse_policy
    from provisioner.simulate.engine import World, run_window
    from tests.equivalence_util import START

    def steps(name: str) -> list[tuple[int, str, str]]:
        return [(e.step, e.kind, e.zone) for e in run_engine(CASES[name]).effects]

    # the look at 5 (three steps before A goes), A handed over at 7: a step sooner than
    # relaunching at 8, for the same cost (the overlap is work done)
    assert steps("rebalance") == [(0, "launch", A), (5, "launch", B), (7, "terminate", A)]
    off = run_engine(replace(CASES["rebalance"], rebalance=None))
    on = run_engine(CASES["rebalance"])
    assert on.outcome[1] < off.outcome[1] and abs(on.cost - off.cost) < 1e-9
    # a false alarm: a look, and its overlap paid for nothing
    alarm = steps("rebalance-false-alarm")
    assert alarm[0] == (0, "launch", A) and (alarm[1][1], alarm[1][2]) == ("launch", B), alarm
    quiet = run_engine(replace(CASES["rebalance-false-alarm"], rebalance=None))
    assert run_engine(CASES["rebalance-false-alarm"]).cost > quiet.cost
    # the refused look: asked for, refused, A runs on untouched until its capacity goes
    case = CASES["rebalance-refused-look"]
    row = run_window(
        parse_policy(case.policy), case.avail(), case.scenario(), World(list(case.zones)),
        start=START,
    )  # fmt: skip
    assert row["refusals"] >= 1 and row["preemptions"] == 1 and row["overlap_hours"] == 0
    assert steps("rebalance-refused-look")[:1] == [(0, "launch", A)]
    assert all(e.step >= 8 for e in run_engine(case).effects[1:])


def test_the_sim_follows_its_trace_on_the_virtual_clock(tmp_path: Path) -> None:
    """The sim's options the daemon's side relies on: a virtual clock that moves only when
    told (never back), the trace's capacity at that time, no notice, no agent, billing in
    virtual seconds."""
    from datetime import timedelta

    from providers.base import ProviderError
    from providers.sim import SimProvider
    from provisioner.core.catalog import Catalog
    from provisioner.core.models import InstanceState, LaunchRequest, Market
    from tests.equivalence_util import START, STEP_S

    case = CASES["preemptions"]
    trace = tmp_path / f"{A}.json"
    trace.write_text(json.dumps({"metadata": {"gap_seconds": STEP_S}, "data": [1, 1, 0, 1]}))
    sim = SimProvider(
        tmp_path / "sim",
        catalog=Catalog.from_offers(case.offers()),
        zones=[A],
        seconds_per_hour=3600,
        trace={A: str(trace)},
        mtbp_hours=None,
        market_notice_s=0,
        notice_floor_s=0,
        run_agent=False,
        idle_exit_s=60,
    )
    try:
        sim.set_clock(START)
        offer = sim.offers()[0]
        inst = sim.launch(LaunchRequest(job_id="j", attempt=1, offer=offer, market=Market.SPOT))
        assert inst.launched_at == START
        assert sim.sandbox(inst.id)["pid"] is None  # a record, no process
        sim.set_clock(START + timedelta(seconds=2 * STEP_S - 1))
        assert sim.get(inst.id).state is InstanceState.RUNNING  # real time passing does nothing
        sim.set_clock(START + timedelta(seconds=2 * STEP_S))  # the trace's capacity goes
        got = sim.get(inst.id)
        assert got.state is InstanceState.PREEMPTED
        assert sim.availability([A]) == {A: False}  # what a capacity probe would read
        kinds = [i.kind for i in sim.interruptions(START)]
        assert kinds == ["preempted"], kinds  # no notice before it
        bill = sim.billing(inst.id)
        assert bill.sim_seconds == 2 * STEP_S and bill.cost == pytest.approx(0.97 * 0.2)
        with pytest.raises(ProviderError):
            sim.launch(LaunchRequest(job_id="j", attempt=2, offer=offer, market=Market.SPOT))
        with pytest.raises(ProviderError, match="back"):
            sim.set_clock(START)
        sim.set_clock(START + timedelta(seconds=3 * STEP_S))
        assert sim.availability([A]) == {A: True}
        again = sim.launch(LaunchRequest(job_id="j", attempt=3, offer=offer, market=Market.SPOT))
        assert again.state is InstanceState.RUNNING
    finally:
        sim.shutdown_server(terminate_all=True)


def _od_to_spot(run: object) -> list[tuple[int, str, str]]:
    return [(e.step, e.kind, e.market) for e in run.effects]  # type: ignore[attr-defined]


def test_looks_are_made_before_break(tmp_path: Path) -> None:
    """The make-before-break scenarios, through the daemon's reconciler (the step-by-step
    match with the engine is test_daemon_does_what_the_simulator_measured): a refused look
    leaves on-demand untouched; an accepted one overlaps it for the changeover only; a look
    lost in its changeover hands back to on-demand; a crash in the overlap changes nothing.
    Never a third instance, never an orphan."""
    runs = {
        name: run_daemon(CASES[name], tmp_path / name)
        for name in ("refused-look", "accepted-look", "look-preempted", "crash-in-overlap")
    }
    for name, run in runs.items():
        assert max(run.live) <= 2 and run.left == 0, (name, run.live, run.left)
        assert run.outcome[0] == "succeeded", (name, run.outcome)
    refused = runs["refused-look"]
    assert refused.refused and {e.market for e in refused.refused} == {"spot"}
    assert [k for k, _, _ in _od_to_spot(refused) if _ == "terminate"] == []  # od untouched
    assert [e.market for e in refused.effects] == ["on-demand"]
    accepted = _od_to_spot(runs["accepted-look"])
    spot_at = next(k for k, kind, m in accepted if (kind, m) == ("launch", "spot"))
    changeover = round(changeover_h() * 3600 / STEP_S)
    assert (spot_at + changeover, "terminate", "on-demand") in accepted, accepted
    assert not any(k == spot_at and kind == "terminate" for k, kind, _ in accepted)
    assert runs["accepted-look"].live[spot_at] == 2  # the overlap
    # the new agent is told to wait for the old one's checkpoint (taken as it is stopped)
    od_n = next(n for n, m, _ in runs["accepted-look"].sent if m == "on-demand")
    look = [spec for n, m, spec in runs["accepted-look"].sent if m == "spot" and n > od_n]
    assert look and look[0]["handover_from"] == od_n and look[0]["handover_until"], look
    assert runs["accepted-look"].live[spot_at + changeover] == 1  # handed over
    lost = _od_to_spot(runs["look-preempted"])
    assert ("terminate", "on-demand") not in [(kind, m) for _, kind, m in lost], lost
    # the crash changed nothing: the same steps, the same cost as without it
    same = runs["crash-in-overlap"]
    assert same.effects == runs["accepted-look"].effects
    assert same.cost == pytest.approx(runs["accepted-look"].cost)


def test_a_gangs_looks_are_made_before_break(tmp_path: Path) -> None:
    """A gang switches as one instance does: the new gang (every node) is launched beside the
    old one, each of its agents told to wait for the old gang's checkpoint, and the old gang
    (every node) is stopped once the new one's changeover is over; a new gang lost in its
    changeover hands back to the old one; a daemon killed before each pass of the overlap
    changes nothing. Never a third gang, never an orphan."""
    runs = {
        name: run_daemon(CASES[name], tmp_path / name)
        for name in ("gang-accepted-look", "gang-look-preempted", "gang-crash-in-overlap")
    }
    for name, run in runs.items():
        assert max(run.live) <= 4 and run.left == 0, (name, run.live, run.left)
        assert run.outcome[0] == "succeeded", (name, run.outcome)
    run = runs["gang-accepted-look"]
    accepted = _od_to_spot(run)
    spot_at = next(k for k, kind, m in accepted if (kind, m) == ("launch", "spot"))
    changeover = round(changeover_h() * 3600 / STEP_S)
    assert (spot_at + changeover, "terminate", "on-demand") in accepted, accepted
    assert run.live[spot_at] == 4  # two gangs of two: the overlap
    assert run.live[spot_at + changeover] == 2  # handed over: both old nodes stopped
    od_n = next(n for n, m, _ in run.sent if m == "on-demand")
    took = max(n for n, m, _ in run.sent if m == "spot")  # looks refused before it: sent too
    look = [spec for n, m, spec in run.sent if m == "spot" and n == took]
    assert took > od_n and sorted(spec["node"] for spec in look) == [0, 1], look
    assert all(spec["handover_from"] == od_n and spec["handover_until"] for spec in look), look
    lost = _od_to_spot(runs["gang-look-preempted"])
    assert ("terminate", "on-demand") not in [(kind, m) for _, kind, m in lost], lost
    same = runs["gang-crash-in-overlap"]  # a new process each pass of the overlap: the same
    assert same.effects == run.effects and same.cost == pytest.approx(run.cost)
