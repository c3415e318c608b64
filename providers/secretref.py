"""What every cloud's secret reader shares: the reference grammar (from
:mod:`policies.secretref`, the one the policy is checked with), the read error, field
selection and error reasons. Pure: no SDK, no I/O.

The forms are listed in :mod:`policies.secretref` and :mod:`providers.secrets` (the module
callers use, which re-exports these names); each cloud's ``providers/<cloud>/secrets.py``
imports them from here, so the dispatcher can import the readers without a cycle. A
:class:`SecretError` carries the reference and a short reason, never a value (its reason is
redacted too).
"""

from __future__ import annotations

import json

from policies.secretref import FORMS, SecretRef, SecretRefError, parse_secret_ref
from providers.base import redact
from provisioner.errors import CloudError

__all__ = ["FORMS", "SecretError", "SecretRef", "SecretRefError", "parse_secret_ref"]

# -- reasons (SecretError.reason) ------------------------------------------------------------
NOT_FOUND = "not found"
ACCESS_DENIED = "access denied"
NO_CREDENTIALS = "no credentials"
BAD_CREDENTIALS = "credentials rejected"
DISABLED = "disabled or scheduled for deletion"
DECRYPT = "cannot decrypt (key disabled or not permitted)"
THROTTLED = "throttled"
SERVICE = "service error"
NOT_UTF8 = "binary value is not UTF-8"


class SecretError(CloudError, RuntimeError):
    """A read that failed. ``ref`` is the reference text (not secret), ``reason`` a short cause
    ("not found", "access denied", "no credentials", "unreachable: ..."); never a value."""

    def __init__(self, ref: str, reason: str) -> None:
        self.ref = ref
        self.reason = redact(reason)
        super().__init__(f"secret {ref}: {self.reason}")

    def __repr__(self) -> str:
        return f"SecretError(ref={self.ref!r}, reason={self.reason!r})"

    def __reduce__(self) -> tuple[type[SecretError], tuple[str, str]]:
        return SecretError, (self.ref, self.reason)


# -- what the readers share ------------------------------------------------------------------


def pick_field(ref: SecretRef, raw: str) -> str:
    """The ``#key`` of a JSON object secret: a string as it is, anything else as JSON text."""
    if ref.field is None:
        return raw
    try:
        document = json.loads(raw)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise SecretError(ref.text, f"#{ref.field} needs a JSON object secret, and it is not one")
    if ref.field not in document:
        raise SecretError(ref.text, f"the JSON secret has no key {ref.field!r}")
    value = document[ref.field]
    return value if isinstance(value, str) else json.dumps(value)


def utf8(ref: SecretRef, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretError(ref.text, NOT_UTF8) from None


def reason_for(code: str, table: dict[str, str], prefixes: dict[str, str] | None = None) -> str:
    """A reason for a cloud error code: the table, then the longest matching prefix, else the
    code itself (``"error <CODE>"``)."""
    if code in table:
        return table[code]
    for prefix in sorted(prefixes or {}, key=len, reverse=True):
        if code.startswith(prefix):
            return (prefixes or {})[prefix]
    return f"error {code or 'unknown'}"


def unreachable(exc: BaseException) -> str:
    """``unreachable: <exception type>: <first line>`` (a transport failure: no value read)."""
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"unreachable: {type(exc).__name__}" + (f": {first}" if first else "")
