"""The dashboard: a read-only web page over the store, served by ``provisioner daemon`` (and
by ``provisioner dashboard`` for a store without a daemon).

A face of the tool, like the CLI: it reads the store through :mod:`provisioner.dashboard.queries`
(read-only queries, no writes but the two records in :mod:`provisioner.dashboard.history`, which
the daemon makes), renders HTML on the server (Jinja2 templates with autoescaping, charts as
inline SVG, a stylesheet and a small script shipped in the package) and answers the same routes
in JSON for scripts. :mod:`provisioner.dashboard.routes` holds the routes and the access rules
(loopback by default, a bearer token for anything beyond, no state-changing endpoint at all),
:mod:`provisioner.dashboard.server` serves them over HTTP (Starlette on uvicorn).
"""

from __future__ import annotations

import logging
from typing import Any

from provisioner.dashboard.access import DashboardError
from provisioner.dashboard.server import DEFAULT_PORT, DashboardServer

__all__ = ["DEFAULT_PORT", "DashboardError", "DashboardServer", "start_beside_daemon"]

log = logging.getLogger("provisioner.control.daemon")


def start_beside_daemon(store: Any, config: Any, port: int, source: str) -> DashboardServer | None:
    """The daemon's dashboard (``DashboardStarter``, passed to the daemon by the CLI): started
    in a thread, or None, logged, when it cannot start (port taken, a non-loopback address
    without a token)."""
    from provisioner.dashboard.server import load_token

    try:
        server = DashboardServer(
            store,
            address=config.address,
            port=port,
            token=load_token(config.token_env, config.token_file),
            page_size=config.page_size,
            source=source,
        )
        server.start()
    except DashboardError as exc:
        log.error("dashboard not served: %s", exc)
        return None
    return server
