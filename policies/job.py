"""The ``job:`` section of a policy: what runs, with which code, setup, container and secrets.

The job is the portable unit (a machine image is per cloud and per region): its code comes
from a local directory packed at ``up`` (``workdir``) or a pinned git commit (``git``), its
``setup`` runs once per VM, it may run inside a ``container`` image, and its ``secrets`` are
read on the VM from the cloud's own secret store. ``env`` carries plain settings only: a
value or a name that looks like a credential is refused here, with the fix.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from policies.credentials import looks_like_credential, names_credential
from policies.durations import parse_duration
from policies.secretref import SecretRefError, parse_secret_ref
from policies.strict import StrictModel as _Model

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: variables the node agent sets for the job (docs/agent.md): a policy may not set them
RESERVED_PREFIX = "PROVISIONER_"

SECRET_CLOUDS = ("sim", "aws", "gcp", "azure", "alibaba", "tencent")
#: the forms, short enough for a one-line error (all of them: docs/policy.md)
SHORT_FORMS = (
    "use sim:NAME, aws-sm:NAME, aws-ssm:/PARAM, gcp-sm:projects/P/secrets/S, "
    "azure-kv:https://VAULT.vault.azure.net/secrets/NAME, alibaba-kms:NAME or tencent-ssm:NAME"
)


def secret_cloud(ref: str) -> str | None:
    """The cloud whose secret store ``ref`` names (``sim``, ``aws``, ...), or None when it is
    not a reference (:mod:`policies.secretref`)."""
    try:
        return parse_secret_ref(ref).cloud
    except SecretRefError:
        return None


def _env_name(name: str) -> str:
    if not _ENV_NAME.match(name):
        raise ValueError(f"{name!r} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
    if name.startswith(RESERVED_PREFIX):
        raise ValueError(f"{name}: names starting with {RESERVED_PREFIX} are set by the agent")
    return name


def _plain_setting(value: str) -> str:
    if looks_like_credential(value):
        raise ValueError(
            "this value looks like a credential; job.env is written into the VM's boot script "
            "and the store: put it in your cloud's secret store and name it in job.secrets "
            "(e.g. job.secrets: {HF_TOKEN: aws-sm:hf-token}; on the sim, sim:NAME)"
        )
    return value


def _ref(value: str) -> str:
    if looks_like_credential(value):
        raise ValueError(
            "this is a credential, not a reference to one: store it in your cloud's secret "
            f"store and name it here ({SHORT_FORMS})"
        )
    try:
        parse_secret_ref(value)
    except SecretRefError as exc:
        raise ValueError(f"{exc.problem}; {SHORT_FORMS}") from None
    return value


def _env_key(name: str) -> str:
    _env_name(name)
    if names_credential(name):
        raise ValueError(
            "names a credential; job.env is written into the VM's boot script and the "
            f"store: move it to job.secrets (e.g. job.secrets: {{{name}: aws-sm:NAME}}; on the "
            "sim, sim:NAME with PROVISIONER_SIM_SECRETS)"
        )
    return name


EnvName = Annotated[str, AfterValidator(_env_name)]
EnvKey = Annotated[str, AfterValidator(_env_key)]


def _secret_spec(value: Any) -> Any:
    """One reference, or one per cloud: checked here whole, so a bad one is one error."""
    if isinstance(value, str):
        return _ref(value)
    if not isinstance(value, dict) or not value:
        raise ValueError(
            "expected a reference (sim:NAME, aws-sm:NAME, ...) or one per cloud "
            "({aws: aws-sm:NAME, gcp: gcp-sm:projects/P/secrets/S})"
        )
    for cloud, ref in value.items():
        if cloud not in SECRET_CLOUDS:
            raise ValueError(f"{cloud!r} is not a cloud ({', '.join(SECRET_CLOUDS)})")
        if not isinstance(ref, str):
            raise ValueError(f"{cloud}: expected a reference, got {type(ref).__name__}")
        _ref(ref)
        if secret_cloud(ref) != cloud:
            raise ValueError(f"{cloud}: {ref!r} is not a {cloud} secret reference")
    return value


#: one reference, or one per cloud ({aws: aws-sm:x, gcp: gcp-sm:...}) for a job that may run
#: on several (a reference is read with the VM's own identity, so only in its own cloud)
SecretSpec = Annotated[str | dict[str, str], BeforeValidator(_secret_spec)]


def secret_ref_for(spec: str | dict[str, str], cloud: str) -> str | None:
    """The reference of ``spec`` that a VM of ``cloud`` reads (None: it has none there)."""
    if isinstance(spec, str):
        return spec if secret_cloud(spec) == cloud else None
    return spec.get(cloud)


class Git(_Model):
    url: str = Field(
        min_length=1, description="Repository URL (https://, ssh://, git@host:path or a path)."
    )
    ref: str = Field(
        "HEAD",
        min_length=1,
        description="Branch, tag or commit; pinned to its commit at `up`, so every restart "
        "runs the same code.",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if looks_like_credential(v):
            raise ValueError(
                "the URL carries a credential: use a public URL, or pack a local checkout "
                "with job.workdir"
            )
        return v


class Container(_Model):
    image: str = Field(min_length=1, description="Image to run setup and command in.")
    run_args: list[str] = Field(
        default_factory=list,
        description="Extra arguments for `docker run` / `podman run` (e.g. --shm-size=16g).",
    )
    engine: Literal["auto", "docker", "podman"] = Field(
        "auto", description="auto: docker where installed, else podman."
    )

    @field_validator("run_args")
    @classmethod
    def _args(cls, v: list[str]) -> list[str]:
        for arg in v:
            if looks_like_credential(arg):
                raise ValueError("run_args carry a credential: name it in job.secrets")
            if arg.split("=", 1)[0] in ("-e", "--env", "--env-file") and "=" in arg[3:]:
                raise ValueError("set variables with job.env or job.secrets, not run_args")
        return v


def _setup_timeout(v: Any) -> timedelta:
    d = parse_duration(v)
    if d.total_seconds() <= 0:
        raise ValueError("must be longer than 0 (for example 30m)")
    return d


class Job(_Model):
    command: list[str] | str = Field(
        default_factory=lambda: ["python", "-m", "examples.train"],
        description="Command the node agent runs (argv list or shell string), in the code's "
        "directory.",
    )
    compute_hours: float | None = Field(
        None, gt=0, description="Hours the job needs on one reference GPU (sizes duration)."
    )
    reference_gpu: str = Field("A100", description="GPU that compute_hours was measured on.")
    env: dict[EnvKey, Annotated[str, AfterValidator(_plain_setting)]] = Field(
        default_factory=dict, description="Plain environment settings (no credentials)."
    )
    image: str | None = Field(None, description="Machine image (AMI, GCP image, ...).")
    disk_gb: int = Field(100, ge=10, le=65536)
    workdir: str | None = Field(
        None,
        description="Local directory with the job's code, packed at `up` (relative to the "
        "policy file); .gitignore and .provisionerignore are respected.",
    )
    workdir_max_mb: int = Field(
        1024, ge=1, le=65536, description="Refuse a workdir larger than this (after ignores)."
    )
    git: Git | None = Field(None, description="Code from a git repository instead of workdir.")
    setup: list[str] = Field(
        default_factory=list, description="Shell commands run once per VM before the job."
    )
    setup_timeout: Annotated[timedelta, Field(description="Longest setup may take.")] = timedelta(
        minutes=30
    )
    container: Container | None = Field(None, description="Run setup and command in an image.")
    secrets: dict[EnvName, SecretSpec] = Field(
        default_factory=dict,
        description="Environment variables read on the VM from the cloud's secret store.",
    )

    _st = field_validator("setup_timeout", mode="before")(
        classmethod(lambda cls, v: _setup_timeout(v))
    )

    @field_validator("setup", mode="before")
    @classmethod
    def _setup(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _one_source(self) -> Job:
        if self.workdir is not None and self.git is not None:
            raise ValueError("give job.workdir or job.git, not both")
        both = set(self.env) & set(self.secrets)
        if both:
            raise ValueError(f"{', '.join(sorted(both))}: set in both job.env and job.secrets")
        return self
