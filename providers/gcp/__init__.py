"""Google Compute Engine through ``google-cloud-compute`` (REST transport).

What this adapter does, and the GCP facts behind it (see shared/reference/clouds.md):

- **No bid on GCP.** A Spot VM is billed at the current Spot price; there is no maximum price to
  send. The bid cap is therefore enforced *before* launch: a spot launch whose known price (the
  live quote from :meth:`GCPProvider.prices`, else the offer's price) is above
  ``request.bid_cap_per_hour`` is refused with ``ProviderError(PRICE_TOO_LOW, "PriceAboveCap")``
  and nothing is sent. Where no price is known the launch goes ahead and a warning says the cap
  could not be checked. A Spot price that rises after launch is not a preemption cause on GCP;
  the cap cannot stop it.
- **Idempotency.** The instance name is ``request.name`` and the insert carries
  ``requestId = uuid5(token)`` (inside ``InsertInstanceRequest``, it is not a keyword). Before
  inserting, the adapter looks for the instance by name in the zone and by its job/attempt
  labels anywhere in the project.
- **Operations.** Polled with our own ``ZoneOperationsClient.wait`` (``op.result()`` polls the
  public endpoint). A failed operation's cause is ``op.error.errors[0].code``:
  ``ZONE_RESOURCE_POOL_EXHAUSTED(_WITH_DETAILS)`` capacity, ``QUOTA_EXCEEDED`` quota.
- **Labels** are lowercase and dot-free (keys: a lowercase letter first, then lowercase
  letters, digits, ``_`` and ``-``, at most 63), so every tag becomes a label: its key mapped by
  :func:`label_key` (``CostCenter`` -> ``costcenter``, ``team.name`` -> ``team_name``) and its value
  by :func:`label`, so that cost-allocation tags reach billing; ``policy check`` warns of each
  change (:func:`label_changes`). The exact tags are also kept in the ``provisioner-tags``
  metadata item, which is what ``Instance.tags`` reports.
- **Preemption.** Compute Engine records a ``compute.instances.preempted`` system operation
  and stops (``STOP``) or deletes (``DELETE``) the VM. ``interruptions`` reads those
  operations; ``get``/``list`` report a stopped VM with such an operation as PREEMPTED, and
  ``get`` of a VM deleted by preemption answers a PREEMPTED instance built from the operation.
- Instance ids are ``<zone>/<name>``; ``get``/``terminate`` also take a bare name (found with
  an aggregated list).
- **Gangs** (issue 10) go under one compact placement policy (a regional resource policy,
  ``groupPlacementPolicy.collocation = COLLOCATED``, its tags as JSON in its description; its
  id is its path ``projects/P/regions/R/resourcePolicies/N``); each node's insert names it in
  ``resourcePolicies``.

The adapter is split by concern: ``errors`` (the error table and classifier), ``gpus``
(accelerator types and shapes), ``labels`` (tags as labels), ``client`` (options, credentials,
clients), ``offers`` (offers and prices), ``instances`` (describe, terminate, preemptions),
``placement`` (compact placement policies), ``launch`` and ``adapter`` (:class:`GCPProvider`,
holding them as fields).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from providers._lazy import lazy_attributes

if TYPE_CHECKING:
    from providers.gcp.adapter import GCPProvider
    from providers.gcp.errors import ERRORS, classify
    from providers.gcp.gpus import SHAPES, accelerator_type, gpu_name, has_builtin_gpus
    from providers.gcp.instances import STATES
    from providers.gcp.labels import label, label_changes, label_key, labels_for
    from providers.gcp.launch import request_id
    from providers.gcp.offers import parse_sku

#: what this package offers, and the module each name lives in: imported when first asked
#: for (reading the cloud's facts, or listing the providers, imports no adapter or SDK)
_LAZY = {
    "GCPProvider": "providers.gcp.adapter",
    "ERRORS": "providers.gcp.errors",
    "classify": "providers.gcp.errors",
    "SHAPES": "providers.gcp.gpus",
    "accelerator_type": "providers.gcp.gpus",
    "gpu_name": "providers.gcp.gpus",
    "has_builtin_gpus": "providers.gcp.gpus",
    "STATES": "providers.gcp.instances",
    "label": "providers.gcp.labels",
    "label_changes": "providers.gcp.labels",
    "label_key": "providers.gcp.labels",
    "labels_for": "providers.gcp.labels",
    "request_id": "providers.gcp.launch",
    "parse_sku": "providers.gcp.offers",
}


__getattr__ = lazy_attributes(__name__, _LAZY)

__all__ = [
    "ERRORS",
    "SHAPES",
    "STATES",
    "GCPProvider",
    "accelerator_type",
    "classify",
    "gpu_name",
    "has_builtin_gpus",
    "label",
    "label_changes",
    "label_key",
    "labels_for",
    "parse_sku",
    "request_id",
]
