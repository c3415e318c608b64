"""Azure virtual machines through ``azure-mgmt-compute`` and ``azure-mgmt-network`` (and Spot
eviction rates through ``azure-mgmt-resourcegraph``).

What this adapter does, and the Azure facts behind it (see shared/reference/clouds.md):

- A VM needs a NIC: ``launch`` creates ``<name>-nic`` in the configured subnet, then PUTs the
  VM ``<name>`` (``request.name``) with ``priority: Spot``, ``evictionPolicy`` (``Delete`` by
  default), ``billingProfile.maxPrice`` (the bid cap rounded *down* to 5 decimals, so it never
  exceeds the cap; ``-1``, no price eviction, when there is no cap), the tags, and
  ``osProfile.customData`` = base64 of the request's user data (else of the bootstrap script
  rendered from its job spec). PUT is idempotent; the adapter
  still looks the VM up first and returns it if it exists.
- Errors are dispatched on ``e.error.code``, never on the exception class (a 409
  ``SkuNotAvailable`` arrives as ``ResourceExistsError``). ``SpotPriceGreaterThanProvidedMaxPrice``
  is price-too-low. ``MaxPriceValueInvalid`` is *invalid*: it says the value is malformed
  (not -1, not above 0, more than 5 decimals), which the adapter never sends, so trying another
  offer would not help. ``OperationNotAllowed`` is quota when its message speaks of quota,
  invalid otherwise. Allocation failures arrive as a failed long-running operation; the VM is
  then left ``Failed`` and the adapter deletes it and its NIC before raising.
- The SDK's own retry policy is switched off (``retry_total=0``): every error is classified
  here and only throttled/transient ones are retried, with jitter (``call_with_retries``).
- **Evictions.** With ``Deallocate`` an evicted VM stays, ``PowerState/deallocated`` (this tool
  never deallocates, so a deallocated Spot VM is an eviction). With ``Delete`` the VM is gone;
  the NIC is attached with ``deleteOption: Detach`` so that it outlives the VM and carries its
  tags: a managed NIC with no VM is an evicted attempt, reported by ``get``/``list`` as
  PREEMPTED and by ``interruptions`` (time: the NIC's ``systemData.lastModifiedAt`` where ARM
  gives it, else the time it is observed). ``terminate`` deletes the VM, then the NIC.
  (The same picture arises if the process died between creating the NIC and the VM; the
  reconciler then terminates that attempt, which removes the NIC.)
- Instance ids are ARM resource ids of the VM; ``get``/``terminate`` also take a bare name.

The adapter is split by concern: ``errors`` (the error table and classifier), ``client``
(options, credential, clients), ``offers`` (offers and prices), ``instances`` (describe,
terminate, evictions), ``launch`` (NIC and VM), ``placement`` (proximity placement groups for
gangs) and ``adapter`` (:class:`AzureProvider`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from providers._lazy import lazy_attributes

if TYPE_CHECKING:
    from providers.azure.adapter import AzureProvider
    from providers.azure.client import DEFAULT_IMAGE, as_dict
    from providers.azure.errors import ERRORS, classify
    from providers.azure.instances import POWER_STATES, private_ip
    from providers.azure.launch import PRICE_DECIMALS, max_price

#: what this package offers, and the module each name lives in: imported when first asked
#: for (reading the cloud's facts, or listing the providers, imports no adapter or SDK)
_LAZY = {
    "AzureProvider": "providers.azure.adapter",
    "DEFAULT_IMAGE": "providers.azure.client",
    "as_dict": "providers.azure.client",
    "ERRORS": "providers.azure.errors",
    "classify": "providers.azure.errors",
    "POWER_STATES": "providers.azure.instances",
    "private_ip": "providers.azure.instances",
    "PRICE_DECIMALS": "providers.azure.launch",
    "max_price": "providers.azure.launch",
}


__getattr__ = lazy_attributes(__name__, _LAZY)

__all__ = [
    "DEFAULT_IMAGE",
    "ERRORS",
    "POWER_STATES",
    "PRICE_DECIMALS",
    "AzureProvider",
    "as_dict",
    "classify",
    "max_price",
    "private_ip",
]
