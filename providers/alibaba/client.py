"""The Alibaba ECS adapter's plumbing: options, credentials, the lazily imported SDK, clients.

The SDK (alibabacloud-ecs20140526 with alibabacloud-tea-openapi) is imported inside
:meth:`AlibabaClient._sdk`, never at module import.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Unpack

from providers._common import parse_time as parse_time
from providers._regional import RegionalClient, RegionalOptions, pair_credentials
from providers.alibaba.errors import NAME, classify_error
from providers.base import ProviderUnavailable

DEFAULT_REGION = "cn-hangzhou"
ENV_KEY_ID = "ALIBABA_CLOUD_ACCESS_KEY_ID"
ENV_KEY_SECRET = "ALIBABA_CLOUD_ACCESS_KEY_SECRET"


def nested(node: Any, *keys: str) -> list[Any]:
    """Walk Alibaba's ``{"Instances": {"Instance": [...]}}`` nesting; [] where absent."""
    for key in keys:
        if not isinstance(node, Mapping):
            return []
        node = node.get(key)
    return list(node) if isinstance(node, list) else []


class AlibabaClient(RegionalClient):
    """Options, credentials and one SDK client per region (the calls are in the parts of
    :class:`~providers.alibaba.adapter.AlibabaProvider`, each given this one object)."""

    name = NAME
    classify_error = staticmethod(classify_error)

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
        self._key_id, self._key_secret = pair_credentials(
            credentials, ("access_key_id", "access_key_secret"), (ENV_KEY_ID, ENV_KEY_SECRET)
        )
        self._setup(
            options,
            default_region=DEFAULT_REGION,
            secrets=(self._key_id, self._key_secret),
            loggers=("alibabacloud", "darabonba", "Tea"),
        )
        self.vswitch_id = vswitch_id
        self.vswitch_ids = dict(vswitch_ids or {})
        self.security_group_id = security_group_id
        self.key_pair_name = key_pair_name
        self.instance_types = list(instance_types) if instance_types else None
        self.system_disk_category = system_disk_category
        self.ram_role = ram_role  # the instance RAM role: the VM's identity (RamRoleName)
        self.connect_timeout_ms = connect_timeout_ms
        self.read_timeout_ms = read_timeout_ms

    def _sdk(self) -> tuple[Any, Any, Any]:
        try:
            from alibabacloud_ecs20140526 import models
            from alibabacloud_ecs20140526.client import Client
            from alibabacloud_tea_openapi.models import Config
        except ImportError as exc:
            raise ProviderUnavailable(
                "the Alibaba Cloud SDK is not installed: pip install 'provisioner[alibaba]'"
            ) from exc
        return Client, Config, models

    def models(self) -> Any:
        """The SDK's request models."""
        return self._sdk()[2]

    def ecs(self, region: str) -> Any:
        client = self._clients.get(region)
        if client is None:
            client_cls, config_cls, _ = self._sdk()
            config = config_cls(
                region_id=region,
                endpoint=self.endpoint,
                protocol=self.protocol,
                connect_timeout=self.connect_timeout_ms,
                read_timeout=self.read_timeout_ms,
            )
            if self._key_id and self._key_secret:
                config.access_key_id = self._key_id
                config.access_key_secret = self._key_secret
            else:
                # the default credential chain (environment, OIDC, the aliyun CLI's profile,
                # ~/.alibabacloud/credentials.ini, the ECS RAM role): tea-openapi 0.4.x does not
                # fall back to it by itself and answers InvalidCredentials without keys
                from alibabacloud_credentials.client import Client as CredentialClient

                config.credential = CredentialClient()
            client = client_cls(config)
            self._clients[region] = client
        return client

    def body(self, response: Any) -> dict[str, Any]:
        body = getattr(response, "body", None)
        return body.to_map() if body is not None else {}

    def to_usd(self, price: float | None, currency: str | None) -> float | None:
        return self.account.to_usd(price, currency)
