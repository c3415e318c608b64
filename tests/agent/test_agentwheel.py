"""The running version's wheel on its road to the VM: built offline, stored once, linked by a
short-lived URL that reads that one object, fetched and digest-checked by the boot script.

Real parts: pip installs the wheel; moto's server stores it and answers the presigned URL; a
GCS V4 signature is verified with the service account's public key over the canonical request
as Google documents it; an Azure SAS with the account key over the documented string-to-sign;
the boot script's fetch runs for real against an HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import stat
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from providers.bootstrap import WHEEL_DIR, BootstrapError, render_bootstrap
from provisioner.agentwheel import WheelError, WheelLink
from provisioner.agentwheel.build import Wheel, running_wheel, wheel_bytes
from provisioner.agentwheel.carry import URL_LIFETIME, ensure_stored, link_for, wanted, wheel_uri
from provisioner.agentwheel.sign import signed_url

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2031, 5, 4, 12, 0, tzinfo=UTC)  # any date: nothing here reads the wall clock


@pytest.fixture
def wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Wheel:
    monkeypatch.setenv("PROVISIONER_WHEEL_CACHE", str(tmp_path / "wheels"))
    return running_wheel()


def test_the_wheel_is_the_same_bytes_each_time_and_names_itself(wheel: Wheel) -> None:
    version, filename, data = wheel_bytes()
    assert hashlib.sha256(data).hexdigest() == wheel.sha256
    assert wheel.path.read_bytes() == data and filename == wheel.filename
    assert filename == f"provisioner-{version}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel.path).namelist()
    assert "provisioner/agent/__main__.py" in names and "policies/gpus.csv" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    meta = zipfile.ZipFile(wheel.path).read(f"provisioner-{version}.dist-info/METADATA").decode()
    assert 'Requires-Dist: boto3>=1.34; extra == "aws"' in meta


def test_pip_installs_it_offline_and_the_installed_copy_makes_the_same_wheel(
    wheel: Wheel, tmp_path: Path
) -> None:
    """pip takes the wheel with no index; the copy it installed (not editable, no pyproject)
    carries its entry points, and a wheel made from that copy is byte for byte this one."""
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel.path),
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    probe = (
        "import json, provisioner; from importlib.metadata import entry_points;"
        "from provisioner.agentwheel.build import running_wheel;"
        "print(json.dumps([provisioner.__file__, sorted(e.name for e in "
        "entry_points(group='provisioner.clouds')), running_wheel().sha256]))"
    )
    env = {**os.environ, "PYTHONPATH": str(target), "PROVISIONER_WHEEL_CACHE": str(tmp_path / "c")}
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    where, clouds, sha = json.loads(out.stdout)
    assert where.startswith(str(target))
    assert clouds == ["alibaba", "aws", "azure", "gcp", "tencent"]
    assert sha == wheel.sha256


def test_a_checkout_without_a_static_version_gives_no_wheel(tmp_path: Path) -> None:
    for name in ("provisioner", "providers", "policies"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "provisioner"\ndynamic = ["version"]\n'
    )
    dirs = [tmp_path / n for n in ("provisioner", "providers", "policies")]
    with pytest.raises(WheelError, match="no static version"):
        wheel_bytes(dirs)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "provisioner"\nversion = "2.0"\n')
    version, filename, data = wheel_bytes(dirs)
    assert (version, filename) == ("2.0", "provisioner-2.0-py3-none-any.whl")
    names = zipfile.ZipFile(__import__("io").BytesIO(data)).namelist()
    assert "providers/__init__.py" in names and "provisioner-2.0.dist-info/RECORD" in names


def test_which_launches_carry_the_wheel() -> None:
    assert wanted("aws", {})
    assert wanted("gcp", {"pip_args": ["--index-url", "https://mirror/simple"]})
    assert not wanted("aws", {"package_spec": "provisioner[aws] @ https://h/p.whl"})
    assert not wanted("azure", {"agent_preinstalled": True})
    assert not wanted("sim", {})
    assert not wanted("nosuchcloud", {})


# -- the store and its URLs ------------------------------------------------------------------


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3bucket(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    import uuid

    from provisioner.objstore.fs import BotoS3FileSystem

    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "PROVISIONER_S3_BACKEND", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_endpoint)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWHEELTEST0000001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wheel-secret-never-on-the-vm")
    name = f"ck-{uuid.uuid4().hex[:12]}"
    BotoS3FileSystem().client.create_bucket(Bucket=name)
    return name


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return bytes(resp.read())


def test_s3_stores_once_and_the_presigned_url_reads_that_object_only(
    wheel: Wheel, s3bucket: str
) -> None:
    store = f"s3://{s3bucket}/jobs"
    uri, sent = ensure_stored(wheel, store)
    assert uri == f"{store}/.provisioner/wheels/{wheel.sha256}/{wheel.filename}" and sent
    assert ensure_stored(wheel, store) == (uri, False)  # the second time: one look

    link = link_for(store, NOW, wheel=wheel)
    assert link.sha256 == wheel.sha256 and link.expires == NOW + URL_LIFETIME
    assert hashlib.sha256(fetch(link.url)).hexdigest() == wheel.sha256  # no credentials here
    query = parse_qs(urlsplit(link.url).query)
    assert query["X-Amz-Expires"] == [str(int(URL_LIFETIME.total_seconds()))]
    assert "wheel-secret-never-on-the-vm" not in link.url
    assert "wheel-secret" not in repr(link) and link.url not in repr(link)

    # moto answers presigned URLs without checking them: the signature is checked here as
    # AWS documents SigV4 query signing; it covers the object's path, so no other object
    assert _sigv4_valid(link.url, "wheel-secret-never-on-the-vm")
    other = urlsplit(link.url)._replace(path=f"/{s3bucket}/jobs/other.txt").geturl()
    assert not _sigv4_valid(other, "wheel-secret-never-on-the-vm")


def _sigv4_valid(url: str, secret: str) -> bool:
    """AWS's "Authenticating requests: using query parameters (SigV4)", for a GET."""
    parts = urlsplit(url)
    pairs = [p.split("=", 1) for p in parts.query.split("&")]
    query = {k: urllib.parse.unquote(v) for k, v in pairs}
    canonical_query = "&".join(
        f"{quote(k, safe='-_.~')}={quote(query[k], safe='-_.~')}"
        for k in sorted(query)
        if k != "X-Amz-Signature"
    )
    canonical = "\n".join(
        ["GET", parts.path, canonical_query, f"host:{parts.netloc}", "", "host", "UNSIGNED-PAYLOAD"]
    )
    _key_id, date, region, service, _end = query["X-Amz-Credential"].split("/")
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256",
            query["X-Amz-Date"],
            scope,
            hashlib.sha256(canonical.encode()).hexdigest(),
        ]
    )
    key = f"AWS4{secret}".encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    mine = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(mine, query["X-Amz-Signature"])


