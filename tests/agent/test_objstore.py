"""The checkpoint store on s3:// through boto3 (provisioner.objstore.fs), against moto's real
S3 server over HTTP: every filesystem method, pagination past 1000 keys, a multipart transfer,
the errors, a whole CheckpointStore cycle (the same assertions as on file://) and the node
agent run as a subprocess with its checkpoint store in a bucket.

One moto server for the module, a fresh bucket for each test.
"""

from __future__ import annotations

import hashlib
import http.server
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from provisioner.agent.spec import AgentSpec
from provisioner.agent.store import CheckpointStore, read_progress
from provisioner.objstore.fs import (
    AccessDeniedError,
    BotoS3FileSystem,
    NoSuchBucketError,
    ObjectStoreError,
    ThrottledError,
    filesystem,
)
from provisioner.objstore.s3errors import errors
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
#: the job counts steps and checkpoints only when signalled
QUIET = ("--checkpoint-every", "0", "--log-every", "0")
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3env(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The environment an agent on a VM would have, pointed at the moto server."""
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_RETRY_MODE", "AWS_MAX_ATTEMPTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("PROVISIONER_S3_BACKEND", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    return endpoint


@pytest.fixture
def bucket(s3env: str) -> str:
    name = f"ck-{uuid.uuid4().hex[:12]}"
    BotoS3FileSystem().client.create_bucket(Bucket=name)
    return name


@pytest.fixture
def fs(bucket: str) -> BotoS3FileSystem:
    return BotoS3FileSystem()


def calls(fs: BotoS3FileSystem) -> Counter[str]:
    """S3 operations ``fs`` sends from now on, by name."""
    seen: Counter[str] = Counter()

    def hook(event_name: str, **_: Any) -> None:
        seen[event_name.rsplit(".", 1)[-1]] += 1

    fs.client.meta.events.register("before-call.s3", hook)
    return seen


# -- choosing the filesystem ----------------------------------------------------------------


def test_s3_goes_to_boto3_and_the_rest_to_fsspec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROVISIONER_S3_BACKEND", raising=False)
    for uri in ("s3://bkt/a/b/", "s3a://bkt/a/b"):
        fs, path = filesystem(uri)
        assert isinstance(fs, BotoS3FileSystem) and path == "bkt/a/b"
    assert filesystem("s3://bkt/a")[0] is not filesystem("s3://bkt/a")[0]  # not cached
    fs, path = filesystem(f"file://{tmp_path}")
    assert fs.protocol[0] == "file" and path == str(tmp_path)

    missing = {"gs": "gcsfs", "az": "adlfs"}
    for proto, package in missing.items():
        if importlib.util.find_spec(package) is None:
            with pytest.raises(ImportError, match=f"pip install {package}"):
                filesystem(f"{proto}://bkt/x")

    monkeypatch.setenv("PROVISIONER_S3_BACKEND", "s3fs")
    if importlib.util.find_spec("s3fs") is None:
        with pytest.raises(ImportError, match="pip install s3fs"):
            filesystem("s3://bkt/x")
    else:
        assert not isinstance(filesystem("s3://bkt/x")[0], BotoS3FileSystem)
    monkeypatch.setenv("PROVISIONER_S3_BACKEND", "minio")
    with pytest.raises(ValueError, match="PROVISIONER_S3_BACKEND"):
        filesystem("s3://bkt/x")


def test_importing_the_store_loads_no_sdk() -> None:
    code = (
        "import json, sys\n"
        "import provisioner.objstore.fs, provisioner.agent.store\n"
        "from provisioner.objstore.fs import filesystem\n"
        "filesystem('s3://bkt/x')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('boto3', 'botocore', 's3transfer'))))\n"
    )
    done = subprocess.run([PY, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []


def test_endpoint_from_the_environment_or_the_options(
    s3env: str, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert BotoS3FileSystem().client.meta.endpoint_url == s3env  # AWS_ENDPOINT_URL_S3
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3env)
    BotoS3FileSystem().pipe_file(f"{bucket}/generic", b"1")  # AWS_ENDPOINT_URL
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing there
    for fs in (
        BotoS3FileSystem(endpoint_url=s3env),
        BotoS3FileSystem(client_kwargs={"endpoint_url": s3env, "region_name": "eu-west-1"}),
        filesystem(f"s3://{bucket}", endpoint_url=s3env)[0],
    ):
        assert fs.cat_file(f"{bucket}/generic") == b"1"
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # boto3's own setting, honoured: no retries
    with pytest.raises(ConnectionError, match="AWS_ENDPOINT_URL_S3"):
        BotoS3FileSystem().cat_file(f"{bucket}/generic")


# -- the filesystem methods ------------------------------------------------------------------


def test_round_trips(fs: BotoS3FileSystem, bucket: str, tmp_path: Path) -> None:
    b = bucket
    fs.mkdir(f"{b}/d")
    fs.makedirs(f"{b}/d/e", exist_ok=True)  # no-ops: S3 has no directories
    assert fs.ls(b) == []
    sent = calls(fs)
    fs.pipe_file(f"s3://{b}/d/one.txt", b"0123456789")
    assert sent == {"PutObject": 1}
    fs.pipe_file(f"{b}/d/sub/two.bin", b"22")
    fs.pipe_file(f"{b}/top", b"t")
    assert fs.cat_file(f"{b}/d/one.txt") == b"0123456789"
    assert fs.cat_file(f"{b}/d/one.txt", start=2, end=5) == b"234"
    assert fs.cat_file(f"{b}/d/one.txt", start=7) == b"789"
    assert fs.cat_file(f"{b}/d/one.txt", start=-3) == b"789"
    assert fs.cat_file(f"{b}/d/one.txt", start=1, end=-7) == b"12"
    assert fs.cat_file(f"{b}/d/one.txt", start=20) == b""
    assert fs.cat_file(f"{b}/d/one.txt", start=5, end=5) == b""

    assert fs.ls(f"{b}/d", detail=False) == [f"{b}/d/sub", f"{b}/d/one.txt"]
    listing = {e["name"]: e for e in fs.ls(f"s3://{b}/d/")}
    assert listing[f"{b}/d/sub"]["type"] == "directory"
    assert listing[f"{b}/d/one.txt"]["size"] == 10 and listing[f"{b}/d/one.txt"]["type"] == "file"
    assert fs.ls(f"{b}/d/one.txt", detail=False) == [f"{b}/d/one.txt"]  # a file lists as itself
    assert sorted(fs.ls(b, detail=False)) == [f"{b}/d", f"{b}/top"]
    assert fs.find(f"{b}/d") == [f"{b}/d/one.txt", f"{b}/d/sub/two.bin"]
    assert fs.find(f"{b}/d", withdirs=True) == [
        f"{b}/d/one.txt",
        f"{b}/d/sub",
        f"{b}/d/sub/two.bin",
    ]
    assert fs.find(f"{b}/d", maxdepth=1) == [f"{b}/d/one.txt"]
    assert set(fs.find(f"{b}/d", detail=True)[f"{b}/d/sub/two.bin"]) >= {"size", "type"}
    assert fs.find(f"{b}/d/one.txt") == [f"{b}/d/one.txt"]
    assert fs.find(f"{b}/nothing") == []
    assert fs.find(b) == [f"{b}/d/one.txt", f"{b}/d/sub/two.bin", f"{b}/top"]

    info = fs.info(f"{b}/d/one.txt")
    assert (info["name"], info["size"], info["type"]) == (f"{b}/d/one.txt", 10, "file")
    assert fs.info(f"{b}/d") == {"name": f"{b}/d", "size": 0, "type": "directory"}
    assert fs.info(b)["type"] == "directory"
    assert fs.size(f"{b}/d/sub/two.bin") == 2
    modified = fs.modified(f"{b}/top")
    assert abs((datetime.now(UTC) - modified).total_seconds()) < 300
    assert fs.exists(f"{b}/top") and fs.exists(f"{b}/d") and not fs.exists(f"{b}/nope")
    assert fs.isdir(f"{b}/d/sub") and fs.isfile(f"{b}/top") and not fs.isfile(f"{b}/d")

    with fs.open(f"{b}/w.txt", "w") as fh:  # generic fsspec code: text and binary modes
        fh.write("written\n")
    with fs.open(f"{b}/w.txt", "rb") as fh:
        assert fh.read() == b"written\n"
    assert fs.read_text(f"{b}/w.txt") == "written\n"
    with pytest.raises(ValueError, match="mode"):
        fs.open(f"{b}/w.txt", "ab")

    local = tmp_path / "local.bin"
    local.write_bytes(b"local bytes")
    fs.put_file(str(local), f"{b}/up/local.bin")
    fs.get_file(f"{b}/up/local.bin", str(tmp_path / "deep" / "back.bin"))
    assert (tmp_path / "deep" / "back.bin").read_bytes() == b"local bytes"

    fs.rm_file(f"{b}/top")
    fs.rm(f"{b}/w.txt")
    assert not fs.exists(f"{b}/top") and not fs.exists(f"{b}/w.txt")
    fs.rm(f"{b}/d", recursive=True)
    assert fs.find(b) == [f"{b}/up/local.bin"]
    with pytest.raises(FileNotFoundError):
        fs.rm(f"{b}/d", recursive=True)


def test_listing_past_one_page_from_many_threads(
    fs: BotoS3FileSystem, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Any] = []
    real = fs._new_client

    def counted() -> Any:
        made.append(threading.get_ident())
        return real()

    monkeypatch.setattr(fs, "_new_client", counted)
    n = 1010
    with ThreadPoolExecutor(8) as pool:  # one filesystem, one client, many threads
        list(pool.map(lambda i: fs.pipe_file(f"{bucket}/many/k{i:05d}", str(i).encode()), range(n)))
        fs.pipe_file(f"{bucket}/many/sub/x", b"x")
        got = list(pool.map(lambda i: fs.cat_file(f"{bucket}/many/k{i:05d}"), range(0, n, 101)))
    assert len(made) == 1
    assert got == [str(i).encode() for i in range(0, n, 101)]
    sent = calls(fs)
    names = fs.ls(f"{bucket}/many", detail=False)
    assert sent["ListObjectsV2"] == 2  # two pages of at most 1000
    assert len(names) == n + 1 and f"{bucket}/many/sub" in names
    assert f"{bucket}/many/k{n - 1:05d}" in names
    found = fs.find(f"{bucket}/many")
    assert len(found) == n + 1 and found[-1] == f"{bucket}/many/sub/x"
    sent.clear()
    fs.rm(f"{bucket}/many", recursive=True)
    assert sent["DeleteObjects"] == 2  # 1000 keys a request
    assert fs.find(bucket) == []


def test_a_big_file_goes_through_the_managed_transfer(
    fs: BotoS3FileSystem, bucket: str, tmp_path: Path
) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(20 * 1024 * 1024))
    digest = hashlib.sha256(big.read_bytes()).hexdigest()
    sent = calls(fs)
    started = time.perf_counter()
    fs.put_file(str(big), f"{bucket}/ck/big.bin")
    put_s = time.perf_counter() - started
    assert sent["CreateMultipartUpload"] == 1 and sent["UploadPart"] >= 3, sent
    assert fs.size(f"{bucket}/ck/big.bin") == big.stat().st_size
    sent.clear()
    started = time.perf_counter()
    fs.get_file(f"{bucket}/ck/big.bin", str(tmp_path / "back.bin"))
    get_s = time.perf_counter() - started
    assert sent["GetObject"] >= 3, sent  # ranged parts
    assert hashlib.sha256((tmp_path / "back.bin").read_bytes()).hexdigest() == digest
    print(f"20 MiB: put {put_s:.2f}s, get {get_s:.2f}s (moto on 127.0.0.1)")


# -- errors ------------------------------------------------------------------------------------


def test_a_missing_key_is_file_not_found(fs: BotoS3FileSystem, bucket: str, tmp_path: Path) -> None:
    for call in (
        lambda: fs.cat_file(f"{bucket}/nope"),
        lambda: fs.info(f"{bucket}/nope"),
        lambda: fs.size(f"{bucket}/nope"),
        lambda: fs.ls(f"{bucket}/nope"),
        lambda: fs.get_file(f"{bucket}/nope", str(tmp_path / "x")),
        lambda: fs.open(f"{bucket}/nope", "rb"),
    ):
        with pytest.raises(FileNotFoundError, match=f"s3://{bucket}/nope") as caught:
            call()
        assert not isinstance(caught.value, NoSuchBucketError)
    assert not fs.exists(f"{bucket}/nope")
    assert not (tmp_path / "x").exists()


def test_a_missing_bucket_says_what_to_do(s3env: str, tmp_path: Path) -> None:
    fs = BotoS3FileSystem()
    name = f"gone-{uuid.uuid4().hex[:8]}"
    local = tmp_path / "f"
    local.write_bytes(b"1")
    for call in (
        lambda: fs.pipe_file(f"{name}/k", b"1"),
        lambda: fs.put_file(str(local), f"{name}/k"),
        lambda: fs.cat_file(f"{name}/k"),
        lambda: fs.get_file(f"{name}/k", str(tmp_path / "g")),
        lambda: fs.ls(f"{name}/k"),
        lambda: fs.find(name),
        lambda: fs.info(name),
        lambda: fs.exists(f"{name}/k"),
        lambda: fs.rm(f"{name}/k", recursive=True),
    ):
        with pytest.raises(NoSuchBucketError, match=f"bucket '{name}' does not exist") as caught:
            call()
        assert "create it" in str(caught.value) and "s3:PutObject" in str(caught.value)
        assert isinstance(caught.value, FileNotFoundError)
    store = CheckpointStore(f"s3://{name}/ck", "job")
    assert store.latest() is None  # reads: nothing there yet
    ckpt = tmp_path / "ckpt-1"
    ckpt.mkdir()
    (ckpt / "w").write_bytes(b"w")
    with pytest.raises(NoSuchBucketError, match="does not exist"):  # the syncer logs this
        store.upload(ckpt, ckpt.name)


def _client_error(code: str, op: str, message: str = "m", status: int = 400) -> Exception:
    from botocore.exceptions import ClientError

    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, op)


def raised(exc: BaseException) -> BaseException:
    try:
        with errors("bkt", "ck/job/latest"):
            raise exc
    except BaseException as out:
        return out
    raise AssertionError("nothing raised")


def test_s3_error_codes_become_python_errors_with_advice() -> None:
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError

    denied = raised(_client_error("AccessDenied", "PutObject", status=403))
    assert isinstance(denied, AccessDeniedError) and isinstance(denied, PermissionError)
    assert "grant" in str(denied) and "s3:PutObject" in str(denied)
    assert "arn:aws:s3:::bkt" in str(denied) and "s3://bkt/ck/job/latest" in str(denied)
    assert "s3:GetObject" in str(raised(_client_error("AccessDenied", "GetObject")))
    assert "s3:ListBucket" in str(raised(_client_error("403", "ListObjectsV2")))
    slow = raised(_client_error("SlowDown", "PutObject", status=503))
    assert isinstance(slow, ThrottledError) and "retry later" in str(slow)
    expired = raised(_client_error("ExpiredToken", "GetObject"))
    assert isinstance(expired, AccessDeniedError) and "expired" in str(expired)
    assert isinstance(
        raised(_client_error("NoSuchKey", "GetObject", status=404)), FileNotFoundError
    )
    assert isinstance(raised(_client_error("404", "HeadBucket", status=404)), NoSuchBucketError)
    region = raised(_client_error("PermanentRedirect", "GetObject", status=301))
    assert isinstance(region, ObjectStoreError) and "AWS_REGION" in str(region)
    creds = raised(NoCredentialsError())
    assert isinstance(creds, PermissionError) and "instance role" in str(creds)
    conn = raised(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"))
    assert isinstance(conn, ConnectionError) and "AWS_ENDPOINT_URL_S3" in str(conn)
    try:  # boto3's managed upload wraps the ClientError; the code still counts
        try:
            raise _client_error("NoSuchBucket", "PutObject", status=404)
        except Exception as inner:
            raise S3UploadFailedError(f"Failed to upload: {inner}") from None
    except S3UploadFailedError as wrapped:
        wrapped.__context__ = _client_error("NoSuchBucket", "PutObject", status=404)
        assert isinstance(raised(wrapped), NoSuchBucketError)
    other = raised(KeyError("x"))
    assert isinstance(other, KeyError)  # not S3's: left alone


def test_credentials_never_show(s3env: str) -> None:
    secret = "s3cr3t-" + uuid.uuid4().hex
    fs = BotoS3FileSystem(key="AKIAEXAMPLE" + uuid.uuid4().hex[:6].upper(), secret=secret)
    assert secret not in repr(fs)
    odd = raised(_client_error("InternalError", "PutObject", message=f"echo {secret}", status=500))
    assert isinstance(odd, ObjectStoreError) and secret not in str(odd) and "***" in str(odd)


def test_a_second_filesystem_parses_no_service_model(
    bucket: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every boto3 session of ours reads S3's model and the endpoint list through the process's
    one loader (providers.aws.session): a filesystem made after another, with credentials of
    its own, opens no JSON file of botocore's and still works with its own credentials."""
    import botocore.loaders

    BotoS3FileSystem().ls(bucket)  # the process's first S3 client: the models are read once
    opened: list[str] = []
    real = botocore.loaders.JSONFileLoader.load_file

    def counted(self: Any, file_path: str) -> Any:
        opened.append(file_path)
        return real(self, file_path)

    monkeypatch.setattr(botocore.loaders.JSONFileLoader, "load_file", counted)
    other = BotoS3FileSystem(key="AKIAOTHERKEY0000", secret="other-" + uuid.uuid4().hex)
    (tmp_path / "a.txt").write_text("shared loader")
    other.put_file(str(tmp_path / "a.txt"), f"{bucket}/a.txt")
    assert other.cat_file(f"{bucket}/a.txt") == b"shared loader"
    assert opened == []
    creds = other.client._request_signer._credentials
    assert creds.access_key == "AKIAOTHERKEY0000"  # its own credentials, not the first's


# -- the checkpoint store --------------------------------------------------------------------


@pytest.fixture(params=["file", "s3"])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/store"
    name = request.getfixturevalue("bucket")
    return f"s3://{name}/prefix/ck"


def test_checkpoint_store_cycle(store_uri: str, tmp_path: Path) -> None:
    store = CheckpointStore(store_uri, "job-1")
    assert store.latest() is None and store.checkpoints() == []
    assert store.read_json("progress.json") is None and read_progress(store_uri, "job-1") is None
    if isinstance(store.fs, BotoS3FileSystem):
        sent = calls(store.fs)
        store.write_progress({"step": 1, "state": "running"})
        assert sent == {"PutObject": 1}  # one PUT: atomic on S3
    store.write_progress({"step": 3, "state": "running"})
    assert read_progress(store_uri, "job-1") == {"step": 3, "state": "running"}
    store.write_text("notes/a.txt", "héllo")
    assert store.read_text("notes/a.txt") == "héllo"
    store.write_text("bad.json", "[1, 2]")
    assert store.read_json("bad.json") is None  # not an object

    for step in (10, 20, 30, 40):
        d = tmp_path / "local" / f"ckpt-{step:09d}"
        (d / "shards").mkdir(parents=True)
        (d / "meta.json").write_text(json.dumps({"step": step}))
        (d / "shards" / "0.bin").write_bytes(bytes([step]) * 1000)
        assert store.upload(d, d.name, keep=3)
    assert store.latest() == "ckpt-000000040"
    assert CheckpointStore(store_uri, "job-1").latest() == "ckpt-000000040"
    assert store.checkpoints() == ["ckpt-000000020", "ckpt-000000030", "ckpt-000000040"]
    older = tmp_path / "local" / "ckpt-000000025"
    older.mkdir()
    (older / "meta.json").write_text("{}")
    assert not store.upload(older, older.name, keep=0)  # latest never goes backwards
    assert store.latest() == "ckpt-000000040"
    store.prune(1)
    assert store.checkpoints() == ["ckpt-000000040"]

    back = store.download("ckpt-000000040", tmp_path / "resume")
    assert back == tmp_path / "resume" / "ckpt-000000040"
    assert json.loads((back / "meta.json").read_text()) == {"step": 40}
    assert (back / "shards" / "0.bin").read_bytes() == bytes([40]) * 1000

    out = tmp_path / "output"
    (out / "plots").mkdir(parents=True)
    (out / "result.json").write_text(json.dumps({"steps": 40}))
    (out / "plots" / "loss.txt").write_text("1 0.5\n")
    store.upload_output(out)
    assert store.read_json("output/result.json") == {"steps": 40}
    assert store.read_text("output/plots/loss.txt") == "1 0.5\n"
    assert CheckpointStore(store_uri, "job-2").latest() is None  # jobs apart


# -- the node agent, its store in a bucket -----------------------------------------------------


class _Metadata(http.server.BaseHTTPRequestHandler):
    """AWS's instance metadata (IMDSv2): a token, then 404 until a notice is served."""

    notice: str | None = None

    def do_PUT(self) -> None:
        self._answer(200, "token") if self.path == "/latest/api/token" else self._answer(404, "")

    def do_GET(self) -> None:
        if self.headers.get("X-aws-ec2-metadata-token") != "token":
            self._answer(401, "")
        elif self.path == "/latest/meta-data/spot/instance-action" and self.notice:
            self._answer(200, self.notice)
        else:
            self._answer(404, "")

    def _answer(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def metadata() -> Iterator[tuple[str, type[_Metadata]]]:
    handler = type("Metadata", (_Metadata,), {"notice": None})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_agent_checkpoints_into_a_bucket_on_a_notice(
    s3env: str, bucket: str, tmp_path: Path, metadata: tuple[str, type[_Metadata]]
) -> None:
    url, served = metadata
    store_uri = f"s3://{bucket}/prefix"
    spec = AgentSpec(
        job_id="job-s3",
        attempt=1,
        cloud="aws",
        metadata_url=url,
        checkpoint_uri=store_uri,
        workdir=str(tmp_path / "w"),
        command=[
            PY,
            "-m",
            "examples.train",
            "--steps",
            "1000000",
            "--step-seconds",
            "0.01",
            *QUIET,
        ],
        interval_s=0,
        grace_s=10,
        progress_every_s=0.5,
    )
    spec.save(tmp_path / "spec.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(CREDENTIALS, AWS_ENDPOINT_URL_S3=s3env, AWS_REGION="us-east-1", PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [PY, "-m", "provisioner.agent", "--spec", str(tmp_path / "spec.json")],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        step = lambda: (read_progress(store_uri, spec.job_id) or {}).get("step") or 0  # noqa: E731
        wait_for(lambda: step() >= 20 or proc.poll() is not None, timeout=30)
        assert proc.poll() is None, proc.communicate()[0]
        assert CheckpointStore(store_uri, spec.job_id).latest() is None  # none asked for yet
        deadline = datetime.now(UTC) + timedelta(seconds=30)
        served.notice = json.dumps(
            {"action": "terminate", "time": deadline.strftime("%Y-%m-%dT%H:%M:%SZ")}
        )
        progress = wait_for(
            lambda: (
                (p := read_progress(store_uri, spec.job_id))
                and p.get("state") == "interrupted"
                and p
            ),
            timeout=20,
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert progress["notice"] is not None and '"action": "terminate"' in progress["notice"]["raw"]
    latest = CheckpointStore(store_uri, spec.job_id).latest()
    assert latest is not None and latest == progress["last_checkpoint"], out
    assert progress["last_checkpoint_step"] >= 20
    seen = datetime.fromisoformat(progress["notice"]["seen_at"].replace("Z", "+00:00"))
    uploaded = datetime.fromisoformat(progress["last_checkpoint_at"].replace("Z", "+00:00"))
    assert seen < uploaded < deadline
    fs = BotoS3FileSystem()
    files = fs.find(f"{bucket}/prefix/{spec.job_id}/checkpoints/{latest}")
    assert sorted(f.rsplit("/", 1)[-1] for f in files) == ["meta.json", "state.npz"]
    assert fs.exists(f"{bucket}/prefix/{spec.job_id}/progress.json")
