"""The controller's side of the probe and of the idle-GPU policy, one job at a time (the
VM's side, the probe itself, is :mod:`provisioner.probe`).

The sub-reconciler :class:`Probes` looks, each pass, at the progress the job's pass read:

- a probe the agent reported for the running attempt is recorded in the store (once: the
  row's (job, attempt) is unique) with an event; where the policy has
  ``resources.min_measured_fraction`` and the probe measured less, :func:`probe_below` says
  why, and decide() replaces the instance and cools its zone down (the measured figure then
  ranks the type down, or rejects it, in the next plan);
- a job whose GPUs the agent has seen idle for the policy's ``idle.duration`` is reported
  (an ``idle`` event, once per attempt and idle spell); with ``action: stop`` decide() stops
  it (:attr:`provisioner.core.views.JobView.gpu_idle_since`).

Nothing here changes a state: both rules are decide()'s, so the simulator sees them too. Both
are repeatable: the row is written before decide() acts on it, and a new process reads the
verdict back from the store.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from provisioner.control.jobpass.state import GO_ON, PassState, Result
from provisioner.control.store import AttemptRow
from provisioner.control.store import probes as records
from provisioner.core.timefmt import parse_time
from provisioner.probe.measured import Key, Measured

if TYPE_CHECKING:
    from provisioner.control.store import Store

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


class Probes:
    """The attempt's probe and idle GPUs, recorded; what the policy says of them (replace an
    instance under the probe floor, stop a job idle too long) is decide()'s."""

    def reconcile(self, ps: PassState) -> Result:
        if not ps.job.cancel_requested:
            watch(ps, ps.progress)
        return GO_ON


def watch(ps: PassState, progress: dict[str, Any] | None) -> None:
    """Record the attempt's probe (and whether it is under the policy's floor) and report
    idle GPUs."""
    cur = ps.current
    if cur is None or cur.state != "running" or not progress:
        return
    try:
        attempt = int(progress.get("attempt") or 0)
    except (TypeError, ValueError):
        return
    if attempt != cur.attempt:
        return
    _probe(ps, cur, progress)
    _idle(ps, cur, progress)


def probe_below(ps: PassState) -> str:
    """Why the current attempt is under the policy's probe floor ("" : it is not)."""
    cur = ps.current
    below = ps.memo.watch.get("below")
    if cur is None or not isinstance(below, tuple) or below[0] != cur.attempt:
        return ""
    return str(below[1])


def gpu_idle_since(ps: PassState, progress: dict[str, Any] | None) -> datetime | None:
    """Since when the current attempt's agent has seen every GPU idle (None: it has not)."""
    cur = ps.current
    doc = (progress or {}).get("gpu_idle")
    if cur is None or ps.policy.idle is None or not isinstance(doc, dict):
        return None
    if (progress or {}).get("attempt") != cur.attempt:
        return None
    return parse_time(doc.get("since"))


def _below(
    ps: PassState, cur: AttemptRow, fraction: float | None, precision: Any, floor: Any
) -> None:
    """Note the attempt as under the floor, for decide() (:func:`probe_below`)."""
    reason = (
        f"probe: {fraction or 0:.0%} of datasheet {str(precision or '').upper()} matmul, "
        f"under resources.min_measured_fraction {floor or 0:.0%}"
    )
    ps.memo.watch["below"] = (cur.attempt, reason)


def _probe(ps: PassState, cur: AttemptRow, progress: dict[str, Any]) -> None:
    p = progress.get("probe")
    if not isinstance(p, dict) or p.get("attempt") != cur.attempt:
        return
    if p.get("state") not in ("done", "failed"):
        return
    memo = ps.memo.watch
    if memo.get("probe") == cur.attempt:
        return
    store, job, policy = ps.store, ps.job, ps.policy
    floor = policy.resources.min_measured_fraction
    prior = records.verdict(store, job.id, cur.attempt)
    if prior is not None:  # recorded by an earlier pass (or process)
        memo["probe"] = cur.attempt
        if prior == "below":  # ...which may have died before the instance went
            row = records.probes(store, job.id, limit=50)
            mine = next((r for r in row if r.attempt == cur.attempt), None)
            if mine is not None:
                _below(ps, cur, mine.fraction, mine.precision, floor)
        return
    doc: dict[str, Any] | None
    if p.get("state") == "failed":
        doc = {"error": str(p.get("error") or "probe failed"), "summary": {}}
        verdict = "failed"
    else:
        doc = _read_report(ps, str(p.get("path") or ""))
        if doc is None:
            return  # not readable yet: the next pass tries again
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
        at=ps.now,
        report=doc,
        verdict=verdict,
    )
    memo["probe"] = cur.attempt
    if saved:
        ps.env.measured.invalidate()
    s = doc.get("summary") or {}
    where = f"{cur.provider}:{cur.zone} {cur.instance_type} ({cur.gpu_count}x {cur.gpu})"
    if verdict == "failed":
        ps.event("probe", f"attempt {cur.attempt}: probe failed on {where}: {doc['error']}")
        return
    if s.get("fraction") is None:
        ps.event(
            "probe",
            f"attempt {cur.attempt}: probe on {where} ({doc.get('backend')}): "
            f"{s.get('note') or 'nothing to compare with a datasheet'}",
        )
        return
    ps.event(
        "probe",
        f"attempt {cur.attempt}: {where} measured {float(s['fraction']):.0%} of its datasheet "
        f"{str(s.get('precision') or '').upper()} matmul"
        + (f" ({float(s['tflops']):,.1f} TFLOPS)" if s.get("tflops") else "")
        + f" with {doc.get('backend')}",
        fraction=s.get("fraction"),
        instance=cur.instance_id,
    )
    if verdict == "below":
        ps.env.failpoints.hit("after-probe-row")
        _below(ps, cur, float(s["fraction"]), s.get("precision"), floor)


def _read_report(ps: PassState, rel: str) -> dict[str, Any] | None:
    from provisioner.agent.store import CheckpointStore
    from provisioner.control.effects import Pending
    from provisioner.control.jobpass.progress import from_store, is_local_uri

    if not rel or ".." in rel.split("/"):
        return None
    try:
        if not is_local_uri(ps.checkpoint_uri()):
            return from_store(ps, "probe-report", rel)  # bounded: a slow store holds no one
        store = ps.memo.checkpoints or CheckpointStore(ps.checkpoint_uri(), ps.job.id)
        doc: dict[str, Any] | None = store.read_json(rel)
        return doc
    except Pending:  # read next pass (the store-slow event says why)
        return None
    except Exception as exc:
        log.warning("job %s: cannot read probe report %s: %s", ps.job.id, rel, exc)
        return None


def _idle(ps: PassState, cur: AttemptRow, progress: dict[str, Any]) -> None:
    """An ``idle`` event once per attempt and idle spell that reached ``idle.duration``."""
    idle = ps.policy.idle
    if idle is None:
        return
    doc = progress.get("gpu_idle")
    since = parse_time(doc.get("since")) if isinstance(doc, dict) else None
    if since is None or ps.now - since < idle.duration:
        return
    assert isinstance(doc, dict)
    key = (cur.attempt, doc.get("since"))
    if ps.memo.watch.get("idle") == key:
        return
    ps.memo.watch["idle"] = key
    mark = f"idle since {doc.get('since')}"
    message = (
        f"attempt {cur.attempt}: every GPU under {idle.threshold_pct:g}% utilisation for "
        f"{_span(ps.now - since)} on {cur.instance_id} ({mark})"
    )
    if not ps.store.has_event(ps.job.id, "idle", mark):
        ps.event("idle", message, instance=cur.instance_id, action=idle.action)
