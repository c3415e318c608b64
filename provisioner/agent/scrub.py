"""The job's secrets scrubbed (``***``) from what the agent writes: lines (its log, the job's
and setup's output) and documents (the progress record, the job's own progress in it)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

MASK = "***"


def scrubber(values: Iterable[str]) -> Callable[[str], str]:
    """A function that replaces each of ``values`` (the job's secrets) by ``***`` (the longest
    first, so a secret holding another is masked whole; values under 4 characters are left:
    they would mask every such word)."""
    secrets = sorted({v for v in values if v and len(v) >= 4}, key=len, reverse=True)
    if not secrets:
        return lambda s: s

    def scrub(text: str) -> str:
        for value in secrets:
            if value in text:
                text = text.replace(value, MASK)
        return text

    return scrub


def scrub_doc(doc: Any, scrub: Callable[[str], str]) -> Any:
    """``doc`` (JSON: dicts, lists, strings, numbers) with ``scrub`` applied to every string in
    it, keys included, however deep; a new document (``doc`` is left as it was)."""
    if isinstance(doc, str):
        return scrub(doc)
    if isinstance(doc, dict):
        return {
            (scrub(k) if isinstance(k, str) else k): scrub_doc(v, scrub) for k, v in doc.items()
        }
    if isinstance(doc, list | tuple):
        return [scrub_doc(v, scrub) for v in doc]
    return doc
