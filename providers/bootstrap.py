"""The one bootstrap script every cloud runs on a new VM (cloud-init user data, GCP startup-script).

:func:`render_bootstrap` returns a POSIX ``sh`` script that

1. writes the job spec as JSON to ``/etc/provisioner/job.json`` (with ``cloud`` set, which tells
   the node agent which metadata endpoint and notice format to poll);
2. finds a Python >= 3.11 (installing one with apt/dnf/yum/zypper/apk if needed);
3. installs provisioner into ``/opt/provisioner/venv`` with pip (``package_spec``: a name with
   extras, a wheel URL, ...; ``pip_args``: e.g. ``--index-url``), once per package spec; with
   ``agent_preinstalled`` it installs nothing (steps 2 and 3 skipped) and only checks that the
   image's ``/opt/provisioner/venv/bin/python3`` imports ``provisioner.agent``;
4. starts ``python3 -m provisioner.agent --spec /etc/provisioner/job.json`` as the systemd unit
   ``provisioner-agent.service``, or with ``nohup`` where there is no systemd.

The script is idempotent (GCP runs a startup script on every boot). It never carries a
credential: the agent uses the VM's own identity (instance role, service account, managed
identity) for the checkpoint store; spec keys or values that look like secrets are refused.
``PROVISIONER_BOOTSTRAP_ROOT`` (unset on a VM) moves every path under a directory and implies
``nohup``; the tests use it to run the script for real.

:func:`user_data_for` is what an adapter sends at launch: the request's ``user_data``, else this
script rendered from its ``job_spec``; a spec that cannot be rendered (a secret in it, over the
cloud's size limit) is ProviderError(INVALID).
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from policies.credentials import looks_like_credential, names_credential
from providers.base import ErrorKind, ProviderError
from providers.facts import cloud_facts
from provisioner.errors import AgentError

if TYPE_CHECKING:
    from provisioner.core.models import LaunchRequest, WheelLink

SPEC_PATH = "/etc/provisioner/job.json"
VENV = "/opt/provisioner/venv"
UNIT = "provisioner-agent.service"
HEREDOC = "PROVISIONER_JOB_SPEC"
#: where the boot script keeps the agent's wheel it fetched (under ``$ROOT``)
WHEEL_DIR = "/var/cache/provisioner/wheels"
#: the spec's key for the job's secret references (variable -> reference, never a value)
REFS_KEY = "secret_refs"

#: The sim has no user-data limit of its own (its sandboxes read the spec from a file); a script
#: rendered for it (tests, demos) may be this large. Every cloud's limit is its fact:
#: ``cloud_facts(cloud).user_data_limit`` (``providers/<cloud>/facts.py``).
SIM_USER_DATA_LIMIT = 1024 * 1024


class BootstrapError(AgentError, ValueError):
    """The spec or the options cannot be made into a safe, small enough bootstrap script."""


def render_bootstrap(
    spec: Mapping[str, Any],
    *,
    cloud: str,
    package_spec: str = "provisioner",
    pip_args: Sequence[str] = (),
    agent_preinstalled: bool = False,
    wheel: WheelLink | None = None,
) -> str:
    """The bootstrap script for ``spec`` on ``cloud`` (raises :class:`BootstrapError`).
    ``agent_preinstalled``: the VM's image already has the agent in ``/opt/provisioner/venv``;
    the script installs nothing and stops with a message where that venv cannot import it.
    ``wheel``: the launching version's wheel, fetched from its short-lived URL and checked
    against its sha256 before pip installs it (with ``pip_args``) in place of
    ``package_spec``; the URL is the one thing in the script that grants any access (to that
    one object, until it expires)."""
    user_data_limit(cloud)  # an unknown cloud is refused before anything is rendered
    if wheel is not None and not agent_preinstalled:
        _check_wheel(wheel)
    if not package_spec.strip():
        raise BootstrapError("empty package spec")
    for where in _secrets_in(spec, "spec"):
        raise BootstrapError(f"{where} looks like a credential; bootstrap scripts carry none")
    for i, arg in enumerate([package_spec, *pip_args]):
        if looks_like_credential(arg):
            raise BootstrapError(f"pip argument {i} carries a credential")

    if package_spec.strip() == "provisioner" and cloud != "sim":
        # the agent reads the cloud's bucket and secret store with the cloud's SDK
        package_spec = f"provisioner[{cloud}]"
    doc = {**spec, "cloud": cloud}
    spec_json = json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=True, default=str)
    quoted_args = " ".join(shlex.quote(a) for a in pip_args)
    marker = " ".join([package_spec, *pip_args])
    package = shlex.quote(package_spec)
    fetch = ""
    if agent_preinstalled:
        install = _PREINSTALLED
    else:
        if wheel is not None:
            extra = "" if cloud == "sim" else f"[{cloud}]"
            package = f'"$ROOT{WHEEL_DIR}/{wheel.filename}{extra}"'
            marker = " ".join([f"sha256:{wheel.sha256}{extra}", *pip_args])
            fetch = _FETCH_WHEEL.format(
                url=shlex.quote(wheel.url),
                sha=wheel.sha256,
                wheel=f'"$ROOT{WHEEL_DIR}/{wheel.filename}"',
            )
        install = _INSTALL.format(pip_args=quoted_args, fetch=fetch.strip("\n") or ":")
    script = _TEMPLATE.format(
        install=install.strip("\n"),
        tools=_tools(doc),
        cloud=cloud,
        job=_comment(str(doc.get("job_id", "?"))),
        attempt=_comment(str(doc.get("attempt", "?"))),
        spec_path=SPEC_PATH,
        venv=VENV,
        unit=UNIT,
        package=package,
        marker=shlex.quote(marker),
        heredoc=HEREDOC,
        spec_json=spec_json,
    )
    check_size(script, cloud)
    return script


def _tools(spec: Mapping[str, Any]) -> str:
    """The shell that makes sure the VM has what the job's road needs: git for a job whose
    code is a git commit; a container engine and, where the VM has NVIDIA GPUs, the NVIDIA
    Container Toolkit (NVIDIA's own package repositories) for a job in an image."""
    out = []
    code = spec.get("code")
    if isinstance(code, Mapping) and code.get("kind") == "git":
        out.append('have git || {{ say "installing git"; pkg_install git; }}')
    if spec.get("container"):
        out.append(_CONTAINER_TOOLS)
    return "\n".join(out).replace("{{", "{").replace("}}", "}")


def user_data_for(
    request: LaunchRequest,
    cloud: str,
    *,
    package_spec: str = "provisioner",
    pip_args: Sequence[str] = (),
    agent_preinstalled: bool = False,
) -> str:
    """The script the VM runs at boot (``""`` when the request has neither script nor spec).
    A request that carries the agent's wheel (``agent_wheel``) installs that wheel."""
    if request.user_data or not request.job_spec:
        return request.user_data
    try:
        return render_bootstrap(
            request.job_spec,
            cloud=cloud,
            package_spec=package_spec,
            pip_args=pip_args,
            agent_preinstalled=agent_preinstalled,
            wheel=request.agent_wheel,
        )
    except BootstrapError as exc:
        raise ProviderError(ErrorKind.INVALID, "Bootstrap", str(exc), provider=cloud) from None


_WHEEL_NAME = re.compile(r"[A-Za-z0-9_.+-]+-py3-none-any\.whl")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _check_wheel(wheel: WheelLink) -> None:
    """A wheel link the script can carry safely: a plain file name, a hex digest, and a URL
    of one line that the VM's Python fetches (https; http and file only for local tests)."""
    if not _WHEEL_NAME.fullmatch(wheel.filename):
        raise BootstrapError(f"{wheel.filename!r} is not a wheel's file name")
    if not _SHA256.fullmatch(wheel.sha256):
        raise BootstrapError("the wheel's sha256 is not 64 hex digits")
    scheme = wheel.url.split("://", 1)[0].lower()
    if scheme not in ("https", "http", "file") or any(c in wheel.url for c in "\n\r\0"):
        raise BootstrapError("the wheel's URL must be one https:// (or file://) line")


#: a requirement that names this project by name only (extras and versions allowed, no URL)
_BY_NAME = re.compile(
    r"\s*provisioner\s*(\[[^\]]*\])?\s*((===|==|~=|!=|<=|>=|<|>)[^@;]*)?(;[^@]*)?",
    re.IGNORECASE,
)


def installs_from_pypi(package_spec: str, pip_args: Sequence[str]) -> bool:
    """Whether the boot script would ask pip for ``provisioner`` by name from PyPI, where that
    name is another project: a requirement with no URL (``provisioner``, ``provisioner[aws]``,
    ``provisioner>=0.1``) and no pip argument that replaces the index (``--index-url``/``-i``,
    ``--no-index``). ``--extra-index-url`` does not count: pip takes the highest version it
    finds on any index, and PyPI's is higher than this project's."""
    if not _BY_NAME.fullmatch(package_spec):
        return False
    return not any(
        arg == "--no-index" or arg.startswith("--index") or arg.startswith("-i")
        for arg in (str(a).strip() for a in pip_args)
    )


def user_data_limit(cloud: str) -> tuple[int, bool]:
    """``cloud``'s user-data limit in bytes, and whether it counts the base64 text (from the
    cloud's facts; :class:`BootstrapError` for a cloud without facts)."""
    if cloud == "sim":
        return SIM_USER_DATA_LIMIT, False
    try:
        facts = cloud_facts(cloud)
    except ValueError as exc:
        raise BootstrapError(str(exc)) from None
    return facts.user_data_limit, facts.user_data_limit_encoded


def check_size(script: str, cloud: str) -> None:
    """Raise :class:`BootstrapError` when ``script`` is over ``cloud``'s user-data limit."""
    limit, encoded = user_data_limit(cloud)
    raw = script.encode()
    size = len(base64.b64encode(raw)) if encoded else len(raw)
    if size > limit:
        how = "base64-encoded " if encoded else ""
        raise BootstrapError(
            f"bootstrap script is {size} bytes {how}for {cloud}; the limit is {limit}"
        )


def spec_from_script(script: str) -> dict[str, Any]:
    """The job spec a rendered script writes (the inverse of the heredoc in the template)."""
    start = script.index(f"<<'{HEREDOC}'\n") + len(HEREDOC) + 5
    end = script.index(f"\n{HEREDOC}\n", start)
    doc = json.loads(script[start:end])
    assert isinstance(doc, dict)
    return doc


def _secrets_in(value: Any, path: str) -> Iterator[str]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}"
            if key == REFS_KEY and isinstance(item, Mapping) and path == "spec":
                # references to secrets (``aws-sm:NAME``), named by the variable they fill:
                # the names may say "token"; the references must not carry one
                for name, ref in item.items():
                    if looks_like_credential(str(ref)):
                        yield f"{where}.{name}"
            elif names_credential(str(key)) and item not in (None, "", False):
                yield where
            else:
                yield from _secrets_in(item, where)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _secrets_in(item, f"{path}[{i}]")
    elif isinstance(value, str) and looks_like_credential(value):
        yield path


