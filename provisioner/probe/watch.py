"""The controller's side of the probe and of the idle-GPU policy, one job at a time.

Called by :class:`provisioner.control.jobpass.JobRunner` (typed here as its base,
:class:`provisioner.control.jobbase.JobPassBase`) each pass with the progress it read:

- a probe the agent reported for the running attempt is recorded in the store (once: the
  row's (job, attempt) is unique) with an event; where the policy has
  ``resources.min_measured_fraction`` and the probe measured less, the instance is
  terminated, the attempt ended with the reason, and its zone cooled down (the measured
  figure then ranks the type down, or rejects it, in the next plan);
- a job whose GPUs the agent has seen idle for the policy's ``idle.duration`` is reported
  (an ``idle`` event, once per attempt and idle spell) and, with ``action: stop``, stopped.

Both are repeatable: the row is written before the instance is terminated, so a crash
between the two is finished by the next pass.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from provisioner.core.timefmt import parse_time
from provisioner.probe import records
from provisioner.probe.measured import Key, Measured

if TYPE_CHECKING:
    from provisioner.control.jobbase import JobPassBase as JobRunner
    from provisioner.control.records import PassReport
    from provisioner.control.store import AttemptRow, Store
    from provisioner.core.models import Instance

log = logging.getLogger("provisioner.control.reconciler")

#: The store's measured figures are read again at most this often (and after each new probe).
MEASURED_EVERY = timedelta(seconds=60)


class MeasuredFigures:
    """The store's probe results summarised for the planner, cached between passes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.version = 0
        self._at: datetime | None = None
        self._value: dict[Key, Measured] = {}

    def get(self, now: datetime) -> dict[Key, Measured]:
        if self._at is None or now - self._at >= MEASURED_EVERY:
            try:
                value = records.measured(self.store)
            except Exception as exc:  # a store hiccup: plan on the datasheet this time
                log.warning("cannot read measured figures: %s", exc)
                value = self._value
            if value != self._value:
                self.version += 1
            self._value, self._at = value, now
        return self._value

    def invalidate(self) -> None:
        self._at = None


def _span(td: timedelta) -> str:
    s = int(td.total_seconds())
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def watch(
    runner: JobRunner, progress: dict[str, Any] | None, live: list[Instance], report: PassReport
) -> bool:
    """Record the attempt's probe and apply the probe floor and the idle policy; True when
    it ended the attempt or the job (the caller's pass for this job is over)."""
    cur = runner.current
    if cur is None or cur.state != "running" or not progress:
        return False
    try:
        attempt = int(progress.get("attempt") or 0)
    except (TypeError, ValueError):
        return False
    if attempt != cur.attempt:
        return False
    if _probe(runner, cur, progress, report):
        return True
    return _idle(runner, cur, progress, live, report)


def _probe(runner: JobRunner, cur: AttemptRow, progress: dict[str, Any], report: Any) -> bool:
    p = progress.get("probe")
    if not isinstance(p, dict) or p.get("attempt") != cur.attempt:
        return False
    if p.get("state") not in ("done", "failed"):
        return False
    memo = runner.memo.watch
    if memo.get("probe") == cur.attempt:
        return False
    store, job, policy = runner.store, runner.job, runner.policy
    floor = policy.resources.min_measured_fraction
    prior = records.verdict(store, job.id, cur.attempt)
    if prior is not None:  # recorded by an earlier pass (or process)
        memo["probe"] = cur.attempt
        if prior == "below":  # ...which may have died before the instance went
            row = records.probes(store, job.id, limit=50)
            mine = next((r for r in row if r.attempt == cur.attempt), None)
            if mine is not None:
                _enforce(runner, cur, mine.fraction, mine.precision, floor, report)
                return True
        return False
    doc: dict[str, Any] | None
    if p.get("state") == "failed":
        doc = {"error": str(p.get("error") or "probe failed"), "summary": {}}
        verdict = "failed"
    else:
        doc = _read_report(runner, str(p.get("path") or ""))
        if doc is None:
            return False  # not readable yet: the next pass tries again
        fraction = (doc.get("summary") or {}).get("fraction")
        verdict = (
            "unknown"
            if fraction is None
            else ("below" if floor is not None and float(fraction) < floor else "ok")
        )
    saved = records.save_probe(
        store,
        job_id=job.id,
        attempt=cur.attempt,
        provider=cur.provider,
        instance_type=cur.instance_type,
        gpu=cur.gpu,
        gpu_count=cur.gpu_count,
        zone=cur.zone,
        instance_id=cur.instance_id,
        at=runner.now,
        report=doc,
        verdict=verdict,
    )
    memo["probe"] = cur.attempt
    if saved:
        runner.env.measured.invalidate()
    s = doc.get("summary") or {}
    where = f"{cur.provider}:{cur.zone} {cur.instance_type} ({cur.gpu_count}x {cur.gpu})"
    if verdict == "failed":
        runner.event("probe", f"attempt {cur.attempt}: probe failed on {where}: {doc['error']}")
        return False
    if s.get("fraction") is None:
        runner.event(
            "probe",
            f"attempt {cur.attempt}: probe on {where} ({doc.get('backend')}): "
            f"{s.get('note') or 'nothing to compare with a datasheet'}",
        )
        return False
    runner.event(
        "probe",
        f"attempt {cur.attempt}: {where} measured {float(s['fraction']):.0%} of its datasheet "
        f"{str(s.get('precision') or '').upper()} matmul"
        + (f" ({float(s['tflops']):,.1f} TFLOPS)" if s.get("tflops") else "")
        + f" with {doc.get('backend')}",
        fraction=s.get("fraction"),
        instance=cur.instance_id,
    )
    if verdict == "below":
        runner.env.failpoints.hit("after-probe-row")
        _enforce(runner, cur, float(s["fraction"]), s.get("precision"), floor, report)
        return True
    return False


