"""Azure launch: a NIC, then the VM, idempotent by name, the bid cap as ``maxPrice``.

``launch`` creates ``<name>-nic`` in the configured subnet, then PUTs the VM ``<name>``
(``request.name``) with ``priority: Spot``, ``evictionPolicy`` (``Delete`` by default),
``billingProfile.maxPrice`` (the bid cap rounded *down* to 5 decimals, so it never exceeds the
cap; ``-1``, no price eviction, when there is no cap), the tags, and ``osProfile.customData`` =
base64 of the request's user data (else of the bootstrap script rendered from its job spec).
PUT is idempotent; the adapter still looks the VM up first and returns it if it exists.
Allocation failures arrive as a failed long-running operation; the VM is then left ``Failed``
and the adapter deletes it and its NIC before raising.

With the ``identity`` option the VM body carries ``identity`` (``{"type": "SystemAssigned"}``, or
``{"type": "UserAssigned", "userAssignedIdentities": {ID: {}}}``: :func:`providers.azure.client.
vm_identity`), the managed identity the agent reads the bucket and Key Vault with.

A gang's node (``request.placement_group`` set) carries ``properties.proximityPlacementGroup``
= ``{"id": <the group's ARM id>}`` (:mod:`providers.azure.placement`). An RDMA fabric
(``request.fabric`` "infiniband"/"rdma") needs nothing more on the wire: the size carries it
(the ND-series sizes with an ``r``, e.g. ``Standard_ND96asr_v4``).

A reserved launch (``Market.RESERVED``) names its capacity reservation group in
``properties.capacityReservation.capacityReservationGroup.id`` and goes out ``Regular``
(:mod:`providers.azure.reservations`).
"""

from __future__ import annotations

import base64
import copy
import logging
from collections.abc import Mapping
from typing import Any

from providers._common import cap_decimal, offer_for
from providers.azure.client import AzureClient, as_dict, zone_number
from providers.azure.instances import AzureInstances
from providers.azure.reservations import AzureReservations, capacity_reservation
from providers.base import ErrorKind, ProviderError, redact
from providers.bootstrap import user_data_for
from provisioner.core.models import Instance, LaunchRequest, Market

log = logging.getLogger("provisioner.providers.azure")


PRICE_DECIMALS = 5


def max_price(cap: float | None) -> float:
    """``billingProfile.maxPrice`` for a bid cap: floor to 5 decimals; ``-1`` for no cap."""
    if cap is None:
        return -1
    value = float(cap_decimal(cap, PRICE_DECIMALS))  # decimal arithmetic: never above the cap
    if value <= 0:
        raise ProviderError(
            ErrorKind.PRICE_TOO_LOW,
            "BidCapBelowMinimum",
            f"bid cap {cap!r} is below Azure's smallest max price 0.00001",
            provider="azure",
        )
    return value


