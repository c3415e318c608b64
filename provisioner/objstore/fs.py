"""The checkpoint store's filesystems: fsspec's, except ``s3://`` through boto3.

fsspec's own S3 filesystem (s3fs) needs aiobotocore, which pins botocore too tightly to live
beside the boto3 this project uses, so :func:`filesystem` answers ``s3://`` (and ``s3a://``)
with :class:`BotoS3FileSystem`, a synchronous boto3-backed fsspec filesystem with what the
checkpoint store, the log shipper and the code archive need. ``PROVISIONER_S3_BACKEND=s3fs``
asks for s3fs instead. Other protocols (``file://``, ``gs://`` with gcsfs, ``az://`` with
adlfs) are fsspec's.

Configuration is boto3's: credentials from the environment, the profile or the VM's role;
``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` for an S3-compatible endpoint (path-style
addressing then); the region from ``AWS_REGION``, boto3's ``AWS_DEFAULT_REGION`` or config,
else the bucket's own (botocore follows S3's region redirect and remembers it per bucket).
Storage options: ``endpoint_url``, ``region_name``, ``client_kwargs`` (passed to
``boto3.client``), ``key``/``secret``/``token``, ``profile``. No SDK is imported until the
first request.
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
from collections.abc import Iterator
from typing import Any

import fsspec
from fsspec.registry import known_implementations
from fsspec.spec import AbstractFileSystem

from providers.base import register_secret
from provisioner.objstore.s3errors import (
    AccessDeniedError,
    NoSuchBucketError,
    ObjectStoreError,
    ThrottledError,
    errors,
    missing,
    translate_code,
)

__all__ = [
    "AccessDeniedError",
    "BotoS3FileSystem",
    "NoSuchBucketError",
    "ObjectStoreError",
    "ThrottledError",
    "filesystem",
]

BACKEND_ENV = "PROVISIONER_S3_BACKEND"
#: seconds to open a connection to S3, and to wait for each read of an answer (boto3's own
#: defaults are 60 and 60, with retries: an endpoint that accepts and never answers held
#: ``up`` for 425 s). Storage options ``connect_timeout``/``read_timeout`` change them.
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 20.0
S3_PROTOCOLS = ("s3", "s3a")
ENDPOINT_ENVS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
#: local URIs resolved (fsspec's local filesystem is one object; its parsing cost the daemon's
#: cold pass a tenth of a second at 10,000 jobs)
_LOCAL: dict[str, tuple[AbstractFileSystem, str]] = {}


def filesystem(uri: str, **storage_options: Any) -> tuple[AbstractFileSystem, str]:
    """``(filesystem, path)`` for an fsspec URI, as ``fsspec.core.url_to_fs`` gives, but with
    :class:`BotoS3FileSystem` for ``s3://`` unless ``PROVISIONER_S3_BACKEND=s3fs``."""
    protocol = uri.split("://", 1)[0].lower() if "://" in uri else "file"
    backend = os.environ.get(BACKEND_ENV, "").strip().lower()
    if backend not in ("", "boto3", "s3fs"):
        raise ValueError(f"{BACKEND_ENV}={backend!r}: use 'boto3' (the default) or 's3fs'")
    if protocol in S3_PROTOCOLS and backend != "s3fs":
        fs = BotoS3FileSystem(**storage_options)
        return fs, fs._strip_protocol(uri)
    absolute = uri.startswith("/") or uri.split("://", 1)[-1].startswith("/")
    if protocol in ("file", "local") and absolute and not storage_options:
        got = _LOCAL.get(uri)  # an absolute path's: the same every time (the daemon asks per job)
        if got is None:
            if len(_LOCAL) > 10_000:
                _LOCAL.clear()
            got = _LOCAL[uri] = fsspec.core.url_to_fs(uri)
        return got
    try:
        return fsspec.core.url_to_fs(uri, **storage_options)
    except ImportError:
        target = str(known_implementations.get(protocol, {}).get("class", ""))
        package = target.split(".")[0]
        if not package or package == "fsspec":
            raise
        raise ImportError(
            f"a {protocol}:// checkpoint store needs the {package!r} package, which is not "
            f"installed: pip install {package}"
        ) from None


