"""The job's environment, by allow-list (docs/agent.md#the-jobs-environment): a rule of the
pure core, applied by the node agent to its own environment and by the sim to the sandbox's.

A job gets what it is told (the protocol's variables, the policy's ``job.env`` and
``job.secrets``, a gang's torchrun variables: :func:`provisioner.agent.report.job_env`) and,
from the agent's own environment, only the harmless basics listed here: paths, locale, time
zone, temporary directory, the user, CA bundles, and the settings of the GPU stack and the
numeric libraries. Nothing else of the agent's environment reaches it, on a VM or on the sim:
not a cloud's credentials, not the store's, not a database password or a dashboard token.

The container engine's client is the agent's tool, not the job: it runs with the agent's
environment and the job's variables over it, and passes the job's variables into the container
by name only (``-e NAME``), so the container gets exactly the job's variables.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: the basics a job gets from the agent's environment, by name
BASIC_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TERM",
        "TZ",
        "TMPDIR",
        "TMP",
        "TEMP",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "PYTHONDONTWRITEBYTECODE",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        "XDG_RUNTIME_DIR",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
    }
)
#: and by prefix: the locale's categories, the GPU stack's settings (``CUDA_VISIBLE_DEVICES``,
#: ``NVIDIA_VISIBLE_DEVICES``, ``NCCL_SOCKET_IFNAME``...) and the numeric libraries' (threads,
#: BLAS kernels: ``OPENBLAS_CORETYPE`` changes the last bits of a matrix product)
BASIC_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "NCCL_", "OMP_", "OPENBLAS_", "MKL_")
#: a name with one of these words in it never passes by prefix (``NVIDIA_API_KEY``)
SECRET_WORDS = frozenset(
    {"SECRET", "TOKEN", "PASSWORD", "PASSWD", "PASS", "KEY", "CREDENTIAL", "CREDENTIALS", "AUTH"}
)


def is_basic(name: str) -> bool:
    """Whether the agent passes ``name`` on to the job (see :data:`BASIC_NAMES`)."""
    if name in BASIC_NAMES:
        return True
    if not name.startswith(BASIC_PREFIXES):
        return False
    return not SECRET_WORDS.intersection(re.split(r"[^A-Z0-9]+", name.upper()))


def basics(environ: Mapping[str, str]) -> dict[str, str]:
    """The basics of ``environ`` (the agent's own environment)."""
    return {k: v for k, v in environ.items() if is_basic(k)}


def for_job(job_vars: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of the job and of its setup commands on the VM: the basics of
    ``environ`` (the agent's), with the job's own variables over them."""
    return {**basics(environ), **job_vars}


def for_engine(job_vars: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of the container engine's client: ``environ`` (the agent's own: the
    engine's socket, its configuration), with the job's variables over it, whose values the
    engine reads for the ``-e NAME`` it is given (nothing else goes into the container)."""
    return {**environ, **job_vars}
