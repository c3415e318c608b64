"""A job's secrets, read from each cloud's own secret store by the real SDKs, over the wire.

- Reference parsing: every accepted form gives the fields the reader hands the API; each
  rejection says what is wrong (and a text with an unknown scheme, which may be a pasted value,
  is not echoed).
- For the sim and each of the five clouds, the official SDK reads a secret from a local server
  speaking the cloud's published wire format (moto behind a recording proxy for AWS;
  tests/fakes/ for the others); a missing secret is ``SecretError`` "not found" with no value
  in its str() or repr(); the request on the wire matches the reference; the cloud's error
  codes map onto reasons.
- Values never leak: after a read the redacting filter scrubs the value from log lines, and
  while a secret is read the SDKs' DEBUG loggers (which log response bodies) are held back.
"""

from __future__ import annotations

import io
import json
import logging
import pickle
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest

from providers import secrets as secrets_module
from providers.base import RedactingFilter
from providers.secrets import (
    SecretError,
    SecretRef,
    SecretRefError,
    parse_secret_ref,
    read_secret,
)

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run by `pytest` as well as by `python -m pytest`
    sys.path.insert(0, str(REPO))

from tests.fakes.alibaba_kms import AlibabaKmsFake  # noqa: E402
from tests.fakes.aws_recorder import AwsRecorder  # noqa: E402
from tests.fakes.azure_keyvault import ImdsFake, KeyVaultFake, self_signed  # noqa: E402
from tests.fakes.gcp_secrets import GcpSecretsFake  # noqa: E402
from tests.fakes.tencent_ssm import TencentSsmFake  # noqa: E402

#: every environment variable a credential chain or endpoint override reads
CLOUD_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_SECRETS_MANAGER",
    "AWS_ENDPOINT_URL_SSM",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_EC2_METADATA_DISABLED",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "GCLOUD_PROJECT",
    "CLOUDSDK_CONFIG",
    "PROVISIONER_GCP_SECRETS_ENDPOINT",
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_TENANT_ID",
    "AZURE_USERNAME",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_POD_IDENTITY_AUTHORITY_HOST",
    "IDENTITY_ENDPOINT",
    "IDENTITY_HEADER",
    "MSI_ENDPOINT",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PROVISIONER_AZURE_KEYVAULT_ENDPOINT",
    "ALIBABA_CLOUD_ACCESS_KEY_ID",
    "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
    "ALIBABA_CLOUD_SECURITY_TOKEN",
    "ALIBABA_CLOUD_REGION_ID",
    "ALIBABA_CLOUD_PROFILE",
    "PROVISIONER_ALIBABA_KMS_ENDPOINT",
    "TENCENTCLOUD_SECRET_ID",
    "TENCENTCLOUD_SECRET_KEY",
    "TENCENTCLOUD_REGION",
    "PROVISIONER_TENCENT_SSM_ENDPOINT",
    "PROVISIONER_SIM_SECRETS",
)

AWS_REGION, AWS_OTHER_REGION = "us-east-1", "us-west-2"
ALI_KEY_ID, ALI_KEY_SECRET = "LTAI5tFakeKeyId", "ali-access-key-secret-0042"
TC_SECRET_ID, TC_SECRET_KEY = "AKIDfakeSecretId", "tencent-secret-key-0042"
GCP_PROJECT = "proj-one"

#: every value any store below holds: none may appear in an error
VALUES = {
    "sim": "sim-value-5c1e",
    "aws": "aws-value-7d2f",
    "aws-json": json.dumps({"password": "aws-json-pw-81aa", "port": 5432}),
    "aws-bin": "aws-binary-value-11f0",
    "aws-ssm": "aws-ssm-value-9b3c",
    "gcp-1": "gcp-value-old-2a4b",
    "gcp-2": json.dumps({"token": "gcp-json-token-77c1"}),
    "azure-1": "azure-value-old-60de",
    "azure-2": "azure-value-new-61df",
    "alibaba-1": "alibaba-value-old-3e3e",
    "alibaba-2": "alibaba-value-new-3f3f",
    "alibaba-bin": "alibaba-binary-4a4a",
    "tencent-1": "tencent-value-old-5b5b",
    "tencent-2": "tencent-value-new-5c5c",
    "tencent-bin": "tencent-binary-6d6d",
}
SECRET_TEXTS = [*VALUES.values(), "aws-json-pw-81aa", "gcp-json-token-77c1"]


def assert_clean(err: BaseException) -> None:
    """No stored value in the error's str(), repr(), or anything chained to it."""
    texts = [str(err), repr(err), repr(err.__cause__), repr(err.__context__)]
    for value in SECRET_TEXTS:
        assert all(value not in text for text in texts), value


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in CLOUD_ENV:
        monkeypatch.delenv(name, raising=False)
    # no developer's files and no metadata service are ever consulted
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("HOME", str(tmp_path))


# -- reference parsing ----------------------------------------------------------------------

