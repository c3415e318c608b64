"""The sim's documents about an instance: its API view, its bill, its interruption event line,
and the atomic write of its state file. Pure, apart from :func:`atomic_json`."""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from providers.sim.rules import rules_for


def new_instance(
    iid: str,
    body: dict[str, Any],
    token: str,
    market: str,
    price: Any,
    now: float,
    time_scale: float,
    sandbox: Path,
    group: str | None,
) -> dict[str, Any]:
    """A launched instance's record (``instance.json``), from the launch's ``body``."""
    rules = rules_for(str(body.get("cloud") or "aws"))
    return {
        "id": iid,
        "token": token or iid,
        "cloud": str(body.get("cloud") or "aws"),
        "region": str(body.get("region") or ""),
        "zone": str(body.get("zone") or ""),
        "instance_type": str(body.get("instance_type") or ""),
        "market": market,
        "price_per_hour": None if price is None else float(price),
        "bid_cap": body.get("bid_cap"),
        "price_ceiling": body.get("price_ceiling"),  # the cap, sent as a bid or not
        "spot_base": body.get("spot_price"),  # the offer's spot price (a surge multiplies it)
        "tags": {str(k): str(v) for k, v in (body.get("tags") or {}).items()},
        "state": "running",
        "raw_state": rules.raw_running,
        "state_reason": "",
        "launched_real": now,
        "ended_real": None,
        "time_scale": time_scale,
        "sandbox": str(sandbox),
        "metadata_url": "",
        "pid": None,
        "agent_exit": None,
        "notice_real": None,
        "deadline_real": None,
        "event_id": str(uuid.uuid4()),
        "demo_at_real": None,
        "kill_at_real": None,
        "killed": False,
        "has_agent": body.get("spec") is not None,
        "placement_group": group,
    }


def atomic_json(path: Path, doc: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:6]}")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def iso(ts: float | None) -> str | None:
    return (
        None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
    )


#: What a listing says of each instance, as a cloud's describe call does: no job spec, launch
#: token or sandbox (``get`` has those). At 10,000 instances the full records came to 8 MB a list.
SUMMARY_FIELDS = (
    "id",
    "cloud",
    "region",
    "zone",
    "instance_type",
    "market",
    "state",
    "raw_state",
    "state_reason",
    "tags",
    "launched_real",
    "ended_real",
    "notice_real",
    "deadline_real",
    "price_per_hour",
)


def instance_summary(inst: dict[str, Any]) -> dict[str, Any]:
    """An instance as a listing shows it (see :data:`SUMMARY_FIELDS`)."""
    return {k: inst.get(k) for k in SUMMARY_FIELDS}


def instance_view(inst: dict[str, Any]) -> dict[str, Any]:
    """What the API answers about an instance (its times as ISO 8601)."""
    out = {k: v for k, v in inst.items() if k not in ("event_id",)}
    out["launched_at"] = iso(inst["launched_real"])
    out["ended_at"] = iso(inst["ended_real"])
    out["notice_at"] = iso(inst["notice_real"])
    out["deadline"] = iso(inst["deadline_real"])
    return out


def billing_statement(inst: dict[str, Any], now: float) -> dict[str, Any]:
    """What the instance has cost so far, by its cloud's billing rule over simulated time."""
    rules = rules_for(inst["cloud"])
    end = inst["ended_real"] or now
    real = max(0.0, end - inst["launched_real"])
    sim = real * inst["time_scale"]
    billed = rules.billed_seconds(sim)
    price = inst["price_per_hour"] or 0.0
    return {
        "instance_id": inst["id"],
        "cloud": inst["cloud"],
        "rule": rules.billing_rule,
        "running": inst["ended_real"] is None,
        "real_seconds": round(real, 3),
        "sim_seconds": round(sim, 3),
        "billed_seconds": billed,
        "price_per_hour": inst["price_per_hour"],
        "cost": round(billed / 3600.0 * price, 6),
    }


def event_line(inst: dict[str, Any], kind: str, now: float, raw: str) -> dict[str, Any]:
    """One line of ``events.jsonl``: a notice or a preemption."""
    return {
        "instance_id": inst["id"],
        "zone": inst["zone"],
        "cloud": inst["cloud"],
        "kind": kind,
        "at_real": now,
        "at": iso(now),
        "deadline": iso(inst["deadline_real"]),
        "raw": raw,
    }