def _comment(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)[:80]


_TEMPLATE = r"""#!/bin/sh
# provisioner bootstrap: job {job}, attempt {attempt}, cloud {cloud}.
# Generated by providers.bootstrap. It carries no credentials: the node agent uses this
# VM's own identity (a URL to the agent's wheel, if any, reads that one file for a few
# hours). Safe to run again (GCP runs startup scripts on every boot).
set -eu
umask 022
ROOT="${{PROVISIONER_BOOTSTRAP_ROOT:-}}"
SPEC="$ROOT{spec_path}"
VENV="$ROOT{venv}"
LOG="$ROOT/var/log/provisioner-agent.log"
PACKAGE={package}
MARKER={marker}

say() {{ echo "provisioner-bootstrap: $*" >&2; }}
have() {{ command -v "$1" >/dev/null 2>&1; }}

mkdir -p "$(dirname "$SPEC")" "$(dirname "$LOG")" "$(dirname "$VENV")"
cat > "$SPEC.tmp" <<'{heredoc}'
{spec_json}
{heredoc}
chmod 0644 "$SPEC.tmp"
mv -f "$SPEC.tmp" "$SPEC"
say "job spec written to $SPEC"

pkg_install() {{
  if have apt-get; then
    DEBIAN_FRONTEND=noninteractive apt-get update -q &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
  elif have dnf; then dnf install -y -q "$@"
  elif have yum; then yum install -y -q "$@"
  elif have zypper; then zypper --non-interactive install "$@"
  elif have apk; then apk add --no-cache "$@"
  else say "no package manager to install $*"; return 1
  fi
}}

new_enough() {{
  "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1
}}

find_python() {{
  for py in python3 python3.13 python3.12 python3.11; do
    if have "$py" && new_enough "$py"; then command -v "$py"; return 0; fi
  done
  return 1
}}

{install}

WORK="$ROOT/var/lib/provisioner"
CACHE="$ROOT/var/cache/provisioner"
mkdir -p "$WORK" "$CACHE"
{tools}

agent_alive() {{  # a live agent process (not a zombie, not a reused pid)
  if [ -r "/proc/$1/cmdline" ]; then
    tr '\000' ' ' < "/proc/$1/cmdline" | grep -q "provisioner.agent"
  else
    kill -0 "$1" 2>/dev/null
  fi
}}

if [ -z "$ROOT" ] && have systemctl && [ -d /run/systemd/system ]; then
  cat > /etc/systemd/system/{unit} <<UNIT
[Unit]
Description=provisioner node agent
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
ExecStart=$VENV/bin/python3 -m provisioner.agent --spec $SPEC
WorkingDirectory=$WORK
Environment=PYTHONUNBUFFERED=1
Environment=PROVISIONER_CACHE_DIR=$CACHE
Restart=on-failure
RestartSec=5
KillMode=mixed
TimeoutStopSec=150

[Install]
WantedBy=multi-user.target
UNIT
  systemctl daemon-reload
  systemctl enable --now {unit}
  say "agent started as {unit}"
else
  PIDFILE="$ROOT/run/provisioner-agent.pid"
  mkdir -p "$(dirname "$PIDFILE")"
  if [ -f "$PIDFILE" ] && agent_alive "$(cat "$PIDFILE")"; then
    say "agent already running (pid $(cat "$PIDFILE"))"
  else
    (cd "$WORK" && PROVISIONER_CACHE_DIR="$CACHE" \
      nohup "$VENV/bin/python3" -m provisioner.agent --spec "$SPEC" >>"$LOG" 2>&1 </dev/null &
      echo $! > "$PIDFILE")
    say "agent started with nohup (pid $(cat "$PIDFILE"))"
  fi
fi
"""

