"""``provisioner notify test``: one message to each notification target the daemon knows."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime

import click

from provisioner.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_PROVIDER, exit_code_for
from provisioner.cli.common import fail, json_option, print_json

#: where the systemd unit's daemon reads its configuration
DAEMON_CONFIG = "/etc/provisioner/daemon.yaml"


@click.group()
def notify() -> None:
    """Notification targets (their URLs are the daemon's: notify.yaml or PROVISIONER_NOTIFY_*)."""


@notify.command("test")
@click.option(
    "--config",
    "config_path",
    default=None,
    help="The daemon's configuration YAML (its notify section: the targets file); default "
    "/etc/provisioner/daemon.yaml where there is one.",
)
@click.option("--target", "only", multiple=True, help="Only this target (repeatable).")
@json_option
def test(config_path: str | None, only: tuple[str, ...], as_json: bool) -> None:
    """Send one test message to each target and say which took it.

    Exit 0 when every target took its message, 4 when one did not, 2 when there is nothing to
    send to (no target, an unknown --target, apprise not installed, a bad file).
    """
    from policies.loader import PolicyError
    from provisioner.console import console, error
    from provisioner.control.daemon.config import load_config
    from provisioner.control.notify.send import INSTALL, NoApprise, Sender, SendError
    from provisioner.control.notify.targets import TargetBook, TargetsError

    if config_path is None and os.path.isfile(DAEMON_CONFIG):
        config_path = DAEMON_CONFIG
    try:
        config = load_config(config_path)
        book = TargetBook.load(config.notify.targets_file)
    except PolicyError as exc:
        for issue in exc.issues:
            error(str(issue))
        raise SystemExit(EXIT_BAD_INPUT) from None
    except TargetsError as exc:
        fail(str(exc), exit_code_for(exc))
    listed = dict(book.listed())
    if not listed:
        fail(
            f"no notification targets: give `name: URL` lines in {config.notify.targets_file} "
            "(mode 0600) or set PROVISIONER_NOTIFY_<NAME>"
        )
    names = list(only) or sorted(listed)
    unknown = [n for n in names if n not in book]
    if unknown:
        fail(f"no target named {', '.join(unknown)} (known: {', '.join(sorted(listed))})")
    host = socket.gethostname()
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    sender, results = Sender(), []
    for name in names:
        url = book.url(name)
        assert url is not None
        try:
            sender.send(
                url,
                "provisioner: test message",
                f"A test from `provisioner notify test` on {host} at {when}: target {name} works.",
            )
            results.append({"target": name, "sent": True, "error": None})
        except NoApprise:
            fail(f"notifications need apprise, which is not installed: {INSTALL}")
        except SendError as exc:
            results.append({"target": name, "sent": False, "error": str(exc)})
    if as_json:
        print_json({"results": results})
    else:
        out = console()
        for r in results:
            text = "sent" if r["sent"] else f"NOT sent: {r['error']}"
            out.print(f"{r['target']}: {text}", markup=False)
    raise SystemExit(EXIT_OK if all(r["sent"] for r in results) else EXIT_PROVIDER)
