"""A job's secrets, read from each cloud's own secret store with the VM's own identity.

A policy's ``job.secrets`` maps an environment variable to a reference; the node agent calls
:func:`read_secret` for each and hands the value to the job. A value never appears in a log
line, an exception or anything persisted: every value read is registered with
:func:`providers.base.register_secret` (so :class:`providers.base.RedactingFilter` scrubs it),
:class:`SecretError` carries the reference and a reason only, and while a secret is read the
SDKs' wire loggers are held at INFO (botocore logs a response body at DEBUG, Tencent's SDK
logs every answer at DEBUG), serialised by a lock so that levels are restored exactly.

Reference forms (:func:`parse_secret_ref`; any form may end in ``#KEY``, which picks one key of a
JSON object secret: a string as it is, any other JSON value as JSON text):

- ``sim:NAME`` -- the sim cloud: ``NAME`` in the YAML mapping of NAME: value in the file named
  by ``PROVISIONER_SIM_SECRETS``.
- ``aws-sm:NAME_OR_ARN`` or a bare ``arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME`` --
  AWS Secrets Manager ``GetSecretValue`` (its current version, ``AWSCURRENT``): ``SecretString``,
  or ``SecretBinary`` decoded as UTF-8. An ARN's region is the region asked.
  https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_GetSecretValue.html
- ``aws-ssm:/PARAMETER`` (``NAME:VERSION`` and ``NAME:LABEL`` too) or a bare
  ``arn:aws:ssm:REGION:ACCOUNT:parameter/NAME`` -- SSM Parameter Store ``GetParameter`` with
  ``WithDecryption=True``.
  https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_GetParameter.html
- ``gcp-sm:projects/P/secrets/S[/versions/V]`` or the bare ``projects/...`` path, and the short
  ``gcp-sm:S`` -- GCP Secret Manager ``AccessSecretVersion`` (REST: ``GET
  /v1/projects/P/secrets/S/versions/V:access``); ``V`` defaults to ``latest``; the short form's
  project is the one ``google.auth.default()`` finds (``GOOGLE_CLOUD_PROJECT``, else the VM's
  metadata server). The payload's ``dataCrc32c`` is checked when the answer carries it.
  https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access
- ``azure-kv:https://VAULT.vault.azure.net/secrets/NAME[/VERSION]`` or the bare URL, and the
  short ``azure-kv:VAULT/NAME[/VERSION]`` -- Azure Key Vault Get Secret (``GET
  /secrets/NAME/VERSION?api-version=...``); no version: the current one.
  https://learn.microsoft.com/en-us/rest/api/keyvault/secrets/get-secret/get-secret
- ``alibaba-kms:NAME[@STAGE_OR_VERSION]`` (``NAME`` may be an ``acs:kms:REGION:ACCOUNT:secret/NAME``
  ARN) -- Alibaba Cloud KMS ``GetSecretValue`` (API 2016-01-20). A selector starting with ``ACS``
  (``ACSCurrent``, ``ACSPrevious``) is sent as ``VersionStage``, anything else as ``VersionId``;
  none sends ``VersionStage=ACSCurrent``. The last ``@`` splits, so a name containing ``@`` needs
  an explicit ``@ACSCurrent``. ``SecretDataType=binary`` is base64, decoded as UTF-8.
  https://www.alibabacloud.com/help/en/kms/key-management-service/developer-reference/api-kms-2016-01-20-getsecretvalue
- ``tencent-ssm:NAME[@VERSION]`` -- Tencent Cloud SSM ``GetSecretValue`` (API 2019-09-23),
  which requires ``VersionId``: a user-defined secret has no "current" label (``SSM_Current``
  is documented for Tencent Cloud service credentials only, and can be named explicitly:
  ``@SSM_Current``). With no version the reader asks ``ListSecretVersionIds`` and reads the
  version created last (``CreateTime``), as GCP's ``latest`` does: the role needs
  ``ssm:ListSecretVersionIds`` too. Name a version to pin it.
  https://www.tencentcloud.com/document/api/1078/38649 (and .../1078/38647 for the list)

Credentials: each SDK's default chain, which on a VM is the VM's identity: boto3's chain (env,
profile, then the EC2 instance profile through IMDS); ``google.auth.default()``
(``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's file, then the GCE metadata server's service
account); azure-identity's ``DefaultAzureCredential`` (env, workload identity, then the VM's
managed identity through IMDS, then developer tools); alibabacloud_credentials' default chain
(env, OIDC, config file, then the ECS RAM role through 100.100.100.200); tencentcloud-common's
``DefaultCredentialProvider`` (env, profile file, then the CVM role through
metadata.tencentyun.com, then TKE OIDC).

Regions: AWS takes an ARN's region, else ``region=``, else boto3's own (``AWS_DEFAULT_REGION``,
the config file; boto3 does not ask IMDS, so on EC2 the agent passes ``region=``); Alibaba an
ARN's region, else ``region=``, else ``ALIBABA_CLOUD_REGION_ID``; Tencent ``region=``, else
``TENCENTCLOUD_REGION``. GCP and Azure need none.

Endpoint overrides (tests, private endpoints): AWS honours ``AWS_ENDPOINT_URL``,
``AWS_ENDPOINT_URL_SECRETS_MANAGER`` and ``AWS_ENDPOINT_URL_SSM`` itself (botocore);
``PROVISIONER_GCP_SECRETS_ENDPOINT`` (the REST endpoint, ``http://`` allowed);
``PROVISIONER_AZURE_KEYVAULT_ENDPOINT`` (replaces the vault URL's scheme and host; bearer
tokens still go over https only, and the challenge's resource is not matched to that host, as it
cannot be); ``PROVISIONER_ALIBABA_KMS_ENDPOINT`` and ``PROVISIONER_TENCENT_SSM_ENDPOINT``
(``host:port``; plain http for ``http://host:port`` or a loopback host).

Each cloud's reader is ``providers/<cloud>/secrets.py`` (its SDK imported inside ``read``);
the grammar and the errors are :mod:`providers.secretref`, re-exported here.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from providers.base import register_secret
from providers.secretref import (
    FORMS,
    NOT_FOUND,
    SecretError,
    SecretRef,
    SecretRefError,
    parse_secret_ref,
    pick_field,
)

__all__ = [
    "FORMS",
    "SIM_SECRETS_ENV",
    "SecretError",
    "SecretRef",
    "SecretRefError",
    "parse_secret_ref",
    "read_secret",
]

SIM_SECRETS_ENV = "PROVISIONER_SIM_SECRETS"

#: loggers that may log a response body at DEBUG while a secret is read
SDK_LOGGERS = (
    "botocore",
    "boto3",
    "urllib3",
    "google",
    "azure",
    "msal",
    "alibabacloud",
    "darabonba-core",
    "Tea",
    "tencentcloud_sdk_common",
)
_QUIET = threading.Lock()

Reader = Callable[..., str]


def read_secret(ref: SecretRef | str, *, region: str | None = None) -> str:
    """The value ``ref`` names, read with the SDK's default credentials (on a VM: its identity).

    Raises :class:`SecretRefError` for a reference that does not parse and :class:`SecretError`
    for a read that fails; neither ever holds the value."""
    parsed = ref if isinstance(ref, SecretRef) else parse_secret_ref(ref)
    with _quiet_sdk_loggers():
        raw = (
            _read_sim(parsed)
            if parsed.cloud == "sim"
            else _reader(parsed.cloud)(parsed, region=region)
        )
    register_secret(raw)
    value = pick_field(parsed, raw)
    register_secret(value)
    return value


def _reader(cloud: str) -> Reader:
    if cloud == "aws":
        from providers.aws import secrets as aws

        return aws.read
    if cloud == "gcp":
        from providers.gcp import secrets as gcp

        return gcp.read
    if cloud == "azure":
        from providers.azure import secrets as azure

        return azure.read
    if cloud == "alibaba":
        from providers.alibaba import secrets as alibaba

        return alibaba.read
    if cloud == "tencent":
        from providers.tencent import secrets as tencent

        return tencent.read
    raise SecretRefError(f"no secret store for cloud {cloud!r}")


def _read_sim(ref: SecretRef) -> str:
    """The sim cloud's store: a YAML mapping of NAME: value in ``$PROVISIONER_SIM_SECRETS``."""
    import yaml

    path = os.environ.get(SIM_SECRETS_ENV)
    if not path:
        raise SecretError(ref.text, f"no sim secrets file ({SIM_SECRETS_ENV} is not set)")
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
    except OSError as exc:
        raise SecretError(ref.text, f"sim secrets file unreadable: {exc.strerror}") from None
    except yaml.YAMLError:  # its message may quote the file: not shown
        raise SecretError(ref.text, "sim secrets file is not valid YAML") from None
    if not isinstance(document, dict):
        raise SecretError(ref.text, "sim secrets file is not a mapping of NAME: value")
    if ref.name not in document:
        raise SecretError(ref.text, NOT_FOUND)
    value = document[ref.name]
    if not isinstance(value, str):
        raise SecretError(ref.text, "the sim secret is not a string (quote it in the YAML)")
    return value


@contextmanager
def _quiet_sdk_loggers() -> Iterator[None]:
    """Hold the SDK loggers at INFO or above for the read; restore their levels after."""
    with _QUIET:
        saved: dict[str, int] = {}
        known = list(logging.root.manager.loggerDict)
        for prefix in SDK_LOGGERS:
            for name in [prefix, *(n for n in known if n.startswith(prefix + "."))]:
                logger = logging.getLogger(name)
                if name not in saved and logger.getEffectiveLevel() < logging.INFO:
                    saved[name] = logger.level
                    logger.setLevel(logging.INFO)
        try:
            yield
        finally:
            for name, level in saved.items():
                logging.getLogger(name).setLevel(level)
