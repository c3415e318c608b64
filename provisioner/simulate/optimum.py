"""The offline optimum (exact dynamic programme) and the simple lower bound.

The optimum knows the whole window in advance and picks, step by step, nothing, on-demand or
spot in some zone, paying the changeover for every new instance, exactly as the policies are
simulated (:mod:`provisioner.simulate.scenario`). It needs work, deadline and changeover to be
whole numbers of steps (:func:`provisioner.simulate.traces.step_for` picks such a step).
For a gang (``Scenario.nodes``) it is given the gang's availability (at least ``nodes``
instances in the zone) and pays every node, as the policies do, so cost / optimum compares
like with like.

State: the step ``t``, what is running (nothing, on-demand, spot in zone ``z``), and the
*lost time* ``l`` so far (steps spent waiting or in changeovers). Progress is ``t - l``, so
the job is done once ``t - l >= C`` and the deadline holds iff ``l <= S = N - C``: ``l`` lives
in ``0..S`` (and only ``t - C < l <= t`` needs computing at step ``t``); the table is
``(steps) x (2 + zones) x (S + 1)``, computed backwards for every window at once with numpy. A changeover of ``k`` steps is one jump from ``t`` to ``t + k``
(``l + k``, ``k`` steps billed); starting spot needs the zone up for those ``k`` steps (a
spot instance lost inside its changeover made no progress and cost money, so waiting instead
is never worse, and the optimum never does it).

A switch from a running instance may also be made before break, as the policies make it (one
instance or a gang): the new one's changeover runs while the old one works on, ``k`` steps
billed on both and no time lost; the old instance must last through them (a spot zone up for
those ``k`` steps, as the new one's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from provisioner.simulate.scenario import Scenario


def run_lengths(avail: np.ndarray) -> np.ndarray:
    """Per position, how many consecutive True values start there (along the last axis)."""
    out = np.zeros(avail.shape, dtype=np.int64)
    n = avail.shape[-1]
    acc = np.zeros(avail.shape[:-1], dtype=np.int64)
    for t in range(n - 1, -1, -1):
        acc = np.where(avail[..., t], acc + 1, 0)
        out[..., t] = acc
    return out


@dataclass
class OptimumResult:
    """Per window: the optimum's cost, and (when asked for) its billed and productive hours."""

    cost: np.ndarray
    od_hours: np.ndarray | None = None
    spot_hours: np.ndarray | None = None
    od_work_hours: np.ndarray | None = None
    spot_work_hours: np.ndarray | None = None
    launches: np.ndarray | None = None


CHUNK_CELLS = 12_000_000  # decision cells (int8) kept per chunk of windows when tracing back


