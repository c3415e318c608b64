"""What decide() returns: the actions a driver carries out, in order (launch, terminate, wait,
cool down, back off, and the final ones: finish, fail, cancel)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from provisioner.core.models import Placement


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


@dataclass(frozen=True, slots=True)
class Wait:
    until: datetime | None  # None: look again at the next pass
    reason: str


@dataclass(frozen=True, slots=True)
class CoolDown:
    provider: str
    location: str
    until: datetime
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Finish:
    reason: str


@dataclass(frozen=True, slots=True)
class Fail:
    reason: str


@dataclass(frozen=True, slots=True)
class Cancel:
    reason: str


@dataclass(frozen=True, slots=True)
class Backoff:
    until: datetime  # no launch before this
    reason: str


#: Actions that end the job (nothing follows them in a list).
FINAL = (Finish, Fail, Cancel)

Action = Launch | Terminate | Wait | CoolDown | Finish | Fail | Cancel | Backoff
