"""GCP launch: a Spot or standard VM, idempotent, with the bid cap enforced before launch.

GCP takes no bid: a Spot VM is billed at the current Spot price. A spot launch whose known
price (the live quote, else the offer's) is above ``request.bid_cap_per_hour`` is refused with
``ProviderError(PRICE_TOO_LOW, "PriceAboveCap")`` and nothing is sent; where no price is known
the launch goes ahead and a warning says the cap could not be checked. The instance name is
``request.name`` and the insert carries ``requestId = uuid5(token)``; before inserting, the
adapter looks for the instance by name in the zone and by its job/attempt labels (and, for a
gang's node, its node label). A gang's node names the gang's compact placement policy in its
``resourcePolicies`` (:mod:`providers.gcp.placement`). With ``service_account`` set the VM runs
as that account with the ``cloud-platform`` scope (what it may do is then its IAM roles'); the
startup script installs ``package_spec`` with ``pip_args`` (nothing with ``agent_preinstalled``).
A reserved launch names its reservation in ``reservationAffinity`` and a flex-start one
(provider option ``flex_start_hours``) asks for ``FLEX_START`` (:mod:`providers.gcp.reservations`).
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from providers._common import offer_for
from providers.base import ErrorKind, ProviderError
from providers.bootstrap import user_data_for
from providers.gcp.client import REQUEST_ID_NAMESPACE, TAGS_METADATA_KEY, GCPClient
from providers.gcp.gpus import accelerator_type, has_builtin_gpus
from providers.gcp.instances import GCPInstances
from providers.gcp.labels import labels_for
from providers.gcp.offers import GCPOffers
from providers.gcp.placement import GCPPlacement
from providers.gcp.reservations import (
    flex_start_fields,
    reservation_affinity,
    scheduling_for,
)
from provisioner.core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_NODE,
    Instance,
    LaunchRequest,
    Market,
)

log = logging.getLogger("provisioner.providers.gcp")


def request_id(token: str) -> str:
    """The insert's ``requestId``: a UUID derived from the launch token (same launch, same id)."""
    return str(uuid.uuid5(REQUEST_ID_NAMESPACE, token))


