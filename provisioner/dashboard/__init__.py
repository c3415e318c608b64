"""The dashboard: a read-only web page over the store, served beside ``provisioner daemon`` (a
child process it supervises) and by ``provisioner dashboard`` for a store without a daemon.

A face of the tool, like the CLI: it reads the store through :mod:`provisioner.dashboard.queries`
(read-only queries, no writes but the two records in :mod:`provisioner.dashboard.history`, which
the daemon makes), renders HTML on the server (Jinja2 templates with autoescaping, charts as
inline SVG, a stylesheet and a small script shipped in the package) and answers the same routes
in JSON for scripts. :mod:`provisioner.dashboard.routes` holds the routes and the access rules
(loopback by default, a bearer token for anything beyond, no state-changing endpoint at all),
:mod:`provisioner.dashboard.server` serves them over HTTP (Starlette on uvicorn) and
:mod:`provisioner.dashboard.child` runs that server as the daemon's supervised child.
"""

from __future__ import annotations

from typing import Any

from provisioner.dashboard.access import DashboardError
from provisioner.dashboard.server import DEFAULT_PORT, DashboardServer

__all__ = ["DEFAULT_PORT", "DashboardError", "DashboardServer", "start_beside_daemon"]


def start_beside_daemon(store: Any, config: Any, port: int, source: str) -> Any:
    """The daemon's dashboard: :func:`provisioner.dashboard.child.start_beside_daemon` (the
    package leaves that module unimported: ``python -m`` runs it as the child)."""
    from provisioner.dashboard.child import start_beside_daemon as start

    return start(store, config, port, source)
