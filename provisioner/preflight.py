"""What is checked before a job is written, by ``provisioner up`` and by the Python API alike.

A submission that cannot run is refused before the store sees it, with the same words on both
faces: an unknown provider, an option its constructor does not take, a cloud whose SDK is not
installed here, a policy the planner cannot read, and a policy with no eligible offer in the
catalog. The CLI turns a :class:`Refused` into its exit code (2, or 3 for
:class:`NothingEligible`); :func:`provisioner.up` and :func:`provisioner.api.submit` raise it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from datetime import UTC, datetime
from importlib.machinery import all_suffixes
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provisioner.errors import InputError, exit_code_for

if TYPE_CHECKING:
    from policies.model import Policy
    from provisioner.core.catalog import Catalog
    from provisioner.core.planner import Plan, PlanContext


class Refused(InputError, ValueError):
    """A submission refused before anything was written. ``exit_code``: the command line's
    (``provisioner.errors.EXIT_CODES``: 2, or 3 for :class:`NothingEligible`)."""

    @property
    def exit_code(self) -> int:
        return exit_code_for(self)


class NothingEligible(Refused):
    """The policy matches no offer of the catalog now; ``plan`` says why each was rejected."""

    def __init__(self, message: str, plan: Plan) -> None:
        super().__init__(message)
        self.plan = plan


def module_available(name: str) -> bool:
    """Whether ``name`` can be imported, found without importing it or its parent packages.

    The top-level package is found by the import system; the rest of the dotted name is looked
    up in its directories (namespace packages such as ``google.cloud`` included).
    """
    top, *rest = name.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None:
        return False
    locations = [Path(p) for p in spec.submodule_search_locations or ()]
    for i, part in enumerate(rest):
        if i == len(rest) - 1 and any(
            (loc / f"{part}{suffix}").is_file() for loc in locations for suffix in all_suffixes()
        ):
            return True
        locations = [loc / part for loc in locations if (loc / part).is_dir()]
        if not locations:
            return False
    return True


def provider_problem(name: str, options: dict[str, Any]) -> str | None:
    """Why ``name`` with ``options`` cannot be used (an unknown provider, or an option its
    constructor does not take); None: fine."""
    from providers.base import BUILTIN, provider_names

    known = provider_names()
    if name not in known:
        shown = name if len(name) <= 40 else name[:37] + "..."
        return f"--provider {shown!r}: unknown provider (known: {', '.join(known)})"
    cls = _provider_class(name, BUILTIN)
    if cls is None:
        return None  # a plug-in that cannot be inspected: its constructor will judge
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return None
    accepted = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    rest = [p.name for p in params if p.kind is p.VAR_KEYWORD]
    if rest:
        shared = _typed_kwargs(cls, rest[0])
        if shared is None:
            return None  # takes any keyword: its constructor will judge
        accepted.extend(shared)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        return (
            f"-o {unknown[0]}: not an option of the {name} provider "
            f"(its options: {', '.join(accepted) or 'none'})"
        )
    return None


def sdk_problem(name: str) -> str | None:
    """Why no job can start on cloud ``name`` from here (its SDK is not installed: a job
    recorded anyway would wait forever); None: installed, or the sim or a plug-in."""
    from providers.facts import cloud_facts, known_clouds

    if name not in known_clouds():
        return None
    facts = cloud_facts(name)
    if module_available(facts.sdk_module):
        return None
    return (
        f"--provider {name}: its SDK ({facts.sdk}) is not installed here, so no job can be "
        f"started on {name}; install it with: pip install 'provisioner[{name}]'"
    )


def launch_context(
    policy: Policy,
    catalog: Catalog,
    now: datetime,
    step_s: float | None = None,
    **kw: Any,
) -> PlanContext:
    """The context that plans ``policy`` as the daemon will judge its first launch: nothing
    spent yet, each cloud's billing rule (from its facts, as the daemon reads them), the
    daemon's pass interval (``step_s``)."""
    from providers.facts import CLOUD_BILLING
    from provisioner.core.admission import DEFAULT_STEP_S, Standing
    from provisioner.core.planner import PlanContext

    names = catalog.columns.provider_names
    billing = {name: CLOUD_BILLING[name] for name in set(names) if name in CLOUD_BILLING}
    step = DEFAULT_STEP_S if step_s is None else step_s
    return PlanContext(now=now, standing=Standing.for_policy(policy, billing, step), **kw)


