"""The states a job, an attempt and an agent move through, the causes that move them, and the
one table of every allowed transition.

Everything that changes a job's or an attempt's state names a :class:`Cause`; decide() picks
the cause (on its :class:`~provisioner.core.actions.Terminate` and final actions), the control
loop carries the change out through :func:`job_after` and :func:`attempt_end`, and nothing
branches on the wording of a free-text reason. The tables below are the whole story: a test
walks them, the store's writers check against them, and ``docs/architecture.md`` shows them as
:func:`markdown` renders them (a test keeps the two equal).

All enums are ``str`` enums whose values are what the store and the JSON output hold, so a
stored ``"running"`` compares equal to :attr:`JobState.RUNNING`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from provisioner.errors import ControlError


class _Named(str, enum.Enum):
    def __str__(self) -> str:
        return self.value


class JobState(_Named):
    """Where a job stands. The first four are active (the daemon supervises them)."""

    PENDING = "pending"  # submitted, nothing launched yet
    RUNNING = "running"  # an attempt runs (or is being launched into a running job)
    RECOVERING = "recovering"  # its instance went or a launch was refused: launching again
    WAITING = "waiting"  # nothing runs by choice: market, window, backoff, budget paused
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STOPPED = "stopped"  # stopped by the policy (GPUs idle with ``idle.action: stop``)

    @property
    def final(self) -> bool:
        return self in FINAL_JOB_STATES

    @property
    def active(self) -> bool:
        return not self.final


class AttemptState(_Named):
    """One attempt: one launch of the job on one instance (or one gang)."""

    LAUNCHING = "launching"  # the row is written before the cloud call (the intent)
    RUNNING = "running"
    PREEMPTED = "preempted"  # the cloud took it back (with or without a notice): a restart
    ENDED = "ended"  # we stopped it, or the job ended on it
    FAILED = "failed"  # the launch never gave an instance (refused, or failed)

    @property
    def live(self) -> bool:
        return self in (AttemptState.LAUNCHING, AttemptState.RUNNING)


class AgentState(_Named):
    """What the node agent reports of the job's command (its progress record)."""

    STARTING = "starting"
    PREPARING = "preparing"  # fetching code, secrets, image; running setup
    PROBING = "probing"
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"  # a notice came: the job is saving
    INTERRUPTED = "interrupted"  # stopped on a notice (its checkpoint, if any, is up)
    DONE = "done"  # exited 0, output up
    FAILED = "failed"  # exited non-zero without a notice
    SETUP_FAILED = "setup-failed"  # never started: code, secrets, image or setup failed

    @classmethod
    def parse(cls, value: object) -> AgentState | None:
        """The state of a progress record; None for a missing or unknown one (a newer agent)."""
        try:
            return cls(str(value)) if value is not None else None
        except ValueError:
            return None


class InterruptionKind(_Named):
    """What a cloud says of a spot instance."""

    NOTICE = "notice"  # it will be taken back at a deadline
    PREEMPTED = "preempted"  # it has been taken back
    REBALANCE = "rebalance"  # an early signal (AWS rebalance recommendation): no deadline


class Cause(_Named):
    """Why a job or an attempt changed state (stored with the row: ``jobs.cause``,
    ``attempts.end_cause``)."""

    SUBMITTED = "submitted"
    LAUNCHED = "launched"
    ADOPTED = "adopted"  # a launch found at the cloud by its tag after a crash
    LAUNCH_REFUSED = "launch-refused"  # capacity, quota or price: the next offer is tried
    LAUNCH_FAILED = "launch-failed"  # auth, invalid, transient past retries: backed off
    GUARD_REFUSED = "guard-refused"  # a launch above a cap or outside residency: never sent
    WAITING = "waiting"  # the strategy waits (no capacity worth taking, a look not due)
    BACKOFF = "backoff"
    OUTSIDE_WINDOW = "outside-window"
    NOTICE = "notice"  # an interruption notice: the job checkpoints
    PREEMPTED = "preempted"  # the cloud took the instance back
    HANDED_OVER = "handed-over"  # a switch made before break: the new attempt took over
    SWITCHED = "switched"  # a switch made after break (the old instance stopped first)
    INSTANCE_LOST = "instance-lost"  # gone without a notice or a terminate of ours
    DUPLICATE = "duplicate"  # a second live instance of the job
    SETUP_FAILED = "setup-failed"
    EXIT_RESTART = "exit-restart"  # a non-zero exit the policy restarts on
    JOB_DONE = "job-done"  # the command exited 0 (or the checkpoints cover the work)
    JOB_EXITED = "job-exited"  # the command exited non-zero: the job fails
    JOB_ENDED = "job-ended"  # the job ended (any final state): its open attempts end
    CANCELLED = "cancelled"
    BUDGET_EXHAUSTED = "budget-exhausted"
    BUDGET_PAUSED = "budget-paused"  # ``on_exhausted: pause``
    NO_LAUNCH_FITS = "no-launch-fits"  # nothing the remaining budget can pay for
    RESTARTS_EXHAUSTED = "restarts-exhausted"
    PROBE_BELOW_FLOOR = "probe-below-floor"
    #: the running spot price passed the bid cap (``bid_cap.enforce: daemon``): stopped, or
    #: handed over to an instance under the cap
    OVER_CAP = "over-cap"
    GPU_IDLE = "gpu-idle"
    POLICY_ERROR = "policy-error"  # the stored policy no longer parses
    UNKNOWN = "unknown"  # rows written before causes were stored

    @classmethod
    def parse(cls, value: object) -> Cause:
        try:
            return cls(str(value)) if value else cls.UNKNOWN
        except ValueError:
            return cls.UNKNOWN


