"""The tail of a job's own output, for its page: the newest lines its agents shipped to the
checkpoint store (``provisioner.agent.logship``). Read on each view of the page, bounded (the
last chunks of the newest attempt only); a store this process cannot read is said, not raised."""

from __future__ import annotations

from typing import Any

from provisioner.control.store import JobRow

#: lines shown on the page (all of them: ``provisioner logs JOB``)
TAIL_LINES = 40
#: chunks read at most per view
TAIL_CHUNKS = 4


def output_tail(job: JobRow, lines: int = TAIL_LINES) -> dict[str, Any]:
    """``{"attempt", "lines": [{at, kind, text}], "error"}`` for the newest attempt."""
    from provisioner.agent.logship import LogCursor, read_new
    from provisioner.agent.store import CheckpointStore
    from provisioner.control.records import job_checkpoint_uri

    if not job.attempt:
        return {"attempt": None, "lines": [], "error": None}
    try:
        store = CheckpointStore(job_checkpoint_uri(job), job.id)
        cursor = LogCursor()
        _skip_to_tail(store, job.attempt, cursor)
        got = read_new(store, cursor, attempt=job.attempt)
    except Exception as exc:  # the page shows the rest
        return {"attempt": job.attempt, "lines": [], "error": f"{type(exc).__name__}: {exc}"}
    shown = [{"at": x.at, "kind": x.kind, "text": x.text} for x in got[-lines:]]
    return {"attempt": job.attempt, "lines": shown, "error": None}


def _skip_to_tail(store: Any, attempt: int, cursor: Any) -> None:
    """Start the cursor at the last chunks of each of the attempt's streams."""
    from provisioner.agent.logship import parse_attempt_dir

    try:
        dirs = store.fs.ls(store.path("logs"), detail=False)
    except (FileNotFoundError, OSError):
        return
    for d in (str(x).rstrip("/").rsplit("/", 1)[-1] for x in dirs):
        where = parse_attempt_dir(d)
        if where is None or where[0] != attempt:
            continue
        names = [
            str(x).rsplit("/", 1)[-1] for x in store.fs.ls(store.path("logs", d), detail=False)
        ]
        by_kind: dict[str, list[int]] = {}
        for n in names:
            kind, _, rest = n.partition("-")
            if rest.endswith(".log") and rest[:-4].isdigit():
                by_kind.setdefault(kind, []).append(int(rest[:-4]))
        for kind, seqs in by_kind.items():
            cursor.next_seq[(d, kind)] = max(0, max(seqs) - TAIL_CHUNKS + 1)
