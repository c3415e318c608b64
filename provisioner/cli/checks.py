"""Argument checks that run before a command writes anything: provider names and options.

A command that will record something (``up`` submits a job, ``catalog refresh`` stores
prices) checks its arguments first, so that bad input is refused with exit 2 and leaves the
store as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provisioner.cli.common import fail

if TYPE_CHECKING:
    from providers.base import Provider

#: Longest ``-o KEY=VALUE`` value accepted (a path or an endpoint URL fits easily).
MAX_OPTION_CHARS = 4096


def parse_provider_options(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``-o KEY=VALUE`` pairs as a dict. VALUE is read as one YAML scalar or a flow list
    (``60``, ``true``, ``eu-west-1``, ``[a, b]``) through the bounded policy YAML reader, so
    ``.inf``, aliases and huge numbers are refused like in a policy."""
    from policies.safeyaml import Refusal, compose

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        shown = pair if len(pair) <= 60 else pair[:57] + "..."
        if not sep or not key:
            fail(f"-o {shown!r}: expected KEY=VALUE, e.g. -o region=eu-west-1")
        if not key.replace("_", "a").replace("-", "a").isalnum() or not key[0].isalpha():
            fail(f"-o {shown!r}: KEY must be a name like region or seconds_per_hour")
        if len(value) > MAX_OPTION_CHARS:
            fail(f"-o {key}: the value is longer than {MAX_OPTION_CHARS} characters")
        try:
            _, parsed = compose(value) if value.strip() else (None, "")
        except Refusal as exc:
            fail(f"-o {key}={value[:40]!r}: {exc.message}")
        except Exception as exc:  # a YAML syntax error in VALUE
            problem = getattr(exc, "problem", None) or str(exc)
            fail(f"-o {key}={value[:40]!r}: cannot read the value ({problem}); quote it")
        if isinstance(parsed, dict) or (
            isinstance(parsed, list) and any(isinstance(v, list | dict) for v in parsed)
        ):
            fail(f"-o {key}: the value must be text, a number, true/false or a flat [list]")
        out[key.replace("-", "_")] = parsed
    return out


def check_provider(name: str, options: dict[str, Any]) -> None:
    """Exit 2 unless ``name`` is a known provider whose constructor takes ``options``."""
    from provisioner.preflight import provider_problem

    problem = provider_problem(name, options)
    if problem is not None:
        fail(problem)


def open_provider(name: str, pairs: tuple[str, ...]) -> Provider:
    """The provider ``name`` built with its defaults and ``-o`` ``pairs`` over them, after the
    checks (exit 2 on an unknown provider or option, or a missing SDK)."""
    from providers.base import get
    from provisioner.providers_config import provider_defaults

    opts = {**provider_defaults(name), **parse_provider_options(pairs)}
    check_provider(name, opts)
    check_sdk(name)
    try:
        return get(name, **opts)
    except ValueError as exc:
        fail(str(exc))


def check_sdk(name: str) -> None:
    """Exit 2 unless the cloud's SDK is installed here: a job on a cloud this machine cannot
    talk to would be recorded and then wait forever ("provider-error blocked")."""
    from provisioner.preflight import sdk_problem

    problem = sdk_problem(name)
    if problem is not None:
        fail(problem)
