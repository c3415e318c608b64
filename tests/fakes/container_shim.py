"""A recording stand-in for ``docker`` / ``podman``, for machines where no engine can run.

Put on PATH under the engine's name (:func:`install`), it records every call (argv, and for
``-e NAME`` whether NAME had a value in its environment, never the value) to the JSON-lines
file ``$SHIM_LOG``, keeps "images" as files under ``$SHIM_IMAGES/<VM>`` (a sim sandbox's
instance id: an engine's images are on its own VM; both variables are set by the wrapper
:func:`install` writes), and carries out what the agent asks of an engine the way an engine
would:

- ``image inspect IMG``: exit 0 when IMG is there (pulled or committed), else 1;
- ``pull IMG``: IMG appears, unless its name contains ``missing`` (then exit 1 with a
  registry's "manifest unknown" on stderr);
- ``run [opts] IMG CMD...``: CMD runs with the ``-w`` directory as its cwd and only the ``-e``
  variables (plus PATH and PYTHONPATH, which an image would have) in its environment, by
  ``exec``, so a signal sent to the engine's client reaches the job as ``--init`` and the
  signal proxy would deliver it; with ``--name N`` and no ``--rm`` the container is kept for
  a ``commit``;
- ``commit N IMG``: IMG appears; ``rm -f N``: forgets N.

What it does not do, and a real engine would: isolate the filesystem, the network or the
process tree, or hand the job a GPU. Tests that use it say so.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path


def _record(entry: dict[str, object]) -> None:
    with open(os.environ["SHIM_LOG"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry) + "\n")


def _image(name: str) -> Path:
    """Where an image is kept: per VM (a sim sandbox names its instance), as an engine's
    images are on the VM it runs on."""
    vm = os.environ.get("PROVISIONER_INSTANCE_ID", "host")
    return Path(os.environ["SHIM_IMAGES"]) / vm / name.replace("/", "_").replace(":", "@")


def _run(args: list[str]) -> int:
    cwd, env_names, keep = None, [], True
    i = 0
    with_value = {"--name", "--network", "--ipc", "-v", "-w", "-e", "--device", "--gpus"}
    while i < len(args) and args[i].startswith("-"):
        flag = args[i]
        if flag in with_value:
            value = args[i + 1]
            if flag == "-w":
                cwd = value
            elif flag == "-e":
                env_names.append(value)
            i += 2
            continue
        if flag == "--rm":
            keep = False
        i += 1
    image, cmd = args[i], args[i + 1 :]
    if not _image(image).exists():
        print(f"Error: {image}: image not known", file=sys.stderr)
        return 125
    _record(
        {
            "op": "run",
            "image": image,
            "cmd": cmd,
            "env_with_value": {n: bool(os.environ.get(n)) for n in env_names},
            "keep": keep,
            "vm": os.environ.get("PROVISIONER_INSTANCE_ID", "host"),
        }
    )
    env = {n: os.environ[n] for n in env_names if n in os.environ}
    for name in ("PATH", "PYTHONPATH", "HOME"):
        if name in os.environ:
            env.setdefault(name, os.environ[name])
    if cwd:
        os.chdir(cwd)
    os.execvpe(cmd[0], cmd, env)  # the job takes this process: signals reach it
    return 127  # not reached


def main(argv: list[str]) -> int:
    _record({"op": "call", "argv": argv, "vm": os.environ.get("PROVISIONER_INSTANCE_ID", "host")})
    if argv[:2] == ["image", "inspect"]:
        return 0 if _image(argv[2]).exists() else 1
    if argv[:1] == ["pull"]:
        if "missing" in argv[1]:
            print(f"Error: {argv[1]}: manifest unknown", file=sys.stderr)
            return 1
        _image(argv[1]).parent.mkdir(parents=True, exist_ok=True)
        _image(argv[1]).write_text("pulled\n")
        print(f"pulled {argv[1]}")
        return 0
    if argv[:1] == ["commit"]:
        _image(argv[2]).write_text(f"committed from {argv[1]}\n")
        return 0
    if argv[:1] == ["rm"]:
        return 0
    if argv[:1] == ["run"]:
        return _run(argv[1:])
    print(f"shim: {argv[:1]} not played", file=sys.stderr)
    return 2


def install(bin_dir: Path, log: Path, images: Path, name: str = "docker") -> Path:
    """Write an executable ``bin_dir/name`` that runs this shim with this Python, recording to
    ``log`` and keeping images under ``images``: its own configuration, as an engine has its
    own (the agent's environment carries none of the test's)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(
        "#!/bin/sh\n"
        f"SHIM_LOG={shlex.quote(str(log))} SHIM_IMAGES={shlex.quote(str(images))} "
        f'exec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n'
    )
    path.chmod(0o755)
    return path


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
