"""Small helpers every cloud adapter needs: error tables, state tables, tags, prices, times.

Shared by ``providers/aws.py``, ``gcp.py``, ``azure.py``, ``alibaba.py`` and ``tencent.py``.
Nothing here imports a cloud SDK.

- :class:`ErrorTable` maps a cloud's own error codes onto :class:`ErrorKind`, falling back on
  the HTTP status (429 throttled, 401/403 auth, 404 not-found, 5xx transient, else invalid).
  The code always wins over the status: AWS sends ``InsufficientInstanceCapacity`` with a 500,
  and it is capacity, not a transient error to retry in place.
- :func:`normalise_state` maps a raw state string onto :class:`InstanceState`; a preemption
  flag turns a stopped or terminated instance into ``PREEMPTED``.
- :func:`wanted_tags` is the tag filter ``Provider.list`` uses by default; :func:`has_tags`
  checks a tag dict against it client-side.
- :func:`price_str` formats a bid cap as the wire wants it (a decimal string, never ``1e-05``).
- :func:`utc` makes a datetime timezone-aware (UTC) so ``since`` comparisons never raise.
- :func:`user_data_for` is what a VM gets at boot: the request's ``user_data``, else the
  bootstrap script rendered from its ``job_spec`` (:mod:`provisioner.bootstrap`); a spec that
  cannot be rendered (a secret in it, over the cloud's size limit) is ProviderError(INVALID).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from providers.base import ErrorKind, ProviderError
from provisioner.models import TAG_MANAGED, InstanceState, LaunchRequest


@dataclass(frozen=True)
class ErrorTable:
    """A cloud's error codes by kind. ``prefixes`` match codes by their start (``Throttling.*``)."""

    provider: str
    codes: Mapping[ErrorKind, Iterable[str]]
    prefixes: Mapping[ErrorKind, Iterable[str]] = field(default_factory=dict)

    def kind_of(self, code: str, status: int | None = None) -> ErrorKind:
        for kind, codes in self.codes.items():
            if code in codes:
                return kind
        for kind, prefixes in self.prefixes.items():
            if any(code.startswith(p) for p in prefixes):
                return kind
        return kind_from_status(status)

    def error(self, code: str, message: str, status: int | None = None) -> ProviderError:
        """The classified :class:`ProviderError` for a cloud error (message is redacted)."""
        return ProviderError(
            self.kind_of(code, status),
            code or f"HTTP{status or ''}",
            message,
            provider=self.provider,
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


def normalise_state(
    raw: str, table: Mapping[str, InstanceState], *, preempted: bool = False
) -> InstanceState:
    """``raw`` (any case) through ``table``; unknown states read as PENDING (not yet settled).

    With ``preempted`` (the cloud says the spot capacity was taken back), a state that is not
    alive any more reads as PREEMPTED; a state still alive is left as it is.
    """
    state = table.get(raw.lower(), InstanceState.PENDING)
    if preempted and not state.alive:
        return InstanceState.PREEMPTED
    return state


def wanted_tags(tags: Mapping[str, str] | None) -> dict[str, str]:
    """The tags ``list`` filters on: the caller's, or every instance this tool manages."""
    return dict(tags) if tags else {TAG_MANAGED: "true"}


def has_tags(actual: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    return all(actual.get(k) == v for k, v in wanted.items())


def price_str(value: float, decimals: int = 4) -> str:
    """A price as a plain decimal string with ``decimals`` places (``0.5`` -> ``"0.5000"``)."""
    if value < 0:
        raise ValueError(f"negative price {value!r}")
    return f"{value:.{decimals}f}"


def utc(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime (naive values are taken to be UTC)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def now_utc() -> datetime:
    return datetime.now(UTC)


def user_data_for(
    request: LaunchRequest,
    cloud: str,
    *,
    package_spec: str = "provisioner",
    pip_args: Sequence[str] = (),
) -> str:
    """The script the VM runs at boot (``""`` when the request has neither script nor spec)."""
    if request.user_data or not request.job_spec:
        return request.user_data
    from provisioner.bootstrap import BootstrapError, render_bootstrap

    try:
        return render_bootstrap(
            request.job_spec, cloud=cloud, package_spec=package_spec, pip_args=pip_args
        )
    except BootstrapError as exc:
        raise ProviderError(ErrorKind.INVALID, "Bootstrap", str(exc), provider=cloud) from None
