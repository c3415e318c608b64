"""A sim instance's sandbox: a working directory and a process group (the "VM").

The group runs ``python -m provisioner.agent --spec spec.json`` (or a placeholder process for a
launch without a job spec) with ``start_new_session``, so its id is the leader's pid. The server
makes itself a child subreaper, so the job's processes, orphaned when the agent dies, are
adopted and reaped by it: once the group is SIGKILLed, it is really gone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Container, Iterable, Mapping
from pathlib import Path
from typing import Any

from provisioner.core import jobenv

log = logging.getLogger("provisioner.sim")


def set_subreaper() -> None:
    """Adopt our descendants when their parent dies (Linux), so we can reap them."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def project_root() -> str:
    """The directory holding the ``provisioner`` and ``providers`` packages."""
    return str(Path(__file__).resolve().parents[2])


def start(
    inst: dict[str, Any],
    launch: Mapping[str, Any],
    *,
    gpu_speed: float | None = None,
    cache_dir: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start the instance's process group in its sandbox, as ``launch`` (the launch's body)
    asks; the agent's spec is written there.

    A sandbox has no GPU: the agent's utilisation samples come from ``work/sim-gpu.json``,
    which the job may write (``$PROVISIONER_GPU_FILE``), and its probe reads a simulated
    report (``gpu_speed``: the share of the datasheet the simulated GPUs deliver).

    What a VM would have, and only that (:func:`vm_environment`): provisioner installed (the
    project on ``PYTHONPATH``); the sim's secret store (``$PROVISIONER_SIM_SECRETS``: the file
    the launch names, read by the agent as a VM reads its cloud's); a code cache
    (``cache_dir``, shared by the sim's sandboxes as VMs from one warm machine image would
    share it). A job that brings no code of its own (no ``job.workdir``, ``job.git`` or
    image) also finds the controller's working directory on ``PYTHONPATH`` (``pythonpath``):
    the sim's convenience, which no cloud VM gives.

    The provisioner installed is the launching controller's (``agent``: its project root, its
    interpreter and its ``PYTHONPATH``), not the server's: one server serves a state directory
    for every ``up`` that uses it, whichever checkout or install started it first."""
    sandbox = Path(inst["sandbox"])
    spec: dict[str, Any] | None = launch.get("spec")
    env, python = vm_environment(inst, launch, cache_dir)
    if spec is not None:
        spec = {
            **spec,
            "cloud": inst["cloud"],
            "metadata_url": inst["metadata_url"],
            "workdir": str(sandbox / "work"),
            "instance_id": inst["id"],
            "gpu_source": spec.get("gpu_source") or "file:sim-gpu.json",
        }
        if spec.get("probe", "off") != "off":
            report = simulated_probe(gpu_speed)
            (sandbox / "work" / "sim-probe.json").write_text(json.dumps(report, indent=2))
            spec["probe"] = "file:sim-probe.json"
        (sandbox / "spec.json").write_text(json.dumps(spec, indent=2, sort_keys=True))
        argv = [python, "-m", "provisioner.agent", "--spec", str(sandbox / "spec.json")]
    else:  # an empty VM: something to hold the process group
        argv = [shutil.which("sleep") or "sleep", "2147483647"]
    with open(sandbox / "agent.log", "ab") as out:
        return subprocess.Popen(
            argv,
            cwd=sandbox / "work",
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def vm_environment(
    inst: Mapping[str, Any], launch: Mapping[str, Any], cache_dir: Path | None = None
) -> tuple[dict[str, str], str]:
    """The agent's environment in a sandbox, and its interpreter: what a VM would give it, never
    the server's (or a controller's) whole environment. The basics a job may see too
    (:mod:`provisioner.core.jobenv`: ``PATH``, ``HOME``, locale...) from the server's; the
    provisioner installed (``PYTHONPATH``, the interpreter's directory first on ``PATH``); the
    sim's own (the instance's metadata URL and id, the secrets file, the code cache); and the
    launch's ``identity_env``, what a VM's identity would give its agent: the job's stores'
    access (:mod:`providers.sim.identity`)."""
    env = jobenv.basics(os.environ)
    spec = launch.get("spec")
    own_code = bool(spec and (spec.get("code") or spec.get("container")))
    root, python, extra = _installed(launch.get("agent") or None, dict(os.environ))
    pythonpath = [str(p) for p in launch.get("pythonpath") or ()]
    paths = [root, *([] if own_code else pythonpath), *extra]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    env["PATH"] = os.path.dirname(python) + os.pathsep + env.get("PATH", "")
    env.update({str(k): str(v) for k, v in (launch.get("identity_env") or {}).items()})
    env["PROVISIONER_METADATA_URL"] = str(inst["metadata_url"])
    env["PROVISIONER_INSTANCE_ID"] = str(inst["id"])
    if launch.get("secrets_file"):
        env["PROVISIONER_SIM_SECRETS"] = str(launch["secrets_file"])
    cache = os.environ.get("PROVISIONER_CACHE_DIR") or (str(cache_dir) if cache_dir else "")
    if cache:
        env["PROVISIONER_CACHE_DIR"] = cache
    return env, python


def recorded(launch: Mapping[str, Any]) -> dict[str, Any]:
    """A launch as the server keeps it for tests (``GET /v1/requests``): its identity's
    variables by name only, their values never kept."""
    return {**launch, "identity_env": sorted(launch.get("identity_env") or {})}


def _installed(agent: dict[str, Any] | None, env: dict[str, str]) -> tuple[str, str, list[str]]:
    """(project root, interpreter, further ``PYTHONPATH`` entries) the sandbox runs with: the
    launching controller's where the launch says (a launch from an older client does not: then
    the server's own, with the environment it was started in)."""
    if not agent or not agent.get("root"):
        inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        return project_root(), sys.executable, inherited
    python = str(agent.get("python") or "")
    if not (python and os.access(python, os.X_OK)):
        python = sys.executable
    extra = [str(p) for p in agent.get("pythonpath") or [] if p]
    return str(agent["root"]), python, extra


