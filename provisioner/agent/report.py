"""The agent's progress record (``progress.json`` in the checkpoint store; docs/agent.md), its
write, and the job's environment (what the job is told of the agent)."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from providers.base import redact
from provisioner.agent import protocol
from provisioner.agent.protocol import AgentNotice
from provisioner.agent.scrub import scrub_doc, scrubber
from provisioner.agent.store import step_of, write_text_uri
from provisioner.probe.idle import ENV_GPU_FILE

if TYPE_CHECKING:
    from pathlib import Path

    from provisioner.agent.gang import Gang
    from provisioner.agent.logship import LogShipper
    from provisioner.agent.notices import Notice
    from provisioner.agent.prepare import Ready
    from provisioner.agent.repeats import Repeats
    from provisioner.agent.signals import EarlyWatch
    from provisioner.agent.spec import AgentSpec
    from provisioner.agent.store import CheckpointStore
    from provisioner.agent.syncer import Syncer
    from provisioner.probe.idle import IdleTracker, UtilisationSource

log = logging.getLogger("provisioner.agent")


class ReportedAgent(Protocol):
    """What the record reads (and writes) of the agent: :class:`provisioner.agent.runner.Agent`
    is one. The runner imports this module, so this module names the agent by its shape."""

    spec: AgentSpec
    ready: Ready  # the job's road: its secrets
    store: CheckpointStore
    gang: Gang | None
    gang_env: dict[str, str]
    ckpt_dir: Path
    output_dir: Path
    job_progress_file: Path
    notice_file: Path
    gpu_source: UtilisationSource
    state: str
    started_at: datetime
    resumed_from: str | None
    notice: Notice | None
    early: EarlyWatch
    syncer: Syncer | None
    exit_code: int | None
    note: str
    gpu: list[dict[str, Any]] | None
    idle: IdleTracker | None
    probe: dict[str, Any] | None
    prepared: dict[str, Any]
    setup_error: dict[str, Any] | None
    job_log: LogShipper | None
    progress_failures: Repeats
    _skip_progress: bool
    _reported_ckpt: str | None
    _reported_job: int | None

    @property
    def stop_reason(self) -> str | None: ...


def iso(value: datetime | None) -> str | None:
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z") if value else None


def job_env(agent: ReportedAgent, resume_from: str) -> dict[str, str]:
    """``agent``'s job's own variables: its ``env``, its secrets, where it finds the agent
    (docs/agent.md's protocol) and a gang's torchrun variables. With the basics of the agent's
    environment (:mod:`provisioner.core.jobenv`) they are all the job gets."""
    env = {"PYTHONUNBUFFERED": "1", **agent.spec.env, **agent.ready.secrets}
    env.update(
        {
            protocol.ENV_JOB_ID: agent.spec.job_id,
            protocol.ENV_ATTEMPT: str(agent.spec.attempt),
            protocol.ENV_CHECKPOINT_DIR: str(agent.ckpt_dir),
            protocol.ENV_RESUME_FROM: resume_from,
            protocol.ENV_SIGNAL: agent.spec.signal_name,
            protocol.ENV_OUTPUT_DIR: str(agent.output_dir),
            protocol.ENV_PROGRESS_FILE: str(agent.job_progress_file),
            protocol.ENV_NOTICE_FILE: str(agent.notice_file),
        }
    )
    if agent.gpu_source.path is not None:  # the sim: the job reports its "GPU" here
        env[ENV_GPU_FILE] = str(agent.gpu_source.path)
    env.update(agent.gang_env)
    return env


def job_file_stamp(agent: ReportedAgent) -> int | None:
    """When the job last wrote its progress file (ns), or None: what the agent compares to
    write its own record again at once under a notice."""
    try:
        return agent.job_progress_file.stat().st_mtime_ns
    except OSError:
        return None


def notice_record(agent: ReportedAgent) -> AgentNotice:
    """The agent's notice as its record carries it (and the controller reads it: an
    interruption of this attempt, whatever the cloud's API says)."""
    n = agent.notice
    assert n is not None
    if n.raw.startswith("gang: "):
        source = "gang"  # a peer's metadata endpoint served it
    elif agent.stop_reason and n.raw == agent.stop_reason:
        source = "signal"  # SIGTERM/SIGINT to the agent: the VM going down, for some reason
    else:
        source = "metadata"
    return AgentNotice(n.seen_at, n.deadline, n.raw, source)


def progress_record(agent: ReportedAgent) -> dict[str, Any]:
    """What ``agent`` reports now: its state, the job's step, the last checkpoint, a notice,
    the job's road (code, setup, or why setup failed), GPUs, the probe."""
    job: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        job = json.loads(agent.job_progress_file.read_text(encoding="utf-8"))
    if not isinstance(job, dict):
        job = {}
    s = agent.syncer
    last = s.uploaded if s else agent.resumed_from
    return {
        "job_id": agent.spec.job_id,
        "attempt": agent.spec.attempt,
        "instance_id": agent.spec.instance_id,
        "cloud": agent.spec.cloud,
        "host": socket.gethostname(),
        "state": agent.state,
        "step": job.get("step"),
        "total_steps": job.get("total_steps"),
        "job": job,
        "last_checkpoint": last,
        "last_checkpoint_step": step_of(last),
        "last_checkpoint_at": iso(s.uploaded_at if s else None),
        # who wrote it: this attempt when it uploaded it, else an earlier one (resumed from)
        "last_checkpoint_attempt": agent.spec.attempt if s and s.uploaded_at else None,
        "checkpoints": [
            {"name": n, "step": step_of(n), "at": iso(at)} for n, at in (s.history if s else [])
        ],
        "resumed_from": agent.resumed_from,
        "upload_error": s.error if s else None,
        "notice": None if agent.notice is None else notice_record(agent).to_doc(),
        "rebalance": agent.early.to_doc(),  # an early signal (provisioner.agent.signals)
        "exit_code": agent.exit_code,
        "note": agent.note,
        "gpu": agent.gpu,
        "gpu_idle": None
        if agent.idle is None
        else {
            "since": iso(agent.idle.since),
            "threshold_pct": agent.idle.threshold_pct,
            "utilization_pct": agent.idle.last_pct,
        },
        "probe": agent.probe,
        "prepared": agent.prepared or None,
        "setup_error": agent.setup_error,
        "log_error": agent.job_log.error if agent.job_log else None,
        "started_at": iso(agent.started_at),
        "updated_at": iso(datetime.now(UTC)),
    }


def masked(agent: ReportedAgent, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with the job's secrets (and any credential the agent registered, e.g. a
    store's key) scrubbed from every string in it, keys included: the job's own progress is
    the job's to write, and may hold a secret it was given."""
    scrub = scrubber(agent.ready.secrets.values())
    out: dict[str, Any] = scrub_doc(doc, lambda text: redact(scrub(text)))
    return out


def write_record(agent: ReportedAgent) -> None:
    """Write ``agent``'s record where the controller reads it (node 0 speaks for a gang; a
    later attempt's record is never overwritten), its secrets masked (:func:`masked`); best
    effort: the job goes on."""
    doc = progress_record(agent)
    agent._reported_ckpt, agent._reported_job = doc["last_checkpoint"], job_file_stamp(agent)
    doc = masked(agent, doc)
    try:
        if agent.gang is not None and agent.gang.node > 0:  # node 0 speaks for the gang
            agent.gang.write_node_progress(doc)
        elif not agent.spec.progress_uri:
            current = agent.store.read_json("progress.json")
            if current and int(current.get("attempt") or 0) > agent.spec.attempt:
                if not agent._skip_progress:
                    log.info("a later attempt reports progress; not overwriting it")
                agent._skip_progress = True
                return
            agent.store.write_progress(doc)
        else:
            write_text_uri(agent.spec.progress_uri, json.dumps(doc, indent=2, sort_keys=True))
    except Exception as exc:  # progress is best effort; the job goes on
        agent.progress_failures.failed(f"cannot write progress: {type(exc).__name__}: {exc}")
    else:
        agent.progress_failures.ok()
