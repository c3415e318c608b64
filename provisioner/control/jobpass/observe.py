"""The instances the provider listed for a job, recorded (rows for the pass's batch, only
where something changed) and, for a gang, folded into one unit per attempt as decide() sees
it; the steady key the last pass left is taken from the memo (see
:mod:`provisioner.control.jobpass.steady`)."""

from __future__ import annotations

from provisioner.control.jobpass.state import GO_ON, PassState, Result


class Observe:
    """Record the instances seen and fold a gang's into units."""

    def reconcile(self, ps: PassState) -> Result:
        ps.steady, ps.memo.steady = ps.memo.steady, None
        ps.record_instances(ps.seen)
        ps.seen = ps.fold(ps.seen)  # a gang: one unit per attempt, as decide() sees it
        return GO_ON
