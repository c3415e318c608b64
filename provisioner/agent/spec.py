"""The node agent's job spec: what to run, where checkpoints go, which cloud's notices to read.

The controller builds one :class:`AgentSpec` per (job, attempt) and puts ``spec.to_dict()`` in
``LaunchRequest.job_spec``. A cloud adapter renders it into the bootstrap script; the sim
provider writes it to ``<sandbox>/spec.json`` and starts ``python -m provisioner.agent --spec
<sandbox>/spec.json``. The JSON is flat and versioned (``"version": 1``); unknown keys are
rejected so that a typo never passes silently.

Where things live (``<root>`` = ``<checkpoint_uri>/<job_id>``, see :mod:`provisioner.agent.store`):

- checkpoints: ``<root>/checkpoints/<name>/...`` and ``<root>/latest`` (the name of the newest);
- the job's output (``result.json`` ...): ``<root>/output/``;
- progress: ``progress_uri`` (default ``<root>/progress.json``).
"""

from __future__ import annotations

import json
import os
import signal as _signal
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from providers.facts import cloud_facts, known_clouds
from provisioner.errors import AgentError

if TYPE_CHECKING:
    from policies.model import Policy

SPEC_VERSION = 1
#: The clouds whose notices the agent reads: every cloud with facts (``providers/facts.py``);
#: where each serves its metadata is ``cloud_facts(cloud).metadata_base`` (the sim provider
#: overrides it per instance).
CLOUDS = known_clouds()


class SpecError(AgentError, ValueError):
    """A job spec that cannot be used; the message says which field and why."""


