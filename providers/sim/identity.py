"""What a sim "VM" is given in place of a cloud VM's identity: the store's access, no more.

On a cloud, the agent reaches the checkpoint store and reads the job's secrets with the VM's
identity (an instance role, a service account, a managed identity, a RAM or CAM role): nothing
of the controller's is on the VM. A sim sandbox is a process on the controller's machine with
no identity of its own, so the launching controller hands it, in the launch, the variables
that the SDKs of *this job's* stores read from the environment, taken from its own
environment: those of the checkpoint store's scheme (``s3://``: ``AWS_*``; ``gs://``: Google's;
``az://``/``abfs://``: Azure Storage's; ``file://``: none) and those of the secret store of
each cloud the job's ``job.secrets`` references name (the sim's own store is a file, named by
``PROVISIONER_SIM_SECRETS``). Every other variable of the controller (another cloud's keys, a
database password, the dashboard's token, notification URLs) stays with the controller. The
agent keeps these to itself: its job gets none of them (:mod:`provisioner.core.jobenv`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

#: reaching a store over the network: the machine's proxy settings (a VM has its own)
_NETWORK = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
_AWS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
    "AWS_CA_BUNDLE",
    "AWS_MAX_ATTEMPTS",
    "AWS_RETRY_MODE",
)
_GOOGLE = (
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "GCLOUD_PROJECT",
    "CLOUDSDK_CONFIG",
)
_AZURE = (
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_CLIENT_CERTIFICATE_PATH",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_AUTHORITY_HOST",
)

#: per checkpoint store scheme: what its SDK (boto3, gcsfs, adlfs) reads from the environment
STORE_ENV: dict[str, tuple[str, ...]] = {
    "file": (),
    "s3": (*_AWS, "AWS_ENDPOINT_URL_S3", "PROVISIONER_S3_BACKEND"),
    "gs": (*_GOOGLE, "STORAGE_EMULATOR_HOST"),
    "az": (
        *_AZURE,
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_CLIENT_ID",
        "AZURE_STORAGE_CLIENT_SECRET",
        "AZURE_STORAGE_TENANT_ID",
    ),
}
STORE_ENV.update({"s3a": STORE_ENV["s3"], "gcs": STORE_ENV["gs"], "abfs": STORE_ENV["az"]})
STORE_ENV["abfss"] = STORE_ENV["az"]

#: per cloud of a ``job.secrets`` reference: what its secret store's SDK reads
SECRETS_ENV: dict[str, tuple[str, ...]] = {
    "sim": (),
    "aws": (*_AWS, "AWS_ENDPOINT_URL_SECRETS_MANAGER", "AWS_ENDPOINT_URL_SSM"),
    "gcp": (*_GOOGLE, "PROVISIONER_GCP_SECRETS_ENDPOINT"),
    "azure": (*_AZURE, "PROVISIONER_AZURE_KEYVAULT_ENDPOINT"),
    "alibaba": (
        "ALIBABA_CLOUD_ACCESS_KEY_ID",
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
        "ALIBABA_CLOUD_SECURITY_TOKEN",
        "ALICLOUD_ACCESS_KEY",
        "ALICLOUD_SECRET_KEY",
        "ALIBABA_CLOUD_REGION_ID",
        "PROVISIONER_ALIBABA_KMS_ENDPOINT",
    ),
    "tencent": (
        "TENCENTCLOUD_SECRET_ID",
        "TENCENTCLOUD_SECRET_KEY",
        "TENCENTCLOUD_SESSION_TOKEN",
        "TENCENTCLOUD_REGION",
        "PROVISIONER_TENCENT_SSM_ENDPOINT",
    ),
}

#: variables that name a file: made absolute (the sandbox has another working directory)
_PATHS = frozenset(
    {
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_CONFIG_FILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CA_BUNDLE",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "CLOUDSDK_CONFIG",
        "AZURE_CLIENT_CERTIFICATE_PATH",
        "AZURE_FEDERATED_TOKEN_FILE",
    }
)


def _scheme(uri: str) -> str:
    return uri.split("://", 1)[0].lower() if "://" in uri else "file"


def names_for(spec: Mapping[str, Any]) -> list[str]:
    """The variables the VM's identity stands for with this job spec: its stores' and its
    secret stores' (see the module doc), in a stable order."""
    uris = [
        spec.get("checkpoint_uri"),
        spec.get("progress_uri"),
        (spec.get("code") or {}).get("uri"),
    ]
    schemes = {_scheme(str(u)) for u in uris if u}
    names: list[str] = []
    for scheme in sorted(schemes):
        names += STORE_ENV.get(scheme, ())
    for cloud in sorted(_secret_clouds(spec.get("secret_refs") or {})):
        names += SECRETS_ENV.get(cloud, ())
    if any(s != "file" for s in schemes) or names:
        names += _NETWORK
    return list(dict.fromkeys(names))


def _secret_clouds(refs: Mapping[str, Any]) -> Iterable[str]:
    from policies.secretref import SecretRefError, parse_secret_ref

    clouds = set()
    for ref in refs.values():
        try:
            clouds.add(parse_secret_ref(str(ref)).cloud)
        except SecretRefError:
            continue  # the agent reports it as the secrets step's failure
    return clouds


def identity_env(
    spec: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The values of :func:`names_for` in ``environ`` (the launching controller's own
    environment by default): what the sim's VM gets as its identity."""
    env = os.environ if environ is None else environ
    out = {}
    for name in names_for(spec):
        value = env.get(name)
        if value:
            out[name] = os.path.abspath(os.path.expanduser(value)) if name in _PATHS else value
    return out
