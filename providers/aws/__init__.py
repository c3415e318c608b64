"""AWS EC2 adapter (boto3, imported lazily: importing this module never imports boto3).

Launch is ``RunInstances`` with ``InstanceMarketOptions`` (spot, one-time, terminate on
interruption, ``MaxPrice`` as a decimal string), the job's tags on the instance and its
volumes, ``ClientToken`` from (job, attempt), and IMDSv2 required (the node agent reads the
spot notice through it). Before launching, the adapter looks for its own instance by the
job/attempt tags: EC2 honours ``ClientToken`` but moto does not, and the tag lookup is what the
reconciler relies on anyway.

Errors are classified by ``Error.Code`` (see ``ERRORS``), never by exception class or HTTP
status alone: EC2 sends ``InsufficientInstanceCapacity`` with a 500. botocore's own retries are
switched off so that :func:`providers.base.call_with_retries` is the one retry layer (bounded,
jittered, throttling and transient errors only).

Offers come from ``DescribeInstanceTypes`` (types with ``GpuInfo``), priced from the catalog
where it has the type; live spot prices from ``DescribeSpotPriceHistory``, live on-demand
prices from the Price List Query API (``pricing`` ``GetProducts``, ``ServiceCode=AmazonEC2``,
filtered by instance type, ``regionCode``, ``operatingSystem=Linux``, ``tenancy=Shared`` and
``capacitystatus=Used``; of the rows left, the one with no pre-installed software), one query
per GPU type, every page followed, cached ``on_demand_ttl_s`` (24 h: the list changes monthly)
and reported with the time it was fetched (``PriceQuote.on_demand_at``). Where the Pricing API
cannot be reached the catalog's on-demand price is used, and the quote says so
(``on_demand_at`` None). A spot interruption
shows as ``StateReason.Code`` ``Server.SpotInstanceTermination`` on the terminated instance.
"""

from __future__ import annotations

import builtins
import functools
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from providers._common import (
    ErrorTable,
    cap_str,
    normalise_state,
    now_utc,
    user_data_for,
    utc,
    wanted_tags,
)
from providers.base import (
    ErrorKind,
    PriceQuote,
    Provider,
    ProviderError,
    RetryPolicy,
    call_with_retries,
    register_secret,
)
from provisioner.core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    Instance,
    InstanceState,
    Interruption,
    LaunchRequest,
    Market,
    Offer,
)

EC2Client = Any  # botocore builds client classes at run time

log = logging.getLogger("provisioner.providers.aws")
T = TypeVar("T")

ERRORS = ErrorTable(
    "aws",
    {
        ErrorKind.CAPACITY: (
            "InsufficientInstanceCapacity",
            "InsufficientHostCapacity",
            "InsufficientCapacity",
            "MaxSpotInstanceCountExceeded",
            "Unsupported",
            # the subnet of that zone has no free IP address: another zone's subnet may
            "InsufficientFreeAddressesInSubnet",
        ),
        ErrorKind.PRICE_TOO_LOW: ("SpotMaxPriceTooLow",),
        ErrorKind.QUOTA: ("VcpuLimitExceeded", "InstanceLimitExceeded"),
        ErrorKind.AUTH: (
            "AuthFailure",
            "UnauthorizedOperation",
            "InvalidClientTokenId",
            "SignatureDoesNotMatch",
            "ExpiredToken",
            "OptInRequired",
        ),
        ErrorKind.NOT_FOUND: ("InvalidInstanceID.NotFound",),
        ErrorKind.THROTTLED: ("RequestLimitExceeded", "Throttling", "ThrottlingException"),
        ErrorKind.TRANSIENT: (
            "InternalError",
            "InternalFailure",
            "ServiceUnavailable",
            "Unavailable",
        ),
    },
)

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

#: the Price List Query API is served from a few regions only; us-east-1 is one
PRICING_REGION = "us-east-1"
#: how long fetched on-demand prices are used before they are fetched again
ON_DEMAND_TTL_S = 24 * 3600.0
#: the GetProducts filters besides instance type and region: Linux, shared tenancy, used
#: (not reserved-capacity) rows; rows with pre-installed software are left out when read
PRICING_FILTERS = (("operatingSystem", "Linux"), ("tenancy", "Shared"), ("capacitystatus", "Used"))


