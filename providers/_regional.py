"""What the Alibaba ECS and Tencent CVM adapters share: one signed RPC API per region.

Both clouds are asked the same way (an SDK client per region, an instance list per region that
pages, a terminate that takes a batch of ids), bill in the account's currency, and report a
spot instance being taken back only on the instance itself. :class:`RegionalClient` holds the
options, clients and retry policy both share (each cloud's client adds its SDK), and
:class:`RegionalInstances` the instance operations they do alike; each cloud's instances part
(a field of its provider) fills in the hooks:

- ``_describe(region, ids=, tags=)``: the cloud's instance list, as :class:`Instance` rows;
- ``_spot_candidates(region)``: the managed instances that may be being reclaimed;
- ``_run(region, request, image, tags)``: sends ``RunInstances``, returns the new id;
- ``_terminate_call(region, ids)``: one terminate call for a batch of ids.

Reclaims are level-triggered: read from what the cloud reports on the instance in each answer,
never from what this process remembers. Alibaba's ``Recycling`` lock is the reclaim notice (the
instance runs on, minutes before ECS releases it: a ``notice`` interruption while it stands);
Tencent's going-away state that no operation of ours explains is the preemption itself. A reclaimed instance the cloud has
already released is in no list; the control loop, which knows the attempt was spot and whether
it terminated it, reads that as a preemption (:mod:`provisioner.control.jobpass.attempts`).

Also here: :class:`RenderedRedactor` (the SDKs log objects as arguments, so secrets are
scrubbed from the rendered line), :func:`parse_endpoint`, :func:`catalog_offers`,
:func:`pair_credentials` and :func:`transport_error`. Nothing here imports a cloud SDK.
"""

from __future__ import annotations

import abc
import base64
import builtins
import importlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar, TypedDict, TypeVar

from providers._common import (
    DEFAULT_CNY_TO_USD,
    AccountCurrency,
    now_utc,
    utc,
    wanted_tags,
)
from providers.base import (
    ErrorKind,
    ProviderError,
    RedactingFilter,
    RetryPolicy,
    call_with_retries,
    redact,
    register_secret,
)
from providers.bootstrap import user_data_for
from provisioner.core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_MANAGED,
    TAG_NODE,
    Instance,
    InstanceState,
    Interruption,
    LaunchRequest,
    Market,
    Offer,
)

log = logging.getLogger("provisioner.providers")

T = TypeVar("T")

#: instances a list page asks for, and ids a terminate call takes (both clouds: 100)
PAGE = 100


