"""The daemon's configuration file (YAML), validated like a policy: errors name file:line."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from policies.model import parse_duration
from policies.notify import EVENTS, NOTIFY_FILE, TargetName, event_names


def _dur(v: Any) -> timedelta:
    return parse_duration(v)


class MetricsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    port: int = Field(9464, ge=0, le=65535, description="Prometheus port (0: any free port).")
    address: str = "127.0.0.1"
    enabled: bool = True
    ledger_interval: Annotated[
        timedelta, Field(description="Between refreshes of the ledger's totals (counters).")
    ] = timedelta(seconds=60)

    _d = field_validator("ledger_interval", mode="before")(classmethod(lambda cls, v: _positive(v)))


class DashboardConfig(BaseModel):
    """The read-only web page (``provisioner.dashboard``); changes take effect on restart."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = True
    address: str = Field(
        "127.0.0.1", description="Bind address; beyond loopback a token is required."
    )
    port: int = Field(8470, ge=0, le=65535, description="Port (0: any free port).")
    token_env: str = Field(
        "PROVISIONER_DASHBOARD_TOKEN",
        description="Environment variable holding the bearer token (set it in the EnvironmentFile).",
    )
    token_file: str | None = Field(None, description="Or a file holding the token.")
    page_size: int = Field(100, ge=1, le=1000, description="Jobs per page.")
    public_url: str | None = Field(
        None,
        description="The page's address as people reach it (behind a proxy: "
        "https://gpu.example.com/); notifications link each job's page under it. Default: "
        "the address the daemon serves it on.",
    )
    in_process: bool = Field(
        False,
        description="Serve the page in a thread of the daemon instead of its own child process "
        "(the page's load then slows the passes: the interpreter lock is shared).",
    )

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("expected the page's address, http://... or https://...")
        return v


class RateLimit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    messages: int = Field(5, ge=1, le=1000, description="Messages per window, per job and target.")
    per: Annotated[timedelta, Field(description="The window.")] = timedelta(minutes=1)

    _d = field_validator("per", mode="before")(classmethod(lambda cls, v: _positive(v)))


class NotifyConfig(BaseModel):
    """Notifications (docs/daemon.md, "Notifications"): the URLs by name, the default targets
    for every job, and how the outbox is delivered."""

    model_config = ConfigDict(extra="forbid")
    targets_file: str | None = Field(
        NOTIFY_FILE,
        description="`name: URL` lines (mode 0600); PROVISIONER_NOTIFY_<NAME> variables too.",
    )
    targets: list[TargetName] = Field(
        default_factory=list, description="Targets told about every job (names, never URLs)."
    )
    events: list[str] = Field(
        default_factory=lambda: list(EVENTS), description="What the default targets are told of."
    )
    interval: Annotated[timedelta, Field(description="Between looks at the outbox.")] = timedelta(
        seconds=2
    )
    lease: Annotated[
        timedelta, Field(description="A claimed message is another replica's after this.")
    ] = timedelta(seconds=60)
    tries: int = Field(12, ge=1, le=1000, description="Sends of one message before giving up.")
    retry_first: Annotated[timedelta, Field(description="Wait after the first failure.")] = (
        timedelta(seconds=10)
    )
    retry_max: Annotated[timedelta, Field(description="Longest wait between tries.")] = timedelta(
        minutes=10
    )
    rate_limit: RateLimit = Field(default_factory=lambda: RateLimit())
    max_age: Annotated[timedelta, Field(description="Older messages are dropped, not sent.")] = (
        timedelta(hours=24)
    )

    _e = field_validator("events")(classmethod(lambda cls, v: event_names(v)))
    _d = field_validator("interval", "lease", "retry_first", "retry_max", "max_age", mode="before")(
        classmethod(lambda cls, v: _positive(v))
    )


def _positive(v: Any) -> timedelta:
    d = _dur(v)
    if d.total_seconds() <= 0:
        raise ValueError("must be longer than 0 (for example 2s)")
    return d


class DaemonConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    store: str | None = Field(None, description="Store URL; default SQLite in the state directory.")
    reconcile_interval: Annotated[timedelta, Field(description="Between reconcile passes.")] = (
        timedelta(seconds=5)
    )
    interruption_poll_interval: Annotated[
        timedelta,
        Field(
            description="Between interruption polls (one call per provider in use); one that "
            "finds a notice or a preemption starts a pass at once, or right after the pass "
            "in flight."
        ),
    ] = timedelta(seconds=0.5)
    price_refresh_interval: Annotated[timedelta, Field()] = timedelta(hours=1)
    reap_interval: Annotated[timedelta, Field()] = timedelta(seconds=60)
    lease: Annotated[
        timedelta,
        Field(
            description="Job lease, renewed every pass: a replica that stops renewing loses its "
            "jobs to the others after it (takeover within lease + reconcile_interval)."
        ),
    ] = timedelta(seconds=8)
    decide_interval: Annotated[
        timedelta,
        Field(
            description="A running job whose observations did not change is decided again this "
            "often (what changes with time alone: deadline slack, spend against the budget)."
        ),
    ] = timedelta(seconds=120)
    progress_interval: Annotated[
        timedelta, Field(description="A running job's progress is re-read this often.")
    ] = timedelta(seconds=10)
    metrics: MetricsConfig = Field(default_factory=lambda: MetricsConfig())
    dashboard: DashboardConfig = Field(default_factory=lambda: DashboardConfig())
    notify: NotifyConfig = Field(default_factory=lambda: NotifyConfig())
    providers: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Options per provider for price refresh and reaping."
    )

    _d = field_validator(
        "reconcile_interval",
        "interruption_poll_interval",
        "price_refresh_interval",
        "reap_interval",
        "lease",
        "decide_interval",
        "progress_interval",
        mode="before",
    )(classmethod(lambda cls, v: _dur(v)))


def load_config(path: str | None) -> DaemonConfig:
    """Read the config; a missing default file means defaults. Errors name file:line:column."""
    if path is None:
        return DaemonConfig()
    p = Path(path)
    import yaml
    from pydantic import ValidationError

    from policies.loader import PolicyError, PolicyIssue
    from policies.safeyaml import MAX_BYTES, Refusal, compose

    if not p.exists():
        raise PolicyError([PolicyIssue(str(p), None, None, "", "no such file")])
    if not p.is_file():
        raise PolicyError(
            [PolicyIssue(str(p), None, None, "", "is not a regular file (give a YAML file)")]
        )
    try:
        raw = p.open("rb").read(MAX_BYTES + 1)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError([PolicyIssue(str(p), None, None, "", f"cannot be read: {exc}")]) from None
    try:
        # the same bounded reader as policies: no alias bombs, finite numbers
        node, data = compose(text)
        data = data or {}
    except Refusal as exc:
        field = ".".join(str(x) for x in exc.path)
        raise PolicyError([PolicyIssue(str(p), exc.line, exc.column, field, exc.message)]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        raise PolicyError(
            [
                PolicyIssue(
                    str(p),
                    (mark.line + 1) if mark else 1,
                    (mark.column + 1) if mark else 1,
                    "",
                    f"YAML syntax error: {exc.problem}",
                )
            ]
        ) from None
    try:
        return DaemonConfig.model_validate(data)
    except ValidationError as exc:
        issues = []
        for err in exc.errors():
            line, col = _locate(node, tuple(err["loc"]))
            field = ".".join(str(x) for x in err["loc"])
            msg = str(err["msg"]).lower()
            if err["type"] == "value_error":  # our own words, as written
                msg = str((err.get("ctx") or {}).get("error") or err["msg"])
            issues.append(PolicyIssue(str(p), line, col, field, msg))
        raise PolicyError(issues) from None


def _locate(node: Any, loc: tuple[Any, ...]) -> tuple[int, int]:
    import yaml

    best = (1, 1)
    cur = node
    for part in loc:
        if isinstance(cur, yaml.MappingNode):
            nxt = None
            for k, v in cur.value:
                if getattr(k, "value", None) == part:
                    best = (k.start_mark.line + 1, k.start_mark.column + 1)
                    nxt = v
                    break
            if nxt is None:
                break
            cur = nxt
        elif isinstance(cur, yaml.SequenceNode) and isinstance(part, int) and part < len(cur.value):
            cur = cur.value[part]
            best = (cur.start_mark.line + 1, cur.start_mark.column + 1)
        else:
            break
    return best
