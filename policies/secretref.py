"""Secret references: the grammar of a job's ``secrets:`` values (pure: no SDK, no I/O).

One grammar for the policy (``policy check`` refuses a malformed reference at its line) and for
the readers on the VM (:mod:`providers.secrets`, which re-exports these names). The forms:

- ``sim:NAME``: the sim cloud's store, a YAML file named by ``$PROVISIONER_SIM_SECRETS``;
- ``aws-sm:NAME_OR_ARN`` or a bare ``arn:aws:secretsmanager:...``: AWS Secrets Manager;
- ``aws-ssm:/PARAM`` or a bare ``arn:aws:ssm:...:parameter/NAME``: SSM Parameter Store;
- ``gcp-sm:projects/P/secrets/S[/versions/V]``, the bare ``projects/...``, or ``gcp-sm:S``;
- ``azure-kv:https://VAULT.vault.azure.net/secrets/NAME[/VERSION]``, the bare URL, or
  ``azure-kv:VAULT/NAME[/VERSION]``;
- ``alibaba-kms:NAME[@STAGE_OR_VERSION]``; ``tencent-ssm:NAME[@VERSION]``;

any of them followed by ``#KEY`` to pick one key of a JSON secret. A :class:`SecretRefError`
message shows the reference only once its scheme is known (a text with an unknown scheme may
be a value pasted where a reference belongs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from provisioner.errors import InputError

#: the accepted forms, shown in every parse error
FORMS = (
    "accepted forms: sim:NAME | aws-sm:NAME_OR_ARN | arn:aws:secretsmanager:REGION:ACCOUNT:"
    "secret:NAME | aws-ssm:/PARAMETER | arn:aws:ssm:REGION:ACCOUNT:parameter/NAME | "
    "gcp-sm:projects/P/secrets/S[/versions/V] | gcp-sm:S | "
    "azure-kv:https://VAULT.vault.azure.net/secrets/NAME[/VERSION] | "
    "azure-kv:VAULT/NAME[/VERSION] | "
    "alibaba-kms:NAME[@STAGE_OR_VERSION] | tencent-ssm:NAME[@VERSION]; "
    "any of them may end in #KEY to pick one key of a JSON secret"
)

_ARN_PARTITIONS = ("aws", "aws-cn", "aws-us-gov", "aws-iso", "aws-iso-b")
_AZURE_SUFFIXES = (
    ".vault.azure.net",
    ".vault.azure.cn",
    ".vault.usgovcloudapi.net",
    ".vault.microsoftazure.de",
)
_SCHEME = re.compile(r"[a-z]{1,12}(-[a-z]{1,12})?")  # shown in an error: no digits
_SIM_NAME = re.compile(r"[A-Za-z0-9_.:/@+=-]{1,256}")
_AWS_SM_NAME = re.compile(r"[A-Za-z0-9/_+=.@-]{1,512}")
_AWS_SSM_NAME = re.compile(r"[A-Za-z0-9_./:-]{1,2048}")  # name[:version|:label]
_REGION = re.compile(r"[a-z]{2}(-[a-z0-9]+)+")
_ACCOUNT = re.compile(r"\d{12}")
_GCP_PROJECT = re.compile(r"[a-z0-9][a-z0-9.:-]{0,62}")
_GCP_ID = re.compile(r"[A-Za-z0-9_-]{1,255}")
_GCP_VERSION = re.compile(r"[A-Za-z0-9_-]{1,63}")
_GCP_PATH = re.compile(r"projects/([^/]+)/secrets/([^/]+)(?:/versions/([^/]+))?")
_AZ_VAULT = re.compile(r"[A-Za-z][A-Za-z0-9-]{1,22}[A-Za-z0-9]")
_AZ_NAME = re.compile(r"[A-Za-z0-9-]{1,127}")
_AZ_VERSION = re.compile(r"[A-Za-z0-9]{1,64}")
_ALI_NAME = re.compile(r"[A-Za-z0-9_/+=.@-]{1,192}")
_ALI_ARN = re.compile(r"acs:kms:([a-z0-9-]+):(\d+):secret/(.+)")
_ALI_VERSION = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_TC_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
_TC_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class SecretRefError(InputError, ValueError):
    """A secret reference that cannot be parsed: what is wrong, then the accepted forms."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(f"{problem}; {FORMS}")