def test_a_file_store_links_its_path(wheel: Wheel, tmp_path: Path) -> None:
    store = f"file://{tmp_path / 'ck'}"
    link = link_for(store, NOW, wheel=wheel)
    assert link.url == "file://" + quote(str(tmp_path / "ck" / wheel_uri("", wheel)[1:]))
    assert hashlib.sha256(fetch(link.url)).hexdigest() == wheel.sha256
    assert not list((tmp_path / "ck").rglob("*.part"))  # put whole, by a rename


def test_a_store_with_no_url_is_refused_with_what_to_do(wheel: Wheel) -> None:
    with pytest.raises(WheelError, match="package_spec"):
        signed_url("memory://x/y.whl", NOW, URL_LIFETIME)
    with pytest.raises(WheelError, match="at most"):
        signed_url("s3://b/k", NOW, timedelta(days=8))


def _rsa_key() -> tuple[str, object]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return pem, key.public_key()


def test_gcs_v4_signed_url_verifies_as_google_documents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Signed with a service account key (read by google.auth as on a real machine); the
    signature checked with its public key over the canonical request rebuilt here from
    Google's "Signing URLs manually" (V4, GOOG4-RSA-SHA256, UNSIGNED-PAYLOAD)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    pem, public = _rsa_key()
    email = "wheels@proj.iam.gserviceaccount.com"
    keyfile = tmp_path / "sa.json"
    keyfile.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "proj",
                "private_key_id": "k1",
                "private_key": pem,
                "client_email": email,
                "client_id": "1",
                "token_uri": "https://oauth2.googleapis.com/token",
            }
        )
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(keyfile))
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    name = "ck/.provisioner/wheels/ab/provisioner-0.1.0-py3-none-any.whl"
    url = signed_url(f"gs://bkt/{name}", NOW, timedelta(hours=2))
    assert pem not in url

    parts = urlsplit(url)
    assert parts.netloc == "storage.googleapis.com" and parts.path == f"/bkt/{name}"
    pairs = [p.split("=", 1) for p in parts.query.split("&")]
    query = dict(pairs)
    assert query["X-Goog-Algorithm"] == "GOOG4-RSA-SHA256"
    assert query["X-Goog-Date"] == "20310504T120000Z" and query["X-Goog-Expires"] == "7200"
    scope = "20310504/auto/storage/goog4_request"
    assert urllib.parse.unquote(query["X-Goog-Credential"]) == f"{email}/{scope}"
    canonical_query = "&".join(
        f"{k}={v}" for k, v in sorted((k, v) for k, v in pairs if k != "X-Goog-Signature")
    )

    def to_sign(path: str) -> bytes:
        canonical = "\n".join(
            [
                "GET",
                path,
                canonical_query,
                "host:storage.googleapis.com",
                "",
                "host",
                "UNSIGNED-PAYLOAD",
            ]
        )
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        return "\n".join(["GOOG4-RSA-SHA256", "20310504T120000Z", scope, digest]).encode()

    signature = bytes.fromhex(query["X-Goog-Signature"])
    verify = public.verify  # type: ignore[attr-defined]
    verify(signature, to_sign(parts.path), padding.PKCS1v15(), hashes.SHA256())
    with pytest.raises(InvalidSignature):  # the path is signed: not another object
        verify(signature, to_sign("/bkt/other"), padding.PKCS1v15(), hashes.SHA256())


