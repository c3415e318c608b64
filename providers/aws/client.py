"""The AWS adapter's configuration and its boto3 clients (one EC2 client per region, one
Price List client), with botocore's own retries switched off: :func:`call_with_retries`
is the one retry layer. boto3 is imported when an adapter is built, never at import.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from providers.aws.errors import classify
from providers.aws.session import botocore_session
from providers.base import RetryPolicy, call_with_retries, register_secret

EC2Client = Any  # botocore builds client classes at run time

T = TypeVar("T")

#: the Price List Query API is served from a few regions only; us-east-1 is one
PRICING_REGION = "us-east-1"
#: how long fetched on-demand prices are used before they are fetched again
ON_DEMAND_TTL_S = 24 * 3600.0


class AWSClient:
    """What every part of the AWS adapter shares: its options, session and clients (each
    part of :class:`~providers.aws.adapter.AWSProvider` is given this one object)."""

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
        self.agent_preinstalled = bool(agent_preinstalled)
        self.pricing_endpoint = pricing_endpoint
        self.pricing_region = pricing_region
        self.on_demand_ttl_s = on_demand_ttl_s
        self.page_size = page_size
        self._pricing: Any = None

        creds = dict(credentials or {})
        register_secret(creds.get("aws_secret_access_key"))
        register_secret(creds.get("aws_session_token"))
        profile = creds.pop("profile", None) or creds.pop("profile_name", None)
        self.session = boto3.Session(
            profile_name=profile, botocore_session=botocore_session(), **creds
        )

        self._clients: dict[str, EC2Client] = {}
        self._lock = threading.Lock()

    # -- plumbing -------------------------------------------------------------------------

    def ec2(self, region: str | None = None) -> EC2Client:
        """The EC2 client for ``region`` (one per region, created on first use)."""
        region = region or self.region
        with self._lock:
            client = self._clients.get(region)
            if client is None:
                client = self.new_client("ec2", region, self.endpoint)
                self._clients[region] = client
            return client

    def service(self, service: str, region: str) -> Any:
        """The client of another ``service`` in ``region`` (one each, created on first use)."""
        with self._lock:
            key = f"{service}:{region}"
            client = self._clients.get(key)
            if client is None:
                client = self.new_client(service, region, self.endpoint)
                self._clients[key] = client
            return client

    def new_client(self, service: str, region: str, endpoint: str | None) -> Any:
        """A boto3 client of ``service``: one attempt per call (the caller's retry policy
        retries), 10 s to connect, 60 s to read."""
        from botocore.config import Config

        config = Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=10,
            read_timeout=60,
            user_agent_extra="provisioner",
        )
        return self.session.client(
            service, region_name=region, endpoint_url=endpoint, config=config
        )

    def pricing_client(self) -> Any:
        """The Price List Query API client (one, in ``pricing_region``); None where disabled."""
        if self.endpoint and not self.pricing_endpoint:
            return None  # a private EC2 endpoint (moto): the Pricing API is not there
        with self._lock:
            if self._pricing is None:
                self._pricing = self.new_client(
                    "pricing", self.pricing_region, self.pricing_endpoint
                )
            return self._pricing

    def pages(self, **kwargs: Any) -> dict[str, Any]:
        """Paginator arguments: ``kwargs`` and, where set, the page size (``MaxResults``)."""
        if self.page_size and "InstanceIds" not in kwargs:  # MaxResults excludes InstanceIds
            kwargs["PaginationConfig"] = {"PageSize": self.page_size}
        return kwargs

    def call(self, region: str, what: str, fn: Callable[[EC2Client], T]) -> T:
        """``fn`` on ``region``'s EC2 client, under the retry policy."""
        client = self.ec2(region)
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