class AzureLaunch:
    """Launch: its own VMs looked up with ``instances``, a reserved launch's capacity
    reservation group named by ``held``."""

    def __init__(
        self, client: AzureClient, instances: AzureInstances, held: AzureReservations
    ) -> None:
        self.client = client
        self.instances = instances
        self.held = held

    def launch(self, request: LaunchRequest) -> Instance:
        offer = offer_for(request, "azure")
        region = offer.region or (self.client.locations[0] if self.client.locations else "")
        if not region:
            raise ProviderError(
                ErrorKind.INVALID, "NoLocation", "the offer names no region", provider="azure"
            )
        if not self.client.subnet_id:
            raise ProviderError(
                ErrorKind.INVALID,
                "NoSubnet",
                "subnet_id is needed to create the NIC",
                provider="azure",
            )
        group = self.held.reserved_group_id(request)  # refused here, before anything is sent
        name = request.name
        existing = self.instances.get_vm(name)
        if (
            existing is not None
            and existing.get("properties", {}).get("provisioningState") != "Failed"
        ):
            log.info("azure: %s already has VM %s", request.token, name)
            return self.instances.instance(existing, self.instances.get_nic(name))
        spot = request.market is Market.SPOT
        price = (
            max_price(request.bid_cap_per_hour if request.cap_on_wire else None) if spot else None
        )
        nic = self._ensure_nic(name, region, request.tags)
        body = self._vm_body(request, region, nic["id"], price)
        if group is not None:  # into the capacity reservation group
            body["properties"]["capacityReservation"] = capacity_reservation(request, group)
        try:
            self.client.call(
                "create VM",
                lambda: self.client.compute.virtual_machines.begin_create_or_update(
                    self.client.resource_group, name, body
                ).result(),
            )
        except ProviderError as err:
            self._clean_up_failed(name, err)
            raise
        instance = self.instances.get(name)
        log.info(
            "azure: launched %s (%s, %s, maxPrice %s) for %s",
            name,
            offer.instance_type,
            request.market.value,
            price,
            request.token,
        )
        return instance

    def _ensure_nic(self, name: str, region: str, tags: Mapping[str, str]) -> dict[str, Any]:
        body = {
            "location": region,
            "tags": dict(tags),
            "properties": {
                "enableAcceleratedNetworking": self.client.accelerated_networking,
                "ipConfigurations": [
                    {
                        "name": "ipconfig1",
                        "properties": {
                            "subnet": {"id": self.client.subnet_id},
                            "privateIPAllocationMethod": "Dynamic",
                        },
                    }
                ],
            },
        }
        nic = self.client.call(
            "create NIC",
            lambda: self.client.network.network_interfaces.begin_create_or_update(
                self.client.resource_group, f"{name}-nic", body
            ).result(),
        )
        return as_dict(nic)

    def _vm_body(
        self, request: LaunchRequest, region: str, nic_id: str, price: float | None
    ) -> dict[str, Any]:
        offer = request.offer
        admin = self.client.admin_username
        os_profile: dict[str, Any] = {
            "computerName": request.name[:64],
            "adminUsername": admin,
            "linuxConfiguration": {
                "disablePasswordAuthentication": True,
                "ssh": {
                    "publicKeys": [
                        {"path": f"/home/{admin}/.ssh/authorized_keys", "keyData": self._ssh_key()}
                    ]
                },
            },
        }
        script = user_data_for(
            request,
            "azure",
            package_spec=self.client.package_spec,
            pip_args=self.client.pip_args,
            agent_preinstalled=self.client.agent_preinstalled,
        )
        if script:
            os_profile["customData"] = base64.b64encode(script.encode()).decode()
        props: dict[str, Any] = {
            "hardwareProfile": {"vmSize": offer.instance_type},
            "storageProfile": {
                "imageReference": _image_reference(request.image or self.client.image),
                "osDisk": {
                    "createOption": "FromImage",
                    "deleteOption": "Delete",
                    "diskSizeGB": request.disk_gb,
                    "managedDisk": {"storageAccountType": self.client.os_disk_type},
                },
            },
            "osProfile": os_profile,
            "networkProfile": {
                "networkInterfaces": [
                    {"id": nic_id, "properties": {"primary": True, "deleteOption": "Detach"}}
                ]
            },
        }
        if price is not None:
            props.update(
                priority="Spot",
                evictionPolicy=self.client.eviction_policy,
                billingProfile={"maxPrice": price},
            )
        else:
            props["priority"] = "Regular"
        if request.placement_group:  # a gang's node: into the gang's proximity placement group
            group = request.placement_group
            props["proximityPlacementGroup"] = {
                "id": group if "/" in group else self.client.ppg_id(group)
            }
        body: dict[str, Any] = {"location": region, "tags": dict(request.tags), "properties": props}
        if (
            self.client.identity
        ):  # the VM's managed identity: the agent's for the bucket and Key Vault
            body["identity"] = copy.deepcopy(self.client.identity)
        zone = zone_number(offer.zone)
        if zone:
            body["zones"] = [zone]
        return body

    def _ssh_key(self) -> str:
        if self.client.ssh_public_key:
            return self.client.ssh_public_key
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        # Azure wants a key for a Linux VM without a password; with none configured, one is
        # made and its private half thrown away: the VM is reached through its agent only.
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.client.ssh_public_key = (
            key.public_key()
            .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
            .decode()
        )
        log.info("azure: no ssh_public_key configured; VMs get a throwaway key")
        return self.client.ssh_public_key

    def _clean_up_failed(self, name: str, err: ProviderError) -> None:
        """After a failed create: remove the VM (left ``Failed`` by Azure) and the NIC."""
        log.warning(
            "azure: creating %s failed (%s: %s); removing what it left",
            name,
            err.kind.value,
            err.code,
        )
        try:
            self.instances.delete(name)
        except ProviderError as cleanup:
            log.warning("azure: could not clean up after %s: %s", name, cleanup)


def _image_reference(image: str) -> dict[str, str]:
    if image.startswith("/"):
        return {"id": image}
    parts = image.split(":")
    if len(parts) != 4:
        raise ProviderError(
            ErrorKind.INVALID,
            "InvalidImage",
            f"image {redact(image)!r} is not publisher:offer:sku:version or a resource id",
            provider="azure",
        )
    return dict(zip(("publisher", "offer", "sku", "version"), parts, strict=True))
