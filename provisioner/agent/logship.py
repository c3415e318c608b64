"""The job's own output, shipped to the checkpoint store in chunks.

The job's stdout and stderr (one pipe, so their order is kept) are read by a thread that never
waits on the network: each line is stamped with the time it arrived, scrubbed of the job's
secret values (``***``), appended to a local file and queued; another thread puts the queue
in the store as a chunk every ``flush_s`` (2 s) or every ``chunk_bytes`` (256 KiB), and at
once on :meth:`LogShipper.flush` (the agent calls it on a notice). A preemption loses at most
the last ``flush_s`` of output.

Layout (``<root>`` = ``<checkpoint_uri>/<job_id>``)::

    logs/a<attempt>-n<node>/<kind>-<seq>.log    kind: job or setup; seq from 000000

Each line of a chunk is ``<ISO time> <text>``. What is kept per attempt is bounded
(``keep_bytes``, 64 MiB): past it the oldest chunks are removed (a reader sees the first seq
it finds above 0 and says so), and a job that writes faster than the store takes (more than
``queue_bytes`` waiting) loses the oldest waiting lines, counted in a note line. A carriage
return ends a line's visible text (progress bars keep their last state).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from provisioner.agent.repeats import Repeats

log = logging.getLogger("provisioner.agent.logs")

FLUSH_S = 2.0
CHUNK_BYTES = 256 * 1024
KEEP_BYTES = 64 * 1024 * 1024
QUEUE_BYTES = 8 * 1024 * 1024
LINE_MAX = 16 * 1024


def log_dir(attempt: int, node: int = 0) -> str:
    return f"logs/a{attempt}-n{node}"


def chunk_name(kind: str, seq: int) -> str:
    return f"{kind}-{seq:06d}.log"


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class LogShipper:
    """Ships one stream (``kind``) of one attempt's node to the store."""

    def __init__(
        self,
        store: Any,  # provisioner.agent.store.CheckpointStore
        attempt: int,
        node: int,
        kind: str,
        local: Path,
        *,
        scrub: Callable[[str], str] = lambda s: s,
        flush_s: float = FLUSH_S,
        chunk_bytes: int = CHUNK_BYTES,
        keep_bytes: int = KEEP_BYTES,
        queue_bytes: int = QUEUE_BYTES,
        echo: IO[str] | None = None,
    ) -> None:
        self.store, self.kind, self.local = store, kind, local
        self.echo = echo  # the agent's own output too (journald on a VM, agent.log on the sim)
        self.dir = log_dir(attempt, node)
        self.scrub, self.flush_s = scrub, flush_s
        self.chunk_bytes, self.keep_bytes, self.queue_bytes = chunk_bytes, keep_bytes, queue_bytes
        self._lines: deque[str] = deque()
        self._queued = 0
        self._dropped = 0
        self._tail: deque[str] = deque(maxlen=50)
        self._shipped: deque[tuple[str, int]] = deque()  # (chunk, bytes) in the store
        self._shipped_bytes = 0
        self._seq = self._next_seq()
        self._cv = threading.Condition()
        self._closing = False
        self._readers: list[threading.Thread] = []
        self.error: str | None = None
        self._failures = Repeats(log, f"shipping the {kind} log", level=logging.WARNING)
        local.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(local, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self._sender = threading.Thread(target=self._send_loop, name=f"logs-{kind}", daemon=True)
        self._sender.start()

    def _next_seq(self) -> int:
        """After a restarted agent's chunks, never over them."""
        try:
            names = self.store.fs.ls(self.store.path(self.dir), detail=False)
        except (FileNotFoundError, OSError):
            return 0
        seqs = [
            int(n.rsplit("-", 1)[-1].split(".")[0])
            for n in (str(x).rsplit("/", 1)[-1] for x in names)
            if n.startswith(self.kind + "-") and n.endswith(".log")
        ]
        return max(seqs) + 1 if seqs else 0

    # -- in ----------------------------------------------------------------------------------

    def add(self, text: str, at: float | None = None) -> None:
        """One line of output (without its newline)."""
        if "\r" in text:
            text = text.rstrip("\r").rsplit("\r", 1)[-1]
        if len(text) > LINE_MAX:
            text = text[:LINE_MAX] + " [line cut]"
        clean = self.scrub(text)
        line = f"{_stamp(at or time.time())} {clean}\n"
        with self._cv:
            self._file.write(line)
            if self.echo is not None:
                with contextlib.suppress(OSError, ValueError):
                    self.echo.write(clean + "\n")
                    self.echo.flush()
            self._tail.append(line[25:].rstrip("\n"))
            self._lines.append(line)
            self._queued += len(line)
            while self._queued > self.queue_bytes and len(self._lines) > 1:
                self._queued -= len(self._lines.popleft())
                self._dropped += 1
            if self._queued >= self.chunk_bytes:
                self._cv.notify_all()

    def feed(self, stream: IO[bytes]) -> threading.Thread:
        """Read ``stream`` line by line until it ends, in a thread of its own."""

        def read() -> None:
            with contextlib.suppress(ValueError, OSError):
                for raw in iter(stream.readline, b""):
                    self.add(raw.decode("utf-8", errors="replace").rstrip("\n"))
            with contextlib.suppress(OSError):
                stream.close()

        t = threading.Thread(target=read, name=f"logs-{self.kind}-read", daemon=True)
        t.start()
        self._readers.append(t)
        return t

    def tail(self, n: int = 20) -> list[str]:
        with self._cv:
            return list(self._tail)[-n:]

    # -- out ---------------------------------------------------------------------------------

    def flush(self, timeout: float = 10.0) -> None:
        """Put what is queued in the store now (returns once it is, or after ``timeout``)."""
        with self._cv:
            self._flush_now = True
            self._cv.notify_all()
            end = time.monotonic() + timeout
            while (self._lines or self._dropped) and time.monotonic() < end:
                self._cv.wait(0.05)

    _flush_now = False

    def _take(self) -> str:
        with self._cv:
            lines, self._lines, self._queued = self._lines, deque(), 0
            dropped, self._dropped = self._dropped, 0
            self._flush_now = False
        text = "".join(lines)
        if dropped:
            note = f"{_stamp(time.time())} [provisioner: {dropped} line(s) dropped: the job "
            text = note + "wrote faster than the store took them]\n" + text
        return text

    def _send_loop(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(
                    lambda: self._closing or self._flush_now or self._queued >= self.chunk_bytes,
                    timeout=self.flush_s,
                )
                closing = self._closing
            text = self._take()
            if text:
                self._ship(text)
            with self._cv:
                self._cv.notify_all()
            if closing and not self._lines:
                return

    def _ship(self, text: str) -> None:
        name = chunk_name(self.kind, self._seq)
        try:
            self.store.write_text(f"{self.dir}/{name}", text)
        except Exception as exc:  # the job goes on; its output is still in the local file
            self.error = f"cannot ship logs: {type(exc).__name__}: {exc}"
            self._failures.failed(self.error)
            return
        self._failures.ok()
        self._seq += 1
        size = len(text.encode("utf-8"))
        self._shipped.append((name, size))
        self._shipped_bytes += size
        while self._shipped_bytes > self.keep_bytes and len(self._shipped) > 1:
            old, old_size = self._shipped.popleft()
            self._shipped_bytes -= old_size
            with contextlib.suppress(FileNotFoundError, OSError):
                self.store.fs.rm(self.store.path(self.dir, old))

    def close(self, timeout: float = 10.0) -> None:
        """Read what the stream still holds, ship it all, stop."""
        for t in self._readers:
            t.join(timeout)
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._sender.join(timeout)
        with contextlib.suppress(OSError):
            self._file.close()


def open_pipe() -> tuple[int, IO[bytes]]:
    """(write end for the child, read end for the shipper)."""
    r, w = os.pipe()
    return w, os.fdopen(r, "rb")


# -- reading (provisioner logs, the dashboard) ----------------------------------------------


@dataclass(frozen=True)
class LogLine:
    at: str  # ISO time the agent read the line
    attempt: int
    node: int
    kind: str  # job or setup
    text: str


@dataclass
class LogCursor:
    """Where a reader is: the next chunk to read per (attempt dir, kind)."""

    next_seq: dict[tuple[str, str], int] = field(default_factory=dict)
    gaps: list[str] = field(default_factory=list)  # notes on chunks rotated out


def parse_attempt_dir(name: str) -> tuple[int, int] | None:
    if not name.startswith("a") or "-n" not in name:
        return None
    a, _, n = name[1:].partition("-n")
    return (int(a), int(n)) if a.isdigit() and n.isdigit() else None


def read_new(store: Any, cursor: LogCursor, attempt: int | None = None) -> list[LogLine]:
    """The lines of the chunks put in ``store`` since ``cursor`` (which moves on), oldest
    chunk first per stream; ``attempt`` limits it to one attempt."""
    try:
        dirs = store.fs.ls(store.path("logs"), detail=False)
    except (FileNotFoundError, OSError):
        return []
    out: list[LogLine] = []
    for d in sorted(str(x).rstrip("/").rsplit("/", 1)[-1] for x in dirs):
        where = parse_attempt_dir(d)
        if where is None or (attempt is not None and where[0] != attempt):
            continue
        try:
            names = store.fs.ls(store.path("logs", d), detail=False)
        except (FileNotFoundError, OSError):
            continue
        chunks: dict[str, list[int]] = {}
        for n in (str(x).rsplit("/", 1)[-1] for x in names):
            kind, _, rest = n.partition("-")
            if rest.endswith(".log") and rest[:-4].isdigit():
                chunks.setdefault(kind, []).append(int(rest[:-4]))
        for kind, seqs in sorted(chunks.items()):
            key = (d, kind)
            first = cursor.next_seq.get(key, 0)
            wanted = sorted(s for s in seqs if s >= first)
            if wanted and wanted[0] > first:
                cursor.gaps.append(
                    f"attempt {where[0]} node {where[1]} {kind}: {wanted[0] - first} chunk(s) "
                    "rotated out of the store (the oldest output of a long run)"
                )
            for seq in wanted:
                text = store.read_text(f"logs/{d}/{chunk_name(kind, seq)}")
                if text is None:
                    break  # not there yet (an object store's listing ran ahead): next time
                for line in text.splitlines():
                    at, _, body = line.partition(" ")
                    out.append(LogLine(at, where[0], where[1], kind, body))
                cursor.next_seq[key] = seq + 1
    return out
