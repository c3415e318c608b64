"""The checkpoint syncer: a thread beside the agent's polling loop that uploads each
checkpoint the job commits to the checkpoint store, newest first."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from provisioner.agent import protocol
from provisioner.agent.repeats import Repeats
from provisioner.agent.store import CheckpointStore

log = logging.getLogger("provisioner.agent")


#: How many of its latest uploads an agent's progress record lists.
HISTORY = 16


def _now() -> datetime:
    return datetime.now(UTC)


class Syncer(threading.Thread):
    """Uploads each checkpoint the job commits, newest first; runs beside the polling loop."""

    def __init__(self, store: CheckpointStore, local_dir: Path, uploaded: str | None) -> None:
        super().__init__(name="checkpoint-sync", daemon=True)
        self.store = store
        self.local_dir = local_dir
        self.uploaded = uploaded  # name of the newest checkpoint known to be in the store
        self.uploaded_at: datetime | None = None
        #: this agent's uploads, oldest first (the last HISTORY): each reported, so that a
        #: controller that reads progress seldom still sees every checkpoint
        self.history: list[tuple[str, datetime]] = []
        self.error: str | None = None
        self.frozen = False  # the notice's checkpoint is in: its replacement resumes from it
        #: a store that refuses every try (a full disk) is logged once, then summarised
        self.failures = Repeats(log, "checkpoint upload")
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._idle = threading.Event()
        self._idle.set()

    def request(self) -> None:
        self._idle.clear()
        self._wake.set()

    def run(self) -> None:
        while not self._halt.is_set():
            self._wake.wait(0.5)
            self._wake.clear()
            self.sync_once()
            if not self._wake.is_set():
                self._idle.set()

    def sync_once(self) -> None:
        name = protocol.read_latest(self.local_dir)
        if not name or name == self.uploaded or self.frozen:
            return
        started = time.monotonic()
        try:
            self.store.upload(self.local_dir / name, name)
        except Exception as exc:  # keep going: the next checkpoint may get through
            self.error = f"{type(exc).__name__}: {exc}"
            self.failures.failed(f"upload of checkpoint {name} failed: {self.error}")
            return
        self.error = None
        self.failures.ok()
        self.uploaded, self.uploaded_at = name, _now()
        self.history = [*self.history, (name, self.uploaded_at)][-HISTORY:]
        log.info("checkpoint %s uploaded in %.2fs", name, time.monotonic() - started)

    def wait_idle(self, timeout: float) -> bool:
        return self._idle.wait(timeout)

    def stop(self) -> None:
        self._halt.set()
        self._wake.set()
