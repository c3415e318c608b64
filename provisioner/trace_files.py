"""Reading trace files: the first I/O layer's half of :mod:`provisioner.core.traces` (which
parses a trace's text and knows nothing of files). The simulator (``provisioner simulate``,
the benchmarks) and the sim cloud's market both open traces here, so a file is read, and its
errors worded, one way."""

from __future__ import annotations

import os
from pathlib import Path

from provisioner.core.traces import Trace, TraceError, parse_trace


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a JSON (Can't Be Late layout) or CSV (``timestamp,available[,price]``) trace; a
    file that cannot be read or parsed is :class:`TraceError`, naming it."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{p}: cannot read trace: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise TraceError(f"{p}: not a text file (a trace is JSON or CSV)") from None
    return parse_trace(text, p)