ARN = "arn:aws:secretsmanager:us-west-2:123456789012:secret:prod/db-AbCdEf"
SSM_ARN = "arn:aws:ssm:eu-west-1:123456789012:parameter/app/token"
KV = "https://my-vault.vault.azure.net"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("sim:db-password", dict(cloud="sim", kind="sim", name="db-password")),
        ("sim:db#user", dict(cloud="sim", kind="sim", name="db", field="user")),
        ("aws-sm:prod/db", dict(cloud="aws", kind="secretsmanager", name="prod/db")),
        ("aws-sm:prod/db#password", dict(kind="secretsmanager", name="prod/db", field="password")),
        (f"aws-sm:{ARN}", dict(kind="secretsmanager", name=ARN, region="us-west-2")),
        (ARN, dict(cloud="aws", kind="secretsmanager", name=ARN, region="us-west-2")),
        (f"{ARN}#password", dict(name=ARN, region="us-west-2", field="password")),
        ("aws-ssm:/app/token", dict(cloud="aws", kind="ssm", name="/app/token", region=None)),
        ("aws-ssm:/app/token:3", dict(kind="ssm", name="/app/token:3")),
        ("aws-ssm:plain_name", dict(kind="ssm", name="plain_name")),
        (SSM_ARN, dict(kind="ssm", name=SSM_ARN, region="eu-west-1")),
        (f"aws-ssm:{SSM_ARN}#k", dict(kind="ssm", name=SSM_ARN, region="eu-west-1", field="k")),
        (
            "gcp-sm:projects/p-1234/secrets/db",
            dict(cloud="gcp", kind="secretmanager", name="db", project="p-1234", version="latest"),
        ),
        (
            "gcp-sm:projects/123456789/secrets/db/versions/7",
            dict(name="db", project="123456789", version="7"),
        ),
        (
            "projects/p-1234/secrets/db/versions/latest#k",
            dict(cloud="gcp", name="db", project="p-1234", version="latest", field="k"),
        ),
        (
            "gcp-sm:db_password",
            dict(cloud="gcp", name="db_password", project=None, version="latest"),
        ),
        ("gcp-sm:db#k", dict(name="db", project=None, field="k")),
        (
            f"azure-kv:{KV}/secrets/db-pw",
            dict(cloud="azure", kind="keyvault", name="db-pw", version=None, vault_url=KV),
        ),
        (
            f"{KV}/secrets/db-pw/0123abcd",
            dict(cloud="azure", name="db-pw", version="0123abcd", vault_url=KV),
        ),
        (f"{KV}/secrets/db-pw/#k", dict(name="db-pw", version=None, field="k")),
        (
            "https://v01.vault.azure.cn/secrets/x",
            dict(name="x", vault_url="https://v01.vault.azure.cn"),
        ),
        ("azure-kv:my-vault/db-pw", dict(name="db-pw", version=None, vault_url=KV)),
        (
            "azure-kv:my-vault/db-pw/0123abcd#k",
            dict(name="db-pw", version="0123abcd", vault_url=KV, field="k"),
        ),
        (
            "alibaba-kms:db",
            dict(cloud="alibaba", kind="kms", name="db", version=None, stage="ACSCurrent"),
        ),
        ("alibaba-kms:db@ACSPrevious", dict(name="db", version=None, stage="ACSPrevious")),
        ("alibaba-kms:db@v3", dict(name="db", version="v3", stage=None)),
        (
            "alibaba-kms:user@corp@ACSCurrent#k",
            dict(name="user@corp", stage="ACSCurrent", field="k"),
        ),
        (
            "alibaba-kms:acs:kms:cn-shanghai:1234567890123456:secret/db@v3",
            dict(
                name="acs:kms:cn-shanghai:1234567890123456:secret/db",
                version="v3",
                region="cn-shanghai",
            ),
        ),
        ("tencent-ssm:db", dict(cloud="tencent", kind="ssm", name="db", version=None)),
        ("tencent-ssm:db@v1.0#k", dict(name="db", version="v1.0", field="k")),
        ("tencent-ssm:mysql-cred@SSM_Current", dict(name="mysql-cred", version="SSM_Current")),
    ],
)
def test_every_accepted_form_parses_to_what_the_api_is_handed(
    text: str, expected: dict[str, Any]
) -> None:
    ref = parse_secret_ref(text)
    assert isinstance(ref, SecretRef) and ref.text == text and str(ref) == text
    for key, value in expected.items():
        assert getattr(ref, key) == value, key
    if "field" not in expected:
        assert ref.field is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "is empty"),
        ("aws-sm:my secret", "no whitespace"),
        (" aws-sm:x", "no whitespace"),
        ("aws-sm:x\n", "no whitespace"),
        ("aws-sm:a\x00b", "control characters"),
        ("aws-sm:", "name is empty"),
        ("aws-sm:#password", "name is empty"),
        ("aws-sm:db#", "key after '#' is empty"),
        ("aws-sm:db!", "letters, digits"),
        ("vault:db", "unknown secret reference scheme 'vault'"),
        ("aws-secrets:db", "unknown secret reference scheme 'aws-secrets'"),
        ("just-a-name", "has no scheme"),
        ("arn:aws:s3:::bucket", "not an ARN of secretsmanager"),
        ("arn:aws:secretsmanager:us-west-2:123:secret:db", "account is not 12 digits"),
        ("arn:aws:secretsmanager::123456789012:secret:db", "names no region"),
        ("arn:aws:secretsmanager:us-west-2:123456789012:key:db", "names no secret"),
        ("arn:aws:secretsmanager:us-west-2:123456789012:secret:", "names no secret"),
        ("arn:azure:secretsmanager:us-west-2:123456789012:secret:db", "unknown ARN partition"),
        ("arn:aws:ssm:us-west-2:123456789012:document/x", "names no parameter"),
        ("aws-ssm:/", "parameter name"),
        ("gcp-sm:projects/p-1/secrets", "expected projects/P/secrets/S"),
        ("gcp-sm:projects/p-1/secrets/db/versions/", "expected projects/P/secrets/S"),
        ("gcp-sm:projects/P_UP/secrets/db", "not a project id"),
        ("gcp-sm:projects/p-1/locations/us/secrets/db", "regional secrets"),
        ("gcp-sm:db.name", "secret id"),
        ("azure-kv:http://v01.vault.azure.net/secrets/x", "https"),
        ("https://example.com/secrets/x", "not a Key Vault host"),
        ("https://v01.vault.azure.net/keys/x", "expected https://VAULT"),
        ("https://v01.vault.azure.net/secrets/x?api-version=7.4", "no query"),
        ("azure-kv:v/db", "vault name"),
        ("azure-kv:my-vault", "expected VAULT/NAME"),
        ("azure-kv:my-vault/db_pw", "secret name"),
        ("alibaba-kms:db@", "after '@' is empty"),
        ("alibaba-kms:db@v!", "version or stage"),
        ("tencent-ssm:db.name", "secret name"),
        ("tencent-ssm:db@-v1", "version id"),
    ],
)
def test_each_rejection_says_what_is_wrong_and_shows_the_forms(text: str, problem: str) -> None:
    with pytest.raises(SecretRefError) as caught:
        parse_secret_ref(text)
    message = str(caught.value)
    assert problem in message
    assert "accepted forms: sim:NAME" in message and "tencent-ssm:NAME[@VERSION]" in message
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("text", ["sk_live_51HabcDEF:xyz", "hunter2hunter2", "Tr0ub4dor&3:x"])
def test_a_text_with_no_known_scheme_is_not_echoed(text: str) -> None:
    """It may be a value pasted where a reference belongs."""
    with pytest.raises(SecretRefError) as caught:
        parse_secret_ref(text)
    assert text.partition(":")[0] not in str(caught.value)


