"""What looks like a credential: an environment name that says so, or a value shaped like one.

One reading for the policy (``job.env`` refuses a credential and points at ``job.secrets``) and
for the bootstrap script (which carries none). Names are split into words at ``_``, ``-``,
``.`` and case changes, so ``HF_TOKEN``, ``aws_secret_access_key``, ``apiKey`` and
``DB_PASSWORD`` name one and ``TOKENIZERS_PARALLELISM`` or ``AUTHOR`` do not. Values are
matched against the published shapes of common keys and tokens (below, each with its issuer).
"""

from __future__ import annotations

import itertools
import re

#: words (in a name split at ``_``, ``-``, ``.`` and case changes) that name a credential
SECRET_WORDS = frozenset(
    {
        "secret",
        "secrets",
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "token",
        "tokens",
        "credential",
        "credentials",
        "auth",
        "apikey",
        "accesskey",
        "privatekey",
        "sessionkey",
    }
)
SECRET_PAIRS = frozenset(
    {
        ("private", "key"),
        ("access", "key"),
        ("api", "key"),
        ("session", "key"),
        ("account", "key"),
        ("secret", "key"),
    }
)
#: values shaped like a credential, whatever they are called
SECRET_VALUE = re.compile(
    r"(?:\b(?:AKIA|ASIA)[0-9A-Z]{16}\b)"  # AWS access key ids
    r"|(?:-----BEGIN [A-Z ]*PRIVATE KEY-----)"  # PEM private keys
    r"|(?:[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@)"  # user:password@ in a URL
    r"|(?:\bhf_[A-Za-z0-9]{30,}\b)"  # Hugging Face access tokens
    r"|(?:\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}\b)"  # GitHub tokens
    r"|(?:\bgithub_pat_[A-Za-z0-9_]{40,}\b)"  # GitHub fine-grained tokens
    r"|(?:\bglpat-[A-Za-z0-9_-]{20,}\b)"  # GitLab personal access tokens
    r"|(?:\bxox[abposr]-[A-Za-z0-9-]{10,}\b)"  # Slack tokens
    r"|(?:\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{32,}\b)"  # OpenAI / Anthropic API keys
    r"|(?:\bAIza[0-9A-Za-z_-]{35}\b)"  # Google API keys
)


def names_credential(name: str) -> bool:
    """True for names such as ``HF_TOKEN``, ``aws_secret_access_key``, ``apiKey``,
    ``password`` (not ``TOKENIZERS_PARALLELISM`` or ``author``)."""
    words = [w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+", name)]
    pairs = set(itertools.pairwise(words))
    return bool(SECRET_WORDS.intersection(words) or SECRET_PAIRS & pairs)


def looks_like_credential(value: str) -> bool:
    """True for a value shaped like a key or token (an AWS key id, a PEM private key, a URL
    with a password, a Hugging Face, GitHub, GitLab, Slack, OpenAI or Google key)."""
    return bool(SECRET_VALUE.search(value))
