"""The sim provider's adapter: :class:`SimProvider` speaks to the sim server over HTTP.

Offers are the catalog's, for the clouds the sim mimics, relabelled ``provider="sim"``; a
region-level catalog row becomes three zones (``us-east1-a/-b/-c`` style, in the cloud's own
zone naming). Everything else is the server's: the adapter starts it on first use and sends it
the options that shape the market (see :class:`providers.sim.cloud.SimConfig`).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import quote, urlencode

from providers._common import utc, wanted_tags
from providers.base import (
    CLOUDS,
    ErrorKind,
    PriceQuote,
    Provider,
    ProviderError,
    RetryPolicy,
    call_with_retries,
)
from providers.capabilities import PlacementGroup, PriceKey
from providers.facts import cloud_facts
from providers.sim.client import SimUnreachable, ensure_server, request
from providers.sim.held import SimHeld
from providers.sim.identity import identity_env
from providers.sim.market import spot_now as _spot_now
from providers.sim.sandbox import project_root
from provisioner.core.models import (
    TAG_MANAGED,
    Instance,
    InstanceState,
    Interruption,
    LaunchRequest,
    Market,
    Offer,
    Reservation,
)

if TYPE_CHECKING:
    from provisioner.core.catalog import Catalog

STATES = {
    "running": InstanceState.RUNNING,
    "terminated": InstanceState.TERMINATED,
    "preempted": InstanceState.PREEMPTED,
}


@dataclasses.dataclass(frozen=True)
class Billing:
    """What an instance has cost so far, under the billing rules of the cloud it mimics."""

    instance_id: str
    cloud: str
    rule: str  # "per second, 60 s minimum", ...
    running: bool
    real_seconds: float
    sim_seconds: float  # the run time in simulated seconds (what is billed)
    billed_seconds: int
    price_per_hour: float | None
    cost: float  # USD


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "provisioner" / "sim"


def _trace_files(trace: str | os.PathLike[str] | Mapping[str, str] | None) -> dict[str, str]:
    """``{zone: path}`` as given, or every ``<zone>_*.json|csv`` file of a directory."""
    if trace is None:
        return {}
    if isinstance(trace, Mapping):
        return {str(z): str(Path(p).resolve()) for z, p in trace.items()}
    folder = Path(trace)
    out: dict[str, str] = {}
    for p in sorted(folder.iterdir()):
        if p.suffix.lower() in (".json", ".csv"):
            out.setdefault(p.stem.split("_", 1)[0], str(p.resolve()))
    return out


def _absolute_uri(uri: str) -> str:
    """``file://./ckpt`` -> ``file:///abs/ckpt`` (the sandbox has another working directory)."""
    if uri.startswith("file://"):
        path = uri[len("file://") :]
        if not path.startswith("/"):
            return "file://" + os.path.abspath(path)
    return uri


def sandbox_of(instance_id: str, options: Mapping[str, Any]) -> Path | None:
    """The sandbox directory of a sim instance (its "VM"), for ``provisioner exec``."""
    state = options.get("state_dir")
    base = Path(str(state)).resolve() if state else default_state_dir()
    path = base / "instances" / instance_id
    return path if path.is_dir() else None


def _absolute_path(path: str | None) -> str | None:
    return os.path.abspath(os.path.expanduser(path)) if path else None


