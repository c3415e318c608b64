"""Who may read the dashboard: the checks made before it listens (loopback, or a token long
enough) and the token's source. The rules per request are :class:`~provisioner.dashboard.routes.Dashboard`'s."""

from __future__ import annotations

import ipaddress

from provisioner.errors import InputError

MIN_TOKEN_CHARS = 16


class DashboardError(InputError, ValueError):
    """The dashboard cannot be served as configured (says what to change)."""


def is_loopback(address: str) -> bool:
    if address in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(address: str, token: str | None) -> None:
    """Refuse a configuration that would expose the page: beyond loopback without a token,
    or with a token too short to resist guessing."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise DashboardError(
            f"the dashboard token is {len(token)} characters; use at least {MIN_TOKEN_CHARS} "
            "(e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    if not is_loopback(address) and not token:
        raise DashboardError(
            f"the dashboard would listen on {address}, beyond loopback, without a token: set "
            "PROVISIONER_DASHBOARD_TOKEN (e.g. in the daemon's EnvironmentFile) or "
            "dashboard.token_file, or bind it to 127.0.0.1"
        )


def load_token(env: str | None, path: str | None) -> str | None:
    """The bearer token: from the file when one is named, else from the environment variable
    ``env`` (systemd: the daemon's EnvironmentFile). Never logged."""
    import os

    if path:
        try:
            text = open(path, encoding="utf-8").read().strip()  # noqa: SIM115 - read once
        except OSError as exc:
            raise DashboardError(
                f"dashboard token file {path}: {exc.strerror or exc}; create it (mode 0600) "
                "or remove dashboard.token_file"
            ) from None
        return text or None
    value = os.environ.get(env or "", "").strip() if env else ""
    return value or None
