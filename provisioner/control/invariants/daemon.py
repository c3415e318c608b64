"""The daemon's side of the invariants: the cheap checks after every pass, each violation an
``invariant`` event of its job, a WARNING line and the daemon's counter."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from providers.base import ProviderError
from provisioner.control.invariants.checks import CHEAP, Violation, run_checks
from provisioner.control.invariants.snapshot import snapshot
from provisioner.control.store import Store

log = logging.getLogger("provisioner.control.invariants")


def check_pass(store: Store, job_ids: Sequence[str], now: datetime) -> list[Violation]:
    """The cheap checks over the jobs a pass held, each violation recorded as an
    ``invariant`` event of its job (once per job, invariant and message) and logged as a
    WARNING. Never raises: a check that cannot run is logged and skipped."""
    if not job_ids:
        return []
    try:
        found = run_checks(snapshot(store, (), now, job_ids=job_ids, cheap=True), CHEAP)
    except Exception:  # the store may be the trouble; the pass itself went fine
        log.debug("invariant checks skipped", exc_info=True)
        return []
    for v in found:
        log.warning("invariant violated: %s", v)
        tag = f"[{v.invariant.value}]"
        try:  # told once per job and invariant (a message may change pass to pass)
            if not store.has_event(v.job_id, "invariant", tag):
                store.add_event(
                    v.job_id or None,
                    "invariant",
                    f"{tag} {v.message}",
                    at=now,
                    invariant=v.invariant.value,
                )
        except Exception:
            log.debug("invariant event not recorded", exc_info=True)
    return found


def listing_error(exc: ProviderError) -> str:
    return f"cannot list instances at {exc.provider or '?'}: {exc}"
