"""The dashboard's sample store, built once per test session and copied for each user.

``tools.dashboard_sample.build`` writes a day of price refreshes for every offer of the
built-in catalog (3,455 quotes merged one by one through the store): seconds of CPU, and
under pytest-xdist's work stealing a module's fixture is built again on every worker that
runs one of its tests, and again each time a worker comes back to the module. Here the
first caller of the session builds it (the workers take turns through a lock file) and every
caller gets a copy of its own, made with SQLite's backup API: a test that writes to its copy
changes no other module's.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
from pathlib import Path

import pytest

from provisioner.control.store import Store
from tools import dashboard_sample


def _shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's directory the workers share (one worker's base temp is under it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def sample_store(tmp_path_factory: pytest.TempPathFactory, dest: Path) -> dict[str, str]:
    """A copy of the session's sample store at ``dest`` (an SQLite file); the sample's
    ``{name: job id}``."""
    shared = _shared_dir(tmp_path_factory)
    template, ids_file = shared / "dashboard-sample.db", shared / "dashboard-sample.json"
    with (shared / "dashboard-sample.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        if not ids_file.exists():
            store = Store(f"sqlite:///{template}")
            ids = dashboard_sample.build(store)
            store.close()
            ids_file.write_text(json.dumps(ids))
    src, dst = sqlite3.connect(template), sqlite3.connect(dest)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    ids: dict[str, str] = json.loads(ids_file.read_text())
    return ids
