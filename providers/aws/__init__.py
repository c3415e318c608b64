"""AWS EC2 adapter (boto3, imported lazily: importing this module never imports boto3).

Launch is ``RunInstances`` with ``InstanceMarketOptions`` (spot, one-time, terminate on
interruption, ``MaxPrice`` as a decimal string), the job's tags on the instance and its
volumes, ``ClientToken`` from (job, attempt), and IMDSv2 required (the node agent reads the
spot notice through it). Before launching, the adapter looks for its own instance by the
job/attempt tags: EC2 honours ``ClientToken`` but moto does not, and the tag lookup is what the
reconciler relies on anyway.

Errors are classified by ``Error.Code`` (see ``ERRORS``), never by exception class or HTTP
status alone: EC2 sends ``InsufficientInstanceCapacity`` with a 500. botocore's own retries are
switched off so that :func:`providers.base.call_with_retries` is the one retry layer (bounded,
jittered, throttling and transient errors only).

Offers come from ``DescribeInstanceTypes`` (types with ``GpuInfo``), priced from the catalog
where it has the type; live spot prices from ``DescribeSpotPriceHistory``, live on-demand
prices from the Price List Query API (``pricing`` ``GetProducts``, ``ServiceCode=AmazonEC2``,
filtered by instance type, ``regionCode``, ``operatingSystem=Linux``, ``tenancy=Shared`` and
``capacitystatus=Used``; of the rows left, the one with no pre-installed software), one query
per GPU type, every page followed, cached ``on_demand_ttl_s`` (24 h: the list changes monthly)
and reported with the time it was fetched (``PriceQuote.on_demand_at``). Where the Pricing API
cannot be reached the catalog's on-demand price is used, and the quote says so
(``on_demand_at`` None). A spot interruption
shows as ``StateReason.Code`` ``Server.SpotInstanceTermination`` on the terminated instance.

A gang (issue 10) goes into one cluster placement group (``placement``: the group's id is
``<region>/<name>``); its nodes name it in ``Placement.GroupName``, and ``fabric="efa"`` gives
each node one EFA interface per network card, as many as the type supports
(``DescribeInstanceTypes`` ``EfaInfo.MaximumEfaInterfaces``).

The adapter is split by concern: ``errors`` (the error table and classifier), ``client``
(options, session and clients), ``offers`` (offers and prices), ``instances`` (launch,
describe, terminate, interruptions), ``placement`` (cluster placement groups) and ``adapter``
(:class:`AWSProvider`, holding them as fields).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from providers._lazy import lazy_attributes

if TYPE_CHECKING:
    from providers.aws.adapter import AWSProvider
    from providers.aws.errors import ERRORS, classify
    from providers.aws.instances import DEFAULT_IMAGE, PRICE_DECIMALS, SPOT_REASONS, STATES

#: what this package offers, and the module each name lives in: imported when first asked
#: for (reading the cloud's facts, or listing the providers, imports no adapter or SDK)
_LAZY = {
    "AWSProvider": "providers.aws.adapter",
    "ERRORS": "providers.aws.errors",
    "classify": "providers.aws.errors",
    "DEFAULT_IMAGE": "providers.aws.instances",
    "PRICE_DECIMALS": "providers.aws.instances",
    "SPOT_REASONS": "providers.aws.instances",
    "STATES": "providers.aws.instances",
}


__getattr__ = lazy_attributes(__name__, _LAZY)

__all__ = [
    "DEFAULT_IMAGE",
    "ERRORS",
    "PRICE_DECIMALS",
    "SPOT_REASONS",
    "STATES",
    "AWSProvider",
    "classify",
]
