"""What a drill runs with: its target (cloud, region, GPU, money), the job's pacing, and the
policy it writes for its own job.

The drill's job must outlast the cloud's notice: it is paced (``step_seconds``) so that it
runs about three notices long, and it is interrupted once a quarter of it is done. Its price
cap follows from ``--max-cost``: at most two instances (the interrupted one and its
replacement) for the drill's whole time limit must fit, so the cap per instance-hour is
``max_cost / (2 x the limit in billed hours)``; its budget is ``max_cost``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from providers.facts import cloud_facts

#: the drill's time limit, launch to cleanup (the sim's: well under two minutes)
TIMEOUT_S = {"sim": 100.0}
CLOUD_TIMEOUT_S = 1800.0
STEPS = 60


@dataclass
class DrillTarget:
    """One drill: where, on what, for how much."""

    provider: str  # sim, aws, gcp, azure, alibaba, tencent
    max_cost: float  # USD, the most the drill may spend
    state_dir: Path
    region: str | None = None
    gpu: str | None = None  # one GPU name; None: any GPU; "none": a CPU type (see cpu)
    policy_path: str | None = None  # the user's policy: its rules, the drill's job
    checkpoint_uri: str | None = None  # required on a cloud (s3://, gs://, az://, shared file://)
    mimic: str = "aws"  # the cloud the sim plays
    provider_options: dict[str, Any] = field(default_factory=dict)
    steps: int = STEPS
    step_seconds: float | None = None  # None: from the cloud's notice
    timeout_s: float | None = None
    python: str = "python3"  # the VM's interpreter (the sim's: this one)

    @property
    def cloud(self) -> str:
        """The cloud whose notice format and rules apply (the sim's mimicked one)."""
        return self.mimic if self.provider == "sim" else self.provider

    @property
    def cpu(self) -> bool:
        """``--gpu none``: the drill runs on a small CPU instance type (provisioner/drill/cpu.py)."""
        return (self.gpu or "").strip().lower() == "none"

    @property
    def notice_s(self) -> float:
        return float(cloud_facts(self.cloud).notice_s)

    def limit_s(self) -> float:
        if self.timeout_s is not None:
            return self.timeout_s
        return TIMEOUT_S.get(self.provider, CLOUD_TIMEOUT_S)

    def pace(self) -> float:
        """Seconds per step: the sim's job runs about 12 s; a cloud's three notices long."""
        if self.step_seconds is not None:
            return self.step_seconds
        if self.provider == "sim":
            return 0.2
        return max(0.2, 3 * self.notice_s / self.steps)

    def billed_hours(self, seconds_per_hour: float = 3600.0) -> float:
        """The longest the drill can be billed for, in the provider's hours, both instances."""
        return 2 * self.limit_s() / seconds_per_hour

    def bid_cap(self) -> float:
        # the sim bills its own hours: a minute of its clock is a real second by default
        default = 60.0 if self.provider == "sim" else 3600.0
        sph = float(self.provider_options.get("seconds_per_hour", default))
        return round(self.max_cost / self.billed_hours(sph), 4)


def sim_options(target: DrillTarget, directory: Path) -> dict[str, Any]:
    """The sim's options for a drill: its own server, no random preemption, no demo."""
    return {
        "state_dir": str(directory / "sim"),
        "mimic": target.mimic,
        "seconds_per_hour": 60,
        "mtbp_hours": None,
        "preempt_first_after_s": 0,
        "idle_exit_s": 300,
        **target.provider_options,
    }


def job_command(target: DrillTarget) -> list[str]:
    python = sys.executable if target.provider == "sim" else target.python
    return [
        python,
        "-m",
        "provisioner.drill.job",
        "--steps",
        str(target.steps),
        "--step-seconds",
        f"{target.pace():g}",
    ]


def policy_doc(
    target: DrillTarget, checkpoint_uri: str, user: dict[str, Any] | None
) -> dict[str, Any]:
    """The drill's policy: the user's rules where given (its job replaced by the drill's), any
    spot GPU otherwise, cheapest first, capped by ``--max-cost``."""
    from provisioner.agent.notices import ENV_DRILL_NOTICE, FROM_STORE

    doc: dict[str, Any] = dict(user or {})
    doc["name"] = "drill"
    job = {
        "command": job_command(target),
        "compute_hours": round(target.steps * target.pace() / 3600, 4),
        "env": {ENV_DRILL_NOTICE: FROM_STORE} if target.cloud in ("alibaba", "tencent") else {},
    }
    old_job = doc.get("job") or {}
    for key in ("image", "disk_gb"):
        if key in old_job:
            job[key] = old_job[key]
    doc["job"] = job
    resources = dict(doc.get("resources") or {})
    resources.pop("nodes", None)  # one instance: the drill is not a gang drill
    resources["gpu_count"] = 1
    caps = dict(doc.get("bid_cap") or {})
    if target.cpu:
        # --gpu none: the drill places the job on its own CPU offers (provisioner/drill/cpu.py);
        # a policy asks for a GPU, so these resources are not what is placed on, and caps
        # per GPU-hour or as a share of an on-demand price that may be unknown do not apply
        for key in ("gpus", "exclude_gpus", "min_vram_gb", "workload", "min_measured_fraction"):
            resources.pop(key, None)
        caps.pop("max_spot_price_per_gpu_hour", None)
        caps.pop("max_fraction_of_on_demand", None)
    elif target.gpu:
        resources["gpus"] = [target.gpu]
    doc["resources"] = resources
    doc["market"] = "spot"
    cap = target.bid_cap()
    caps["max_spot_price_per_hour"] = min(cap, caps.get("max_spot_price_per_hour") or cap)
    doc["bid_cap"] = caps
    doc["budget"] = {"max_total": target.max_cost, "on_exhausted": "stop"}
    doc.pop("deadline", None)
    doc.pop("windows", None)
    doc.pop("idle", None)
    doc.pop("notify", None)
    residency = dict(doc.get("residency") or {})
    residency["providers"] = [target.cloud]
    if target.region:
        residency["allow_regions"] = [target.region]
    doc["residency"] = residency
    doc["preferences"] = {"price": 1.0, "interruption_risk": 0.0}
    doc["checkpoint"] = {
        "uri": checkpoint_uri,
        "shared": checkpoint_uri.startswith("file://"),
        "interval": "1h",  # the notice's checkpoint is the one under test
        "grace": "20s",
    }
    doc["restart"] = {"max_restarts": 3, "zone_cooldown": "30m"}
    return doc
