"""What a real account hits: bid caps under a cloud's minimum, Tencent's UTC+8 notice time, the
error codes each cloud documents, and a provider whose SDK is not installed.

Each test drives the real SDK against moto or the HTTP fakes in tests/fakes (or the CLI as a
user runs it); each failed before the fix it guards.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from providers.base import ErrorKind, ProviderError
from provisioner.core.models import LaunchRequest, Market

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "tests" / "contract"
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))


def _request(harness: Any, cap: float, job: str) -> LaunchRequest:
    return LaunchRequest(
        job_id=job,
        attempt=1,
        offer=harness.offer(Market.SPOT),
        market=Market.SPOT,
        bid_cap_per_hour=cap,
        user_data="#!/bin/sh\ntrue\n",
    )


# -- 1. AWS: a bid cap under EC2's smallest MaxPrice ------------------------------------------------


def test_aws_refuses_a_cap_below_the_clouds_minimum_and_sends_nothing() -> None:
    """EC2 takes a MaxPrice only above USD 0.001 (InvalidParameterValue, which fails the whole
    pass): a cap at or under it is refused here as price-too-low (the next offer is tried), and
    nothing goes out. Before: 0.00004 went out as "0.0000", 0.0009 as "0.0009", and 0.001
    (not "more than USD $0.001") as "0.0010"."""
    pytest.importorskip("moto")
    from harness_aws import make_harness

    with make_harness() as harness:
        provider = harness.provider()
        for n, cap in enumerate((0.00004, 0.0009, 0.00099999, 0.001)):
            before = len(harness.launch_requests())
            with pytest.raises(ProviderError) as caught:
                provider.launch(_request(harness, cap, f"tiny-{n}"))
            assert caught.value.kind is ErrorKind.PRICE_TOO_LOW, caught.value
            assert caught.value.code == "BidCapBelowMinimum"
            assert "below the cloud's minimum" in str(caught.value)
            assert caught.value.kind.try_next_offer
            assert harness.launch_requests()[before:] == []  # nothing sent
        provider.launch(_request(harness, 0.0011, "over-the-minimum"))
        sent = harness.launch_requests()[-1]
        assert sent["InstanceMarketOptions.SpotOptions.MaxPrice"] == "0.0011"


# -- 2. Tencent: the termination time is UTC+8 -------------------------------------------------------


class _TencentMetadata:
    """Tencent's metadata service answering a termination time written in UTC+8."""

    def __init__(self, text: str) -> None:
        self.text = text
        meta = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_GET(self) -> None:
                ok = self.path == "/latest/meta-data/spot/termination-time"
                body = (meta.text if ok else "Not Found").encode()
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_tencent_notice_30_s_from_now_is_read_in_utc8() -> None:
    """A notice 30 s from now, written as Tencent writes it (the OS time in UTC+8, no zone):
    the agent's deadline is that moment. Before: read as UTC, 8 h late, thrown out by the
    15-minute check and replaced by "first seen + 120 s"."""
    from provisioner.agent.notices import NoticeReader

    deadline = (datetime.now(UTC) + timedelta(seconds=30)).replace(microsecond=0)
    text = deadline.astimezone(timezone(timedelta(hours=8))).strftime("%Y-%m-%d %H:%M:%S")
    with _TencentMetadata(text) as base:
        notice = NoticeReader("tencent", base).poll()
    assert notice is not None and notice.raw == text
    assert notice.deadline == deadline
    assert notice.deadline - notice.seen_at < timedelta(seconds=31)


def test_the_sim_serves_tencents_time_as_tencent_does() -> None:
    """The sim's metadata service writes the same UTC+8 text, and it reads back exactly."""
    from providers.sim.metadata import MetadataService, MetadataView
    from providers.tencent.notice import parse_termination_time

    deadline = datetime(2026, 12, 5, 18, 0, 30, tzinfo=UTC)
    view = MetadataView("ins-1", "ap-guangzhou-3", "spot", "tencent", deadline.timestamp(), "")
    service = MetadataService(lambda _id: None)
    status, _, body = service.handle(
        view, "GET", "/latest/meta-data/spot/termination-time", {}, {}, b""
    )
    assert (status, body.decode()) == (200, "2026-12-06 02:00:30")
    reading = parse_termination_time(status, body.decode())
    assert reading is not None and reading.deadline == deadline
    with_zone = parse_termination_time(200, "2026-12-05T18:00:30Z")
    assert with_zone is not None and with_zone.deadline == deadline  # a written zone wins


# -- 3. Error codes: each cloud's documented codes, each in its class -------------------------------