def test_a_non_string_is_refused() -> None:
    with pytest.raises(SecretRefError, match="is a string, not int"):
        parse_secret_ref(42)  # type: ignore[arg-type]


def test_secret_error_holds_the_reference_and_reason_only() -> None:
    err = SecretError("aws-sm:db", "not found")
    assert (err.ref, err.reason, str(err)) == (
        "aws-sm:db",
        "not found",
        "secret aws-sm:db: not found",
    )
    assert repr(err) == "SecretError(ref='aws-sm:db', reason='not found')"
    again = pickle.loads(pickle.dumps(err))
    assert (again.ref, again.reason) == (err.ref, err.reason)
    assert isinstance(err, RuntimeError)


def test_importing_the_readers_loads_no_sdk() -> None:
    modules = ["providers.secrets", "providers.secretref"] + [
        f"providers.{cloud}.secrets" for cloud in ("aws", "gcp", "azure", "alibaba", "tencent")
    ]
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}:\n    importlib.import_module(m)\n"
        "roots = ('boto3', 'botocore', 'google', 'azure', 'alibabacloud_kms20160120',\n"
        "         'alibabacloud_credentials', 'alibabacloud_tea_openapi', 'tencentcloud', 'grpc')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in roots)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


# -- sim --------------------------------------------------------------------------------------


@pytest.fixture
def sim_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "sim-secrets.yaml"
    path.write_text(
        f'db: {VALUES["sim"]}\nconfig: \'{{"user": "app", "n": 3}}\'\nnumber: 5432\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("PROVISIONER_SIM_SECRETS", str(path))
    return path


def test_sim_reads_its_yaml_file(sim_file: Path) -> None:
    assert read_secret("sim:db") == VALUES["sim"]
    assert read_secret(parse_secret_ref("sim:config#user")) == "app"
    assert read_secret("sim:config#n") == "3"


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        ("sim:missing", "not found"),
        ("sim:number", "not a string"),
        ("sim:db#user", "needs a JSON object secret"),
        ("sim:config#nope", "no key 'nope'"),
    ],
)
def test_sim_failures(sim_file: Path, ref: str, reason: str) -> None:
    with pytest.raises(SecretError) as caught:
        read_secret(ref)
    assert caught.value.ref == ref and reason in caught.value.reason
    assert_clean(caught.value)


def test_sim_without_its_file_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SecretError, match="PROVISIONER_SIM_SECRETS is not set"):
        read_secret("sim:db")


