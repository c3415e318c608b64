"""The sim cloud's state: instances as local sandboxes, the spot market, notices, billing.

One :class:`SimCloud` lives in the sim server process (``python -m providers.sim serve``) and
owns ``<state_dir>``::

    config.json                     the market and timing options (config.SimConfig)
    events.jsonl                    interruptions: one JSON object per line (notice, preempted);
                                    the API reports a notice only where the mimicked cloud's does
    instances/<id>/instance.json    one instance (written atomically on every change)
    instances/<id>/spec.json        the node agent's job spec, as the agent reads it
    instances/<id>/work/            the job's working directory
    instances/<id>/agent.log        the agent's and the job's output
    vm-cache/                       the sandboxes' code cache (a warm machine image's)

An ended instance's sandbox (its disk: ``spec.json`` and ``work/``) is removed once nothing
of it runs (option ``keep_sandboxes`` keeps it); ``instance.json`` and ``agent.log`` stay. A
server that starts sweeps what a dead one left: ended instances' disks, half-made sandboxes,
and the code cache when no instance is live.

An instance is a process group (``start_new_session``) running ``python -m provisioner.agent
--spec spec.json`` (or a placeholder process when the launch carries no job spec). The group
is the VM: a preemption serves the notice on the instance's metadata endpoint, then SIGKILLs
the whole group when the notice runs out. The server is a child subreaper, so the job's
processes, orphaned when the agent dies, are reaped at once and the group is really gone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from providers.sim import held as held_
from providers.sim import sandbox as sandbox_
from providers.sim.config import SimConfig, SimError
from providers.sim.groups import PlacementGroupBook, demo_first
from providers.sim.market import Market, Surges
from providers.sim.metadata import MetadataService
from providers.sim.records import (
    atomic_json,
    billing_statement,
    event_line,
    instance_summary,
    instance_view,
    new_instance,
)
from providers.sim.rules import RULES, api_reports, refuse_price, rules_for

log = logging.getLogger("provisioner.sim")


class SimCloud:
    """All instances, the market and the scheduler; every public method takes the lock."""

    def __init__(self, state_dir: Path, base_url: str) -> None:
        self.dir = state_dir
        self.base_url = base_url.rstrip("/")
        self.lock = threading.RLock()
        (self.dir / "instances").mkdir(parents=True, exist_ok=True)
        cfg_path = self.dir / "config.json"
        doc = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
        self.config = held_.config_of(doc)
        if not self.config.epoch:
            self.config.epoch = self.now()
            atomic_json(cfg_path, self.config.to_dict())
        self.market = self._market()
        self.instances: dict[str, dict[str, Any]] = {}
        for path in sorted((self.dir / "instances").glob("*/instance.json")):
            with contextlib.suppress(OSError, ValueError):
                inst = json.loads(path.read_text())
                self.instances[inst["id"]] = inst
        self.by_token = {i["token"]: i["id"] for i in self.instances.values()}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.outages: dict[str, float] = {}  # zone -> real time capacity comes back
        self.surges = Surges()
        self.injected: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.last_activity = time.time()
        self._last_reap = 0.0
        self.metadata_service = MetadataService(self.approve)
        self.groups = PlacementGroupBook(self.dir, self.instances)
        sandbox_.set_subreaper()
        self._sweep_stale()

    def _market(self) -> Market:
        return Market(**self.config.market_options())

    # -- time --------------------------------------------------------------------------------

    def now(self) -> float:
        """The cloud's time (epoch seconds): the virtual clock where one is set, else the real one."""
        clock = self.config.clock
        return time.time() if clock is None else clock

    def set_clock(self, ts: float) -> dict[str, Any]:
        """Move the virtual clock to ``ts`` (never back) and run the scheduler at that time, so
        what is due by then (notices, preemptions where capacity went) has happened when this
        returns. The first setting switches the cloud to the virtual clock and starts the market
        (trace time 0, plus ``trace_offset_hours``) then."""
        with self.lock:
            self.touch()
            cur = self.config.clock
            if cur is not None and ts < cur - 1e-6:
                raise SimError(400, "invalid", "InvalidParameter", "the clock does not go back")
            self.config.clock = float(ts)
            if cur is None:
                self.config.epoch = float(ts)
            atomic_json(self.dir / "config.json", self.config.to_dict())
            self.tick()
            return {"clock": self.config.clock, "epoch": self.config.epoch}

    def sim_time(self, now: float) -> float:
        c = self.config
        return (now - c.epoch) * c.time_scale + c.trace_offset_hours * 3600.0

    def touch(self) -> None:
        self.last_activity = time.time()

    # -- configuration -----------------------------------------------------------------------

    def configure(self, options: dict[str, Any]) -> dict[str, Any]:
        options = dict(options)
        clock = options.pop("clock", None)
        with self.lock:
            merged = {**self.config.to_dict(), **options}
            new = held_.config_of(merged)
            if any(getattr(new, k) != getattr(self.config, k) for k in SimConfig.MARKET_KEYS):
                new.epoch = self.now()  # a new market starts now
                self.config = new
                self.market = self._market()
            else:
                self.config = new
            atomic_json(self.dir / "config.json", self.config.to_dict())
            if clock is not None:
                self.set_clock(float(clock))
            return self.config.to_dict()

    # -- market --------------------------------------------------------------------------------

    def zone_available(self, zone: str, now: float) -> bool:
        if self.outages.get(zone, 0.0) > now:
            return False
        return self.market.available(zone, self.sim_time(now))

    def market_view(self, zones: list[str]) -> dict[str, Any]:
        with self.lock:
            now = self.now()
            t, factor = self.sim_time(now), self.surges.factor
            return {  # the trace's price (None: the offer's), and a surge's factor
                z: {"available": self.zone_available(z, now), "price": self.market.price(z, t)}
                | {"factor": factor(z, now)}
                for z in zones
            }

    def spot_price(self, zone: str, now: float, base: Any) -> float | None:
        """The spot price in ``zone`` now: the trace's, else ``base`` (the offer's), surged."""
        price = self.market.price(zone, self.sim_time(now)) or base
        return None if price is None else float(price) * self.surges.factor(zone, now)

    # -- testing hooks -----------------------------------------------------------------------

    def inject(self, doc: dict[str, Any]) -> None:
        with self.lock:
            self.injected.append(
                {**doc, "times": int(doc.get("times", 1)), "skip": int(doc.get("skip", 0))}
            )

    def _injected(self, operation: str) -> None:
        for e in self.injected:
            if e.get("operation", "launch") != operation or e["times"] <= 0:
                continue
            if e["skip"] > 0:  # calls let through first
                e["skip"] -= 1
                continue
            e["times"] -= 1
            raise SimError(int(e.get("status", 400)), e["kind"], e["code"], "injected error")

    # -- launch --------------------------------------------------------------------------------

    def launch(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.touch()
            self.requests.append(sandbox_.recorded(body))  # its identity's names, no values
            self._injected("launch")
            token = str(body.get("token") or "")
            if token and token in self.by_token:
                return self.view(self.instances[self.by_token[token]])
            cloud = str(body.get("cloud") or "aws")
            if cloud not in RULES:
                raise SimError(400, "invalid", "InvalidParameterValue", f"cloud {cloud!r}")
            rules = rules_for(cloud)
            zone, market = str(body.get("zone") or ""), str(body.get("market") or "spot")
            if not zone or market not in ("spot", "on-demand", "reserved"):
                raise SimError(
                    400, "invalid", "InvalidParameterValue", "zone and market are required"
                )
            now = self.now()
            price = body.get("price")
            held = held_.admit(self, body, now) if market == "reserved" else None
            price = 0.0 if held is not None else price  # held capacity: marginal price 0
            if market == "spot":
                if not self.zone_available(zone, now):
                    raise SimError(
                        409,
                        "capacity",
                        rules.capacity_code,
                        f"no spot capacity for {body.get('instance_type')} in {zone}",
                    )
                price = self.spot_price(zone, now, body.get("spot_price"))
                refuse_price(rules, zone, price, body)
            group = str(body.get("placement_group") or "") or None
            if group is not None and group not in self.groups.groups:
                raise SimError(400, "invalid", "InvalidPlacementGroup.Unknown", f"no group {group}")
            iid = f"sim-{secrets.token_hex(6)}"
            sandbox = self.dir / "instances" / iid
            (sandbox / "work").mkdir(parents=True)
            inst = new_instance(
                iid, body, token, market, price, now, self.config.time_scale, sandbox, group
            )
            inst["metadata_url"] = f"{self.base_url}/i/{iid}"
            inst.update(held or {})
            if market == "spot" and self.config.preempt_first_after_s is not None:
                demo_first(inst, self.instances.values(), now + self.config.preempt_first_after_s)
            if self.config.run_agent:
                self.procs[iid] = sandbox_.start(
                    inst,
                    body,
                    gpu_speed=self.config.gpu_speed.get(inst["instance_type"]),
                    cache_dir=self.dir / "vm-cache",
                )
                inst["pid"] = self.procs[iid].pid  # = the process group id (session leader)
            else:
                inst["has_agent"] = False  # a record only: the caller plays the job
            self.instances[iid] = inst
            self.by_token[inst["token"]] = iid
            self._save(inst)
            log.info("launched %s (%s %s %s) pid %s", iid, cloud, zone, market, inst["pid"])
            return self.view(inst)

    # -- reading -------------------------------------------------------------------------------

    def view(self, inst: dict[str, Any]) -> dict[str, Any]:
        return instance_view(inst)

    def get(self, iid: str) -> dict[str, Any]:
        with self.lock:
            self.touch()
            self._injected("get")
            inst = self.instances.get(iid)
            if inst is None:
                raise SimError(404, "not-found", "InvalidInstanceID.NotFound", f"no instance {iid}")
            return self.view(inst)

    def list_all(self, tags: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Every instance in launch order, as a listing shows it, those with all of ``tags``
        (``GET /v1/instances?tag:KEY=VALUE``, as EC2's ``tag:`` filters) when given."""
        wanted = tags or {}
        with self.lock:
            self.touch()
            self._injected("list")
            found: Iterable[dict[str, Any]] = self.instances.values()
            if wanted:
                found = [
                    i
                    for i in found
                    if all((i.get("tags") or {}).get(k) == v for k, v in wanted.items())
                ]
            return [instance_summary(i) for i in sorted(found, key=lambda i: i["launched_real"])]

    def interruptions(self, since: float) -> list[dict[str, Any]]:
        """What the mimicked cloud's API reports (``rules.api_reports``): preemptions, and
        notices only where that cloud's API does; ``events.jsonl`` has every notice served."""
        path, evs = self.dir / "events.jsonl", []
        with self.lock:
            self.touch()
            for line in path.read_text().splitlines() if path.exists() else []:
                with contextlib.suppress(ValueError):
                    evs.append(json.loads(line))
        return [e for e in evs if e["at_real"] >= since and api_reports(e, self.config)]

    def billing(self, iid: str) -> dict[str, Any]:
        with self.lock:
            inst = self.instances.get(iid)
            if inst is None:
                raise SimError(404, "not-found", "InvalidInstanceID.NotFound", f"no instance {iid}")
            return billing_statement(inst, self.now())

    def alive(self) -> int:
        with self.lock:
            return sum(1 for i in self.instances.values() if i["state"] == "running")

    def busy(self) -> int:
        """Running instances whose process group still has a process (agent or job)."""
        n = 0
        with self.lock:
            for inst in self.instances.values():
                if inst["state"] != "running" or inst.get("killed") or not inst.get("pid"):
                    continue
                try:
                    os.killpg(int(inst["pid"]), 0)
                except ProcessLookupError:
                    continue
                except PermissionError:
                    pass
                n += 1
        return n

    # -- effects -------------------------------------------------------------------------------

    def terminate(self, ids: list[str]) -> list[str]:
        done = []
        with self.lock:
            self.touch()
            self._injected("terminate")
            now = self.now()
            for iid in ids:
                inst = self.instances.get(iid)
                if inst is None or inst["state"] != "running":
                    continue
                rules = rules_for(inst["cloud"])
                inst.update(
                    state="terminated",
                    raw_state=rules.raw_terminated,
                    ended_real=now,
                    state_reason=rules.terminated_reason,
                    kill_at_real=time.time() + self.config.terminate_grace_s,  # processes: real
                )
                self._signal_group(inst, signal.SIGTERM)
                self._save(inst)
                done.append(iid)
        return done

    def preempt(
        self, iid: str, notice_s: float | None = None, outage_s: float = 0.0
    ) -> dict[str, Any]:
        """Serve the notice now (``notice_s`` real seconds; default: the cloud's, scaled)."""
        with self.lock:
            self.touch()
            inst = self.instances.get(iid)
            if inst is None:
                raise SimError(404, "not-found", "InvalidInstanceID.NotFound", f"no instance {iid}")
            now = self.now()
            if inst["state"] == "running" and inst["deadline_real"] is None:
                self._serve_notice(inst, now, "forced", notice_s)
            if outage_s > 0:
                self.outages[inst["zone"]] = max(
                    self.outages.get(inst["zone"], 0.0), now + outage_s
                )
            return self.view(inst)

    def approve(self, iid: str) -> None:
        """Azure: the VM approved its Preempt event; it goes now."""
        with self.lock:
            inst = self.instances.get(iid)
            if (
                inst is not None
                and inst["deadline_real"] is not None
                and inst["state"] == "running"
            ):
                inst["deadline_real"] = min(inst["deadline_real"], self.now())
                self._save(inst)

    def notice_seconds(self, cloud: str) -> float:
        """Seconds (real, or the virtual clock's) between a market notice and the kill for
        ``cloud`` under the current scale: the cloud's notice or ``market_notice_s`` (0: none)."""
        c = self.config
        sim_s = rules_for(cloud).notice_s if c.market_notice_s is None else c.market_notice_s
        if sim_s <= 0:
            return 0.0
        return max(c.notice_floor_s, sim_s / c.time_scale)

    def _serve_notice(
        self, inst: dict[str, Any], now: float, why: str, notice_s: float | None = None
    ) -> None:
        length = self.notice_seconds(inst["cloud"]) if notice_s is None else max(0.0, notice_s)
        inst["notice_real"], inst["deadline_real"] = now, now + length
        if length > 0:  # a zero-length notice is no notice: the capacity just goes
            self._event(inst, "notice", now, f"{inst['cloud']} spot interruption notice ({why})")
        self._save(inst)
        log.info("notice to %s (%s): %.1fs", inst["id"], why, length)

    def _preempt_now(self, inst: dict[str, Any], now: float) -> None:
        rules = rules_for(inst["cloud"])
        self._signal_group(inst, signal.SIGKILL)
        proc = self.procs.pop(inst["id"], None)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            inst["agent_exit"] = proc.returncode
        inst.update(
            state="preempted",
            raw_state=rules.raw_preempted,
            state_reason=rules.preempted_reason,
            ended_real=now,
        )
        self._event(inst, "preempted", now, rules.preempted_reason)
        self._save(inst)
        log.info("preempted %s in %s", inst["id"], inst["zone"])

    def _signal_group(self, inst: dict[str, Any], sig: int) -> None:
        """Signal the instance's process group, unless it was killed already (ids get reused)."""
        if inst.get("pid") and not inst.get("killed"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(inst["pid"]), sig)
            if sig == signal.SIGKILL:
                inst["killed"] = True

    def _event(self, inst: dict[str, Any], kind: str, now: float, raw: str) -> None:
        ev = event_line(inst, kind, now, raw)
        with open(self.dir / "events.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(ev, sort_keys=True) + "\n")

    def _save(self, inst: dict[str, Any]) -> None:
        atomic_json(Path(inst["sandbox"]) / "instance.json", inst)

    # -- sandboxes of ended instances ------------------------------------------------------------

    def _to_sweep(self, inst: dict[str, Any]) -> Path | None:
        """An ended instance's sandbox whose disk may go now, marked swept (under the lock;
        the caller removes it after, outside: a large workdir takes a while)."""
        if not sandbox_.sweepable(inst, self.procs, self.config.keep_sandboxes):
            return None
        inst["swept"] = True
        self._save(inst)
        return Path(inst["sandbox"])

    def _sweep_stale(self) -> None:
        """What a dead server left (see :func:`providers.sim.sandbox.sweep_stale`)."""
        sandbox_.sweep_all([p for p in map(self._to_sweep, self.instances.values()) if p])
        sandbox_.sweep_stale(self.dir, self.instances, self.config.keep_sandboxes)

    # -- the scheduler -------------------------------------------------------------------------

    def tick(self) -> None:
        """One pass: reap, kill what is due, serve notices where capacity goes."""
        real = time.time()  # processes (grace, reaping) run on the real clock
        ended: list[Path] = []
        with self.lock:
            now = self.now()
            for inst in self.instances.values():
                proc = self.procs.get(inst["id"])
                if proc is not None and proc.poll() is not None:
                    inst["agent_exit"] = proc.returncode
                    del self.procs[inst["id"]]
                    self._save(inst)
                if inst["kill_at_real"] is not None and real >= inst["kill_at_real"]:
                    self._signal_group(inst, signal.SIGKILL)
                    inst["kill_at_real"] = None
                    self._save(inst)
                if inst["state"] == "running" and inst.get("block_stop_real") is not None:
                    held_.block_ends(self, inst, now)
                if inst["state"] != "running" or inst["market"] != "spot":
                    continue
                if inst["deadline_real"] is None:
                    why = self._why_preempt(inst, now)
                    if why:
                        self._serve_notice(inst, now, why)
                        if why == "demo" and self.config.demo_outage_s > 0:
                            self.outages[inst["zone"]] = now + self.config.demo_outage_s
                if inst["deadline_real"] is not None and now >= inst["deadline_real"]:
                    self._preempt_now(inst, now)
            for inst in self.instances.values():
                if inst["state"] != "running" and not inst.get("swept"):
                    path = self._to_sweep(inst)
                    if path is not None:
                        ended.append(path)
        sandbox_.sweep_all(ended)
        if real - self._last_reap > 0.5:
            self._last_reap = real
            sandbox_.reap_orphans({p.pid for p in self.procs.values()})

    def _why_preempt(self, inst: dict[str, Any], now: float) -> str | None:
        if inst["demo_at_real"] is not None and now >= inst["demo_at_real"]:
            return "demo"
        rules = rules_for(inst["cloud"])
        if (now - inst["launched_real"]) * inst["time_scale"] < rules.protection_s:
            return None
        if not self.zone_available(inst["zone"], now):
            return "market"
        cap = inst.get("bid_cap")  # a bid sent: the cloud reclaims once the price passes it
        price = self.spot_price(inst["zone"], now, inst.get("spot_base")) or 0.0
        return "price" if cap is not None and rules.price_code and price > cap else None

    def shutdown(self, terminate_all: bool) -> None:
        with self.lock:
            if terminate_all:
                self.terminate([i for i, v in self.instances.items() if v["state"] == "running"])
                for inst in self.instances.values():
                    if inst["kill_at_real"] is not None:
                        self._signal_group(inst, signal.SIGKILL)
                        inst["kill_at_real"] = None
                        self._save(inst)
                for proc in self.procs.values():
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=5)
                self.procs.clear()