class RenderedRedactor(RedactingFilter):
    """Scrubs registered secrets from the *rendered* message, whatever its arguments are.

    The SDKs log objects (a pretty-printed response) as arguments, which the plain
    :class:`RedactingFilter` leaves alone; a cloud that echoes a credential in an error body
    would put it in the log. Rendering first closes that gap.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            rendered = record.getMessage()
        except Exception:  # a malformed record: leave it to the handler
            return True
        record.msg = redact(rendered)
        record.args = None
        return True


def install_log_filters(*names: str) -> None:
    """A :class:`RenderedRedactor` on each named logger (once)."""
    for name in ("provisioner.providers", *names):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RenderedRedactor) for f in logger.filters):
            logger.addFilter(RenderedRedactor())


def parse_endpoint(endpoint: str | None) -> tuple[str | None, str]:
    """``"127.0.0.1:PORT"`` or ``"http://host:port"`` -> (host[:port], protocol)."""
    if not endpoint:
        return None, "https"
    if "://" in endpoint:
        scheme, _, rest = endpoint.partition("://")
        return rest.rstrip("/"), scheme.lower()
    local = endpoint.startswith(("127.", "localhost", "[::1]"))
    return endpoint.rstrip("/"), "http" if local else "https"


_CATALOG: dict[str, builtins.list[Offer]] = {}


def catalog_offers(provider: str) -> builtins.list[Offer]:
    """Offers the shared catalog knows for ``provider`` ([] when there is no catalog); read
    once per process and cloud."""
    if provider not in _CATALOG:
        try:
            module = importlib.import_module("provisioner.catalog_files")
            catalog = module.builtin_catalog()
            if callable(getattr(catalog, "filter", None)):
                rows = catalog.filter(provider=provider)
            else:
                rows = catalog.offers
            found = [o for o in rows or () if isinstance(o, Offer) and o.provider == provider]
        except Exception as exc:  # optional: the catalog is enrichment, not a requirement
            log.debug("catalog not used: %s", type(exc).__name__)
            found = []
        _CATALOG[provider] = found
    return _CATALOG[provider]


def pair_credentials(
    credentials: Mapping[str, str] | tuple[str, str] | None,
    keys: tuple[str, str],
    env: tuple[str, str],
) -> tuple[str | None, str | None]:
    """(id, secret) from ``credentials`` (a mapping under ``keys`` or ``id``/``secret``, or a
    pair), else from the environment variables ``env``."""
    if isinstance(credentials, Mapping):
        return (
            credentials.get(keys[0]) or credentials.get("id"),
            credentials.get(keys[1]) or credentials.get("secret"),
        )
    if isinstance(credentials, tuple):
        return credentials[0], credentials[1]
    return os.environ.get(env[0]), os.environ.get(env[1])


def transport_error(exc: BaseException, provider: str) -> ProviderError | None:
    """No answer (connection, timeout) or an unreadable one (not JSON): TRANSIENT, tried again."""
    if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
        return ProviderError(ErrorKind.TRANSIENT, type(exc).__name__, str(exc), provider=provider)
    if isinstance(exc, ValueError):
        return ProviderError(ErrorKind.TRANSIENT, "BadResponse", str(exc), provider=provider)
    return None


class RegionalOptions(TypedDict, total=False):
    """The keyword options Alibaba's and Tencent's adapters share (each adds its own)."""

    region: str | None  # the default region (else the first of ``regions``)
    regions: Iterable[str] | None  # the regions listed and launched in
    endpoint: str | None  # an API endpoint (``http://127.0.0.1:8080`` for a local server)
    image_id: str | None
    currency: str | None  # the account's billing currency, where known
    cny_to_usd: float  # USD per CNY for prices billed in CNY
    fx_rates: Mapping[str, float] | None  # USD per unit of other currencies
    retry: RetryPolicy | None
    package_spec: str  # what the instance's bootstrap installs
    pip_args: Iterable[str]
    agent_preinstalled: bool  # the image has the agent: the bootstrap installs nothing


def refuse_unknown(options: Mapping[str, Any], owner: str) -> None:
    """Refuse an option of another name than :class:`RegionalOptions`' as a misspelt keyword
    argument of ``owner`` is."""
    unknown = sorted(set(options) - set(RegionalOptions.__annotations__))
    if unknown:
        raise TypeError(f"{owner}() got an unexpected keyword argument {unknown[0]!r}")


class RegionalClient(abc.ABC):
    """What every part of a regional cloud's adapter shares: its options, clients and retry
    policy (see the module); each cloud's client adds its SDK."""

    name: ClassVar[str]
    #: instances a list page asks for, and ids one terminate call takes
    page: int = PAGE

    regions: builtins.list[str]
    default_region: str
    image_id: str | None
    account: AccountCurrency
    retry: RetryPolicy

    def _setup(
        self,
        options: RegionalOptions,
        *,
        default_region: str,
        secrets: Iterable[str | None],
        loggers: Iterable[str],
    ) -> None:
        """Take the options every regional cloud has (:class:`RegionalOptions`); an option
        of another name is refused as a misspelt keyword argument is."""
        refuse_unknown(options, type(self).__name__)
        region = options.get("region")
        listed = builtins.list(options.get("regions") or ())
        self.regions = listed or [region or default_region]
        self.default_region = region or self.regions[0]
        self.endpoint, self.protocol = parse_endpoint(options.get("endpoint"))
        self.image_id = options.get("image_id")
        rates = {"CNY": options.get("cny_to_usd", DEFAULT_CNY_TO_USD)}
        rates.update(options.get("fx_rates") or {})
        self.account = AccountCurrency(self.name, options.get("currency"), rates)
        self.retry = options.get("retry") or RetryPolicy()
        self.package_spec = options.get("package_spec", "provisioner")
        self.pip_args = builtins.list(options.get("pip_args", ()))
        self.agent_preinstalled = bool(options.get("agent_preinstalled", False))
        for secret in secrets:
            register_secret(secret)
        install_log_filters(f"provisioner.providers.{self.name}", *loggers)
        self._clients: dict[str, Any] = {}

    def __repr__(self) -> str:  # never the credentials
        return f"{type(self).__name__}(regions={self.regions!r}, endpoint={self.endpoint!r})"

    @staticmethod
    @abc.abstractmethod
    def classify_error(exc: BaseException) -> ProviderError | None:
        """An SDK exception as a :class:`ProviderError`; None for programming errors."""

    @property
    def currency(self) -> str | None:
        """The account's currency: as the price answers report it, else as configured."""
        return self.account.code

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn`` under the retry policy, its errors classified by the cloud's table."""
        return call_with_retries(
            fn, self.classify_error, policy=self.retry, what=f"{self.name} {what}"
        )

    def close(self) -> None:
        self._clients.clear()