@dataclass(frozen=True)
class AgentSpec:
    """Everything the node agent needs; JSON round-trips through :meth:`to_json`/:meth:`from_json`."""

    job_id: str
    attempt: int
    command: list[str]
    checkpoint_uri: str  # fsspec URI of the checkpoint store root (file://, s3://, gs://, az://)
    cloud: str = "aws"  # whose metadata format to poll: aws, gcp, azure, alibaba, tencent
    metadata_url: str = ""  # base URL of the metadata service; "" = the cloud's default
    interval_s: float = 900.0  # periodic checkpoint signal; 0 = none (the job's own only)
    signal: str = "SIGUSR1"  # asks the job to checkpoint now
    grace_s: float = 60.0  # longest a checkpoint may take
    workdir: str = ""  # the job's working directory (its local checkpoints go below it)
    env: dict[str, str] = field(default_factory=dict)
    progress_uri: str = ""  # "" = <checkpoint_uri>/<job_id>/progress.json
    instance_id: str = ""  # for the progress record only
    poll_s: float = 1.0  # metadata poll period (at most 1 s)
    progress_every_s: float = 5.0  # how often progress is written while nothing happens
    probe: str = "off"  # at start: off, quick, full, or file:PATH (see provisioner.probe.node)
    probe_timeout_s: float = 600.0
    gpu_source: str = ""  # utilisation samples: "" (NVML), none, file:PATH (provisioner.probe.idle)
    gpu_sample_s: float = 30.0  # how often utilisation is sampled
    idle_threshold_pct: float | None = None  # report since when all GPUs are under this
    #: overlap on notice: the attempt this one replaces, still under notice when it starts
    #: (0: none); the job starts once that one's checkpoint is in, or ``handover_until``
    handover_from: int = 0
    handover_until: str = ""  # ISO time its capacity goes
    #: the other side: the controller launches a replacement during a notice at least this
    #: long (its boot time; 0: never, a gang), so on Azure this attempt approves its event
    #: only once that replacement has taken over (provisioner.agent.handover.Release)
    overlap_notice_s: float = 0.0
    #: held capacity that ends (a capacity block, a calendar booking): when the agent serves
    #: itself the notice (ISO time), and when the capacity goes (its deadline); "" none
    block_notice_at: str = ""
    block_end: str = ""
    #: a gang (issue 10): this node's rank and the gang's size; the agents meet through the
    #: checkpoint store (provisioner.agent.gang) and give the job torchrun's environment
    node: int = 0
    nodes: int = 1
    #: the address node 0 announces to its peers ("" = the address of its default route)
    advertise_addr: str = ""
    #: the job's road to the VM (provisioner.agent.prepare): its code's descriptor (an archive
    #: in the checkpoint store by digest, or a pinned git commit; {} = none), setup commands
    #: run once per VM, the container image it runs in ({} = none: on the VM itself), and its
    #: secrets as references (variable -> reference; read on the VM, never carried here)
    code: dict[str, Any] = field(default_factory=dict)
    setup: list[str] = field(default_factory=list)
    setup_timeout_s: float = 1800.0
    container: dict[str, Any] = field(default_factory=dict)
    secret_refs: dict[str, str] = field(default_factory=dict)
    region: str = ""  # the VM's region (a secret store's, where a reference names none)
    #: the VM's cache (code archives by digest): "" = $PROVISIONER_CACHE_DIR, else
    #: /var/cache/provisioner where writable, else <workdir>/.cache
    cache_dir: str = ""
    version: int = SPEC_VERSION

    def __post_init__(self) -> None:
        if not self.job_id:
            raise SpecError("job_id: must not be empty")
        if not self.command or not all(isinstance(a, str) for a in self.command):
            raise SpecError("command: expected a non-empty list of strings (argv)")
        if self.cloud not in CLOUDS:
            raise SpecError(f"cloud: {self.cloud!r} is not one of {', '.join(CLOUDS)}")
        if "://" not in self.checkpoint_uri:
            raise SpecError(f"checkpoint_uri: {self.checkpoint_uri!r} is not a URI (file://...)")
        if not hasattr(_signal, self.signal_name):
            raise SpecError(f"signal: unknown signal {self.signal!r}")
        if not 0 < self.poll_s <= 1.0:
            raise SpecError("poll_s: the metadata endpoint is polled at least every second")
        if self.interval_s < 0 or self.grace_s < 0 or self.overlap_notice_s < 0:
            raise SpecError("interval_s, grace_s and overlap_notice_s must not be negative")
        for name in ("block_notice_at", "block_end"):
            value = getattr(self, name)
            if value:
                try:
                    when = datetime.fromisoformat(value)
                except ValueError:
                    raise SpecError(f"{name}: {value!r} is not an ISO 8601 time") from None
                if when.tzinfo is None:
                    raise SpecError(f"{name}: {value!r} has no time zone")
        from provisioner.probe.node import valid_mode

        if not valid_mode(self.probe):
            raise SpecError(f"probe: {self.probe!r} (off, quick, full or file:PATH)")
        if not self.gpu_sample_s > 0 or not self.probe_timeout_s > 0:
            raise SpecError("gpu_sample_s and probe_timeout_s must be positive")
        if self.gpu_source and not (
            self.gpu_source in ("nvml", "none") or self.gpu_source.startswith("file:")
        ):
            raise SpecError(f"gpu_source: {self.gpu_source!r} (nvml, none or file:PATH)")
        if not (1 <= self.nodes <= 64 and 0 <= self.node < self.nodes):
            raise SpecError(
                f"node {self.node} of nodes {self.nodes}: expected 0 <= node < nodes <= 64"
            )
        if self.code and self.code.get("kind") not in ("archive", "git"):
            raise SpecError(f"code: unknown kind {self.code.get('kind')!r} (archive or git)")
        if self.code.get("kind") == "archive" and not (
            self.code.get("uri") and len(str(self.code.get("sha256") or "")) == 64
        ):
            raise SpecError("code: an archive needs its uri and sha256")
        if self.code.get("kind") == "git" and not (
            self.code.get("url") and self.code.get("commit")
        ):
            raise SpecError("code: a git checkout needs its url and commit")
        if self.container and not self.container.get("image"):
            raise SpecError("container: needs an image")
        if not all(isinstance(c, str) for c in self.setup) or not self.setup_timeout_s > 0:
            raise SpecError("setup: a list of shell commands, with a positive setup_timeout_s")
        if self.version != SPEC_VERSION:
            raise SpecError(f"version: {self.version} (this agent reads version {SPEC_VERSION})")

    # -- derived ----------------------------------------------------------------------------

    @property
    def signal_name(self) -> str:
        name = self.signal.upper()
        return name if name.startswith("SIG") else "SIG" + name

    @property
    def signum(self) -> int:
        return int(getattr(_signal, self.signal_name))

    @property
    def job_root(self) -> str:
        """``<checkpoint_uri>/<job_id>``: this job's directory in the checkpoint store."""
        return self.checkpoint_uri.rstrip("/") + "/" + self.job_id

    @property
    def progress_location(self) -> str:
        return self.progress_uri or self.job_root + "/progress.json"

    @property
    def base_metadata_url(self) -> str:
        url = self.metadata_url or os.environ.get("PROVISIONER_METADATA_URL") or ""
        return (url or cloud_facts(self.cloud).metadata_base).rstrip("/")

    def resolved_workdir(self) -> Path:
        return Path(self.workdir or os.getcwd()).resolve()

    def resolved_cache(self) -> Path:
        """The VM's cache directory (see ``cache_dir``)."""
        chosen = self.cache_dir or os.environ.get("PROVISIONER_CACHE_DIR", "")
        if chosen:
            return Path(chosen)
        system = Path("/var/cache/provisioner")
        try:
            system.mkdir(parents=True, exist_ok=True)
            if os.access(system, os.W_OK):
                return system
        except OSError:
            pass
        return self.resolved_workdir() / ".cache"

    # -- JSON -------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgentSpec:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"unknown field(s): {', '.join(unknown)}")
        missing = [k for k in ("job_id", "attempt", "command", "checkpoint_uri") if k not in data]
        if missing:
            raise SpecError(f"missing field(s): {', '.join(missing)}")
        values = dict(data)
        values["attempt"] = int(values["attempt"])
        values["handover_from"] = int(values.get("handover_from") or 0)
        values["node"] = int(values.get("node") or 0)
        values["nodes"] = int(values.get("nodes") or 1)
        values["command"] = list(values["command"])
        values["env"] = {str(k): str(v) for k, v in (values.get("env") or {}).items()}
        refs = values.get("secret_refs") or {}
        values["secret_refs"] = {str(k): str(v) for k, v in refs.items()}
        values["setup"] = [str(c) for c in values.get("setup") or []]
        values["code"] = dict(values.get("code") or {})
        values["container"] = dict(values.get("container") or {})
        if values.get("idle_threshold_pct") is not None:
            values["idle_threshold_pct"] = float(values["idle_threshold_pct"])
        for key in (
            "interval_s",
            "grace_s",
            "poll_s",
            "progress_every_s",
            "probe_timeout_s",
            "gpu_sample_s",
            "setup_timeout_s",
            "overlap_notice_s",
        ):
            if key in values:
                values[key] = float(values[key])
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> AgentSpec:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise SpecError("expected a JSON object")
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AgentSpec:
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def save(self, path: str | os.PathLike[str]) -> None:
        p = Path(path)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(self.to_json(), encoding="utf-8")
        os.replace(tmp, p)

    # -- from a policy ----------------------------------------------------------------------

    @classmethod
    def from_policy(
        cls,
        policy: Policy,
        *,
        job_id: str,
        attempt: int,
        cloud: str = "aws",
        secrets_from: str | None = None,
        **overrides: Any,
    ) -> AgentSpec:
        """The spec for one attempt of a job run under ``policy`` (command, checkpoint, env,
        setup, container, the secrets' references for ``secrets_from``'s VMs: the job's
        provider, ``cloud`` by default). The code's descriptor is the job's (an override)."""
        from policies.job import secret_ref_for

        job = policy.job
        command = job.command
        argv = list(command) if isinstance(command, list) else ["/bin/sh", "-c", command]
        ck = policy.checkpoint
        values: dict[str, Any] = {
            "job_id": job_id,
            "attempt": attempt,
            "command": argv,
            "checkpoint_uri": ck.uri,
            "interval_s": ck.interval.total_seconds(),
            "signal": ck.signal,
            "grace_s": ck.grace.total_seconds(),
            "cloud": cloud,
            "env": dict(job.env),
            "probe": "quick",  # every node the controller starts measures its GPUs first
            "setup": list(job.setup),
            "setup_timeout_s": job.setup_timeout.total_seconds(),
            "container": {} if job.container is None else job.container.model_dump(),
        }
        refs = {n: secret_ref_for(s, secrets_from or cloud) for n, s in job.secrets.items()}
        missing = sorted(n for n, r in refs.items() if r is None)
        if missing:
            raise SpecError(f"secrets: no reference for {secrets_from or cloud}: {missing}")
        values["secret_refs"] = {n: r for n, r in refs.items() if r is not None}
        if policy.idle is not None:
            values["idle_threshold_pct"] = policy.idle.threshold_pct
            # several samples within the idle duration, at most one every 30 s
            values["gpu_sample_s"] = min(30.0, max(1.0, policy.idle.duration.total_seconds() / 6))
        values.update(overrides)
        return cls(**values)
