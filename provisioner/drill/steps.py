"""A drill's steps as data: what each proves, whether it held, and when.

Every step is timed from the drill's start (``at_s``) and from the step before it
(``took_s``); the report is a table on the terminal and a JSON document
(:meth:`DrillReport.to_json`). The drill passes only if every step held.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class StepName(str, enum.Enum):
    """The drill's steps, in order."""

    LAUNCH = "launch"
    AGENT_UP = "agent-up"
    INTERRUPT = "interrupt"
    NOTICE = "notice"
    CHECKPOINT = "checkpoint"
    REPLACEMENT = "replacement"
    RESUMED = "resumed"
    RESULT = "result"
    CLEANUP = "cleanup"


#: what each step proves, and what it means when it fails (docs/getting-started.md says the same)
MEANING: dict[StepName, tuple[str, str]] = {
    StepName.LAUNCH: (
        "a spot instance was launched for the drill's job",
        "no capacity under the drill's price cap, a quota of 0, or missing launch permissions",
    ),
    StepName.AGENT_UP: (
        "the node agent started the job and reported progress",
        "the VM could not install or start the agent (image, network, the package's road)",
    ),
    StepName.INTERRUPT: (
        "the cloud's own interruption was triggered",
        "your identity lacks the interruption API's permissions (see `--dry-run`)",
    ),
    StepName.NOTICE: (
        "the agent read the notice from the instance metadata, within the cloud's deadline",
        "the agent cannot reach the metadata service, or the cloud sent no notice",
    ),
    StepName.CHECKPOINT: (
        "the checkpoint taken on the notice is in the checkpoint store",
        "the VM cannot write the store (its role), or the save is longer than the notice",
    ),
    StepName.REPLACEMENT: (
        "a replacement was launched (before the old instance went, where the notice allows)",
        "no capacity elsewhere under the cap, or the controller missed the notice",
    ),
    StepName.RESUMED: (
        "the replacement resumed from the notice's checkpoint",
        "the replacement started afresh or from an older checkpoint: work was lost",
    ),
    StepName.RESULT: (
        "the job's result equals the known one",
        "the resumed run diverged: the checkpoint did not hold the whole state",
    ),
    StepName.CLEANUP: (
        "everything the drill made was deleted",
        "something is left (listed): delete it by hand or run `provisioner drill --cleanup`",
    ),
}


class Outcome(str, enum.Enum):
    HELD = "held"
    FAILED = "failed"
    NOT_REACHED = "not-reached"


@dataclass
class Step:
    """One step's outcome: ``at_s`` since the drill began, ``took_s`` since the step before."""

    name: StepName
    outcome: Outcome = Outcome.NOT_REACHED
    at_s: float | None = None
    took_s: float | None = None
    detail: str = ""
    substitute: bool = False  # done by a stand-in for an API the cloud does not have

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.name.value,
            "outcome": self.outcome.value,
            "at_s": None if self.at_s is None else round(self.at_s, 3),
            "took_s": None if self.took_s is None else round(self.took_s, 3),
            "detail": self.detail,
            "substitute": self.substitute,
            "proves": MEANING[self.name][0],
        }


@dataclass
class DrillReport:
    """Every step of one drill, what it cost, and what could not be deleted."""

    drill_id: str
    provider: str
    region: str
    job_id: str
    steps: list[Step] = field(default_factory=lambda: [Step(n) for n in StepName])
    cost_usd: float = 0.0
    leftovers: list[str] = field(default_factory=list)
    stopped: str = ""  # why the drill stopped early ("" when it ran to the end)
    wire: list[dict[str, Any]] = field(default_factory=list)  # the interruption call(s) made

    def step(self, name: StepName) -> Step:
        return next(s for s in self.steps if s.name == name)

    def mark(
        self,
        name: StepName,
        ok: bool,
        at_s: float,
        detail: str = "",
        *,
        substitute: bool = False,
    ) -> Step:
        """Record ``name``'s outcome at ``at_s``; ``took_s`` counts from the last step marked."""
        before = [s.at_s for s in self.steps if s.at_s is not None and s.name != name]
        s = self.step(name)
        s.outcome = Outcome.HELD if ok else Outcome.FAILED
        s.at_s = at_s
        s.took_s = at_s - max(before) if before else at_s
        s.detail = detail
        s.substitute = substitute
        return s

    @property
    def passed(self) -> bool:
        return not self.stopped and all(s.outcome is Outcome.HELD for s in self.steps)

    def to_json(self) -> dict[str, Any]:
        return {
            "drill": self.drill_id,
            "provider": self.provider,
            "region": self.region,
            "job": self.job_id,
            "passed": self.passed,
            "stopped": self.stopped,
            "cost_usd": round(self.cost_usd, 6),
            "steps": [s.to_json() for s in self.steps],
            "interruption_calls": self.wire,
            "left_behind": list(self.leftovers),
        }
