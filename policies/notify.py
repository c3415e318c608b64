"""The ``notify:`` section of a policy: who hears about the job, and about what.

A policy names its targets (``slack-team``, ``oncall``); it never carries their URLs. A
notification URL holds its token (Slack's webhook path, a Discord webhook token, an SMTP
password), and the policy is stored as text in the store, shown by the dashboard and copied
into events; so the URLs live beside the daemon (``/etc/provisioner/notify.yaml``, mode 0600,
or ``PROVISIONER_NOTIFY_<NAME>``), and a URL written here is refused at its line with that fix.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator

from policies.credentials import looks_like_credential
from policies.strict import StrictModel as _Model

#: What a job can be notified of (docs/daemon.md, "Notifications"), in the order of a job's life.
EVENTS = (
    "preempted",  # an attempt's capacity was taken back
    "restarted",  # a new attempt runs after a preemption
    "failed",  # the job ended failed
    "succeeded",  # the job ended succeeded
    "budget",  # spend crossed one of budget_levels (percent of budget.max_total)
    "deadline",  # a launch's estimate gives a miss chance at or above deadline_miss
    "capacity",  # every eligible offer answered no capacity or no quota lately
    "price",  # every offer that meets the other rules is above the price caps
)
#: A target's name: what the daemon's notify.yaml and PROVISIONER_NOTIFY_<NAME> are keyed by.
TARGET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
NOTIFY_FILE = "/etc/provisioner/notify.yaml"
ENV_PREFIX = "PROVISIONER_NOTIFY_"


def env_name(target: str) -> str:
    """The environment variable that may hold ``target``'s URL: ``slack-team`` ->
    ``PROVISIONER_NOTIFY_SLACK_TEAM``."""
    return ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", target.upper())


def target_name(value: str) -> str:
    """``value`` if it is a target's name; a URL or a credential is refused with the fix."""
    if "://" in value or value.startswith("mailto:") or looks_like_credential(value):
        raise ValueError(
            "a URL or token here would be stored in clear: name the target "
            f"(slack-team) and give the daemon its URL in {NOTIFY_FILE} (mode 0600) or in "
            f"{ENV_PREFIX}SLACK_TEAM"
        )
    if not TARGET_NAME.match(value):
        shown = repr(value) if len(value) <= 40 else repr(value[:37] + "...")
        raise ValueError(
            f"{shown} is not a target name (letters, digits, `_.-`, at most 63; e.g. slack-team)"
        )
    return value


TargetName = Annotated[str, AfterValidator(target_name)]


#: Event names a policy may still use for one of EVENTS (the job's state word is the event's).
ALIASES = {"finished": "succeeded"}


def event_names(values: list[str]) -> list[str]:
    out = []
    for v in values:
        v = ALIASES.get(v, v)
        if v not in EVENTS:
            raise ValueError(f"{v!r} is not an event to notify of (one of {', '.join(EVENTS)})")
        out.append(v)
    return list(dict.fromkeys(out))


class Notify(_Model):
    """Who hears about this job and about what (the URLs are the daemon's, by name)."""

    targets: list[TargetName] = Field(
        default_factory=list,
        description="Target names; their URLs are in the daemon's notify.yaml or "
        "PROVISIONER_NOTIFY_<NAME>, never here.",
        max_length=20,
    )
    events: list[str] = Field(
        default_factory=lambda: list(EVENTS),
        description=f"What to notify of: {', '.join(EVENTS)} (default: all).",
    )
    budget_levels: list[float] = Field(
        default_factory=lambda: [50.0, 80.0, 100.0],
        description="Percent of budget.max_total at which spend is reported (once each).",
        max_length=10,
    )
    deadline_miss: float = Field(
        0.2,
        gt=0,
        le=1,
        description="A launch whose estimate gives at least this chance of missing the "
        "deadline (and the previous launch's less) reports the deadline at risk.",
    )

    @field_validator("targets")
    @classmethod
    def _targets(cls, v: list[str]) -> list[str]:
        return list(dict.fromkeys(v))

    @field_validator("events")
    @classmethod
    def _events(cls, v: list[str]) -> list[str]:
        return event_names(v)

    @field_validator("budget_levels")
    @classmethod
    def _levels(cls, v: list[float]) -> list[float]:
        for level in v:
            if not 0 < level <= 1000:
                raise ValueError(f"{level:g}: a budget level is a percent above 0, at most 1000")
        return sorted(set(v))


#: Budget levels and the deadline threshold of a policy without a ``notify:`` section.
DEFAULT = Notify()
