"""Overlap on notice in decide(): the replacement launched during a notice long enough for it
to boot, the instance under notice kept while it checkpoints and terminated once the
checkpoint is in, never a third instance (provisioner/core/overlap.py)."""

from __future__ import annotations

from datetime import timedelta

from provisioner.core.decide import (
    AgentReport,
    AttemptView,
    CoolDown,
    Launch,
    Observations,
    Terminate,
    Wait,
    decide,
)
from provisioner.core.models import InstanceState, Interruption
from tests.core.test_decide import NOW, cands, instance, job, kinds, offer, place, policy, running

AWS_NOTICE = timedelta(minutes=2)


def notice(iid: str = "i-1", left: timedelta = AWS_NOTICE) -> Interruption:
    return Interruption(iid, "aws", "us-east-1a", "notice", NOW, deadline=NOW + left)


def test_a_two_minute_notice_launches_the_replacement_at_once() -> None:
    cur, inst = running(1)
    out = decide(
        job(current=cur, attempt=1),
        Observations(
            instances=(inst,),
            interruptions=(notice(),),
            candidates=cands("us-east-1a", "us-east-1b"),
        ),
        NOW,
    )
    assert kinds(out) == ["CoolDown", "Launch"], out
    cool, launch = out
    assert isinstance(cool, CoolDown) and isinstance(launch, Launch)
    # the zone under notice is kept away until its capacity goes, and the cooldown after
    assert (cool.location, cool.until) == ("us-east-1a", NOW + AWS_NOTICE + timedelta(minutes=30))
    assert launch.replaces == "i-1" and launch.attempt == 2
    assert launch.placement.offer.zone == "us-east-1b"
    assert "overlapping the notice of i-1" in launch.reason


def test_no_overlap_when_the_notice_is_too_short_or_no_restart_is_left() -> None:
    cur, inst = running(1)
    obs = Observations(
        instances=(inst,),
        interruptions=(notice(left=timedelta(seconds=30)),),
        candidates=cands("us-east-1a", "us-east-1b"),
    )
    assert kinds(decide(job(current=cur, attempt=1), obs, NOW)) == ["Wait"]
    long = Observations(
        instances=(inst,), interruptions=(notice(),), candidates=cands("us-east-1a", "us-east-1b")
    )
    last = policy("restart:\n  max_restarts: 3\n")
    assert kinds(decide(job(last, current=cur, attempt=1, restarts=2), long, NOW)) == ["Wait"]
    # a driver whose replacements boot faster (the sim) overlaps a shorter notice
    fast = decide(job(current=cur, attempt=1, boot_s=5.0), obs, NOW)
    assert [type(a) for a in fast][-1] is Launch


def _overlapping(agent: AgentReport | None, at: timedelta = timedelta(0), reported: bool = True):
    """Attempt 1 under notice, attempt 2 (its replacement) launched (``reported``: its
    instance seen), the agent's report as given, ``at`` after the notice."""
    old = instance(1)
    p2 = place(offer("us-east-1b"))
    if reported:
        cur = AttemptView(2, p2, "i-2", InstanceState.RUNNING, launched_at=NOW)
        insts = (old, instance(2, "us-east-1b"))
    else:
        cur = AttemptView(2, p2, None, None, launched_at=NOW)
        insts = (old,)
    view = job(
        current=cur,
        attempt=2,
        agent=agent,
        cooldowns={("aws", "us-east-1a"): NOW + AWS_NOTICE + timedelta(minutes=30)},
    )
    obs = Observations(
        instances=insts, interruptions=(notice(),), candidates=cands("us-east-1a", "us-east-1b")
    )
    return decide(view, obs, NOW + at)


def test_the_instance_under_notice_is_kept_while_it_checkpoints() -> None:
    checkpointing = AgentReport("checkpointing", attempt=1, updated_at=NOW)
    for reported in (False, True):
        out = _overlapping(checkpointing, timedelta(seconds=10), reported)
        assert not any(isinstance(a, Launch | Terminate) for a in out), out
        assert isinstance(out[-1], Wait)


def test_the_instance_under_notice_goes_once_its_checkpoint_is_in() -> None:
    for agent, at in (
        (AgentReport("interrupted", attempt=1, updated_at=NOW), timedelta(seconds=20)),
        (AgentReport("running", attempt=2, updated_at=NOW), timedelta(seconds=20)),  # took over
        (AgentReport("checkpointing", attempt=1, updated_at=NOW), AWS_NOTICE),  # notice over
    ):
        out = _overlapping(agent, at)
        ends = [a for a in out if isinstance(a, Terminate)]
        assert [a.instance_id for a in ends] == ["i-1"], (agent, out)
        assert ends[0].reason.startswith("preempted")  # a restart, as the cloud's would be
        assert not any(isinstance(a, Launch) for a in out)


def test_a_failed_replacement_leaves_one_extra_launch_at_most() -> None:
    """The replacement's launch failed (no capacity): the instance under notice is the
    current one again, and the next offer is tried as its replacement, not a third."""
    cur1, old = running(1)
    failed = AttemptView(2, place(offer("us-east-1b")), None, InstanceState.TERMINATED)
    out = decide(
        job(current=failed, attempt=2, agent=AgentReport("checkpointing", attempt=1)),
        Observations(
            instances=(old,),
            interruptions=(notice(),),
            candidates=cands("us-east-1a", "us-east-1b", "us-east-1c"),
        ),
        NOW + timedelta(seconds=5),
    )
    launches = [a for a in out if isinstance(a, Launch)]
    assert not any(isinstance(a, Terminate) for a in out), out
    assert len(launches) == 1 and launches[0].replaces == "i-1" and launches[0].attempt == 3
    assert cur1.instance_id == "i-1"


def test_never_more_than_two_live_instances_through_a_notice() -> None:
    """Walk a notice pass by pass, applying decide()'s actions: two live at most, one after."""
    cur, inst = running(1)
    live = {inst.id: inst}
    attempt, current = 1, cur
    agent = AgentReport("running", attempt=1, updated_at=NOW)
    for k in range(14):  # every 10 s through the two minutes and past them
        now = NOW + timedelta(seconds=10 * k)
        if k == 3:  # the checkpoint is in
            agent = AgentReport("interrupted", attempt=1, updated_at=now)
        view = job(current=current, attempt=attempt, agent=agent, boot_s=30.0)
        obs = Observations(
            instances=tuple(live.values()),
            interruptions=(notice(),),
            candidates=cands("us-east-1a", "us-east-1b"),
        )
        for a in decide(view, obs, now):
            if isinstance(a, Terminate):
                live.pop(a.instance_id, None)
            elif isinstance(a, Launch):
                attempt = a.attempt
                new = instance(attempt, a.placement.offer.zone)
                live[new.id] = new
                current = AttemptView(attempt, a.placement, new.id, InstanceState.RUNNING, now)
        assert len(live) <= 2, (k, live)
    assert list(live) == ["i-2"]