DOCUMENTED = {
    "tencent": {
        "InstancesQuotaLimitExceeded": ErrorKind.QUOTA,
        "FailedOperation.DisasterRecoverGroupNotFound": ErrorKind.NOT_FOUND,
        "UnsupportedOperation.SpotUnsupportedRegion": ErrorKind.CAPACITY,
    },
    "alibaba": {
        "InvalidInstanceType.ZoneNotSupported": ErrorKind.CAPACITY,
        "DeploymentSet.NoRoom": ErrorKind.CAPACITY,
        "InvalidSpotPriceLimit": ErrorKind.INVALID,
        "InvalidSpotPriceLimit.LowerThanPublicPrice": ErrorKind.PRICE_TOO_LOW,
    },
    "aws": {
        "PlacementGroupLimitExceeded": ErrorKind.QUOTA,
        "MaxSpotInstanceCountExceeded": ErrorKind.QUOTA,
        "InsufficientVolumeCapacity": ErrorKind.CAPACITY,
    },
}

#: matched once, documented by no reference: gone from the tables
UNDOCUMENTED = {
    "tencent": "FailedOperation.InsufficientBalance",
    "azure": "AzureSpotIsNotSupportedForThisVMSize",
    "gcp": "RESOURCE_POOL_EXHAUSTED",
}


def _table(cloud: str) -> Any:
    import importlib

    return importlib.import_module(f"providers.{cloud}.errors").ERRORS


@pytest.mark.parametrize(
    ("cloud", "code", "kind"),
    [(c, code, k) for c, codes in DOCUMENTED.items() for code, k in codes.items()],
)
def test_documented_codes_have_their_documented_class(
    cloud: str, code: str, kind: ErrorKind
) -> None:
    assert _table(cloud).kind_of(code, 400) is kind


@pytest.mark.parametrize(("cloud", "code"), sorted(UNDOCUMENTED.items()))
def test_undocumented_codes_are_not_in_the_tables(cloud: str, code: str) -> None:
    table = _table(cloud)
    assert all(code not in codes for codes in table.codes.values())


def test_every_exact_code_is_in_the_docs_with_a_source() -> None:
    """docs/cloud-errors.md names each code the tables match, its class, its scope and where
    the cloud documents it (code and docs tell the same story)."""
    doc = (REPO / "docs" / "cloud-errors.md").read_text()
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[1].startswith("`"):
            rows[(cells[0], cells[1].strip("`"))] = (cells[2], cells[3], cells[4])
    for cloud in ("aws", "gcp", "azure", "alibaba", "tencent"):
        table = _table(cloud)
        for kind, codes in table.codes.items():
            for code in codes:
                assert (cloud, code) in rows, f"{cloud} {code} not in docs/cloud-errors.md"
                cls, scope, source = rows[(cloud, code)]
                assert cls == kind.value, (cloud, code, cls)
                assert scope == table.scope_of(code, kind).value, (cloud, code, scope)
                assert source, (cloud, code)


def test_tencent_codes_are_the_cvm_apis() -> None:
    """Each exact Tencent code is one the CVM API documents (the SDK carries its list) or a
    common error code of every Tencent Cloud API."""
    errorcodes = pytest.importorskip("tencentcloud.cvm.v20170312.errorcodes")
    cvm = {v for k, v in vars(errorcodes).items() if k.isupper() and isinstance(v, str)}
    common = {"ServiceUnavailable", "RequestLimitExceeded", "InternalError"}
    sdk_side = {"ServerNetworkError", "ClientNetworkError"}  # raised by the SDK itself
    for codes in _table("tencent").codes.values():
        for code in codes:
            assert code in cvm | common | sdk_side, code


def test_on_the_wire_aws_quota_and_capacity_codes() -> None:
    pytest.importorskip("moto")
    from harness_aws import make_harness

    with make_harness() as harness:
        provider = harness.provider()
        for n, (code, kind) in enumerate(DOCUMENTED["aws"].items()):
            harness.inject_error(code)
            with pytest.raises(ProviderError) as caught:
                provider.launch(_request(harness, 1.0, f"err-{n}"))
            assert (caught.value.kind, caught.value.code) == (kind, code)


def test_on_the_wire_a_gone_tencent_group_is_swept_quietly() -> None:
    """Deleting a group Tencent no longer has answers DisasterRecoverGroupNotFound: gone, not
    an error raised at every pass of the group sweep."""
    pytest.importorskip("tencentcloud.cvm")
    from harness_tencent import make_harness

    with make_harness() as harness:
        provider = harness.provider()
        region = harness.server.region
        harness.inject_error(
            "FailedOperation.DisasterRecoverGroupNotFound", operation="DeleteDisasterRecoverGroups"
        )
        provider.delete_placement_group(f"{region}/ps-gone0001")  # no raise
        harness.inject_error("InstancesQuotaLimitExceeded")
        with pytest.raises(ProviderError) as caught:
            provider.launch(_request(harness, 1.0, "quota"))
        assert caught.value.kind is ErrorKind.QUOTA