class GCPLaunch:
    """Launch: its own instances looked up with ``instances``, a gang's node under the
    placement policy ``placement`` names, a spot cap checked against the price ``offers``
    knows."""

    def __init__(
        self,
        client: GCPClient,
        instances: GCPInstances,
        placement: GCPPlacement,
        offers: GCPOffers,
    ) -> None:
        self.client = client
        self.instances = instances
        self.placement = placement
        self.offers = offers

    def launch(self, request: LaunchRequest) -> Instance:
        offer = offer_for(request, "gcp")
        in_region = [z for z in self.client.zones if z.rsplit("-", 1)[0] == offer.region]
        zone = offer.zone or (in_region[0] if in_region else "")
        if not zone:
            raise ProviderError(
                ErrorKind.INVALID,
                "NoZone",
                f"offer {offer.instance_type} in {offer.region} has no zone",
                provider="gcp",
            )
        existing = self._existing(request, zone)
        if existing is not None:
            log.info("gcp: %s already has instance %s", request.token, existing.id)
            return existing
        if request.market is Market.SPOT:
            self._enforce_cap(request)
        body = self._instance_body(request, zone)
        from google.cloud import compute_v1

        insert = compute_v1.InsertInstanceRequest(
            project=self.client.project,
            zone=zone,
            instance_resource=body,
            request_id=request_id(request.token),
        )
        c = self.client.clients()
        try:
            op = self.client.call(
                "insert",
                lambda: c.instances.insert(
                    request=insert, retry=None, timeout=self.client.request_timeout
                ),
            )
        except ProviderError as err:
            if err.code != "alreadyExists":
                raise
            log.info("gcp: %s exists already (insert answered alreadyExists)", request.name)
            return self.instances.get(f"{zone}/{request.name}")
        self.instances.wait(zone, op.name)
        instance = self.instances.get(f"{zone}/{request.name}")
        log.info(
            "gcp: launched %s (%s, %s) for %s",
            instance.id,
            offer.instance_type,
            request.market.value,
            request.token,
        )
        return instance

    def _existing(self, request: LaunchRequest, zone: str) -> Instance | None:
        """The live instance of this (job, attempt[, node]): by name in the zone, else by
        labels."""
        raw = self.instances.get_raw(zone, request.name)
        if raw is not None:
            found = self.instances.instance(raw)
            if found.state.alive:
                return found
        keys = (TAG_JOB, TAG_ATTEMPT, TAG_NODE) if request.nodes > 1 else (TAG_JOB, TAG_ATTEMPT)
        mine = [i for i in self.instances.list({k: request.tags[k] for k in keys}) if i.state.alive]
        return mine[0] if mine else None

    def _enforce_cap(self, request: LaunchRequest) -> None:
        """GCP takes no bid: refuse a spot launch whose known price is above the cap."""
        cap = request.bid_cap_per_hour
        if cap is None:
            return
        price = self.offers.known_price(request.offer)
        if price is None:
            log.warning(
                "gcp: no known spot price for %s in %s; the cap %.5f/h cannot be checked "
                "before launch (GCP takes no bid)",
                request.offer.instance_type,
                request.offer.region,
                cap,
            )
            return
        if price > cap:
            raise ProviderError(
                ErrorKind.PRICE_TOO_LOW,
                "PriceAboveCap",
                f"spot price {price:.5f}/h of {request.offer.instance_type} in {request.offer.region} is "
                f"above the cap {cap:.5f}/h; GCP takes no bid, so the cap is enforced before launch",
                provider="gcp",
            )
        log.info(
            "gcp: cap %.5f/h enforced before launch (GCP takes no bid): %s at %.5f/h",
            cap,
            request.offer.instance_type,
            price,
        )

    def _instance_body(self, request: LaunchRequest, zone: str) -> dict[str, Any]:
        offer = request.offer
        tags = request.tags
        spot = request.market is Market.SPOT
        scheduling: dict[str, Any] = {"on_host_maintenance": "TERMINATE"}
        special = scheduling_for(request, self.client.flex_start_hours)  # reserved or flex-start
        if special is not None:
            scheduling = special
        elif spot:
            scheduling.update(
                provisioning_model="SPOT",
                instance_termination_action=self.client.termination_action,
                automatic_restart=False,
            )
        else:
            scheduling.update(provisioning_model="STANDARD", automatic_restart=True)
        nic: dict[str, Any] = {"network": self.client.network}
        if self.client.subnetwork:
            nic["subnetwork"] = self.client.subnetwork
        if self.client.external_ip:
            nic["access_configs"] = [{"name": "External NAT", "type_": "ONE_TO_ONE_NAT"}]
        metadata = [{"key": TAGS_METADATA_KEY, "value": json.dumps(tags, sort_keys=True)}]
        script = user_data_for(
            request,
            "gcp",
            package_spec=self.client.package_spec,
            pip_args=self.client.pip_args,
            agent_preinstalled=self.client.agent_preinstalled,
        )
        if script:
            metadata.append({"key": "startup-script", "value": script})
        body: dict[str, Any] = {
            "name": request.name,
            "machine_type": f"zones/{zone}/machineTypes/{offer.instance_type}",
            "scheduling": scheduling,
            "labels": labels_for(tags),
            "metadata": {"items": metadata},
            "disks": [
                {
                    "boot": True,
                    "auto_delete": True,
                    "initialize_params": {
                        "source_image": request.image or self.client.image,
                        "disk_size_gb": request.disk_gb,
                        "disk_type": f"zones/{zone}/diskTypes/{self.client.disk_type}",
                    },
                }
            ],
            "network_interfaces": [nic],
        }
        if offer.gpu_count and not has_builtin_gpus(offer.instance_type):
            body["guest_accelerators"] = [
                {
                    "accelerator_type": f"zones/{zone}/acceleratorTypes/{accelerator_type(offer.gpu)}",
                    "accelerator_count": offer.gpu_count,
                }
            ]
        if request.reservation is not None:
            body["reservation_affinity"] = reservation_affinity(request.reservation)
        elif scheduling.get("provisioning_model") == "FLEX_START":
            body.update(flex_start_fields(self.client.flex_start_wait_s))
        if request.placement_group:
            body["resource_policies"] = [self.placement.policy_for(request.placement_group, zone)]
        if self.client.service_account:
            # the VM's identity for the bucket and Secret Manager: its IAM roles decide, so the
            # scope is cloud-platform (instances.insert: serviceAccounts[].email, .scopes[];
            # https://cloud.google.com/compute/docs/reference/rest/v1/instances/insert)
            body["service_accounts"] = [
                {
                    "email": self.client.service_account,
                    "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
                }
            ]
        return body
