"""What ``up`` (and ``provisioner.submit``) check and prepare before a job is written.

Everything a VM will need is settled here, on the user's machine, so that a job that cannot
run is refused at once with its ``file:line`` and the fix, and nothing is half-launched:

- **the checkpoint store**: the policy's, else the provider's configured default bucket
  (``providers.yaml``'s ``checkpoint_uri``), made absolute; a real cloud's VM cannot reach a
  path on this machine, so ``file://`` is refused there with the fix;
- **the secrets**: each ``job.secrets`` entry must name a reference this provider's VMs can
  read (a ``sim:`` one on the sim: it must be in ``$PROVISIONER_SIM_SECRETS``); values are
  never read here for a cloud (the VM reads them with its own identity);
- **the code**: ``job.workdir`` packed into a content-addressed archive and put in the
  checkpoint store (once per digest), or ``job.git``'s ref pinned to its commit;
- **the agent's package**: on a real cloud the VM's boot script installs provisioner with pip.
  By default it installs the version running here: a wheel of it made here and put in the
  checkpoint store once per digest (:mod:`provisioner.agentwheel`; the daemon links it afresh
  at each launch). ``package_spec`` in the provider options names another package instead (it
  must not be ``provisioner`` from PyPI, another project), and ``agent_preinstalled`` says
  the image has it.

The result (:class:`Prepared`) is what the job's row keeps: the store's URI and the code's
descriptor, never the code or a secret.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from policies.job import secret_cloud, secret_ref_for
from policies.loader import PolicyError, PolicyIssue, issue_at
from policies.model import Policy
from provisioner.jobcode import CodeError

#: schemes a VM cannot reach: paths on the machine that ran ``up``
LOCAL_SCHEMES = ("file", "memory")
#: the bucket each cloud's VMs can use with their own identity (the form ``checkpoint.uri``
#: takes), for the messages; adlfs finds the storage account in the URI's host
BUCKETS = {
    "aws": "s3://BUCKET/PREFIX",
    "gcp": "gs://BUCKET/PREFIX",
    "azure": "abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/PREFIX",
}
#: clouds whose VMs can use no bucket scheme the policy accepts with their own identity (no
#: fsspec store reads OSS or COS with an ECS RAM role or a CVM CAM role): the VM's identity,
#: and the shared filesystem to mount instead
NO_BUCKET = {
    "alibaba": ("an ECS RAM role", "OSS", "a NAS file system"),
    "tencent": ("a CVM CAM role", "COS", "a CFS file system"),
}


@dataclass(frozen=True)
class Prepared:
    checkpoint_uri: str
    code: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def _cloud_of(provider: str) -> str:
    return "sim" if provider == "sim" else provider


def checkpoint_store(policy: Policy, provider: str, cwd: str) -> tuple[str, str | None]:
    """The job's checkpoint store (absolute) and the problem with it for ``provider``, if any."""
    from provisioner.control.records import resolve_checkpoint_uri
    from provisioner.providers_config import default_checkpoint_uri

    uri = policy.checkpoint.uri
    if "uri" not in policy.checkpoint.model_fields_set:
        uri = default_checkpoint_uri(provider) or uri
    uri = resolve_checkpoint_uri(uri, cwd)
    scheme = uri.split("://", 1)[0]
    if provider != "sim" and scheme in LOCAL_SCHEMES and not policy.checkpoint.shared:
        if provider in NO_BUCKET:
            role, store, filesystem = NO_BUCKET[provider]
            return uri, (
                f"{uri} is on this machine: a {provider} VM cannot reach it, and no bucket "
                f"works with {role} yet ({store} is not supported as a checkpoint store, and "
                "a bucket on another cloud would need credentials on the VM). Mount "
                f"{filesystem} at this path on every VM (in the image) and on this machine, "
                "and set `checkpoint.shared: true`"
            )
        bucket = BUCKETS.get(provider, "a bucket the VM can reach")
        return uri, (
            f"{uri} is on this machine: a {provider} VM cannot reach it. Name a bucket here "
            f"({bucket}), or set {provider}'s default with `checkpoint_uri:` in "
            "~/.config/provisioner/providers.yaml (`provisioner providers` shows it); a "
            "filesystem every VM mounts at this path (EFS, NFS) takes `checkpoint.shared: true`"
        )
    return uri, None


