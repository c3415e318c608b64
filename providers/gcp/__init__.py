"""Google Compute Engine through ``google-cloud-compute`` (REST transport).

What this adapter does, and the GCP facts behind it (see shared/reference/clouds.md):

- **No bid on GCP.** A Spot VM is billed at the current Spot price; there is no maximum price to
  send. The bid cap is therefore enforced *before* launch: a spot launch whose known price (the
  live quote from :meth:`GCPProvider.prices`, else the offer's price) is above
  ``request.bid_cap_per_hour`` is refused with ``ProviderError(PRICE_TOO_LOW, "PriceAboveCap")``
  and nothing is sent. Where no price is known the launch goes ahead and a warning says the cap
  could not be checked. A Spot price that rises after launch is not a preemption cause on GCP;
  the cap cannot stop it.
- **Idempotency.** The instance name is ``request.name`` and the insert carries
  ``requestId = uuid5(token)`` (inside ``InsertInstanceRequest``, it is not a keyword). Before
  inserting, the adapter looks for the instance by name in the zone and by its job/attempt
  labels anywhere in the project.
- **Operations.** Polled with our own ``ZoneOperationsClient.wait`` (``op.result()`` polls the
  public endpoint). A failed operation's cause is ``op.error.errors[0].code``:
  ``ZONE_RESOURCE_POOL_EXHAUSTED(_WITH_DETAILS)`` capacity, ``QUOTA_EXCEEDED`` quota.
- **Labels** are lowercase and dot-free (keys: a lowercase letter first, then lowercase
  letters, digits, ``_`` and ``-``, at most 63), so every tag becomes a label: its key mapped by
  :func:`label_key` (``CostCenter`` -> ``costcenter``, ``team.name`` -> ``team_name``) and its value
  by :func:`label`, so that cost-allocation tags reach billing; ``policy check`` warns of each
  change (:func:`label_changes`). The exact tags are also kept in the ``provisioner-tags``
  metadata item, which is what ``Instance.tags`` reports.
- **Preemption.** Compute Engine records a ``compute.instances.preempted`` system operation
  and stops (``STOP``) or deletes (``DELETE``) the VM. ``interruptions`` reads those
  operations; ``get``/``list`` report a stopped VM with such an operation as PREEMPTED, and
  ``get`` of a VM deleted by preemption answers a PREEMPTED instance built from the operation.
- Instance ids are ``<zone>/<name>``; ``get``/``terminate`` also take a bare name (found with
  an aggregated list).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from providers._common import ErrorTable, has_tags, normalise_state, now_utc, utc, wanted_tags
from providers.base import (
    ErrorKind,
    PriceQuote,
    Provider,
    ProviderError,
    ProviderUnavailable,
    RetryPolicy,
    call_with_retries,
    redact,
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

log = logging.getLogger("provisioner.providers.gcp")

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

ERRORS = ErrorTable(
    "gcp",
    {
        ErrorKind.CAPACITY: (
            "ZONE_RESOURCE_POOL_EXHAUSTED",
            "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
            "RESOURCE_POOL_EXHAUSTED",
            # the subnetwork has no free IP address in that region: another region's may
            "IP_SPACE_EXHAUSTED",
            "IP_SPACE_EXHAUSTED_WITH_DETAILS",
        ),
        ErrorKind.QUOTA: ("QUOTA_EXCEEDED", "quotaExceeded"),
        ErrorKind.AUTH: ("authError", "forbidden", "PERMISSIONS_ERROR", "insufficientPermissions"),
        ErrorKind.NOT_FOUND: ("notFound", "RESOURCE_NOT_FOUND"),
        ErrorKind.THROTTLED: (
            "rateLimitExceeded",
            "userRateLimitExceeded",
            "RATE_LIMIT_EXCEEDED",
            "RESOURCE_OPERATION_RATE_EXCEEDED",
        ),
        ErrorKind.TRANSIENT: (
            "backendError",
            "internalError",
            "INTERNAL_ERROR",
            "SERVICE_UNAVAILABLE",
        ),
        ErrorKind.PRICE_TOO_LOW: ("PriceAboveCap",),
    },
)

STATES: dict[str, InstanceState] = {
    "provisioning": InstanceState.PENDING,
    "staging": InstanceState.PENDING,
    "repairing": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "suspending": InstanceState.STOPPING,
    "stopped": InstanceState.TERMINATED,
    "suspended": InstanceState.TERMINATED,
    "terminated": InstanceState.TERMINATED,
}

#: canonical GPU (normalised: lowercase alphanumerics) -> Compute Engine accelerator type
ACCELERATORS: dict[str, str] = {
    "k80": "nvidia-tesla-k80",
    "p4": "nvidia-tesla-p4",
    "p100": "nvidia-tesla-p100",
    "v100": "nvidia-tesla-v100",
    "t4": "nvidia-tesla-t4",
    "l4": "nvidia-l4",
    "a100": "nvidia-tesla-a100",
    "a10040gb": "nvidia-tesla-a100",
    "a10080gb": "nvidia-a100-80gb",
    "h100": "nvidia-h100-80gb",
    "h10080gb": "nvidia-h100-80gb",
    "h100mega": "nvidia-h100-mega-80gb",
    "h10080gbmega": "nvidia-h100-mega-80gb",
    "h10080gbplus": "nvidia-h100-mega-80gb",
    "h200": "nvidia-h200-141gb",
    "h200141gb": "nvidia-h200-141gb",
    "b200": "nvidia-b200",
    "rtxpro6000": "nvidia-rtx-pro-6000",
    "rtxproserver6000": "nvidia-rtx-pro-6000",
}
#: accelerator type -> our GPU name where policies.gpus is not there to ask
GPU_NAMES: dict[str, str] = {
    "nvidia-tesla-k80": "K80",
    "nvidia-tesla-p4": "P4",
    "nvidia-tesla-p100": "P100",
    "nvidia-tesla-v100": "V100",
    "nvidia-tesla-t4": "T4",
    "nvidia-l4": "L4",
    "nvidia-tesla-a100": "A100",
    "nvidia-a100-80gb": "A100-80GB",
    "nvidia-h100-80gb": "H100",
    "nvidia-h100-mega-80gb": "H100",
    "nvidia-h200-141gb": "H200",
    "nvidia-b200": "B200",
}
#: machine families whose types come with their GPUs (no guestAccelerators to send)
BUILTIN_GPU_FAMILIES = ("a2", "a3", "a4", "a4x", "g2", "g4")
ATTACHABLE = ("nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-tesla-p100", "nvidia-tesla-p4")
#: GPU machine shapes for pricing from component SKUs: type -> (vCPUs, GiB, accelerator, count)
SHAPES: dict[str, tuple[int, float, str, int]] = {
    **{
        f"g2-standard-{c}": (c, c * 4.0, "nvidia-l4", g)
        for c, g in ((4, 1), (8, 1), (12, 1), (16, 1), (32, 1), (24, 2), (48, 4), (96, 8))
    },
    **{f"a2-highgpu-{g}g": (12 * g, 85.0 * g, "nvidia-tesla-a100", g) for g in (1, 2, 4, 8)},
    "a2-megagpu-16g": (96, 1360.0, "nvidia-tesla-a100", 16),
    **{f"a2-ultragpu-{g}g": (12 * g, 170.0 * g, "nvidia-a100-80gb", g) for g in (1, 2, 4, 8)},
    **{f"a3-highgpu-{g}g": (26 * g, 234.0 * g, "nvidia-h100-80gb", g) for g in (1, 2, 4, 8)},
}


def _norm(name: str) -> str:
    return "".join(c for c in name.lower() if c.isalnum())


def accelerator_type(gpu: str) -> str:
    """The Compute Engine accelerator type for a GPU name (``L4`` -> ``nvidia-l4``)."""
    key = _norm(gpu)
    for prefix in ("", "nvidia", "nvidiatesla", "tesla"):
        if key.startswith(prefix) and key[len(prefix) :] in ACCELERATORS:
            return ACCELERATORS[key[len(prefix) :]]
    if gpu.startswith("nvidia-"):
        return gpu
    raise ProviderError(
        ErrorKind.INVALID, "UnknownGPU", f"no GCP accelerator for {gpu!r}", provider="gcp"
    )


def gpu_name(accelerator: str) -> str:
    """Our GPU name for a Compute Engine accelerator type (``nvidia-tesla-t4`` -> ``T4``)."""
    try:
        from policies.gpus import canonical_gpu

        name = canonical_gpu(GPU_NAMES.get(accelerator, accelerator))
        if name:
            return name
    except Exception:  # gpus.csv missing: fall back on our table
        pass
    return GPU_NAMES.get(accelerator, accelerator)


def has_builtin_gpus(machine_type: str) -> bool:
    return machine_type.split("-", 1)[0] in BUILTIN_GPU_FAMILIES


def label(value: str) -> str:
    """``value`` as a GCP label value: lowercase letters, digits, ``_`` and ``-``; <= 63."""
    return re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63]


_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")


def label_key(key: str) -> str:
    """``key`` as a GCP label key: lowercase, ``_`` for any other character, a letter first,
    at most 63 characters (``CostCenter`` -> ``costcenter``, ``9x`` -> ``k9x``)."""
    if _LABEL_KEY.fullmatch(key):
        return key
    out = re.sub(r"[^a-z0-9_-]", "_", key.lower())
    if not out or not out[0].isalpha() or not out[0].isascii():
        out = "k" + out
    return out[:63]


def labels_for(tags: Mapping[str, str]) -> dict[str, str]:
    """Every tag as a label (key by :func:`label_key`, value by :func:`label`); where two tags
    map to the same key the first (in sorted order) keeps it."""
    out: dict[str, str] = {}
    for key in sorted(tags):
        out.setdefault(label_key(key), label(tags[key]))
    return out


def label_changes(tags: Mapping[str, str]) -> builtins.list[str]:
    """What GCP will not carry as written: one line per changed, merged or dropped tag."""
    lines: builtins.list[str] = []
    taken: dict[str, str] = {}
    for key in sorted(tags):
        new_key, value = label_key(key), tags[key]
        if new_key in taken:
            lines.append(
                f"tag {key!r} maps to GCP label key {new_key!r}, already taken by tag "
                f"{taken[new_key]!r}: it is not a label (it is kept in the instance metadata)"
            )
            continue
        taken[new_key] = key
        if new_key != key:
            lines.append(
                f"tag {key!r} becomes GCP label {new_key!r} (label keys are lowercase letters, "
                "digits, _ and -, a letter first, at most 63); the original is kept in the "
                "instance metadata"
            )
        if label(value) != value:
            lines.append(
                f"the value of tag {key!r} becomes {label(value)!r} as a GCP label (lowercase "
                "letters, digits, _ and -, at most 63)"
            )
    return lines


def request_id(token: str) -> str:
    """The insert's ``requestId``: a UUID derived from the launch token (same launch, same id)."""
    return str(uuid.uuid5(REQUEST_ID_NAMESPACE, token))


