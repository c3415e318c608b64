"""``provisioner daemon``."""

from __future__ import annotations

import click

from provisioner.cli import EXIT_BAD_INPUT, exit_code_for


@click.command()
@click.option(
    "--config",
    "config_path",
    default=None,
    help="Daemon configuration YAML (store, intervals, metrics, providers).",
)
@click.option(
    "--store",
    "store_url",
    envvar="PROVISIONER_STORE",
    default=None,
    help="Store URL (overrides the config): sqlite:///... or postgresql+psycopg://...",
)
@click.option("--metrics-port", type=int, default=None, help="Prometheus port (0: any free port).")
@click.option("--dashboard-port", type=int, default=None, help="Dashboard port (0: any free port).")
def daemon(
    config_path: str | None,
    store_url: str | None,
    metrics_port: int | None,
    dashboard_port: int | None,
) -> None:
    """Run the controller: owns every job in the store, heals state, reaps orphans.

    Meant for systemd (Type=notify; see systemd/provisioner.service). Logs JSON lines to
    stdout. SIGTERM finishes the current pass and leaves jobs running; SIGHUP reloads.
    Serves the read-only dashboard on http://127.0.0.1:8470/ unless configured otherwise, from
    a child process it supervises.
    """
    from policies.loader import PolicyError
    from provisioner.console import error
    from provisioner.control.daemon.service import Daemon
    from provisioner.control.notify.targets import TargetsError
    from provisioner.dashboard import start_beside_daemon
    from provisioner.logs import setup_logging

    setup_logging(1, json_lines=True)
    try:
        d = Daemon(
            config_path,
            store_url,
            metrics_port=metrics_port,
            dashboard_port=dashboard_port,
            start_dashboard=start_beside_daemon,
        )
    except PolicyError as exc:
        for issue in exc.issues:
            error(str(issue))
        raise SystemExit(EXIT_BAD_INPUT) from None
    except TargetsError as exc:  # the notification targets' file
        error(str(exc))
        raise SystemExit(exit_code_for(exc)) from None
    raise SystemExit(d.run())
