"""Bid caps on the wire: rounded toward the cap at every cloud's precision, in any currency.

The contract suite checks the same property on each cloud's wire (``test_the_bid_sent_never_
exceeds_the_cap``); this checks the rounding itself over random caps, precisions and rates.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from providers import alibaba, aws, azure, tencent
from providers._common import AccountCurrency, cap_decimal, cap_str
from providers.base import ErrorKind, ProviderError

#: each cloud's bid precision, as its adapter declares it
PRECISIONS = {
    "aws": aws.PRICE_DECIMALS,
    "azure": azure.PRICE_DECIMALS,
    "alibaba": alibaba.PRICE_DECIMALS,
    "tencent": tencent.PRICE_DECIMALS,
}

caps = st.one_of(
    st.floats(1e-4, 500, allow_nan=False, allow_infinity=False),
    st.decimals("0.0001", "500", places=7).map(float),
)
rates = st.one_of(st.just(1.0), st.floats(0.01, 2.0), st.sampled_from([0.14, 0.1378, 0.128]))


def test_the_precisions_are_the_clouds() -> None:
    assert PRECISIONS == {"aws": 4, "azure": 5, "alibaba": 3, "tencent": 4}


@given(cap=caps, decimals=st.sampled_from([*sorted(set(PRECISIONS.values())), 0, 2, 6, 8]))
def test_a_usd_bid_never_exceeds_the_cap_and_is_within_one_step(cap: float, decimals: int) -> None:
    sent = cap_str(cap, decimals)
    assert float(sent) <= cap
    assert Decimal(sent) <= Decimal(repr(cap))
    assert Decimal(repr(cap)) - Decimal(sent) < Decimal(1).scaleb(-decimals)
    assert "e" not in sent.lower()
    assert len(sent.partition(".")[2]) == decimals


@given(cap=caps, rate=rates, decimals=st.sampled_from([3, 4]))
def test_a_bid_in_another_currency_is_worth_at_most_the_cap(
    cap: float, rate: float, decimals: int
) -> None:
    local = cap_decimal(cap, decimals, usd_per_unit=rate)
    assert local * Decimal(repr(rate)) <= Decimal(repr(cap))
    assert (local + Decimal(1).scaleb(-decimals)) * Decimal(repr(rate)) > Decimal(repr(cap))


def test_the_issue_example() -> None:
    assert cap_str(0.51237, 4) == "0.5123"  # it used to go out as "0.5124"
    assert azure.max_price(0.12345999999) == 0.12345  # a float fudge once rounded this up
    assert tencent.price_text(0.5, 0.14) == "3.5714"
    assert tencent.price_text(1.5) == "1.50"


@given(cap=caps, rate=rates)
def test_tencent_max_price_text(cap: float, rate: float) -> None:
    text = tencent.price_text(cap, rate)
    assert Decimal(text) * Decimal(repr(rate)) <= Decimal(repr(cap))
    assert len(text.partition(".")[2]) >= 2


def test_account_currency() -> None:
    acct = AccountCurrency("alibaba", None, {"CNY": 0.14})
    with pytest.raises(ProviderError) as unknown:
        acct.for_launch()
    assert (unknown.value.kind, unknown.value.code) == (ErrorKind.INVALID, "UnknownCurrency")
    assert acct.to_usd(10.0) is None  # unknown: never passed off as USD
    acct.observe("cny")
    assert acct.for_launch() == ("CNY", 0.14)
    assert acct.to_usd(10.0) == pytest.approx(1.4)
    assert acct.to_usd(10.0, "USD") == 10.0
    configured = AccountCurrency("tencent", "USD", {"CNY": 0.14})
    assert configured.for_launch() == ("USD", 1.0)
    configured.observe("CNY")
    with pytest.raises(ProviderError) as mismatch:
        configured.for_launch()
    assert mismatch.value.code == "CurrencyMismatch"
    with pytest.raises(ValueError):
        AccountCurrency("x", None, {"CNY": 0})
