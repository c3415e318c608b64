"""Deleting everything a drill made, from its ledger: after every drill, and after a killed one
(``provisioner drill --cleanup``).

In order: the job's instances (found by its tag at the provider, terminated, then listed again
until none is alive), its placement groups, what the interruption made (FIS experiment
template, its role), the job's objects in the checkpoint store (checkpoints, progress, logs,
the substitute notice), and the sim's own server. What cannot be deleted is returned, one line
each, naming it; a ledger with nothing left is marked ``cleaned``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from provisioner.core.models import TAG_JOB
from provisioner.drill.ledger import Ledger


def _instances(provider: Any, job_id: str) -> list[Any]:
    return [i for i in provider.list({TAG_JOB: job_id}) if i.state.alive]


def clean(
    ledger: Ledger,
    factory: Callable[[str, dict[str, Any]], Any],
    *,
    interrupter: Any = None,
    wait_s: float = 180.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Delete what ``ledger`` names; returns what is left (empty: everything is gone)."""
    from provisioner.drill.interrupters import interrupter_for

    left: list[str] = []
    provider: Any = None
    try:
        provider = factory(ledger.provider, dict(ledger.provider_options))
    except Exception as exc:
        left.append(
            f"{ledger.provider}: cannot reach the provider ({exc}); its instances tagged "
            f"{TAG_JOB}={ledger.job_id} may still run"
        )
    if provider is not None:
        left += _terminate(provider, ledger, wait_s, sleep)
        left += _groups(provider, ledger)
        try:
            cloud = (
                ledger.provider_options.get("mimic", "aws")
                if ledger.provider == "sim"
                else ledger.provider
            )
            itr = interrupter or interrupter_for(ledger.provider, str(cloud), provider, ledger, 0.0)
            left += itr.cleanup()
        except Exception as exc:
            left.append(f"the interruption's resources: {exc}")
    left += _objects(ledger)
    if provider is not None and ledger.provider == "sim":
        try:
            provider.shutdown_server(terminate_all=True)
        except Exception as exc:
            left.append(f"the drill's sim server: {exc}")
    if provider is not None:
        close = getattr(provider, "close", None)
        if close is not None and ledger.provider != "sim":
            with contextlib.suppress(Exception):
                close()
    ledger.cleaned = not left
    ledger.save()
    return left


def _terminate(
    provider: Any, ledger: Ledger, wait_s: float, sleep: Callable[[float], None]
) -> list[str]:
    try:
        alive = _instances(provider, ledger.job_id)
        deadline = time.monotonic() + wait_s
        while alive:
            provider.terminate([i.id for i in alive])
            if time.monotonic() > deadline:
                break
            sleep(1.0)
            alive = _instances(provider, ledger.job_id)
    except Exception as exc:
        return [f"instances tagged {TAG_JOB}={ledger.job_id}: {exc}"]
    return [f"instance {i.id} ({i.zone}) still {i.state.value}" for i in alive]


def _groups(provider: Any, ledger: Ledger) -> list[str]:
    lister = getattr(provider, "list_placement_groups", None)
    if lister is None:
        return []
    left = []
    try:
        groups = lister({TAG_JOB: ledger.job_id})
    except Exception as exc:
        if "NotImplemented" in type(exc).__name__:
            return []
        return [f"placement groups tagged {TAG_JOB}={ledger.job_id}: {exc}"]
    for g in groups:
        try:
            provider.delete_placement_group(g.id)
        except Exception as exc:
            left.append(f"placement group {g.id}: {exc}")
    return left


def _objects(ledger: Ledger) -> list[str]:
    from provisioner.agent.store import CheckpointStore

    try:
        cs = CheckpointStore(ledger.checkpoint_uri, ledger.job_id)
        if cs.fs.exists(cs.root):
            cs.fs.rm(cs.root, recursive=True)
        if cs.fs.exists(cs.root):
            return [f"the drill's objects at {ledger.checkpoint_uri}/{ledger.job_id}"]
    except Exception as exc:
        return [f"the drill's objects at {ledger.checkpoint_uri}/{ledger.job_id}: {exc}"]
    return []
