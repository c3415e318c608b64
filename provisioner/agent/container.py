"""The job in a container image: the engine's command lines, and nothing else.

The agent runs setup and the job inside ``job.container.image`` with one engine, Docker or
Podman (``engine: auto`` takes Docker where it is installed, else Podman):

- the image is pulled once (a failed pull is a setup failure, not a preemption);
- setup runs in a container of the image and the result is committed as
  ``provisioner-setup/<job>:<key>``, so a later attempt on the same VM starts from it (setup
  once per VM, like on a bare VM);
- the job runs with ``--init`` (tini forwards signals to the job) and the engine's signal proxy,
  so the checkpoint signal the agent sends to the engine's client reaches the job;
- the agent's working directory (code, checkpoints, output, the progress file) is mounted at
  the same path inside, so the protocol's paths mean the same on both sides;
- variables are passed by name only (``-e NAME``: the engine reads the value from its own
  environment), so no secret is on a command line;
- GPUs: ``--gpus all`` for Docker (NVIDIA Container Toolkit), ``--device nvidia.com/gpu=all``
  for Podman (CDI); none on the sim, which has no GPU;
- ``--network host`` and ``--ipc host``: a gang's ranks reach each other as on the VM, and
  PyTorch's data loaders get the VM's shared memory.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from provisioner.errors import AgentError

ENGINES = ("docker", "podman")


class NoEngine(AgentError, RuntimeError):
    pass


@dataclass(frozen=True)
class Engine:
    """One container engine, found on PATH."""

    name: str  # docker or podman
    path: str
    gpus: str = "all"  # "all" or "none"

    def gpu_args(self) -> list[str]:
        if self.gpus == "none":
            return []
        if self.name == "podman":
            return ["--device", "nvidia.com/gpu=all"]
        return ["--gpus", "all"]

    def pull(self, image: str) -> list[str]:
        return [self.path, "pull", image]

    def has_image(self, image: str) -> list[str]:
        return [self.path, "image", "inspect", image]

    def remove(self, name: str) -> list[str]:
        return [self.path, "rm", "-f", name]

    def commit(self, name: str, image: str) -> list[str]:
        return [self.path, "commit", name, image]

    def run(
        self,
        image: str,
        argv: Sequence[str],
        *,
        name: str,
        workdir: str,
        cwd: str,
        env_names: Iterable[str],
        run_args: Sequence[str] = (),
        remove: bool = True,
    ) -> list[str]:
        """``<engine> run`` of ``argv`` in ``image`` (see the module doc for each flag)."""
        out = [self.path, "run", "--init", "--name", name]
        if remove:
            out.append("--rm")
        out += ["--network", "host", "--ipc", "host", *self.gpu_args()]
        out += ["-v", f"{workdir}:{workdir}", "-w", cwd]
        for key in sorted(set(env_names)):
            out += ["-e", key]
        out += [*run_args, image, *argv]
        return out


def find_engine(wanted: str = "auto", gpus: str = "all") -> Engine:
    """The engine to use: ``docker`` or ``podman`` as asked, or the first on PATH."""
    names = ENGINES if wanted == "auto" else (wanted,)
    for name in names:
        path = shutil.which(name)
        if path:
            return Engine(name, path, gpus)
    raise NoEngine(
        f"no container engine ({' or '.join(names)}) on this VM; use an image with one "
        "(docs/clouds.md lists each cloud's GPU images that carry Docker and the NVIDIA "
        "Container Toolkit)"
    )


def container_name(job_id: str, attempt: int, node: int = 0, what: str = "job") -> str:
    """A name the engine accepts, unique per (job, attempt, node): a restarted agent removes a
    container its predecessor left."""
    base = re.sub(r"[^a-zA-Z0-9_.-]", "-", f"provisioner-{what}-{job_id}-a{attempt}-n{node}")
    return base[:120]


def setup_image(job_id: str, key: str, vm: str = "") -> str:
    """The image setup's result is committed as (lowercase, as image names must be). ``vm``
    (the instance, where the spec names it) keeps it to its VM where one engine serves several
    (the sim's sandboxes): setup's effects in the mounted code directory are that VM's."""
    repo = re.sub(r"[^a-z0-9_.-]", "-", job_id.lower())[:60].strip("-.") or "job"
    tag = (
        re.sub(r"[^a-z0-9_.-]", "-", f"{key[:16]}-{vm}".lower()).strip("-.")[:128]
        if vm
        else key[:16]
    )
    return f"provisioner-setup/{repo}:{tag}"
