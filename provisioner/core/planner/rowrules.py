"""The planner's rules judged once per catalog row, whatever the market: the GPU index (model,
VRAM), the columns gathered for the rows left, the row rules (provider, GPU count, CPU and
memory, interconnect, measured speed, residency; latency), the job's duration on each row, and
the caller's context (cooldowns, capacity reported missing, a gang's nodes). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from policies.gpus import GPUSpec, canonical_gpu
from policies.model import Policy
from provisioner.core.admission import billing_of
from provisioner.core.catalog import Catalog
from provisioner.core.measured import Measured
from provisioner.core.models import Market
from provisioner.core.network import SPREAD_ONLY_GROUPS, spread_only_why, wants_interconnect
from provisioner.core.planner.planrows import (
    PlanError,
    interconnect_mask,
    measured_speed,
    region_verdicts,
)
from provisioner.core.planner.reasons import CODE, Tally, describe
from provisioner.core.sizing import estimate_hours

if TYPE_CHECKING:
    import numpy as np

    from provisioner.core.planner.context import PlanContext


def gpu_models(policy: Policy) -> tuple[set[str] | None, set[str]]:
    """The GPU models ``resources.gpus`` allows (None: any) and those it excludes."""
    res = policy.resources
    allowed: set[str] | None = None
    if res.gpus is not None:
        allowed = set()
        for name in res.gpus:
            model = canonical_gpu(name)
            if model is None:
                raise PlanError(f"resources.gpus: unknown GPU {name!r}")
            allowed.add(model)
    excluded = {canonical_gpu(n) or n for n in res.exclude_gpus}
    return allowed, excluded


def gpu_rows(
    policy: Policy,
    catalog: Catalog,
    specs: dict[str, GPUSpec],
    need_vram: float | None,
    markets: list[Market],
    tally: Tally,
) -> np.ndarray:
    """Step 1, through the catalog's GPU index: the rows of usable GPU models (sorted); the
    others are counted under ``gpu_model`` or ``vram``, once per market."""
    import numpy as np

    allowed_models, excluded_models = gpu_models(policy)
    keep_rows: list[np.ndarray] = []
    for model, rows in catalog.columns.by_gpu.items():
        spec = specs.get(model)
        reason = None
        if (allowed_models is not None and model not in allowed_models) or model in excluded_models:
            reason = "gpu_model"
        elif need_vram is not None and (spec is None or spec.vram_gb + 1e-9 < need_vram):
            reason = "vram"
        if reason is None:
            keep_rows.append(rows)
            continue
        tally.counts[reason] += len(rows) * len(markets)
        if tally.room(reason) > 0 and len(rows):
            o = catalog.offers[int(rows[0])]
            detail = (
                f" ({spec.vram_gb:g} GB < {need_vram:.1f} GB)"
                if reason == "vram" and spec and need_vram
                else ""
            )
            tally.examples[reason].append(describe(o, (markets or [Market.RESERVED])[0]) + detail)
    return np.sort(np.concatenate(keep_rows)) if keep_rows else np.empty(0, dtype=np.int64)


@dataclass
class Rows:
    """The rows left after the GPU index, with the columns the rules read (gathered once)
    and what the rules found per row."""

    rows: np.ndarray
    region_code: np.ndarray  # the residency verdict of each row's region (a reason code or 0)
    worst_rtt: np.ndarray
    mean_rtt: np.ndarray
    gpu_count: np.ndarray
    on_demand: np.ndarray
    spot: np.ndarray
    gpu_codes: np.ndarray
    tflops_by_code: np.ndarray
    tflops: np.ndarray  # the instance's TFLOPS (scaled by its measured speed, once known)
    #: the first market-independent rule each row breaks (a reason code; 0: none)
    base: np.ndarray = field(init=False)
    latency_bad: np.ndarray = field(init=False)
    speed: np.ndarray = field(init=False)
    measured_at: dict[int, Measured] = field(init=False)
    hours: np.ndarray = field(init=False)  # the work left on each row (NaN: not sized)
    #: (reason, row position) -> why, for the examples
    why_row: dict[tuple[str, int], str] = field(default_factory=dict)
    #: the same for the rules judged per market (quota, gang capacity): (reason, row position,
    #: market index) -> why; a row's spot and on-demand candidates meet different limits
    why_market: dict[tuple[str, int, int], str] = field(default_factory=dict)


def gather(policy: Policy, catalog: Catalog, rows: np.ndarray, specs: dict[str, GPUSpec]) -> Rows:
    """The columns of ``rows`` the rules read, and each region's residency verdict and RTT."""
    import numpy as np

    cols = catalog.columns
    region_verdict, region_worst_rtt, region_mean_rtt = region_verdicts(policy, cols, CODE)
    rv = (
        np.asarray(region_verdict, dtype=np.int16)[cols.region[rows]]
        if len(rows)
        else np.empty(0, np.int16)
    )
    worst_rtt = np.asarray(region_worst_rtt)[cols.region[rows]] if len(rows) else np.empty(0)
    mean_rtt = np.asarray(region_mean_rtt)[cols.region[rows]] if len(rows) else np.empty(0)
    gpu_count = cols.gpu_count[rows]
    gpu_codes = cols.gpu[rows]
    tflops_by_code = np.asarray(
        [(specs[g].tensor_tflops if g in specs else 0.0) for g in cols.gpu_names] or [0.0]
    )
    return Rows(
        rows=rows,
        region_code=rv,
        worst_rtt=worst_rtt,
        mean_rtt=mean_rtt,
        gpu_count=gpu_count,
        on_demand=cols.price[rows],
        spot=cols.spot_price[rows],
        gpu_codes=gpu_codes,
        tflops_by_code=tflops_by_code,
        tflops=tflops_by_code[gpu_codes] * gpu_count,
    )


