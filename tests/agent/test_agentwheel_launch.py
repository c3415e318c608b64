"""A launch on AWS through moto's server with no ``package_spec``: the user data holds a URL
to the running version's wheel in the job's checkpoint store (S3 on the same moto server),
presigned for that one object and expiring, and nothing else that grants any access.

``up`` (``provisioner.api.submit``) builds the wheel and puts it in the store; the daemon's
pass (the real Reconciler and AWS adapter) launches with a fresh URL; the URL is fetched here
with no credentials and gives the wheel whose sha256 the script checks.
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto")

CONTRACT = Path(__file__).resolve().parents[1] / "contract"
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))

from harness_aws import REGION, make_harness  # noqa: E402

from policies.credentials import looks_like_credential  # noqa: E402
from providers.bootstrap import spec_from_script  # noqa: E402
from provisioner.agentwheel.carry import URL_LIFETIME  # noqa: E402
from provisioner.control.reconciler import Reconciler  # noqa: E402
from provisioner.control.store import Store  # noqa: E402
from provisioner.core.catalog import Catalog  # noqa: E402
from provisioner.core.models import TAG_JOB, Offer  # noqa: E402

SECRET = "wheel-launch-secret-key-never-on-a-vm"
KEY_ID = "AKIAWHEELLAUNCHTEST1"

POLICY = """
name: wheel
job:
  command: [python, train.py]
  compute_hours: 1
  reference_gpu: A10G
resources:
  min_vram_gb: 16
market: spot
bid_cap:
  max_spot_price_per_gpu_hour: 3.0
budget:
  max_price_per_hour: 10
residency:
  allow: [US]
checkpoint:
  uri: s3://{bucket}/ck
"""


def _offers() -> list[Offer]:
    return [
        Offer("aws", REGION, f"{REGION}a", "g5.xlarge", "A10G", 1, 4, 16, 1.006, 0.4, "2026-11-30")
    ]


def test_a_launch_without_package_spec_carries_a_presigned_wheel_url_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    monkeypatch.setenv("PROVISIONER_WHEEL_CACHE", str(tmp_path / "wheels"))
    with make_harness() as harness:
        for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", harness.endpoint)
        monkeypatch.setenv("AWS_REGION", REGION)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
        bucket = f"ck-{uuid.uuid4().hex[:10]}"
        boto3.client("s3", endpoint_url=harness.endpoint).create_bucket(Bucket=bucket)
        policy = tmp_path / "p.yaml"
        policy.write_text(POLICY.format(bucket=bucket))

        from provisioner.api import submit

        store = Store(f"sqlite:///{tmp_path / 's.db'}")
        _, job_id = submit(
            str(policy),
            provider="aws",
            provider_defaults=False,
            provider_options={"region": REGION},  # no package_spec
            store=store,
        )
        provider = harness.provider()
        rec = Reconciler(
            store, catalog=Catalog.from_offers(_offers()), provider_factory=lambda _n, _o: provider
        )
        try:
            rec.run_pass()
        finally:
            rec.close()
        ec2 = provider.client.ec2(REGION)
        found = ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_JOB}", "Values": [job_id]}])
        (instance,) = [i for r in found["Reservations"] for i in r["Instances"]]
        attr = ec2.describe_instance_attribute(
            InstanceId=instance["InstanceId"], Attribute="userData"
        )
        script = base64.b64decode(attr["UserData"]["Value"]).decode()

    # the URL: the wheel's object in the job's store, presigned (SigV4), expiring
    (url,) = re.findall(r"until \"\$PY\" - '([^']+)'", script)
    (sha,) = re.findall(r"WHEEL_SHA256=([0-9a-f]{64})\n", script)
    parts = urlsplit(url)
    assert parts.netloc == urlsplit(harness.endpoint).netloc
    assert re.fullmatch(
        rf"/{bucket}/ck/\.provisioner/wheels/{sha}/provisioner-[^/]+-py3-none-any\.whl",
        parts.path,
    )
    query = parse_qs(parts.query)
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert query["X-Amz-Expires"] == [str(int(URL_LIFETIME.total_seconds()))]
    assert query["X-Amz-SignedHeaders"] == ["host"]
    with urllib.request.urlopen(url, timeout=30) as resp:  # no credentials of ours here
        assert hashlib.sha256(resp.read()).hexdigest() == sha

    # nothing else that grants access: no secret, no key id, no other signature
    assert SECRET not in script
    rest = script.replace(url, "")
    assert KEY_ID not in rest and "X-Amz-" not in rest and not looks_like_credential(rest)
    assert "package_spec" not in script and 'pip install -q  "$PACKAGE"' in script
    assert "provisioner[aws]" not in script.replace(".whl[aws]", "")  # not from PyPI by name
    spec = spec_from_script(script)
    assert spec["job_id"] == job_id and url not in str(spec)  # the spec on disk: no URL