def test_azure_sas_reads_one_blob_and_verifies_as_azure_documents(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An account-key service SAS: read only, on that blob, from five minutes before ``now``
    to the lifetime after; the signature is HMAC-SHA256 with the key over the string-to-sign
    of Azure's "Create a service SAS" for the version it names."""
    key = base64.b64encode(b"k" * 64).decode()
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", key)
    monkeypatch.delenv("PROVISIONER_AZURE_BLOB_ENDPOINT", raising=False)
    name = "ck/.provisioner/wheels/ab/provisioner-0.1.0-py3-none-any.whl"
    uri = f"abfs://jobs@acct.dfs.core.windows.net/{name}"
    url = signed_url(uri, NOW, timedelta(hours=2))
    assert key not in url
    parts = urlsplit(url)
    assert parts.netloc == "acct.blob.core.windows.net" and parts.path == f"/jobs/{name}"
    q = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert q["sp"] == "r" and q["sr"] == "b" and q["spr"] == "https"
    assert q["st"] == "2031-05-04T11:55:00Z" and q["se"] == "2031-05-04T14:00:00Z"
    fields = [
        q["sp"],
        q["st"],
        q["se"],
        f"/blob/acct/jobs/{name}",
        q.get("si", ""),
        q.get("sip", ""),
        q["spr"],
        q["sv"],
        q["sr"],
        "",  # signedSnapshotTime
        q.get("ses", ""),  # signedEncryptionScope
        *[q.get(k, "") for k in ("rscc", "rscd", "rsce", "rscl", "rsct")],
    ]
    expected = hmac.new(base64.b64decode(key), "\n".join(fields).encode(), hashlib.sha256).digest()
    assert base64.b64decode(q["sig"]) == expected


# -- the boot script's fetch, for real ---------------------------------------------------------


class _Serve(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def http() -> Iterator[tuple[str, type[_Serve]]]:
    handler = type("Handler", (_Serve,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/w.whl?X-Amz-Signature=00", handler
    server.shutdown()
    server.server_close()


#: plays python3 for the script: runs real Python code (the fetch, the digest) and records
#: venv / pip / agent calls without doing them
STUB = """#!/bin/sh
echo "$0 $*" >> "$CALLS"
case "$1 $2" in
  "-m venv") mkdir -p "$3/bin" && cp "$0" "$3/bin/python3" && exit 0 ;;
  "-m pip") exit 0 ;;
  "-m provisioner.agent") exit 0 ;;
esac
exec {python} "$@"
"""


def _run_script(tmp_path: Path, link: WheelLink) -> tuple[subprocess.CompletedProcess[str], Path]:
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    stub = stubs / "python3"
    stub.write_text(STUB.format(python=sys.executable))
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    script = tmp_path / "boot.sh"
    script.write_text(render_bootstrap({"job_id": "j", "attempt": 1}, cloud="aws", wheel=link))
    calls = tmp_path / "calls"
    env = {
        "PATH": f"{stubs}:/usr/bin:/bin",
        "PROVISIONER_BOOTSTRAP_ROOT": str(tmp_path / "root"),
        "CALLS": str(calls),
        "HOME": str(tmp_path),
    }
    done = subprocess.run(
        ["sh", str(script)], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    return done, calls


def test_the_boot_script_fetches_checks_and_installs_the_wheel(
    tmp_path: Path, http: tuple[str, type[_Serve]]
) -> None:
    url, handler = http
    handler.body = b"PK wheel bytes"
    sha = hashlib.sha256(handler.body).hexdigest()
    link = WheelLink(url, sha, "provisioner-0.1.0-py3-none-any.whl", NOW)
    done, calls = _run_script(tmp_path, link)
    assert done.returncode == 0, done.stderr
    kept = tmp_path / "root" / WHEEL_DIR.lstrip("/") / link.filename
    assert kept.read_bytes() == handler.body
    installs = [c for c in calls.read_text().splitlines() if " -m pip install -q " in c]
    assert installs[-1].endswith(f"-m pip install -q {kept}[aws]")


def test_the_boot_script_refuses_a_wheel_with_another_digest(
    tmp_path: Path, http: tuple[str, type[_Serve]]
) -> None:
    url, handler = http
    handler.body = b"another build"
    link = WheelLink(url, "0" * 64, "provisioner-0.1.0-py3-none-any.whl", NOW)
    done, calls = _run_script(tmp_path, link)
    assert done.returncode == 1
    assert "refused, nothing installed" in done.stderr
    made = calls.read_text().splitlines()
    assert not [c for c in made if " -m pip " in c or "provisioner.agent" in c or "-m venv" in c]
    assert not list((tmp_path / "root").rglob("*.whl*"))


def test_the_script_carries_a_safe_link_only() -> None:
    good = WheelLink("https://b/k?sig=1", "a" * 64, "provisioner-0.1.0-py3-none-any.whl", NOW)
    for bad in (
        WheelLink("https://b/k\nrm -rf /", good.sha256, good.filename, NOW),
        WheelLink("ftp://b/k", good.sha256, good.filename, NOW),
        WheelLink(good.url, "zz", good.filename, NOW),
        WheelLink(good.url, good.sha256, "../x;y.whl", NOW),
    ):
        with pytest.raises(BootstrapError):
            render_bootstrap({"job_id": "j"}, cloud="gcp", wheel=bad)
    script = render_bootstrap({"job_id": "j"}, cloud="gcp", wheel=good)
    assert "'https://b/k?sig=1'" in script and 'pip install -q  "$PACKAGE"' in script
    # with agent_preinstalled nothing is fetched
    assert "https://b/k" not in render_bootstrap(
        {"job_id": "j"}, cloud="gcp", wheel=good, agent_preinstalled=True
    )
