"""Checks on the instance rows of a store snapshot (issue 39's invariants call them).

:func:`ended_rows_violations`: every ended instance row has an end time and a final raw
state, and no row of an ended attempt is live. Pure: rows in, violations (one line each) out;
nothing is read from the store, the cloud or the clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from provisioner.core.states import LIVE_ATTEMPT_STATES

#: instance states (``InstanceState``'s values) of a live instance, and of an ended one
LIVE_STATES = frozenset({"pending", "running"})
ENDED_STATES = frozenset({"terminated", "preempted"})
#: attempt states of an attempt that may still have a live instance
OPEN_ATTEMPTS = LIVE_ATTEMPT_STATES
#: the clouds' raw words for a live instance (lower case, without Azure's ``PowerState/`` or
#: ``ProvisioningState/``): AWS, GCP, Azure, Alibaba, Tencent and the sim (their adapters'
#: ``STATES`` tables, and ``providers.sim.rules``); never the raw state of an ended row
LIVE_RAW = frozenset(
    {"pending", "running", "provisioning", "staging", "repairing", "starting", "rebooting",
     "creating", "updating", "migrating"}
)  # fmt: skip


def _word(raw: str) -> str:
    return raw.rsplit("/", 1)[-1].strip().lower()


def _name(row: Any) -> str:
    return f"instance {row.provider}:{row.instance_id} (job {row.job_id}, attempt {row.attempt})"


def ended_rows_violations(instances: Iterable[Any], attempts: Iterable[Any] = ()) -> list[str]:
    """What is wrong with these instance rows, one line each (see :func:`ended_row_problems`)."""
    return [why for _row, why in ended_row_problems(instances, attempts)]


def ended_row_problems(
    instances: Iterable[Any], attempts: Iterable[Any] = ()
) -> list[tuple[Any, str]]:
    """Each instance row that is wrong (``InstanceRow`` or alike: provider, instance_id,
    job_id, attempt, state, raw_state, launched_at, ended_at) with why:

    * a row whose state says ended (terminated, preempted) without an end time, or with an end
      time and a state that says alive;
    * an ended row without a final raw state: empty, or a cloud's word for a live instance
      (:data:`LIVE_RAW`, or a raw state this snapshot shows on a live row of the same cloud);
    * an ended row whose end is before its launch;
    * a live row (no end time) of an attempt that has ended (``attempts``: ``AttemptRow`` or
      alike: job_id, attempt, state; an attempt not given is not judged).
    """
    rows = list(instances)
    live_raw: dict[str, set[str]] = {}
    for r in rows:
        if r.ended_at is None and r.state in LIVE_STATES and r.raw_state:
            live_raw.setdefault(r.provider, set()).add(r.raw_state)
    closed = {(a.job_id, a.attempt) for a in attempts if a.state not in OPEN_ATTEMPTS}
    out: list[tuple[Any, str]] = []
    for r in rows:
        ended = r.ended_at is not None
        launched = getattr(r, "launched_at", None)
        if r.state in ENDED_STATES and not ended:
            out.append((r, f"{_name(r)}: {r.state} with no end time"))
        elif ended and r.state in LIVE_STATES:
            out.append((r, f"{_name(r)}: ended at {r.ended_at} but its state says {r.state}"))
        elif ended and (
            not r.raw_state
            or _word(r.raw_state) in LIVE_RAW
            or r.raw_state in live_raw.get(r.provider, ())
        ):
            shown = r.raw_state or "empty"
            out.append((r, f"{_name(r)}: ended at {r.ended_at} but its raw state is {shown}"))
        elif ended and launched is not None and r.ended_at < launched:
            out.append((r, f"{_name(r)}: ended at {r.ended_at}, before its launch {launched}"))
        elif not ended and (r.job_id, r.attempt) in closed:
            out.append((r, f"{_name(r)}: live ({r.state}) but its attempt has ended"))
    return out
