"""Traces for the simulator. The trace, its two formats and the windows cut out of it are the
core's (:mod:`provisioner.core.traces`), opening a file is :mod:`provisioner.trace_files`'s;
both are re-exported here, where the simulator and the benchmarks have always found them."""

from __future__ import annotations

from provisioner.core.traces import (
    Trace,
    TraceError,
    nodes_trace,
    parse_trace,
    step_for,
    synthetic_trace,
    window_starts,
)
from provisioner.trace_files import load_trace

__all__ = [
    "Trace",
    "TraceError",
    "load_trace",
    "nodes_trace",
    "parse_trace",
    "step_for",
    "synthetic_trace",
    "window_starts",
]
