"""The job's process: started (in its image when there is one) with its output on a pipe to
the log shipper, and ended with its output shipped and its container gone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from provisioner.agent.container import container_name
from provisioner.agent.logship import LogShipper, log_dir, open_pipe
from provisioner.agent.prepare import Ready
from provisioner.agent.procs import child_preexec
from provisioner.agent.scrub import scrubber
from provisioner.agent.spec import AgentSpec
from provisioner.core import jobenv


def start_job(
    spec: AgentSpec,
    ready: Ready,
    store: Any,
    workdir: Path,
    job_env: dict[str, str],
) -> tuple[subprocess.Popen[bytes], LogShipper]:
    """Start the job with ``job_env``, its own variables, and the basics of the agent's
    environment (:mod:`provisioner.core.jobenv`); in an image, the engine's client gets the
    agent's environment and passes ``job_env`` into the container by name."""
    argv = list(spec.command)
    env = jobenv.for_job(job_env, os.environ)
    if ready.engine is not None and ready.image is not None:
        name = container_name(spec.job_id, spec.attempt, spec.node)
        subprocess.run(ready.engine.remove(name), capture_output=True, check=False)
        argv = ready.engine.run(
            ready.image,
            argv,
            name=name,
            workdir=str(workdir),
            cwd=str(ready.cwd),
            env_names=job_env,
            run_args=list(spec.container.get("run_args") or []),
        )
        env = jobenv.for_engine(job_env, os.environ)
    w, r = open_pipe()
    try:  # started before the shipper's threads, so that preexec_fn is safe
        proc = subprocess.Popen(
            argv,
            cwd=ready.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=w,
            stderr=subprocess.STDOUT,
            preexec_fn=child_preexec(spec.signum),
        )
    except OSError:
        r.close()
        raise
    finally:
        os.close(w)
    shipper = LogShipper(
        store,
        spec.attempt,
        spec.node,
        "job",
        workdir / log_dir(spec.attempt, spec.node) / "job.log",
        scrub=scrubber(list(ready.secrets.values())),
        echo=sys.stdout,
    )
    shipper.feed(r)
    return proc, shipper


def end_job(spec: AgentSpec, ready: Ready, shipper: LogShipper | None) -> None:
    """The job's output shipped to the end; its container (if any) gone."""
    if shipper is not None:
        shipper.close()
    if ready.engine is not None:
        name = container_name(spec.job_id, spec.attempt, spec.node)
        subprocess.run(ready.engine.remove(name), capture_output=True, check=False)
