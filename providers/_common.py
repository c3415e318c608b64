"""Small helpers every cloud adapter needs: state tables, tags, prices, times.

Shared by the cloud folders ``providers/aws``, ``gcp``, ``azure``, ``alibaba`` and ``tencent``.
Nothing here imports a cloud SDK.

- :func:`normalise_state` maps a raw state string onto :class:`InstanceState`; a preemption
  flag turns a stopped or terminated instance into ``PREEMPTED``.
- :func:`wanted_tags` is the tag filter ``Provider.list`` uses by default; :func:`has_tags`
  checks a tag dict against it client-side.
- :func:`cap_decimal` / :func:`cap_str` round a bid cap *toward the cap* (down) at a cloud's
  precision, after converting it to the account's currency: the value sent never exceeds the
  user's cap, however many decimals the cap has (a cap of 0.51237 goes out as ``0.5123``).
- :class:`AccountCurrency` is the currency an account is billed in (taken from what the
  cloud's price answers say, else what the user configured) and the USD rate used to convert
  it, which the user sees and sets (``cny_to_usd``, ``fx_rates``); a launch with a cap is
  refused while the currency is unknown or has no rate.
- :func:`utc` and :func:`parse_time` (from :mod:`provisioner.core.timefmt`, re-exported for the
  adapters) read a cloud's timestamps as aware UTC datetimes, so ``since`` comparisons never raise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import ROUND_DOWN, Decimal
from typing import Any, TypeVar

from providers.base import ErrorKind, ProviderError
from provisioner.core.models import TAG_MANAGED, InstanceState, LaunchRequest, Offer
from provisioner.core.timefmt import parse_time as parse_time
from provisioner.core.timefmt import utc as utc


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
    for k, v in wanted.items():  # noqa: SIM110 (a loop, not all(<genexpr>): 10,000 a pass)
        if actual.get(k) != v:
            return False
    return True


def _exact(value: float | Decimal | str) -> Decimal:
    """``value`` as the decimal it was written as (``0.29`` is 0.29, not 0.28999999999999998)."""
    if isinstance(value, Decimal):
        return value
    return Decimal(repr(value) if isinstance(value, float) else str(value))


def cap_decimal(
    cap_usd: float, decimals: int, *, usd_per_unit: float | Decimal | str = 1
) -> Decimal:
    """A USD bid cap in the account's currency, rounded *down* to ``decimals`` places.

    ``usd_per_unit`` is what one unit of the account's currency is worth in USD (1 for a USD
    account). The division and the rounding are done in decimal arithmetic, so that
    ``result * usd_per_unit <= cap_usd`` holds exactly, and ``float(result) <= cap_usd`` on a
    USD account: a launch never bids above the user's cap because of rounding.
    """
    if cap_usd < 0:
        raise ValueError(f"negative bid cap {cap_usd!r}")
    rate = _exact(usd_per_unit)
    if rate <= 0:
        raise ValueError(f"exchange rate must be positive, not {usd_per_unit!r}")
    local = _exact(cap_usd) / rate
    return local.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_DOWN)


def cap_str(cap_usd: float, decimals: int, *, usd_per_unit: float | Decimal | str = 1) -> str:
    """:func:`cap_decimal` as a plain decimal string (``"0.5123"``, never ``5.123E-1``)."""
    return f"{cap_decimal(cap_usd, decimals, usd_per_unit=usd_per_unit):f}"


#: USD per unit where the user sets nothing: an approximate CNY rate (2026), shown wherever it
#: is used (``provisioner plan``, ``cost``, ``providers``) and set with ``cny_to_usd``.
DEFAULT_CNY_TO_USD = 0.14


class AccountCurrency:
    """The currency an account's prices and bids are in, and its rate to USD.

    ``configured`` is what the user said (None: learn it from the cloud). ``observe`` records
    what a price answer reports; once the cloud has said, that wins, and a configured currency
    that disagrees makes :meth:`for_launch` refuse (a bid in the wrong currency is either too
    low to ever launch or several times the cap). ``rates`` maps a currency code to USD per
    unit; USD is 1.
    """

    def __init__(
        self,
        provider: str,
        configured: str | None,
        rates: Mapping[str, float] | None = None,
    ) -> None:
        self.provider = provider
        self.configured = configured.strip().upper() if configured else None
        self.reported: str | None = None
        self.rates: dict[str, float] = {"USD": 1.0}
        for code, rate in (rates or {}).items():
            if not rate or rate <= 0:
                raise ValueError(
                    f"{provider}: the USD rate of {code} must be positive, not {rate!r}"
                )
            self.rates[code.upper()] = float(rate)

    @property
    def code(self) -> str | None:
        """The account's currency as far as is known (reported by the cloud, else configured)."""
        return self.reported or self.configured

    def observe(self, code: object) -> None:
        """A price answer said its prices are in ``code`` (ignored when empty)."""
        text = str(code or "").strip().upper()
        if not text:
            return
        if self.reported and self.reported != text:
            import logging

            logging.getLogger("provisioner.providers").warning(
                "%s: price answers changed currency from %s to %s",
                self.provider,
                self.reported,
                text,
            )
        self.reported = text

    def usd_per_unit(self, code: str | None = None) -> float | None:
        """USD per unit of ``code`` (default: the account's); None where unknown."""
        unit = (code or self.code or "").upper()
        return self.rates.get(unit) if unit else None

    def to_usd(self, price: float | None, code: str | None = None) -> float | None:
        """``price`` in ``code`` (default: the account's currency) as USD; None stays None.

        A price whose currency or rate is unknown cannot be compared with USD caps: it is
        dropped (None), never passed through as if it were USD.
        """
        if price is None:
            return None
        rate = self.usd_per_unit(code)
        return None if rate is None else price * rate

    def for_launch(self) -> tuple[str, float]:
        """(currency, USD per unit) for a bid; ProviderError(INVALID) when not safely known."""
        if self.reported and self.configured and self.reported != self.configured:
            raise ProviderError(
                ErrorKind.INVALID,
                "CurrencyMismatch",
                f"the account's prices are in {self.reported} but currency={self.configured} is "
                f"configured; fix the provider option currency (or remove it) before launching",
                provider=self.provider,
            )
        code = self.code
        if not code:
            raise ProviderError(
                ErrorKind.INVALID,
                "UnknownCurrency",
                "the account's currency is unknown (the price answers did not say): set the "
                "provider option currency (CNY on a China-site account, USD on an international "
                "one) before launching with a bid cap",
                provider=self.provider,
            )
        rate = self.rates.get(code)
        if rate is None:
            raise ProviderError(
                ErrorKind.INVALID,
                "NoExchangeRate",
                f"no USD rate for {code}: set the provider option fx_rates={{{code}: <USD per "
                f"{code}>}} before launching with a bid cap",
                provider=self.provider,
            )
        return code, rate

    def billing(self) -> dict[str, Any]:
        """What :meth:`providers.base.Provider.account_billing` reports for this account."""
        code = self.code
        return {
            "currency": code,
            "usd_per_unit": self.rates.get(code) if code else None,
            "source": "cloud" if self.reported else ("configured" if code else "unknown"),
            "note": self.describe(),
        }

    def describe(self) -> str:
        """``"CNY (reported by the cloud) at 0.1400 USD/CNY"``, for plans and notes."""
        code = self.code
        if not code:
            return "currency unknown (set the provider option currency)"
        source = "reported by the cloud" if self.reported else "configured"
        rate = self.rates.get(code)
        if code == "USD":
            return f"USD ({source})"
        if rate is None:
            return f"{code} ({source}), no USD rate set"
        return f"{code} ({source}) at {rate:.4f} USD/{code}"


