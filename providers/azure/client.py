"""The Azure adapter's configuration, credential and management clients (compute, network),
with the SDK's own retry policy switched off (``retry_total=0``): every error is classified
here and only throttled/transient ones are retried (``call_with_retries``). The management
SDKs are imported on first use, never at import.
"""

from __future__ import annotations

import builtins
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from providers.azure.errors import classify
from providers.base import (
    ProviderUnavailable,
    RetryPolicy,
    call_with_retries,
    register_secret,
)

T = TypeVar("T")

ARM_ENDPOINT = "https://management.azure.com"
PRICES_ENDPOINT = "https://prices.azure.com"
DEFAULT_IMAGE = "microsoft-dsvm:ubuntu-hpc:2204:latest"


def _static_credential(token: str) -> Any:
    from azure.core.credentials import AccessToken

    class StaticToken:
        def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
            return AccessToken(token, int(time.time()) + 3600)

    return StaticToken()


def _bearer_policy(credential: Any, scope: str) -> Any:
    """An auth policy that sets ``Authorization: Bearer`` without insisting on https
    (the SDK's default refuses plain http; used only for an ``http://`` endpoint)."""
    from azure.core.pipeline.policies import SansIOHTTPPolicy

    class BearerPolicy(SansIOHTTPPolicy):
        def __init__(self) -> None:
            self._token: Any = None

        def on_request(self, request: Any) -> None:
            if self._token is None or self._token.expires_on - 300 < time.time():
                self._token = credential.get_token(scope)
                register_secret(self._token.token)
            request.http_request.headers["Authorization"] = f"Bearer {self._token.token}"

    return BearerPolicy()


class AzureClient:
    """What every part of the Azure adapter shares: its options, credential and clients (each
    part of :class:`~providers.azure.adapter.AzureProvider` is given this one object)."""

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
        try:
            import azure.core  # noqa: F401  (the management SDKs are imported on first use)
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ProviderUnavailable("azure: pip install 'provisioner[azure]'") from exc
        self.subscription_id = subscription_id or os.environ.get("AZURE_SUBSCRIPTION_ID", "")
        if not self.subscription_id:
            raise ProviderUnavailable("azure: no subscription_id (or AZURE_SUBSCRIPTION_ID)")
        if not resource_group:
            raise ProviderUnavailable("azure: a resource_group is needed")
        self.resource_group = resource_group
        self.locations = list(
            dict.fromkeys([*([location] if location else []), *(locations or ()), *(regions or ())])
        )
        self.subnet_id = subnet_id
        self.endpoint = (endpoint or ARM_ENDPOINT).rstrip("/")
        self.prices_endpoint = (
            prices_endpoint or (endpoint if endpoint else PRICES_ENDPOINT)
        ).rstrip("/")
        self.image = image or DEFAULT_IMAGE
        self.admin_username = admin_username
        self.ssh_public_key = ssh_public_key
        if eviction_policy not in ("Delete", "Deallocate"):
            raise ValueError("eviction_policy must be Delete or Deallocate")
        self.eviction_policy = eviction_policy
        self.os_disk_type = os_disk_type
        self.accelerated_networking = accelerated_networking
        self.retry = retry or RetryPolicy()
        self.polling_interval = polling_interval
        self.request_timeout = request_timeout
        self.vm_sizes = builtins.list(vm_sizes or ())
        self.identity = vm_identity(identity)
        self.package_spec = package_spec
        self.pip_args = builtins.list(pip_args)
        self.agent_preinstalled = bool(agent_preinstalled)
        self.credential = self._credential(credentials)
        self._compute: Any = None
        self._network: Any = None
        self._lock = threading.Lock()

    @staticmethod
    def _credential(credentials: Any) -> Any:
        if isinstance(credentials, str):
            register_secret(credentials)
            return _static_credential(credentials)
        if isinstance(credentials, Mapping):
            from azure.identity import ClientSecretCredential

            register_secret(credentials.get("client_secret"))
            return ClientSecretCredential(
                credentials["tenant_id"], credentials["client_id"], credentials["client_secret"]
            )
        if credentials is None:
            from azure.identity import DefaultAzureCredential

            return DefaultAzureCredential()
        return credentials

    # -- plumbing -----------------------------------------------------------------------------

    def client_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "base_url": self.endpoint,
            "polling_interval": self.polling_interval,
            "retry_total": 0,  # classified and retried here, by code
            "connection_timeout": 10,
            "read_timeout": self.request_timeout,
        }
        if self.endpoint.startswith("http://"):
            kw["authentication_policy"] = _bearer_policy(
                self.credential, f"{ARM_ENDPOINT}/.default"
            )
        return kw

    @property
    def compute(self) -> Any:
        with self._lock:
            if self._compute is None:
                from azure.mgmt.compute import ComputeManagementClient

                self._compute = ComputeManagementClient(
                    self.credential, self.subscription_id, **self.client_kwargs()
                )
            return self._compute

    @property
    def network(self) -> Any:
        with self._lock:
            if self._network is None:
                from azure.mgmt.network import NetworkManagementClient

                self._network = NetworkManagementClient(
                    self.credential, self.subscription_id, **self.client_kwargs()
                )
            return self._network

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn`` under the retry policy, its errors classified."""
        return call_with_retries(fn, classify, policy=self.retry, what=f"azure {what}")

    def close(self) -> None:
        with self._lock:
            for client in (self._compute, self._network):
                if client is not None:
                    client.close()
            self._compute = self._network = None

    def vm_id(self, name: str) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Compute/virtualMachines/{name}"
        )

    def nic_id(self, vm_name: str) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Network/networkInterfaces/{vm_name}-nic"
        )

    def ppg_id(self, name: str) -> str:
        """The ARM id of proximity placement group ``name`` in the adapter's resource group."""
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Compute/proximityPlacementGroups/{name}"
        )