@dataclass(slots=True)
class _OnDemandCache:
    at: datetime
    prices: dict[str, float] = field(default_factory=dict)
    asked: set[str] = field(default_factory=set)


#: fetched on-demand prices by (pricing endpoint, region), kept for the process's life: the
#: daemon builds a provider for each price refresh, and the list changes monthly
_ON_DEMAND: dict[tuple[str | None, str], _OnDemandCache] = {}
_ON_DEMAND_LOCK = threading.Lock()


#: decimals of ``SpotOptions.MaxPrice`` (EC2 quotes spot prices to 4 places)
PRICE_DECIMALS = 4

_WHEN = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")


class AWSProvider(Provider):
    """EC2 in one or more regions.

    ``credentials``: a dict with ``aws_access_key_id``/``aws_secret_access_key``
    (/``aws_session_token``) or ``profile``; None uses boto3's default chain (environment,
    shared files, instance role). ``endpoint``: an EC2 endpoint URL (moto's server in tests).
    ``subnets`` maps a zone to the subnet to launch into there; ``subnet`` is used otherwise.
    ``instance_profile`` (name or ARN) gives the VM its identity for the checkpoint store.
    ``package_spec``/``pip_args``: how the bootstrap script installs provisioner on the VM
    when a request carries a ``job_spec`` and no ``user_data``.
    ``pricing_endpoint``: the Price List Query API's URL (a local server in tests); with a
    custom EC2 ``endpoint`` and none given, on-demand prices come from the catalog.
    ``on_demand_ttl_s``: how long fetched on-demand prices are kept.
    ``page_size``: ``MaxResults`` of the list calls (5 or more; None: the service's default).
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
        pricing_endpoint: str | None = None,
        pricing_region: str = PRICING_REGION,
        on_demand_ttl_s: float = ON_DEMAND_TTL_S,
        page_size: int | None = None,
    ) -> None:
        import boto3

        self.region = region
        self.regions: list[str] = list(dict.fromkeys([region, *(regions or ())]))
        self.endpoint = endpoint
        self.image = image
        self.subnet = subnet
        self.subnets = dict(subnets or {})
        self.security_groups = list(security_groups or ())
        self.instance_profile = instance_profile
        self.key_name = key_name
        self.retry = retry or RetryPolicy()
        self.package_spec = package_spec
        self.pip_args = list(pip_args)
        self.pricing_endpoint = pricing_endpoint
        self.pricing_region = pricing_region
        self.on_demand_ttl_s = on_demand_ttl_s
        self.page_size = page_size
        self._pricing: Any = None

        creds = dict(credentials or {})
        register_secret(creds.get("aws_secret_access_key"))
        register_secret(creds.get("aws_session_token"))
        profile = creds.pop("profile", None) or creds.pop("profile_name", None)
        self.session = boto3.Session(profile_name=profile, **creds)

        self._clients: dict[str, EC2Client] = {}
        self._lock = threading.Lock()
        self._region_of: dict[str, str] = {}
        self._gpu_types: dict[str, list[dict[str, Any]]] = {}
        self._root_device: dict[tuple[str, str], str | None] = {}

    # -- plumbing -------------------------------------------------------------------------

    def client(self, region: str | None = None) -> EC2Client:
        """The EC2 client for ``region`` (one per region, created on first use)."""
        region = region or self.region
        with self._lock:
            client = self._clients.get(region)
            if client is None:
                from botocore.config import Config

                config = Config(
                    retries={"total_max_attempts": 1, "mode": "standard"},
                    connect_timeout=10,
                    read_timeout=60,
                    user_agent_extra="provisioner",
                )
                client = self.session.client(
                    "ec2", region_name=region, endpoint_url=self.endpoint, config=config
                )
                self._clients[region] = client
            return client

    def pricing_client(self) -> Any:
        """The Price List Query API client (one, in ``pricing_region``); None where disabled."""
        if self.endpoint and not self.pricing_endpoint:
            return None  # a private EC2 endpoint (moto): the Pricing API is not there
        with self._lock:
            if self._pricing is None:
                from botocore.config import Config

                self._pricing = self.session.client(
                    "pricing",
                    region_name=self.pricing_region,
                    endpoint_url=self.pricing_endpoint,
                    config=Config(
                        retries={"total_max_attempts": 1, "mode": "standard"},
                        connect_timeout=10,
                        read_timeout=60,
                        user_agent_extra="provisioner",
                    ),
                )
            return self._pricing

    def on_demand_prices(
        self, region: str, types: Iterable[str]
    ) -> tuple[dict[str, float], datetime | None]:
        """Linux shared-tenancy on-demand USD/hour of ``types`` in ``region``, live from the
        Pricing API, and when they were fetched; (``{}``, None) where it cannot be reached.

        Fetched once per ``on_demand_ttl_s`` per region (types not yet asked are fetched
        then), so a refresh every few minutes costs no Pricing calls.
        """
        wanted = sorted(set(types))
        client = self.pricing_client()
        if client is None or not wanted:
            return {}, None
        now = now_utc()
        key = (self.pricing_endpoint, region)
        with _ON_DEMAND_LOCK:
            cache = _ON_DEMAND.get(key)
        if cache is None or (now - cache.at).total_seconds() >= self.on_demand_ttl_s:
            cache = _OnDemandCache(at=now)
        missing = [t for t in wanted if t not in cache.asked]
        if missing:
            try:
                for itype in missing:
                    price = call_with_retries(
                        functools.partial(_get_on_demand, client, region, itype),
                        classify,
                        policy=self.retry,
                        what=f"aws GetProducts ({itype}, {region})",
                    )
                    if price is not None:
                        cache.prices[itype] = price
                    cache.asked.add(itype)
            except ProviderError as err:
                log.warning(
                    "aws: on-demand prices for %s not live (Pricing API: %s %s); the "
                    "catalog's are used",
                    region,
                    err.kind.value,
                    err.code,
                )
                if not cache.asked:
                    return {}, None
            with _ON_DEMAND_LOCK:
                _ON_DEMAND[key] = cache
        return {t: cache.prices[t] for t in wanted if t in cache.prices}, cache.at

    def _pages(self, **kwargs: Any) -> dict[str, Any]:
        """Paginator arguments: ``kwargs`` and, where set, the page size (``MaxResults``)."""
        if self.page_size and "InstanceIds" not in kwargs:  # MaxResults excludes InstanceIds
            kwargs["PaginationConfig"] = {"PageSize": self.page_size}
        return kwargs

    def _call(self, region: str, what: str, fn: Callable[[EC2Client], T]) -> T:
        client = self.client(region)
        return call_with_retries(
            lambda: fn(client), classify, policy=self.retry, what=f"aws {what} ({region})"
        )

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
            if self._pricing is not None:
                self._pricing.close()
                self._pricing = None

    # -- offers and prices ------------------------------------------------------------------

    def _types_with_gpus(self, region: str) -> list[dict[str, Any]]:
        if region not in self._gpu_types:

            def fetch(ec2: EC2Client) -> list[dict[str, Any]]:
                found: list[dict[str, Any]] = []
                for page in ec2.get_paginator("describe_instance_types").paginate(**self._pages()):
                    found.extend(t for t in page["InstanceTypes"] if _whole_gpus(t))
                return found

            self._gpu_types[region] = self._call(region, "DescribeInstanceTypes", fetch)
        return self._gpu_types[region]

    def _zones_of(self, region: str, types: builtins.list[str]) -> dict[str, builtins.list[str]]:
        """instance type -> the zones of ``region`` that offer it."""

        def fetch(ec2: EC2Client) -> dict[str, builtins.list[str]]:
            zones: dict[str, builtins.list[str]] = {}
            for i in range(0, len(types), 100):  # at most 200 values per filter
                pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
                    **self._pages(
                        LocationType="availability-zone",
                        Filters=[{"Name": "instance-type", "Values": types[i : i + 100]}],
                    )
                )
                for page in pages:
                    for row in page["InstanceTypeOfferings"]:
                        zones.setdefault(row["InstanceType"], []).append(row["Location"])
            return zones

        return self._call(region, "DescribeInstanceTypeOfferings", fetch)

    def offers(self, regions: Iterable[str] | None = None) -> builtins.list[Offer]:
        """One offer per GPU type and zone that offers it, priced from the catalog."""
        out: builtins.list[Offer] = []
        for region in regions or self.regions:
            types = self._types_with_gpus(region)
            zones = self._zones_of(region, [t["InstanceType"] for t in types])
            priced = _CatalogPrices.for_region(region)
            with _ON_DEMAND_LOCK:
                cache = _ON_DEMAND.get((self.pricing_endpoint, region))
            live = cache.prices if cache and self.pricing_client() is not None else {}
            for t in types:
                itype = t["InstanceType"]
                # a type no zone offers cannot be launched here (unless EC2 named no zones)
                for zone in sorted(zones.get(itype, () if zones else [""])):
                    known = priced.find(zone, itype)
                    out.append(
                        Offer(
                            provider="aws",
                            region=region,
                            zone=zone,
                            instance_type=itype,
                            gpu=_gpu_name(t["GpuInfo"]["Gpus"][0]),
                            gpu_count=_whole_gpus(t),
                            vcpus=float(t.get("VCpuInfo", {}).get("DefaultVCpus", 0)),
                            memory_gib=round(t.get("MemoryInfo", {}).get("SizeInMiB", 0) / 1024, 2),
                            price=live.get(itype, known.price if known else None),
                            spot_price=known.spot_price if known else None,
                            price_date=cache.at.date().isoformat()
                            if cache and itype in live
                            else (known.price_date if known else ""),
                            interruption_band=known.interruption_band if known else "",
                        )
                    )
        return out

    def prices(self, regions: Iterable[str] | None = None) -> list[PriceQuote]:
        out: list[PriceQuote] = []
        for region in regions or self.regions:
            types = [t["InstanceType"] for t in self._types_with_gpus(region)]
            if not types:
                continue
            priced = _CatalogPrices.for_region(region)

            def fetch(ec2: EC2Client, types: list[str] = types) -> dict[tuple[str, str], Any]:
                latest: dict[tuple[str, str], Any] = {}
                pages = ec2.get_paginator("describe_spot_price_history").paginate(
                    **self._pages(
                        InstanceTypes=types,
                        ProductDescriptions=["Linux/UNIX"],
                        StartTime=now_utc(),
                    )
                )
                for page in pages:
                    for row in page["SpotPriceHistory"]:
                        key = (row["AvailabilityZone"], row["InstanceType"])
                        if key not in latest or row["Timestamp"] > latest[key]["Timestamp"]:
                            latest[key] = row
                return latest

            spot = self._call(region, "DescribeSpotPriceHistory", fetch)
            live, live_at = self.on_demand_prices(region, types)
            for (zone, itype), row in spot.items():
                od = live.get(itype)
                out.append(
                    PriceQuote(
                        provider="aws",
                        region=region,
                        zone=zone,
                        instance_type=itype,
                        spot_price=float(row["SpotPrice"]),
                        on_demand_price=od
                        if od is not None
                        else getattr(priced.find(zone, itype), "price", None),
                        at=utc(row["Timestamp"]),
                        on_demand_at=live_at if od is not None else None,
                    )
                )
        return out

    # -- launch -------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> Instance:
        offer = request.offer
        if offer.provider not in ("", "aws"):
            raise ProviderError(
                ErrorKind.INVALID, "WrongProvider", f"offer is for {offer.provider}", provider="aws"
            )
        region = offer.region or self.region
        mine = self._describe(
            region,
            [
                _tag_filter(TAG_JOB, request.job_id),
                _tag_filter(TAG_ATTEMPT, str(request.attempt)),
                {"Name": "instance-state-name", "Values": NOT_TERMINATED},
            ],
        )
        if mine:
            log.info("aws: %s already has instance %s", request.token, mine[0].id)
            return mine[0]
        params = self._run_params(request, region)
        response = self._call(region, "RunInstances", lambda ec2: ec2.run_instances(**params))
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

    def _run_params(self, request: LaunchRequest, region: str) -> dict[str, Any]:
        offer = request.offer
        tags = {"Name": request.name, **request.tags}
        tag_list = [{"Key": k, "Value": v} for k, v in tags.items()]
        image = request.image or self.image or DEFAULT_IMAGE
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
            request, "aws", package_spec=self.package_spec, pip_args=self.pip_args
        )
        if user_data:
            params["UserData"] = user_data  # boto3 base64-encodes it
        if offer.zone:
            params["Placement"] = {"AvailabilityZone": offer.zone}
        subnet = self.subnets.get(offer.zone) or self.subnet
        if subnet:
            params["SubnetId"] = subnet
        if self.security_groups:
            params["SecurityGroupIds"] = self.security_groups
        key_name = request.ssh_key_name or self.key_name
        if key_name:
            params["KeyName"] = key_name
        if self.instance_profile:
            key = "Arn" if self.instance_profile.startswith("arn:") else "Name"
            params["IamInstanceProfile"] = {key: self.instance_profile}
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
        if request.market is Market.SPOT:
            spot: dict[str, str] = {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            }
            if request.bid_cap_per_hour is not None:
                # rounded toward the cap: "0.51237" goes out as "0.5123", never "0.5124"
                spot["MaxPrice"] = cap_str(request.bid_cap_per_hour, PRICE_DECIMALS)
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
        return params

    def _root_device_of(self, region: str, image: str) -> str | None:
        """The image's root device name (to size the root volume); None where unknown."""
        if image == DEFAULT_IMAGE:
            return DEFAULT_IMAGE_ROOT_DEVICE
        if not image.startswith("ami-"):
            return None
        key = (region, image)
        if key not in self._root_device:
            images = self._call(
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
            for page in ec2.get_paginator("describe_instances").paginate(**self._pages(**kwargs)):
                for reservation in page["Reservations"]:
                    found.extend(reservation["Instances"])
            return found

        return self._call(region, "DescribeInstances", fetch)

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
        self._region_of[d["InstanceId"]] = region
        return Instance(
            id=d["InstanceId"],
            provider="aws",
            region=region,
            zone=d.get("Placement", {}).get("AvailabilityZone", ""),
            instance_type=d.get("InstanceType", ""),
            market=Market.SPOT if spot else Market.ON_DEMAND,
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
        regions += [r for r in self.regions if r != known]
        for region in regions:
            try:
                found = self._describe(region, ids=[instance_id])
            except ProviderError as err:
                if err.kind is ErrorKind.NOT_FOUND:
                    continue
                raise
            if found:
                return found[0]
        raise ProviderError(
            ErrorKind.NOT_FOUND,
            "InvalidInstanceID.NotFound",
            f"no instance {instance_id} in {', '.join(self.regions)}",
            provider="aws",
        )

    def list(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        """Instances carrying ``tags`` that are not terminated, in every configured region."""
        filters = [_tag_filter(k, v) for k, v in wanted_tags(tags).items()]
        filters.append({"Name": "instance-state-name", "Values": NOT_TERMINATED})
        out: list[Instance] = []
        for region in self.regions:
            out.extend(self._describe(region, filters))
        return out

    # -- terminate ------------------------------------------------------------------------------

    def terminate(self, instance_ids: Iterable[str]) -> None:
        by_region: dict[str, list[str]] = {}
        unknown: list[str] = []
        for iid in dict.fromkeys(instance_ids):
            region = self._region_of.get(iid) or (self.region if len(self.regions) == 1 else None)
            if region:
                by_region.setdefault(region, []).append(iid)
            else:
                unknown.append(iid)
        for region, ids in by_region.items():
            self._terminate_in(region, ids)
        for iid in unknown:
            for region in self.regions:
                if self._terminate_in(region, [iid]):
                    break

    def _terminate_in(self, region: str, ids: builtins.list[str]) -> builtins.list[str]:
        """Terminate ``ids`` in ``region``; the ids EC2 knew there (unknown ones are skipped)."""
        try:
            self._call(
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
        for region in self.regions:
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


# -- helpers ----------------------------------------------------------------------------------


def classify(exc: BaseException) -> ProviderError | None:
    """A botocore exception as a :class:`ProviderError` (by ``Error.Code``); None: not ours."""
    from botocore.exceptions import (
        ClientError,
        ConnectionError,
        HTTPClientError,
        NoCredentialsError,
        ParamValidationError,
        PartialCredentialsError,
    )

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return ERRORS.error(error.get("Code", ""), error.get("Message", str(exc)), status)
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return ProviderError(ErrorKind.AUTH, "NoCredentials", str(exc), provider="aws")
    if isinstance(exc, (ConnectionError, HTTPClientError)):
        return ProviderError(ErrorKind.TRANSIENT, type(exc).__name__, str(exc), provider="aws")
    if isinstance(exc, ParamValidationError):
        return ProviderError(ErrorKind.INVALID, "ParamValidation", str(exc), provider="aws")
    return None


def _get_on_demand(client: Any, region: str, itype: str) -> float | None:
    """The Linux shared-tenancy on-demand USD/hour of ``itype`` in ``region`` (every page)."""
    filters = [{"Type": "TERM_MATCH", "Field": "instanceType", "Value": itype}]
    filters.append({"Type": "TERM_MATCH", "Field": "regionCode", "Value": region})
    filters += [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in PRICING_FILTERS]
    pages = client.get_paginator("get_products").paginate(
        ServiceCode="AmazonEC2",
        Filters=filters,
        FormatVersion="aws_v1",
        PaginationConfig={"PageSize": 100},
    )
    found: list[float] = []
    for page in pages:  # every page: the plain row may come after the others
        for text in page.get("PriceList") or ():
            price = _on_demand_of(json.loads(text) if isinstance(text, str) else text)
            if price is not None:
                found.append(price)
    return min(found) if found else None


def _on_demand_of(doc: Mapping[str, Any]) -> float | None:
    """The hourly USD price of one price-list product (None: not the plain Linux row)."""
    attrs = (doc.get("product") or {}).get("attributes") or {}
    if attrs.get("preInstalledSw", "NA") != "NA" or attrs.get("operatingSystem") != "Linux":
        return None
    for term in ((doc.get("terms") or {}).get("OnDemand") or {}).values():
        for dim in (term.get("priceDimensions") or {}).values():
            usd = (dim.get("pricePerUnit") or {}).get("USD")
            if dim.get("unit") == "Hrs" and usd not in (None, ""):
                value = float(usd)
                if value > 0:
                    return value
    return None


def _whole_gpus(itype: Mapping[str, Any]) -> int:
    """How many whole GPUs a type has (0 for none, and for fractional types such as g6f)."""
    gpus = (itype.get("GpuInfo") or {}).get("Gpus") or []
    return sum(int(g.get("Count", 0)) for g in gpus)


def _tag_filter(key: str, value: str) -> dict[str, Any]:
    return {"Name": f"tag:{key}", "Values": [value]}


def _transition_time(reason: str) -> datetime | None:
    m = _WHEN.search(reason or "")
    if not m:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)


def _gpu_name(gpu: Mapping[str, Any]) -> str:
    """EC2's GPU name in the project's canonical spelling (the raw name where unknown)."""
    raw = str(gpu.get("Name", ""))
    try:
        from policies.gpus import canonical_gpu
    except ImportError:
        return raw
    mem_gb = round(gpu.get("MemoryInfo", {}).get("SizeInMiB", 0) / 1024)
    for candidate in (f"{raw}-{mem_gb}GB" if mem_gb else "", raw):
        if candidate:
            name = canonical_gpu(candidate)
            if name:
                return name
    return raw


class _CatalogPrices:
    """The catalog's AWS rows for one region, looked up by zone and type (empty without one)."""

    def __init__(self, rows: Iterable[Offer]) -> None:
        self.by_zone: dict[tuple[str, str], Offer] = {}
        self.by_type: dict[str, Offer] = {}
        for o in rows:
            self.by_zone[(o.zone, o.instance_type)] = o
            best = self.by_type.get(o.instance_type)
            if best is None or (o.spot_price or float("inf")) < (best.spot_price or float("inf")):
                self.by_type[o.instance_type] = o

    @classmethod
    def for_region(cls, region: str) -> _CatalogPrices:
        try:
            from provisioner.core.catalog import Catalog

            return cls(Catalog.load().filter(provider="aws", regions=[region]))
        except Exception as exc:  # the catalog is optional here: offers still list the types
            log.debug("aws: no catalog prices for %s: %s", region, exc)
            return cls(())

    def find(self, zone: str, instance_type: str) -> Offer | None:
        """The zone's own row, else the region's cheapest-spot row for the type."""
        return self.by_zone.get((zone, instance_type)) or self.by_type.get(instance_type)
