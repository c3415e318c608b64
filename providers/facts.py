"""What each cloud *is*, declared once: the facts the core, the agent and the sim read.

Every cloud folder has a ``facts.py`` with one :class:`CloudFacts` named ``FACTS``, registered
under the ``provisioner.clouds`` entry point group (``pyproject.toml``); its notice poll and
parser sit next to it in ``notice.py``; ``notice_sources`` says where a notice can be read
before the capacity goes (on the VM, and through the cloud's API where it has one). Readers: the agent (metadata endpoint, notice poll,
usual notice length), ``providers/bootstrap.py`` (user-data limit), the sim's rules (notice,
billing, protection period; ``providers/sim/rules.py`` adds only sim-side error codes and state
words), ``provisioner providers`` (SDK, credential variables and files), the sim adapter (zone
naming) and, through :func:`billing_for`, whoever prices run time. A sixth cloud is one new
folder and two entry points (``provisioner.providers`` for its adapter, ``provisioner.clouds``
for its facts). Reading facts imports no SDK.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from policies.enforcement import CapEnforce
from providers._errors import ErrorTable
from providers.notice import NoticePoll
from provisioner.core.billing import Billing

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

GROUP = "provisioner.clouds"
#: the clouds shipped here: imported from their folders, never looked up among the entry points
BUILTIN = ("aws", "gcp", "azure", "alibaba", "tencent")


@dataclass(frozen=True, slots=True)
class Credentials:
    """Where a cloud's SDK finds credentials, as data: what ``provisioner providers`` looks for
    (names and paths only; nothing is opened or printed).

    ``env``: sets of variables; one set with every variable non-empty proves credentials.
    ``files``: paths, tried after ``env``; ``~`` is the home, ``${VAR}`` the value of VAR (the
    path is skipped when VAR is unset), ``${VAR:-default}`` VAR or the default. ``hint``: how to
    set them up, printed when none is found."""

    env: tuple[tuple[str, ...], ...]
    files: tuple[str, ...]
    hint: str


@dataclass(frozen=True, slots=True)
class NoticeSources:
    """Where a spot interruption notice can be read before the capacity goes, with sources.

    ``vm``: on the VM (the metadata endpoint the agent polls: every cloud has one; the agent
    reports what it sees in its progress record, and the controller turns that into the
    attempt's notice whatever the cloud). ``api``: through the cloud's API, for a controller
    off the VM ("" where the API says nothing before the capacity goes). ``api_read``: whether
    this adapter's ``interruptions()`` reads that API notice (reports ``kind="notice"``); the
    sim reports notices through its own API only for a cloud where this is True. ``docs``:
    where the cloud documents it."""

    vm: str
    api: str = ""
    api_read: bool = False
    docs: str = ""


@dataclass(frozen=True, slots=True)
class BidFacts:
    """How the cloud takes a spot bid cap, as its documentation says.

    ``takes_cap``: whether a launch can carry a maximum price at all (GCP's Spot VMs take
    none: the daemon is the only one to hold the job to a cap). ``default``: who enforces the
    cap when the policy does not say (``bid_cap.enforce``). ``uncapped``: what a launch
    carries when no maximum price is sent. ``why``: the cloud's own words for the default, and
    where they are."""

    takes_cap: bool
    default: CapEnforce
    uncapped: str
    why: str


@dataclass(frozen=True, slots=True)
class CloudFacts:
    name: str
    display: str
    billing: Billing
    notice_s: float  # seconds between a spot interruption notice and the reclaim
    spot_protection_s: float  # a spot instance younger than this is not reclaimed (Alibaba: 1 h)
    user_data_limit: int  # bytes of user data / startup script the cloud accepts
    user_data_limit_encoded: bool  # the limit counts the base64 text, not the raw script
    metadata_base: str  # the instance metadata endpoint the agent polls for notices
    notice: NoticePoll  # the notice request and its parser (providers/<cloud>/notice.py)
    credentials: Credentials  # where the SDK finds credentials (the CLI's probe)
    sdk: str  # the SDK distribution (``pip install 'provisioner[<name>]'`` brings it)
    sdk_module: str  # the module whose presence says the SDK is installed (found, not imported)
    zone_suffixes: tuple[str, ...]  # how zones are named after their region (the sim spreads rows)
    errors: ErrorTable  # the cloud's error codes by kind (providers/<cloud>/errors.py)
    bid: BidFacts  # how the cloud takes a bid cap, and who enforces it by default
    docs: str = ""  # where these facts come from
    #: where a notice can be read before the capacity goes: on the VM, through the API
    notice_sources: NoticeSources = NoticeSources(vm="the instance metadata endpoint")
    #: an early signal before the notice on the VM (AWS: the rebalance recommendation), read
    #: like the notice; None: the cloud serves none (docs/daemon.md, "Early signals")
    early: NoticePoll | None = None


@cache
def _registered() -> dict[str, EntryPoint]:
    """The ``provisioner.clouds`` entry points by name, read once (a scan of every installed
    distribution's metadata: tens of ms, which a plan over several clouds paid per cloud)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=GROUP)}


@cache
def cloud_facts(name: str) -> CloudFacts:
    """The facts of cloud ``name``; ``ValueError`` names the known clouds.

    The five clouds shipped here are imported from their folders directly; the entry points are
    read only for another name (a cloud added by another package). Scanning every installed
    distribution's metadata costs tens of ms, which a cold ``provisioner plan`` would pay for
    facts it already knows where to find."""
    if name in BUILTIN:
        facts = importlib.import_module(f"providers.{name}.facts").FACTS
    else:
        ep = _registered().get(name)
        if ep is None:
            raise ValueError(f"unknown cloud {name!r} (known: {', '.join(known_clouds())})")
        facts = ep.load()
    if not isinstance(facts, CloudFacts):
        raise TypeError(f"the facts of cloud {name!r} are not a CloudFacts")
    return facts


def known_clouds() -> tuple[str, ...]:
    names = set(_registered()) | set(BUILTIN)
    return tuple(sorted(names))


def cap_enforcement(cloud: str, asked: CapEnforce | None) -> CapEnforce:
    """Who holds a spot launch on ``cloud`` to its bid cap: the policy's ``bid_cap.enforce``,
    else the cloud's default; always the daemon where the cloud takes no maximum price. A
    cloud without facts: the daemon (nothing is known of its bids)."""
    try:
        bid = cloud_facts(cloud).bid
    except (ValueError, TypeError):
        return CapEnforce.DAEMON
    if not bid.takes_cap:
        return CapEnforce.DAEMON
    return asked if asked is not None else bid.default


def billing_for(provider: str) -> Billing:
    """The billing rule of ``provider``. ``sim`` without a zone gets AWS's; an attempt on the
    sim is billed by the cloud it played in its zone (``provisioner.control.played``)."""
    return cloud_facts("aws" if provider == "sim" else provider).billing


class _CloudBilling(Mapping[str, Billing]):
    """Each cloud's billing rule from its facts, read when asked (``JobView.billing``, the
    plan's standing): a provider without facts is not in it (per second, no minimum)."""

    def __getitem__(self, provider: str) -> Billing:
        try:
            return billing_for(provider)
        except (ValueError, TypeError):
            raise KeyError(provider) from None

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


CLOUD_BILLING: Mapping[str, Billing] = _CloudBilling()