def judge_rows(policy: Policy, catalog: Catalog, ctx: PlanContext, r: Rows) -> None:
    """The market-independent rules, in the planner's order, into ``r.base`` (and the
    probes' speed per row, and whether each row's RTT is over the limit)."""
    import numpy as np

    res = policy.resources
    rows, nodes = r.rows, res.nodes
    base = np.zeros(len(rows), dtype=np.int16)
    base[r.region_code == CODE["provider"]] = CODE["provider"]
    # gpu_count: exact match of GPUs per instance
    base[(base == 0) & (r.gpu_count != res.gpu_count)] = CODE["gpu_count"]
    if res.min_vcpus is not None or res.min_memory_gib is not None:
        low = np.zeros(len(rows), dtype=bool)
        if res.min_vcpus is not None:
            low |= catalog.columns.vcpus[rows] < res.min_vcpus
        if res.min_memory_gib is not None:
            low |= catalog.columns.memory_gib[rows] < res.min_memory_gib
        base[(base == 0) & low] = CODE["cpu_memory"]
    if wants_interconnect(res.interconnect, nodes):
        bad = interconnect_mask(policy, catalog, rows, r.why_row)
        base[(base == 0) & bad] = CODE["interconnect"]
    if nodes > 1 and res.interconnect.inter_node == "placement-group":
        for pos in np.flatnonzero(base == 0).tolist():
            provider = catalog.offers[int(rows[pos])].provider
            if provider in SPREAD_ONLY_GROUPS:
                base[pos] = CODE["interconnect"]
                r.why_row[("interconnect", pos)] = spread_only_why(provider)
    r.speed, r.measured_at = measured_speed(catalog, rows, ctx.measured)
    if r.measured_at and res.min_measured_fraction is not None:
        base[(base == 0) & (r.speed < res.min_measured_fraction)] = CODE["measured"]
    sel = (base == 0) & (r.region_code != 0)
    base[sel] = r.region_code[sel]
    r.base = base
    if policy.latency.max_rtt_ms is not None and policy.latency.targets:
        r.latency_bad = ~(r.worst_rtt <= policy.latency.max_rtt_ms)  # NaN (unknown): too slow
    else:
        r.latency_bad = np.zeros(len(rows), dtype=bool)


