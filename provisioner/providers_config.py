"""Default options per provider (from the config file, then built-in defaults)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: The sim provider's demo defaults: one simulated hour per minute, and the first spot
#: instance of each job taken back after 12 s (with the mimicked cloud's notice), so that a
#: first run shows a preemption, a checkpoint and a restart in another zone
#: (``-o preempt_first_after_s=0`` turns that preemption off).
SIM_DEFAULTS: dict[str, Any] = {"mimic": "all", "seconds_per_hour": 60, "preempt_first_after_s": 12}


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "provisioner" / "providers.yaml"


#: A provider's section may name the checkpoint store its jobs use when their policy names
#: none (``checkpoint_uri: s3://my-bucket/provisioner``); it is the controller's, not an
#: option of the provider's constructor.
CHECKPOINT_KEY = "checkpoint_uri"


def _section(name: str) -> dict[str, Any] | None:
    path = config_path()
    if path.exists():
        import yaml

        doc = yaml.safe_load(path.read_text()) or {}
        if isinstance(doc, dict) and isinstance(doc.get(name), dict):
            return dict(doc[name])
    return None


def provider_defaults(name: str) -> dict[str, Any]:
    """Options for ``name`` from ``$XDG_CONFIG_HOME/provisioner/providers.yaml`` (no secrets
    there: credentials come from each SDK's usual chain), else built-in defaults."""
    section = _section(name)
    if section is not None:
        section.pop(CHECKPOINT_KEY, None)
        return section
    return dict(SIM_DEFAULTS) if name == "sim" else {}


def default_checkpoint_uri(name: str) -> str | None:
    """The checkpoint store ``name``'s jobs use when their policy names none (the config
    file's ``checkpoint_uri``, or ``$PROVISIONER_<NAME>_CHECKPOINT_URI``), or None."""
    env = os.environ.get(f"PROVISIONER_{name.upper()}_CHECKPOINT_URI")
    if env:
        return env
    section = _section(name) or {}
    value = section.get(CHECKPOINT_KEY)
    return str(value) if value else None
