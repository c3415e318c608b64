"""AWS instances: launch (``RunInstances``), describe by tag, get, terminate, interruptions.

Launch is ``RunInstances`` with ``InstanceMarketOptions`` (spot, one-time, terminate on
interruption, ``MaxPrice`` as a decimal string rounded toward the cap), the job's tags on the
instance and its volumes, ``ClientToken`` from (job, attempt), and IMDSv2 required. Before
launching, the adapter looks for its own instance by the job/attempt tags: EC2 honours
``ClientToken`` but moto does not, and the tag lookup is what the reconciler relies on anyway.
A spot interruption shows as ``StateReason.Code`` ``Server.SpotInstanceTermination``.
A reserved launch (``Market.RESERVED``) targets its capacity reservation or capacity block
(:func:`providers.aws.reservations.capacity_target`) and sends no spot option; an instance
EC2 describes with a ``CapacityReservationId`` (or the ``capacity-block`` lifecycle) reads as
reserved.

A gang's node (issue 10) is found by its node tag as well, goes into the gang's placement group
(``Placement.GroupName`` beside the zone), and with ``fabric="efa"`` gets an EFA interface
(``NetworkInterfaces`` with ``InterfaceType=efa`` at device index 0, carrying the subnet and
security groups, which may then not be given beside it).
"""

from __future__ import annotations

import builtins
import functools
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from providers._common import (
    cap_str,
    normalise_state,
    now_utc,
    offer_for,
    unless_gone,
    utc,
    wanted_tags,
)
from providers.aws.client import AWSClient, EC2Client
from providers.aws.offers import AWSOffers
from providers.aws.reservations import capacity_target
from providers.base import ErrorKind, ProviderError
from providers.bootstrap import user_data_for
from provisioner.core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_NODE,
    Instance,
    InstanceState,
    Interruption,
    LaunchRequest,
    Market,
)

log = logging.getLogger("provisioner.providers.aws")

STATES: dict[str, InstanceState] = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPING,
    "shutting-down": InstanceState.STOPPING,
    "terminated": InstanceState.TERMINATED,
}
#: ``StateReason.Code`` values meaning EC2 took the spot capacity back
SPOT_REASONS = ("Server.SpotInstanceTermination", "Server.SpotInstanceShutdown")
NOT_TERMINATED = ["pending", "running", "stopping", "stopped", "shutting-down"]

#: Deep Learning Base AMI (Ubuntu 22.04, NVIDIA driver), resolved by EC2 at launch
DEFAULT_IMAGE = (
    "resolve:ssm:/aws/service/deeplearning/ami/x86_64/"
    "base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
)
DEFAULT_IMAGE_ROOT_DEVICE = "/dev/sda1"

#: decimals of ``SpotOptions.MaxPrice`` (EC2 quotes spot prices to 4 places)
PRICE_DECIMALS = 4

#: EC2's floor for ``MaxPrice``: "it must be more than USD $0.001. Specifying a value below
#: USD $0.001 will result in an InvalidParameterValue error" (EC2 API reference,
#: LaunchTemplateSpotMarketOptions / SpotMarketOptions); a cap at or under it is refused
#: locally (exactly $0.001 is not "more than")
MIN_MAX_PRICE = Decimal("0.001")

_WHEN = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")


def max_price(cap: float) -> str:
    """``SpotOptions.MaxPrice`` for a bid cap, rounded toward the cap ("0.51237" goes out as
    "0.5123", never "0.5124"); a cap under EC2's minimum is refused here, as price-too-low (the
    next offer is tried), instead of failing the whole pass as InvalidParameterValue."""
    text = cap_str(cap, PRICE_DECIMALS)
    if Decimal(text) <= MIN_MAX_PRICE:
        raise ProviderError(
            ErrorKind.PRICE_TOO_LOW,
            "BidCapBelowMinimum",
            f"bid cap {cap!r} USD/h is below the cloud's minimum: EC2 takes a MaxPrice only "
            f"above {MIN_MAX_PRICE} USD/h",
            provider="aws",
        )
    return text


def efa_interfaces(cards: int, efa: int) -> list[dict[str, Any]]:
    """The network interfaces of a node with EFA: one per EFA the type supports, each on its
    own network card (EC2 User Guide, "Maximize network bandwidth on Amazon EC2 instances with
    multiple network cards"). The primary (card 0, device 0) is an ``efa`` interface (EFA with
    ENA: the node's IP traffic); the others are ``efa-only`` on cards 1, 2, ... at device 1.
    Where the type has more cards than EFAs (p6-b300: 17 cards, 16 EFAs) the primary is a
    plain ``interface`` and the EFAs take the cards after it."""
    first: dict[str, Any] = {"DeviceIndex": 0, "DeleteOnTermination": True}
    if cards > efa:
        first["InterfaceType"] = "interface"
        start = 1
    else:
        first["InterfaceType"] = "efa"
        start, efa = 1, efa - 1
    first["NetworkCardIndex"] = 0
    out = [first]
    for card in range(start, start + efa):
        out.append(
            {
                "NetworkCardIndex": card,
                "DeviceIndex": 1,
                "InterfaceType": "efa-only",
                "DeleteOnTermination": True,
            }
        )
    return out