def package_problem(provider: str, options: Mapping[str, Any]) -> str | None:
    """Why a ``provider`` VM could not start the agent with these provider options, or None.

    Without ``package_spec`` the boot script installs the running version's wheel from the
    checkpoint store (:func:`carry_wheel` puts it there): nothing to check here. With one, it
    runs ``pip install PACKAGE_SPEC`` from the VM's index, PyPI unless ``pip_args`` replaces
    it; PyPI's ``provisioner`` is an unrelated project without the agent. Refused unless the
    spec is a URL (a wheel, a git ref), the index is replaced, or ``agent_preinstalled`` says
    the image has the agent. A provider with no cloud facts (an unknown name) sends no boot
    script of ours: left be."""
    if provider == "sim" or options.get("agent_preinstalled") or not options.get("package_spec"):
        return None
    from providers.bootstrap import installs_from_pypi
    from providers.facts import cloud_facts

    try:
        cloud_facts(provider)
    except (ValueError, TypeError):  # no cloud facts: no boot script of ours to install from
        return None

    spec = str(options.get("package_spec") or "provisioner").strip()
    args = options.get("pip_args") or ()
    if isinstance(args, str):
        args = [args]
    if not installs_from_pypi(spec, [str(a) for a in args]):
        return None
    shown = f"provisioner[{provider}]" if spec == "provisioner" else spec
    return (
        f"a {provider} VM would run `pip install '{shown}'` (as package_spec says) from PyPI, "
        "where `provisioner` is another project: the agent would never start. Leave "
        "package_spec out (the VM then installs this version's wheel from the checkpoint "
        f"store), or name this project's package: a wheel you host, -o 'package_spec="
        f"provisioner[{provider}] @ https://HOST/provisioner-VERSION-py3-none-any.whl'; a git "
        f"tag, -o 'package_spec=provisioner[{provider}] @ git+https://HOST/REPO.git@TAG'; or "
        "your own index, -o 'pip_args=[--index-url, https://HOST/simple]'"
    )


def carry_wheel(
    provider: str, options: Mapping[str, Any], checkpoint_uri: str, say: Callable[[str], None]
) -> tuple[str | None, str | None]:
    """Put the running version's wheel in the checkpoint store for the job's VMs (when the
    provider options leave the package to us), and sign one URL to it as the daemon will at
    each launch, so that a store or identity that cannot do either is refused now. (a note,
    the problem) -- both None when the options name the package or the image has it."""
    from provisioner.agentwheel import WheelError
    from provisioner.agentwheel.carry import URL_LIFETIME, ensure_stored, wanted
    from provisioner.agentwheel.sign import signed_url

    if not wanted(provider, options):
        return None, None
    try:
        from provisioner.agentwheel.build import running_wheel

        wheel = running_wheel()
        say(f"putting the agent's wheel ({wheel.size} bytes) in {checkpoint_uri}")
        uri, sent = ensure_stored(wheel, checkpoint_uri)
        # a trial signature, thrown away: the cloud checks it against the real time
        signed_url(uri, datetime.now(UTC), URL_LIFETIME)
    except WheelError as exc:
        return None, (
            f"a {provider} VM installs this version of provisioner from the checkpoint store, "
            f"but {exc}. Name the package instead: -o 'package_spec=provisioner[{provider}] "
            "@ https://HOST/provisioner-VERSION-py3-none-any.whl' (a wheel you host; a git "
            f"tag takes 'provisioner[{provider}] @ git+https://HOST/REPO.git@TAG'), or -o "
            "agent_preinstalled=true for an image with the agent in /opt/provisioner/venv; "
            f"under `{provider}:` in ~/.config/provisioner/providers.yaml they are set once"
        )
    state = "uploaded" if sent else "already in the store"
    return f"agent: provisioner {wheel.version} (sha256-{wheel.sha256[:12]}, {state})", None


