"""The Tencent CVM adapter's plumbing: options, credentials, the lazily imported SDK, the
enveloped call, the account's currency.

The SDK (tencentcloud-sdk-python-cvm) is imported inside :meth:`TencentClient._client`, never
at module import. Every call goes through ``CvmClient.call_json`` and the error envelope is
checked here (:func:`providers.tencent.errors.envelope_error`), whatever the Content-Type.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Unpack

from providers._common import parse_time as parse_time
from providers._regional import RegionalClient, RegionalOptions, pair_credentials
from providers.base import (
    ErrorKind,
    ProviderError,
    ProviderUnavailable,
    register_secret,
)
from providers.tencent.errors import NAME, classify_error, envelope_error

log = logging.getLogger("provisioner.providers.tencent")

DEFAULT_REGION = "ap-guangzhou"
ENV_SECRET_ID = "TENCENTCLOUD_SECRET_ID"
ENV_SECRET_KEY = "TENCENTCLOUD_SECRET_KEY"
SPOTPAID = "SPOTPAID"
POSTPAID = "POSTPAID_BY_HOUR"


class TencentClient(RegionalClient):
    """Options, credentials and one SDK client per region (the calls are in the parts of
    :class:`~providers.tencent.adapter.TencentProvider`, each given this one object)."""

    name = NAME
    classify_error = staticmethod(classify_error)

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
        self._secret_id, self._secret_key = pair_credentials(
            credentials, ("secret_id", "secret_key"), (ENV_SECRET_ID, ENV_SECRET_KEY)
        )
        self._setup(
            options,
            default_region=DEFAULT_REGION,
            secrets=(self._secret_id, self._secret_key),
            loggers=("tencentcloud_sdk_common",),
        )
        self.vpc_id = vpc_id
        self.subnet_id = subnet_id
        self.subnet_ids = dict(subnet_ids or {})
        self.security_group_ids = list(security_group_ids or ())
        self.key_ids = list(key_ids or ())
        self.instance_types = list(instance_types) if instance_types else None
        self.system_disk_type = system_disk_type
        self.cam_role = cam_role  # the CVM's CAM role: the VM's identity (CamRoleName)
        self.timeout_s = timeout_s
        self._warned_currency = False

    def cvm(self, region: str) -> Any:
        client = self._clients.get(region)
        if client is not None:
            return client
        try:
            from tencentcloud.common import credential
            from tencentcloud.common.profile.client_profile import ClientProfile
            from tencentcloud.common.profile.http_profile import HttpProfile
            from tencentcloud.cvm.v20170312 import cvm_client
        except ImportError as exc:
            raise ProviderUnavailable(
                "the Tencent Cloud SDK is not installed: pip install 'provisioner[tencent]'"
            ) from exc
        if not (self._secret_id and self._secret_key):  # the SDK's profile file, if any
            found = credential.ProfileCredential().get_credential()
            if found is not None:
                self._secret_id, self._secret_key = found.secret_id, found.secret_key
                register_secret(self._secret_id)
                register_secret(self._secret_key)
        if not (self._secret_id and self._secret_key):
            raise ProviderError(
                ErrorKind.AUTH,
                "MissingCredentials",
                f"no credentials: pass credentials=, set {ENV_SECRET_ID}/{ENV_SECRET_KEY}, "
                "or write ~/.tencentcloud/credentials",
                provider=NAME,
            )
        http = HttpProfile(
            protocol=self.protocol, endpoint=self.endpoint, reqTimeout=self.timeout_s
        )
        profile = ClientProfile(httpProfile=http, language="en-US")
        cred = credential.Credential(self._secret_id, self._secret_key)
        client = cvm_client.CvmClient(cred, region, profile)
        self._clients[region] = client
        return client

    def request(self, region: str, action: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """One API call, with the envelope checked here (see the module notes on Content-Type)."""
        client = self.cvm(region)

        def once() -> dict[str, Any]:
            data = client.call_json(action, dict(params))
            if not isinstance(data, Mapping):
                raise ProviderError(
                    ErrorKind.TRANSIENT,
                    "BadResponse",
                    f"{action}: not a JSON object",
                    provider=NAME,
                )
            err = envelope_error(data)
            if err is not None:
                raise err
            return dict(data["Response"])

        return self.call(action, once)

    def to_usd(self, price: float | None) -> float | None:
        usd = self.account.to_usd(price)
        if price is not None and usd is None and not self._warned_currency:
            self._warned_currency = True
            log.warning(
                "tencent: prices left out: %s (CNY on a China-site account, USD on an "
                "international one)",
                self.account.describe(),
            )
        return usd

    def observe_currency(self, body: Mapping[str, Any]) -> None:
        """Take the currency from a price answer, wherever it names one."""
        node: Any = body
        for key in ("", "Price", "InstancePrice"):
            node = node.get(key) if key else node
            if not isinstance(node, Mapping):
                return
            if node.get("Currency"):
                self.account.observe(node["Currency"])
                return
