"""A sustained workload for ``provisioner tco``: phases of GPUs used every day, over months.

A profile says, for each phase, which GPU and how many, and how long each day it runs (a
number of hours or a daily UTC window such as ``22:00-06:00``), and the horizon in months::

    name: night-train-day-serve
    horizon_months: 36
    phases:
      - {name: train, gpu: A100, count: 8, window: "22:00-06:00"}
      - {name: serve, gpu: A100, count: 2, window: "06:00-22:00"}

It is read like a policy (bounded YAML, errors as ``file:line:column``) by
:func:`parse_profile` and :func:`load_profile` (the same bounds on the file).
"""

from __future__ import annotations

import os
import re

from pydantic import Field, field_validator, model_validator

from policies.gpus import canonical_gpu
from policies.loader import parse_document, read_document
from policies.strict import StrictModel as _Model

_WINDOW = re.compile(r"^\s*([01]?\d|2[0-3]):([0-5]\d)\s*-\s*([01]?\d|2[0-4]):([0-5]\d)\s*$")
#: hours in an average month (8,760 h / 12), the unit every monthly figure is counted in
HOURS_PER_MONTH = 730.0
#: where a profile to copy is
EXAMPLE = "examples/tco-night-train-day-serve.yaml"


def window_hours(text: str) -> float:
    """Hours a daily ``HH:MM-HH:MM`` (UTC) window lasts; it may wrap over midnight."""
    return window_bounds(text)[1] / 60.0


def window_bounds(text: str) -> tuple[int, int]:
    """(start minute of the day, length in minutes) of a daily ``HH:MM-HH:MM`` window."""
    m = _WINDOW.match(text)
    if m is None:
        raise ValueError(f"must be a daily window like '22:00-06:00' (UTC), got {text!r}")
    start = int(m.group(1)) * 60 + int(m.group(2))
    end = int(m.group(3)) * 60 + int(m.group(4))
    if end > 24 * 60:
        raise ValueError(f"ends after 24:00: {text!r}")
    length = (end - start) % (24 * 60)
    if length == 0:
        raise ValueError(f"is empty or a whole day ({text!r}); use hours_per_day: 24")
    return start, length


class Phase(_Model):
    """One part of the day's work: ``count`` GPUs of ``gpu`` for some hours each day."""

    name: str = Field(min_length=1, max_length=63)
    gpu: str | list[str] = Field(
        description="GPU model (A100, H100, L4, ...) or a list of models any of which will do."
    )
    count: int = Field(ge=1, le=1024, description="GPUs in use at once during the phase.")
    hours_per_day: float | None = Field(None, gt=0, le=24)
    window: str | None = Field(None, description="Daily UTC window, e.g. '22:00-06:00'.")
    days_per_week: int = Field(7, ge=1, le=7)

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, v: str | list[str]) -> str | list[str]:
        names = [v] if isinstance(v, str) else v
        if not names or len(names) > 32:
            raise ValueError("must name between 1 and 32 GPU models")
        for name in names:
            if len(name) > 64 or canonical_gpu(name) is None:
                raise ValueError(f"unknown GPU {name[:64]!r} (see policies/gpus.csv)")
        return v

    @property
    def gpus(self) -> list[str]:
        return [self.gpu] if isinstance(self.gpu, str) else list(self.gpu)

    @field_validator("window")
    @classmethod
    def _window(cls, v: str | None) -> str | None:
        if v is not None:
            window_hours(v)
        return v

    @model_validator(mode="after")
    def _one_duration(self) -> Phase:
        if (self.hours_per_day is None) == (self.window is None):
            raise ValueError("give either hours_per_day or window (not both, not neither)")
        return self

    @property
    def daily_hours(self) -> float:
        if self.window is not None:
            return window_hours(self.window)
        return self.hours_per_day or 0.0  # one of the two is set (validated)

    @property
    def utilisation(self) -> float:
        """Share of all hours the phase runs (what a 24/7 commitment would be used for)."""
        return self.daily_hours / 24.0 * self.days_per_week / 7.0

    @property
    def monthly_hours(self) -> float:
        return self.utilisation * HOURS_PER_MONTH


class Profile(_Model):
    """A sustained workload: its phases and the horizon to cost it over."""

    name: str = Field("workload", min_length=1, max_length=63)
    description: str = ""
    horizon_months: int = Field(ge=1, le=120, description="Months to compare costs over.")
    phases: list[Phase] = Field(min_length=1, max_length=32)

    @field_validator("phases")
    @classmethod
    def _names(cls, v: list[Phase]) -> list[Phase]:
        names = [p.name for p in v]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"phase names must be unique, repeated: {', '.join(sorted(dup))}")
        return v


def parse_profile(text: str, file: str = "<profile>") -> Profile:
    """Parse and validate profile YAML; raise :class:`PolicyError` naming each location."""
    return parse_document(text, file, Profile, what="profile", example=EXAMPLE)


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Read and validate a profile file, with the policy loader's bounds on the file."""
    return parse_profile(read_document(path, what="profile", example=EXAMPLE), str(path))
