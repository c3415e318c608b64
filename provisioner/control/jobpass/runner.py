"""One job's part of a reconcile pass: observe, record, decide, act, composed.

The reconciler (which batches provider calls across jobs) hands each job a
:class:`~provisioner.control.jobpass.state.PassState` (its row, attempts, the instances the
provider listed for it, the :class:`~provisioner.control.jobpass.state.PassEnv`) and
:meth:`JobRunner.step` runs the pass's sub-reconcilers over it, in order, each a field of
the runner with ``reconcile(pass_state) -> Result``: the instances recorded
(:mod:`~.observe`), the agent's progress read (:mod:`~.progress`), its notices
(:mod:`~.notices`) and checkpoints (:mod:`~.checkpoints`) recorded, the probe and idle GPUs
(:mod:`~.probes`), a pass with nothing to do ended (:mod:`~.steady`), what became of the
attempts (:mod:`~.attempts`), then decide() and its actions (:mod:`~.decide`, :mod:`~.act`,
:mod:`~.launch`). A sub-reconciler that settles the job's updates ends the chain; the
restart alert (:class:`~.alerts.Restarts`) looks last, whatever came before. Cancel,
finish, fail, backoff, cooldowns and launches are all decide()'s (see its module docstring
for the actions). Calls point one way: reconciler -> jobpass.runner -> the sub-reconcilers
-> launch, alerts, settle, state -> inputs, records, guard, failpoints.

Crash safety: every effect can be repeated. A launch writes its attempt row (with the
(job, attempt) token) before the cloud call; a pass that finds the row still ``launching``
adopts the instance carrying the attempt's tag, or, when there is none, sends the same launch
again (same token: the provider returns the instance it may have started). Restarts are
counted from the attempts, so a crash between two writes never loses one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from provisioner.control.jobpass.alerts import Restarts
from provisioner.control.jobpass.attempts import Attempts
from provisioner.control.jobpass.checkpoints import Checkpoints
from provisioner.control.jobpass.decide import Decide
from provisioner.control.jobpass.notices import Notices
from provisioner.control.jobpass.observe import Observe
from provisioner.control.jobpass.probes import Probes
from provisioner.control.jobpass.progress import Progress
from provisioner.control.jobpass.state import GO_ON, LeaseLost, PassState, Result
from provisioner.control.jobpass.steady import Steady
from provisioner.control.records import PassReport
from provisioner.core.models import Instance


class SubReconciler(Protocol):
    def reconcile(self, ps: PassState) -> Result: ...


@dataclass(frozen=True)
class JobRunner:
    """One job's pass: :meth:`step` with the instances the provider listed for it. Holds no
    state of a job (that is the :class:`PassState`): one runner serves every job."""

    observe: SubReconciler = field(default_factory=Observe)
    progress: SubReconciler = field(default_factory=Progress)
    notices: SubReconciler = field(default_factory=Notices)
    checkpoints: SubReconciler = field(default_factory=Checkpoints)
    probes: SubReconciler = field(default_factory=Probes)
    steady: SubReconciler = field(default_factory=Steady)
    attempts: SubReconciler = field(default_factory=Attempts)
    decide: SubReconciler = field(default_factory=Decide)
    restarts: SubReconciler = field(default_factory=Restarts)

    def chain(self) -> tuple[SubReconciler, ...]:
        """The sub-reconcilers in their order; the first that settles the job ends it."""
        return (
            self.observe,
            self.progress,
            self.notices,
            self.checkpoints,
            self.probes,
            self.steady,
            self.attempts,
            self.decide,
        )

    def step(self, ps: PassState, seen: list[Instance], report: PassReport) -> Result:
        """Run the job's pass on ``seen`` (the instances listed for it), adding to
        ``report``. A lease lost to another replica leaves the job to it; any other error
        goes to the reconciler, after the job's queued events are dropped (told again)."""
        ps.seen, ps.report = seen, report
        try:
            result = self._step(ps)
            return result.merge(self.restarts.reconcile(ps))
        except LeaseLost as exc:
            ps.drop_queued()
            ps.memo.forget()
            ps.log.warning("job %s: %s; leaving it to its new owner", ps.job.id, exc)
            return GO_ON
        except BaseException:  # the pass forgets the job: what it queued is told again
            ps.drop_queued()
            raise

    def _step(self, ps: PassState) -> Result:
        result = GO_ON
        for sub in self.chain():
            result = result.merge(sub.reconcile(ps))
            if result.settled:
                break
        return result
