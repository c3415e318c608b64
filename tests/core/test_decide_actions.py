"""The job's own situation decided by decide(): cancel, the agent's exit, launch backoff,
the preemption cooldown, return to spot, and the budget that cannot pay (the executor in
provisioner.control.jobpass.act only carries these out)."""

from __future__ import annotations

from datetime import timedelta

from policies import parse_policy
from provisioner.core.decide import (
    AgentReport,
    AttemptView,
    Backoff,
    Cancel,
    CapacityError,
    CoolDown,
    Fail,
    Finish,
    Launch,
    Observations,
    Terminate,
    Wait,
    decide,
)
from provisioner.core.models import InstanceState, Interruption, Market
from provisioner.core.views import CHANGEOVER_H, spot_up_since, step_h
from tests.core.test_decide import NOW, T0, cands, job, kinds, policy, running


def test_a_cancel_request_terminates_and_cancels() -> None:
    cur, inst = running(1)
    out = decide(job(current=cur, cancel_requested=True), Observations(instances=(inst,)), NOW)
    assert kinds(out) == ["Terminate", "Cancel"]
    assert isinstance(out[0], Terminate) and out[0].instance_id == inst.id
    assert isinstance(out[1], Cancel)


def test_the_agent_s_exit_finishes_or_fails_the_job() -> None:
    cur, inst = running(1)
    done = AgentReport(state="done", attempt=1, updated_at=NOW)
    out = decide(job(current=cur, agent=done), Observations(instances=(inst,)), NOW)
    assert kinds(out) == ["Terminate", "Finish"] and isinstance(out[-1], Finish)
    failed = AgentReport(state="failed", attempt=1, exit_code=3, updated_at=NOW)
    out = decide(job(agent=failed), Observations(candidates=cands("us-east-1a")), NOW)
    assert kinds(out) == ["Fail"] and isinstance(out[0], Fail) and "exited 3" in out[0].reason


def test_checkpoints_cover_the_work_but_the_agent_still_runs_the_command() -> None:
    cur, inst = running(1)
    working = AgentReport(state="running", attempt=1, updated_at=NOW - timedelta(minutes=1))
    v = job(current=cur, work_done_h=48.0, agent=working)
    assert kinds(decide(v, Observations(instances=(inst,)), NOW)) == ["Wait"]
    silent = AgentReport(state="running", attempt=1, updated_at=NOW - timedelta(hours=1))
    v = job(current=cur, work_done_h=48.0, agent=silent)
    assert kinds(decide(v, Observations(instances=(inst,)), NOW)) == ["Terminate", "Finish"]


def test_launch_failures_back_off_doubling() -> None:
    obs = Observations(candidates=cands("us-east-1a"))
    out = decide(
        job(launch_failures=3, last_launch_failure_at=NOW - timedelta(seconds=5)), obs, NOW
    )
    assert kinds(out) == ["Backoff"]
    assert isinstance(out[0], Backoff) and out[0].until == NOW + timedelta(seconds=15)
    later = decide(
        job(launch_failures=3, last_launch_failure_at=NOW - timedelta(seconds=21)), obs, NOW
    )
    assert kinds(later) == ["Launch"]


def test_a_preempted_attempt_cools_its_zone_down_once() -> None:
    p = policy("restart: {zone_cooldown: 30m}\n")
    cur, _ = running(1)
    lost = cur.__class__(1, cur.placement, cur.instance_id, InstanceState.PREEMPTED, T0, NOW)
    obs = Observations(candidates=cands("us-east-1a", "us-east-1b"))
    out = decide(job(p, current=lost, restarts=1), obs, NOW)
    cool = [a for a in out if isinstance(a, CoolDown)]
    assert [(c.location, c.until) for c in cool] == [("us-east-1a", NOW + timedelta(minutes=30))]
    again = decide(
        job(p, current=lost, restarts=1, cooldowns={("aws", "us-east-1a"): cool[0].until}), obs, NOW
    )
    assert not any(isinstance(a, CoolDown) for a in again)


def test_on_demand_returns_to_spot_once_spot_has_lasted() -> None:
    """No deadline: on on-demand, with spot up for longer than the break-even time."""
    p = parse_policy("name: t\n")
    cur, inst = running(1, market=Market.ON_DEMAND)
    c = cands("us-east-1a")
    locs = [("aws", "us-east-1a")]
    fresh = Observations(
        instances=(inst,), candidates=c, spot_up_since=spot_up_since(locs, {}, NOW)
    )
    assert kinds(decide(job(p, current=cur), fresh, NOW)) == ["Wait"]
    old = Observations(instances=(inst,), candidates=c, spot_up_since=spot_up_since(locs, {}, T0))
    assert kinds(decide(job(p, current=cur), old, NOW)) == ["Launch"]  # made before break


