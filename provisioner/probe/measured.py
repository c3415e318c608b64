"""Measured figures per (cloud, instance type, GPU): pure data, defined in the core
(:mod:`provisioner.core.measured`, which the planner reads); re-exported here for the probe's
callers."""

from provisioner.core.measured import Key, Measured, ProbeFact, summarise

__all__ = ["Key", "Measured", "ProbeFact", "summarise"]
