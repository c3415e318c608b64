"""The Azure adapter: :class:`AzureProvider` holds its parts as fields and delegates to them."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from providers.azure.client import AzureClient
from providers.azure.commitments import AzureCommitments
from providers.azure.instances import AzureInstances
from providers.azure.launch import AzureLaunch
from providers.azure.offers import AzureOffers
from providers.azure.placement import AzurePlacement
from providers.azure.priors import AzurePriors
from providers.azure.quotas import AzureQuotas
from providers.azure.reservations import AzureReservations
from providers.base import PriceQuote, Provider, RetryPolicy
from providers.capabilities import CommitmentQuote, PlacementGroup
from provisioner.core.models import Instance, Interruption, LaunchRequest, Offer, Reservation
from provisioner.core.quotas import Quota
from provisioner.core.zone_priors import ZonePrior


class AzureProvider(Provider):
    """Azure VMs in one subscription and resource group.

    ``subscription_id`` (default ``$AZURE_SUBSCRIPTION_ID``), ``resource_group``,
    ``location``/``locations`` (regions offers and prices cover), ``subnet_id`` (the subnet the
    NICs join; needed to launch). ``credentials``: an azure-identity credential, a dict with
    ``tenant_id``/``client_id``/``client_secret``, a bearer token string, or None for
    ``DefaultAzureCredential``. ``endpoint``: the ARM root (``http://127.0.0.1:P`` in tests);
    ``prices_endpoint``: the Retail Prices API root. ``image``: ``publisher:offer:sku:version``
    or an image resource id. ``eviction_policy``: ``Delete`` (default) or ``Deallocate``.
    ``identity``: the VM's managed identity, ``system`` (system-assigned) or a user-assigned
    identity's resource id; the agent reads the bucket and Key Vault with it.
    ``package_spec``/``pip_args``: how the boot script (custom data) installs provisioner on the
    VM; ``agent_preinstalled``: the image has it in ``/opt/provisioner/venv``.

    The parts, each given the one :class:`~providers.azure.client.AzureClient` (options,
    credential, management clients) it works through: ``pricing`` (the catalog's GPU sizes and
    Retail Prices quotes, :mod:`providers.azure.offers`), ``instances`` (get, list, terminate,
    interruptions), ``launcher`` (NIC and VM, :mod:`providers.azure.launch`), ``placement``
    (proximity placement groups in the same resource group, :mod:`providers.azure.placement`;
    gangs, named by each node's VM), ``held`` (capacity reservation groups,
    :mod:`providers.azure.reservations`), ``commitments`` (reserved VM instance prices),
    ``gpu_quotas`` (usages) and ``zone_priors`` (Resource Graph eviction rates).
    Its optional capabilities (:mod:`providers.capabilities`) are the methods below.
    """

    name = "azure"

    def __init__(
        self,
        subscription_id: str | None = None,
        resource_group: str | None = None,
        location: str | None = None,
        locations: Iterable[str] | None = None,
        regions: Iterable[str] | None = None,
        subnet_id: str | None = None,
        endpoint: str | None = None,
        credentials: Any = None,
        prices_endpoint: str | None = None,
        image: str | None = None,
        admin_username: str = "azureuser",
        ssh_public_key: str | None = None,
        eviction_policy: str = "Delete",
        os_disk_type: str = "StandardSSD_LRS",
        accelerated_networking: bool = False,
        retry: RetryPolicy | None = None,
        polling_interval: float = 5.0,
        request_timeout: float = 60.0,
        vm_sizes: Iterable[str] | None = None,
        identity: str | None = None,
        package_spec: str = "provisioner",
        pip_args: Iterable[str] = (),
        agent_preinstalled: bool = False,
    ) -> None:
        self.client = AzureClient(
            subscription_id=subscription_id,
            resource_group=resource_group,
            location=location,
            locations=locations,
            regions=regions,
            subnet_id=subnet_id,
            endpoint=endpoint,
            credentials=credentials,
            prices_endpoint=prices_endpoint,
            image=image,
            admin_username=admin_username,
            ssh_public_key=ssh_public_key,
            eviction_policy=eviction_policy,
            os_disk_type=os_disk_type,
            accelerated_networking=accelerated_networking,
            retry=retry,
            polling_interval=polling_interval,
            request_timeout=request_timeout,
            vm_sizes=vm_sizes,
            identity=identity,
            package_spec=package_spec,
            pip_args=pip_args,
            agent_preinstalled=agent_preinstalled,
        )
        self.pricing = AzureOffers(self.client)
        self.instances = AzureInstances(self.client, self.pricing)
        self.held = AzureReservations(self.client)
        self.launcher = AzureLaunch(self.client, self.instances, self.held)
        self.placement = AzurePlacement(self.client)
        self.commitments = AzureCommitments(self.client, self.pricing)
        self.gpu_quotas = AzureQuotas(self.client)
        self.zone_priors = AzurePriors(self.client)

    @property
    def locations(self) -> builtins.list[str]:
        """The regions offers and prices cover (the first is where a launch without one goes)."""
        return self.client.locations

    def account_id(self) -> str | None:
        """The subscription launches are billed to."""
        return str(self.client.subscription_id) if self.client.subscription_id else None

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
        self.zone_priors.close()
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

    # -- Quotas, Priors, HeldCapacity, Commitments ------------------------------------------

    def quotas(self, regions: Iterable[str] | None = None) -> builtins.list[Quota]:
        return self.gpu_quotas.quotas(regions)

    def priors(
        self, regions: Iterable[str] | None = None, instance_types: Iterable[str] = ()
    ) -> builtins.list[ZonePrior]:
        return self.zone_priors.priors(regions, instance_types)

    def reservations(self, regions: Iterable[str] | None = None) -> builtins.list[Reservation]:
        return self.held.reservations(regions)

    def commitment_prices(
        self, regions: Iterable[str] | None = None
    ) -> builtins.list[CommitmentQuote]:
        return self.commitments.commitment_prices(regions)
