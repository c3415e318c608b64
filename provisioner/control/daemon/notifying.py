"""The daemon's notifications: its configuration read into a target book, a router for the
reconciler and a deliverer for the outbox: its own APScheduler job (never the pass's) that
only wakes one delivery thread per target (:mod:`provisioner.control.notify.workers`), so a
slow target delays no other and the job never overruns its interval."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from provisioner.control.daemon.config import NotifyConfig
from provisioner.control.notify.outbox import Deliverer, Delivery, TickReport
from provisioner.control.notify.route import Router
from provisioner.control.notify.send import INSTALL, have_apprise
from provisioner.control.notify.targets import TargetBook
from provisioner.control.notify.workers import TargetWorkers

log = logging.getLogger("provisioner.control.daemon")


def delivery_of(c: NotifyConfig) -> Delivery:
    return Delivery(
        lease=c.lease,
        tries=c.tries,
        first_retry=c.retry_first,
        max_retry=c.retry_max,
        rate_messages=c.rate_limit.messages,
        rate_per=c.rate_limit.per,
        max_age=c.max_age,
    )


def load_book(c: NotifyConfig) -> TargetBook:
    """The targets (:class:`~provisioner.control.notify.targets.TargetsError` when the file
    cannot be used: the daemon says why and does not start, or keeps the old on reload)."""
    return TargetBook.load(c.targets_file)


class Notifications:
    def __init__(
        self,
        store: Any,
        config: NotifyConfig,
        owner: str,
        book: TargetBook,
        clock: Callable[[], datetime] | None = None,
        dashboard_url: str | None = None,
    ) -> None:
        self.store, self.config, self.book = store, config, book
        self.router = Router.of(config.targets, config.events)
        self.deliverer = Deliverer(
            store, book, owner, delivery_of(config), clock=clock, dashboard_url=dashboard_url
        )
        self.workers = TargetWorkers(self.deliverer, self._count)
        self.metrics: Any = None
        self.apprise = have_apprise()
        self.say_what()

    def reconfigure(
        self, config: NotifyConfig, book: TargetBook, dashboard_url: str | None
    ) -> None:
        """A reload: new targets, routes and delivery settings for the same delivery threads
        (a second set beside them could send a queue the first is still sending: one thread
        per target, always). The next tick of each thread reads them."""
        self.config, self.book = config, book
        self.router = Router.of(config.targets, config.events)
        d = self.deliverer
        d.book, d.delivery, d.dashboard_url = book, delivery_of(config), dashboard_url
        self.say_what()

    @property
    def dashboard_url(self) -> str | None:
        return self.deliverer.dashboard_url

    @dashboard_url.setter
    def dashboard_url(self, url: str | None) -> None:
        self.deliverer.dashboard_url = url

    def say_what(self) -> None:
        """One line of what is configured; one clear warning when apprise is missing."""
        if not self.book and not self.config.targets:
            return
        names = ", ".join(f"{n} ({src})" for n, src in self.book.listed()) or "none"
        log.info(
            "notifications: targets %s; told about every job: %s",
            names,
            ", ".join(self.config.targets) or "none",
        )
        missing = [t for t in self.config.targets if t not in self.book]
        if missing:
            log.warning(
                "notify.targets names %s, which have no URL (in %s or PROVISIONER_NOTIFY_<NAME>)",
                ", ".join(missing),
                self.config.targets_file,
            )
        if not self.apprise:
            self.deliverer._warned.add("apprise")
            log.warning(
                "notifications are configured but apprise is not installed: %s; messages "
                "wait in the outbox until it is",
                INSTALL,
            )

    def tick(self, metrics: Any) -> None:
        if not self.apprise:
            if "apprise" not in self.deliverer._warned and self.store.outbox_pending():
                self.deliverer._warned.add("apprise")
                log.warning(
                    "jobs' policies name notification targets but apprise is not installed: "
                    "%s; messages wait in the outbox until it is",
                    INSTALL,
                )
            return
        self.metrics = metrics
        self.workers.wake()  # the sends are the workers': this returns at once
        metrics.outbox.set(self.store.outbox_pending())

    def _count(self, rep: TickReport) -> None:
        """A worker's tick, counted (from the worker's thread)."""
        metrics = self.metrics
        if metrics is None:
            return
        for result, n in (
            ("sent", rep.sent),
            ("retried", rep.retried),
            ("failed", rep.failed),
            ("expired", rep.expired),
        ):
            if n:
                metrics.notifications.labels(result=result).inc(n)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the delivery threads (a message in flight when they are left behind is sent
        again once its claim's lease runs out)."""
        self.workers.close(timeout)
