"""A cloud's error codes by kind and scope, and the classified error they make.

:class:`ErrorTable` maps a cloud's own error codes onto :class:`ErrorKind`, falling back on
the HTTP status (429 throttled, 401/403 auth, 404 not-found, 5xx transient, else invalid).
The code always wins over the status: AWS sends ``InsufficientInstanceCapacity`` with a 500,
and it is capacity, not a transient error to retry in place.

Each code also has a scope (:class:`ErrorScope`): the kind's usual one, unless the table's
``scopes`` name it. A refusal that names one zone, subnet or vSwitch (``Zone.NotOpen``, a
subnet without a free address) is ``ZONE``: the reconciler avoids that zone for the job and
never records it as a limit of the whole region (provisioner.control.jobpass.launch).

A code none of the tables knows is logged once per cloud and code in a process, with the
cloud's message (credentials redacted), so that it can be added to its table
(docs/cloud-errors.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from providers.base import ErrorKind, ErrorScope, ProviderError, redact

log = logging.getLogger("provisioner.providers")

#: (cloud, code) of the unknown codes already logged by this process
_UNKNOWN_LOGGED: set[tuple[str, str]] = set()
_UNKNOWN_LOCK = threading.Lock()


@dataclass(frozen=True)
class ErrorTable:
    """A cloud's error codes by kind. ``prefixes`` match codes by their start (``Throttling.*``),
    ``fragments`` anywhere in the code (``*.NoStock``), in that order after the exact codes;
    ``by_status`` is the fallback on the HTTP status for a code none of them knows.
    ``scopes`` names the exact codes whose refusal reaches further or less far than their
    kind's usual scope (:meth:`ErrorScope.of`)."""

    provider: str
    codes: Mapping[ErrorKind, Iterable[str]]
    prefixes: Mapping[ErrorKind, Iterable[str]] = field(default_factory=dict)
    fragments: Mapping[ErrorKind, Iterable[str]] = field(default_factory=dict)
    by_status: Callable[[int | None], ErrorKind] = field(default=lambda s: kind_from_status(s))
    scopes: Mapping[ErrorScope, Iterable[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        exact = {c for codes in self.codes.values() for c in codes}
        for scope, codes in self.scopes.items():
            loose = [c for c in codes if c not in exact]
            if loose:  # a scope is part of a code's class: only for codes the table classes
                raise ValueError(f"{self.provider}: {scope.value} scope for unclassed {loose}")

    def match(self, code: str) -> ErrorKind | None:
        """The kind the table gives ``code``; None when no code, fragment or prefix knows it."""
        for kind, codes in self.codes.items():
            if code in codes:
                return kind
        for kind, fragments in self.fragments.items():
            if any(f in code for f in fragments):
                return kind
        for kind, prefixes in self.prefixes.items():
            if any(code.startswith(p) for p in prefixes):
                return kind
        return None

    def kind_of(self, code: str, status: int | None = None) -> ErrorKind:
        kind = self.match(code)
        return self.by_status(status) if kind is None else kind

    def scope_of(self, code: str, kind: ErrorKind) -> ErrorScope:
        """How far a refusal with ``code`` (classed ``kind``) reaches."""
        for scope, codes in self.scopes.items():
            if code in codes:
                return scope
        return ErrorScope.of(kind)

    def error(self, code: str, message: str, status: int | None = None) -> ProviderError:
        """The classified :class:`ProviderError` for a cloud error (message is redacted). An
        empty ``code`` (an answer without one) is named by its HTTP status."""
        kind = self.match(code) if code else None
        if kind is None:
            kind = self.by_status(status)
            if code:
                self._note_unknown(code, message, status, kind)
        return ProviderError(
            kind,
            code or f"HTTP{status or ''}",
            message,
            provider=self.provider,
            scope=self.scope_of(code, kind),
        )

    def _note_unknown(self, code: str, message: str, status: int | None, kind: ErrorKind) -> None:
        key = (self.provider, code)
        with _UNKNOWN_LOCK:
            if key in _UNKNOWN_LOGGED:
                return
            _UNKNOWN_LOGGED.add(key)
        log.warning(
            "%s answered error code %r, which provisioner does not know (HTTP status %s: "
            "taken as %s); its message: %s. Please report it so that it can be classed "
            "(docs/cloud-errors.md).",
            self.provider,
            code,
            status if status is not None else "none",
            kind.value,
            redact(message)[:500],
        )


def kind_from_status(status: int | None) -> ErrorKind:
    """The kind an HTTP status implies when the error code itself is not known."""
    if status is None:
        return ErrorKind.INVALID
    if status == 429:
        return ErrorKind.THROTTLED
    if status in (401, 403):
        return ErrorKind.AUTH
    if status == 404:
        return ErrorKind.NOT_FOUND
    if status >= 500 or status == 408:
        return ErrorKind.TRANSIENT
    return ErrorKind.INVALID
