"""Azure instances: describe, get, list by tag, terminate, evictions.

With ``Deallocate`` an evicted VM stays, ``PowerState/deallocated`` (this tool never
deallocates, so a deallocated Spot VM is an eviction). With ``Delete`` the VM is gone; its NIC
(attached with ``deleteOption: Detach``) outlives it and carries its tags: a managed NIC with no
VM is an evicted attempt, reported by ``get``/``list`` as PREEMPTED and by ``interruptions``.
``terminate`` deletes the VM, then the NIC. Instance ids are ARM resource ids of the VM;
``get``/``terminate`` also take a bare name.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from providers._common import (
    has_tags,
    normalise_state,
    now_utc,
    parse_time,
    unless_gone,
    utc,
    wanted_tags,
)
from providers.azure.client import AzureClient, as_dict
from providers.azure.offers import AzureOffers
from providers.base import ErrorKind, ProviderError
from provisioner.core.models import TAG_MANAGED, Instance, InstanceState, Interruption, Market

POWER_STATES: dict[str, InstanceState] = {
    "starting": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "deallocating": InstanceState.STOPPING,
    "stopped": InstanceState.TERMINATED,
    "deallocated": InstanceState.TERMINATED,
    # provisioning states, used while there is no power state yet
    "creating": InstanceState.PENDING,
    "updating": InstanceState.PENDING,
    "migrating": InstanceState.PENDING,
    "succeeded": InstanceState.PENDING,
    "deleting": InstanceState.STOPPING,
    "failed": InstanceState.TERMINATED,
    "evicted": InstanceState.TERMINATED,
}


class AzureInstances:
    """The instance operations of the Azure adapter, but launch (:mod:`providers.azure.launch`);
    an instance's price is the last quote ``offers`` fetched for its size."""

    def __init__(self, client: AzureClient, offers: AzureOffers) -> None:
        self.client = client
        self.offers = offers

    # -- describe -------------------------------------------------------------------------------

    def get_vm(self, name: str) -> dict[str, Any] | None:
        vm = unless_gone(
            lambda: self.client.call(
                "get VM",
                lambda: self.client.compute.virtual_machines.get(
                    self.client.resource_group, name, expand="instanceView"
                ),
            )
        )
        return None if vm is None else as_dict(vm)

    def get_nic(self, vm_name: str) -> dict[str, Any] | None:
        nic = unless_gone(
            lambda: self.client.call(
                "get NIC",
                lambda: self.client.network.network_interfaces.get(
                    self.client.resource_group, f"{vm_name}-nic"
                ),
            )
        )
        return None if nic is None else as_dict(nic)

    def instance(self, vm: Mapping[str, Any], nic: Mapping[str, Any] | None) -> Instance:
        props = vm.get("properties") or {}
        statuses = (props.get("instanceView") or {}).get("statuses") or []
        power = next(
            (s for s in statuses if str(s.get("code", "")).startswith("PowerState/")), None
        )
        provisioning = str(props.get("provisioningState") or "")
        raw = str(power["code"]).split("/", 1)[1] if power else provisioning.lower()
        spot = props.get("priority") == "Spot"
        # This tool never deallocates: a deallocated Spot VM was evicted (evictionPolicy Deallocate).
        preempted = spot and raw == "deallocated"
        failed = next(
            (s for s in statuses if str(s.get("code", "")).startswith("ProvisioningState/failed")),
            None,
        )
        reason = (
            "evicted"
            if preempted
            else (str(failed.get("code", "")).split("/", 2)[-1] if failed else "")
        )
        state = normalise_state(raw, POWER_STATES, preempted=preempted)
        if provisioning == "Deleting":
            state = InstanceState.STOPPING
        region = str(vm.get("location", ""))
        size = (props.get("hardwareProfile") or {}).get("vmSize", "")
        quote = self.offers.quotes.get((region, size))
        return Instance(
            id=self.client.vm_id(str(vm.get("name", ""))),
            provider="azure",
            region=region,
            zone=f"{region}-{vm['zones'][0]}" if vm.get("zones") else "",
            instance_type=size,
            market=Market.SPOT
            if spot
            else Market.RESERVED
            if (props.get("capacityReservation") or {}).get("capacityReservationGroup")
            else Market.ON_DEMAND,
            state=state,
            raw_state=raw,
            state_reason=reason,
            tags=dict(vm.get("tags") or {}),
            launched_at=parse_time(props.get("timeCreated")),
            price_per_hour=(quote.spot_price if spot else quote.on_demand_price) if quote else None,
            private_ip=private_ip(nic),
        )

    def _evicted(self, nic: Mapping[str, Any]) -> Instance:
        """The instance an orphaned managed NIC stands for: its VM was evicted (Delete)."""
        vm_name = str(nic.get("name", "")).removesuffix("-nic")
        return Instance(
            id=self.client.vm_id(vm_name),
            provider="azure",
            region=str(nic.get("location", "")),
            zone="",
            instance_type="",
            market=Market.SPOT,
            state=InstanceState.PREEMPTED,
            raw_state="deleted",
            state_reason="evicted: the VM is gone and its NIC remains",
            tags=dict(nic.get("tags") or {}),
            private_ip=None,
        )

    @staticmethod
    def _orphan(nic: Mapping[str, Any]) -> bool:
        props = nic.get("properties") or {}
        return (
            not props.get("virtualMachine")
            and str(nic.get("name", "")).endswith("-nic")
            and (nic.get("tags") or {}).get(TAG_MANAGED) == "true"
        )

    def get(self, instance_id: str) -> Instance:
        name = instance_id.rstrip("/").rsplit("/", 1)[-1]
        vm = self.get_vm(name)
        nic = self.get_nic(name)
        if vm is not None:
            return self.instance(vm, nic)
        if nic is not None and self._orphan(nic):
            return self._evicted(nic)
        raise ProviderError(
            ErrorKind.NOT_FOUND,
            "ResourceNotFound",
            f"no VM {name} in resource group {self.client.resource_group}",
            provider="azure",
        )

    def _all(self) -> tuple[builtins.list[dict[str, Any]], builtins.list[dict[str, Any]]]:
        vms = self.client.call(
            "list VMs",
            lambda: [
                as_dict(v)
                for v in self.client.compute.virtual_machines.list(
                    self.client.resource_group, expand="instanceView"
                )
            ],
        )
        nics = self.client.call(
            "list NICs",
            lambda: [
                as_dict(n)
                for n in self.client.network.network_interfaces.list(self.client.resource_group)
            ],
        )
        return vms, nics

    def list(self, tags: Mapping[str, str] | None = None) -> builtins.list[Instance]:
        """VMs of the resource group carrying ``tags``, and evicted ones (orphaned NICs)."""
        wanted = wanted_tags(tags)
        vms, nics = self._all()
        by_name = {str(n.get("name", "")).lower(): n for n in nics}
        out = [
            self.instance(vm, by_name.get(f"{vm.get('name', '')}-nic".lower()))
            for vm in vms
            if has_tags(vm.get("tags") or {}, wanted)
        ]
        out += [
            self._evicted(n)
            for n in nics
            if self._orphan(n) and has_tags(n.get("tags") or {}, wanted)
        ]
        return out

    # -- terminate ----------------------------------------------------------------------------------

    def terminate(self, instance_ids: Iterable[str]) -> None:
        for name in dict.fromkeys(i.rstrip("/").rsplit("/", 1)[-1] for i in instance_ids):
            self.delete(name)

    def delete(self, name: str) -> None:
        """Delete VM ``name`` (waiting for it), then its NIC; absent ones are skipped."""
        self._delete_one("delete VM", self.client.compute.virtual_machines.begin_delete, name)
        self._delete_one(
            "delete NIC", self.client.network.network_interfaces.begin_delete, f"{name}-nic"
        )

    def _delete_one(self, what: str, begin: Callable[[str, str], Any], name: str) -> None:
        unless_gone(
            lambda: self.client.call(what, lambda: begin(self.client.resource_group, name).result())
        )

    # -- interruptions ------------------------------------------------------------------------------

    def interruptions(self, since: datetime) -> builtins.list[Interruption]:
        """Evictions seen in the resource group since ``since``.

        Deallocate: managed Spot VMs in ``PowerState/deallocated`` (time of that status).
        Delete: managed NICs whose VM is gone (time: ``systemData.lastModifiedAt`` where ARM
        gives it, else now, so a caller may see one again and should de-duplicate by id).
        """
        since = utc(since)
        vms, nics = self._all()
        out: list[Interruption] = []
        for vm in vms:
            if (vm.get("tags") or {}).get(TAG_MANAGED) != "true":
                continue
            inst = self.instance(vm, None)
            if inst.state is not InstanceState.PREEMPTED:
                continue
            statuses = ((vm.get("properties") or {}).get("instanceView") or {}).get(
                "statuses"
            ) or []
            when = next(
                (
                    parse_time(s.get("time"))
                    for s in statuses
                    if s.get("code") == "PowerState/deallocated"
                ),
                None,
            )
            at = when or now_utc()
            if at >= since:
                out.append(
                    Interruption(
                        inst.id, "azure", inst.zone, "preempted", at, raw="PowerState/deallocated"
                    )
                )
        for nic in nics:
            if not self._orphan(nic):
                continue
            at = parse_time((nic.get("systemData") or {}).get("lastModifiedAt")) or now_utc()
            if at >= since:
                inst = self._evicted(nic)
                out.append(
                    Interruption(inst.id, "azure", "", "preempted", at, raw="evicted (VM deleted)")
                )
        return out


def private_ip(nic: Mapping[str, Any] | None) -> str | None:
    if not nic:
        return None
    for config in (nic.get("properties") or {}).get("ipConfigurations") or []:
        ip = (config.get("properties") or {}).get("privateIPAddress")
        if ip:
            return str(ip)
    return None
