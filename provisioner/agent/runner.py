"""The node agent: run the job, watch for an interruption notice, keep its checkpoints safe.

One loop, ticking every ``TICK_S``:

1. the job still running? (its exit ends the loop);
2. every ``spec.poll_s`` (at most 1 s): one look at the metadata service for a notice;
0. overlap on notice: started while an earlier attempt is under notice, wait for its
   checkpoint (its ``interrupted`` report, at most its notice) before resuming from it;
3. a notice (or SIGTERM/SIGINT to the agent): signal the job (``spec.signal``), wait until it
   commits a new checkpoint or until ``min(grace, deadline - margin)``, upload it, report
   ``interrupted``; on Azure, approve the event once the handover is done (``Release``);
4. every ``spec.interval_s``: signal the job for a periodic checkpoint (the fallback);
5. any checkpoint the job commits (``latest`` changed) is uploaded by a background thread, so
   a long upload never stops the polling;
6. progress is written on every change and every ``spec.progress_every_s``;
7. every ``spec.gpu_sample_s``: a utilisation sample (NVML, or the sim's file), and since
   when every GPU has been idle (``gpu_idle`` in the progress record).

Before the job starts, the agent puts its code in place, reads its secrets, pulls its image and
runs its setup once per VM (:mod:`provisioner.agent.prepare`; a failure there is reported as
``setup-failed``, not as the job's), probes its GPUs (``spec.probe``, see
:mod:`provisioner.probe.node`) and puts the report beside ``progress.json``. The job's output
goes to the checkpoint store in chunks (:mod:`provisioner.agent.logship`). A notice that comes
meanwhile is watched for from the agent's start (:mod:`provisioner.agent.prewatch`): it is
reported at once, preparing stops, and the attempt ends ``interrupted`` (no job to checkpoint).

The job runs in the agent's own process group (on the sim cloud that group is the "VM": a
preemption kills both), and only the job's own process gets the checkpoint signal, so helper
processes (data loaders) are not killed by a SIGUSR1 they do not handle.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from provisioner.agent import protocol
from provisioner.agent.gang import EXIT_PEER_LOST, Gang, RendezvousError
from provisioner.agent.handover import Release, await_handover
from provisioner.agent.jobproc import end_job, start_job
from provisioner.agent.logship import LogShipper
from provisioner.agent.notices import Notice, reader_for
from provisioner.agent.prepare import Preparer, Ready, SetupFailed, Stopped
from provisioner.agent.prewatch import PrepareWatch, notice_before_job
from provisioner.agent.repeats import Repeats
from provisioner.agent.report import iso, job_env, job_file_stamp, progress_record, write_record
from provisioner.agent.scrub import scrubber
from provisioner.agent.signals import EarlyWatch
from provisioner.agent.spec import AgentSpec
from provisioner.agent.store import CheckpointStore
from provisioner.agent.syncer import Syncer
from provisioner.probe.idle import IdleTracker, UtilisationSource

log = logging.getLogger("provisioner.agent")

TICK_S = 0.1
#: Time kept back before the deadline for the upload once the job has checkpointed.
UPLOAD_MARGIN_S = 1.0
#: After SIGTERM to the job (the agent is stopping), SIGKILL follows this much later.
STOP_GRACE_S = 5.0
#: The agent's exit code when a step before the job failed (EX_CONFIG): not the job's.
EXIT_SETUP_FAILED = 78


def _now() -> datetime:
    return datetime.now(UTC)


class Agent:
    """Runs one attempt of one job as its spec says; :meth:`run` returns the exit code."""

    def __init__(self, spec: AgentSpec) -> None:
        self.spec = spec
        self.workdir = spec.resolved_workdir()
        self.ckpt_dir = self.workdir / "checkpoints"
        self.output_dir = self.workdir / "output"
        self.job_progress_file = self.workdir / "job-progress.json"
        self.notice_file = self.workdir / protocol.NOTICE_FILE  # written on a notice only
        self.store = CheckpointStore(spec.checkpoint_uri, spec.job_id)
        self.reader = reader_for(spec, self.store)  # the drill's substitute too, where asked
        self.early = EarlyWatch(spec.cloud, spec.base_metadata_url)  # reported, not a notice
        overlap_s = 0.0 if spec.progress_uri else spec.overlap_notice_s  # when the VM may go:
        self.release = Release(self.reader, self.store, spec.attempt, overlap_s, spec.poll_s)
        self.state = "starting"
        self.started_at = _now()
        self.resumed_from: str | None = None
        self.notice: Notice | None = None
        self.notice_wait_until: float | None = None  # monotonic
        self.marker_at_request: str | None = None
        self.pending_since: float | None = None  # a checkpoint was asked for at (monotonic)
        self.exit_code: int | None = None
        self.note = ""
        self.gpu: list[dict[str, Any]] | None = None
        self.gpu_source = UtilisationSource(spec.gpu_source, self.workdir)
        self.idle = (
            IdleTracker(spec.idle_threshold_pct) if spec.idle_threshold_pct is not None else None
        )
        self.probe: dict[str, Any] | None = None
        self._stop_reason: str | None = None
        self._skip_progress = False
        self._reported_ckpt: str | None = None
        self._reported_job: int | None = None  # the job's progress file as last reported
        self._terminated_at: float | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.syncer: Syncer | None = None
        #: a gang's node (provisioner.agent.gang): its peers, its notices, its rank's duties
        self.gang = (
            Gang(self.store, spec.attempt, spec.node, spec.nodes) if spec.nodes > 1 else None
        )
        self.gang_env: dict[str, str] = {}
        self._latest_at_notice: str | None = None
        #: the job's road (provisioner.agent.prepare): its code, secrets, image and setup
        self.ready = Ready(cwd=self.workdir)
        self.prepared: dict[str, Any] = {}
        self.setup_error: dict[str, Any] | None = None
        self.job_log: LogShipper | None = None
        #: the watch for a notice before the job runs (its thread writes progress too)
        self.prewatch = PrepareWatch(
            self.reader, self.gang, spec.cloud, spec.poll_s, lambda n: notice_before_job(self, n)
        )
        self._progress_lock = threading.Lock()
        self.progress_failures = Repeats(log, "progress write", level=logging.WARNING)

    # -- set-up ------------------------------------------------------------------------------

    def _resume(self) -> str:
        """Fetch the newest checkpoint from the store; the local path to resume from, or ''."""
        name = self.store.latest()
        if not name:
            return ""
        local = self.store.download(name, self.ckpt_dir)
        protocol.commit_checkpoint(self.ckpt_dir, name)
        self.resumed_from = name
        log.info("resuming from checkpoint %s", name)
        return str(local)

    def _await_handover(self) -> None:
        """Overlap on notice: wait for an earlier attempt's checkpoint (see
        :func:`provisioner.agent.handover.await_handover`)."""
        spec = self.spec
        if spec.handover_from and not spec.progress_uri:
            done = await_handover(
                self.store, spec.handover_from, spec.handover_until, self._should_stop
            )
            log.info("attempt %d %s", spec.handover_from, "handed over" if done else "gone")

    def _job_env(self, resume_from: str) -> dict[str, str]:
        """The job's own variables (the protocol's, its env and secrets, a gang's); with the
        basics of the agent's environment they are its whole environment
        (:mod:`provisioner.core.jobenv`)."""
        return job_env(self, resume_from)

    def _prepare(self) -> int | None:
        """Code, secrets, image, setup (provisioner.agent.prepare); an exit code when they
        did not come through (setup failed, or the VM is going), else None."""
        preparer = Preparer(
            self.spec,
            self.workdir,
            self.spec.resolved_cache(),
            self.store,
            lambda secrets: {**self._job_env(""), **secrets},
            self._should_stop,
            scrubber,
        )
        self.state = "preparing"
        if not self.spec.handover_from:  # a replacement under overlap stays quiet until the
            self.write_progress()  # attempt it replaces has reported its checkpoint in
        try:
            self.ready = preparer.run()
        except Stopped:
            self.state, self.exit_code = "interrupted", 0
        except SetupFailed as exc:
            if self.notice is not None:  # stopped by the notice: not the setup's failure
                return self._interrupted_before_job()
            self.setup_error = exc.as_dict()
            self.note = f"setup failed: {exc}"
            log.error("%s", self.note)
            self.state, self.exit_code = "setup-failed", EXIT_SETUP_FAILED
        else:
            self.prepared = self.ready.report
            self.state = "starting"
            return None
        if self.notice is not None:
            return self._interrupted_before_job()
        self.write_progress()
        return self.exit_code

    # -- a notice before the job runs (provisioner.agent.prewatch) ----------------------------

    def _interrupted_before_job(self) -> int:
        """The main thread's end after a notice before the job started."""
        self.prewatch.stop()
        self.state, self.exit_code = "interrupted", 0
        log.info("interrupted before the job started")
        self.write_progress()
        return 0

    def _start_job(self, resume_from: str) -> subprocess.Popen[bytes]:
        proc, self.job_log = start_job(
            self.spec,
            self.ready,
            self.store,
            self.workdir,
            self._job_env(resume_from),
        )
        return proc

    def _sample_gpus(self) -> None:
        try:
            self.gpu = self.gpu_source.sample()
        except Exception as exc:  # telemetry never stops the job
            log.warning("cannot sample GPU utilisation: %s", exc)
            self.gpu = None
        if self.idle is not None:
            before = self.idle.since
            self.idle.observe(self.gpu, _now())
            if self.idle.since != before and self.state == "running":
                self.write_progress()  # an idle spell began or ended: say so at once

    def _probe(self) -> None:
        from provisioner.probe.node import probe_node

        if self.spec.probe == "off":
            return
        self.state = "probing"
        self.write_progress()
        self.probe = probe_node(
            self.spec.probe, self.spec.probe_timeout_s, self.workdir, self.spec.attempt, self.store
        )
        self.state = "starting"

    @property
    def stop_reason(self) -> str | None:
        """The stop signal the agent got (``SIGTERM``...), or None."""
        return self._stop_reason

    def _should_stop(self) -> bool:
        """Whether a step before the job should stop: the agent was told to, or a notice came."""
        return bool(self._stop_reason) or self.notice is not None

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._stop_reason = signal.Signals(signum).name

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> int:
        for d in (self.ckpt_dir, self.output_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.notice_file.unlink(missing_ok=True)  # an earlier agent's, on this VM
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        self.prewatch.start()  # a notice is watched for from now on, before the job too
        # the job's road first, so that a replacement under overlap is ready when the
        # checkpoint it resumes from comes in
        code = self._prepare()
        if code is not None:
            self.prewatch.stop()
            return code
        self._await_handover()
        try:
            resume_from = self._resume()
        except Exception as exc:
            self.note = f"cannot fetch checkpoint: {exc}"
            log.error("%s", self.note)
            self.state, self.exit_code = "failed", 1
            self.write_progress()
            return 1
        self.syncer = Syncer(self.store, self.ckpt_dir, self.resumed_from)
        if self.notice is not None:
            return self._interrupted_before_job()
        self._probe()  # before the job, so that it measures the GPUs and not the job
        if self.notice is not None:
            return self._interrupted_before_job()
        if self._stop_reason:  # told to stop while probing: the VM is going
            self.state, self.exit_code = "interrupted", 0
            self.write_progress()
            return 0
        if self.gang is not None:  # node 0 announces where its job listens; the others wait
            try:
                self.gang_env = self.gang.meet(self.spec.advertise_addr, self._should_stop)
            except RendezvousError as exc:
                self.note = f"gang rendezvous: {exc}"
                log.error("%s", self.note)
                self.state, self.exit_code = (
                    ("interrupted", 0) if self._should_stop() else ("failed", 1)
                )
                self.write_progress()
                return self.exit_code
        self.prewatch.stop()  # the loop polls from here on
        if self.notice is not None:
            return self._interrupted_before_job()
        log.info("job %s attempt %d: %s", self.spec.job_id, self.spec.attempt, self.spec.command)
        try:
            self.proc = self._start_job(resume_from)
        except OSError as exc:
            self.note = f"cannot start the job: {exc}"
            log.error("%s", self.note)
            self.state, self.exit_code = "failed", 127
            self.write_progress()
            return 127
        self.syncer.start()
        self.state = "running"
        self._sample_gpus()
        self.write_progress()
        try:
            rc = self._loop(self.proc)
        except BaseException as exc:  # never leave the job running without its agent
            self.proc.kill()
            self.proc.wait()
            self._end_job_io()
            self.note = f"agent error: {type(exc).__name__}: {exc}"
            self.state, self.exit_code = "failed", 1
            self.write_progress()
            raise
        return self._finish(rc)

    def _loop(self, proc: subprocess.Popen[bytes]) -> int:
        spec = self.spec
        next_poll = next_periodic = next_progress = time.monotonic()
        next_gpu = next_poll + spec.gpu_sample_s
        if spec.interval_s > 0:
            next_periodic += spec.interval_s
        last_marker = protocol.read_latest(self.ckpt_dir)
        while True:
            rc = proc.poll()
            if rc is not None:
                return rc
            now = time.monotonic()
            if self._stop_reason and self.notice is None:
                self._begin_notice(None, reason=self._stop_reason)
            if now >= next_poll and self.notice is None:
                next_poll = now + spec.poll_s
                notice = self.reader.poll()
                if notice is None and self.gang is not None:  # a peer's notice is the gang's
                    notice = self.gang.notice(spec.cloud)
                if notice is not None:
                    self._begin_notice(notice)
            marker = protocol.read_latest(self.ckpt_dir)
            if marker != last_marker:
                last_marker = marker
                assert self.syncer is not None
                self.syncer.request()
            if self.notice is not None or self._stop_reason:
                self._follow_notice(proc, marker)
            elif spec.interval_s > 0 and now >= next_periodic:
                next_periodic = now + spec.interval_s
                self._ask_checkpoint(marker)
            if (
                self.pending_since is not None
                and self.notice is None
                and (marker != self.marker_at_request or now - self.pending_since > spec.grace_s)
            ):
                self.pending_since = None
                self.state = "running"
            if now >= next_gpu:
                next_gpu = now + spec.gpu_sample_s
                self._sample_gpus()
            if now >= next_progress or self._progress_dirty() or self.early.look(now):
                next_progress = now + spec.progress_every_s
                self.write_progress()
            time.sleep(TICK_S)

    def _ask_checkpoint(self, marker: str | None) -> None:
        assert self.proc is not None
        self.marker_at_request = marker
        self.pending_since = time.monotonic()
        self.state = "checkpointing"
        try:
            self.proc.send_signal(self.spec.signum)
        except ProcessLookupError:
            return
        log.info("asked the job for a checkpoint (%s)", self.spec.signal_name)
        self.write_progress()

    def _begin_notice(self, notice: Notice | None, reason: str = "") -> None:
        if notice is None:  # SIGTERM/SIGINT to the agent: the VM is going down
            now = _now()
            notice = Notice(
                self.spec.cloud, now, now + timedelta(seconds=self.spec.grace_s), reason
            )
        self.notice = notice
        if self.job_log is not None:  # what the job printed so far: in the store now
            self.job_log.flush(timeout=0)
        if self.gang is not None:  # the whole gang checkpoints (rank 0 writes) and goes
            self._latest_at_notice = self.store.latest()
            if not notice.raw.startswith("gang: "):
                self.gang.raise_notice(notice)
        left = notice.seconds_left()
        log.warning(
            "interruption notice (%s): %.1fs left; asking the job for a checkpoint",
            notice.raw[:80],
            left,
        )
        wait = max(0.0, min(self.spec.grace_s, left - UPLOAD_MARGIN_S))
        self.notice_wait_until = time.monotonic() + wait
        try:  # for every process of the job, before the signal (docs/frameworks.md)
            seen, until = iso(notice.seen_at), iso(notice.deadline)
            protocol.write_notice(self.notice_file, seen, until, notice.cloud, reason or notice.raw)
        except OSError as exc:
            log.warning("cannot write the notice file for the job: %s", exc)
        self._ask_checkpoint(protocol.read_latest(self.ckpt_dir))

    def _follow_notice(self, proc: subprocess.Popen[bytes], marker: str | None) -> None:
        assert self.syncer is not None and self.notice_wait_until is not None
        if self.state == "interrupted":
            if self.notice is not None:
                self.release.tick(self.notice)
            if self._stop_reason and proc.poll() is None:  # the agent was told to stop
                if self._terminated_at is None:
                    self._terminated_at = time.monotonic()
                    proc.terminate()
                elif time.monotonic() - self._terminated_at > STOP_GRACE_S:
                    proc.kill()
            return
        fresh = marker is not None and marker != self.marker_at_request
        timed_out = time.monotonic() >= self.notice_wait_until
        if self.gang is not None and self.gang.node > 0:  # rank 0 writes the gang's checkpoint
            fresh = False
            if self.store.latest() != self._latest_at_notice:
                timed_out = True  # it is in the store: this node is done too
                self.note = ""
        if fresh:
            self.syncer.request()
            left = max(0.1, self.notice.seconds_left() if self.notice else 1.0)
            self.syncer.wait_idle(timeout=left)
            if self.syncer.uploaded != marker:
                return  # still uploading (or failed): keep polling, try again
        elif not timed_out:
            return
        else:
            self.note = "no new checkpoint within the grace period"
            log.warning("%s; the last one in the store is %s", self.note, self.syncer.uploaded)
        self.state = "interrupted"
        self.pending_since = None
        # a cloud's notice: the replacement may resume from this checkpoint at once (overlap
        # on notice), so no later one of this attempt may replace it in the store
        self.syncer.frozen = not self._stop_reason
        self.write_progress()
        if self.job_log is not None:  # the job's last words go before the capacity does
            left = self.notice.seconds_left() if self.notice is not None else 2.0
            self.job_log.flush(timeout=min(2.0, max(0.1, left - 0.5)))
        if self.notice is not None:
            self.release.tick(self.notice)

    def _progress_dirty(self) -> bool:
        s = self.syncer
        if self.notice is not None and job_file_stamp(self) != self._reported_job:
            return True  # under notice the job's word (a checkpoint warning) goes out at once
        return s is not None and s.uploaded is not None and s.uploaded != self._reported_ckpt

    def _end_job_io(self) -> None:
        end_job(self.spec, self.ready, self.job_log)

    def _finish(self, rc: int) -> int:
        assert self.syncer is not None
        code = rc if rc >= 0 else 128 - rc
        self.exit_code = code
        self._end_job_io()
        self.syncer.request()
        self.syncer.wait_idle(timeout=max(self.spec.grace_s, 5.0))
        self.syncer.sync_once()
        self.syncer.stop()
        peer_lost = self.gang is not None and code == EXIT_PEER_LOST
        if self.gang is not None and self.notice is None and code != 0:
            self.notice = self.gang.notice_at_exit(self.spec.cloud)
        if (self._stop_reason and (rc != 0 or self._terminated_at is not None)) or peer_lost:
            self.state = "interrupted"  # we stopped it (the VM is going), or a peer went
        elif rc == 0 and self.gang is not None and self.gang.node > 0:
            self.state = "done"  # node 0 uploads the gang's output
        elif rc == 0:
            try:
                self.store.upload_output(self.output_dir)
            except Exception as exc:
                self.note = f"cannot upload output: {exc}"
                log.error("%s", self.note)
                self.state, self.exit_code = "failed", 1
                self.write_progress()
                return 1
            self.state = "done"
        elif self.notice is not None:
            self.state = "interrupted"  # it died after the notice: the capacity went
        else:
            self.state = "failed"
        log.info("job exited with %d: %s", code, self.state)
        self.write_progress()
        return code

    # -- progress ----------------------------------------------------------------------------

    def progress(self) -> dict[str, Any]:
        return progress_record(self)

    def write_progress(self) -> None:
        with self._progress_lock:  # the prepare watch's thread writes too
            write_record(self)