class BotoS3FileSystem(AbstractFileSystem):
    """S3 through boto3: the part of fsspec's interface the agent uses, synchronous and
    thread-safe (one boto3 client per filesystem, made on first use). Paths are
    ``bucket/key``; "directories" are key prefixes ending in ``/``."""

    protocol = ("s3", "s3a")
    root_marker = ""
    # options and environment (endpoint, credentials) are read when the client is made: a
    # cached instance could outlive them, and one client per store is cheap enough
    cachable = False

    def __init__(
        self,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        client_kwargs: dict[str, Any] | None = None,
        key: str | None = None,
        secret: str | None = None,
        token: str | None = None,
        profile: str | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        read_timeout: float = READ_TIMEOUT_S,
        max_attempts: int | None = None,
        **_ignored: Any,
    ) -> None:
        super().__init__()
        for value in (key, secret, token):
            register_secret(value)
        self.endpoint_url = endpoint_url
        self.region_name = region_name
        self.client_kwargs = dict(client_kwargs or {})
        self._credentials = {
            "aws_access_key_id": key,
            "aws_secret_access_key": secret,
            "aws_session_token": token,
            "profile_name": profile,
        }
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.max_attempts = max_attempts
        self._client: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never the options: they may hold credentials
        return f"<BotoS3FileSystem endpoint={self.endpoint_url or 'from the environment'}>"

    # -- the client ---------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                with errors("", ""):
                    self._client = self._new_client()
            return self._client

    def _new_client(self) -> Any:
        from botocore.config import Config

        from providers.aws.session import boto3_session

        kwargs = dict(self.client_kwargs)
        # the process's one loader of service models (providers.aws.session)
        session = boto3_session(**{k: v for k, v in self._credentials.items() if v})
        region = kwargs.pop("region_name", None) or self.region_name or os.environ.get("AWS_REGION")
        endpoint = kwargs.pop("endpoint_url", None) or self.endpoint_url
        custom = endpoint or (
            any(os.environ.get(e) for e in ENDPOINT_ENVS)
            and os.environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() != "true"
        )
        options: dict[str, Any] = {
            "max_pool_connections": 20,
            "connect_timeout": self.connect_timeout,
            "read_timeout": self.read_timeout,
        }
        if self.max_attempts is not None:
            options["retries"] = {"mode": "standard", "max_attempts": self.max_attempts}
        elif not (os.environ.get("AWS_RETRY_MODE") or os.environ.get("AWS_MAX_ATTEMPTS")):
            options["retries"] = {"mode": "standard", "max_attempts": 6}
        if custom:  # MinIO, Ceph, moto...: bucket names are not host names there
            options["s3"] = {"addressing_style": "path"}
        config = Config(**options)
        if kwargs.get("config") is not None:
            config = config.merge(kwargs.pop("config"))
        return session.client(
            "s3", region_name=region or None, endpoint_url=endpoint, config=config, **kwargs
        )

    @staticmethod
    def split_path(path: str) -> tuple[str, str]:
        path = BotoS3FileSystem._strip_protocol(path).lstrip("/")
        bucket, _, key = path.partition("/")
        return bucket, key

    # -- reading ------------------------------------------------------------------------------

    def cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        bucket, key = self.split_path(path)
        if (start is not None and start < 0) or (end is not None and end < 0):
            size = int(self.size(path))
            start = max(0, size + start) if start is not None and start < 0 else start
            end = max(0, size + end) if end is not None and end < 0 else end
        args: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if start or end is not None:
            if end is not None and end <= (start or 0):
                return b""
            args["Range"] = f"bytes={start or 0}-{'' if end is None else end - 1}"
        try:
            with errors(bucket, key):
                resp = self.client.get_object(**args)
                return bytes(resp["Body"].read())
        except ObjectStoreError as exc:
            if exc.code == "InvalidRange":  # starts past the end
                return b""
            raise

    def get_file(self, rpath: str, lpath: str, **kwargs: Any) -> None:
        """Download through boto3's managed transfer (ranged parts in parallel, written to a
        temporary name then renamed)."""
        bucket, key = self.split_path(rpath)
        if os.path.dirname(lpath):
            os.makedirs(os.path.dirname(lpath), exist_ok=True)
        try:
            with errors(bucket, key):
                self.client.download_file(bucket, key, lpath)
        except FileNotFoundError:
            self.info(bucket)  # a HEAD answers 404 for a missing bucket too: which is it?
            raise

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        bucket, key = self.split_path(path)
        if not key:
            with errors(bucket, ""):
                self.client.head_bucket(Bucket=bucket)
            return {"name": bucket, "size": 0, "type": "directory"}
        with contextlib.suppress(FileNotFoundError), errors(bucket, key):
            head = self.client.head_object(Bucket=bucket, Key=key)
            return _file_entry(
                bucket, key, head["ContentLength"], head.get("LastModified"), head.get("ETag")
            )
        with errors(bucket, key):  # a prefix? (a missing bucket says so here)
            resp = self.client.list_objects_v2(Bucket=bucket, Prefix=key + "/", MaxKeys=1)
        if resp.get("KeyCount", 0) or resp.get("Contents") or resp.get("CommonPrefixes"):
            return {"name": f"{bucket}/{key}", "size": 0, "type": "directory"}
        raise missing(bucket, key)

    def exists(self, path: str, **kwargs: Any) -> bool:
        """False for a missing object; a missing bucket or refused access still raises."""
        try:
            self.info(path)
        except NoSuchBucketError:
            raise
        except FileNotFoundError:
            return False
        return True

    def modified(self, path: str) -> Any:
        return self.info(path)["LastModified"]

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        bucket, key = self.split_path(path)
        prefix = key + "/" if key else ""
        entries = []
        for page in self._pages(bucket, prefix, delimiter="/"):
            for common in page.get("CommonPrefixes", []):
                name = f"{bucket}/{common['Prefix'].rstrip('/')}"
                entries.append({"name": name, "size": 0, "type": "directory"})
            for obj in page.get("Contents", []):
                if obj["Key"] != prefix:  # a console-made "folder" marker
                    entries.append(_object_entry(bucket, obj))
        if not entries and key:
            entries = [self.info(path)]  # a file lists as itself; neither: FileNotFoundError
            if entries[0]["type"] == "directory":
                entries = []
        return entries if detail else [e["name"] for e in entries]

    def find(
        self,
        path: str,
        maxdepth: int | None = None,
        withdirs: bool = False,
        detail: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Every object below ``path`` with flat listing (one request per 1000 keys)."""
        if maxdepth is not None:
            return super().find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail)
        bucket, key = self.split_path(path)
        prefix = key + "/" if key else ""
        found: dict[str, dict[str, Any]] = {}
        for page in self._pages(bucket, prefix):
            for obj in page.get("Contents", []):
                if obj["Key"].endswith("/"):
                    continue
                entry = _object_entry(bucket, obj)
                found[entry["name"]] = entry
                if withdirs:
                    parts = obj["Key"][len(prefix) :].split("/")[:-1]
                    for i in range(1, len(parts) + 1):
                        name = f"{bucket}/{prefix}{'/'.join(parts[:i])}"
                        found[name] = {"name": name, "size": 0, "type": "directory"}
        if not found and key:
            with contextlib.suppress(FileNotFoundError):
                entry = self.info(path)
                if entry["type"] == "file":
                    found[entry["name"]] = entry
        names = sorted(found)
        return {n: found[n] for n in names} if detail else names

    def _pages(self, bucket: str, prefix: str, delimiter: str = "") -> Iterator[dict[str, Any]]:
        args = {"Bucket": bucket, "Prefix": prefix}
        if delimiter:
            args["Delimiter"] = delimiter
        with errors(bucket, prefix.rstrip("/")):
            yield from self.client.get_paginator("list_objects_v2").paginate(**args)

    # -- writing ------------------------------------------------------------------------------

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        """One PUT: the object appears whole or not at all."""
        bucket, key = self.split_path(path)
        with errors(bucket, key):
            self.client.put_object(Bucket=bucket, Key=key, Body=bytes(value))

    def put_file(self, lpath: str, rpath: str, callback: Any = None, **kwargs: Any) -> None:
        """Upload through boto3's managed transfer: multipart in parallel above 8 MiB."""
        if os.path.isdir(lpath):
            return
        bucket, key = self.split_path(rpath)
        with errors(bucket, key):
            self.client.upload_file(os.fspath(lpath), bucket, key)

    def rm_file(self, path: str) -> None:
        bucket, key = self.split_path(path)
        with errors(bucket, key):
            self.client.delete_object(Bucket=bucket, Key=key)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        """Delete an object, or with ``recursive`` everything under a prefix (DeleteObjects,
        1000 keys a request). A recursive delete of nothing raises FileNotFoundError."""
        for one in [path] if isinstance(path, str) else list(path):
            if not recursive:
                self.rm_file(one)
                continue
            bucket, key = self.split_path(one)
            keys = [e.split("/", 1)[1] for e in self.find(one)]
            if not keys:
                raise missing(bucket, key)
            for i in range(0, len(keys), 1000):
                batch = [{"Key": k} for k in keys[i : i + 1000]]
                with errors(bucket, key):
                    resp = self.client.delete_objects(
                        Bucket=bucket, Delete={"Objects": batch, "Quiet": True}
                    )
                if resp.get("Errors"):
                    err = resp["Errors"][0]
                    raise translate_code(
                        err.get("Code", ""), err.get("Message", ""), "DeleteObjects", bucket, key
                    )

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """Nothing to do: S3 has no directories (buckets are made outside the agent)."""

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Nothing to do: S3 has no directories."""

    def _open(self, path: str, mode: str = "rb", autocommit: bool = True, **kwargs: Any) -> Any:
        if mode == "rb":
            return io.BytesIO(self.cat_file(path))
        if mode in ("wb", "xb"):
            return _WriteBuffer(self, path, autocommit)
        raise ValueError(f"mode {mode!r}: S3 objects open as 'rb' or 'wb'")


class _WriteBuffer(io.BytesIO):
    """Bytes written in memory, put as one object on close (or on commit in a transaction)."""

    def __init__(self, fs: BotoS3FileSystem, path: str, autocommit: bool) -> None:
        super().__init__()
        self.fs, self.path, self.autocommit = fs, path, autocommit
        self._data: bytes | None = None

    def close(self) -> None:
        if not self.closed:
            self._data = self.getvalue()
            super().close()
            if self.autocommit:
                self.commit()

    def commit(self) -> None:
        if self._data is not None:
            self.fs.pipe_file(self.path, self._data)
            self._data = None

    def discard(self) -> None:
        self._data = None


def _file_entry(bucket: str, key: str, size: int, modified: Any, etag: Any) -> dict[str, Any]:
    return {
        "name": f"{bucket}/{key}",
        "size": int(size),
        "type": "file",
        "LastModified": modified,
        "ETag": etag,
    }


def _object_entry(bucket: str, obj: dict[str, Any]) -> dict[str, Any]:
    return _file_entry(bucket, obj["Key"], obj["Size"], obj.get("LastModified"), obj.get("ETag"))


#: ``up``'s look at a remote checkpoint store before it writes the job: seconds to connect,
#: and to wait for the answer (one try, no retries)
CHECK_CONNECT_S = 5.0
CHECK_READ_S = 10.0


def reach_problem(uri: str) -> str | None:
    """Why this machine cannot use a remote checkpoint store now (None: it answered, or it is
    a local path): one listing of the job's prefix, on S3 with a connect timeout of
    :data:`CHECK_CONNECT_S` and a read timeout of :data:`CHECK_READ_S` and no retries; on any
    store, given up after both together (a thread that outlives that is left to its own
    timeouts). The message names the store without credentials and says what to check."""
    protocol = uri.split("://", 1)[0].lower() if "://" in uri else "file"
    if protocol in ("file", "local"):
        return None
    shown = _shown(uri)
    limit = CHECK_CONNECT_S + CHECK_READ_S
    outcome: dict[str, BaseException | bool] = {}

    def look() -> None:
        try:
            opts: dict[str, Any] = {}
            if protocol in S3_PROTOCOLS:
                opts = {
                    "connect_timeout": CHECK_CONNECT_S,
                    "read_timeout": CHECK_READ_S,
                    "max_attempts": 1,
                }
            fs, path = filesystem(uri, **opts)
            fs.exists(path)
            outcome["ok"] = True
        except BaseException as exc:  # reported by the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=look, name="store-check", daemon=True)
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        return (
            f"the checkpoint store {shown} did not answer within {limit:.0f} s (connect "
            f"{CHECK_CONNECT_S:.0f} s, read {CHECK_READ_S:.0f} s): check its endpoint "
            "(AWS_ENDPOINT_URL_S3 and the like), the network and any proxy between"
        )
    err = outcome.get("error")
    if isinstance(err, BaseException):
        from providers.base import redact

        kind = type(err).__name__
        return f"cannot use the checkpoint store {shown}: {kind}: {redact(str(err))}"
    return None


def _shown(uri: str) -> str:
    """A store's URI without user information or query (where credentials could sit)."""
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.hostname or ''}{parts.path}"
