"""``provisioner dashboard``: the daemon's web page, for a store without a daemon."""

from __future__ import annotations

import json
import sys

import click

from provisioner.cli import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, exit_code_for
from provisioner.cli.common import json_option


@click.command()
@click.option(
    "--store",
    "store_url",
    envvar="PROVISIONER_STORE",
    default=None,
    help="Store URL (default: the config's, else SQLite in the state directory).",
)
@click.option(
    "--config",
    "config_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="Daemon configuration YAML: its store and `dashboard:` section apply.",
)
@click.option("--address", default=None, help="Bind address (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default 8470; 0: any free port).")
@click.option(
    "--token-file",
    default=None,
    type=click.Path(dir_okay=False),
    help="File holding the bearer token (default: $PROVISIONER_DASHBOARD_TOKEN).",
)
@json_option
def dashboard(
    store_url: str | None,
    config_path: str | None,
    address: str | None,
    port: int | None,
    token_file: str | None,
    as_json: bool,
) -> None:
    """Serve the read-only dashboard over a store until Ctrl-C.

    The same page `provisioner daemon` serves: jobs with state, placement, market, progress,
    spend vs budget and deadline; each job's timeline, spend and plan; the fleet by cloud and
    region; the price history. Add `?format=json` (or `Accept: application/json`) to any page
    for scripts. Bound to 127.0.0.1 unless --address says otherwise; beyond loopback a token
    is required (PROVISIONER_DASHBOARD_TOKEN or --token-file). Exit 2: bad configuration.
    """
    from policies.loader import PolicyError
    from provisioner.console import error
    from provisioner.control.daemon.config import load_config
    from provisioner.control.store import redacted_url
    from provisioner.dashboard import DashboardError, DashboardServer
    from provisioner.dashboard.server import load_token

    try:
        cfg = load_config(config_path)
    except PolicyError as exc:
        for issue in exc.issues:
            error(str(issue))
        raise SystemExit(EXIT_BAD_INPUT) from None
    d = cfg.dashboard
    from provisioner.cli.common import open_store

    store = open_store(store_url or cfg.store)
    try:
        server = DashboardServer(
            store,
            address=address or d.address,
            port=d.port if port is None else port,
            token=load_token(d.token_env, token_file or d.token_file),
            page_size=d.page_size,
            source="provisioner dashboard",
        )
        server.bind()
    except DashboardError as exc:
        error(str(exc))
        raise SystemExit(exit_code_for(exc)) from None
    if as_json:  # one line, flushed: a script reads it and goes on
        click.echo(json.dumps({"url": server.url, "store": redacted_url(store.url)}))
        sys.stdout.flush()
    else:
        click.echo(f"dashboard on {server.url} (store {redacted_url(store.url)}); Ctrl-C stops it")
        sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.close()
        raise SystemExit(EXIT_INTERRUPTED) from None
    raise SystemExit(EXIT_OK)