class RegionalInstances(abc.ABC):
    """The instance operations of a regional cloud (see the module), through ``client``; the
    cloud's part fills in the hooks."""

    #: how the cloud writes the state of an instance it has just accepted
    pending_state: ClassVar[str] = "Pending"

    def __init__(self, client: RegionalClient) -> None:
        self.client = client
        self.name = client.name
        self._region_of: dict[str, str] = {}  # instance id -> region (where to ask first)

    # -- the cloud's part --------------------------------------------------------------------

    @abc.abstractmethod
    def _describe(
        self, region: str, *, ids: Sequence[str] = (), tags: Mapping[str, str] | None = None
    ) -> builtins.list[Instance]:
        """Instances in ``region`` with these ids, else carrying all of ``tags``."""

    @abc.abstractmethod
    def _spot_candidates(self, region: str) -> builtins.list[Instance]:
        """Managed instances in ``region`` that may be being reclaimed."""

    @abc.abstractmethod
    def _run(self, region: str, request: LaunchRequest, image: str, tags: dict[str, str]) -> str:
        """Send RunInstances for ``request``; the new instance's id."""

    @abc.abstractmethod
    def _terminate_call(self, region: str, ids: Sequence[str]) -> None:
        """One terminate call for ``ids`` (at most :attr:`page`) in ``region``."""

    def _preemption_raw(self, inst: Instance) -> str:
        """What the cloud said that makes ``inst`` preempted (for the Interruption)."""
        return inst.state_reason or inst.raw_state

    def _already_gone(self, exc: ProviderError) -> bool:
        """Whether a terminate error says the instance is gone already (not an error)."""
        return exc.kind is ErrorKind.NOT_FOUND

    # -- shared ------------------------------------------------------------------------------

    def get(self, instance_id: str) -> Instance:
        known = self._region_of.get(instance_id)
        regions = [known] if known else self.client.regions
        for region in regions:
            found = [i for i in self._describe(region, ids=[instance_id]) if i.id == instance_id]
            if found:
                return found[0]
        raise ProviderError(
            ErrorKind.NOT_FOUND,
            "InvalidInstanceId.NotFound",
            f"no instance {instance_id} in {', '.join(regions)}",
            provider=self.name,
        )

    def list(self, tags: Mapping[str, str] | None = None) -> builtins.list[Instance]:
        out: builtins.list[Instance] = []
        for region in self.client.regions:
            out.extend(self._describe(region, tags=wanted_tags(tags)))
        return out

    def launch(self, request: LaunchRequest) -> Instance:
        region = request.offer.region or self.client.default_region
        tags = {k: request.tags[k] for k in sorted(request.tags)}
        # ClientToken alone protects for a while only: look for this attempt's instance first
        identity = {k: tags[k] for k in (TAG_MANAGED, TAG_JOB, TAG_ATTEMPT, TAG_NODE) if k in tags}
        for inst in self._describe(region, tags=identity):
            if inst.state is not InstanceState.TERMINATED:
                logging.getLogger(f"provisioner.providers.{self.name}").info(
                    "%s: %s already has instance %s", self.name, request.token, inst.id
                )
                return inst
        image = request.image or self.client.image_id
        if not image:
            raise ProviderError(
                ErrorKind.INVALID,
                "MissingImageId",
                "no image: pass image_id to the provider or set it on the request",
                provider=self.name,
            )
        iid = self._run(region, request, image, tags)
        self._region_of[iid] = region
        try:
            return self.get(iid)
        except ProviderError as exc:  # not visible yet (eventual consistency): report PENDING
            if exc.kind is not ErrorKind.NOT_FOUND:
                raise
        return Instance(
            id=iid,
            provider=self.name,
            region=region,
            zone=request.offer.zone,
            instance_type=request.offer.instance_type,
            market=request.market,
            state=InstanceState.PENDING,
            raw_state=self.pending_state,
            tags=dict(tags),
            launched_at=now_utc(),
        )

    def _user_data_b64(self, request: LaunchRequest) -> str:
        """The boot script, base64-encoded as both clouds take it (``""``: none)."""
        script = user_data_for(
            request,
            self.name,
            package_spec=self.client.package_spec,
            pip_args=self.client.pip_args,
            agent_preinstalled=self.client.agent_preinstalled,
        )
        return base64.b64encode(script.encode("utf-8")).decode("ascii") if script else ""

    def _no_instance_id(self, body: Mapping[str, Any]) -> ProviderError:
        return ProviderError(
            ErrorKind.TRANSIENT,
            "NoInstanceId",
            f"RunInstances answered without an instance id (request {body.get('RequestId')})",
            provider=self.name,
        )

    def terminate(self, instance_ids: Iterable[str]) -> None:
        ids = [i for i in dict.fromkeys(instance_ids) if i]
        by_region: dict[str, builtins.list[str]] = {}
        unknown = [i for i in ids if i not in self._region_of]
        for iid in ids:
            if iid in self._region_of:
                by_region.setdefault(self._region_of[iid], []).append(iid)
        if unknown:  # asked in every region: an id that is not there is "already gone"
            for region in self.client.regions:
                by_region.setdefault(region, []).extend(unknown)
        for region, batch in by_region.items():
            for start in range(0, len(batch), self.client.page):
                self._release(region, batch[start : start + self.client.page])

    def _release(self, region: str, ids: Sequence[str]) -> None:
        try:
            self._terminate_call(region, ids)
        except ProviderError as exc:
            if not self._already_gone(exc):
                raise
            if len(ids) == 1:
                return
            for iid in ids:  # one gone id fails the batch: the rest one by one
                try:
                    self._terminate_call(region, [iid])
                except ProviderError as one:
                    if not self._already_gone(one):
                        raise

    def interruptions(self, since: datetime) -> builtins.list[Interruption]:
        """Spot instances the cloud reports as being taken back, on every call while it does.

        Neither cloud dates the reclaim on the instance: ``at`` is when this call saw it (a
        caller de-duplicates by instance id). A reclaimed instance already released is in no
        list and is not reported here (see the module notes).
        """
        since = utc(since)
        at = now_utc()
        if at < since:
            return []
        out: builtins.list[Interruption] = []
        for region in self.client.regions:
            for inst in self._spot_candidates(region):
                kind = self._reclaim_kind(inst)
                if kind is not None:
                    out.append(
                        Interruption(
                            instance_id=inst.id,
                            provider=self.name,
                            zone=inst.zone,
                            kind=kind,
                            at=at,
                            raw=self._preemption_raw(inst),
                        )
                    )
        return out

    def _reclaim_kind(self, inst: Instance) -> str | None:
        """How a spot candidate is being taken back: "notice" (still running, going soon),
        "preempted" (gone or going now), or None (it is not)."""
        if inst.market is Market.SPOT and inst.state is InstanceState.PREEMPTED:
            return "preempted"
        return None