def _secrets(policy: Policy, provider: str) -> list[tuple[tuple[Any, ...], str]]:
    if not policy.job.secrets:
        return []
    from providers.secrets import SecretError, SecretRefError, parse_secret_ref, read_secret

    cloud = _cloud_of(provider)
    problems: list[tuple[tuple[Any, ...], str]] = []
    for name, spec in policy.job.secrets.items():
        loc: tuple[Any, ...] = ("job", "secrets", name)
        ref = secret_ref_for(spec, cloud)
        if ref is None:
            clouds = sorted({secret_cloud(spec) or "?"} if isinstance(spec, str) else set(spec))
            problems.append(
                (
                    loc,
                    f"no reference a {provider} VM can read (it names {', '.join(map(str, clouds))}"
                    f"); give one per cloud: {{{cloud}: ...}}",
                )
            )
            continue
        try:
            parsed = parse_secret_ref(ref)
        except SecretRefError as exc:
            problems.append((loc, str(exc)))
            continue
        if parsed.cloud == "sim":  # the sim's store is a file here: read it now
            try:
                read_secret(parsed)
            except SecretError as exc:
                problems.append((loc, str(exc)))
    return problems


def _code(
    policy: Policy, base: Path, checkpoint_uri: str, say: Callable[[str], None]
) -> tuple[dict[str, Any], list[str]]:
    job = policy.job
    if job.workdir is not None:
        from provisioner.jobcode.archive import pack, upload

        root = (base / os.path.expanduser(job.workdir)).resolve()
        say(f"packing {root}")
        packed = pack(root, max_bytes=job.workdir_max_mb * 1024 * 1024)
        try:
            say(f"putting the code ({packed.size} bytes) in {checkpoint_uri}")
            uri, sent = upload(packed, checkpoint_uri)
        finally:
            packed.path.unlink(missing_ok=True)
        note = (
            f"code: {root} -> {packed.files} files, {packed.content_bytes} bytes "
            f"(sha256-{packed.sha256[:12]}, {'uploaded' if sent else 'already in the store'})"
        )
        return {
            "kind": "archive",
            "uri": uri,
            "sha256": packed.sha256,
            "size": packed.size,
            "files": packed.files,
        }, [note]
    if job.git is not None:
        from provisioner.jobcode.git import pin

        say(f"pinning {job.git.url} {job.git.ref}")
        commit = pin(job.git.url, job.git.ref)
        desc = {"kind": "git", "url": job.git.url, "ref": job.git.ref, "commit": commit}
        return desc, [f"code: {job.git.url} {job.git.ref} pinned at {commit[:12]}"]
    return {}, []


def prepare(
    policy: Policy,
    *,
    provider: str,
    provider_options: Mapping[str, Any] | None = None,
    policy_path: str | None = None,
    policy_text: str | None = None,
    cwd: str | None = None,
    say: Callable[[str], None] | None = None,
    reach_store: bool = False,
) -> Prepared:
    """Check and prepare everything a VM will need (see the module doc); raises
    :class:`~policies.loader.PolicyError` naming each problem's place in the policy (the
    policy file as a whole for a problem with the provider options, which are the job's)."""
    cwd = cwd or os.getcwd()
    file = policy_path or "<policy>"
    base = Path(policy_path).resolve().parent if policy_path else Path(cwd)
    issues: list[PolicyIssue] = []

    def at(loc: tuple[Any, ...], message: str) -> None:
        issues.append(issue_at(policy_text, file, loc, message))

    uri, problem = checkpoint_store(policy, provider, cwd)
    if problem is None and reach_store:  # a store this machine cannot reach: before any write
        from provisioner.objstore.fs import reach_problem

        (say or (lambda _m: None))(f"checking the checkpoint store {uri}")
        problem = reach_problem(uri)
    if problem:
        at(("checkpoint", "uri"), problem)
    for loc, message in _secrets(policy, provider):
        at(loc, message)
    package = package_problem(provider, provider_options or {})
    if package:
        issues.append(PolicyIssue(file, None, None, "", package))
    if issues:  # nothing is packed or uploaded for a job that will not be written
        raise PolicyError(issues)
    note, problem = carry_wheel(provider, provider_options or {}, uri, say or (lambda _m: None))
    if problem:
        raise PolicyError([PolicyIssue(file, None, None, "", problem)])
    try:
        code, notes = _code(policy, base, uri, say or (lambda _m: None))
    except CodeError as exc:
        where = ("job", "workdir") if policy.job.workdir is not None else ("job", "git")
        at(where, str(exc))
        raise PolicyError(issues) from None
    return Prepared(uri, code, tuple(notes) + ((note,) if note else ()))
