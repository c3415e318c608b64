"""The job's code on its road to the VM: packed at ``up``, fetched and verified by the agent.

- :mod:`provisioner.jobcode.ignore`: which files of a workdir go (``.gitignore`` and
  ``.provisionerignore`` rules, at every level);
- :mod:`provisioner.jobcode.archive`: a deterministic, content-addressed ``tar.gz`` of them
  (same files, same bytes, same sha256), its upload to the checkpoint store and its safe
  unpacking;
- :mod:`provisioner.jobcode.git`: a git ref pinned to its commit at ``up``, and that commit
  checked out on the VM;
- :mod:`provisioner.jobcode.fetch`: the agent's side: the code in place before the job starts,
  cached on the VM by digest.

What a job's row keeps (``jobs.code``) and its spec carries (``AgentSpec.code``) is a small
descriptor, never the code: ``{"kind": "archive", "uri", "sha256", "size", "files"}`` or
``{"kind": "git", "url", "ref", "commit"}``.
"""

from __future__ import annotations

from provisioner.errors import AgentError

#: where archives go in a checkpoint store: ``<checkpoint_uri>/_code/sha256-<hex>.tar.gz``
#: (shared by the jobs of one store: the same code is stored once)
CODE_DIR = "_code"


class CodeError(AgentError, ValueError):
    """The job's code cannot be packed, pinned or fetched; the message says why and what to do."""


__all__ = ["CODE_DIR", "CodeError"]
