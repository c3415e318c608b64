"""A short-lived URL that reads one object of a checkpoint store, and nothing else.

- ``s3://``: an S3 presigned ``GetObject`` URL (boto3, with the credentials and endpoint the
  store uses here; SigV4 query signing, at most seven days, and never longer than the
  signing session's own credentials);
- ``gs://``: a GCS V4 signed URL (google-cloud-storage, which gcsfs brings): signed with the
  service account's key, or through IAM ``signBlob`` for credentials without one (a VM's or
  an impersonated service account: they need ``iam.serviceAccounts.signBlob`` on
  themselves); ``STORAGE_EMULATOR_HOST`` points it at an emulator as it does gcsfs;
- ``az://`` / ``abfs://``: a blob service SAS with read permission only (azure-storage-blob,
  which adlfs brings): signed with ``AZURE_STORAGE_ACCOUNT_KEY`` when set, else with a user
  delegation key asked for with the Azure identity (it needs "Storage Blob Delegator");
- ``file://``: the object's own ``file://`` URL (the sim's sandboxes, a shared filesystem the
  VM mounts at the same path: nothing to sign).

OSS and COS are not checkpoint stores (:mod:`provisioner.submission`), so nothing is signed
for them. The URL is returned, never logged: until it expires it reads the wheel.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, urlsplit

from provisioner.agentwheel import WheelError

#: S3 and GCS V4 refuse a signature valid for longer
MAX_LIFETIME = timedelta(days=7)


def signed_url(uri: str, now: datetime, lifetime: timedelta) -> str:
    """A URL that reads the object at ``uri`` from ``now`` for ``lifetime``; raises
    :class:`WheelError` for a store it cannot sign for, saying what to do."""
    if lifetime <= timedelta(0) or lifetime > MAX_LIFETIME:
        raise WheelError(f"a signed URL lives more than 0 s and at most {MAX_LIFETIME}")
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else "file"
    try:
        if scheme in ("s3", "s3a"):
            return _s3(uri, lifetime)
        if scheme in ("gs", "gcs"):
            return _gcs(uri, now, lifetime)
        if scheme in ("az", "abfs", "abfss"):
            return _azure(uri, now, lifetime)
        if scheme in ("file", "local"):
            path = uri.split("://", 1)[-1] if "://" in uri else uri
            return "file://" + quote(os.path.abspath(path))
    except WheelError:
        raise
    except ImportError as exc:
        raise WheelError(f"cannot sign a {scheme}:// URL here: {exc}") from None
    except Exception as exc:
        from providers.base import redact

        raise WheelError(
            f"cannot sign a URL to the agent's wheel in the {scheme}:// store: "
            f"{type(exc).__name__}: {redact(str(exc))}"
        ) from None
    raise WheelError(
        f"a {scheme}:// store gives no URL a VM can fetch the agent's wheel from: set "
        "package_spec (or agent_preinstalled) in the provider options"
    )


def _s3(uri: str, lifetime: timedelta) -> str:
    from botocore.config import Config

    from provisioner.objstore.fs import BotoS3FileSystem

    # SigV4 always (boto3 may presign an S3-compatible endpoint with the older SigV2)
    fs = BotoS3FileSystem(client_kwargs={"config": Config(signature_version="s3v4")})
    bucket, key = fs.split_path(uri)
    return str(
        fs.client.generate_presigned_url(
            "get_object",
            Params={"Bucket": bucket, "Key": key},
            ExpiresIn=int(lifetime.total_seconds()),
        )
    )


def _gcs(uri: str, now: datetime, lifetime: timedelta) -> str:
    import google.auth
    from google.auth.transport.requests import Request
    from google.cloud.storage._signing import generate_signed_url_v4

    parts = urlsplit(uri)
    bucket, name = parts.netloc, parts.path.lstrip("/")
    credentials, _project = google.auth.default(
        scopes=["https://www.googleapis.com/auth/cloud-platform"]
    )
    email = getattr(credentials, "service_account_email", None) or getattr(
        credentials, "signer_email", None
    )
    token = None
    if not hasattr(credentials, "sign_bytes") or not getattr(credentials, "signer", None):
        if not email:
            raise WheelError(
                "the Google credentials here cannot sign a URL (user credentials have no key): "
                "use a service account (GOOGLE_APPLICATION_CREDENTIALS, or impersonation with "
                "iam.serviceAccounts.signBlob), or set package_spec in the provider options"
            )
        credentials.refresh(Request())
        token = credentials.token
    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "").rstrip("/")
    return str(
        generate_signed_url_v4(
            credentials,
            resource=f"/{bucket}/{quote(name)}",
            expiration=lifetime,
            api_access_endpoint=emulator or "https://storage.googleapis.com",
            method="GET",
            service_account_email=email if token else None,
            access_token=token,
            _request_timestamp=now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ"),
        )
    )


def _azure_parts(uri: str) -> tuple[str, str, str]:
    """(account, container, blob name) of an ``az://``/``abfs://`` URI (adlfs's forms:
    ``abfs://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH``, or ``az://CONTAINER/PATH`` with
    the account in ``AZURE_STORAGE_ACCOUNT_NAME``)."""
    parts = urlsplit(uri)
    if "@" in parts.netloc:
        container, host = parts.netloc.split("@", 1)
        account = host.split(".", 1)[0]
    else:
        container, account = parts.netloc, os.environ.get("AZURE_STORAGE_ACCOUNT_NAME", "")
    if not account or not container:
        raise WheelError(
            f"{uri} names no storage account: write abfs://CONTAINER@ACCOUNT.dfs.core."
            "windows.net/PATH, or set AZURE_STORAGE_ACCOUNT_NAME"
        )
    return account, container, parts.path.lstrip("/")


def _azure(uri: str, now: datetime, lifetime: timedelta) -> str:
    from azure.storage.blob import BlobSasPermissions, generate_blob_sas

    account, container, name = _azure_parts(uri)
    start = now.astimezone(UTC) - timedelta(minutes=5)  # the VM's clock may run a little behind
    expiry = now.astimezone(UTC) + lifetime
    key = os.environ.get("AZURE_STORAGE_ACCOUNT_KEY") or os.environ.get("AZURE_STORAGE_KEY")
    endpoint = os.environ.get("PROVISIONER_AZURE_BLOB_ENDPOINT") or (
        f"https://{account}.blob.core.windows.net"
    )
    delegation = None
    if not key:
        from azure.identity import DefaultAzureCredential
        from azure.storage.blob import BlobServiceClient

        service = BlobServiceClient(endpoint, credential=DefaultAzureCredential())
        delegation = service.get_user_delegation_key(start, expiry)
    sas = generate_blob_sas(
        account_name=account,
        container_name=container,
        blob_name=name,
        account_key=key or None,
        user_delegation_key=delegation,
        permission=BlobSasPermissions(read=True),
        start=start,
        expiry=expiry,
        protocol="https" if endpoint.startswith("https:") else None,
    )
    return f"{endpoint.rstrip('/')}/{container}/{quote(name)}?{sas}"