# -- AWS (moto behind a recording proxy) ------------------------------------------------------


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def aws_store(moto: str) -> Iterator[tuple[AwsRecorder, str]]:
    import boto3

    keys = dict(aws_access_key_id="AKIDSEED", aws_secret_access_key="seed-only")
    sm = boto3.client("secretsmanager", region_name=AWS_REGION, endpoint_url=moto, **keys)
    sm.create_secret(Name="prod/db", SecretString=VALUES["aws"])
    sm.create_secret(Name="prod/json", SecretString=VALUES["aws-json"])
    sm.create_secret(Name="prod/bin", SecretBinary=VALUES["aws-bin"].encode())
    sm.create_secret(Name="prod/not-utf8", SecretBinary=b"\xff\xfe\x00")
    other = boto3.client("secretsmanager", region_name=AWS_OTHER_REGION, endpoint_url=moto, **keys)
    arn = other.create_secret(Name="west/db", SecretString=VALUES["aws"])["ARN"]
    ssm = boto3.client("ssm", region_name=AWS_REGION, endpoint_url=moto, **keys)
    ssm.put_parameter(Name="/app/token", Value=VALUES["aws-ssm"], Type="SecureString")
    with AwsRecorder(moto) as recorder:
        yield recorder, arn


@pytest.fixture
def aws(
    aws_store: tuple[AwsRecorder, str], monkeypatch: pytest.MonkeyPatch
) -> tuple[AwsRecorder, str]:
    recorder, arn = aws_store
    recorder.reset()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDAGENTTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "agent-secret-access-key")
    monkeypatch.setenv("AWS_DEFAULT_REGION", AWS_REGION)
    # the service-specific variables win over the general one (which leads nowhere)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", recorder.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SSM", recorder.endpoint)
    return recorder, arn


def test_aws_reads_secrets_manager_and_ssm(aws: tuple[AwsRecorder, str]) -> None:
    recorder, arn = aws
    assert read_secret("aws-sm:prod/db") == VALUES["aws"]
    assert read_secret("aws-sm:prod/json#password") == "aws-json-pw-81aa"
    assert read_secret("aws-sm:prod/json#port") == "5432"
    assert read_secret("aws-sm:prod/bin") == VALUES["aws-bin"]
    assert read_secret("aws-ssm:/app/token") == VALUES["aws-ssm"]
    assert read_secret(arn) == VALUES["aws"]  # us-west-2, though the default region is us-east-1
    wire = [(r.target, r.body, r.scope.split("/")[2:4]) for r in recorder.requests]
    assert wire == [
        ("secretsmanager.GetSecretValue", {"SecretId": "prod/db"}, [AWS_REGION, "secretsmanager"]),
        (
            "secretsmanager.GetSecretValue",
            {"SecretId": "prod/json"},
            [AWS_REGION, "secretsmanager"],
        ),
        (
            "secretsmanager.GetSecretValue",
            {"SecretId": "prod/json"},
            [AWS_REGION, "secretsmanager"],
        ),
        ("secretsmanager.GetSecretValue", {"SecretId": "prod/bin"}, [AWS_REGION, "secretsmanager"]),
        (
            "AmazonSSM.GetParameter",
            {"Name": "/app/token", "WithDecryption": True},
            [AWS_REGION, "ssm"],
        ),
        ("secretsmanager.GetSecretValue", {"SecretId": arn}, [AWS_OTHER_REGION, "secretsmanager"]),
    ]
    assert all(r.scope.startswith("AKIDAGENTTEST/") for r in recorder.requests)  # env credentials


def test_aws_region_argument_is_used_without_an_arn(aws: tuple[AwsRecorder, str]) -> None:
    recorder, _ = aws
    assert read_secret("aws-sm:west/db", region=AWS_OTHER_REGION) == VALUES["aws"]
    assert recorder.requests[-1].scope.split("/")[2] == AWS_OTHER_REGION


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        ("aws-sm:prod/missing", "not found"),
        ("aws-ssm:/app/missing", "not found"),
        ("aws-sm:prod/db#password", "needs a JSON object secret"),
        ("aws-sm:prod/json#user", "no key 'user'"),
        ("aws-sm:prod/not-utf8", "binary value is not UTF-8"),
    ],
)
def test_aws_failures_carry_no_value(aws: tuple[AwsRecorder, str], ref: str, reason: str) -> None:
    with pytest.raises(SecretError) as caught:
        read_secret(ref)
    assert reason in caught.value.reason
    assert_clean(caught.value)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("AccessDeniedException", "access denied"),
        ("UnrecognizedClientException", "credentials rejected"),
        ("DecryptionFailure", "cannot decrypt"),
        ("InvalidRequestException", "disabled or scheduled for deletion"),
        ("SomethingNew", "error SomethingNew"),
    ],
)
def test_aws_error_codes_map_onto_reasons(
    aws: tuple[AwsRecorder, str], code: str, reason: str
) -> None:
    recorder, _ = aws
    recorder.fail_next(code)
    with pytest.raises(SecretError) as caught:
        read_secret("aws-sm:prod/db")
    assert caught.value.reason.startswith(reason)