#: clouds whose prices and bids are in the account's currency (the others are USD)
ACCOUNT_CURRENCY_CLOUDS = ("alibaba", "tencent")


def billing_from_options(provider: str, options: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a provider built with ``options`` would report as :meth:`Provider.account_billing` before
    any price answer (None for the clouds that bill in USD). Imports no SDK."""
    if provider not in ACCOUNT_CURRENCY_CLOUDS:
        return None
    rates = {"CNY": float(options.get("cny_to_usd") or DEFAULT_CNY_TO_USD)}
    rates.update({str(k): float(v) for k, v in dict(options.get("fx_rates") or {}).items()})
    account = AccountCurrency(provider, options.get("currency"), rates)
    info = account.billing()
    if account.code is None:
        info["note"] = (
            "bids in the account's currency, "
            + (
                "taken from its price answers at launch"
                if provider == "alibaba"
                else "which must be configured (provider option currency)"
            )
            + f"; CNY converted at {rates['CNY']:.4f} USD/CNY (provider option cny_to_usd)"
        )
    else:
        info["note"] = f"bids in {account.describe()} (provider options currency, cny_to_usd)"
    info["rates"] = rates
    return info


def now_utc() -> datetime:
    return datetime.now(UTC)


# -- shared by the adapters' instance operations ------------------------------------------------

_T = TypeVar("_T")


def offer_for(request: LaunchRequest, cloud: str) -> Offer:
    """The request's offer; ProviderError(INVALID, ``WrongProvider``) when it is another
    cloud's (an offer with no provider is taken as this cloud's)."""
    offer = request.offer
    if offer.provider not in ("", cloud):
        raise ProviderError(
            ErrorKind.INVALID, "WrongProvider", f"offer is for {offer.provider}", provider=cloud
        )
    return offer


def unless_gone(fn: Callable[[], _T]) -> _T | None:
    """``fn()``, or None where it raises ProviderError(NOT_FOUND): a read of something that may
    be gone, or a delete of something already gone."""
    try:
        return fn()
    except ProviderError as err:
        if err.kind is ErrorKind.NOT_FOUND:
            return None
        raise


def first_address(addresses: Sequence[object]) -> str | None:
    """The first of a cloud's list of IP addresses, as text; None where it lists none."""
    return str(addresses[0]) if addresses else None