@dataclass(frozen=True, slots=True)
class SecretRef:
    """A parsed reference. ``name`` is what the cloud's API is handed (a name, or an ARN)."""

    text: str
    cloud: str  # sim aws gcp azure alibaba tencent
    kind: str  # sim secretsmanager ssm secretmanager keyvault kms
    name: str
    version: str | None = None  # GCP: "latest" unless named; Azure/Alibaba/Tencent: a version id
    field: str | None = None  # one key of a JSON object secret (the "#key" suffix)
    region: str | None = None  # AWS/Alibaba: the region an ARN names
    project: str | None = None  # GCP: the project, None for the short form
    vault_url: str | None = None  # Azure: https://VAULT.vault.azure.net
    stage: str | None = None  # Alibaba: VersionStage (ACSCurrent unless a version is named)

    def __str__(self) -> str:
        return self.text


def parse_secret_ref(text: str) -> SecretRef:
    """Parse one reference (the forms are in :data:`FORMS` and :mod:`providers.secrets`)."""
    if not isinstance(text, str):
        raise SecretRefError(f"a secret reference is a string, not {type(text).__name__}")
    if not text:
        raise SecretRefError("the secret reference is empty")
    for i, ch in enumerate(text):
        if ch.isspace() or not ch.isprintable():
            raise SecretRefError(
                f"a secret reference has no whitespace or control characters "
                f"(found one at character {i + 1})"
            )
    if text.startswith("arn:"):  # the bare forms
        scheme, rest = ("aws-ssm" if text.split(":")[2:3] == ["ssm"] else "aws-sm"), text
    elif text.startswith("projects/"):
        scheme, rest = "gcp-sm", text
    elif text.startswith("https://"):
        scheme, rest = "azure-kv", text
    else:
        scheme, sep, rest = text.partition(":")
        if not sep:
            raise SecretRefError("not a secret reference: it has no scheme (such as aws-sm:)")
    parser = _PARSERS.get(scheme)
    if parser is None:
        shown = f" {scheme!r}" if _SCHEME.fullmatch(scheme) else ""
        raise SecretRefError(f"unknown secret reference scheme{shown}")
    body, hashed, key = rest.partition("#")
    if hashed and not key:
        raise SecretRefError(f"{text}: the JSON key after '#' is empty")
    if not body:
        raise SecretRefError(f"{text}: the name is empty")
    return parser(text, body, key or None)


def _bad(text: str, problem: str) -> SecretRefError:
    return SecretRefError(f"{text}: {problem}")


def _sim(text: str, body: str, key: str | None) -> SecretRef:
    if not _SIM_NAME.fullmatch(body):
        raise _bad(text, "a sim secret name is letters, digits and _.:/@+=-")
    return SecretRef(text, "sim", "sim", body, field=key)


def _arn(text: str, body: str, service: str, resource: str) -> tuple[str, str]:
    """(region, name) of ``arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE...``."""
    parts = body.split(":", 5)
    if len(parts) < 6 or parts[0] != "arn" or parts[2] != service:
        raise _bad(text, f"not an ARN of {service} (arn:aws:{service}:REGION:ACCOUNT:...)")
    _, partition, _, region, account, tail = parts
    if partition not in _ARN_PARTITIONS:
        raise _bad(text, f"unknown ARN partition {partition!r}")
    if not _REGION.fullmatch(region):
        raise _bad(text, "the ARN names no region")
    if not _ACCOUNT.fullmatch(account):
        raise _bad(text, "the ARN's account is not 12 digits")
    sep = ":" if resource == "secret" else "/"
    if not tail.startswith(resource + sep) or len(tail) == len(resource) + 1:
        raise _bad(text, f"the ARN names no {resource} ({resource}{sep}NAME)")
    return region, tail[len(resource) + 1 :]


def _aws_sm(text: str, body: str, key: str | None) -> SecretRef:
    if body.startswith("arn:"):
        region, name = _arn(text, body, "secretsmanager", "secret")
        if not _AWS_SM_NAME.fullmatch(name):
            raise _bad(text, "a secret name is letters, digits and /_+=.@-")
        return SecretRef(text, "aws", "secretsmanager", body, field=key, region=region)
    if not _AWS_SM_NAME.fullmatch(body):
        raise _bad(text, "a secret name is letters, digits and /_+=.@- (or an ARN)")
    return SecretRef(text, "aws", "secretsmanager", body, field=key)


def _aws_ssm(text: str, body: str, key: str | None) -> SecretRef:
    region = None
    if body.startswith("arn:"):
        region, name = _arn(text, body, "ssm", "parameter")
    else:
        name = body
    if not _AWS_SSM_NAME.fullmatch(name) or name.strip("/") == "":
        raise _bad(text, "a parameter name is letters, digits and _./- (name:version allowed)")
    return SecretRef(text, "aws", "ssm", body, field=key, region=region)