def test_aws_without_credentials(
    aws: tuple[AwsRecorder, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(SecretError) as caught:
        read_secret("aws-sm:prod/db")
    assert caught.value.reason == "no credentials"


# -- GCP --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GcpSecretsFake, Path]]:
    with GcpSecretsFake() as fake:
        key = fake.service_account_file(
            tmp_path_factory.mktemp("gcp") / "sa.json", project=GCP_PROJECT
        )
        yield fake, key


@pytest.fixture
def gcp(gcp_server: tuple[GcpSecretsFake, Path], monkeypatch: pytest.MonkeyPatch) -> GcpSecretsFake:
    fake, key = gcp_server
    fake.reset()
    fake.add(GCP_PROJECT, "db", VALUES["gcp-1"])
    fake.add(GCP_PROJECT, "db", VALUES["gcp-2"])
    fake.add(GCP_PROJECT, "gone", "x-disabled", state="DISABLED")
    fake.add("proj-two", "db", VALUES["gcp-1"])
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    monkeypatch.setenv("PROVISIONER_GCP_SECRETS_ENDPOINT", fake.endpoint)
    return fake


def test_gcp_reads_a_version_with_the_default_credentials(gcp: GcpSecretsFake) -> None:
    assert read_secret("gcp-sm:db#token") == "gcp-json-token-77c1"  # project from the key file
    assert read_secret(f"projects/{GCP_PROJECT}/secrets/db/versions/1") == VALUES["gcp-1"]
    assert read_secret("gcp-sm:projects/proj-two/secrets/db") == VALUES["gcp-1"]
    calls = gcp.calls()
    assert [(c.method, c.path) for c in calls] == [
        ("GET", f"/v1/projects/{GCP_PROJECT}/secrets/db/versions/latest:access"),
        ("GET", f"/v1/projects/{GCP_PROJECT}/secrets/db/versions/1:access"),
        ("GET", "/v1/projects/proj-two/secrets/db/versions/latest:access"),
    ]
    assert all(c.headers["authorization"].startswith("Bearer ") for c in calls)
    # the bearer was a JWT signed with the service account's key, for the cloud-platform scope
    assert gcp.jwt_claims and all(
        c["iss"] == f"agent@{GCP_PROJECT}.iam.gserviceaccount.com"
        and c["scope"] == "https://www.googleapis.com/auth/cloud-platform"
        for c in gcp.jwt_claims
    )


def test_gcp_short_form_takes_the_project_from_the_environment(
    gcp: GcpSecretsFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "proj-two")
    assert read_secret("gcp-sm:db") == VALUES["gcp-1"]
    assert gcp.calls()[-1].path == "/v1/projects/proj-two/secrets/db/versions/latest:access"


@pytest.mark.parametrize(
    ("ref", "failure", "reason"),
    [
        ("gcp-sm:missing", None, "not found"),
        (f"projects/{GCP_PROJECT}/secrets/db/versions/9", None, "not found"),
        ("gcp-sm:gone", None, "disabled or scheduled for deletion"),
        ("gcp-sm:db", (403, "PERMISSION_DENIED"), "access denied"),
        ("gcp-sm:db", (400, "INVALID_ARGUMENT"), "error INVALID_ARGUMENT"),
    ],
)
def test_gcp_failures(
    gcp: GcpSecretsFake, ref: str, failure: tuple[int, str] | None, reason: str
) -> None:
    if failure is not None:
        gcp.fail_next(*failure)
    with pytest.raises(SecretError) as caught:
        read_secret(ref)
    assert caught.value.reason == reason
    assert_clean(caught.value)


def test_gcp_checksum_is_verified(gcp: GcpSecretsFake) -> None:
    gcp.corrupt_checksum = True
    with pytest.raises(SecretError, match="checksum mismatch") as caught:
        read_secret("gcp-sm:db")
    assert_clean(caught.value)


def test_gcp_crc32c_matches_the_published_check_value() -> None:
    from providers.gcp.secrets import crc32c
    from tests.fakes.gcp_secrets import crc32c as bitwise

    assert crc32c(b"123456789") == bitwise(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0


def test_gcp_a_key_the_service_does_not_trust_is_rejected(
    gcp: GcpSecretsFake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import os

    trusted = json.loads(
        Path(os.environ["GOOGLE_APPLICATION_CREDENTIALS"]).read_text(encoding="utf-8")
    )
    with GcpSecretsFake() as elsewhere:  # same key id, another private key
        forged = json.loads(
            elsewhere.service_account_file(tmp_path / "forged.json", project=GCP_PROJECT).read_text(
                encoding="utf-8"
            )
        )
    forged.update(private_key_id=trusted["private_key_id"], token_uri=trusted["token_uri"])
    (tmp_path / "forged.json").write_text(json.dumps(forged), encoding="utf-8")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "forged.json"))
    with pytest.raises(SecretError) as caught:
        read_secret("gcp-sm:db")
    assert caught.value.reason == "credentials rejected"


def test_gcp_unreachable(gcp: GcpSecretsFake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_GCP_SECRETS_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(SecretError) as caught:
        read_secret("gcp-sm:db")
    assert caught.value.reason.startswith("unreachable: ")


# -- Azure ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def azure_tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("azure"))


@pytest.fixture(scope="module")
def azure_servers(azure_tls: tuple[Path, Path]) -> Iterator[tuple[ImdsFake, KeyVaultFake]]:
    with ImdsFake() as imds, KeyVaultFake(imds, *azure_tls) as vault:
        yield imds, vault


def _azure_env(
    monkeypatch: pytest.MonkeyPatch, imds: ImdsFake, vault: KeyVaultFake, cert: Path
) -> None:
    monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", imds.authority)  # the VM's IMDS
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))  # trust the fake vault's certificate
    monkeypatch.setenv("PROVISIONER_AZURE_KEYVAULT_ENDPOINT", vault.endpoint)


@pytest.fixture
def azure(
    azure_servers: tuple[ImdsFake, KeyVaultFake],
    azure_tls: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[ImdsFake, KeyVaultFake, str]:
    imds, vault = azure_servers
    vault.reset()
    old = vault.add("db-password", VALUES["azure-1"])
    vault.add("db-password", VALUES["azure-2"])
    vault.add("disabled", "x-disabled", enabled=False)
    _azure_env(monkeypatch, imds, vault, azure_tls[0])
    return imds, vault, old


def test_azure_reads_current_and_named_versions(azure: tuple[ImdsFake, KeyVaultFake, str]) -> None:
    _, vault, old = azure
    assert read_secret("azure-kv:fakevault/db-password") == VALUES["azure-2"]
    assert (
        read_secret(f"https://fakevault.vault.azure.net/secrets/db-password/{old}")
        == VALUES["azure-1"]
    )
    got = [(r.path.rstrip("/"), r.headers.get("authorization")) for r in vault.requests]
    bearer = f"Bearer {vault.imds.token}"
    assert got[-2:] == [("/secrets/db-password", bearer), (f"/secrets/db-password/{old}", bearer)]
    assert all(r.params.get("api-version") for r in vault.requests)


def test_azure_challenge_and_managed_identity_on_the_wire(
    azure_tls: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh vault (no cached challenge): Key Vault's 401 challenge first, then the token
    from the VM's IMDS for the resource the challenge named, then the read with it."""
    with ImdsFake() as imds, KeyVaultFake(imds, *azure_tls) as vault:
        vault.add("api-key", VALUES["azure-2"])
        _azure_env(monkeypatch, imds, vault, azure_tls[0])
        assert read_secret("azure-kv:fakevault/api-key") == VALUES["azure-2"]
        first, second = vault.requests
        assert "authorization" not in first.headers and first.path.rstrip("/") == "/secrets/api-key"
        assert second.headers["authorization"] == f"Bearer {imds.token}"
        tokens = [r for r in imds.requests if r.path == "/metadata/identity/oauth2/token"]
        assert tokens and all(r.headers.get("metadata") == "true" for r in tokens)
        assert {r.params["resource"] for r in tokens} == {"https://vault.azure.net"}
        assert {r.params["api-version"] for r in tokens} == {"2018-02-01"}


@pytest.mark.parametrize(
    ("ref", "failure", "reason"),
    [
        ("azure-kv:fakevault/missing", None, "not found"),
        ("azure-kv:fakevault/db-password/00000000000000000000000000000000", None, "not found"),
        ("azure-kv:fakevault/disabled", None, "access denied"),
        ("azure-kv:fakevault/db-password", (403, "Forbidden"), "access denied"),
        ("azure-kv:fakevault/db-password", (400, "BadParameter"), "error BadParameter"),
    ],
)
def test_azure_failures(
    azure: tuple[ImdsFake, KeyVaultFake, str],
    ref: str,
    failure: tuple[int, str] | None,
    reason: str,
) -> None:
    if failure is not None:
        azure[1].fail_next(*failure)
    with pytest.raises(SecretError) as caught:
        read_secret(ref)
    assert caught.value.reason == reason
    assert_clean(caught.value)


# -- Alibaba ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def alibaba_server() -> Iterator[AlibabaKmsFake]:
    with AlibabaKmsFake(access_key_id=ALI_KEY_ID) as fake:
        yield fake


def _alibaba_env_keys(monkeypatch: pytest.MonkeyPatch, key_id: str, secret: str) -> None:
    """The access key in the environment, where the default chain's first link reads it.
    alibabacloud_credentials copies the environment once, when first imported (its
    ``auth_util``), so that copy is set too: another test may have imported it first."""
    from alibabacloud_credentials.utils import auth_util

    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", secret)
    monkeypatch.setattr(auth_util, "environment_access_key_id", key_id)
    monkeypatch.setattr(auth_util, "environment_access_key_secret", secret)
    monkeypatch.setattr(auth_util, "environment_security_token", None)


@pytest.fixture
def alibaba(alibaba_server: AlibabaKmsFake, monkeypatch: pytest.MonkeyPatch) -> AlibabaKmsFake:
    alibaba_server.reset()
    alibaba_server.add("db", VALUES["alibaba-1"], version_id="v1")
    alibaba_server.add("db", VALUES["alibaba-2"], version_id="v2")
    alibaba_server.add("bin", VALUES["alibaba-bin"].encode(), version_id="b1")
    _alibaba_env_keys(monkeypatch, ALI_KEY_ID, ALI_KEY_SECRET)
    monkeypatch.setenv("ALIBABA_CLOUD_REGION_ID", "cn-hangzhou")
    monkeypatch.setenv("PROVISIONER_ALIBABA_KMS_ENDPOINT", alibaba_server.endpoint)
    return alibaba_server


def test_alibaba_reads_stages_versions_and_binary(alibaba: AlibabaKmsFake) -> None:
    assert read_secret("alibaba-kms:db") == VALUES["alibaba-2"]
    assert read_secret("alibaba-kms:db@ACSPrevious") == VALUES["alibaba-1"]
    assert read_secret("alibaba-kms:db@v1") == VALUES["alibaba-1"]
    assert read_secret("alibaba-kms:bin") == VALUES["alibaba-bin"]
    arn = "acs:kms:cn-shanghai:1234567890123456:secret/db"
    assert read_secret(f"alibaba-kms:{arn}") == VALUES["alibaba-2"]
    calls = alibaba.calls("GetSecretValue")
    assert [c.params for c in calls] == [
        {"SecretName": "db", "VersionStage": "ACSCurrent"},
        {"SecretName": "db", "VersionStage": "ACSPrevious"},
        {"SecretName": "db", "VersionId": "v1"},
        {"SecretName": "bin", "VersionStage": "ACSCurrent"},
        {"SecretName": arn, "VersionStage": "ACSCurrent"},
    ]
    assert all(c.headers["x-acs-version"] == "2016-01-20" for c in calls)
    assert all(c.headers["x-acs-credentials-provider"] == "default/env" for c in calls)


@pytest.mark.parametrize(
    ("ref", "code", "reason"),
    [
        ("alibaba-kms:missing", None, "not found"),
        ("alibaba-kms:db@v9", None, "not found"),
        ("alibaba-kms:db", "Forbidden.RAM", "access denied"),
        (
            "alibaba-kms:db",
            "Forbidden.KeyNotFound",
            "cannot decrypt (key disabled or not permitted)",
        ),
        ("alibaba-kms:db", "Rejected.Throttling", "throttled"),
        ("alibaba-kms:db", "InternalFailure", "service error"),
    ],
)
def test_alibaba_failures(alibaba: AlibabaKmsFake, ref: str, code: str | None, reason: str) -> None:
    if code is not None:
        for _ in range(3):  # the SDK's own retries see the same answer
            alibaba.fail_next(code)
    with pytest.raises(SecretError) as caught:
        read_secret(ref)
    assert caught.value.reason == reason
    assert_clean(caught.value)


def test_alibaba_unknown_access_key_and_no_region(
    alibaba: AlibabaKmsFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    _alibaba_env_keys(monkeypatch, "LTAIsomeoneelse", ALI_KEY_SECRET)
    with pytest.raises(SecretError, match="credentials rejected"):
        read_secret("alibaba-kms:db")
    monkeypatch.delenv("ALIBABA_CLOUD_REGION_ID")
    with pytest.raises(SecretError, match="no region"):
        read_secret("alibaba-kms:db")


# -- Tencent ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tencent_server() -> Iterator[TencentSsmFake]:
    with TencentSsmFake(secret_ids={TC_SECRET_ID}) as fake:
        yield fake


@pytest.fixture
def tencent(tencent_server: TencentSsmFake, monkeypatch: pytest.MonkeyPatch) -> TencentSsmFake:
    tencent_server.reset()
    tencent_server.add("db", "v2", VALUES["tencent-2"], created=1_700_000_200)
    tencent_server.add("db", "v1", VALUES["tencent-1"], created=1_700_000_100)  # listed last
    tencent_server.add("bin", "b1", VALUES["tencent-bin"].encode())
    tencent_server.add("off", "v1", "x-disabled")
    tencent_server.disable("off")
    monkeypatch.setenv("TENCENTCLOUD_SECRET_ID", TC_SECRET_ID)
    monkeypatch.setenv("TENCENTCLOUD_SECRET_KEY", TC_SECRET_KEY)
    monkeypatch.setenv("PROVISIONER_TENCENT_SSM_ENDPOINT", tencent_server.endpoint)
    return tencent_server


def test_tencent_reads_the_newest_version_or_the_named_one(tencent: TencentSsmFake) -> None:
    assert read_secret("tencent-ssm:db", region="ap-guangzhou") == VALUES["tencent-2"]
    assert read_secret("tencent-ssm:db@v1", region="ap-guangzhou") == VALUES["tencent-1"]
    assert read_secret("tencent-ssm:bin", region="ap-guangzhou") == VALUES["tencent-bin"]
    wire = [(r.action, r.params) for r in tencent.requests]
    assert wire == [
        ("ListSecretVersionIds", {"SecretName": "db"}),
        ("GetSecretValue", {"SecretName": "db", "VersionId": "v2"}),
        ("GetSecretValue", {"SecretName": "db", "VersionId": "v1"}),
        ("ListSecretVersionIds", {"SecretName": "bin"}),
        ("GetSecretValue", {"SecretName": "bin", "VersionId": "b1"}),
    ]
    assert {(r.headers["x-tc-version"], r.headers["x-tc-region"]) for r in tencent.requests} == {
        ("2019-09-23", "ap-guangzhou")
    }


def test_tencent_region_from_the_environment(
    tencent: TencentSsmFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SecretError, match="no region"):
        read_secret("tencent-ssm:db@v1")
    monkeypatch.setenv("TENCENTCLOUD_REGION", "ap-guangzhou")
    assert read_secret("tencent-ssm:db@v1") == VALUES["tencent-1"]


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8"])
@pytest.mark.parametrize(
    ("ref", "code", "reason"),
    [
        ("tencent-ssm:missing", None, "not found"),
        ("tencent-ssm:db@v9", None, "not found"),
        ("tencent-ssm:off@v1", None, "disabled or scheduled for deletion"),
        ("tencent-ssm:db@v1", "UnauthorizedOperation", "access denied"),
        ("tencent-ssm:db@v1", "AuthFailure.SignatureExpire", "credentials rejected"),
        ("tencent-ssm:db@v1", "RequestLimitExceeded", "throttled"),
    ],
)
def test_tencent_failures_whatever_the_content_type(
    tencent: TencentSsmFake, content_type: str, ref: str, code: str | None, reason: str
) -> None:
    tencent.content_type = content_type
    if code is not None:
        tencent.fail_next("GetSecretValue", code)
    with pytest.raises(SecretError) as caught:
        read_secret(ref, region="ap-guangzhou")
    assert caught.value.reason == reason
    assert_clean(caught.value)


def test_tencent_unknown_secret_id_and_unreachable(
    tencent: TencentSsmFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENCENTCLOUD_SECRET_ID", "AKIDsomeoneelse")
    with pytest.raises(SecretError, match="credentials rejected"):
        read_secret("tencent-ssm:db@v1", region="ap-guangzhou")
    monkeypatch.setenv("PROVISIONER_TENCENT_SSM_ENDPOINT", f"127.0.0.1:{closed_port()}")
    with pytest.raises(SecretError) as caught:
        read_secret("tencent-ssm:db@v1", region="ap-guangzhou")
    assert caught.value.reason.startswith("unreachable: ")


# -- values never leak ------------------------------------------------------------------------


def _scrubbed_log(value: str) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("test.secrets.redaction")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        logger.warning("job env: TOKEN=%s", value)
        logger.warning(f"inline {value} and %s", {"k": value})
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    return stream.getvalue()


def test_a_value_read_is_scrubbed_from_log_lines(
    aws: tuple[AwsRecorder, str], tencent: TencentSsmFake, sim_file: Path
) -> None:
    for ref, region in [
        ("aws-sm:prod/json#password", None),
        ("tencent-ssm:db@v1", "ap-guangzhou"),
        ("sim:db", None),
    ]:
        value = read_secret(ref, region=region)
        out = _scrubbed_log(value)
        assert value not in out and out.count("***") == 3, out
    # the whole JSON document is registered too, not only the key picked from it
    assert VALUES["aws-json"] not in _scrubbed_log(VALUES["aws-json"])


@pytest.mark.parametrize("quiet", [True, False])
def test_sdk_debug_logging_never_sees_a_value(
    aws: tuple[AwsRecorder, str],
    tencent: TencentSsmFake,
    monkeypatch: pytest.MonkeyPatch,
    quiet: bool,
) -> None:
    """With every SDK logger at DEBUG, botocore and Tencent's SDK log answers (bodies included):
    while a secret is read they are held at INFO. Without that guard (``quiet=False``) the
    same capture does see the value, so the check is not vacuous."""
    if not quiet:
        monkeypatch.setattr(secrets_module, "_quiet_sdk_loggers", nullcontext)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(lambda r: r.name.split(".")[0] in secrets_module.SDK_LOGGERS)
    root = logging.getLogger()
    old_level = root.level
    # a CLI run earlier in the process leaves its handler on the root logger, whose filter
    # scrubs each record in place (before this capture sees it): set it aside meanwhile
    ours = [h for h in root.handlers if getattr(h, "_provisioner", False)]
    for h in ours:
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    loggers = [logging.getLogger(n) for n in ("botocore", "tencentcloud_sdk_common")]
    # whatever an earlier test (a CLI run's logging set-up) did to these loggers
    # (a fileConfig elsewhere disables every logger that exists, children included)
    family = [
        logging.getLogger(name)
        for name in list(logging.root.manager.loggerDict)
        if name.split(".")[0] in ("botocore", "tencentcloud_sdk_common", "tencentcloud")
    ]
    states = [(lg, lg.level, lg.propagate, lg.disabled) for lg in {*loggers, *family}]
    disabled_below = logging.root.manager.disable
    logging.disable(logging.NOTSET)
    for lg, *_ in states:
        lg.setLevel(logging.NOTSET)
        lg.propagate, lg.disabled = True, False
    for lg in loggers:
        lg.setLevel(logging.DEBUG)
    try:
        read_secret("aws-sm:prod/db")
        read_secret("tencent-ssm:db@v1", region="ap-guangzhou")
        after = [lg.level for lg in loggers]
    finally:
        root.removeHandler(handler)
        for h in ours:
            root.addHandler(h)
        root.setLevel(old_level)
        for lg, level, propagate, disabled in states:
            lg.setLevel(level)
            lg.propagate, lg.disabled = propagate, disabled
        logging.disable(disabled_below)
    out = stream.getvalue()
    assert after == [logging.DEBUG, logging.DEBUG]  # the levels are restored after the read
    leaked = [v for v in (VALUES["aws"], VALUES["tencent-1"]) if v in out]
    if quiet:
        assert leaked == []
    else:
        assert leaked, "the SDKs no longer log bodies at DEBUG: the guard may be unneeded"