def test_a_switch_is_made_before_break() -> None:
    """On-demand to spot: the spot launch comes first, naming the on-demand instance it
    replaces; that one works on through the changeover and goes once the new one has taken
    over; a refused launch leaves it running; a replacement lost in the overlap hands back."""
    p = parse_policy("name: t\n")
    cur, od = running(1, market=Market.ON_DEMAND)
    c = cands("us-east-1a")
    locs = [("aws", "us-east-1a")]
    up = spot_up_since(locs, {}, T0)
    out = decide(
        job(p, current=cur, attempt=1), Observations((od,), candidates=c, spot_up_since=up), NOW
    )
    assert kinds(out) == ["Launch"]
    look = out[0]
    assert isinstance(look, Launch) and look.replaces == od.id and "before break" in look.reason
    # the launch went through: attempt 2 in its changeover, attempt 1 still working
    new_cur, spot = running(2, market=Market.SPOT, at=NOW)
    both = Observations((od, spot), candidates=c, spot_up_since=up)
    mid = NOW + timedelta(hours=CHANGEOVER_H / 2)
    during = decide(job(p, current=new_cur, attempt=2, changeover_h=CHANGEOVER_H), both, mid)
    assert not any(isinstance(a, Terminate | Launch) for a in during), during
    after = NOW + timedelta(hours=CHANGEOVER_H)
    done = decide(job(p, current=new_cur, attempt=2, changeover_h=CHANGEOVER_H), both, after)
    stops = [a for a in done if isinstance(a, Terminate)]
    assert [a.instance_id for a in stops] == [od.id] and stops[0].reason.startswith("handed over")
    # its agent reporting takes over at once
    told = job(p, current=new_cur, attempt=2, agent=AgentReport(attempt=2, state="running"))
    assert [a.instance_id for a in decide(told, both, mid) if isinstance(a, Terminate)] == [od.id]
    # the look refused: attempt 2 failed, no instance; attempt 1 runs on, nothing stopped
    failed = AttemptView(2, new_cur.placement, None, InstanceState.TERMINATED, launched_at=NOW)
    busy = (CapacityError("aws", "us-east-1a", "p3.2xlarge", Market.SPOT, NOW),)
    refused = Observations((od,), candidates=c, capacity_errors=busy, spot_up_since=up)
    again = decide(job(p, current=failed, attempt=2), refused, NOW)
    assert not any(isinstance(a, Terminate) for a in again), again
    # the new spot lost during the overlap: the on-demand instance is kept, nothing launched
    lost = AttemptView(2, new_cur.placement, spot.id, InstanceState.PREEMPTED, launched_at=NOW)
    gone = Observations((od,), candidates=c, capacity_errors=busy, spot_up_since=up)
    back = decide(job(p, current=lost, attempt=2, restarts=1), gone, mid)
    assert not any(isinstance(a, Terminate) and a.instance_id == od.id for a in back), back


def test_a_budget_that_cannot_pay_for_the_work_fails() -> None:
    p = policy("market: on-demand\nbudget: {max_total: 10}\n")
    out = decide(job(p), Observations(candidates=cands("us-east-1a")), NOW)
    assert kinds(out) == ["Fail"] and "budget" in out[0].reason  # type: ignore[union-attr]


def test_the_input_contract_s_constants() -> None:
    assert CHANGEOVER_H == 0.2
    assert step_h(0.2) == 1.0 / 3600.0 and step_h(5) == 5.0 / 3600.0
    since = spot_up_since([("a", "z1"), ("a", "z2")], {("a", "z1"): NOW}, T0, down=[("a", "z2")])
    assert since == {("a", "z1"): NOW}
    assert not isinstance(Wait(None, ""), Backoff)


def test_a_notice_during_a_handover_launches_no_third_instance() -> None:
    """The new instance of a switch made before break gets a notice while the old one still
    works: no replacement beside both; the job waits for the notice."""
    p = parse_policy("name: t\n")
    _, od = running(1, market=Market.ON_DEMAND)
    new_cur, spot = running(2, market=Market.SPOT, at=NOW)
    note = Interruption(spot.id, "aws", "us-east-1a", "notice", NOW, NOW + timedelta(minutes=2))
    obs = Observations((od, spot), (note,), candidates=cands("us-east-1a", "us-east-1b"))
    view = job(p, current=new_cur, attempt=2, changeover_h=CHANGEOVER_H, boot_s=10.0)
    out = decide(view, obs, NOW + timedelta(seconds=30))
    assert not any(isinstance(a, Launch) for a in out), out
