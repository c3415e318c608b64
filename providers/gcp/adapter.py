"""The GCP adapter: :class:`GCPProvider` holds its parts as fields and delegates to them."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from providers.base import PriceQuote, Provider, RetryPolicy
from providers.capabilities import PlacementGroup
from providers.gcp.client import GCPClient
from providers.gcp.instances import GCPInstances
from providers.gcp.launch import GCPLaunch
from providers.gcp.offers import GCPOffers
from providers.gcp.placement import GCPPlacement
from providers.gcp.quotas import GCPQuotas
from providers.gcp.reservations import GCPReservations
from provisioner.core.models import Instance, Interruption, LaunchRequest, Offer, Reservation
from provisioner.core.quotas import Quota


class GCPProvider(Provider):
    """Compute Engine in one project.

    ``project``: the project id (default: the one ``google.auth.default()`` finds).
    ``zones``/``regions``: where offers are listed (instances are found in every zone).
    ``credentials``: google-auth credentials, a service-account JSON path, or None for
    application-default credentials. ``endpoint``: a Compute API root (``http://127.0.0.1:P``
    in tests); ``billing_endpoint``: the Cloud Billing API root; ``billing_api_key``: an API key
    for it (else the credentials are used). ``termination_action``: what GCP does to a Spot VM
    it preempts, ``DELETE`` (default) or ``STOP``. ``service_account``: the email the VM runs
    as (with the ``cloud-platform`` scope), its identity for the bucket and Secret Manager.
    ``package_spec``/``pip_args``: how the startup script installs provisioner on the VM;
    ``agent_preinstalled``: the image has it in ``/opt/provisioner/venv``, nothing is installed.

    The parts, each given the one :class:`~providers.gcp.client.GCPClient` (options,
    credentials, Compute clients) it works through: ``pricing`` (machine types and Cloud
    Billing prices, :mod:`providers.gcp.offers`), ``instances`` (get, list, terminate,
    interruptions), ``placement`` (a gang's compact placement policy,
    :mod:`providers.gcp.placement`), ``launcher`` (:mod:`providers.gcp.launch`), ``held``
    (reservations and future reservations, :mod:`providers.gcp.reservations`) and
    ``gpu_quotas`` (regional GPU quotas). Its optional capabilities
    (:mod:`providers.capabilities`) are the methods below.
    """

    name = "gcp"

    def __init__(
        self,
        project: str | None = None,
        zones: Iterable[str] | None = None,
        regions: Iterable[str] | None = None,
        endpoint: str | None = None,
        credentials: Any = None,
        billing_endpoint: str | None = None,
        billing_api_key: str | None = None,
        image: str | None = None,
        network: str = "global/networks/default",
        subnetwork: str | None = None,
        external_ip: bool = True,
        service_account: str | None = None,
        disk_type: str = "pd-balanced",
        termination_action: str = "DELETE",
        retry: RetryPolicy | None = None,
        operation_timeout: float = 600.0,
        request_timeout: float = 60.0,
        package_spec: str = "provisioner",
        pip_args: Iterable[str] = (),
        agent_preinstalled: bool = False,
        flex_start_hours: float | None = None,
        flex_start_wait_s: int | None = None,
    ) -> None:
        self.client = GCPClient(
            project=project,
            zones=zones,
            regions=regions,
            endpoint=endpoint,
            credentials=credentials,
            billing_endpoint=billing_endpoint,
            billing_api_key=billing_api_key,
            image=image,
            network=network,
            subnetwork=subnetwork,
            external_ip=external_ip,
            service_account=service_account,
            disk_type=disk_type,
            termination_action=termination_action,
            retry=retry,
            operation_timeout=operation_timeout,
            request_timeout=request_timeout,
            package_spec=package_spec,
            pip_args=pip_args,
            agent_preinstalled=agent_preinstalled,
            flex_start_hours=flex_start_hours,
            flex_start_wait_s=flex_start_wait_s,
        )
        self.pricing = GCPOffers(self.client)
        self.instances = GCPInstances(self.client, self.pricing)
        self.placement = GCPPlacement(self.client, self.instances)
        self.launcher = GCPLaunch(self.client, self.instances, self.placement, self.pricing)
        self.held = GCPReservations(self.client)
        self.gpu_quotas = GCPQuotas(self.client)

    @property
    def project(self) -> str:
        """The project launches go to."""
        return str(self.client.project)

    @property
    def zones(self) -> builtins.list[str]:
        """The zones offers are listed in."""
        return self.client.zones

    @property
    def regions(self) -> builtins.list[str]:
        """The regions offers and prices cover."""
        return self.client.regions

    def account_id(self) -> str | None:
        """The project launches are billed to."""
        return str(self.client.project) if self.client.project else None

    # -- Provider ---------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> Instance:
        return self.launcher.launch(request)

    def get(self, instance_id: str) -> Instance:
        return self.instances.get(instance_id)

    def list(self, tags: Mapping[str, str] | None = None) -> builtins.list[Instance]:
        return self.instances.list(tags)

    def terminate(self, instance_ids: Iterable[str]) -> None:
        self.instances.terminate(instance_ids)

    def interruptions(self, since: datetime) -> builtins.list[Interruption]:
        return self.instances.interruptions(since)

    def close(self) -> None:
        self.client.close()

    # -- LivePrices, ListsOffers ------------------------------------------------------------

    def offers(self, regions: Iterable[str] | None = None) -> builtins.list[Offer]:
        return self.pricing.offers(regions)

    def prices(self, regions: Iterable[str] | None = None) -> builtins.list[PriceQuote]:
        return self.pricing.prices(regions)

    # -- PlacementGroups --------------------------------------------------------------------

    def ensure_placement_group(
        self, name: str, region: str, zone: str, tags: Mapping[str, str]
    ) -> str:
        return self.placement.ensure_placement_group(name, region, zone, tags)

    def delete_placement_group(self, group_id: str) -> None:
        self.placement.delete_placement_group(group_id)

    def list_placement_groups(
        self, tags: Mapping[str, str] | None = None
    ) -> builtins.list[PlacementGroup]:
        return self.placement.list_placement_groups(tags)

    # -- Quotas, HeldCapacity ---------------------------------------------------------------

    def quotas(self, regions: Iterable[str] | None = None) -> builtins.list[Quota]:
        return self.gpu_quotas.quotas(regions)

    def reservations(self, regions: Iterable[str] | None = None) -> builtins.list[Reservation]:
        return self.held.reservations(regions)