FINAL_JOB_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.STOPPED}
)
ACTIVE_JOB_STATES = tuple(s for s in JobState if s not in FINAL_JOB_STATES)
LIVE_ATTEMPT_STATES = frozenset({AttemptState.LAUNCHING, AttemptState.RUNNING})

J, A, C = JobState, AttemptState, Cause
_ACTIVE = (J.PENDING, J.RUNNING, J.RECOVERING, J.WAITING)

#: Causes that fail a job, and the final state each other final cause leads to.
FAIL_CAUSES = frozenset(
    {
        C.JOB_EXITED,
        C.SETUP_FAILED,
        C.RESTARTS_EXHAUSTED,
        C.BUDGET_EXHAUSTED,
        C.NO_LAUNCH_FITS,
        C.POLICY_ERROR,
    }
)
_FINAL_BY_CAUSE = {
    C.JOB_DONE: J.SUCCEEDED,
    C.CANCELLED: J.CANCELLED,
    C.GPU_IDLE: J.STOPPED,
    **{c: J.FAILED for c in FAIL_CAUSES},
}
#: Causes that take a job to ``waiting`` when nothing runs.
WAIT_CAUSES = frozenset({C.WAITING, C.BACKOFF, C.OUTSIDE_WINDOW, C.BUDGET_PAUSED, C.NOTICE})
#: Causes after which the job is launched again (its instance went, or a launch was refused).
RECOVER_CAUSES = frozenset(
    {
        C.LAUNCH_REFUSED,
        C.LAUNCH_FAILED,
        C.GUARD_REFUSED,
        C.PREEMPTED,
        C.INSTANCE_LOST,
        C.SETUP_FAILED,
        C.EXIT_RESTART,
        C.PROBE_BELOW_FLOOR,
        C.OVER_CAP,
    }
)


def _table() -> frozenset[tuple[JobState, JobState, Cause]]:
    rows: set[tuple[JobState, JobState, Cause]] = set()
    for s in _ACTIVE:
        rows |= {(s, f, c) for c, f in _FINAL_BY_CAUSE.items()}
        rows.add((s, J.RUNNING, C.LAUNCHED))
        rows |= {(s, J.RECOVERING, c) for c in RECOVER_CAUSES}
        rows |= {(s, J.WAITING, c) for c in WAIT_CAUSES}
    # a running job stays running through a switch (the new attempt launched first)
    rows |= {(J.RUNNING, J.RUNNING, c) for c in (C.HANDED_OVER, C.SWITCHED, C.DUPLICATE)}
    return frozenset(rows)


#: Every allowed change of a job's state: (from, to, cause). A final state has no way out.
JOB_TRANSITIONS = _table()

#: Why an attempt on an instance ends ``ended`` (we stopped it, or the job ended on it).
ENDED_CAUSES = frozenset(
    {
        C.HANDED_OVER,
        C.SWITCHED,
        C.INSTANCE_LOST,
        C.DUPLICATE,
        C.SETUP_FAILED,
        C.EXIT_RESTART,
        C.JOB_DONE,
        C.JOB_EXITED,
        C.JOB_ENDED,
        C.CANCELLED,
        C.BUDGET_EXHAUSTED,
        C.BUDGET_PAUSED,
        C.NO_LAUNCH_FITS,
        C.OUTSIDE_WINDOW,
        C.WAITING,
        C.RESTARTS_EXHAUSTED,
        C.PROBE_BELOW_FLOOR,
        C.OVER_CAP,
        C.GPU_IDLE,
        C.POLICY_ERROR,
    }
)

#: Every allowed change of an attempt's state: (from, to, cause). An attempt still
#: ``launching`` (its instance not yet recorded, or a gang's nodes coming up) ends as a running
#: one does.
ATTEMPT_TRANSITIONS: frozenset[tuple[AttemptState, AttemptState, Cause]] = frozenset(
    {
        (A.LAUNCHING, A.RUNNING, C.LAUNCHED),
        (A.LAUNCHING, A.RUNNING, C.ADOPTED),
        (A.LAUNCHING, A.FAILED, C.LAUNCH_REFUSED),
        (A.LAUNCHING, A.FAILED, C.LAUNCH_FAILED),
        (A.LAUNCHING, A.FAILED, C.GUARD_REFUSED),
        *((s, A.PREEMPTED, C.PREEMPTED) for s in (A.LAUNCHING, A.RUNNING)),
        *((s, A.ENDED, c) for s in (A.LAUNCHING, A.RUNNING) for c in ENDED_CAUSES),
    }
)