def eligible_plan(
    policy: Policy, where: str, catalog: Catalog | None = None, now: datetime | None = None
) -> Plan:
    """The policy planned on ``catalog`` (default: the built-in one) now; raises
    :class:`Refused` when it cannot be planned and :class:`NothingEligible` when nothing is
    eligible. ``where``: how to name the policy in the message (its path or name)."""
    from provisioner.catalog_files import builtin_catalog
    from provisioner.core.planner import PlanError, plan_offers

    cat = catalog if catalog is not None else builtin_catalog()
    try:
        # judged as the daemon judges a launch (provisioner.core.admission): a job no offer
        # can be launched for is refused here, not failed by the daemon's first pass
        ctx = launch_context(policy, cat, now or datetime.now(UTC))
        plan = plan_offers(policy, cat, ctx, top=3)
    except PlanError as exc:
        raise Refused(f"{where}: {exc}") from None
    if not plan.placements and not plan.rejected.get("window"):
        why = sorted(plan.rejected.items(), key=lambda kv: -kv[1])[:3]
        reasons = "; ".join(f"{reason} ({n})" for reason, n in why) or "no candidates"
        raise NothingEligible(
            f"{where}: nothing eligible among {plan.candidates} candidates: {reasons}. "
            f"{_what_to_change(plan, cat, ctx)}`provisioner plan --policy {where}` shows each rejection.",
            plan,
        )
    return plan


def _what_to_change(plan: Plan, catalog: Catalog, ctx: PlanContext) -> str:
    """What to change in the policy when the total budget refuses every offer left: the
    least budget that would let one be launched (the same plan without ``max_total``)."""
    from provisioner.core.admission import launch_cost_usd
    from provisioner.core.planner import plan_offers

    policy = plan.policy
    cap = policy.budget.max_total
    if "budget_total" not in plan.rejected or cap is None:
        return ""
    free = policy.model_copy(
        update={"budget": policy.budget.model_copy(update={"max_total": None})}
    )
    rest = plan_offers(free, catalog, ctx, top=None).placements
    s = ctx.standing
    need = min((s.spent_usd + s.committed_usd + launch_cost_usd(p, s) for p in rest), default=None)
    least = "" if need is None else f" to at least ${need:.4g}"
    sized = " or lower job.compute_hours" if policy.job.compute_hours is not None else ""
    return (
        f"budget.max_total ${cap:.4g} cannot pay for any launch (what one is billed at least, "
        f"its cloud's minimum, or the work left and the changeover): raise it{least}{sized}. "
    )


def check_submission(
    policy: Policy,
    where: str,
    provider: str,
    options: dict[str, Any],
    catalog: Catalog | None = None,
) -> Plan:
    """Everything checked before a job is written, in the order ``up`` reports it: the
    provider and its options, its SDK, then the plan. Raises :class:`Refused`."""
    for problem in (provider_problem(provider, options), sdk_problem(provider)):
        if problem is not None:
            raise Refused(problem)
    return eligible_plan(policy, where, catalog)


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
    from providers.base import plugin_entry_points

    try:
        for ep in plugin_entry_points():
            if ep.name == name:
                return ep.load()
        module, _, attr = builtin[name].partition(":")
        return getattr(importlib.import_module(module), attr)
    except Exception:  # an optional extra not installed: the launch path says so with exit 4
        return None
