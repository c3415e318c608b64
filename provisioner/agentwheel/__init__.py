"""The agent's own package on its road to the VM: no package index needed.

A VM's boot script installs provisioner to run the node agent. Unless the provider options
name a package (``package_spec``) or say the image has it (``agent_preinstalled``), the
version that launches the VM is the one the VM runs, carried the way the job's code is:

- :mod:`provisioner.agentwheel.build`: a wheel of the running provisioner, made here without
  network or build backend (the imported packages' files, zipped deterministically with
  their metadata), once per process; the same files give the same bytes and the same sha256;
- :mod:`provisioner.agentwheel.carry`: that wheel put in the job's checkpoint store, once per
  digest, at ``<checkpoint_uri>/.provisioner/wheels/<sha256>/<filename>``, and the
  :class:`~provisioner.core.models.WheelLink` a launch carries (a plain record, in the core
  beside the :class:`~provisioner.core.models.LaunchRequest` that holds it);
- :mod:`provisioner.agentwheel.sign`: a short-lived URL that reads that one object and
  nothing else (an S3 presigned URL, a GCS V4 signed URL, an Azure blob SAS), made fresh at
  each launch; a ``file://`` store (the sim, a shared filesystem) gives its path.

The boot script (:mod:`providers.bootstrap`) downloads the wheel, refuses it unless its
sha256 is the one the launch named, and pip-installs it with the provider's extra; the
extra's SDKs and the other dependencies still come from the VM's index (``pip_args``).
"""

from __future__ import annotations

from provisioner.core.models import WheelLink
from provisioner.errors import AgentError

#: where wheels go in a checkpoint store: ``<checkpoint_uri>/.provisioner/wheels/<sha256>/``
WHEELS_DIR = ".provisioner/wheels"


class WheelError(AgentError, ValueError):
    """The running provisioner cannot be made into a wheel, stored, or linked to; the message
    says why and what to do instead (``package_spec``, ``agent_preinstalled``)."""


__all__ = ["WHEELS_DIR", "WheelError", "WheelLink"]
