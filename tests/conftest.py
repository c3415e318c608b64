from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(autouse=True)
def _isolated_state(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test gets its own XDG state/config directories: no test touches the user's store."""
    base = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_STATE_HOME", str(base / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(base / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(base / "cache"))
    monkeypatch.delenv("PROVISIONER_STORE", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    os.environ.setdefault("PYTHONHASHSEED", "0")


def shared_data(*parts: str) -> Path:
    """A path under ../shared/data; the test is skipped when the shared data is absent."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"needs ../shared/data ({p.relative_to(SHARED_DATA.parent)}) beside the repo")
    return p
