"""Work done once per test session, whatever the number of pytest-xdist workers.

A module-scoped fixture runs again on every worker that runs one of its module's tests, and
under work stealing again each time a worker comes back to the module. ``once`` runs a
builder the first time a session asks for its name (the workers take turns through a lock
file in the directory they share) and hands every caller the directory it wrote: what a
caller changes must be a copy of its own.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

import pytest


def once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]
) -> Path:
    """The directory ``build`` filled, the first time in this session that ``name`` was asked
    for; ``build`` gets an empty directory and is not called again after it returned."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    where, done = shared / f"once-{name}", shared / f"once-{name}.done"
    with (shared / f"once-{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        if not done.exists():
            where.mkdir(exist_ok=True)
            build(where)
            done.touch()
    return where
