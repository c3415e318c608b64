"""What decide() returns: the actions a driver carries out, in order (launch, terminate, wait,
cool down, back off, and the final ones: finish, fail, cancel, stop).

Every action that ends an attempt or the job names its :class:`~provisioner.core.states.Cause`:
the driver takes the new states from it (:func:`provisioner.core.states.job_after`,
:func:`provisioner.core.states.attempt_end`), never from the reason's words, which are for
people."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from provisioner.core.models import Placement
from provisioner.core.states import Cause, JobState


@dataclass(frozen=True, slots=True)
class Launch:
    placement: Placement  # bid_cap_per_hour is the effective cap for spot
    attempt: int
    reason: str
    replaces: str | None = None  # overlap: the instance under notice this one takes over from


@dataclass(frozen=True, slots=True)
class Terminate:
    instance_id: str
    reason: str
    cause: Cause  # PREEMPTED ends the attempt preempted (a restart); any other: ended


@dataclass(frozen=True, slots=True)
class Wait:
    until: datetime | None  # None: look again at the next pass
    reason: str
    cause: Cause = Cause.WAITING


@dataclass(frozen=True, slots=True)
class CoolDown:
    provider: str
    location: str
    until: datetime
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Finish:
    reason: str
    cause: Cause

    state = JobState.SUCCEEDED


@dataclass(frozen=True, slots=True)
class Fail:
    reason: str
    cause: Cause

    state = JobState.FAILED


@dataclass(frozen=True, slots=True)
class Cancel:
    reason: str
    cause: Cause

    state = JobState.CANCELLED


@dataclass(frozen=True, slots=True)
class Stop:
    """The policy stops the job (GPUs idle with ``idle.action: stop``): it ends ``stopped``,
    its checkpoints kept."""

    reason: str
    cause: Cause = Cause.GPU_IDLE

    state = JobState.STOPPED


@dataclass(frozen=True, slots=True)
class Backoff:
    until: datetime  # no launch before this
    reason: str
    cause: Cause = Cause.BACKOFF


#: Actions that end the job (nothing follows them in a list).
FINAL = (Finish, Fail, Cancel, Stop)

Action = Launch | Terminate | Wait | CoolDown | Finish | Fail | Cancel | Stop | Backoff
Final = Finish | Fail | Cancel | Stop