def _enum_name(value: Any) -> str:
    return str(getattr(value, "name", value) or "")


def _when(text: str) -> datetime | None:
    if not text:
        return None
    try:
        return utc(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        return None


class _OperationError(Exception):
    def __init__(self, code: str, message: str, status: int | None) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status = code, message, status


def classify(exc: BaseException) -> ProviderError | None:
    """A ProviderError for a google-api-core, google-auth or transport error; None otherwise."""
    if isinstance(exc, _OperationError):
        return ERRORS.error(exc.code, exc.message, exc.status)
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as aexc

    if isinstance(exc, gexc.GoogleAPICallError):
        status = exc.code if isinstance(exc.code, int) else None
        reasons = [e.get("reason", "") for e in exc.errors if isinstance(e, Mapping)]
        reason = next((r for r in reasons if r), "") or (exc.reason or "")
        err = ERRORS.error(reason or f"HTTP{status or ''}", exc.message or str(exc), status)
        if status == 403 and err.kind is ErrorKind.INVALID:
            return ProviderError(ErrorKind.AUTH, err.code, exc.message, provider="gcp")
        return err
    if isinstance(exc, aexc.RefreshError | aexc.DefaultCredentialsError):
        return ProviderError(ErrorKind.AUTH, type(exc).__name__, str(exc), provider="gcp")
    if isinstance(exc, aexc.TransportError | ConnectionError | TimeoutError):
        return ProviderError(ErrorKind.TRANSIENT, type(exc).__name__, str(exc), provider="gcp")
    try:
        import requests

        if isinstance(exc, requests.ConnectionError | requests.Timeout):
            return ProviderError(ErrorKind.TRANSIENT, type(exc).__name__, str(exc), provider="gcp")
    except ImportError:  # pragma: no cover - requests comes with google-auth
        pass
    return None


@dataclass
class _Clients:
    instances: Any
    zone_operations: Any
    global_operations: Any
    machine_types: Any
    accelerator_types: Any


class GCPProvider(Provider):
    """Compute Engine in one project.

    ``project``: the project id (default: the one ``google.auth.default()`` finds).
    ``zones``/``regions``: where offers are listed (instances are found in every zone).
    ``credentials``: google-auth credentials, a service-account JSON path, or None for
    application-default credentials. ``endpoint``: a Compute API root (``http://127.0.0.1:P``
    in tests); ``billing_endpoint``: the Cloud Billing API root; ``billing_api_key``: an API key
    for it (else the credentials are used). ``termination_action``: what GCP does to a Spot VM
    it preempts, ``DELETE`` (default) or ``STOP``.
    """

    name = "gcp"

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
        self.disk_type = disk_type
        if termination_action not in ("DELETE", "STOP"):
            raise ValueError("termination_action must be DELETE or STOP")
        self.termination_action = termination_action
        self.retry = retry or RetryPolicy()
        self.operation_timeout = operation_timeout
        self.request_timeout = request_timeout
        self._clients: _Clients | None = None
        self._lock = threading.Lock()
        self._quotes: dict[tuple[str, str], PriceQuote] = {}

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
                )
            return self._clients

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        return call_with_retries(fn, classify, policy=self.retry, what=f"gcp {what}")

    def close(self) -> None:
        with self._lock:
            if self._clients is not None:
                for client in vars(self._clients).values():
                    transport = getattr(client, "transport", None)
                    if transport is not None:
                        transport.close()
                self._clients = None

    def _aggregated(self, client: Any, request: Any) -> list[tuple[str, Any]]:
        """Every (scope, scoped list) of an aggregated list, all pages, with retries."""

        def fetch() -> list[tuple[str, Any]]:
            return list(
                client.aggregated_list(request=request, retry=None, timeout=self.request_timeout)
            )

        return self._call(type(request).__name__, fetch)

    # -- offers and prices ------------------------------------------------------------------------

    def offers(self, regions: Iterable[str] | None = None) -> builtins.list[Offer]:
        """GPU machine types (GPUs built in) and N1 hosts for attachable GPUs, per zone.

        From the Compute API (two aggregated lists); prices from the catalog where it has the
        type. If the API cannot be read, the catalog's GCP offers are returned instead.
        """
        wanted = set(regions or self.regions)
        try:
            offers = self._offers_from_api(wanted)
        except ProviderError as err:
            if err.kind in (ErrorKind.AUTH, ErrorKind.INVALID, ErrorKind.NOT_FOUND):
                raise
            log.warning("gcp: machine types unavailable (%s); using the catalog", err.code)
            return [o for o in _catalog_offers() if not wanted or o.region in wanted]
        prices = {(o.region, o.instance_type): o for o in _catalog_offers()}
        out = []
        for o in offers:
            known = prices.get((o.region, o.instance_type))
            if known is not None and known.gpu_count == o.gpu_count:
                o = Offer(
                    **{
                        **_offer_fields(o),
                        "price": known.price,
                        "spot_price": known.spot_price,
                        "price_date": known.price_date,
                    }
                )
            out.append(o)
        return out

    def _offers_from_api(self, wanted: set[str]) -> builtins.list[Offer]:
        from google.cloud import compute_v1

        c = self.clients()
        zones = set(self.zones)

        def keep(zone: str) -> bool:
            return (not zones or zone in zones) and (not wanted or zone.rsplit("-", 1)[0] in wanted)

        out: list[Offer] = []
        families = "|".join(BUILTIN_GPU_FAMILIES)
        request = compute_v1.AggregatedListMachineTypesRequest(
            project=self.project, filter=f'name eq "({families})-.*"'
        )
        for scope, scoped in self._aggregated(c.machine_types, request):
            zone = scope.rsplit("/", 1)[-1]
            if not keep(zone):
                continue
            for mt in scoped.machine_types:
                if not mt.accelerators:
                    continue
                acc = mt.accelerators[0]
                out.append(
                    Offer(
                        provider="gcp",
                        region=zone.rsplit("-", 1)[0],
                        zone=zone,
                        instance_type=mt.name,
                        gpu=gpu_name(acc.guest_accelerator_type),
                        gpu_count=acc.guest_accelerator_count,
                        vcpus=float(mt.guest_cpus),
                        memory_gib=round(mt.memory_mb / 1024, 2),
                        price=None,
                        spot_price=None,
                    )
                )
        request = compute_v1.AggregatedListAcceleratorTypesRequest(project=self.project)
        for scope, scoped in self._aggregated(c.accelerator_types, request):
            zone = scope.rsplit("/", 1)[-1]
            if not keep(zone):
                continue
            for at in scoped.accelerator_types:
                if at.name not in ATTACHABLE:
                    continue
                count = 1
                while count <= max(1, at.maximum_cards_per_instance):
                    cpus = min(8 * count, 96)
                    out.append(
                        Offer(
                            provider="gcp",
                            region=zone.rsplit("-", 1)[0],
                            zone=zone,
                            instance_type=f"n1-standard-{cpus}",
                            gpu=gpu_name(at.name),
                            gpu_count=count,
                            vcpus=float(cpus),
                            memory_gib=cpus * 3.75,
                            price=None,
                            spot_price=None,
                        )
                    )
                    count *= 2
        return out

    def prices(self, regions: Iterable[str] | None = None) -> builtins.list[PriceQuote]:
        """Spot and on-demand prices of GPU machine types, from Cloud Billing Catalog SKUs.

        A type's price is vCPUs x core SKU + GiB x RAM SKU + GPUs x GPU SKU of its family in
        its region; ``OnDemand`` SKUs give the on-demand price, ``Preemptible`` ones (Spot) the
        spot price. GCP spot prices are the same in every zone of a region, so quotes carry no
        zone. The quotes are kept and used to enforce bid caps at launch.
        """
        wanted = set(regions or self.regions)
        components: dict[tuple[str, str, str, str], float] = {}  # (region, usage, family|gpu, what)
        for sku in self._skus():
            parsed = _parse_sku(sku)
            if parsed is None:
                continue
            usage, key, what, price = parsed
            for region in sku.get("serviceRegions") or ():
                if not wanted or region in wanted:
                    components[(region, usage, key, what)] = price
        at = now_utc()
        out: list[PriceQuote] = []
        for region in sorted({k[0] for k in components}):
            for itype, (cpus, gib, acc, count) in SHAPES.items():
                family = itype.split("-", 1)[0].upper()

                def total(
                    usage: str,
                    family: str = family,
                    cpus: int = cpus,
                    gib: float = gib,
                    acc: str = acc,
                    count: int = count,
                    region: str = region,
                ) -> float | None:
                    parts = (
                        components.get((region, usage, family, "core")),
                        components.get((region, usage, family, "ram")),
                        components.get((region, usage, acc, "gpu")),
                    )
                    if any(p is None for p in parts):
                        return None
                    core, ram, gpu = (float(p or 0.0) for p in parts)
                    return round(cpus * core + gib * ram + count * gpu, 6)

                spot, on_demand = total("Preemptible"), total("OnDemand")
                if spot is None and on_demand is None:
                    continue
                quote = PriceQuote(
                    "gcp", region, "", itype, spot, on_demand, at, at if on_demand else None
                )
                self._quotes[(region, itype)] = quote
                out.append(quote)
        return out

    def _skus(self) -> builtins.list[dict[str, Any]]:
        """Every Compute Engine SKU from the Cloud Billing Catalog (paged by nextPageToken)."""
        session = self._billing_session()
        url = f"{self.billing_endpoint}/v1/services/{BILLING_SERVICE}/skus"
        skus: list[dict[str, Any]] = []
        token = ""
        while True:
            params = {"currencyCode": "USD", "pageSize": "5000"}
            if token:
                params["pageToken"] = token
            page = self._call(
                "billing skus",
                functools.partial(_get_json, session, url, params, self.request_timeout),
            )
            skus.extend(page.get("skus") or ())
            token = page.get("nextPageToken") or ""
            if not token:
                return skus

    def _billing_session(self) -> Any:
        import requests

        if self.billing_api_key:  # as a header: a key in the URL would reach urllib3's logs
            session = requests.Session()
            session.headers["X-Goog-Api-Key"] = self.billing_api_key
            return session
        from google.auth.transport.requests import AuthorizedSession

        return AuthorizedSession(self.credentials)

    # -- launch -----------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> Instance:
        offer = request.offer
        if offer.provider not in ("", "gcp"):
            raise ProviderError(
                ErrorKind.INVALID, "WrongProvider", f"offer is for {offer.provider}", provider="gcp"
            )
        in_region = [z for z in self.zones if z.rsplit("-", 1)[0] == offer.region]
        zone = offer.zone or (in_region[0] if in_region else "")
        if not zone:
            raise ProviderError(
                ErrorKind.INVALID,
                "NoZone",
                f"offer {offer.instance_type} in {offer.region} has no zone",
                provider="gcp",
            )
        existing = self._existing(request, zone)
        if existing is not None:
            log.info("gcp: %s already has instance %s", request.token, existing.id)
            return existing
        if request.market is Market.SPOT:
            self._enforce_cap(request)
        body = self._instance_body(request, zone)
        from google.cloud import compute_v1

        insert = compute_v1.InsertInstanceRequest(
            project=self.project,
            zone=zone,
            instance_resource=body,
            request_id=request_id(request.token),
        )
        c = self.clients()
        try:
            op = self._call(
                "insert",
                lambda: c.instances.insert(
                    request=insert, retry=None, timeout=self.request_timeout
                ),
            )
        except ProviderError as err:
            if err.code != "alreadyExists":
                raise
            log.info("gcp: %s exists already (insert answered alreadyExists)", request.name)
            return self.get(f"{zone}/{request.name}")
        self._wait(zone, op.name)
        instance = self.get(f"{zone}/{request.name}")
        log.info(
            "gcp: launched %s (%s, %s) for %s",
            instance.id,
            offer.instance_type,
            request.market.value,
            request.token,
        )
        return instance

    def _existing(self, request: LaunchRequest, zone: str) -> Instance | None:
        """The live instance of this (job, attempt): by name in the zone, else by labels."""
        raw = self._get_raw(zone, request.name)
        if raw is not None:
            found = self._instance(raw)
            if found.state.alive:
                return found
        mine = [
            i
            for i in self.list({TAG_JOB: request.job_id, TAG_ATTEMPT: str(request.attempt)})
            if i.state.alive
        ]
        return mine[0] if mine else None

    def known_price(self, offer: Offer) -> float | None:
        """The spot price this adapter knows for ``offer``: a live quote, else the offer's."""
        quote = self._quotes.get((offer.region, offer.instance_type))
        if (
            quote is not None
            and quote.spot_price is not None
            and has_builtin_gpus(offer.instance_type)
        ):
            return quote.spot_price
        return offer.spot_price

    def _enforce_cap(self, request: LaunchRequest) -> None:
        """GCP takes no bid: refuse a spot launch whose known price is above the cap."""
        cap = request.bid_cap_per_hour
        if cap is None:
            return
        price = self.known_price(request.offer)
        if price is None:
            log.warning(
                "gcp: no known spot price for %s in %s; the cap %.5f/h cannot be checked "
                "before launch (GCP takes no bid)",
                request.offer.instance_type,
                request.offer.region,
                cap,
            )
            return
        if price > cap:
            raise ProviderError(
                ErrorKind.PRICE_TOO_LOW,
                "PriceAboveCap",
                f"spot price {price:.5f}/h of {request.offer.instance_type} in {request.offer.region} is "
                f"above the cap {cap:.5f}/h; GCP takes no bid, so the cap is enforced before launch",
                provider="gcp",
            )
        log.info(
            "gcp: cap %.5f/h enforced before launch (GCP takes no bid): %s at %.5f/h",
            cap,
            request.offer.instance_type,
            price,
        )

    def _instance_body(self, request: LaunchRequest, zone: str) -> dict[str, Any]:
        offer = request.offer
        tags = request.tags
        spot = request.market is Market.SPOT
        scheduling: dict[str, Any] = {"on_host_maintenance": "TERMINATE"}
        if spot:
            scheduling.update(
                provisioning_model="SPOT",
                instance_termination_action=self.termination_action,
                automatic_restart=False,
            )
        else:
            scheduling.update(provisioning_model="STANDARD", automatic_restart=True)
        nic: dict[str, Any] = {"network": self.network}
        if self.subnetwork:
            nic["subnetwork"] = self.subnetwork
        if self.external_ip:
            nic["access_configs"] = [{"name": "External NAT", "type_": "ONE_TO_ONE_NAT"}]
        metadata = [{"key": TAGS_METADATA_KEY, "value": json.dumps(tags, sort_keys=True)}]
        script = _user_data(request)
        if script:
            metadata.append({"key": "startup-script", "value": script})
        body: dict[str, Any] = {
            "name": request.name,
            "machine_type": f"zones/{zone}/machineTypes/{offer.instance_type}",
            "scheduling": scheduling,
            "labels": labels_for(tags),
            "metadata": {"items": metadata},
            "disks": [
                {
                    "boot": True,
                    "auto_delete": True,
                    "initialize_params": {
                        "source_image": request.image or self.image,
                        "disk_size_gb": request.disk_gb,
                        "disk_type": f"zones/{zone}/diskTypes/{self.disk_type}",
                    },
                }
            ],
            "network_interfaces": [nic],
        }
        if offer.gpu_count and not has_builtin_gpus(offer.instance_type):
            body["guest_accelerators"] = [
                {
                    "accelerator_type": f"zones/{zone}/acceleratorTypes/{accelerator_type(offer.gpu)}",
                    "accelerator_count": offer.gpu_count,
                }
            ]
        if self.service_account:
            body["service_accounts"] = [
                {
                    "email": self.service_account,
                    "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
                }
            ]
        return body

    def _wait(self, zone: str, operation: str) -> None:
        """Poll ``operation`` with our own ZoneOperationsClient until DONE; raise its error."""
        from google.cloud import compute_v1

        c = self.clients()
        deadline = time.monotonic() + self.operation_timeout
        while True:
            op = self._call(
                "wait",
                lambda: c.zone_operations.wait(
                    project=self.project,
                    zone=zone,
                    operation=operation,
                    retry=None,
                    timeout=self.request_timeout,
                ),
            )
            if op.status == compute_v1.Operation.Status.DONE:
                break
            if time.monotonic() > deadline:
                raise ProviderError(
                    ErrorKind.TRANSIENT,
                    "OperationTimeout",
                    f"operation {operation} still {_enum_name(op.status)}",
                    provider="gcp",
                )
        errors = list(op.error.errors) if op.error else []
        if errors:
            first = errors[0]
            status = op.http_error_status_code or None
            raise ERRORS.error(first.code, first.message, status)

    # -- describe -----------------------------------------------------------------------------------

    def _instance(self, inst: Any, preempted: bool = False) -> Instance:
        zone = inst.zone.rsplit("/", 1)[-1]
        items = {i.key: i.value for i in inst.metadata.items} if inst.metadata else {}
        tags: dict[str, str] = dict(inst.labels)
        if TAGS_METADATA_KEY in items:
            with contextlib.suppress(ValueError, AttributeError):
                tags = {str(k): str(v) for k, v in json.loads(items[TAGS_METADATA_KEY]).items()}
        nic = inst.network_interfaces[0] if inst.network_interfaces else None
        public = nic.access_configs[0].nat_i_p if nic is not None and nic.access_configs else ""
        raw = _enum_name(inst.status)
        spot = _enum_name(inst.scheduling.provisioning_model) == "SPOT" or bool(
            inst.scheduling.preemptible
        )
        return Instance(
            id=f"{zone}/{inst.name}",
            provider="gcp",
            region=zone.rsplit("-", 1)[0],
            zone=zone,
            instance_type=inst.machine_type.rsplit("/", 1)[-1],
            market=Market.SPOT if spot else Market.ON_DEMAND,
            state=normalise_state(raw, STATES, preempted=preempted),
            raw_state=raw,
            state_reason=PREEMPTED_OP if preempted else inst.status_message,
            tags=tags,
            launched_at=_when(inst.creation_timestamp),
            price_per_hour=self.known_price_of(
                zone.rsplit("-", 1)[0], inst.machine_type.rsplit("/", 1)[-1], spot
            ),
            public_ip=public or None,
            private_ip=(nic.network_i_p if nic is not None else "") or None,
        )

    def known_price_of(self, region: str, instance_type: str, spot: bool) -> float | None:
        quote = self._quotes.get((region, instance_type))
        if quote is None:
            return None
        return quote.spot_price if spot else quote.on_demand_price

    @staticmethod
    def _split(instance_id: str) -> tuple[str, str]:
        zone, _, name = instance_id.rpartition("/")
        return zone.rsplit("/", 1)[-1], name

    def get(self, instance_id: str) -> Instance:
        zone, name = self._split(instance_id)
        if not zone:
            found = [i for i in self._list_raw(f'name = "{name}"')]
            if not found:
                raise ProviderError(
                    ErrorKind.NOT_FOUND,
                    "notFound",
                    f"no instance {name} in {self.project}",
                    provider="gcp",
                )
            zone = found[0].zone.rsplit("/", 1)[-1]
        inst = self._get_raw(zone, name)
        if inst is None:
            # gone: deleted by a preemption (DELETE action), unless deleted since by a user
            ops = self._preemptions(zone=zone, target=name, deletes=True)
            if not ops or ops[-1].operation_type != PREEMPTED_OP:
                raise ProviderError(
                    ErrorKind.NOT_FOUND,
                    "notFound",
                    f"no instance {name} in {self.project}/{zone}",
                    provider="gcp",
                )
            return self._deleted_by_preemption(ops[-1], zone, name)
        preempted = False
        if _enum_name(inst.status) in ("TERMINATED", "STOPPED", "STOPPING"):
            preempted = bool(self._preemptions(zone=zone, target=name))
        return self._instance(inst, preempted)

    def _get_raw(self, zone: str, name: str) -> Any | None:
        """The Instance resource, or None when Compute Engine has no such instance."""
        c = self.clients()
        try:
            return self._call(
                "get",
                lambda: c.instances.get(
                    project=self.project,
                    zone=zone,
                    instance=name,
                    retry=None,
                    timeout=self.request_timeout,
                ),
            )
        except ProviderError as err:
            if err.kind is ErrorKind.NOT_FOUND:
                return None
            raise

    def _deleted_by_preemption(self, op: Any, zone: str, name: str) -> Instance:
        return Instance(
            id=f"{zone}/{name}",
            provider="gcp",
            region=zone.rsplit("-", 1)[0],
            zone=zone,
            instance_type="",
            market=Market.SPOT,
            state=InstanceState.PREEMPTED,
            raw_state="DELETED",
            state_reason=f"{PREEMPTED_OP}: {op.status_message}".rstrip(": "),
        )

    def _list_raw(self, expr: str) -> builtins.list[Any]:
        from google.cloud import compute_v1

        request = compute_v1.AggregatedListInstancesRequest(project=self.project, filter=expr)
        return [
            inst
            for _, scoped in self._aggregated(self.clients().instances, request)
            for inst in scoped.instances
        ]

    def list(self, tags: Mapping[str, str] | None = None) -> builtins.list[Instance]:
        """Instances carrying ``tags`` in every zone of the project (one aggregated list).

        The filter uses the label form of each tag; the exact tags (kept in metadata) are then
        compared, so a sanitised label never matches a different job.
        """
        wanted = wanted_tags(tags)
        expr = " AND ".join(f'(labels.{label_key(k)} = "{label(v)}")' for k, v in wanted.items())
        raw = [i for i in self._list_raw(expr)]
        stopped = [i for i in raw if _enum_name(i.status) in ("TERMINATED", "STOPPED", "STOPPING")]
        preempted_targets = (
            {op.target_link.rsplit("/", 1)[-1] for op in self._preemptions()} if stopped else set()
        )
        out = []
        for inst in raw:
            instance = self._instance(
                inst, preempted=inst.name in preempted_targets and inst in stopped
            )
            if has_tags(instance.tags, wanted):
                out.append(instance)
        return out

    # -- terminate ------------------------------------------------------------------------------

    def terminate(self, instance_ids: Iterable[str]) -> None:
        c = self.clients()
        pending: list[tuple[str, str]] = []
        for iid in dict.fromkeys(instance_ids):
            zone, name = self._split(iid)
            if not zone:
                found = self._list_raw(f'name = "{name}"')
                if not found:
                    continue
                zone = found[0].zone.rsplit("/", 1)[-1]
            try:
                op = self._call(
                    "delete",
                    functools.partial(
                        c.instances.delete,
                        project=self.project,
                        zone=zone,
                        instance=name,
                        retry=None,
                        timeout=self.request_timeout,
                    ),
                )
            except ProviderError as err:
                if err.kind is ErrorKind.NOT_FOUND:
                    continue
                raise
            pending.append((zone, op.name))
        for zone, op_name in pending:
            try:
                self._wait(zone, op_name)
            except ProviderError as err:
                if err.kind is not ErrorKind.NOT_FOUND:
                    raise

    # -- interruptions ----------------------------------------------------------------------------

    def _preemptions(
        self, zone: str | None = None, target: str | None = None, *, deletes: bool = False
    ) -> builtins.list[Any]:
        """``compute.instances.preempted`` operations (of one zone/instance, or the project),
        oldest first; with ``deletes``, the ``delete`` operations too."""
        from google.cloud import compute_v1

        if deletes:
            expr = f'operationType eq "({re.escape(PREEMPTED_OP)}|delete)"'
        else:
            expr = f'(operationType = "{PREEMPTED_OP}")'
        c = self.clients()
        if zone:
            request = compute_v1.ListZoneOperationsRequest(
                project=self.project, zone=zone, filter=expr
            )
            ops = self._call(
                "operations",
                lambda: builtins.list(
                    c.zone_operations.list(
                        request=request, retry=None, timeout=self.request_timeout
                    )
                ),
            )
        else:
            request = compute_v1.AggregatedListGlobalOperationsRequest(
                project=self.project, filter=expr
            )
            ops = [
                op
                for _, scoped in self._aggregated(c.global_operations, request)
                for op in scoped.operations
            ]
        if target:
            ops = [op for op in ops if op.target_link.rsplit("/", 1)[-1] == target]
        return sorted(ops, key=lambda op: op.insert_time)

    def interruptions(self, since: datetime) -> builtins.list[Interruption]:
        """Preemptions Compute Engine recorded since ``since`` (its system operations).

        These are the project's ``compute.instances.preempted`` operations; the time is the
        operation's. Instances of other tools in the project are included only if they carry
        this tool's tags, which a deleted instance no longer shows; so every preemption of an
        instance whose name this tool gives (``prov-...``) is reported.
        """
        since = utc(since)
        out = []
        for op in self._preemptions():
            at = _when(op.end_time or op.insert_time) or now_utc()
            name = op.target_link.rsplit("/", 1)[-1]
            zone = op.zone.rsplit("/", 1)[-1]
            if at < since or not name.startswith(NAME_PREFIX):
                continue
            out.append(
                Interruption(
                    instance_id=f"{zone}/{name}",
                    provider="gcp",
                    zone=zone,
                    kind="preempted",
                    at=at,
                    raw=f"{PREEMPTED_OP}: {op.status_message}".rstrip(": "),
                )
            )
        return out