#: A job in an image: an engine (Docker from the distribution, else Podman) and, on a VM with
#: NVIDIA GPUs, the NVIDIA Container Toolkit from NVIDIA's repositories, set up for the engine
#: (``nvidia-ctk runtime configure`` for Docker, a CDI spec for Podman). The GPU images listed
#: in docs/clouds.md already carry both; this step then does nothing.
_CONTAINER_TOOLS = r"""
if ! have docker && ! have podman; then
  say "installing a container engine"
  pkg_install docker.io || pkg_install docker || pkg_install moby-engine || pkg_install podman
fi
if have systemctl && [ -d /run/systemd/system ] && have docker && [ -z "$ROOT" ]; then
  systemctl enable --now docker >/dev/null 2>&1 || true
fi
if have nvidia-smi && ! have nvidia-ctk; then
  say "installing the NVIDIA Container Toolkit"
  if have apt-get; then
    have curl || pkg_install curl
    have gpg || pkg_install gnupg
    curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey |
      gpg --dearmor --yes -o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg
    curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list |
      sed 's#deb https://#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://#' \
      > /etc/apt/sources.list.d/nvidia-container-toolkit.list
    pkg_install nvidia-container-toolkit
  elif have dnf || have yum; then
    curl -fsSL https://nvidia.github.io/libnvidia-container/stable/rpm/nvidia-container-toolkit.repo \
      > /etc/yum.repos.d/nvidia-container-toolkit.repo
    pkg_install nvidia-container-toolkit
  elif have zypper; then
    zypper --non-interactive ar https://nvidia.github.io/libnvidia-container/stable/rpm/nvidia-container-toolkit.repo || true
    pkg_install nvidia-container-toolkit
  fi
fi
if have nvidia-ctk && have nvidia-smi; then
  if have docker && [ -z "$ROOT" ]; then
    nvidia-ctk runtime configure --runtime=docker >/dev/null 2>&1 && systemctl restart docker || true
  fi
  if have podman && [ ! -f /etc/cdi/nvidia.yaml ]; then
    mkdir -p /etc/cdi && nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml >/dev/null 2>&1 || true
  fi
fi
"""