class SimProvider(Provider):
    """A local spot market: instances are sandboxes on this machine, served by the sim server."""

    name: ClassVar[str] = "sim"

    #: launch to a running agent, in seconds: a sandbox and a Python process (decide()'s
    #: ``JobView.boot_s``: a notice at least this long is overlapped)
    boot_seconds = 2.0

    def __init__(
        self,
        state_dir: str | os.PathLike[str] | None = None,
        *,
        mimic: str | Mapping[str, str] = "aws",
        seconds_per_hour: float = 60.0,
        trace: str | os.PathLike[str] | Mapping[str, str] | None = None,
        trace_offset_hours: float = 0.0,
        seed: int = 0,
        mtbp_hours: float | None = 12.0,
        outage_hours: float = 0.5,
        preempt_first_after_s: float | None = None,
        demo_outage_s: float = 60.0,
        notice_floor_s: float = 5.0,
        idle_exit_s: float = 600.0,
        terminate_grace_s: float = 2.0,
        keep_sandboxes: bool = False,
        abandon_exit_s: float | None = 3600.0,
        zones: Iterable[str] | None = None,
        catalog: Catalog | None = None,
        retry: RetryPolicy | None = None,
        python: str | None = None,
        gpu_speed: Mapping[str, float] | None = None,
        market_notice_s: float | None = None,
        run_agent: bool = True,
        api_notices: bool | None = None,
        rebalance_lead_s: float = 600.0,
        rebalance_precede_p: float = 0.8,
        rebalance_false_per_day: float = 0.5,
        reservations: Iterable[Mapping[str, Any]] | None = None,
        changeover_s: float | None = None,
    ) -> None:
        self.state_dir = Path(state_dir) if state_dir else default_state_dir()
        self.state_dir = self.state_dir.resolve()
        if preempt_first_after_s is not None and float(preempt_first_after_s) < 0:
            raise ValueError("preempt_first_after_s must be >= 0 (0: no demo preemption)")
        #: the last listing's instances by id, with the summary each was made from: an
        #: unchanged summary gives back the same Instance (a listing is mostly unchanged)
        self._listed: dict[str, tuple[dict[str, Any], Instance]] = {}
        if isinstance(mimic, str):
            if mimic != "all" and mimic not in CLOUDS:
                raise ValueError(f"mimic: {mimic!r} is not one of all, {', '.join(CLOUDS)}")
        else:
            bad = sorted(set(mimic.values()) - set(CLOUDS))
            if bad:
                raise ValueError(f"mimic: unknown cloud(s) {bad}")
        self.mimic = mimic if isinstance(mimic, str) else dict(mimic)
        self.zones = set(zones) if zones is not None else None
        self.retry = retry or RetryPolicy(attempts=4, base_delay=0.05, max_delay=1.0)
        self.python = python
        self.options: dict[str, Any] = {
            "seconds_per_hour": float(seconds_per_hour),
            "seed": int(seed),
            "mtbp_hours": None if mtbp_hours is None else float(mtbp_hours),
            "outage_hours": float(outage_hours),
            "traces": _trace_files(trace),
            "trace_offset_hours": float(trace_offset_hours),
            # the demo's preemption; 0 (as None) turns it off: -o preempt_first_after_s=0
            "preempt_first_after_s": float(preempt_first_after_s or 0) or None,
            "demo_outage_s": float(demo_outage_s),
            "notice_floor_s": float(notice_floor_s),
            "idle_exit_s": float(idle_exit_s),
            "terminate_grace_s": float(terminate_grace_s),
            "keep_sandboxes": bool(keep_sandboxes),
            "abandon_exit_s": None if abandon_exit_s is None else float(abandon_exit_s),
            "gpu_speed": {str(k): float(v) for k, v in (gpu_speed or {}).items()},
            "market_notice_s": None if market_notice_s is None else float(market_notice_s),
            "run_agent": bool(run_agent),
            "api_notices": None if api_notices is None else bool(api_notices),
            "rebalance_lead_s": float(rebalance_lead_s),  # early signals: docs/simulate.md
            "rebalance_precede_p": float(rebalance_precede_p),
            "rebalance_false_per_day": float(rebalance_false_per_day),
        }
        self._catalog = catalog
        self._offers: list[Offer] | None = None
        self._zone_cloud: dict[str, str] = {}
        self._url: str | None = None
        #: the capacity the account holds (providers/sim/held.py)
        self.held = SimHeld(self._call, self.zone_cloud, self._region_of, self.options)
        if reservations is not None:
            self.options["reservations"] = [self.held.held(r) for r in reservations]
        if changeover_s is not None:
            if float(changeover_s) <= 0:
                raise ValueError("changeover_s must be > 0")
            #: launch to restored work on this sim, in hours (decide()'s ``changeover_h``;
            #: None: the project's assumed CHANGEOVER_H)
            self.changeover_hours = float(changeover_s) / 3600.0

    # -- the server --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._url is None:
            url = ensure_server(self.state_dir, self.python)
            request(url + "/v1/config", "POST", self.options)
            self._url = url
        return self._url

    def _call(self, what: str, method: str, path: str, doc: Any = None) -> Any:
        def once() -> Any:
            try:
                return request(self.url + path, method, doc)
            except SimUnreachable as exc:
                self._url = None  # (re)start it on the next try
                raise ProviderError(
                    ErrorKind.TRANSIENT, "SimServerDown", str(exc), provider="sim"
                ) from None

        return call_with_retries(once, lambda _e: None, policy=self.retry, what=f"sim {what}")

    def configure(self, **options: Any) -> dict[str, Any]:
        """Change server options now (any SimConfig field); returns the server's options."""
        self.options.update(options)
        result: dict[str, Any] = self._call("config", "POST", "/v1/config", self.options)
        return result

    def set_clock(self, at: datetime) -> None:
        """Run the sim on a virtual clock, now at ``at`` (never moved back): the market, launch
        and end times, notices, preemptions and billing read it, and what is due by ``at``
        (a preemption where the trace takes capacity away) has happened when this returns.
        The first call starts the market (the traces' time 0) at ``at``."""
        self._call("clock", "POST", "/v1/clock", {"now": utc(at).timestamp()})

    def shutdown_server(self, *, terminate_all: bool = True) -> None:
        """Stop the server (killing every instance first with ``terminate_all``)."""
        from providers.sim.client import running_url

        url = running_url(self.state_dir)
        if url:
            with contextlib.suppress(SimUnreachable):  # it went while answering: as asked
                request(url + "/v1/shutdown", "POST", {"terminate_all": terminate_all}, timeout=30)
            pid_file = self.state_dir / "server.json"
            deadline = time.monotonic() + 10
            while pid_file.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        self._url = None

    def close(self) -> None:
        self._url = None

    # -- offers and prices ---------------------------------------------------------------------

    def _clouds(self) -> list[str]:
        if isinstance(self.mimic, dict):
            return sorted(set(self.mimic.values()))
        return list(CLOUDS) if self.mimic == "all" else [self.mimic]

    def _all_offers(self) -> list[Offer]:
        if self._offers is not None:
            return self._offers
        if self._catalog is None:
            from provisioner.catalog_files import builtin_catalog

            self._catalog = builtin_catalog()
        offers: list[Offer] = []
        for cloud in self._clouds():
            rows = self._catalog.filter(provider=cloud)
            zoned = {(o.region, o.instance_type) for o in rows if o.zone}
            for o in rows:
                if o.zone:
                    zones: Iterable[str] = (o.zone,)
                elif (o.region, o.instance_type) in zoned:
                    continue
                else:
                    zones = (o.region + s for s in cloud_facts(cloud).zone_suffixes)
                for z in zones:
                    if isinstance(self.mimic, dict) and self.mimic.get(z) != cloud:
                        continue
                    if self.zones is not None and z not in self.zones:
                        continue
                    self._zone_cloud.setdefault(z, cloud)
                    if self._zone_cloud[z] == cloud:
                        offers.append(dataclasses.replace(o, provider="sim", zone=z))
        self._offers = offers
        return offers

    def _region_of(self, zone: str) -> str:
        for o in self._all_offers():
            if o.zone == zone:
                return o.region
        return zone[:-1]

    def zone_cloud(self, zone: str) -> str:
        """The cloud whose formats and rules ``zone`` follows."""
        self._all_offers()
        if zone in self._zone_cloud:
            return self._zone_cloud[zone]
        if isinstance(self.mimic, dict):
            return self.mimic.get(zone, next(iter(self.mimic.values()), "aws"))
        return "aws" if self.mimic == "all" else self.mimic

    def offers(self, regions: Iterable[str] | None = None) -> list[Offer]:
        wanted = set(regions) if regions is not None else None
        return [o for o in self._all_offers() if wanted is None or o.region in wanted]

    def availability(self, zones: Iterable[str]) -> dict[str, bool]:
        """Whether each zone has spot capacity now."""
        view = self._call("market", "POST", "/v1/market", {"zones": sorted(set(zones))})
        return {z: bool(v["available"]) for z, v in view.items()}

    def prices(self, regions: Iterable[str] | None = None) -> list[PriceQuote]:
        offers = self.offers(regions)
        now, spot = datetime.now(UTC), self._spot(offers)
        return [
            PriceQuote("sim", o.region, o.zone, o.instance_type, spot.get(o), o.price, now)
            for o in offers
        ]

    def spot_prices_now(self, keys: Iterable[PriceKey]) -> dict[PriceKey, float]:
        want = set(keys)
        offers = [o for o in self._all_offers() if (o.region, o.zone, o.instance_type) in want]
        return {(o.region, o.zone, o.instance_type): p for o, p in self._spot(offers).items()}

    def _spot(self, offers: list[Offer]) -> dict[Offer, float]:
        """The market's spot price now (the trace's, else the offer's; a surge multiplies it)."""
        zones = sorted({o.zone for o in offers})
        return _spot_now(self._call("market", "POST", "/v1/market", {"zones": zones}), offers)

    # -- instances -----------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> Instance:
        o = request.offer
        zone = o.zone or o.region + cloud_facts(self.zone_cloud(o.region)).zone_suffixes[0]
        cloud = self._zone_cloud.get(zone) or (
            o.provider if o.provider in CLOUDS else self.zone_cloud(zone)
        )
        spec = None
        if request.job_spec is not None:
            spec = dict(request.job_spec)
            for key in ("checkpoint_uri", "progress_uri"):
                if spec.get(key):
                    spec[key] = _absolute_uri(str(spec[key]))
        body = {
            "token": request.token,
            "tags": request.tags,
            "cloud": cloud,
            "region": o.region,
            "zone": zone,
            "instance_type": o.instance_type,
            "market": request.market.value,
            "bid_cap": request.bid_cap_per_hour if request.cap_on_wire else None,  # the bid
            "price_ceiling": request.bid_cap_per_hour,  # the cap, checked with or without one
            "price": o.price,
            "spot_price": o.spot_price,
            "spec": spec,
            "pythonpath": [os.getcwd()],
            # what this controller runs, for the agent to run too: the server may be another
            # checkout's or install's (one server per state directory, reused by every `up`)
            "agent": {
                "root": project_root(),
                "python": self.python or sys.executable,
                "pythonpath": [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p],
            },
            # the sim's secret store: read on the "VM" by its agent, like a cloud's
            "secrets_file": _absolute_path(os.environ.get("PROVISIONER_SIM_SECRETS")),
            # what a VM's identity gives its agent: this job's stores' access only
            "identity_env": identity_env(spec) if spec is not None else {},
            "placement_group": request.placement_group,
            "reservation": None if request.reservation is None else request.reservation.id,
        }
        if spec is not None and request.nodes > 1:  # every node of a sim gang is this host
            spec["advertise_addr"] = spec.get("advertise_addr") or "127.0.0.1"
        return _instance(self._call("launch", "POST", "/v1/instances", body))

    # -- held capacity (providers.capabilities.HeldCapacity) ------------------------------------

    def hold(self, items: Iterable[Mapping[str, Any]]) -> builtins.list[Reservation]:
        """Replace the capacity the sim account holds (``POST /v1/reservations``)."""
        return self.held.hold(items)

    def reservations(self, regions: Iterable[str] | None = None) -> builtins.list[Reservation]:
        """The capacity the account holds, not ended, with what is free in each now; its end
        margins on the sim's clock."""
        return self.held.reservations(regions)

    # -- placement groups (providers.capabilities.PlacementGroups) -----------------------------

    def ensure_placement_group(
        self, name: str, region: str, zone: str, tags: Mapping[str, str]
    ) -> str:
        doc = {"name": name, "region": region, "zone": zone, "tags": dict(tags)}
        return str(self._call("placement-group", "POST", "/v1/placement-groups", doc)["id"])

    def delete_placement_group(self, group_id: str) -> None:
        self._call("placement-group", "DELETE", f"/v1/placement-groups/{quote(group_id)}")

    def list_placement_groups(
        self, tags: Mapping[str, str] | None = None
    ) -> builtins.list[PlacementGroup]:
        wanted = wanted_tags(tags)
        query = urlencode({f"tag:{k}": v for k, v in sorted(wanted.items())})
        found = self._call("placement-group", "GET", f"/v1/placement-groups?{query}")["groups"]
        return [
            PlacementGroup(str(g["id"]), str(g["name"]), str(g["region"]), dict(g["tags"]))
            for g in found
        ]

    def get(self, instance_id: str) -> Instance:
        return _instance(self._call("get", "GET", f"/v1/instances/{instance_id}"))

    def list(self, tags: Mapping[str, str] | None = None) -> builtins.list[Instance]:
        wanted = wanted_tags(tags)
        query = urlencode({f"tag:{k}": v for k, v in sorted(wanted.items())})
        found = self._call("list", "GET", f"/v1/instances?{query}")["instances"]
        before, now = self._listed, {}
        out = []
        for d in found:  # the server applied the tag filter, as a cloud's describe call does
            iid = str(d["id"])
            kept = before.get(iid)
            inst = kept[1] if kept is not None and kept[0] == d else _instance(d)
            now[iid] = (d, inst)
            out.append(inst)
        if wanted == {TAG_MANAGED: "true"}:  # every managed instance: the listing is whole
            self._listed = now
        else:
            self._listed.update(now)
        return out

    def terminate(self, instance_ids: Iterable[str]) -> None:
        ids = [str(i) for i in instance_ids]
        if ids:
            self._call("terminate", "POST", "/v1/terminate", {"ids": ids})

    def interruptions(self, since: datetime) -> builtins.list[Interruption]:
        ts = utc(since).timestamp()
        found = self._call("interruptions", "GET", f"/v1/interruptions?since={ts}")["interruptions"]
        return [
            Interruption(
                instance_id=e["instance_id"],
                provider="sim",
                zone=e["zone"],
                kind=e["kind"],
                at=datetime.fromtimestamp(e["at_real"], UTC),
                deadline=datetime.fromisoformat(e["deadline"]) if e.get("deadline") else None,
                raw=f"{e['cloud']}: {e['raw']}",
            )
            for e in found
        ]

    # -- sim extras ------------------------------------------------------------------------

    def billing(self, instance_id: str) -> Billing:
        d = self._call("billing", "GET", f"/v1/instances/{instance_id}/billing")
        return Billing(**d)

    def preempt(
        self, instance_id: str, *, notice_s: float | None = None, outage_s: float = 0.0
    ) -> Instance:
        """Take the instance's capacity back now: notice first (default: the cloud's, scaled)."""
        doc = {"notice_s": notice_s, "outage_s": outage_s}
        return _instance(self._call("preempt", "POST", f"/v1/instances/{instance_id}/preempt", doc))

    def sandbox(self, instance_id: str) -> dict[str, Any]:
        """The server's full record: sandbox path, pid (= process group), metadata URL, agent exit."""
        result: dict[str, Any] = self._call("get", "GET", f"/v1/instances/{instance_id}")
        return result

    def inject_error(
        self,
        kind: ErrorKind,
        code: str,
        *,
        operation: str = "launch",
        times: int = 1,
        status: int = 400,
        skip: int = 0,
    ) -> None:
        """Make the next ``times`` calls of ``operation`` fail with ``code`` (for tests), after
        letting ``skip`` calls through (a gang whose second node finds no capacity)."""
        self._call(
            "inject",
            "POST",
            "/v1/inject",
            {
                "operation": operation,
                "kind": kind.value,
                "code": code,
                "times": times,
                "status": status,
                "skip": skip,
            },
        )

    def launch_requests(self) -> builtins.list[dict[str, Any]]:
        result: builtins.list[dict[str, Any]] = self._call("requests", "GET", "/v1/requests")[
            "launch"
        ]
        return result


def _instance(d: Mapping[str, Any]) -> Instance:
    return Instance(
        id=str(d["id"]),
        provider="sim",
        region=str(d["region"]),
        zone=str(d["zone"]),
        instance_type=str(d["instance_type"]),
        market=Market(d["market"]),
        state=STATES.get(str(d["state"]), InstanceState.PENDING),
        raw_state=str(d.get("raw_state") or ""),
        state_reason=str(d.get("state_reason") or ""),
        tags=dict(d.get("tags") or {}),
        launched_at=datetime.fromtimestamp(float(d["launched_real"]), UTC),
        price_per_hour=d.get("price_per_hour"),
        private_ip="127.0.0.1",
    )