# -- helpers ----------------------------------------------------------------------------------------

_CORE_RAM = re.compile(
    r"^(?:Spot Preemptible |Preemptible )?([A-Z][0-9][A-Z]?) (?:Predefined )?Instance (Core|Ram) running in "
)
_GPU = re.compile(r"^Nvidia (.+?) GPU(?: attached to (?:Spot )?Preemptible VMs)? running in ")


def _parse_sku(sku: Mapping[str, Any]) -> tuple[str, str, str, float] | None:
    """(usage, family or accelerator, core|ram|gpu, USD per unit-hour) of a VM SKU, or None."""
    usage = (sku.get("category") or {}).get("usageType", "")
    if usage not in ("OnDemand", "Preemptible"):
        return None
    desc = sku.get("description", "")
    m = _CORE_RAM.match(desc)
    if m:
        key, what = m.group(1), m.group(2).lower()
    else:
        g = _GPU.match(desc)
        if not g:
            return None
        try:
            key, what = accelerator_type(g.group(1)), "gpu"
        except ProviderError:
            return None
    try:
        info = sku["pricingInfo"][-1]["pricingExpression"]
        rates = info["tieredRates"]
        unit = rates[-1]["unitPrice"]
        price = int(unit.get("units") or 0) + int(unit.get("nanos") or 0) / 1e9
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return usage, key, what, price


def _user_data(request: LaunchRequest) -> str:
    """The startup script: the request's user data, else the bootstrap script of its job spec."""
    try:
        from providers._common import user_data_for
    except ImportError:  # pragma: no cover - an older tree
        return request.user_data
    return user_data_for(request, "gcp")


def _get_json(session: Any, url: str, params: Mapping[str, str], timeout: float) -> dict[str, Any]:
    from google.api_core import exceptions as gexc

    response = session.get(url, params=dict(params), timeout=timeout)
    if response.status_code >= 400:
        raise gexc.from_http_response(response)
    data: dict[str, Any] = response.json()
    return data


def _catalog_offers() -> builtins.list[Offer]:
    try:
        from provisioner.core.catalog import Catalog

        return Catalog.load().filter(provider="gcp")
    except Exception as exc:  # the catalog is optional here
        log.debug("gcp: no catalog: %s", exc)
        return []


def _offer_fields(o: Offer) -> dict[str, Any]:
    return {f: getattr(o, f) for f in Offer.__dataclass_fields__}