class TransitionError(ControlError, ValueError):
    """A state change the table does not allow (a bug in the caller, never the user's)."""


def job_allowed(before: JobState, after: JobState, cause: Cause) -> bool:
    """Whether the table lets a job go from ``before`` to ``after`` for ``cause`` (staying in
    an active state is always allowed)."""
    return (before == after and before.active) or (before, after, cause) in JOB_TRANSITIONS


def attempt_end(cause: Cause) -> AttemptState:
    """The state an attempt running on an instance ends in when it stops for ``cause``."""
    return A.PREEMPTED if cause is C.PREEMPTED else A.ENDED


def counts_as_restart(state: str, cause: str | None) -> bool:
    """Whether an ended attempt was a restart (``restart.max_restarts`` counts them): the
    cloud took it back, or its command exited with a code the policy restarts on."""
    return state == A.PREEMPTED or Cause.parse(cause) is C.EXIT_RESTART


@dataclass(frozen=True, slots=True)
class Step:
    """A job's change of state: from, to, and why (``to == before``: it stays)."""

    before: JobState
    after: JobState
    cause: Cause

    @property
    def changed(self) -> bool:
        return self.before != self.after


def job_after(
    before: JobState,
    *,
    final: Cause | None = None,
    running: bool = False,
    refused: Cause | None = None,
    ended: Cause | None = None,
    waited: Cause | None = None,
) -> Step:
    """The job's next state once a pass has carried out decide()'s actions: ``final`` (the
    cause of its Finish, Fail, Cancel or Stop), whether an attempt runs after them (launched
    now or before), a launch refused (its cause), an attempt ended (its cause), a wait (its
    cause). Raises :class:`TransitionError` for a change the table does not allow."""
    if before.final:
        return Step(before, before, final or C.UNKNOWN)
    if final is not None:
        step = Step(before, _FINAL_BY_CAUSE.get(final, J.FAILED), final)
    elif running:
        step = Step(before, J.RUNNING, C.LAUNCHED)
    elif refused is not None:
        step = Step(before, J.RECOVERING, refused)
    elif ended is not None and ended in RECOVER_CAUSES:
        step = Step(before, J.RECOVERING, ended)
    elif waited is not None or ended is not None:
        cause = waited if waited in WAIT_CAUSES else C.WAITING
        step = Step(before, J.WAITING, cause)
    else:
        step = Step(before, before, C.UNKNOWN)
    if step.changed and not job_allowed(step.before, step.after, step.cause):
        raise TransitionError(f"job {step.before} -> {step.after} ({step.cause}) is not allowed")
    return step


def check_attempt(before: AttemptState, after: AttemptState, cause: Cause) -> None:
    """Raise :class:`TransitionError` unless an attempt may go ``before -> after`` for
    ``cause``."""
    if (before, after, cause) not in ATTEMPT_TRANSITIONS:
        raise TransitionError(f"attempt {before} -> {after} ({cause}) is not allowed")


# -- the table as documentation --------------------------------------------------------------


def _group(
    rows: Iterable[tuple[_Named, _Named, Cause]], order: Sequence[_Named]
) -> list[tuple[str, str, str]]:
    """Rows (from, to, causes), the from-states that share a target and its causes in one."""
    causes: dict[tuple[_Named, _Named], set[str]] = {}
    for a, b, c in rows:
        causes.setdefault((a, b), set()).add(c.value)
    froms: dict[tuple[_Named, tuple[str, ...]], list[_Named]] = {}
    for (a, b), cs in causes.items():
        froms.setdefault((b, tuple(sorted(cs))), []).append(a)
    rank = {s: i for i, s in enumerate(order)}
    out = [(sorted(fs, key=rank.__getitem__), b, cs) for (b, cs), fs in froms.items()]
    out.sort(key=lambda r: (rank[r[1]], [rank[f] for f in r[0]]))
    return [(", ".join(f.value for f in fs), b.value, ", ".join(cs)) for fs, b, cs in out]


def markdown() -> str:
    """The transition tables as Markdown (docs/architecture.md holds this text)."""

    def table(title: str, rows: Sequence[tuple[str, str, str]]) -> list[str]:
        out = [title, "", "| from | to | causes |", "| --- | --- | --- |"]
        out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
        return [*out, ""]

    lines = [
        "<!-- generated by provisioner.core.states.markdown(); tests/core/test_states.py keeps it -->",
        "",
        *table(
            "Jobs (a final state has no way out; an active one may stay as it is):",
            _group(JOB_TRANSITIONS, list(JobState)),
        ),
        *table("Attempts:", _group(ATTEMPT_TRANSITIONS, list(AttemptState))),
        "<!-- end of the generated tables -->",
    ]
    return "\n".join(lines)
