"""Tencent Cloud CVM behind the provider interface, on the official SDK (tencentcloud-sdk-python-cvm).

What the cloud is asked, and how its answers are read:

- **offers**: ``DescribeZoneInstanceConfigInfos`` filtered to ``SPOTPAID`` and
  ``POSTPAID_BY_HOUR``: one row per (zone, type, charge type) with cores, memory, GPU count,
  sale status and price; GPU types become one offer per (zone, type), with the pay-as-you-go
  price and, where spot is on sale, the spot price. The GPU model comes from the catalog by
  instance type, else from the family (GN7 -> T4, ...).
- **prices**: ``InquiryPriceRunInstances`` (``Price.InstancePrice.UnitPriceDiscount``, else
  ``UnitPrice``) per (zone, GPU type) for ``SPOTPAID`` and ``POSTPAID_BY_HOUR``, for the
  charge types the listing says are on sale there (two calls per pair at most: restrict with
  ``instance_types`` in a large region). It needs an image id; without one the prices in
  ``DescribeZoneInstanceConfigInfos`` are used.
- **launch**: ``RunInstances`` with ``InstanceChargeType=SPOTPAID`` and ``InstanceMarketOptions
  {MarketType: spot, SpotOptions: {MaxPrice: "<cap>", SpotInstanceType: one-time}}`` for spot
  (the on-demand price is the cap when none is given: Tencent requires one), or
  ``POSTPAID_BY_HOUR``; ``ClientToken`` = the launch token, ``TagSpecification`` = the job and
  attempt tags, ``Placement.Zone``, ``InstanceName``, ``UserData`` (base64). Before sending,
  the instance carrying this attempt's tags is looked for and returned if it exists.
- **preemption**: a ``SPOTPAID`` instance that is going away (``SHUTDOWN``/``TERMINATING``)
  with nothing of ours behind it (``LatestOperation`` is not ``TerminateInstances``,
  ``IsolatedSource`` is not ``MANMADE``) is PREEMPTED, read from the row on every answer
  (level-triggered: nothing is remembered, so a restart loses nothing). Once released it is in
  no list; the control loop reads a running spot attempt whose instance is gone, and that it
  did not terminate, as preempted. (Tencent documents the reclaim notice only through the VM's
  metadata; the API side is read from the instance's state.)
- **errors**: HTTP 200 with ``{"Response": {"Error": {"Code", "Message"}, "RequestId"}}``.
  The SDK raises them only when the answer's Content-Type is exactly ``application/json``; with
  ``application/json; charset=utf-8`` (a proxy, a gateway, a fake server) its typed methods
  return an empty response instead. So every call goes through ``CvmClient.call_json`` and the
  envelope is checked here, whatever the Content-Type. Codes are classified in
  :data:`providers.tencent.errors.ERRORS` (a :class:`providers._common.ErrorTable`). ``UnsupportedOperation.NoInstanceTypeSupportSpot`` (the type has no
  spot market in that zone) is CAPACITY: the planner takes the next offer, as for a sold-out
  zone; it is never retried in place.

Credentials: ``credentials=`` (``{"secret_id", "secret_key"}`` or a pair), else
``TENCENTCLOUD_SECRET_ID``/``TENCENTCLOUD_SECRET_KEY``, else the SDK's profile file
(``~/.tencentcloud/credentials``); both values are registered for redaction, and the SDK's
DEBUG lines are redacted after rendering.

Prices and ``MaxPrice`` are in the account's currency: CNY on a China-site account, USD on an
international one. Tencent's price answers (``DescribeZoneInstanceConfigInfos``,
``InquiryPriceRunInstances``: ``ItemPrice`` has no currency field in API 2017-03-12) do not
name it, so it must be configured (``currency=``); a ``Currency`` the cloud does report in a
price answer is taken and wins, and a configured currency it contradicts refuses launches.
Prices are converted to USD with a rate the user sees and sets (``cny_to_usd``, ``fx_rates``);
with no currency known they are left out (None), never passed off as USD, and a spot launch
(which always carries a ``MaxPrice``) is refused with INVALID ``UnknownCurrency``. The USD cap
is converted back and rounded *down* to 4 decimals, so it never exceeds the cap.

The SDK is imported lazily (inside :meth:`TencentProvider._client`), never at module import.

Modules: :mod:`.errors` (codes, the envelope, SDK exceptions), :mod:`.client` (options,
credentials, the call), :mod:`.offers` (offers, prices, the bid), :mod:`.adapter`
(instances); what Tencent and Alibaba share is in :mod:`providers._regional`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from providers._lazy import lazy_attributes

if TYPE_CHECKING:
    from providers._regional import parse_endpoint
    from providers.tencent.adapter import GOING_AWAY, OUR_OPERATIONS, TencentProvider, reclaimed
    from providers.tencent.client import (
        DEFAULT_REGION,
        ENV_SECRET_ID,
        ENV_SECRET_KEY,
        POSTPAID,
        SPOTPAID,
        parse_time,
    )
    from providers.tencent.errors import ERRORS, NAME, classify_code, classify_error, envelope_error
    from providers.tencent.offers import FAMILY_GPU, PRICE_DECIMALS, gpu_for, price_text

#: what this package offers, and the module each name lives in: imported when first asked
#: for (reading the cloud's facts, or listing the providers, imports no adapter or SDK)
_LAZY = {
    "parse_endpoint": "providers._regional",
    "GOING_AWAY": "providers.tencent.adapter",
    "OUR_OPERATIONS": "providers.tencent.adapter",
    "TencentProvider": "providers.tencent.adapter",
    "reclaimed": "providers.tencent.adapter",
    "DEFAULT_REGION": "providers.tencent.client",
    "ENV_SECRET_ID": "providers.tencent.client",
    "ENV_SECRET_KEY": "providers.tencent.client",
    "POSTPAID": "providers.tencent.client",
    "SPOTPAID": "providers.tencent.client",
    "parse_time": "providers.tencent.client",
    "ERRORS": "providers.tencent.errors",
    "NAME": "providers.tencent.errors",
    "classify_code": "providers.tencent.errors",
    "classify_error": "providers.tencent.errors",
    "envelope_error": "providers.tencent.errors",
    "FAMILY_GPU": "providers.tencent.offers",
    "PRICE_DECIMALS": "providers.tencent.offers",
    "gpu_for": "providers.tencent.offers",
    "price_text": "providers.tencent.offers",
}


__getattr__ = lazy_attributes(__name__, _LAZY)

__all__ = [
    "DEFAULT_REGION",
    "ENV_SECRET_ID",
    "ENV_SECRET_KEY",
    "ERRORS",
    "FAMILY_GPU",
    "GOING_AWAY",
    "NAME",
    "OUR_OPERATIONS",
    "POSTPAID",
    "PRICE_DECIMALS",
    "SPOTPAID",
    "TencentProvider",
    "classify_code",
    "classify_error",
    "envelope_error",
    "gpu_for",
    "parse_endpoint",
    "parse_time",
    "price_text",
    "reclaimed",
]
