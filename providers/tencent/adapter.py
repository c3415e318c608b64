"""Tencent CVM instances: the list, launch, terminate, and the preemption the cloud reports.

- ``DescribeInstances`` rows become :class:`Instance`. A ``SPOTPAID`` instance that is going
  away (``SHUTDOWN``/``TERMINATING``) with nothing of ours behind it (``LatestOperation`` is not
  ``TerminateInstances``/``StopInstances``, ``IsolatedSource`` is not ``MANMADE``) reads
  PREEMPTED, from the row alone on every answer: a restarted daemon reads it the same.
  (Tencent documents the reclaim notice only through the VM's metadata; the API side is read
  from the instance's state.) Interruptions list the managed spot instances
  (``instance-charge-type`` filter).
- ``RunInstances``: ``SPOTPAID`` with ``InstanceMarketOptions {MarketType: spot, SpotOptions:
  {MaxPrice, SpotInstanceType: one-time}}`` (the on-demand price is the cap when none is
  given: Tencent requires one), or ``POSTPAID_BY_HOUR``; ``ClientToken``,
  ``TagSpecification``, ``Placement.Zone``, ``UserData`` (base64), ``CamRoleName`` (the
  ``cam_role`` option: the role the agent reads SSM secrets with); a gang's node names its
  placement group (``DisasterRecoverGroupIds``, :mod:`.placement`).
  https://www.tencentcloud.com/document/api/213/15730
- ``TerminateInstances``: the first call may move an instance to the recycle bin
  (``SHUTDOWN``), a second releases it; "already terminating/gone" is not an error.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Unpack

from providers._common import cap_decimal, first_address, has_tags
from providers._placement import group_in
from providers._regional import RegionalInstances, RegionalOptions, refuse_unknown
from providers.base import ErrorKind, PriceQuote, Provider, ProviderError
from providers.capabilities import PlacementGroup
from providers.tencent.client import POSTPAID, SPOTPAID, TencentClient, parse_time
from providers.tencent.errors import ALREADY_GONE, NAME
from providers.tencent.offers import PRICE_DECIMALS, TencentPricing, price_text
from providers.tencent.placement import TencentPlacement
from providers.tencent.quotas import TencentQuotas
from provisioner.core.models import (
    TAG_MANAGED,
    Instance,
    InstanceState,
    Interruption,
    LaunchRequest,
    Market,
    Offer,
)
from provisioner.core.quotas import Quota

MAX_FILTERS = 10
GOING_AWAY = frozenset({"SHUTDOWN", "TERMINATING"})
OUR_OPERATIONS = frozenset({"TerminateInstances", "StopInstances"})
STATES: dict[str, InstanceState] = {
    "PENDING": InstanceState.PENDING,
    "STARTING": InstanceState.PENDING,
    "RUNNING": InstanceState.RUNNING,
    "REBOOTING": InstanceState.RUNNING,
    "STOPPING": InstanceState.STOPPING,
    "STOPPED": InstanceState.STOPPING,
}  # LAUNCH_FAILED, SHUTDOWN (recycle bin), TERMINATING, anything unknown: TERMINATED


def reclaimed(raw: Mapping[str, Any]) -> bool:
    """A spot instance going away that no operation of ours (nor a manual return) explains."""
    return (
        raw.get("InstanceChargeType") == SPOTPAID
        and str(raw.get("InstanceState", "")) in GOING_AWAY
        and str(raw.get("LatestOperation") or "") not in OUR_OPERATIONS
        and str(raw.get("IsolatedSource") or "") != "MANMADE"
    )


class TencentInstances(RegionalInstances):
    """The CVM instance operations (:class:`providers._regional.RegionalInstances`' hooks)."""

    client: TencentClient
    pending_state = "PENDING"

    def __init__(self, client: TencentClient) -> None:
        super().__init__(client)

    def _instance(self, raw: Mapping[str, Any], region: str) -> Instance:
        iid = str(raw.get("InstanceId", ""))
        raw_state = str(raw.get("InstanceState", ""))
        operation = str(raw.get("LatestOperation") or "")
        state = STATES.get(raw_state, InstanceState.TERMINATED)
        if reclaimed(raw):
            state = InstanceState.PREEMPTED
            reason = f"spot instance reclaimed ({raw_state})"
        elif raw_state == "LAUNCH_FAILED":
            reason = str(raw.get("LatestOperationErrorMsg") or "LAUNCH_FAILED")
        elif operation:
            reason = f"{operation}:{raw.get('LatestOperationState') or ''}".rstrip(":")
        else:
            reason = ""
        placement = raw.get("Placement") or {}
        public = raw.get("PublicIpAddresses") or []
        private = raw.get("PrivateIpAddresses") or []
        self._region_of[iid] = region
        return Instance(
            id=iid,
            provider=NAME,
            region=region,
            zone=str(placement.get("Zone", "")),
            instance_type=str(raw.get("InstanceType", "")),
            market=Market.SPOT if raw.get("InstanceChargeType") == SPOTPAID else Market.ON_DEMAND,
            state=state,
            raw_state=raw_state,
            state_reason=reason,
            tags={
                str(t.get("Key")): str(t.get("Value", ""))
                for t in raw.get("Tags") or ()
                if t.get("Key") is not None
            },
            launched_at=parse_time(raw.get("CreatedTime")),
            public_ip=first_address(public),
            private_ip=first_address(private),
        )

    def _describe(
        self,
        region: str,
        *,
        ids: Sequence[str] = (),
        tags: Mapping[str, str] | None = None,
        extra: Sequence[Mapping[str, Any]] = (),
    ) -> builtins.list[Instance]:
        wanted = dict(tags or {})
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in wanted.items()]
        filters.extend(dict(f) for f in extra)
        out: builtins.list[Instance] = []
        offset = 0
        while True:
            params: dict[str, Any] = {"Offset": offset, "Limit": self.client.page}
            if ids:  # InstanceIds and Filters cannot be combined
                params["InstanceIds"] = builtins.list(ids)
            elif filters:
                params["Filters"] = filters[:MAX_FILTERS]
            body = self.client.request(region, "DescribeInstances", params)
            rows = body.get("InstanceSet") or []
            for raw in rows:
                inst = self._instance(raw, region)
                if has_tags(inst.tags, wanted):
                    out.append(inst)
            offset += len(rows)
            if not rows or offset >= int(body.get("TotalCount") or 0) or ids:
                return out

    def _spot_candidates(self, region: str) -> builtins.list[Instance]:
        spot = [{"Name": "instance-charge-type", "Values": [SPOTPAID]}]
        return self._describe(region, tags={TAG_MANAGED: "true"}, extra=spot)

    def _preemption_raw(self, inst: Instance) -> str:
        return f"InstanceState={inst.raw_state}"

    def _run(self, region: str, request: LaunchRequest, image: str, tags: dict[str, str]) -> str:
        offer = request.offer
        params: dict[str, Any] = {
            "Placement": {"Zone": offer.zone},
            "InstanceType": offer.instance_type,
            "ImageId": image,
            "InstanceCount": 1,
            "InstanceName": request.name,
            "ClientToken": request.token,
            "SystemDisk": {"DiskSize": request.disk_gb},
            "TagSpecification": [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
        }
        if self.client.system_disk_type:
            params["SystemDisk"]["DiskType"] = self.client.system_disk_type
        subnet = self.client.subnet_ids.get(offer.zone) or self.client.subnet_id
        if self.client.vpc_id and subnet:
            params["VirtualPrivateCloud"] = {"VpcId": self.client.vpc_id, "SubnetId": subnet}
        if self.client.security_group_ids:
            params["SecurityGroupIds"] = builtins.list(self.client.security_group_ids)
        keys = [request.ssh_key_name] if request.ssh_key_name else self.client.key_ids
        if keys:
            params["LoginSettings"] = {"KeyIds": builtins.list(keys)}
        user_data = self._user_data_b64(request)
        if user_data:
            params["UserData"] = user_data
        if self.client.cam_role:
            params["CamRoleName"] = self.client.cam_role
        group = group_in(request.placement_group, region, NAME)
        if group:  # a gang's node: into its placement group (placement.py)
            params["DisasterRecoverGroupIds"] = [group]
        if request.market is Market.SPOT:
            params["InstanceChargeType"] = SPOTPAID
            params["InstanceMarketOptions"] = self._spot_options(request)
        else:
            params["InstanceChargeType"] = POSTPAID
        body = self.client.request(region, "RunInstances", params)
        ids = body.get("InstanceIdSet") or []
        if not ids:
            raise self._no_instance_id(body)
        return str(ids[0])

    def _spot_options(self, request: LaunchRequest) -> dict[str, Any]:
        """``InstanceMarketOptions`` for a spot launch: the cap (else the on-demand price) as
        ``MaxPrice`` in the account's currency. Under ``bid_cap.enforce: daemon`` the on-demand
        price goes out (Tencent takes no spot launch without a MaxPrice) and the daemon holds
        the instance to the cap."""
        offer = request.offer
        sent = request.bid_cap_per_hour if request.cap_on_wire else None
        cap = sent if sent is not None else (offer.price or request.bid_cap_per_hour)
        if cap is None:
            raise ProviderError(
                ErrorKind.INVALID,
                "MissingMaxPrice",
                "Tencent spot needs a maximum price: give a bid cap or an on-demand price",
                provider=NAME,
            )
        _, rate = self.client.account.for_launch()
        if cap_decimal(cap, PRICE_DECIMALS, usd_per_unit=rate) <= 0:
            raise ProviderError(
                ErrorKind.PRICE_TOO_LOW,
                "BidCapBelowMinimum",
                f"the cap {cap!r} USD/h rounds to 0 at Tencent's 4 decimals",
                provider=NAME,
            )
        return {
            "MarketType": "spot",
            "SpotOptions": {"MaxPrice": price_text(cap, rate), "SpotInstanceType": "one-time"},
        }

    def _terminate_call(self, region: str, ids: Sequence[str]) -> None:
        self.client.request(region, "TerminateInstances", {"InstanceIds": builtins.list(ids)})

    def _already_gone(self, exc: ProviderError) -> bool:
        return exc.code in ALREADY_GONE or exc.kind is ErrorKind.NOT_FOUND


class TencentProvider(Provider):
    """Tencent Cloud CVM spot and pay-as-you-go instances.

    The parts, each given the one :class:`~providers.tencent.client.TencentClient` (options,
    credentials, one SDK client per region) it works through: ``pricing`` (what CVM sells,
    where, at what price, :mod:`providers.tencent.offers`), ``instances`` (launch, get, list,
    terminate, interruptions), ``placement`` (placement groups) and ``gpu_quotas``. Its
    optional capabilities (:mod:`providers.capabilities`) are the methods below.
    """

    name = NAME

    def __init__(
        self,
        *,
        credentials: Mapping[str, str] | tuple[str, str] | None = None,
        vpc_id: str | None = None,
        subnet_id: str | None = None,
        subnet_ids: Mapping[str, str] | None = None,
        security_group_ids: Sequence[str] | None = None,
        key_ids: Sequence[str] | None = None,
        instance_types: Iterable[str] | None = None,
        system_disk_type: str | None = None,
        cam_role: str | None = None,
        timeout_s: int = 30,
        **options: Unpack[RegionalOptions],
    ) -> None:
        refuse_unknown(options, type(self).__name__)
        self.client = TencentClient(
            credentials=credentials,
            vpc_id=vpc_id,
            subnet_id=subnet_id,
            subnet_ids=subnet_ids,
            security_group_ids=security_group_ids,
            key_ids=key_ids,
            instance_types=instance_types,
            system_disk_type=system_disk_type,
            cam_role=cam_role,
            timeout_s=timeout_s,
            **options,
        )
        self.pricing = TencentPricing(self.client)
        self.instances = TencentInstances(self.client)
        self.placement = TencentPlacement(self.client)
        self.gpu_quotas = TencentQuotas(self.client)

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

    # -- PlacementGroups, Quotas ------------------------------------------------------------

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

    def quotas(self, regions: Iterable[str] | None = None) -> builtins.list[Quota]:
        return self.gpu_quotas.quotas(regions)