#: Python >= 3.11 found or installed, then provisioner into the venv (once per package spec and
#: pip arguments: the marker file holds both); git first where pip is to fetch a git URL.
_INSTALL = r"""
PY=$(find_python) || {{
  say "installing Python >= 3.11"
  pkg_install python3 python3-pip || true
  PY=$(find_python) || {{
    for v in 3.12 3.11; do
      pkg_install "python$v" "python$v-venv" || pkg_install "python$v" "python$v-pip" || true
      PY=$(find_python) && break
    done
  }}
}}
[ -n "${{PY:-}}" ] || {{ say "no Python >= 3.11 could be installed"; exit 1; }}

if [ ! -x "$VENV/bin/python3" ] || [ "$(cat "$VENV/.provisioner-package" 2>/dev/null)" != "$MARKER" ]; then
{fetch}
  say "installing $PACKAGE with $PY"
  case "$PACKAGE" in *git+*) have git || {{ say "installing git"; pkg_install git; }} ;; esac
  if ! "$PY" -m venv "$VENV"; then
    v=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    pkg_install "python$v-venv" || pkg_install python3-venv || true
    "$PY" -m venv "$VENV"
  fi
  "$VENV/bin/python3" -m pip install -q --upgrade pip || say "pip upgrade failed; going on"
  if [ -f "$VENV/.provisioner-package" ]; then  # another build of the same version: replaced
    "$VENV/bin/python3" -m pip uninstall -y -q provisioner || true
  fi
  "$VENV/bin/python3" -m pip install -q {pip_args} "$PACKAGE"
  echo "$MARKER" > "$VENV/.provisioner-package"
fi
"""

