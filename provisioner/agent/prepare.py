"""Before the job starts: its code, its secrets, its image and its setup, in that order.

1. **Code** (``spec.code``): the archive fetched and verified, or the commit checked out, in
   ``<workdir>/code`` (:mod:`provisioner.jobcode.fetch`; cached by digest); the job runs there.
2. **Secrets** (``spec.secret_refs``): each read from the cloud's secret store with the VM's
   identity (:mod:`providers.secrets`); the values go into the job's environment only (and are
   scrubbed from everything the agent writes: its log, the job's shipped output, progress).
3. **Image** (``spec.container``): an engine found and the image pulled where the VM has no
   copy.
4. **Setup** (``spec.setup``): the commands, in one ``sh -e`` script in the code's directory
   (inside the image when there is one), once per VM: a marker (or the committed setup image)
   for this (commands, code, image) skips it on a later attempt here. Its output is shipped as
   the attempt's ``setup`` log; it is stopped after ``spec.setup_timeout_s``.

Any step that fails raises :class:`SetupFailed`: the agent reports ``setup-failed`` with the
stage, the message and the last lines of output, and the controller ends the attempt without
counting a preemption; the same failure (stage, command and exit code) on two attempts fails
the job.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.agent.container import Engine, NoEngine, container_name, find_engine, setup_image
from provisioner.agent.logship import LogShipper, open_pipe
from provisioner.agent.procs import child_preexec, stop_group
from provisioner.agent.spec import AgentSpec
from provisioner.core import jobenv
from provisioner.errors import AgentError

log = logging.getLogger("provisioner.agent")

#: the engine's own steps (pull, commit) are bounded too
ENGINE_STEP_S = 1800.0


class SetupFailed(AgentError):
    """A step before the job failed; ``stage`` is code, secrets, image or setup."""

    def __init__(
        self,
        stage: str,
        message: str,
        *,
        tail: list[str] | None = None,
        exit_code: int | None = None,
        command: str | None = None,
    ) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage, self.message = stage, message
        self.tail = list(tail or [])
        self.exit_code, self.command = exit_code, command

    @property
    def fingerprint(self) -> str:
        """The same for the same failure on another VM: the stage, the command and its exit
        code (or the message without its numbers, for a step that is not a command)."""
        what = self.command if self.command is not None else re.sub(r"\d+", "#", self.message)
        key = json.dumps([self.stage, what, self.exit_code])
        return hashlib.sha256(key.encode()).hexdigest()[:12]

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "message": self.message,
            "command": self.command,
            "exit_code": self.exit_code,
            "tail": self.tail[-20:],
            "fingerprint": self.fingerprint,
        }


class Stopped(AgentError):
    """The agent was told to stop (the VM is going) while preparing."""


@dataclass
class Ready:
    """What the job starts with."""

    cwd: Path
    secrets: dict[str, str] = field(default_factory=dict)  # NAME -> value: never written
    image: str | None = None  # the image the job runs in (setup's committed one, or the base)
    engine: Engine | None = None
    report: dict[str, Any] = field(default_factory=dict)  # for the progress record


def setup_key(spec: AgentSpec) -> str:
    what = [spec.setup, spec.code, (spec.container or {}).get("image")]
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


class Preparer:
    """Runs the four steps for one attempt (see the module doc)."""

    def __init__(
        self,
        spec: AgentSpec,
        workdir: Path,
        cache: Path,
        store: Any,
        job_env: Callable[[dict[str, str]], dict[str, str]],
        should_stop: Callable[[], bool],
        scrub_with: Callable[[list[str]], Callable[[str], str]],
    ) -> None:
        self.spec, self.workdir, self.cache, self.store = spec, workdir, cache, store
        self.job_env, self.should_stop, self.scrub_with = job_env, should_stop, scrub_with

    def env(self, secrets: dict[str, str], *, engine: bool = False) -> dict[str, str]:
        """The whole environment of a step: the job's (its variables and the basics,
        :mod:`provisioner.core.jobenv`) for a setup command on the VM; for the engine's
        client, the agent's with the job's variables over it (passed in by name)."""
        own = self.job_env(secrets)
        env = jobenv.for_engine if engine else jobenv.for_job
        return env(own, os.environ)

    def run(self) -> Ready:
        spec = self.spec
        ready = Ready(cwd=self.workdir)
        if spec.code:
            from provisioner.jobcode import CodeError
            from provisioner.jobcode.fetch import ensure_code

            try:
                got = ensure_code(spec.code, self.workdir, self.cache)
            except CodeError as exc:
                raise SetupFailed("code", str(exc)) from None
            ready.cwd = got.directory
            ready.report["code"] = got.as_dict()
            log.info("code %s: %s in %.2f s", got.identity, got.how, got.seconds)
        ready.secrets = self._secrets()
        if spec.container:
            ready.engine, ready.image = self._image()
        if spec.setup:
            ready.report["setup"] = self._setup(ready)
        return ready

    def _secrets(self) -> dict[str, str]:
        if not self.spec.secret_refs:
            return {}
        from providers.secrets import SecretError, read_secret

        out: dict[str, str] = {}
        for name, ref in sorted(self.spec.secret_refs.items()):
            try:
                out[name] = read_secret(ref, region=self.spec.region or None)
            except SecretError as exc:
                raise SetupFailed("secrets", f"{name} ({ref}): {exc.reason}") from None
            except Exception as exc:  # an SDK missing or failing in its own way
                raise SetupFailed(
                    "secrets", f"{name} ({ref}): {type(exc).__name__}: {exc}"
                ) from None
        return out

    def _image(self) -> tuple[Engine, str]:
        c = self.spec.container
        gpus = "none" if self.spec.gpu_source.startswith("file:") else "all"  # the sim: no GPU
        try:
            engine = find_engine(str(c.get("engine") or "auto"), gpus)
        except NoEngine as exc:
            raise SetupFailed("image", str(exc)) from None
        image = str(c["image"])
        if self._quiet(engine.has_image(image)) != 0:
            self._command(
                engine.pull(image),
                "image",
                f"pull {image}",
                ENGINE_STEP_S,
                cwd=self.workdir,
                engine=True,
            )
        return engine, image

    def _quiet(self, argv: list[str]) -> int:
        done = subprocess.run(argv, capture_output=True, check=False, timeout=ENGINE_STEP_S)
        return done.returncode

    def _setup(self, ready: Ready) -> dict[str, Any]:
        spec = self.spec
        key = setup_key(spec)
        marker = self.workdir / f".setup-{key[:16]}.done"
        started = time.monotonic()
        script = "set -e\n" + "".join(
            f"printf '%s\\n' {shlex.quote('$ ' + c)}\n{c}\n" for c in spec.setup
        )
        if ready.engine is not None and ready.image is not None:
            committed = setup_image(spec.job_id, key, spec.instance_id)
            if self._quiet(ready.engine.has_image(committed)) == 0:
                ready.image = committed
                return {"how": "skipped", "seconds": 0.0}
            name = container_name(spec.job_id, spec.attempt, spec.node, "setup")
            self._quiet(ready.engine.remove(name))
            env_names = list(self.job_env(ready.secrets))  # by name: values stay out of argv
            argv = ready.engine.run(
                ready.image,
                ["/bin/sh", "-c", script],
                name=name,
                workdir=str(self.workdir),
                cwd=str(ready.cwd),
                env_names=env_names,
                run_args=list((spec.container or {}).get("run_args") or []),
                remove=False,
            )
            try:
                self._command(argv, "setup", None, spec.setup_timeout_s, ready=ready, engine=True)
                self._command(
                    ready.engine.commit(name, committed), "setup", "commit", 600.0, engine=True
                )
            finally:
                self._quiet(ready.engine.remove(name))
            ready.image = committed
        else:
            if marker.exists():
                return {"how": "skipped", "seconds": 0.0}
            self._command(
                ["/bin/sh", "-c", script], "setup", None, spec.setup_timeout_s, ready=ready
            )
            marker.write_text(json.dumps({"setup": spec.setup}) + "\n", encoding="utf-8")
        return {"how": "ran", "seconds": round(time.monotonic() - started, 3)}

    def _command(
        self,
        argv: list[str],
        stage: str,
        label: str | None,
        timeout_s: float,
        *,
        ready: Ready | None = None,
        cwd: Path | None = None,
        engine: bool = False,
    ) -> None:
        """Run one step with its output shipped as the attempt's setup log; SetupFailed unless
        it exits 0 within ``timeout_s``. ``label`` None: a setup script (the failing command
        is the last ``$ `` line it printed). ``engine``: the step is the container engine's
        client (its environment: :meth:`env`)."""
        from provisioner.agent.logship import log_dir

        secrets = ready.secrets if ready else {}
        w, r = open_pipe()
        try:  # before the shipper's threads, so that preexec_fn is safe
            proc = subprocess.Popen(
                argv,
                cwd=str((ready.cwd if ready else cwd) or self.workdir),
                env=self.env(secrets, engine=engine),
                stdin=subprocess.DEVNULL,
                stdout=w,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=child_preexec(),
            )
        except OSError as exc:
            r.close()
            raise SetupFailed(stage, f"cannot start {argv[0]}: {exc}", command=label) from None
        finally:
            os.close(w)
        shipper = LogShipper(
            self.store,
            self.spec.attempt,
            self.spec.node,
            "setup",
            self.workdir / log_dir(self.spec.attempt, self.spec.node) / "setup.log",
            scrub=self.scrub_with(list(secrets.values())),
            echo=sys.stdout,
        )
        if label:
            shipper.add(f"$ {label}")
        shipper.feed(r)
        end = time.monotonic() + timeout_s
        why: str | None = None
        while True:
            try:
                code = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if self.should_stop():
                    why = "stopped"
                elif time.monotonic() > end:
                    why = "timeout"
                if why:
                    stop_group(proc)
                    code = proc.returncode
                    break
        shipper.close()
        tail = shipper.tail(20)
        if why == "stopped":
            raise Stopped()
        failed = next((t[2:] for t in reversed(tail) if t.startswith("$ ")), label)
        if why == "timeout":
            raise SetupFailed(
                stage,
                f"{failed or argv[0]} still running after {timeout_s:.0f} s (job.setup_timeout)",
                tail=tail,
                command=failed,
            )
        if code != 0:
            raise SetupFailed(
                stage,
                f"{failed or argv[0]} exited {code}",
                tail=tail,
                exit_code=code,
                command=failed,
            )
