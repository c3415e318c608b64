"""Target names to notification URLs, kept where only the daemon reads them.

Two sources, by name: a YAML file of ``name: URL`` lines (``/etc/provisioner/notify.yaml`` by
default; refused when group or others may read it: it holds tokens) and environment variables
``PROVISIONER_NOTIFY_<NAME>`` (the systemd unit's ``EnvironmentFile``), which win. Names match
whatever their case and punctuation (``slack-team`` is ``PROVISIONER_NOTIFY_SLACK_TEAM``).

Every URL is registered with :func:`providers.base.register_secret`, whole and by its parts
that look like tokens (a password, path segments and query values with digits or capitals,
an undotted host such as a Discord webhook id), so no log line, event or error shows them.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from policies.notify import ENV_PREFIX, NOTIFY_FILE, TARGET_NAME, env_name
from provisioner.errors import InputError


class TargetsError(InputError, ValueError):
    """The targets file cannot be used (its path and the reason; never its content)."""


def _key(name: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def _token_like(part: str) -> bool:
    return len(part) >= 8 and (
        any(c.isdigit() for c in part) or any(c.isupper() for c in part) or len(part) >= 20
    )


def secret_parts(url: str) -> list[str]:
    """The URL and the parts of it that may be a token, to be scrubbed wherever they appear."""
    parts = [url]
    try:
        u = urlsplit(url)
    except ValueError:
        return parts
    if u.password:
        parts += [u.password, unquote(u.password)]
    host = u.hostname or ""
    if host and "." not in host and _token_like(host):  # discord://WEBHOOK_ID/TOKEN
        parts.append(host)
    if u.username and _token_like(u.username):
        parts.append(u.username)
    for seg in u.path.split("/"):
        if _token_like(unquote(seg)):
            parts += [seg, unquote(seg)]
    for _k, v in parse_qsl(u.query, keep_blank_values=False):
        if _token_like(v):
            parts.append(v)
    return list(dict.fromkeys(p for p in parts if p))


@dataclass
class TargetBook:
    """Target names and their URLs (registered as secrets as soon as they are known)."""

    urls: dict[str, str] = field(default_factory=dict)  # name -> URL (kept by normalised name)
    names: dict[str, str] = field(default_factory=dict)  # normalised name -> name as written
    source: dict[str, str] = field(default_factory=dict)  # normalised name -> where it came from

    def __post_init__(self) -> None:
        from providers.base import register_secret

        given = dict(self.urls)
        self.urls = {_key(k): v for k, v in given.items()}
        self.names = {_key(k): self.names.get(k) or self.names.get(_key(k)) or k for k in given}
        self.source = {_key(k): self.source.get(k) or self.source.get(_key(k)) or "" for k in given}
        for url in self.urls.values():
            for part in secret_parts(url):
                register_secret(part)

    def url(self, name: str) -> str | None:
        return self.urls.get(_key(name))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and _key(name) in self.urls

    def __len__(self) -> int:
        return len(self.urls)

    def listed(self) -> list[tuple[str, str]]:
        """(name, where its URL comes from), sorted: what ``notify test`` and the log show."""
        return sorted((self.names[k], self.source[k]) for k in self.urls)

    @classmethod
    def load(
        cls, path: str | None = NOTIFY_FILE, environ: Mapping[str, str] | None = None
    ) -> TargetBook:
        """The targets from ``path`` (a missing default file is no targets) and ``environ``."""
        env = os.environ if environ is None else environ
        urls: dict[str, str] = {}
        names: dict[str, str] = {}
        source: dict[str, str] = {}
        if path:
            for name, url in _read_file(Path(path), required=path != NOTIFY_FILE).items():
                urls[_key(name)], names[_key(name)], source[_key(name)] = url, name, str(path)
        for var, url in env.items():
            if var.startswith(ENV_PREFIX) and len(var) > len(ENV_PREFIX) and url.strip():
                k = var[len(ENV_PREFIX) :]
                urls[k], source[k] = url.strip(), var
                names.setdefault(k, k.lower().replace("_", "-"))
        return cls(urls, names, source)


def _read_file(p: Path, *, required: bool) -> dict[str, str]:
    import yaml

    from policies.safeyaml import MAX_BYTES, Refusal, compose

    if not p.exists():
        if required:
            raise TargetsError(f"{p}: no such file")
        return {}
    try:
        st = p.stat()
    except OSError as exc:
        raise TargetsError(f"{p}: cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise TargetsError(f"{p}: is not a regular file")
    if st.st_mode & 0o077:
        raise TargetsError(
            f"{p}: group or others may read it (mode {stat.S_IMODE(st.st_mode):04o}) and it "
            f"holds tokens: chmod 600 {p}"
        )
    try:
        text = p.read_bytes()[: MAX_BYTES + 1].decode("utf-8")
        _node, data = compose(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise TargetsError(f"{p}: cannot be read: {exc}") from None
    except Refusal as exc:
        raise TargetsError(f"{p}:{exc.line}:{exc.column}: {exc.message}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise TargetsError(f"{p}{where}: YAML syntax error: {exc.problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TargetsError(f"{p}: expected `name: URL` lines (a mapping)")
    out: dict[str, str] = {}
    for name, url in data.items():
        if not isinstance(name, str) or not TARGET_NAME.match(name):
            raise TargetsError(
                f"{p}: {str(name)[:40]!r} is not a target name (letters, digits, `_.-`)"
            )
        if not isinstance(url, str) or "://" not in url:
            raise TargetsError(
                f"{p}: {name}: expected an apprise URL (slack://..., mailto://..., "
                f"https://...); or set {env_name(name)}"
            )
        out[name] = url.strip()
    return out