def simulated_probe(gpu_speed: float | None) -> dict[str, Any]:
    """The probe report of a sandbox's simulated GPUs (``provisioner probe``'s shape)."""
    note = (
        f"simulated GPUs at {gpu_speed:.0%} of their datasheet (sim gpu_speed)"
        if gpu_speed is not None
        else "the sim has no GPU and no gpu_speed for this type: nothing measured"
    )
    return {
        "version": 1,
        "backend": "sim",
        "simulated": True,
        "devices": [],
        "figures": [],
        "nvml": {"available": False, "note": "the sim has no GPU"},
        "summary": {
            "gpu": None,
            "gpu_count": None,
            "precision": None if gpu_speed is None else "bf16",
            "tflops": None,
            "fraction": gpu_speed,
            "note": note,
        },
    }


#: what stays of an ended instance's sandbox: its record and its console output (as a cloud
#: keeps a terminated VM's description and console log for a while); the rest (its disk: the
#: job's code, checkpoints and output, which the agent put in the checkpoint store) goes
KEPT = ("instance.json", "agent.log")


def group_gone(pid: int | None) -> bool:
    """Whether no process of the instance's group (``pid``: its leader's) is left."""
    if not pid:
        return True
    try:
        os.killpg(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def sweepable(inst: dict[str, Any], procs: Container[str], keep: bool) -> bool:
    """Whether an instance's disk may go: it ended, its agent was reaped (not in ``procs``),
    its process group is gone, and sandboxes are not kept."""
    return not (
        inst["state"] == "running"
        or inst.get("swept")
        or keep
        or inst["id"] in procs
        or not group_gone(inst.get("pid"))
    )


def sweep_all(sandboxes: Iterable[Path]) -> None:
    for path in sandboxes:
        freed = sweep(path)
        log.info("removed the disk of %s's sandbox (%d bytes)", path.name, freed)


def sweep_stale(state_dir: Path, instances: Mapping[str, dict[str, Any]], keep: bool) -> None:
    """What a dead server left besides ended instances' disks: sandboxes without a record (a
    launch cut short), and the code cache when no instance is live."""
    for path in (state_dir / "instances").iterdir():
        if path.is_dir() and path.name not in instances:
            shutil.rmtree(path, ignore_errors=True)
            log.info("removed %s: a sandbox without its record", path.name)
    if not keep and not any(i["state"] == "running" for i in instances.values()):
        shutil.rmtree(state_dir / "vm-cache", ignore_errors=True)


def sweep(sandbox: Path) -> int:
    """Remove an ended instance's disk (everything but :data:`KEPT`); the bytes freed."""
    freed = 0
    for entry in list(sandbox.iterdir()) if sandbox.is_dir() else []:
        if entry.name in KEPT:
            continue
        freed += _size(entry)
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()
    return freed


def _size(path: Path) -> int:
    if path.is_symlink() or not path.is_dir():
        with contextlib.suppress(OSError):
            return path.lstat().st_size
        return 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def reap_orphans(mine: set[int]) -> None:
    """Reap zombie children that are not in ``mine`` (our Popen objects reap their own)."""
    me = os.getpid()
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) in mine:
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields_ = stat.rsplit(")", 1)[-1].split()
        if len(fields_) > 2 and fields_[0] == "Z" and int(fields_[1]) == me:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(int(entry), os.WNOHANG)