#: The launching version's wheel: fetched by the VM's Python from its short-lived URL (three
#: tries), kept only when its sha256 is the one the launch named (else the script stops:
#: never another build than the one launched); a copy already here with that digest is used.
_FETCH_WHEEL = r"""
  WHEEL={wheel}
  WHEEL_SHA256={sha}
  sha_of() {{
    "$PY" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$1"
  }}
  mkdir -p "$(dirname "$WHEEL")"
  if [ ! -f "$WHEEL" ] || [ "$(sha_of "$WHEEL")" != "$WHEEL_SHA256" ]; then
    say "fetching the agent's wheel $(basename "$WHEEL")"
    tries=0
    until "$PY" - {url} "$WHEEL.part" <<'PROVISIONER_FETCH'
import shutil, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=60) as r, open(sys.argv[2], "wb") as f:
    shutil.copyfileobj(r, f)
PROVISIONER_FETCH
    do
      tries=$((tries + 1))
      rm -f "$WHEEL.part"
      [ $tries -lt 3 ] || {{ say "cannot fetch the agent's wheel (its URL may have expired)"; exit 1; }}
      sleep 5
    done
    got=$(sha_of "$WHEEL.part")
    if [ "$got" != "$WHEEL_SHA256" ]; then
      rm -f "$WHEEL.part"
      say "the fetched wheel has sha256 $got, not $WHEEL_SHA256: refused, nothing installed"
      exit 1
    fi
    mv -f "$WHEEL.part" "$WHEEL"
  fi
"""

#: ``agent_preinstalled``: the image carries the agent; nothing is installed, not even Python.
_PREINSTALLED = r"""
if ! "$VENV/bin/python3" -c 'import provisioner.agent' >/dev/null 2>&1; then
  say "agent_preinstalled is set, but $VENV/bin/python3 cannot import provisioner.agent:"
  say "install provisioner into $VENV in the image, or drop agent_preinstalled"
  exit 1
fi
say "using the agent preinstalled in $VENV"
"""
