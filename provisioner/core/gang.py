"""A gang (issue 10): the N instances of one multi-node attempt, seen as one unit.

decide() reasons about one instance per attempt. A gang job's attempt has ``nodes`` instances
(tagged with their rank, :data:`provisioner.core.models.TAG_NODE`), launched, interrupted and
restarted together, so the one decision function stays one: before it looks, the gang's
instances are folded into one *unit*, an :class:`~provisioner.core.models.Instance` that stands
for the whole gang (node 0's id, or the attempt's recorded instance), whose state is the
gang's:

* every node alive and all ``nodes`` ranks there: alive (running when every node runs, else
  pending);
* any node preempted, or fewer live nodes than ranks (one taken and released, terminated
  behind our back, or never there once the attempt is no longer young): while other nodes
  live, the unit stays alive and carries a ``preempted`` interruption (in the zone of the node
  that went, saying which node), which decide() answers as for any preempted instance it still
  sees: terminate it (every member) and cool the zone down; the gang is then relaunched whole,
  from the checkpoint rank 0 wrote;
* no node alive: preempted if any node was, else the leader's own state.

An interruption of any node is an interruption of the unit. What decide() answers about a
unit (a Terminate of its id) is carried out on every member (:attr:`Gangs.members`).

Only instances tagged as gang members (:data:`~provisioner.core.models.TAG_NODES`) are folded;
a unit carries neither node tag, so folding twice changes nothing, and a driver that models
one instance per attempt (the trace simulator) hands decide() units directly. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from provisioner.core.models import TAG_NODE, TAG_NODES, Instance, InstanceState, Interruption

#: How long after a gang's launch a node the cloud's list does not show yet counts as coming.
LIST_LAG = timedelta(seconds=60)


def young_attempts(
    attempt: int | None, launched_at: datetime | None, now: datetime
) -> frozenset[int]:
    """``{attempt}`` when it was launched less than :data:`LIST_LAG` ago, else empty."""
    if attempt is None or launched_at is None or now - launched_at >= LIST_LAG:
        return frozenset()
    return frozenset({attempt})


@dataclass(frozen=True)
class Gangs:
    """The units, and for each unit id the ids of its members (every node, rank order)."""

    units: tuple[Instance, ...]
    interruptions: tuple[Interruption, ...]
    members: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: unit id -> why the gang counts as lost ("node 1 preempted", "only 1 of 2 nodes alive")
    broken: Mapping[str, str] = field(default_factory=dict)

    def expand(self, instance_id: str) -> list[str]:
        """The instance ids a Terminate of ``instance_id`` stops (itself when not a unit)."""
        return list(self.members.get(instance_id, (instance_id,)))


def fold(
    instances: Sequence[Instance],
    interruptions: Iterable[Interruption],
    nodes: int,
    now: datetime,
    leaders: Mapping[int, str] | None = None,
    young: frozenset[int] = frozenset(),
) -> Gangs:
    """Fold each attempt's instances into one unit. ``leaders``: attempt -> the instance id
    recorded for it (node 0's), kept as the unit's id even when that node is gone. ``young``:
    attempts launched so recently that a node the list does not show yet is taken as coming
    (a cloud's list can lag its launches), not gone. With ``nodes`` <= 1 the instances are
    their own units."""
    notes = tuple(interruptions)
    if nodes <= 1 or not any(TAG_NODES in i.tags for i in instances):
        return Gangs(tuple(instances), notes)
    leaders = leaders or {}
    groups: dict[tuple[str | None, int | None], list[Instance]] = {}
    units: list[Instance] = []
    for inst in instances:
        if TAG_NODES in inst.tags:
            groups.setdefault((inst.job_id, inst.attempt), []).append(inst)
        else:
            units.append(inst)
    members: dict[str, tuple[str, ...]] = {}
    broken: dict[str, str] = {}
    to_unit: dict[str, str] = {}
    lost_notes: list[Interruption] = []
    for (_job, attempt), group in groups.items():
        group.sort(key=lambda i: (i.node, i.id))
        leader_id = leaders.get(attempt) if attempt is not None else None
        unit, why, where = _unit(group, nodes, leader_id, attempt in young)
        units.append(unit)
        members[unit.id] = tuple(i.id for i in group)
        for i in group:
            to_unit[i.id] = unit.id
        if why:
            broken[unit.id] = why
            if unit.state.alive:  # the rest still runs: decide() stops them, as one
                zone = where.zone if where is not None else unit.zone
                lost_notes.append(
                    Interruption(unit.id, unit.provider, zone, "preempted", now, raw=why)
                )
    mapped = tuple(
        replace(x, instance_id=to_unit[x.instance_id]) if x.instance_id in to_unit else x
        for x in notes
    )
    return Gangs(tuple(units), _dedupe((*mapped, *lost_notes)), members, broken)


def _unit(
    group: list[Instance], nodes: int, leader_id: str | None, young: bool
) -> tuple[Instance, str, Instance | None]:
    """The unit, why the gang is lost ("" when it is not) and the node that went."""
    first = next((i for i in group if i.id == leader_id), None) or group[0]
    tags = {k: v for k, v in first.tags.items() if k not in (TAG_NODE, TAG_NODES)}
    leader = replace(first, tags=tags)
    alive = [i for i in group if i.state.alive]
    ranks = {i.node for i in alive}
    lost = next((i for i in group if i.state is InstanceState.PREEMPTED), None)
    gone = lost or next((i for i in group if not i.state.alive), None)
    if not alive:
        if lost is not None:
            why = f"node {lost.node} preempted"
            unit = replace(
                leader,
                state=InstanceState.PREEMPTED,
                zone=lost.zone,
                state_reason=lost.state_reason or why,
            )
            return unit, why, lost
        return leader, "", None
    state = (
        InstanceState.RUNNING
        if all(i.state is InstanceState.RUNNING for i in alive)
        else InstanceState.PENDING
    )
    unit = replace(leader, state=state)
    if lost is not None:
        why = f"node {lost.node} preempted ({lost.state_reason or lost.raw_state or 'reclaimed'})"
        return unit, why, lost
    if len(ranks) < nodes and (gone is not None or not young):
        missing = sorted(set(range(nodes)) - ranks)
        return unit, f"only {len(ranks)} of {nodes} nodes alive (node {missing[0]} gone)", gone
    return unit, "", None


def _dedupe(notes: tuple[Interruption, ...]) -> tuple[Interruption, ...]:
    """One interruption per (unit, kind): the earliest (several nodes may be noticed)."""
    best: dict[tuple[str, str], Interruption] = {}
    for x in notes:
        key = (x.instance_id, x.kind)
        if key not in best or x.at < best[key].at:
            best[key] = x
    return tuple(best.values()) if len(best) != len(notes) else notes
