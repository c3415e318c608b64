"""sd_notify without libsystemd: one datagram to $NOTIFY_SOCKET (READY, STATUS, WATCHDOG)."""

from __future__ import annotations

import os
import socket


class Notifier:
    def __init__(self) -> None:
        addr = os.environ.get("NOTIFY_SOCKET", "")
        self.address: str | None = None
        if addr:
            self.address = "\0" + addr[1:] if addr.startswith("@") else addr

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *lines: str) -> bool:
        if self.address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.connect(self.address)
                s.sendall("\n".join(lines).encode())
            return True
        except OSError:
            return False

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, status: str) -> bool:
        return self.notify(f"STATUS={status}")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")

    def reloading(self) -> bool:
        return self.notify("RELOADING=1")


def watchdog_interval_s() -> float | None:
    """Half of WatchdogSec (from $WATCHDOG_USEC) when the watchdog is on for this process."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 1e6 / 2
    except ValueError:
        return None
