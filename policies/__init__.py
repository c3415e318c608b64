"""What the user wants: the policy model, its YAML loader, and the example policies (*.yaml)."""

from policies.loader import PolicyError, PolicyIssue, load_policy, parse_policy, policy_schema
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
