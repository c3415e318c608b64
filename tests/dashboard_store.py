"""The dashboard's sample store, built once per test session and copied for each user.

``tools.dashboard_sample.build`` writes a day of price refreshes for every offer of the
built-in catalog (3,455 quotes merged one by one through the store): seconds of CPU, and a
module fixture building it ran again on every worker that ran one of the module's tests (and
each time a worker came back to the module). It is built once a session
(``tests/session_once.py``) and every caller gets a copy of its own, made with SQLite's backup
API: a test that writes to its copy changes no other module's.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from provisioner.control.store import Store
from tests.session_once import once
from tools import dashboard_sample


def _build(where: Path) -> None:
    store = Store(f"sqlite:///{where / 'sample.db'}")
    ids = dashboard_sample.build(store)
    store.close()
    (where / "ids.json").write_text(json.dumps(ids))


def sample_store(tmp_path_factory: pytest.TempPathFactory, dest: Path) -> dict[str, str]:
    """A copy of the session's sample store at ``dest`` (an SQLite file); the sample's
    ``{name: job id}``."""
    where = once(tmp_path_factory, "dashboard-sample", _build)
    src, dst = sqlite3.connect(where / "sample.db"), sqlite3.connect(dest)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    ids: dict[str, str] = json.loads((where / "ids.json").read_text())
    return ids
