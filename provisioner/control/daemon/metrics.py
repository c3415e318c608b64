"""Prometheus metrics of the daemon (one registry per daemon, served on its own port)."""

from __future__ import annotations

from typing import Any


class Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.jobs = Gauge("provisioner_jobs", "Jobs by state", ["state"], registry=r)
        self.interruptions = Counter(
            "provisioner_interruptions_total", "Spot interruptions seen", ["provider"], registry=r
        )
        self.restarts = Counter(
            "provisioner_restarts_total", "Job restarts after an interruption", registry=r
        )
        self.dollars = Gauge(
            "provisioner_dollars_spent", "Dollars spent by jobs in the store", registry=r
        )
        self.launch_latency = Histogram(
            "provisioner_launch_seconds",
            "Launch call latency",
            ["provider"],
            registry=r,
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.provider_errors = Counter(
            "provisioner_provider_errors_total",
            "Provider errors by kind",
            ["provider", "kind"],
            registry=r,
        )
        self.provider_retries = Counter(
            "provisioner_provider_retries_total", "Retried provider calls", ["provider"], registry=r
        )
        self.pass_seconds = Histogram(
            "provisioner_reconcile_pass_seconds",
            "Reconcile pass duration",
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.passes = Counter("provisioner_reconcile_passes_total", "Reconcile passes", registry=r)
        self.launches = Counter(
            "provisioner_launches_total", "Instances launched", ["provider", "market"], registry=r
        )
        self.reaped = Counter(
            "provisioner_orphans_reaped_total", "Orphan instances terminated", registry=r
        )
        self.owned = Gauge(
            "provisioner_jobs_owned", "Jobs this replica holds the lease of", registry=r
        )
        self.notifications = Counter(
            "provisioner_notifications_total",
            "Notifications by result (sent: messages; retried, failed, expired: rows)",
            ["result"],
            registry=r,
        )
        self.outbox = Gauge(
            "provisioner_notifications_pending", "Notifications waiting in the outbox", registry=r
        )
        self.invariants = Counter(
            "provisioner_invariant_violations_total",
            "Invariant violations found after a pass (provisioner.control.invariants)",
            ["invariant"],
            registry=r,
        )
        self._server: Any = None

    def add_ledger(self, source: Any) -> None:
        """Serve the ledger's totals (:mod:`provisioner.control.daemon.ledger_metrics`)."""
        from provisioner.control.daemon.ledger_metrics import LedgerCollector

        self.registry.register(LedgerCollector(source))

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        self._server = server
        return int(server.server_port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None
