"""``provisioner daemon``: the long-running controller under systemd.

Periodic work runs on APScheduler (one thread pool, each job never overlapping itself):
reconcile passes, interruption polling at each provider (an interruption starts a pass at
once, or, when one is in flight, another right after it: the "run again" flag), price refresh, orphan reaping, and the sd_notify watchdog. Signals: SIGTERM finishes
the current pass, releases this replica's leases and exits leaving jobs running (the next
daemon adopts their instances); SIGHUP reloads the configuration.

Several replicas may share one PostgreSQL store: each pass claims jobs with a lease
(``SELECT ... FOR UPDATE SKIP LOCKED``), renews it every pass, and a replica that dies stops
renewing, so another takes its jobs over once the lease runs out.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from provisioner.control.daemon.config import DaemonConfig, load_config
from provisioner.control.daemon.metrics import Metrics
from provisioner.control.daemon.notifying import load_book
from provisioner.control.daemon.overruns import Overruns, quiet_scheduler
from provisioner.control.daemon.sdnotify import Notifier, watchdog_interval_s

log = logging.getLogger("provisioner.control.daemon")

#: Starts the read-only dashboard beside the daemon: ``(store, the config's dashboard section,
#: port, source label)`` -> a started server (``.url``, ``.close()``), or None when it cannot
#: start (it logs why: the jobs come first). Passed in by the face that runs the daemon
#: (:mod:`provisioner.cli.daemon_cmd`): the control package does not import the dashboard.
#: The CLI's serves it from a child process it supervises (its load never holds the
#: interpreter lock the passes need), or with ``dashboard.in_process`` in a thread.
DashboardStarter = Callable[[Any, Any, int, str], Any]


class Daemon:
    def __init__(
        self,
        config_path: str | None,
        store_url: str | None = None,
        *,
        metrics_port: int | None = None,
        dashboard_port: int | None = None,
        start_dashboard: DashboardStarter | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.config_path = config_path
        #: the daemon's one clock: its heartbeats, passes, deliveries and records read it
        self.clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
        self.start_dashboard = start_dashboard
        self.store_url_override = store_url
        self.metrics_port_override = metrics_port
        self.dashboard_port_override = dashboard_port
        self.dashboard: Any = None
        self.config: DaemonConfig = load_config(config_path)
        self.book = load_book(self.config.notify)  # the notification URLs, read at start
        self.notifications: Any = None
        self.ledger: Any = None
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self.notifier = Notifier()
        self.metrics = Metrics()
        self.stop_event = threading.Event()
        self.reload_event = threading.Event()
        self.pass_lock = threading.Lock()
        #: set by an interruption poll that found something: the pass in flight (if any)
        #: runs again as soon as it ends (APScheduler drops a "run now" while one runs)
        self.run_again = threading.Event()
        self.last_interruption_poll = self.clock() - timedelta(minutes=10)
        #: interruptions already acted on, by (provider, instance, kind): several clouds report
        #: a notice on every answer while it stands (Alibaba's Recycling lock, a rebalance
        #: recommendation), and each poll would otherwise start another pass and count it again
        self.seen_interruptions: dict[tuple[str, str, str], datetime] = {}
        self.store: Any = None
        self.reconciler: Any = None
        self.scheduler: Any = None
        self.passes = 0
        self.overruns = Overruns()

    # -- lifecycle ----------------------------------------------------------------------------

    def open(self) -> None:
        from provisioner.control.store import Store, heartbeat

        url = self.store_url_override or self.config.store
        self.store = Store(url)
        heartbeat(self.store, self.owner, self.clock(), version=_version())
        self.reconciler = reconciler_for(self.store, self.config, self.owner, self.clock)
        from provisioner.control.daemon.ledger_metrics import LedgerTotals
        from provisioner.control.daemon.notifying import Notifications

        self.notifications = Notifications(
            self.store, self.config.notify, self.owner, self.book, self.clock,
            dashboard_url=self.config.dashboard.public_url,
        )  # fmt: skip
        self.reconciler.notify = self.notifications.router
        self.ledger = LedgerTotals(self.store)
        self.metrics.add_ledger(self.ledger)
        if self.config.metrics.enabled:
            port = (
                self.metrics_port_override
                if self.metrics_port_override is not None
                else self.config.metrics.port
            )
            addr = self.config.metrics.address
            try:
                self.metrics_port = self.metrics.serve(port, addr)
            except OSError as exc:  # the jobs come first: no metrics, and the log says why
                log.error(
                    "metrics not served: cannot listen on %s:%d (%s). Another daemon or "
                    "program holds the port: set metrics.port in the configuration or "
                    "--metrics-port (0: any free port)",
                    addr,
                    port,
                    exc.strerror or exc,
                )
            else:
                log.info("metrics on http://%s:%d/metrics", addr, self.metrics_port)
        if self.config.dashboard.enabled:
            self.serve_dashboard()

    def serve_dashboard(self) -> None:
        """The read-only web page, by the starter passed in (the CLI's: a supervised child
        process). A dashboard that cannot start (port taken, a non-loopback address without a
        token) is logged and left out: the jobs come first."""
        from provisioner.control.history import record_address

        if self.start_dashboard is None:
            log.warning("dashboard not served: this daemon was started without one")
            return
        c = self.config.dashboard
        port = self.dashboard_port_override if self.dashboard_port_override is not None else c.port
        server = self.start_dashboard(self.store, c, port, f"daemon {self.owner}")
        if server is None:
            return
        self.dashboard = server
        record_address(self.store, self.owner, server.url, self.clock())
        log.info("dashboard on %s", server.url)
        if self.notifications is not None and not c.public_url:  # the link in every message
            self.notifications.dashboard_url = server.url

    def schedule(self) -> None:
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.schedulers.background import BackgroundScheduler

        quiet_scheduler()
        sched = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(4)},
            timezone=UTC,
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30},
        )
        c = self.config
        now = datetime.now(UTC)  # the scheduler's: it runs on the real clock
        sched.add_job(
            self.reconcile,
            "interval",
            seconds=c.reconcile_interval.total_seconds(),
            id="reconcile",
            next_run_time=now,
        )
        sched.add_job(
            self.poll_interruptions,
            "interval",
            seconds=c.interruption_poll_interval.total_seconds(),
            id="interruptions",
        )
        sched.add_job(
            self.refresh_prices,
            "interval",
            seconds=c.price_refresh_interval.total_seconds(),
            id="prices",
        )
        sched.add_job(self.reap, "interval", seconds=c.reap_interval.total_seconds(), id="reap")
        # notifications and the ledger's totals: their own jobs, off the pass's path
        sched.add_job(
            self.deliver, "interval", seconds=c.notify.interval.total_seconds(), id="notify"
        )
        sched.add_job(
            self.refresh_ledger,
            "interval",
            seconds=c.metrics.ledger_interval.total_seconds(),
            id="ledger",
            next_run_time=now,
        )
        wd = watchdog_interval_s()
        if wd:
            sched.add_job(self.watchdog, "interval", seconds=wd, id="watchdog", next_run_time=now)
        sched.start()
        self.scheduler = sched

    def run(self) -> int:
        signal.signal(signal.SIGTERM, lambda *_: self.stop_event.set())
        signal.signal(signal.SIGINT, lambda *_: self.stop_event.set())
        signal.signal(signal.SIGHUP, lambda *_: self.reload_event.set())
        self.open()
        self.schedule()
        self.notifier.ready(
            f"owner {self.owner}; reconciling every {self.config.reconcile_interval.total_seconds():g}s"
        )
        log.info("daemon %s ready (store %s)", self.owner, _safe(self.store.url))
        while not self.stop_event.wait(0.5):
            if self.reload_event.is_set():
                self.reload_event.clear()
                self.reload()
        self.shutdown()
        return 0

    def reload(self) -> None:
        self.notifier.reloading()
        try:
            new = load_config(self.config_path)
        except Exception as exc:
            log.error("reload failed, keeping the old configuration: %s", exc)
        else:
            self.config = new
            self._reload_notify(new)
            with self.pass_lock:
                rec = self.reconciler
                if rec is not None:
                    rec.lease, rec.decide_every = new.lease, new.decide_interval
                    rec.progress_every = new.progress_interval
                    rec.pass_interval_s = new.reconcile_interval.total_seconds()
                    if self.notifications is not None:
                        rec.notify = self.notifications.router
            if self.scheduler is not None:
                self.scheduler.shutdown(wait=True)
            self.schedule()
            log.info("configuration reloaded")
        self.notifier.ready("reloaded")

    def shutdown(self) -> None:
        from provisioner.control.store import drop_replica

        self.notifier.stopping()
        log.info("stopping: finishing the current pass; jobs keep running")
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=True)  # waits for a pass in flight
        if self.notifications is not None:
            self.notifications.close()
        with self.pass_lock:
            if self.store is not None:
                self.store.release_jobs(self.owner)
                drop_replica(self.store, self.owner)
        if self.reconciler is not None:
            self.reconciler.close()
        if self.dashboard is not None:
            self.dashboard.close()
        self.metrics.close()
        log.info("stopped")

    # -- periodic work ------------------------------------------------------------------------

    def reconcile(self) -> None:
        """One pass, and another straight after while an interruption poll asked for one
        during it."""
        while not self.stop_event.is_set():
            self.run_again.clear()
            self._reconcile_once()
            if not self.run_again.is_set():
                return

    def _reconcile_once(self) -> None:
        from provisioner.control.store import heartbeat

        with self.pass_lock:
            t0 = time.perf_counter()
            try:
                # alive before claiming: the other replicas count us in their shares
                heartbeat(self.store, self.owner, self.clock(), version=_version())
                report = self.reconciler.run_pass()
                # alive after the pass too: a long pass must not read as a dead replica
                heartbeat(self.store, self.owner, self.clock(), version=_version())
            except Exception as exc:
                from provisioner.control.passguard import describe, is_store_error

                if is_store_error(exc):  # locked by another writer, or the disk is full
                    log.warning(
                        "the store is unavailable (%s); the next pass retries", describe(exc)
                    )
                    self.notifier.status(f"store unavailable: {describe(exc)}; retrying")
                else:
                    log.exception("reconcile pass failed; the next pass retries")
                return
            self.passes += 1
            took = time.perf_counter() - t0
            self.overruns.note(took, self.config.reconcile_interval.total_seconds(), report)
            m = self.metrics
            m.pass_seconds.observe(took)
            m.passes.inc()
            m.reaped.inc(report.reaped)
            for seconds in report.launch_seconds:
                m.launch_latency.labels(provider="all").observe(seconds)
            m.restarts.inc(report.restarts)
            for (provider, kind), n in report.provider_errors.items():
                m.provider_errors.labels(provider=provider, kind=kind).inc(n)
            m.owned.set(report.jobs)
            for v in report.violations:
                m.invariants.labels(invariant=v.invariant.value).inc()
            self._update_gauges()
            self.notifier.status(
                f"pass {self.passes}: {report.jobs} jobs, {report.launches} launches, "
                f"{report.finished} finished, {report.seconds * 1000:.0f} ms"
            )

    def _update_gauges(self) -> None:
        from sqlalchemy import func, select

        from provisioner.control.store.schema import JobRow

        with self.store.session() as s:
            rows = s.execute(
                select(JobRow.state, func.count(), func.sum(JobRow.spent_usd)).group_by(
                    JobRow.state
                )
            ).all()
        self.metrics.jobs.clear()
        total = 0.0
        for state, count, spent in rows:
            self.metrics.jobs.labels(state=state).set(count)
            total += float(spent or 0.0)
        self.metrics.dollars.set(total)

    def poll_interruptions(self) -> None:
        since = self.last_interruption_poll
        now = self.clock()
        found = 0
        try:  # an agent's notice in a progress file on a local store (first: no cloud call)
            found += self.reconciler.notice_reported()
        except Exception as exc:
            log.warning("progress watch failed: %s", exc)
        if found:  # a pass now, before any cloud is asked (one that hangs must not delay it)
            self._pass_now()
        for prov in list(self.reconciler._providers.values()):
            try:
                items = prov.interruptions(since)
            except Exception as exc:
                log.warning("interruption poll at %s failed: %s", getattr(prov, "name", "?"), exc)
                continue
            for it in items:
                key = (it.provider, it.instance_id, it.kind)
                if key in self.seen_interruptions:
                    continue
                self.seen_interruptions[key] = now
                found += 1
                self.metrics.interruptions.labels(provider=it.provider).inc()
        self.last_interruption_poll = now
        if len(self.seen_interruptions) > 1_000:  # a notice lasts minutes: keep a day's worth
            old = now - timedelta(days=1)
            self.seen_interruptions = {
                k: at for k, at in self.seen_interruptions.items() if at >= old
            }
        if found:
            self._pass_now()

    def _pass_now(self) -> None:
        self.run_again.set()  # the pass in flight runs again when it ends
        if self.scheduler is not None and not self.pass_lock.locked():
            self.scheduler.modify_job("reconcile", next_run_time=datetime.now(UTC))

    def refresh_prices(self) -> None:
        from providers.base import get
        from providers.capabilities import LivePrices
        from provisioner.control.history import record_price_refresh

        for name, opts in self.config.providers.items():
            try:
                prov = get(name, **opts)
                if not isinstance(prov, LivePrices):
                    prov.close()
                    log.info("%s quotes no live prices; the catalog's prices stand", name)
                    continue
                quotes = prov.prices()
                n = self.store.save_prices(quotes)
                record_price_refresh(self.store, name, list(quotes), self.clock())
                prov.close()
                log.info("refreshed %d prices from %s", n, name)
            except Exception as exc:
                log.warning("price refresh at %s failed: %s", name, exc)

    def reap(self) -> None:
        """Orphans at the configured providers: instances with our tag whose job is finished or
        unknown (each pass also reaps at the providers its jobs use)."""
        for name, opts in self.config.providers.items():
            try:
                with self.pass_lock:
                    n = self.reconciler.reap_orphans(name, opts)
                if n:
                    log.warning("reaped %d orphan instance(s) at %s", n, name)
                    self.metrics.reaped.inc(n)
            except Exception as exc:
                log.warning("reaping at %s failed: %s", name, exc)

    def watchdog(self) -> None:
        self.notifier.watchdog()

    def deliver(self) -> None:
        """The outbox: claim what is due, send, mark (provisioner.control.notify.outbox)."""
        if self.notifications is None:
            return
        try:
            self.notifications.tick(self.metrics)
        except Exception as exc:  # the store's trouble, or a bug: the next tick retries
            log.warning("delivering notifications failed: %s; the next tick retries", exc)

    def refresh_ledger(self) -> None:
        if self.ledger is None:
            return
        try:
            self.ledger.refresh(self.clock())
        except Exception as exc:
            log.warning("refreshing the ledger's totals failed: %s", exc)

    def _reload_notify(self, new: DaemonConfig) -> None:
        """New targets and delivery settings (a targets file that cannot be used: the old
        ones stay, and the log says why)."""
        from provisioner.control.daemon.notifying import Notifications
        from provisioner.control.notify.targets import TargetsError

        try:
            self.book = load_book(new.notify)
        except TargetsError as exc:
            log.error("notification targets not reloaded, keeping the old ones: %s", exc)
        link = new.dashboard.public_url or (self.dashboard.url if self.dashboard else None)
        if self.notifications is not None:  # the same delivery threads, with the new settings
            self.notifications.reconfigure(new.notify, self.book, link)
        elif self.store is not None:
            self.notifications = Notifications(
                self.store, new.notify, self.owner, self.book, self.clock, dashboard_url=link
            )


def reconciler_for(
    store: Any, config: DaemonConfig, owner: str, clock: Callable[[], datetime] | None = None
) -> Any:
    """The daemon's reconciler: every active job (an even share when replicas run), on
    ``clock`` (default: the real one)."""
    from provisioner.control.reconciler import Reconciler, utcnow

    rec = Reconciler(
        store,
        clock=clock or utcnow,
        owner=owner,
        lease=config.lease,
        share=True,
        decide_every=config.decide_interval,
        progress_every=config.progress_interval,
        pass_interval_s=config.reconcile_interval.total_seconds(),
        pace_gc=True,
    )
    return rec


def _version() -> str:
    """The installed distribution's version (the package's ``__version__``), for heartbeats."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("provisioner")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree never installed
        return "unknown"


def _safe(url: str) -> str:
    from provisioner.control.store import redacted_url

    return redacted_url(url)