def test_on_the_wire_alibaba_zone_and_deployment_set_move_on() -> None:
    pytest.importorskip("alibabacloud_ecs20140526")
    from harness_alibaba import make_harness

    with make_harness() as harness:
        provider = harness.provider()
        for n, code in enumerate(("InvalidInstanceType.ZoneNotSupported", "DeploymentSet.NoRoom")):
            harness.inject_error(code)
            with pytest.raises(ProviderError) as caught:
                provider.launch(_request(harness, 1.0, f"move-{n}"))
            assert caught.value.kind is ErrorKind.CAPACITY and caught.value.kind.try_next_offer
        harness.inject_error("InvalidSpotPriceLimit")
        with pytest.raises(ProviderError) as caught:
            provider.launch(_request(harness, 1.0, "bad-limit"))
        assert caught.value.kind is ErrorKind.INVALID


# -- Alibaba: the default credential chain --------------------------------------------------------


def test_alibaba_without_keys_uses_the_default_credential_chain(tmp_path: Path) -> None:
    """No keys given or in the environment: the SDK's default chain (here the credentials
    file) signs the calls. Before: tea-openapi 0.4.6 answered InvalidCredentials."""
    pytest.importorskip("alibabacloud_ecs20140526")
    ini = tmp_path / "credentials.ini"
    ini.write_text(
        "[default]\ntype = access_key\naccess_key_id = LTAI5tFromTheChain0001\n"
        "access_key_secret = secret-from-the-chain-0123456789\n"
    )
    script = textwrap.dedent(
        """
        import json, sys
        sys.path.insert(0, sys.argv[1])
        from fakes.alibaba_server import AlibabaFakeServer
        from providers.alibaba import AlibabaProvider
        from providers.base import ProviderError
        with AlibabaFakeServer(known_key_ids={"LTAI5tFromTheChain0001"}) as srv:
            p = AlibabaProvider(endpoint=srv.endpoint, image_id="img")
            try:
                print(json.dumps({"listed": p.list() == []}))
            except ProviderError as exc:
                print(json.dumps({"error": exc.code}))
        """
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "ALIBABA_CLOUD_CREDENTIALS_FILE": str(ini),
        "ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true",
        "PYTHONPATH": str(REPO),
    }
    out = subprocess.run(
        [sys.executable, "-c", script, str(REPO / "tests")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"listed": True}, out.stderr


# -- 4. `up` on a cloud whose SDK is not installed, and `down` whatever the provider ---------------


@pytest.fixture
def no_boto3(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """boto3 and botocore as on a machine without them (None in sys.modules: not importable)."""
    for name in [m for m in sys.modules if m.split(".")[0] in ("boto3", "botocore")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "boto3", None)
    monkeypatch.setitem(sys.modules, "botocore", None)
    yield


def _policy(tmp_path: Path) -> Path:
    from tests.e2e_util import write_policy

    return write_policy(tmp_path / "p.yaml", steps=10, ckpt=tmp_path / "ck", allow="US")


def test_up_on_a_cloud_without_its_sdk_refuses_before_writing(
    tmp_path: Path, no_boto3: None
) -> None:
    """Before: the job was recorded, "provider-error blocked", and `up` waited forever."""
    from provisioner.cli import cli

    db = tmp_path / "s.db"
    res = CliRunner().invoke(
        cli,
        [
            "up",
            "--policy",
            str(_policy(tmp_path)),
            "--provider",
            "aws",
            "-o",
            "agent_preinstalled=true",
            "--store",
            f"sqlite:///{db}",
        ],
    )
    assert res.exit_code == 2, res.output
    assert "pip install 'provisioner[aws]'" in res.stderr
    assert "boto3" in res.stderr and "Traceback" not in res.output
    assert not db.exists()  # nothing written


def test_down_ends_a_job_whose_provider_cannot_be_set_up(tmp_path: Path, no_boto3: None) -> None:
    """A job recorded for a cloud this machine cannot reach (its SDK gone since): `down` ends
    it all the same and says which instances may still run."""
    from provisioner.api import submit
    from provisioner.cli import cli
    from provisioner.control.store import Store

    url = f"sqlite:///{tmp_path / 's.db'}"
    store, job_id = submit(
        _policy(tmp_path),
        provider="aws",
        provider_options={"agent_preinstalled": True},
        store=url,
        check=False,  # recorded while boto3 was installed: `up` would refuse it now
    )
    store.close()
    res = CliRunner().invoke(cli, ["down", job_id, "--store", url, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["state"] == "cancelled"
    store = Store(url)
    try:
        (event,) = [e for e in store.events(job_id) if e.kind == "cancelled"]
        assert "could not be reached" in event.message and "boto3" in event.message
    finally:
        store.close()
