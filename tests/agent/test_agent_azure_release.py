"""When the agent under an Azure notice lets its VM go (provisioner.agent.handover.Release).

Azure starts a Spot VM's ``Preempt`` event, evicting it, when the VM approves the event or at
its ``NotBefore``, whichever comes first; tests/fake_vms.py's ``Evictions`` does the same here,
killing the agent's process group as the eviction would. The agent runs as a real subprocess
against the sim's metadata service in Azure's format, with a real job that checkpoints on the
signal. Where the controller may overlap the notice (``overlap_notice_s`` no longer than the
notice), the event is approved only after a later attempt reports (its replacement took over);
where it may not, as soon as the notice's checkpoint is in.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from provisioner.agent.spec import AgentSpec
from provisioner.agent.store import CheckpointStore, read_progress
from tests.agent.test_agent import TRAIN, run_agent
from tests.fake_vms import Evictions, MetadataServer
from tests.waiting import until, wait_for

VM = "vm-1"
NOTICE_S = 15.0


@dataclass
class Run:
    store: str
    proc: subprocess.Popen[str]
    evictions: Evictions
    at_eviction: dict[str, Any] = field(default_factory=dict)  # the progress record then


def start(tmp_path: Path, overlap_s: float) -> Run:
    """The agent of attempt 1 on ``VM``, its job running, its VM evicted as Azure does."""
    store = f"file://{tmp_path}/store"
    meta = MetadataServer("azure")
    spec = AgentSpec(
        job_id="az",
        attempt=1,
        command=TRAIN,
        checkpoint_uri=store,
        cloud="azure",
        metadata_url=f"{meta.url}/i/{VM}",
        workdir=str(tmp_path / "w"),
        interval_s=0,
        grace_s=10,
        poll_s=0.2,
        progress_every_s=0.5,
        overlap_notice_s=overlap_s,
    )
    proc = run_agent(spec, tmp_path, start_new_session=True)
    seen: dict[str, Any] = {}

    def evict(_iid: str) -> None:  # the VM goes: its agent and job with it
        seen.update(read_progress(store, "az") or {})
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    run = Run(store, proc, Evictions(meta, evict), seen)
    wait_for(lambda: ((read_progress(store, "az") or {}).get("step") or 0) >= 20, timeout=30)
    return run


def stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=10)
    return out


def test_under_overlap_the_event_is_approved_once_the_replacement_has_taken_over(
    tmp_path: Path,
) -> None:
    run = start(tmp_path, overlap_s=2.0)
    try:
        not_before = time.time() + NOTICE_S
        run.evictions.serve(VM, not_before)
        landed = until(
            lambda: (read_progress(run.store, "az") or {}).get("state") == "interrupted", 10
        )
        assert landed, stop(run.proc)
        time.sleep(2.0)  # ten looks at the store: an agent approving now would have done so
        assert VM not in run.evictions.started, "approved before its replacement took over"
        took_over = time.time()
        CheckpointStore(run.store, "az").write_progress({"attempt": 2, "state": "running"})
        # approved within what is left of the notice (5 s were too few at the end of a loaded
        # 2-core run); an event started by its NotBefore passing says "NotBefore", and fails below
        assert until(lambda: VM in run.evictions.started, not_before - time.time()), stop(run.proc)
        at, why = run.evictions.started[VM]
        assert why == "approved" and took_over < at < not_before, (why, at - took_over)
    finally:
        out = stop(run.proc)
    assert "attempt 2 has taken over" in out, out[-2000:]


@pytest.mark.parametrize("overlap_s", [0.0, 60.0], ids=["gang-or-older-controller", "too-short"])
def test_with_no_overlap_the_event_is_approved_once_the_checkpoint_is_in(
    tmp_path: Path, overlap_s: float
) -> None:
    run = start(tmp_path, overlap_s=overlap_s)
    try:
        not_before = time.time() + NOTICE_S
        run.evictions.serve(VM, not_before)
        assert until(lambda: VM in run.evictions.started, 10), stop(run.proc)
        at, why = run.evictions.started[VM]
        assert why == "approved" and at < not_before
        seen = run.at_eviction  # approved once the notice's checkpoint was in, not before
        assert seen.get("state") == "interrupted", seen
        assert seen.get("last_checkpoint") == CheckpointStore(run.store, "az").latest()
        assert (seen.get("last_checkpoint_step") or 0) >= 20
    finally:
        out = stop(run.proc)
    assert "no replacement overlaps the notice" in out, out[-2000:]