def _gcp(text: str, body: str, key: str | None) -> SecretRef:
    if "/" not in body:  # short form: the project comes from the VM at read time
        if not _GCP_ID.fullmatch(body):
            raise _bad(text, "a secret id is letters, digits, _ and -")
        return SecretRef(text, "gcp", "secretmanager", body, "latest", key)
    if "/locations/" in body:
        raise _bad(text, "regional secrets (projects/P/locations/L/...) are not supported")
    match = _GCP_PATH.fullmatch(body)
    if match is None:
        raise _bad(text, "expected projects/P/secrets/S or projects/P/secrets/S/versions/V")
    project, secret, version = match.groups()
    if not _GCP_PROJECT.fullmatch(project):
        raise _bad(text, f"{project!r} is not a project id or number")
    if not _GCP_ID.fullmatch(secret):
        raise _bad(text, "a secret id is letters, digits, _ and -")
    if version is not None and not _GCP_VERSION.fullmatch(version):
        raise _bad(text, "a version is a number, 'latest' or an alias")
    return SecretRef(
        text, "gcp", "secretmanager", secret, version or "latest", key, project=project
    )


def _azure(text: str, body: str, key: str | None) -> SecretRef:
    if body.startswith(("https://", "http://")):
        url = urlsplit(body)
        host = (url.hostname or "").lower()
        if url.scheme != "https":
            raise _bad(text, "a Key Vault URL is https")
        if not host.endswith(_AZURE_SUFFIXES) or not _AZ_VAULT.fullmatch(host.split(".")[0]):
            raise _bad(text, "not a Key Vault host (VAULT.vault.azure.net)")
        if url.query or url.username or url.password:
            raise _bad(text, "a Key Vault secret URL has no query or user part")
        parts = url.path.strip("/").split("/")
        if len(parts) not in (2, 3) or parts[0] != "secrets":
            raise _bad(text, "expected https://VAULT.vault.azure.net/secrets/NAME[/VERSION]")
        vault_url, rest = f"https://{url.netloc.lower()}", parts[1:]
    else:
        vault, *rest = body.split("/")
        if not _AZ_VAULT.fullmatch(vault):
            raise _bad(text, "a vault name is 3-24 letters, digits and -, a letter first")
        if len(rest) not in (1, 2):
            raise _bad(text, "expected VAULT/NAME or VAULT/NAME/VERSION")
        vault_url = f"https://{vault.lower()}.vault.azure.net"
    name, version = rest[0], (rest[1] if len(rest) == 2 else None)
    if not _AZ_NAME.fullmatch(name):
        raise _bad(text, "a Key Vault secret name is letters, digits and -")
    if version is not None and not _AZ_VERSION.fullmatch(version):
        raise _bad(text, "a Key Vault secret version is letters and digits")
    return SecretRef(text, "azure", "keyvault", name, version, key, vault_url=vault_url)


def _alibaba(text: str, body: str, key: str | None) -> SecretRef:
    name, at, selector = body.rpartition("@") if "@" in body else (body, "", "")
    if at and not selector:
        raise _bad(text, "the version or stage after '@' is empty")
    region = None
    arn = _ALI_ARN.fullmatch(name)
    if arn is not None:
        region = arn.group(1)
        if not _ALI_NAME.fullmatch(arn.group(3)):
            raise _bad(text, "a secret name is letters, digits and _/+=.@-")
    elif not _ALI_NAME.fullmatch(name):
        raise _bad(text, "a secret name is letters, digits and _/+=.@- (or acs:kms:... ARN)")
    if selector and not _ALI_VERSION.fullmatch(selector):
        raise _bad(text, "a version or stage is letters, digits and _.-")
    if not selector or selector.startswith("ACS"):  # ACSCurrent, ACSPrevious: a stage
        return SecretRef(
            text, "alibaba", "kms", name, None, key, region=region, stage=selector or "ACSCurrent"
        )
    return SecretRef(text, "alibaba", "kms", name, selector, key, region=region)


def _tencent(text: str, body: str, key: str | None) -> SecretRef:
    name, at, version = body.partition("@")
    if not _TC_NAME.fullmatch(name):
        raise _bad(text, "a secret name is letters, digits, _ and -")
    if at and not _TC_VERSION.fullmatch(version):
        raise _bad(text, "a version id is letters, digits and _.-, a letter or digit first")
    return SecretRef(text, "tencent", "ssm", name, version or None, key)


_PARSERS = {
    "sim": _sim,
    "aws-sm": _aws_sm,
    "aws-ssm": _aws_ssm,
    "gcp-sm": _gcp,
    "azure-kv": _azure,
    "alibaba-kms": _alibaba,
    "tencent-ssm": _tencent,
}
