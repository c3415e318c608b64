"""Alibaba Cloud ECS behind the provider interface, on the official SDK (alibabacloud-ecs20140526).

What the cloud is asked, and how its answers are read:

- **offers**: ``DescribeInstanceTypes`` (``MinimumGPUAmount=1``: GPU types with ``GPUSpec``,
  ``GPUAmount``, cores, memory; vGPU slices such as ``sgn7i``/``vgn6i`` are left out) and ``DescribeAvailableResource`` (which zones have the type in
  stock for pay-as-you-go/spot), one offer per (zone, type). Prices are filled from the catalog
  where it knows the type; live prices come from :meth:`AlibabaProvider.prices`.
- **prices**: ``DescribeSpotPriceHistory`` per GPU type (``SpotPrice`` and ``OriginPrice``, the
  pay-as-you-go price), the newest point per zone.
- **launch**: ``RunInstances`` with ``InstanceChargeType=PostPaid``, for spot
  ``SpotStrategy=SpotWithPriceLimit`` + ``SpotPriceLimit`` (the bid cap; ``SpotAsPriceGo`` when
  there is none) and ``SpotInterruptionBehavior=Terminate``, ``NoSpot`` for on-demand;
  ``ClientToken`` = the launch token, ``Tag.N.Key/Value`` = the job/attempt tags, ``Amount=1``.
  Before sending, the instance carrying this attempt's tags is looked for and returned if it
  exists (ClientToken alone only protects for a while).
- **preemption**: ``DescribeInstances`` shows ``OperationLocks.LockReason == "Recycling"`` on a
  spot instance being taken back (minutes before it is released); that instance reads
  PREEMPTED, and is an :class:`Interruption`, on every answer while the lock stands
  (level-triggered: nothing is remembered between calls, so a restart loses nothing). Once
  released it is in no list; the control loop reads a running spot attempt whose instance is
  gone, and that it did not terminate, as preempted.
- **errors**: HTTP 4xx/5xx with ``{"Code", "Message", "RequestId"}``, raised by the SDK as
  ``ClientException``/``ServerException`` with ``.code``; classified by code in
  :data:`providers.alibaba.errors.ERRORS` (a :class:`providers._common.ErrorTable`).

Credentials: ``credentials=`` (``{"access_key_id", "access_key_secret"}`` or a pair), else
``ALIBABA_CLOUD_ACCESS_KEY_ID``/``ALIBABA_CLOUD_ACCESS_KEY_SECRET``, else the SDK's default
chain (profile file, RAM role); the key pair is registered for redaction.

Prices and bids are in the account's currency, which every ``DescribeSpotPriceHistory`` answer
names (``Currency``: CNY on a China-site account, USD on an international one). The adapter
takes the currency from those answers (``currency=`` is only a fallback, and a configured
currency the cloud contradicts refuses launches), converts prices to USD for the planner with a
rate the user sees and sets (``cny_to_usd``, ``fx_rates``), and converts a USD bid cap back for
``SpotPriceLimit``, rounded *down* to the 3 decimals Alibaba takes, so it never exceeds the cap.
A spot launch with a cap first asks for the type's price history when no answer has named the
currency yet, and is refused (INVALID, ``UnknownCurrency``) while it stays unknown.

The SDK is imported lazily (inside :meth:`AlibabaProvider._sdk`), never at module import.

Modules: :mod:`.errors` (codes and SDK exceptions), :mod:`.client` (options, credentials,
clients), :mod:`.offers` (offers, prices, the bid), :mod:`.adapter` (instances); what Alibaba
and Tencent share is in :mod:`providers._regional`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from providers._lazy import lazy_attributes

if TYPE_CHECKING:
    from providers._regional import parse_endpoint
    from providers.alibaba.adapter import RECYCLING, SPOT_STRATEGIES, AlibabaProvider
    from providers.alibaba.client import DEFAULT_REGION, ENV_KEY_ID, ENV_KEY_SECRET, parse_time
    from providers.alibaba.errors import ERRORS, NAME, classify_code, classify_error
    from providers.alibaba.offers import PRICE_DECIMALS, gpu_model

#: what this package offers, and the module each name lives in: imported when first asked
#: for (reading the cloud's facts, or listing the providers, imports no adapter or SDK)
_LAZY = {
    "parse_endpoint": "providers._regional",
    "RECYCLING": "providers.alibaba.adapter",
    "SPOT_STRATEGIES": "providers.alibaba.adapter",
    "AlibabaProvider": "providers.alibaba.adapter",
    "DEFAULT_REGION": "providers.alibaba.client",
    "ENV_KEY_ID": "providers.alibaba.client",
    "ENV_KEY_SECRET": "providers.alibaba.client",
    "parse_time": "providers.alibaba.client",
    "ERRORS": "providers.alibaba.errors",
    "NAME": "providers.alibaba.errors",
    "classify_code": "providers.alibaba.errors",
    "classify_error": "providers.alibaba.errors",
    "PRICE_DECIMALS": "providers.alibaba.offers",
    "gpu_model": "providers.alibaba.offers",
}


__getattr__ = lazy_attributes(__name__, _LAZY)

__all__ = [
    "DEFAULT_REGION",
    "ENV_KEY_ID",
    "ENV_KEY_SECRET",
    "ERRORS",
    "NAME",
    "PRICE_DECIMALS",
    "RECYCLING",
    "SPOT_STRATEGIES",
    "AlibabaProvider",
    "classify_code",
    "classify_error",
    "gpu_model",
    "parse_endpoint",
    "parse_time",
]
