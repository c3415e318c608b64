"""The node agent: runs beside the job on every VM (or sim sandbox).

``python -m provisioner.agent --spec spec.json`` runs the job the spec names with its
checkpoint location and resume point in the environment, polls the cloud's metadata service
for an interruption notice at least once a second, and on a notice signals the job, waits for
its checkpoint and uploads it to the checkpoint store before the deadline. Periodic checkpoints
at the policy's interval are the fallback; progress goes to ``<uri>/<job_id>/progress.json``.

- :mod:`provisioner.agent.spec`: the job spec (:class:`AgentSpec`)
- :mod:`provisioner.agent.protocol`: the job's side (environment, checkpoint commit)
- :mod:`provisioner.agent.store`: the checkpoint store layout (fsspec), progress readers
- :mod:`provisioner.agent.notices`: the five metadata formats
- :mod:`provisioner.agent.runner`: the agent loop
- utilisation samples and the start-of-attempt probe: :mod:`provisioner.probe` (NVML)

See docs/agent.md.
"""

from __future__ import annotations

from provisioner.agent.spec import AgentSpec, SpecError
from provisioner.agent.store import latest_checkpoint, read_progress

__all__ = ["AgentSpec", "SpecError", "latest_checkpoint", "read_progress"]