#: a user-assigned managed identity's ARM id, the form ``userAssignedIdentities`` is keyed by
USER_ASSIGNED_ID = re.compile(
    r"/subscriptions/[^/]+/resourceGroups/[^/]+/providers/"
    r"Microsoft\.ManagedIdentity/userAssignedIdentities/[^/]+",
    re.IGNORECASE,
)


def vm_identity(identity: str | None) -> dict[str, Any] | None:
    """The VM's ``identity`` block for the ``identity`` option (None: the VM gets none).

    ``system`` is ``{"type": "SystemAssigned"}``; a user-assigned identity's resource id is
    ``{"type": "UserAssigned", "userAssignedIdentities": {ID: {}}}``: the Compute REST
    reference's ``VirtualMachineIdentity``, whose dictionary keys are ARM ids of the form
    ``/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/
    Microsoft.ManagedIdentity/userAssignedIdentities/{identityName}``, each with an empty
    object as its value.
    https://learn.microsoft.com/en-us/rest/api/compute/virtual-machines/create-or-update
    https://learn.microsoft.com/en-us/entra/identity/managed-identities-azure-resources/qs-configure-rest-vm
    """
    value = str(identity).strip() if identity is not None else ""
    if not value:
        return None
    if value.lower() in ("system", "systemassigned"):
        return {"type": "SystemAssigned"}
    if USER_ASSIGNED_ID.fullmatch(value):
        return {"type": "UserAssigned", "userAssignedIdentities": {value: {}}}
    raise ValueError(
        "identity must be 'system' or a user-assigned identity's resource id "
        "(/subscriptions/SUB/resourceGroups/RG/providers/Microsoft.ManagedIdentity/"
        "userAssignedIdentities/NAME)"
    )


def zone_number(zone: str) -> str:
    """An Azure zone (``1``/``2``/``3``) from ``eastus-1``, ``1`` or ``""``."""
    tail = zone.rsplit("-", 1)[-1] if zone else ""
    return tail if tail.isdigit() else ""


def as_dict(model: Any) -> dict[str, Any]:
    """An SDK model as its wire JSON (camelCase, ``properties`` nested), whatever its generation.

    Two generations of models are in the versions the extras allow: the msrest-style models
    (azure-mgmt-network < 26 and azure-mgmt-compute <= 33, ``_serialization.Model``), whose
    ``as_dict()`` gives flattened snake_case attributes (``ip_configurations``) and whose
    ``serialize(keep_readonly=True)`` gives the wire JSON; and the newer models
    (``model_base.Model``, a mapping over the wire JSON), whose ``as_dict()`` is the wire JSON.
    Everything here reads the wire shape, so each generation is asked for that.
    """
    if isinstance(model, dict):
        return model
    serialize = getattr(model, "serialize", None)
    if callable(serialize) and hasattr(type(model), "_attribute_map"):  # msrest generation
        data: dict[str, Any] = serialize(keep_readonly=True)
        return data
    as_dict = getattr(model, "as_dict", None)
    if callable(as_dict):
        try:
            wire: dict[str, Any] = as_dict()
            return wire
        except TypeError:
            pass
    return dict(model)
