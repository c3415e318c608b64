"""What the user wants: the policy model, its YAML loader, and the example policies (*.yaml)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from policies.loader import (
        PolicyError,
        PolicyIssue,
        load_policy,
        parse_policy,
        policy_schema,
    )
    from policies.model import MarketChoice, Policy

__all__ = [
    "MarketChoice",
    "Policy",
    "PolicyError",
    "PolicyIssue",
    "load_policy",
    "parse_policy",
    "policy_schema",
]

#: each name's module, imported when the name is first asked for (PEP 562): importing one of
#: this package's plain modules (``policies.enforcement``, ``policies.durations``) must not
#: load the policy model and pydantic (the sim cloud's server and the node agent need neither)
_LAZY = {
    "MarketChoice": "policies.model",
    "Policy": "policies.model",
    "PolicyError": "policies.loader",
    "PolicyIssue": "policies.loader",
    "load_policy": "policies.loader",
    "parse_policy": "policies.loader",
    "policy_schema": "policies.loader",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