def size_rows(policy: Policy, ctx: PlanContext, r: Rows, specs: dict[str, GPUSpec]) -> None:
    """The work left on each row, where the job is sized (``r.hours``; NaN: not sized): from
    the workload's tokens, else the policy's compute hours on its reference GPU; scaled by
    the probes' measured speed, less the work done."""
    import numpy as np

    nodes = policy.resources.nodes
    hours = np.full(len(r.rows), np.nan)
    w = policy.resources.workload
    if w is not None and w.tokens_b is not None:
        for code in sorted(set(r.gpu_codes.tolist())):  # not np.unique: it imports numpy.ma
            m = r.gpu_codes == code
            per = estimate_hours(w, float(r.tflops_by_code[code]), 1)
            if per is not None:
                hours[m] = per / (r.gpu_count[m] * nodes)
    elif policy.job.compute_hours is not None:
        ref = specs.get(canonical_gpu(policy.job.reference_gpu) or "")
        ref_tflops = ref.tensor_tflops if ref else 0.0
        if ref_tflops > 0:
            with np.errstate(divide="ignore", invalid="ignore"):
                hours = policy.job.compute_hours * ref_tflops / (r.tflops * nodes)
    if r.measured_at:  # probes say how fast these rows really are
        r.tflops = r.tflops * r.speed
        hours = hours / r.speed
    r.hours = np.maximum(hours - ctx.hours_done, 0.0) if ctx.hours_done else hours


@dataclass(frozen=True)
class ContextMasks:
    """Rows the caller's context rules out: a zone cooling down, capacity reported missing,
    fewer of a gang's nodes known to be there (per market)."""

    cooldown: np.ndarray
    unavailable: np.ndarray
    short: dict[Market, np.ndarray]


def context_masks(
    catalog: Catalog, ctx: PlanContext, r: Rows, markets: list[Market], nodes: int
) -> ContextMasks:
    import numpy as np

    rows = r.rows
    cooldown_mask = np.zeros(len(rows), dtype=bool)
    unavailable_mask = np.zeros(len(rows), dtype=bool)
    short_mask = {m: np.zeros(len(rows), dtype=bool) for m in markets}
    short = nodes > 1 and bool(ctx.node_capacity)
    if ctx.cooldown or ctx.unavailable or short:
        for j, i in enumerate(rows):
            o = catalog.offers[int(i)]
            if ctx.cooldown and (
                (o.provider, o.zone) in ctx.cooldown or (o.provider, o.region) in ctx.cooldown
            ):
                cooldown_mask[j] = True
            if ctx.unavailable and (o.provider, o.location, o.instance_type) in ctx.unavailable:
                unavailable_mask[j] = True
            for m in markets if short else ():
                there = ctx.node_capacity.get((o.provider, o.location, o.instance_type, m.value))
                if there is not None and there < nodes:
                    short_mask[m][j] = True
                    r.why_market[("gang_capacity", j, markets.index(m))] = (
                        f"only {there} of {nodes} nodes of {o.instance_type} {m.value} in "
                        f"{o.location}"
                    )
    return ContextMasks(cooldown_mask, unavailable_mask, short_mask)


def first_charge_s(catalog: Catalog, ctx: PlanContext, r: Rows) -> np.ndarray:
    """The least billed time of a launch per row: its cloud's rule, one pass at least."""
    import numpy as np

    cols, st = catalog.columns, ctx.standing
    secs_by = [
        billing_of(st.billing, name).billed_seconds(st.step_s) for name in cols.provider_names
    ]
    if not len(r.rows):
        return r.hours
    return np.asarray(secs_by or [0], dtype=float)[cols.provider[r.rows]]