def optimum(avail: np.ndarray, sc: Scenario, *, schedule: bool = False) -> OptimumResult:
    """The offline optimum per window; with ``schedule``, also its hours (a traced-back plan)."""
    if avail.ndim == 2:
        avail = avail[:, :, None]
    if not schedule:
        return OptimumResult(cost=_solve(avail, sc, None)[0])
    n_w = avail.shape[0]
    n = round(sc.deadline_s / sc.step_s)
    per_window = max(
        1, n * (2 + avail.shape[2]) * (round((sc.deadline_s - sc.work_s) / sc.step_s) + 1)
    )
    chunk = max(1, CHUNK_CELLS // per_window)
    parts = [_solve(avail[i : i + chunk], sc, True) for i in range(0, n_w, chunk)]
    cost = np.concatenate([p[0] for p in parts])
    traced = [p[1] for p in parts]
    h = sc.step_s / 3600.0

    def cat(j: int, scale: float) -> np.ndarray:
        return np.concatenate([tr[j] for tr in traced if tr is not None]) * scale

    return OptimumResult(
        cost=cost,
        od_hours=cat(0, h),
        spot_hours=cat(1, h),
        od_work_hours=cat(2, h),
        spot_work_hours=cat(3, h),
        launches=cat(4, 1.0).astype(np.int64),
    )


def optimum_cost(avail: np.ndarray, sc: Scenario) -> np.ndarray:
    """Minimum cost per window that meets the deadline; ``avail`` is (windows, steps, zones).

    ``inf`` where even on-demand from the start cannot make the deadline.
    """
    return optimum(avail, sc).cost


def _solve(
    avail: np.ndarray, sc: Scenario, trace: bool | None
) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
    if not sc.integral:
        raise ValueError(
            "the optimum needs work, deadline and changeover in whole steps "
            f"(step {sc.step_s:g} s; use provisioner.simulate.traces.step_for)"
        )
    w_n, _, n_z = avail.shape
    n = round(sc.deadline_s / sc.step_s)
    c = round(sc.work_s / sc.step_s)
    k = round(sc.overhead_s / sc.step_s)
    s = n - c
    if s < k:  # not even on-demand from the start fits
        return np.full(w_n, np.inf), None
    av = np.zeros((w_n, n, n_z), dtype=bool)
    m = min(n, avail.shape[1])
    av[:, :m] = avail[:, :m]
    av_t = np.ascontiguousarray(np.moveaxis(av, 1, 0))  # (steps, windows, zones)
    runs = run_lengths(np.moveaxis(av, 1, 2))  # (windows, zones, steps)
    can_start = np.moveaxis(runs >= max(k, 1), 2, 0)  # (steps, windows, zones)

    h = sc.step_s / 3600.0
    a = sc.price_on_demand * sc.nodes * h  # one on-demand step (every node of a gang)
    b = sc.price_spot * sc.nodes * h  # one spot step
    inf = np.inf
    n_modes = 2 + n_z  # 0: nothing, 1: on-demand, 2+z: spot in zone z
    # choices n_modes - 1 + m: to mode m >= 1, made before break
    mbb = sc.make_before_break and k > 0
    price = [0.0, a] + [b] * n_z  # one step of each mode
    pad = max(k, 1)
    width = s + 1 + pad  # lost time 0..s, then inf: beyond the slack the deadline is missed
    # ring of value tables for t .. t+k, each (modes, windows, width); V_N = 0 (deadline met)
    depth = pad + 1
    ring = [np.zeros((n_modes, w_n, width)) for _ in range(depth)]
    for table in ring:
        table[:, :, s + 1 :] = inf
    choice = np.zeros((n, n_modes, w_n, s + 1), dtype=np.int8) if trace else None

    for t in range(n - 1, -1, -1):
        cur = ring[t % depth]
        # only lost times that are reachable (l <= t) and not yet finished (t - l < C) matter
        lo, hi = max(0, t - c + 1), min(t, s) + 1
        cur[:, :, :lo] = 0.0  # finished: nothing more to pay
        if lo >= hi:
            continue
        nxt = ring[(t + 1) % depth]
        jump = ring[(t + k) % depth] if (k > 0 and t + k <= n) else None
        idle = nxt[0][:, lo + 1 : hi + 1]
        od_cont = a + nxt[1][:, lo:hi]
        never = np.full(idle.shape, inf)
        if k == 0:
            od_start = od_cont
        elif jump is not None:
            od_start = k * a + jump[1][:, lo + k : hi + k]
        else:
            od_start = never
        conts = []
        starts = []
        for z in range(n_z):
            conts.append(np.where(av_t[t, :, z][:, None], b + nxt[2 + z][:, lo:hi], inf))
            if k == 0:
                starts.append(conts[z])
            elif jump is not None:
                ok = can_start[t, :, z][:, None]
                starts.append(np.where(ok, k * b + jump[2 + z][:, lo + k : hi + k], inf))
            else:
                starts.append(never)
        # made before break: the target's start as above, without the lost time, plus the
        # old instance's k steps (it must last them)
        targets: list[np.ndarray] = []
        if mbb and jump is not None:
            targets.append(k * a + jump[1][:, lo:hi])
            for z in range(n_z):
                ok = can_start[t, :, z][:, None]
                targets.append(np.where(ok, k * b + jump[2 + z][:, lo:hi], inf))
        # options per mode, in a fixed order: idle, on-demand, spot in each zone, then the
        # switches made before break to on-demand and to spot in each zone
        for mode in range(n_modes):
            opts = [idle, od_cont if mode == 1 else od_start]
            opts += [conts[z] if mode == 2 + z else starts[z] for z in range(n_z)]
            if targets:
                lasts: np.ndarray | bool = mode == 1
                if mode >= 2:
                    lasts = can_start[t, :, mode - 2][:, None]
                for m, tgt in enumerate(targets, start=1):
                    if mode == 0 or m == mode:
                        opts.append(never)
                    else:
                        opts.append(np.where(lasts, k * price[mode] + tgt, inf))
            best = None
            if choice is None:
                val = opts[0]
                for o in opts[1:]:
                    val = np.minimum(val, o)
            else:
                stacked = np.stack(opts)
                best = np.argmin(stacked, axis=0)
                val = np.take_along_axis(stacked, best[None], axis=0)[0]
            if mode >= 2:  # spot in a zone that is down now: the instance is gone
                up = av_t[t, :, mode - 2][:, None]
                val = np.where(up, val, cur[0][:, lo:hi])
                if best is not None and choice is not None:
                    best = np.where(up, best, choice[t, 0][:, lo:hi])
            cur[mode][:, lo:hi] = val
            if choice is not None and best is not None:
                choice[t, mode][:, lo:hi] = best
    cost = ring[0][0][:, 0].copy()
    if choice is None:
        return cost, None
    return cost, _trace_back(choice, av_t, n, c, k, n_modes)


def _trace_back(
    choice: np.ndarray, av_t: np.ndarray, n: int, c: int, k: int, n_modes: int
) -> tuple[np.ndarray, ...]:
    """Follow the stored choices forward: steps billed and productive on each market (a
    switch made before break bills both for its k steps; the old one does the work)."""
    w_n = choice.shape[2]
    rows = np.arange(w_n)
    mode = np.zeros(w_n, dtype=np.int64)
    lost = np.zeros(w_n, dtype=np.int64)
    busy = np.zeros(w_n, dtype=np.int64)  # steps left in a changeover jump
    od_b = np.zeros(w_n)
    spot_b = np.zeros(w_n)
    od_w = np.zeros(w_n)
    spot_w = np.zeros(w_n)
    launches = np.zeros(w_n)
    old = np.zeros(w_n, dtype=np.int64)  # the instance handing over (0: none)
    for t in range(n):
        free = (busy == 0) & (t - lost < c)
        if not free.any() and not busy.any():
            break
        m = np.where(free, mode, 0)
        lo = np.minimum(lost, choice.shape[3] - 1)
        pick = choice[t, m, rows, lo].astype(np.int64)
        gone = (mode >= 2) & ~av_t[t, rows, np.maximum(mode - 2, 0)]
        m_eff = np.where(gone, 0, mode)
        before = free & (pick >= n_modes)  # a switch made before break
        pick = np.where(before, pick - n_modes + 1, pick)
        new = free & (pick >= 1) & (pick != m_eff) & ~before
        cont = free & (pick >= 1) & (pick == m_eff)
        idle = free & (pick == 0)
        lost += idle.astype(np.int64)
        mode = np.where(idle, 0, mode)
        old = np.where(before, m_eff, np.where(free, 0, old))
        if k > 0:
            busy = np.where(new | before, k, busy)
            lost += new.astype(np.int64) * k
        launches += new | before
        mode = np.where(new | cont | before, pick, mode)
        # bill this step: jumps bill k steps over their k steps, one per step
        in_jump = busy > 0
        running = (new | cont | before | in_jump) & (mode >= 1)
        handing = in_jump & (old >= 1)
        od_b += running & (mode == 1)
        spot_b += running & (mode >= 2)
        od_b += handing & (old == 1)
        spot_b += handing & (old >= 2)
        productive = running & ~in_jump
        od_w += productive & (mode == 1)
        spot_w += productive & (mode >= 2)
        od_w += handing & (old == 1)
        spot_w += handing & (old >= 2)
        busy = np.maximum(busy - 1, 0)
        old = np.where(busy == 0, 0, old)
    return od_b, spot_b, od_w, spot_w, launches


def lower_bound_cost(avail: np.ndarray, sc: Scenario) -> np.ndarray:
    """Spot price for the spot time available before the deadline (in any zone), on-demand
    for the rest of the work, no changeovers: no policy can pay less."""
    if avail.ndim == 2:
        avail = avail[:, :, None]
    n = sc.window_steps
    up = np.asarray(avail[:, :n].any(axis=2))
    # the last step may straddle the deadline: count only the part before it
    full = up[:, : n - 1].sum(axis=1) * sc.step_s
    last_len = sc.deadline_s - (n - 1) * sc.step_s
    tail = up[:, n - 1] * last_len if up.shape[1] >= n else 0.0
    spot_h = np.minimum(full + tail, sc.work_s) / 3600.0
    per_node = sc.price_spot * spot_h + sc.price_on_demand * (sc.work_s / 3600.0 - spot_h)
    return per_node * sc.nodes
