"""Argument checks that run before a command writes anything: provider names and options.

A command that will record something (``up`` submits a job, ``catalog refresh`` stores
prices) checks its arguments first, so that bad input is refused with exit 2 and leaves the
store as it was.
"""

from __future__ import annotations

import inspect
from typing import Any

from provisioner.cli.common import fail

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
    from providers.base import BUILTIN, provider_names

    known = provider_names()
    if name not in known:
        shown = name if len(name) <= 40 else name[:37] + "..."
        fail(f"--provider {shown!r}: unknown provider (known: {', '.join(known)})")
    cls = _provider_class(name, BUILTIN)
    if cls is None:
        return  # a plug-in that cannot be inspected: its constructor will judge
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return
    accepted = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    rest = [p.name for p in params if p.kind is p.VAR_KEYWORD]
    if rest:
        shared = _typed_kwargs(cls, rest[0])
        if shared is None:
            return  # takes any keyword: its constructor will judge
        accepted.extend(shared)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        fail(
            f"-o {unknown[0]}: not an option of the {name} provider "
            f"(its options: {', '.join(accepted) or 'none'})"
        )


def _typed_kwargs(cls: Any, name: str) -> list[str] | None:
    """The keys of a constructor's ``**options: Unpack[SomeTypedDict]`` (the options the
    regional clouds share), or None where its ``**kwargs`` are not typed so."""
    import typing

    try:
        hint = typing.get_type_hints(cls.__init__).get(name)
    except Exception:  # an annotation that does not resolve: let the constructor judge
        return None
    if typing.get_origin(hint) is not typing.Unpack:
        return None
    (spec,) = typing.get_args(hint)
    return list(getattr(spec, "__annotations__", {})) or None


def _provider_class(name: str, builtin: dict[str, str]) -> Any:
    import importlib
    from importlib.metadata import entry_points

    try:
        for ep in entry_points(group="provisioner.providers"):
            if ep.name == name:
                return ep.load()
        module, _, attr = builtin[name].partition(":")
        return getattr(importlib.import_module(module), attr)
    except Exception:  # an optional extra not installed: the launch path says so with exit 4
        return None


def check_sdk(name: str) -> None:
    """Exit 2 unless the cloud's SDK is installed here: a job on a cloud this machine cannot
    talk to would be recorded and then wait forever ("provider-error blocked")."""
    from providers.facts import cloud_facts, known_clouds
    from provisioner.cli.providers_cmd import module_available

    if name not in known_clouds():
        return  # the sim and plug-ins: their constructors judge
    facts = cloud_facts(name)
    if not module_available(facts.sdk_module):
        fail(
            f"--provider {name}: its SDK ({facts.sdk}) is not installed here, so no job can be "
            f"started on {name}; install it with: pip install 'provisioner[{name}]'"
        )
