"""A job's promises as code: invariants over a snapshot of the store, the cloud and the events.

Each ``check_*`` is a pure function of a :class:`Snapshot` returning the
:class:`Violation` s it finds (none: the promise holds). :func:`snapshot` takes one: the jobs,
their attempts, the instance rows and events from the store, the notification outbox, and the
instances the clouds list under our tag (where providers are given).

Two sets:

* :data:`CHEAP`: the store's rows of a pass's jobs only. The reconciler runs them after every
  pass (:func:`check_pass`): a violation becomes an ``invariant`` event of the job, a WARNING
  log line and the daemon's ``provisioner_invariant_violations_total`` counter.
* :data:`FULL`: the cheap ones and those that need the clouds' lists, every event and the
  outbox; ``provisioner check JOB|--all`` and the seeded whole-system run
  (``tests/seeded.py``, docs/testing.md) run them.

The checks are written to hold at the end of a whole pass (a daemon killed in the middle of
one leaves the next pass to heal what it left).
"""

from provisioner.control.invariants.checks import (
    CHEAP,
    FULL,
    Check,
    Invariant,
    Violation,
    check_block_end,
    check_budget,
    check_ended_rows,
    check_events,
    check_exit_fails,
    check_final_job_live,
    check_live_attempts,
    check_notifications,
    check_orphans,
    check_over_cap,
    check_plan_daemon,
    check_reserved,
    check_results,
    check_resume,
    check_unknown_instances,
    run_checks,
)
from provisioner.control.invariants.daemon import check_pass, listing_error
from provisioner.control.invariants.snapshot import EventFeed, OverCapWatch, Snapshot, snapshot

__all__ = [
    "CHEAP",
    "FULL",
    "Check",
    "EventFeed",
    "Invariant",
    "OverCapWatch",
    "Snapshot",
    "Violation",
    "check_block_end",
    "check_budget",
    "check_ended_rows",
    "check_events",
    "check_exit_fails",
    "check_final_job_live",
    "check_live_attempts",
    "check_notifications",
    "check_orphans",
    "check_over_cap",
    "check_pass",
    "check_plan_daemon",
    "check_reserved",
    "check_results",
    "check_resume",
    "check_unknown_instances",
    "listing_error",
    "run_checks",
    "snapshot",
]
