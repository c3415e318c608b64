"""Alibaba ECS instances: the list, launch, terminate, and the preemption the cloud reports.

- ``DescribeInstances`` rows become :class:`Instance`; a spot instance carrying
  ``OperationLocks.LockReason == "Recycling"`` (ECS takes it back, minutes before releasing it)
  reads PREEMPTED, on every answer while the lock stands. Interruptions ask for exactly those
  (``LockReason=Recycling``).
- ``RunInstances``: ``InstanceChargeType=PostPaid``; spot with ``SpotWithPriceLimit`` and a
  ``SpotPriceLimit`` (``SpotAsPriceGo`` without a cap), ``SpotInterruptionBehavior=Terminate``;
  ``NoSpot`` for on-demand; ``ClientToken``, ``Tag.N``, ``Amount=1``; ``RamRoleName`` (the
  ``ram_role`` option: the instance RAM role the agent reads KMS secrets with)
  https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-runinstances
- ``DeleteInstances`` with ``Force=true``, up to 100 ids a call.
- A gang's node goes into its deployment set (``DeploymentSetId``; :mod:`.placement`).
- A reserved launch goes into its capacity reservation's private pool
  (``PrivatePoolOptions.MatchCriteria=Target``, ``PrivatePoolOptions.Id``;
  :mod:`.reservations`).
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any, Unpack

from providers._common import first_address
from providers._placement import group_in
from providers._regional import RegionalInstances, RegionalOptions, refuse_unknown
from providers.alibaba.client import AlibabaClient, nested, parse_time
from providers.alibaba.errors import NAME
from providers.alibaba.offers import AlibabaPricing
from providers.alibaba.placement import AlibabaPlacement
from providers.alibaba.priors import AlibabaPriors
from providers.alibaba.quotas import AlibabaQuotas
from providers.alibaba.reservations import AlibabaReservations, private_pool
from providers.base import PriceQuote, Provider
from providers.capabilities import PlacementGroup
from provisioner.core.models import (
    TAG_MANAGED,
    Instance,
    InstanceState,
    Interruption,
    LaunchRequest,
    Market,
    Offer,
    Reservation,
)
from provisioner.core.quotas import Quota
from provisioner.core.zone_priors import ZonePrior

RECYCLING = "Recycling"
SPOT_STRATEGIES = frozenset({"SpotWithPriceLimit", "SpotAsPriceGo"})
STATES: dict[str, InstanceState] = {
    "Pending": InstanceState.PENDING,
    "Starting": InstanceState.PENDING,
    "Running": InstanceState.RUNNING,
    "Stopping": InstanceState.STOPPING,
    "Stopped": InstanceState.STOPPING,
}  # Deleted, Released, anything unknown: TERMINATED


class AlibabaInstances(RegionalInstances):
    """The ECS instance operations (:class:`providers._regional.RegionalInstances`' hooks); a
    capped spot launch's price limit in the account's currency from ``pricing``."""

    client: AlibabaClient

    def __init__(self, client: AlibabaClient, pricing: AlibabaPricing) -> None:
        super().__init__(client)
        self.pricing = pricing

    def _instance(self, raw: Mapping[str, Any], region: str) -> Instance:
        iid = str(raw.get("InstanceId", ""))
        status = str(raw.get("Status", ""))
        locks = [
            str(lock.get("LockReason", "")) for lock in nested(raw, "OperationLocks", "LockReason")
        ]
        market = Market.SPOT if raw.get("SpotStrategy") in SPOT_STRATEGIES else Market.ON_DEMAND
        held = raw.get("EcsCapacityReservationAttr") or {}
        if market is Market.ON_DEMAND and held.get("CapacityReservationId"):
            market = Market.RESERVED  # in a capacity reservation's private pool
        # the Recycling lock is the reclaim notice: the instance runs on (its job checkpoints)
        # until ECS releases it minutes later (then it is in no list: the control loop reads
        # a spot attempt's instance gone as preempted); interruptions() reports the notice
        state = STATES.get(status, InstanceState.TERMINATED)
        tags = {
            str(t.get("TagKey")): str(t.get("TagValue", ""))
            for t in nested(raw, "Tags", "Tag")
            if t.get("TagKey") is not None
        }
        public = nested(raw, "PublicIpAddress", "IpAddress") or [
            ip for ip in [(raw.get("EipAddress") or {}).get("IpAddress")] if ip
        ]
        private = nested(raw, "VpcAttributes", "PrivateIpAddress", "IpAddress") or nested(
            raw, "InnerIpAddress", "IpAddress"
        )
        limit = raw.get("SpotPriceLimit")
        region = str(raw.get("RegionId") or region)
        self._region_of[iid] = region
        return Instance(
            id=iid,
            provider=NAME,
            region=region,
            zone=str(raw.get("ZoneId", "")),
            instance_type=str(raw.get("InstanceType", "")),
            market=market,
            state=state,
            raw_state=status,
            state_reason=",".join(lock for lock in locks if lock),
            tags=tags,
            launched_at=parse_time(raw.get("StartTime") or raw.get("CreationTime")),
            price_per_hour=self.client.account.to_usd(float(limit))
            if market is Market.SPOT and limit
            else None,
            public_ip=first_address(public),
            private_ip=first_address(private),
        )

    def _describe(
        self,
        region: str,
        *,
        ids: Sequence[str] = (),
        tags: Mapping[str, str] | None = None,
        lock_reason: str | None = None,
    ) -> builtins.list[Instance]:
        models = self.client.models()
        client = self.client.ecs(region)
        wanted = dict(tags or {})
        out: builtins.list[Instance] = []
        token: str | None = None
        while True:
            req = models.DescribeInstancesRequest(
                region_id=region,
                max_results=self.client.page,
                next_token=token,
                instance_ids=json.dumps(builtins.list(ids)) if ids else None,
                lock_reason=lock_reason,
            )
            if wanted:
                req.tag = [
                    models.DescribeInstancesRequestTag(key=k, value=v) for k, v in wanted.items()
                ]
            body = self.client.body(
                self.client.call("DescribeInstances", partial(client.describe_instances, req))
            )
            for raw in nested(body, "Instances", "Instance"):
                inst = self._instance(raw, region)
                if all(inst.tags.get(k) == v for k, v in wanted.items()):
                    out.append(inst)
            token = body.get("NextToken") or None
            if not token:
                return out

    def _spot_candidates(self, region: str) -> builtins.list[Instance]:
        return self._describe(region, tags={TAG_MANAGED: "true"}, lock_reason=RECYCLING)

    def _preemption_raw(self, inst: Instance) -> str:
        return f"OperationLocks.LockReason={RECYCLING}"

    def _reclaim_kind(self, inst: Instance) -> str | None:
        if inst.market is not Market.SPOT:
            return None
        if inst.state.alive and RECYCLING in inst.state_reason.split(","):
            return "notice"  # locked, still running: released minutes later
        return "preempted" if inst.state is InstanceState.PREEMPTED else None

    def _run(self, region: str, request: LaunchRequest, image: str, tags: dict[str, str]) -> str:
        offer = request.offer
        pool = private_pool(request)  # a reserved launch: refused here when it does not fit
        models = self.client.models()
        req = models.RunInstancesRequest(
            region_id=region,
            zone_id=offer.zone or None,
            instance_type=offer.instance_type,
            image_id=image,
            instance_name=request.name,
            client_token=request.token,
            amount=1,
            instance_charge_type="PostPaid",
            tag=[models.RunInstancesRequestTag(key=k, value=v) for k, v in tags.items()],
            security_group_id=self.client.security_group_id,
            v_switch_id=self.client.vswitch_ids.get(offer.zone) or self.client.vswitch_id,
            key_pair_name=request.ssh_key_name or self.client.key_pair_name,
            system_disk=models.RunInstancesRequestSystemDisk(
                size=str(request.disk_gb), category=self.client.system_disk_category
            ),
        )
        user_data = self._user_data_b64(request)
        if user_data:
            req.user_data = user_data
        if self.client.ram_role:
            req.ram_role_name = self.client.ram_role
        group = group_in(request.placement_group, region, NAME)
        if group:  # a gang's node: into its deployment set
            req.deployment_set_id = group
        if request.market is Market.SPOT:
            req.spot_interruption_behavior = "Terminate"
            if request.bid_cap_per_hour is not None and request.cap_on_wire:
                req.spot_strategy = "SpotWithPriceLimit"
                req.spot_price_limit = self.pricing.spot_price_limit(
                    request.bid_cap_per_hour, region, offer
                )
            else:
                req.spot_strategy = "SpotAsPriceGo"
        else:
            req.spot_strategy = "NoSpot"
        if pool is not None:  # into the capacity reservation's private pool
            req.private_pool_options = models.RunInstancesRequestPrivatePoolOptions(
                match_criteria=pool[0], id=pool[1]
            )
        client = self.client.ecs(region)
        body = self.client.body(self.client.call("RunInstances", lambda: client.run_instances(req)))
        ids = nested(body, "InstanceIdSets", "InstanceIdSet")
        if not ids:
            raise self._no_instance_id(body)
        return str(ids[0])

    def _terminate_call(self, region: str, ids: Sequence[str]) -> None:
        models = self.client.models()
        client = self.client.ecs(region)
        req = models.DeleteInstancesRequest(region_id=region, instance_id=list(ids), force=True)
        self.client.call("DeleteInstances", lambda: client.delete_instances(req))


class AlibabaProvider(Provider):
    """Alibaba Cloud ECS spot and pay-as-you-go instances.

    The parts, each given the one :class:`~providers.alibaba.client.AlibabaClient` (options,
    credentials, one SDK client per region) it works through: ``pricing`` (GPU types in stock
    and spot/pay-as-you-go prices, :mod:`providers.alibaba.offers`), ``instances`` (launch,
    get, list, terminate, interruptions), ``placement`` (deployment sets), ``held``
    (capacity reservations' private pools), ``gpu_quotas`` and ``zone_priors``
    (``DescribeSpotAdvice``). Its optional capabilities (:mod:`providers.capabilities`) are
    the methods below.
    """

    name = NAME

    def __init__(
        self,
        *,
        credentials: Mapping[str, str] | tuple[str, str] | None = None,
        vswitch_id: str | None = None,
        vswitch_ids: Mapping[str, str] | None = None,
        security_group_id: str | None = None,
        key_pair_name: str | None = None,
        instance_types: Iterable[str] | None = None,
        system_disk_category: str | None = None,
        ram_role: str | None = None,
        connect_timeout_ms: int = 5000,
        read_timeout_ms: int = 30000,
        **options: Unpack[RegionalOptions],
    ) -> None:
        refuse_unknown(options, type(self).__name__)
        self.client = AlibabaClient(
            credentials=credentials,
            vswitch_id=vswitch_id,
            vswitch_ids=vswitch_ids,
            security_group_id=security_group_id,
            key_pair_name=key_pair_name,
            instance_types=instance_types,
            system_disk_category=system_disk_category,
            ram_role=ram_role,
            connect_timeout_ms=connect_timeout_ms,
            read_timeout_ms=read_timeout_ms,
            **options,
        )
        self.pricing = AlibabaPricing(self.client)
        self.instances = AlibabaInstances(self.client, self.pricing)
        self.placement = AlibabaPlacement(self.client)
        self.held = AlibabaReservations(self.client)
        self.gpu_quotas = AlibabaQuotas(self.client)
        self.zone_priors = AlibabaPriors(self.client)

    def __repr__(self) -> str:  # never the credentials
        return f"{type(self).__name__}(regions={self.regions!r}, endpoint={self.client.endpoint!r})"

    @property
    def regions(self) -> builtins.list[str]:
        """The regions listed and launched in."""
        return self.client.regions

    @property
    def currency(self) -> str | None:
        """The account's currency: as the price answers report it, else as configured."""
        return self.client.currency

    def account_billing(self) -> dict[str, Any]:
        return self.client.account.billing()

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

    # -- Quotas, Priors, HeldCapacity -------------------------------------------------------

    def quotas(self, regions: Iterable[str] | None = None) -> builtins.list[Quota]:
        return self.gpu_quotas.quotas(regions)

    def priors(
        self, regions: Iterable[str] | None = None, instance_types: Iterable[str] = ()
    ) -> builtins.list[ZonePrior]:
        return self.zone_priors.priors(regions, instance_types)

    def reservations(self, regions: Iterable[str] | None = None) -> builtins.list[Reservation]:
        return self.held.reservations(regions)
