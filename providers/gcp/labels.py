"""GCP labels: lowercase and dot-free, so every tag is mapped onto a label.

Keys: a lowercase letter first, then lowercase letters, digits, ``_`` and ``-``, at most 63
(:func:`label_key`: ``CostCenter`` -> ``costcenter``, ``team.name`` -> ``team_name``); values by
:func:`label`. ``policy check`` warns of each change (:func:`label_changes`). The exact tags
are kept in the ``provisioner-tags`` metadata item, which is what ``Instance.tags`` reports.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Mapping


def label(value: str) -> str:
    """``value`` as a GCP label value: lowercase letters, digits, ``_`` and ``-``; <= 63."""
    return re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63]


_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")


def label_key(key: str) -> str:
    """``key`` as a GCP label key: lowercase, ``_`` for any other character, a letter first,
    at most 63 characters (``CostCenter`` -> ``costcenter``, ``9x`` -> ``k9x``)."""
    if _LABEL_KEY.fullmatch(key):
        return key
    out = re.sub(r"[^a-z0-9_-]", "_", key.lower())
    if not out or not out[0].isalpha() or not out[0].isascii():
        out = "k" + out
    return out[:63]


def labels_for(tags: Mapping[str, str]) -> dict[str, str]:
    """Every tag as a label (key by :func:`label_key`, value by :func:`label`); where two tags
    map to the same key the first (in sorted order) keeps it."""
    out: dict[str, str] = {}
    for key in sorted(tags):
        out.setdefault(label_key(key), label(tags[key]))
    return out


def label_changes(tags: Mapping[str, str]) -> builtins.list[str]:
    """What GCP will not carry as written: one line per changed, merged or dropped tag."""
    lines: builtins.list[str] = []
    taken: dict[str, str] = {}
    for key in sorted(tags):
        new_key, value = label_key(key), tags[key]
        if new_key in taken:
            lines.append(
                f"tag {key!r} maps to GCP label key {new_key!r}, already taken by tag "
                f"{taken[new_key]!r}: it is not a label (it is kept in the instance metadata)"
            )
            continue
        taken[new_key] = key
        if new_key != key:
            lines.append(
                f"tag {key!r} becomes GCP label {new_key!r} (label keys are lowercase letters, "
                "digits, _ and -, a letter first, at most 63); the original is kept in the "
                "instance metadata"
            )
        if label(value) != value:
            lines.append(
                f"the value of tag {key!r} becomes {label(value)!r} as a GCP label (lowercase "
                "letters, digits, _ and -, at most 63)"
            )
    return lines
