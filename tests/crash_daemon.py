"""Test-only entry point: ``python -m tests.crash_daemon <provisioner args>``.

Installs failpoints driven by the environment, then runs the ``provisioner`` command line.
``PROVISIONER_CRASH_AT`` names the points (comma-separated, or ``any``; see
:data:`provisioner.control.failpoints.CRASH_POINTS`) where the process exits at once with
status 137, as SIGKILL would (nothing flushed or cleaned up), once ``PROVISIONER_CRASH_SKIP``
(default 0) earlier matching hits have passed. The package itself never reads these.
"""

from __future__ import annotations

import os
import sys

from provisioner.control.failpoints import Failpoints, install


class CrashAt(Failpoints):
    def __init__(self, names: list[str], skip: int = 0) -> None:
        self.names, self.skip, self.hits = set(names), skip, 0

    def hit(self, name: str) -> None:
        if name not in self.names and "any" not in self.names:
            return
        self.hits += 1
        if self.hits > self.skip:
            sys.stderr.write(f"provisioner: crash point {name}: exiting 137\n")
            sys.stderr.flush()
            os._exit(137)


def install_from_env() -> None:
    wanted = os.environ.get("PROVISIONER_CRASH_AT")
    if wanted:
        install(CrashAt(wanted.split(","), int(os.environ.get("PROVISIONER_CRASH_SKIP") or 0)))


if __name__ == "__main__":
    install_from_env()
    from provisioner.cli import main

    sys.argv = ["provisioner", *sys.argv[1:]]
    main()