class AWSInstances:
    """The instance operations of the AWS adapter (a spot launch without a cap on the wire
    reads the price in effect now from ``offers``)."""

    def __init__(self, client: AWSClient, offers: AWSOffers) -> None:
        self.client = client
        self.offers = offers
        self._region_of: dict[str, str] = {}  # instance id -> the region it was seen in
        self._root_device: dict[tuple[str, str], str | None] = {}
        self._efa: dict[tuple[str, str], tuple[int, int]] = {}  # (cards, EFA interfaces)

    def launch(self, request: LaunchRequest) -> Instance:
        offer = offer_for(request, "aws")
        region = offer.region or self.client.region
        mine = self._describe(
            region,
            [
                *(_tag_filter(k, v) for k, v in _own_tags(request).items()),
                {"Name": "instance-state-name", "Values": NOT_TERMINATED},
            ],
        )
        if mine:
            log.info("aws: %s already has instance %s", request.token, mine[0].id)
            return mine[0]
        params = self._run_params(request, region)
        self._price_under_cap(request, region)
        response = self.client.call(region, "RunInstances", lambda ec2: ec2.run_instances(**params))
        instance = self._instance(response["Instances"][0], region)
        if not instance.tags:  # EC2 may answer before the tags are visible
            instance = replace(instance, tags=dict(request.tags))
        log.info(
            "aws: launched %s (%s, %s) for %s",
            instance.id,
            offer.instance_type,
            request.market.value,
            request.token,
        )
        return instance

    def _price_under_cap(self, request: LaunchRequest, region: str) -> None:
        """With no MaxPrice on the wire (``bid_cap.enforce: daemon``), the price in effect now
        is read and a spot launch above the cap is refused before it is sent (the plan's price
        may be minutes old)."""
        cap = request.bid_cap_per_hour
        if request.market is not Market.SPOT or cap is None or request.cap_on_wire:
            return
        key = (region, request.offer.zone, request.offer.instance_type)
        price = self.offers.spot_prices_now([key]).get(key)
        if price is not None and price > cap + 1e-9:
            raise ProviderError(
                ErrorKind.PRICE_TOO_LOW,
                "PriceAboveCap",
                f"the spot price of {key[2]} in {key[1]} is {price} USD/h now, above the bid "
                f"cap {cap:.5f} (no maximum price is sent under bid_cap.enforce: daemon)",
                provider="aws",
            )

    def _run_params(self, request: LaunchRequest, region: str) -> dict[str, Any]:
        offer = request.offer
        tags = {"Name": request.name, **request.tags}
        tag_list = [{"Key": k, "Value": v} for k, v in tags.items()]
        image = request.image or self.client.image or DEFAULT_IMAGE
        params: dict[str, Any] = {
            "ImageId": image,
            "InstanceType": offer.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": request.token,
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tag_list},
                {"ResourceType": "volume", "Tags": tag_list},
            ],
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
        }
        user_data = user_data_for(
            request,
            "aws",
            package_spec=self.client.package_spec,
            pip_args=self.client.pip_args,
            agent_preinstalled=self.client.agent_preinstalled,
        )
        if user_data:
            params["UserData"] = user_data  # boto3 base64-encodes it
        placement: dict[str, str] = {}
        if offer.zone:
            placement["AvailabilityZone"] = offer.zone
        if request.placement_group:
            placement["GroupName"] = _group_in(request.placement_group, region)
        if placement:
            params["Placement"] = placement
        subnet = self.client.subnets.get(offer.zone) or self.client.subnet
        if request.fabric == "efa":
            # EC2 takes the subnet and security groups inside the interface when one is given
            # (with SubnetId or SecurityGroupIds beside it: InvalidParameterCombination)
            nics = efa_interfaces(*self._efa_cards(region, offer.instance_type))
            for nic in nics:
                if subnet:
                    nic["SubnetId"] = subnet
                if self.client.security_groups:
                    nic["Groups"] = list(self.client.security_groups)
            params["NetworkInterfaces"] = nics
        else:
            if subnet:
                params["SubnetId"] = subnet
            if self.client.security_groups:
                params["SecurityGroupIds"] = self.client.security_groups
        key_name = request.ssh_key_name or self.client.key_name
        if key_name:
            params["KeyName"] = key_name
        if self.client.instance_profile:
            # IamInstanceProfileSpecification: Arn or Name (the VM's role, for the bucket and
            # the secrets): https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_RunInstances.html
            key = "Arn" if self.client.instance_profile.startswith("arn:") else "Name"
            params["IamInstanceProfile"] = {key: self.client.instance_profile}
        root = self._root_device_of(region, image)
        if root:
            params["BlockDeviceMappings"] = [
                {
                    "DeviceName": root,
                    "Ebs": {
                        "VolumeSize": request.disk_gb,
                        "VolumeType": "gp3",
                        "DeleteOnTermination": True,
                    },
                }
            ]
        # a reserved launch names its reservation (and a block's market), never a spot option
        params.update(capacity_target(request, region))
        if request.market is Market.SPOT:
            spot: dict[str, str] = {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            }
            if request.bid_cap_per_hour is not None and request.cap_on_wire:
                spot["MaxPrice"] = max_price(request.bid_cap_per_hour)
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
        return params

    def _efa_cards(self, region: str, instance_type: str) -> tuple[int, int]:
        """(network cards, EFA interfaces) of an instance type, from ``DescribeInstanceTypes``
        (``NetworkInfo.MaximumNetworkCards``, ``EfaInfo.MaximumEfaInterfaces``), asked once
        per type; (1, 1) where EC2 does not say."""
        key = (region, instance_type)
        if key not in self._efa:
            types = self.client.call(
                region,
                "DescribeInstanceTypes",
                lambda ec2: ec2.describe_instance_types(InstanceTypes=[instance_type]),
            ).get("InstanceTypes", [])
            info = types[0].get("NetworkInfo", {}) if types else {}
            cards = int(info.get("MaximumNetworkCards") or 1)
            efa = int((info.get("EfaInfo") or {}).get("MaximumEfaInterfaces") or 1)
            self._efa[key] = (max(cards, 1), max(min(efa, cards), 1))
        return self._efa[key]

    def _root_device_of(self, region: str, image: str) -> str | None:
        """The image's root device name (to size the root volume); None where unknown."""
        if image == DEFAULT_IMAGE:
            return DEFAULT_IMAGE_ROOT_DEVICE
        if not image.startswith("ami-"):
            return None
        key = (region, image)
        if key not in self._root_device:
            images = self.client.call(
                region, "DescribeImages", lambda ec2: ec2.describe_images(ImageIds=[image])
            )["Images"]
            self._root_device[key] = images[0].get("RootDeviceName") if images else None
        return self._root_device[key]

    # -- describe -------------------------------------------------------------------------------

    def _describe_raw(
        self,
        region: str,
        filters: builtins.list[dict[str, Any]] | None = None,
        ids: builtins.list[str] | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """``DescribeInstances`` (every page) as EC2's own instance dicts."""
        kwargs: dict[str, Any] = {}
        if filters:
            kwargs["Filters"] = filters
        if ids:
            kwargs["InstanceIds"] = ids

        def fetch(ec2: EC2Client) -> builtins.list[dict[str, Any]]:
            found: builtins.list[dict[str, Any]] = []
            for page in ec2.get_paginator("describe_instances").paginate(
                **self.client.pages(**kwargs)
            ):
                for reservation in page["Reservations"]:
                    found.extend(reservation["Instances"])
            return found

        return self.client.call(region, "DescribeInstances", fetch)

    def _describe(
        self,
        region: str,
        filters: builtins.list[dict[str, Any]] | None = None,
        ids: builtins.list[str] | None = None,
    ) -> builtins.list[Instance]:
        return [self._instance(d, region) for d in self._describe_raw(region, filters, ids)]

    def _instance(self, d: Mapping[str, Any], region: str) -> Instance:
        reason = d.get("StateReason") or {}
        reason_code = reason.get("Code") or ""
        raw_state = d.get("State", {}).get("Name", "")
        preempted = reason_code in SPOT_REASONS
        spot = d.get("InstanceLifecycle") == "spot" or bool(d.get("SpotInstanceRequestId"))
        reserved = d.get("InstanceLifecycle") == "capacity-block" or bool(
            (d.get("CapacityReservationId") or "").strip()
        )
        market = Market.SPOT if spot else Market.RESERVED if reserved else Market.ON_DEMAND
        self._region_of[d["InstanceId"]] = region
        return Instance(
            id=d["InstanceId"],
            provider="aws",
            region=region,
            zone=d.get("Placement", {}).get("AvailabilityZone", ""),
            instance_type=d.get("InstanceType", ""),
            market=market,
            state=normalise_state(raw_state, STATES, preempted=preempted),
            raw_state=raw_state,
            state_reason=reason_code or reason.get("Message", ""),
            tags={t["Key"]: t["Value"] for t in d.get("Tags", [])},
            launched_at=utc(d["LaunchTime"]) if d.get("LaunchTime") else None,
            public_ip=d.get("PublicIpAddress"),
            private_ip=d.get("PrivateIpAddress"),
        )

    def get(self, instance_id: str) -> Instance:
        known = self._region_of.get(instance_id)
        regions = [known] if known else []
        regions += [r for r in self.client.regions if r != known]
        for region in regions:
            found = unless_gone(functools.partial(self._describe, region, ids=[instance_id]))
            if found:
                return found[0]
        raise ProviderError(
            ErrorKind.NOT_FOUND,
            "InvalidInstanceID.NotFound",
            f"no instance {instance_id} in {', '.join(self.client.regions)}",
            provider="aws",
        )

    def list(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        """Instances carrying ``tags`` that are not terminated, in every configured region."""
        filters = [_tag_filter(k, v) for k, v in wanted_tags(tags).items()]
        filters.append({"Name": "instance-state-name", "Values": NOT_TERMINATED})
        out: list[Instance] = []
        for region in self.client.regions:
            out.extend(self._describe(region, filters))
        return out

    # -- terminate ------------------------------------------------------------------------------

    def terminate(self, instance_ids: Iterable[str]) -> None:
        by_region: dict[str, list[str]] = {}
        unknown: list[str] = []
        for iid in dict.fromkeys(instance_ids):
            region = self._region_of.get(iid) or (
                self.client.region if len(self.client.regions) == 1 else None
            )
            if region:
                by_region.setdefault(region, []).append(iid)
            else:
                unknown.append(iid)
        for region, ids in by_region.items():
            self._terminate_in(region, ids)
        for iid in unknown:
            for region in self.client.regions:
                if self._terminate_in(region, [iid]):
                    break

    def _terminate_in(self, region: str, ids: builtins.list[str]) -> builtins.list[str]:
        """Terminate ``ids`` in ``region``; the ids EC2 knew there (unknown ones are skipped)."""
        try:
            self.client.call(
                region, "TerminateInstances", lambda ec2: ec2.terminate_instances(InstanceIds=ids)
            )
            return ids
        except ProviderError as err:
            if err.kind is not ErrorKind.NOT_FOUND:
                raise
        if len(ids) == 1:
            return []
        done: builtins.list[str] = []
        for iid in ids:  # one unknown id fails the whole batch: go one by one
            done.extend(self._terminate_in(region, [iid]))
        return done

    # -- interruptions ----------------------------------------------------------------------------

    def interruptions(self, since: datetime) -> builtins.list[Interruption]:
        """Managed instances EC2 terminated (or stopped) to take spot capacity back.

        The time is read from ``StateTransitionReason`` (``... (2024-05-01 12:00:00 GMT)``);
        where EC2 gives none the interruption is reported at the time it is observed, so a
        caller sees it again on the next call and should de-duplicate by instance id.
        """
        since = utc(since)
        filters = [_tag_filter(k, v) for k, v in wanted_tags(None).items()] + [
            {"Name": "state-reason-code", "Values": list(SPOT_REASONS)}
        ]
        out: list[Interruption] = []
        for region in self.client.regions:
            for d in self._describe_raw(region, filters):
                reason = d.get("StateReason") or {}
                if reason.get("Code") not in SPOT_REASONS:
                    continue
                at = _transition_time(d.get("StateTransitionReason", "")) or now_utc()
                if at < since:
                    continue
                out.append(
                    Interruption(
                        instance_id=d["InstanceId"],
                        provider="aws",
                        zone=d.get("Placement", {}).get("AvailabilityZone", ""),
                        kind="preempted",
                        at=at,
                        raw=f"{reason.get('Code', '')}: {reason.get('Message', '')}",
                    )
                )
        return out


def _own_tags(request: LaunchRequest) -> dict[str, str]:
    """The tags that find this launch's own instance: job and attempt, and a gang's node."""
    keys = (TAG_JOB, TAG_ATTEMPT, TAG_NODE) if request.nodes > 1 else (TAG_JOB, TAG_ATTEMPT)
    return {k: request.tags[k] for k in keys}


def _group_in(gid: str, region: str) -> str:
    """The name of placement group ``gid`` (``<region>/<name>``), refused where it is in
    another region than the launch (EC2 names groups per region)."""
    where, _, name = gid.rpartition("/")
    if where and where != region:
        raise ProviderError(
            ErrorKind.INVALID,
            "PlacementGroupRegion",
            f"placement group {name} is in {where}, the launch in {region}",
            provider="aws",
        )
    return name


def _tag_filter(key: str, value: str) -> dict[str, Any]:
    return {"Name": f"tag:{key}", "Values": [value]}


def _transition_time(reason: str) -> datetime | None:
    m = _WHEN.search(reason or "")
    if not m:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
