"""The AWS adapter: :class:`AWSProvider` holds its parts as fields and delegates to them."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from datetime import datetime

from providers.aws.client import ON_DEMAND_TTL_S, PRICING_REGION, AWSClient
from providers.aws.commitments import AWSCommitments
from providers.aws.instances import AWSInstances
from providers.aws.offers import AWSOffers
from providers.aws.placement import AWSPlacement
from providers.aws.priors import AWSPriors
from providers.aws.quotas import AWSQuotas
from providers.aws.reservations import AWSReservations
from providers.base import PriceQuote, Provider, RetryPolicy
from providers.capabilities import CapacityOffering, CommitmentQuote, PlacementGroup
from provisioner.core.models import Instance, Interruption, LaunchRequest, Offer, Reservation
from provisioner.core.quotas import Quota
from provisioner.core.zone_priors import ZonePrior


class AWSProvider(Provider):
    """EC2 in one or more regions.

    ``credentials``: a dict with ``aws_access_key_id``/``aws_secret_access_key``
    (/``aws_session_token``) or ``profile``; None uses boto3's default chain (environment,
    shared files, instance role). ``endpoint``: an EC2 endpoint URL (moto's server in tests).
    ``subnets`` maps a zone to the subnet to launch into there; ``subnet`` is used otherwise.
    ``instance_profile`` (name or ARN) gives the VM its identity for the checkpoint store.
    ``package_spec``/``pip_args``: how the bootstrap script installs provisioner on the VM
    when a request carries a ``job_spec`` and no ``user_data``; ``agent_preinstalled``: the
    image has it in ``/opt/provisioner/venv`` and nothing is installed.
    ``pricing_endpoint``: the Price List Query API's URL (a local server in tests); with a
    custom EC2 ``endpoint`` and none given, on-demand prices come from the catalog.
    ``on_demand_ttl_s``: how long fetched on-demand prices are kept.
    ``page_size``: ``MaxResults`` of the list calls (5 or more; None: the service's default).

    The parts, each given the one :class:`~providers.aws.client.AWSClient` (options, session,
    clients) it works through: ``offers`` (offers and live prices, :mod:`providers.aws.offers`),
    ``instances`` (launch, get, list, terminate, interruptions), ``placement`` (a gang's
    cluster placement group, :mod:`providers.aws.placement`), ``quotas`` (the GPU families'
    vCPU quotas from Service Quotas, :mod:`providers.aws.quotas`), ``priors`` (Spot placement
    scores and price volatility per zone, :mod:`providers.aws.priors`), ``held`` (the capacity
    reservations and capacity blocks the account holds, and buying Capacity Blocks,
    :mod:`providers.aws.reservations`; a reserved launch targets its reservation) and
    ``commitments`` (Reserved Instance prices, :mod:`providers.aws.commitments`). A launch
    with ``fabric="efa"`` asks for one EFA per network card, as many as the type takes.

    Its optional capabilities (:mod:`providers.capabilities`) are the methods below: live and
    current spot prices, its own offers, placement groups, quotas, priors, held and bookable
    capacity, commitment prices.
    """

    name = "aws"

    def __init__(
        self,
        region: str = "us-east-1",
        regions: Iterable[str] | None = None,
        endpoint: str | None = None,
        credentials: Mapping[str, str] | None = None,
        image: str | None = None,
        subnet: str | None = None,
        subnets: Mapping[str, str] | None = None,
        security_groups: Iterable[str] | None = None,
        instance_profile: str | None = None,
        key_name: str | None = None,
        retry: RetryPolicy | None = None,
        package_spec: str = "provisioner",
        pip_args: Iterable[str] = (),
        agent_preinstalled: bool = False,
        pricing_endpoint: str | None = None,
        pricing_region: str = PRICING_REGION,
        on_demand_ttl_s: float = ON_DEMAND_TTL_S,
        page_size: int | None = None,
    ) -> None:
        self.client = AWSClient(
            region=region,
            regions=regions,
            endpoint=endpoint,
            credentials=credentials,
            image=image,
            subnet=subnet,
            subnets=subnets,
            security_groups=security_groups,
            instance_profile=instance_profile,
            key_name=key_name,
            retry=retry,
            package_spec=package_spec,
            pip_args=pip_args,
            agent_preinstalled=agent_preinstalled,
            pricing_endpoint=pricing_endpoint,
            pricing_region=pricing_region,
            on_demand_ttl_s=on_demand_ttl_s,
            page_size=page_size,
        )
        self.pricing = AWSOffers(self.client)
        self.instances = AWSInstances(self.client, self.pricing)
        self.placement = AWSPlacement(self.client)
        self.held = AWSReservations(self.client, self.pricing)
        self.commitments = AWSCommitments(self.client, self.pricing)
        self.gpu_quotas = AWSQuotas(self.client, self.pricing)
        self.zone_priors = AWSPriors(self.client)

    @property
    def region(self) -> str:
        """The default region (launches without one, placement scores are asked there)."""
        return self.client.region

    @property
    def regions(self) -> builtins.list[str]:
        """The regions listed, priced and swept (the default region first)."""
        return self.client.regions

    # -- Provider ---------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> Instance:
        return self.instances.launch(request)

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

    # -- LivePrices, SpotPricesNow, ListsOffers ----------------------------------------------

    def offers(self, regions: Iterable[str] | None = None) -> builtins.list[Offer]:
        return self.pricing.offers(regions)

    def prices(self, regions: Iterable[str] | None = None) -> builtins.list[PriceQuote]:
        return self.pricing.prices(regions)

    def spot_prices_now(
        self, keys: Iterable[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], float]:
        return self.pricing.spot_prices_now(keys)

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

    # -- Quotas, Priors ---------------------------------------------------------------------

    def quotas(self, regions: Iterable[str] | None = None) -> builtins.list[Quota]:
        return self.gpu_quotas.quotas(regions)

    def priors(
        self, regions: Iterable[str] | None = None, instance_types: Iterable[str] = ()
    ) -> builtins.list[ZonePrior]:
        return self.zone_priors.priors(regions, instance_types)

    # -- HeldCapacity, BooksCapacity, Commitments -------------------------------------------

    def reservations(self, regions: Iterable[str] | None = None) -> builtins.list[Reservation]:
        return self.held.reservations(regions)

    def capacity_offerings(
        self,
        instance_type: str,
        count: int,
        hours: int,
        start_after: datetime | None = None,
        regions: Iterable[str] | None = None,
    ) -> builtins.list[CapacityOffering]:
        return self.held.capacity_offerings(instance_type, count, hours, start_after, regions)

    def book(self, offering: CapacityOffering) -> Reservation:
        return self.held.book(offering)

    def commitment_prices(
        self, regions: Iterable[str] | None = None
    ) -> builtins.list[CommitmentQuote]:
        return self.commitments.commitment_prices(regions)