def _read_report(runner: JobRunner, rel: str) -> dict[str, Any] | None:
    from provisioner.agent.store import CheckpointStore

    if not rel or ".." in rel.split("/"):
        return None
    try:
        store = runner.memo.checkpoints or CheckpointStore(runner.checkpoint_uri(), runner.job.id)
        doc: dict[str, Any] | None = store.read_json(rel)
        return doc
    except Exception as exc:
        log.warning("job %s: cannot read probe report %s: %s", runner.job.id, rel, exc)
        return None


def _enforce(
    runner: JobRunner,
    cur: AttemptRow,
    fraction: float | None,
    precision: str | None,
    floor: float | None,
    report: Any,
) -> None:
    """Terminate the attempt's instance, end the attempt, cool its zone down."""
    reason = (
        f"probe: {fraction or 0:.0%} of datasheet {str(precision or '').upper()} matmul, "
        f"under resources.min_measured_fraction {floor or 0:.0%}"
    )
    if cur.instance_id:
        _terminate(runner, [cur.instance_id], report, reason)
    runner.end_attempt(cur, "ended", reason)
    until = runner.now + runner.policy.restart.zone_cooldown
    runner.cool_down(cur.provider, cur.zone, until, reason)
    runner.store.update_job(
        runner.job.id, at=runner.now, state="recovering", spent_usd=runner.spent()
    )
    runner.job.state = "recovering"
    runner.event(
        "probe-below",
        f"attempt {cur.attempt}: terminated {cur.instance_id} ({cur.instance_type}): {reason}; "
        f"{cur.provider}:{cur.zone} cooled down until {until:%H:%M:%S}",
        instance=cur.instance_id,
        zone=cur.zone,
    )


def _terminate(runner: JobRunner, ids: list[str], report: Any, reason: str) -> None:
    """Terminate instances (their rows ended now, for ``reason``); one that is gone already
    (preempted meanwhile) is no error."""
    from providers.base import ErrorKind, ProviderError

    try:
        runner.provider.terminate(ids)
    except ProviderError as exc:
        if exc.kind is not ErrorKind.NOT_FOUND:
            raise
    runner.store.end_instances(runner.provider.name, ids, runner.now, reason, runner.job.id)
    report.provider_calls += 1
    report.terminations += len(ids)


def _idle(
    runner: JobRunner,
    cur: AttemptRow,
    progress: dict[str, Any],
    live: list[Instance],
    report: Any,
) -> bool:
    idle = runner.policy.idle
    if idle is None:
        return False
    doc = progress.get("gpu_idle")
    since = parse_time(doc.get("since")) if isinstance(doc, dict) else None
    if since is None or runner.now - since < idle.duration:
        return False
    assert isinstance(doc, dict)
    key = (cur.attempt, doc.get("since"))
    if runner.memo.watch.get("idle") == key:
        return False
    runner.memo.watch["idle"] = key
    mark = f"idle since {doc.get('since')}"
    message = (
        f"attempt {cur.attempt}: every GPU under {idle.threshold_pct:g}% utilisation for "
        f"{_span(runner.now - since)} on {cur.instance_id} ({mark})"
    )
    if not runner.store.has_event(runner.job.id, "idle", mark):
        runner.event("idle", message, instance=cur.instance_id, action=idle.action)
    if idle.action != "stop":
        return False
    reason = f"stopped: GPU idle for {_span(runner.now - since)} (policy idle.action: stop)"
    ids = [i.id for i in live] or ([cur.instance_id] if cur.instance_id else [])
    if ids:
        _terminate(runner, ids, report, reason)
    for a in runner.attempts:
        if a.state in ("launching", "running"):
            runner.end_attempt(a, "ended", reason)
    runner.store.update_job(
        runner.job.id, at=runner.now, state="stopped", reason=reason, spent_usd=runner.spent()
    )
    runner.job.state = "stopped"
    runner.event("stopped", f"{reason}; terminated {len(ids)} instance(s); checkpoints kept")
    report.finished += 1
    return True
