"""The GCP adapter's configuration, credentials and Compute Engine clients (REST transport),
and the price quotes it has fetched. google-auth and google-cloud-compute are imported when
an adapter is built or a client is first needed, never at import."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from providers.base import (
    ProviderUnavailable,
    RetryPolicy,
    call_with_retries,
    redact,
    register_secret,
)
from providers.gcp.errors import classify

T = TypeVar("T")

#: requestId namespace: uuid5(namespace, request.token) is stable for a (job, attempt)
REQUEST_ID_NAMESPACE = uuid.UUID("6d1b1e0a-4c5e-5b8e-9a57-7a3f1c2b9e10")
BILLING_ENDPOINT = "https://cloudbilling.googleapis.com"
BILLING_SERVICE = "6F81-5844-456A"
DEFAULT_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu124-debian-11"
TAGS_METADATA_KEY = "provisioner-tags"
PREEMPTED_OP = "compute.instances.preempted"
#: how this tool's instance names begin (provisioner.core.models.launch_token)
NAME_PREFIX = "prov-"


@dataclass
class _Clients:
    instances: Any
    zone_operations: Any
    global_operations: Any
    machine_types: Any
    accelerator_types: Any
    resource_policies: Any
    region_operations: Any
    reservations: Any
    future_reservations: Any
    advice: Any


class GCPClient:
    """What every part of the GCP adapter shares: its options, credentials and clients (each
    part of :class:`~providers.gcp.adapter.GCPProvider` is given this one object)."""

    def __init__(
        self,
        project: str | None = None,
        zones: Iterable[str] | None = None,
        regions: Iterable[str] | None = None,
        endpoint: str | None = None,
        credentials: Any = None,
        billing_endpoint: str | None = None,
        billing_api_key: str | None = None,
        image: str | None = None,
        network: str = "global/networks/default",
        subnetwork: str | None = None,
        external_ip: bool = True,
        service_account: str | None = None,
        disk_type: str = "pd-balanced",
        termination_action: str = "DELETE",
        retry: RetryPolicy | None = None,
        operation_timeout: float = 600.0,
        request_timeout: float = 60.0,
        package_spec: str = "provisioner",
        pip_args: Iterable[str] = (),
        agent_preinstalled: bool = False,
        flex_start_hours: float | None = None,
        flex_start_wait_s: int | None = None,
    ) -> None:
        try:
            import google.auth
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ProviderUnavailable("gcp: pip install 'provisioner[gcp]'") from exc
        if isinstance(credentials, str):
            from google.oauth2 import service_account as sa

            with open(credentials, encoding="utf-8") as fh:
                info = json.load(fh)
            register_secret(info.get("private_key"))
            register_secret(info.get("private_key_id"))
            credentials = sa.Credentials.from_service_account_info(
                info, scopes=["https://www.googleapis.com/auth/cloud-platform"]
            )
            project = project or info.get("project_id")
        if credentials is None:
            import google.auth

            try:
                credentials, found = google.auth.default(
                    scopes=["https://www.googleapis.com/auth/cloud-platform"]
                )
            except Exception as exc:
                raise ProviderUnavailable(f"gcp: no credentials: {redact(str(exc))}") from None
            project = project or found
        if not project:
            raise ProviderUnavailable("gcp: no project given and none in the credentials")
        register_secret(billing_api_key)
        for attr in ("token", "refresh_token", "client_secret"):  # what a credential may carry
            value = getattr(credentials, attr, None)
            if isinstance(value, str):
                register_secret(value)
        self.project = project
        self.zones = list(zones or ())
        self.regions = list(
            dict.fromkeys([*(regions or ()), *(z.rsplit("-", 1)[0] for z in self.zones)])
        )
        self.endpoint = endpoint.rstrip("/") if endpoint else None
        self.credentials = credentials
        self.billing_endpoint = (billing_endpoint or endpoint or BILLING_ENDPOINT).rstrip("/")
        self.billing_api_key = billing_api_key
        self.image = image or DEFAULT_IMAGE
        self.network = network
        self.subnetwork = subnetwork
        self.external_ip = external_ip
        self.service_account = service_account
        self.package_spec = package_spec
        self.pip_args = list(pip_args)
        self.agent_preinstalled = bool(agent_preinstalled)
        self.disk_type = disk_type
        if termination_action not in ("DELETE", "STOP"):
            raise ValueError("termination_action must be DELETE or STOP")
        self.termination_action = termination_action
        if flex_start_hours is not None and not 0 < float(flex_start_hours) <= 7 * 24:
            raise ValueError("flex_start_hours must be more than 0 and at most 168 (7 days)")
        if flex_start_wait_s is not None and int(flex_start_wait_s) < 1:
            raise ValueError("flex_start_wait_s must be 1 second or more")
        #: on-demand launches go out as flex-start VMs (Dynamic Workload Scheduler) that run
        #: at most this long; None: standard VMs
        self.flex_start_hours = None if flex_start_hours is None else float(flex_start_hours)
        #: how long Compute Engine may look for flex-start capacity before the insert fails
        #: (``params.requestValidForDuration``); None: the cloud's default
        self.flex_start_wait_s = None if flex_start_wait_s is None else int(flex_start_wait_s)
        self.retry = retry or RetryPolicy()
        self.operation_timeout = operation_timeout
        self.request_timeout = request_timeout
        self._clients: _Clients | None = None
        self._lock = threading.Lock()

    # -- plumbing ---------------------------------------------------------------------------

    def clients(self) -> _Clients:
        with self._lock:
            if self._clients is None:
                from google.api_core.client_options import ClientOptions
                from google.cloud import compute_v1

                opts = ClientOptions(api_endpoint=self.endpoint) if self.endpoint else None
                kw: dict[str, Any] = {
                    "credentials": self.credentials,
                    "client_options": opts,
                    "transport": "rest",
                }
                self._clients = _Clients(
                    instances=compute_v1.InstancesClient(**kw),
                    zone_operations=compute_v1.ZoneOperationsClient(**kw),
                    global_operations=compute_v1.GlobalOperationsClient(**kw),
                    machine_types=compute_v1.MachineTypesClient(**kw),
                    accelerator_types=compute_v1.AcceleratorTypesClient(**kw),
                    resource_policies=compute_v1.ResourcePoliciesClient(**kw),
                    region_operations=compute_v1.RegionOperationsClient(**kw),
                    reservations=compute_v1.ReservationsClient(**kw),
                    future_reservations=compute_v1.FutureReservationsClient(**kw),
                    advice=compute_v1.AdviceClient(**kw),
                )
            return self._clients

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn`` under the retry policy, its errors classified."""
        return call_with_retries(fn, classify, policy=self.retry, what=f"gcp {what}")

    def close(self) -> None:
        with self._lock:
            if self._clients is not None:
                for client in vars(self._clients).values():
                    transport = getattr(client, "transport", None)
                    if transport is not None:
                        transport.close()
                self._clients = None

    def aggregated(self, client: Any, request: Any) -> list[tuple[str, Any]]:
        """Every (scope, scoped list) of an aggregated list, all pages, with retries."""

        def fetch() -> list[tuple[str, Any]]:
            return list(
                client.aggregated_list(request=request, retry=None, timeout=self.request_timeout)
            )

        return self.call(type(request).__name__, fetch)
