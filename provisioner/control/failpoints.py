"""Failpoints: named places in the control loop where a test may make the process die.

Production code calls ``failpoints.hit(name)`` at each point; the default :class:`Failpoints`
does nothing there. The crash-safety tests start the daemon through a test-only entry
(``tests/crash_daemon.py``) that installs one that exits there, as SIGKILL would; nothing in
the package reads the environment for it.
"""

from __future__ import annotations

#: The points, in the order a launch meets them.
CRASH_POINTS = (
    "after-attempt-row",  # intent written, launch not sent
    "after-launch-call",  # the cloud started the instance, nothing recorded
    "after-instance-record",  # attempt running, launch event and job state not written
    "after-adopt",  # an unrecorded launch adopted
    "after-terminate",  # decide()'s terminate sent, what follows not done
    "after-preempted",  # attempt ended as preempted, job not updated
    "after-finish-terminate",  # a finished job's instance terminated, job not marked
    "after-reap",  # orphans terminated, events not written
    "after-probe-row",  # a probe under the policy's floor recorded, its instance not terminated
    "after-placement-group",  # a gang's group made and recorded, no node launched
    "after-gang-node",  # node 0 of a gang launched, the other nodes not
    "after-group-delete",  # a gone gang's group deleted, its attempt row not cleared
    "after-notify-claim",  # the daemon's delivery: a notification claimed, nothing sent
    "after-notify-send",  # a notification sent, not yet marked sent (it is sent again)
)


class Failpoints:
    """No-op failpoints (production)."""

    def hit(self, name: str) -> None:
        """Called at failpoint ``name``; does nothing here."""


_installed: Failpoints = Failpoints()


def install(failpoints: Failpoints) -> None:
    """Make ``failpoints`` this process's default (a test entry point, before the daemon
    starts); a reconciler built without its own uses it."""
    global _installed
    _installed = failpoints


def installed() -> Failpoints:
    return _installed
