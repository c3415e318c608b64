"""When a look at spot is made: the look schedule per zone and the launch-call budget (pure).

A *look* is a launch call made while the job already has an instance at work (a switch made
before break, :mod:`provisioner.core.overlap`): refused, it costs nothing but the call; the
job works on. Two inputs bound how often a job looks; decide() reads both from its
:class:`~provisioner.core.views.JobView`, and every driver builds them from the same events
(the daemon from its store's attempts, the simulator from its replayed prefix, the vectorised
replay from its arrays), so the schedule is carried across passes and across a daemon restart
with the attempts themselves (nothing else is stored):

* **the look schedule** (``JobView.looks``, built by :func:`schedule`): per spot location, the
  launches refused there in a row (reset by a launch there that was accepted: capacity seen)
  and the latest one's time (one per look: the instance types tried there in one pass count
  once). A zone refused ``n`` times in a row is not looked at again, from
  a working instance, for :func:`hold` ``(n)``: 5 minutes (the capacity-error memory every
  launch obeys, :data:`~provisioner.core.views.CAPACITY_ERRORS_WITHIN`), doubling with each
  refusal up to :data:`LOOK_MAX`. A job with no instance at work is held only by the 5-minute
  memory: each step without an instance spends its slack, so a launch is always worth trying.
  The schedule holds only while the cloud's call budget is tight (:func:`tight`: half of it
  used in the last hour): until then a refused look costs nothing worth saving and the job
  looks whenever the strategy wants spot (waiting would only delay the return to spot: with a
  look at every step Greedy stays optimal at d = 0). The strategy then chooses among the zones the schedule leaves open (the schedule is an input,
  not a poll: no look is made unless the strategy wants spot there);
* **the launch-call budget** (``JobView.launch_calls`` and the policy's
  ``restart.launch_calls_per_hour``, default :data:`CALLS_PER_HOUR`): at most that many launch
  calls (accepted or refused, looks or not) per cloud in any hour; once spent, decide() makes
  none to that cloud until the oldest call in the hour is an hour old (it waits, keeping what
  runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

import numpy as np

from provisioner.core import overlap as ov
from provisioner.core.actions import Wait
from provisioner.core.models import Instance, Placement
from provisioner.core.views import (
    CAPACITY_ERRORS_WITHIN,
    Call,
    JobView,
    Location,
    SpotEvent,
    ZoneLooks,
)

#: The first hold after a refusal (the capacity-error memory), doubled per refusal in a row.
LOOK_FIRST = CAPACITY_ERRORS_WITHIN
#: The longest hold of a zone refused many times in a row.
LOOK_MAX = timedelta(minutes=40)
#: Launch calls per cloud per hour, per job, when the policy does not say
#: (``restart.launch_calls_per_hour``): our choice, far below any cloud's API rate limit.
CALLS_PER_HOUR = 120
#: The window the budget counts calls over.
HOUR = timedelta(hours=1)


def hold(refused: int) -> timedelta:
    """How long a zone refused ``refused`` times in a row is not looked at from a working
    instance: 5 min, 10, 20, 40 (:data:`LOOK_MAX`)."""
    return min(LOOK_MAX, LOOK_FIRST * 2 ** min(max(refused, 1) - 1, 30))


def hold_s(refused: np.ndarray) -> np.ndarray:
    """:func:`hold` in seconds (the vectorised replay's form; numpy arrays work too)."""
    n = np.maximum(np.asarray(refused), 1) - 1
    first, most = LOOK_FIRST.total_seconds(), LOOK_MAX.total_seconds()
    return np.minimum(most, first * 2.0 ** np.minimum(n, 30))


def schedule(events: Iterable[SpotEvent]) -> dict[Location, ZoneLooks]:
    """Each location's look state from its spot events (:data:`SpotEvent`: ``refused`` adds
    one to the run of refusals, once per look: refusals at the same time, several instance
    types tried there in one pass, count once; ``up``, a launch accepted there, ends it)."""
    out: dict[Location, ZoneLooks] = {}
    for at, loc, kind in sorted(events, key=lambda e: e[0]):
        z = out.get(loc, ZoneLooks())
        if kind == "refused" and (z.last is None or at > z.last or z.refused == 0):
            out[loc] = ZoneLooks(z.refused + 1, at)
        elif kind == "up" and loc in out:
            out[loc] = ZoneLooks(0, out[loc].last)
    return out


def held(looks: Mapping[Location, ZoneLooks], loc: Location, now: datetime) -> bool:
    """Whether a look at ``loc`` from a working instance is not due yet at ``now`` (the hold
    includes its end, as the capacity-error memory does)."""
    z = looks.get(loc)
    if z is None or z.last is None or z.refused <= 0:
        return False
    return now - z.last <= hold(z.refused)


def budget_spent_until(
    calls: Sequence[Call], provider: str, limit: int, now: datetime
) -> datetime | None:
    """When the next launch call to ``provider`` may be sent, if the budget of ``limit`` calls
    an hour is spent at ``now`` (None: a call may be sent now). A call counts for an hour
    after it was sent."""
    recent = sorted(at for p, at in calls if p == provider and now - at < HOUR)
    if len(recent) < limit:
        return None
    return recent[len(recent) - limit] + HOUR


def recent_calls(calls: Iterable[Call], now: datetime) -> tuple[Call, ...]:
    """The calls that still count against the budget at ``now`` (sent less than an hour ago)."""
    return tuple((p, at) for p, at in calls if now - at < HOUR)


# -- decide()'s two questions ----------------------------------------------------------------


def tight(used: int, limit: int) -> bool:
    """Whether a cloud's call budget is tight: half of it or more used in the last hour (the
    look schedule holds zones from then on; before, a look costs nothing worth saving)."""
    return 2 * used >= limit


def open_zones(
    job: JobView, keep: Instance | None, locs: Sequence[Location], avail: np.ndarray, now: datetime
) -> np.ndarray:
    """``avail`` less the zones whose next look is not due, where their cloud's call budget is
    tight, for a look from ``keep`` at work (one instance past its changeover)."""
    if not job.looks or not locs or keep is None:
        return avail
    if not ov.settled(job, keep, now):
        return avail
    limit = job.policy.restart.launch_calls_per_hour
    used: dict[str, int] = {}
    for p, at in job.launch_calls:
        if now - at < HOUR:
            used[p] = used.get(p, 0) + 1
    due = [not (tight(used.get(loc[0], 0), limit) and held(job.looks, loc, now)) for loc in locs]
    return avail & np.asarray(due, dtype=bool)


def pass_over(
    job: JobView, looking_from: Instance | None, p: Placement, now: datetime, why: str
) -> Wait | None:
    """Why a launch of ``p`` is not made now, as the Wait decide() returns when no candidate
    is left: the call budget of ``p``'s cloud is spent (until a call ages out), or, for a look
    from ``looking_from``, the look would cost more than it saves
    (:func:`provisioner.core.overlap.look_pays`). None: go on with ``p``."""
    spent = calls_spent(job, p, now)
    if spent is not None:
        return Wait(spent, spent_reason(job, spent))
    if looking_from is not None and not ov.look_pays(job, looking_from, p, now):
        return Wait(None, f"staying: a look would cost more than it saves ({why})")
    return None


def calls_spent(job: JobView, p: Placement, now: datetime) -> datetime | None:
    """When a launch call to ``p``'s cloud may be sent, if the job's budget is spent now."""
    if not job.launch_calls:
        return None
    limit = job.policy.restart.launch_calls_per_hour
    return budget_spent_until(job.launch_calls, p.offer.provider, limit, now)


def spent_reason(job: JobView, until: datetime) -> str:
    n = job.policy.restart.launch_calls_per_hour
    return f"{n} launch calls in the last hour (restart.launch_calls_per_hour): next at {until:%H:%M:%S}"
