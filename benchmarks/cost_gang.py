"""The gang rows of ``cost_bench.py`` (issue 10): multi-node jobs on the multi-node trace sets.

A gang of ``N`` nodes has spot in a zone while the trace shows at least ``N`` of its instances
available (the sets count how many of the 4 or 16 p3.2xlarge asked for were up); losing any
node preempts the whole gang (one changeover, for the gang); every hour is billed ``N`` times,
spot and on-demand, and the optimum is computed on the same gang availability and prices.
``N = 1`` on the same traces (any one instance up) is the single-node figure beside it.

Sets (``../shared/data/traces``; there is no 8-node set, so 8 is a gang on the 16-node set):

* ``cant_be_late/preemption/4-node/aws-08-03-2023``: three zones, 4 x p3.2xlarge, 300 s ticks;
* ``cant_be_late/availability/16-node/aws-08-27-2023``: three zones, 16 x p3.2xlarge;
* ``spothedge/AWS1`` and ``AWS2``: the same two sets cut to a common span (time-aligned), so
  a gang may move between the three zones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

GANG_SETS: list[tuple[str, Path, tuple[int, ...], bool]] = [
    # label, directory, gang sizes, one zone per trace (False: the three zones together)
    ("4-node 2023-08-03", Path("traces/cant_be_late/preemption/4-node/aws-08-03-2023"), (1, 4), True),
    ("16-node 2023-08-27", Path("traces/cant_be_late/availability/16-node/aws-08-27-2023"), (1, 4, 8, 16), True),
    ("4-node aligned (SpotHedge AWS1)", Path("traces/spothedge/AWS1"), (1, 4), False),
    ("16-node aligned (SpotHedge AWS2)", Path("traces/spothedge/AWS2"), (1, 8), False),
]  # fmt: skip
#: the job: as the grid's C = 48 h, C/D = 0.8, d = 12 min cells
WORK_H, FRAC, D_MIN = 48.0, 0.8, 12.0
SHORT = {"uniform-progress": "UP (paper)", "uniform-progress-variant": "UP (old)",
         "eager-next-region": "EAGER", "provisioner": "ours", "learned": "ours, learned"}  # fmt: skip


def gang_specs(data: Path, n: int, seed: int) -> list[dict[str, Any]]:
    """One cell per (set, gang size); ``n`` windows per trace (or per zone group)."""
    out = []
    for label, sub, sizes, alone in GANG_SETS:
        files = [str(p) for p in sorted((data / sub).glob("*.json"))]
        if not files:
            raise SystemExit(f"no traces under {data / sub}: give --data")
        groups = [[f] for f in files] if alone else [files]
        for nodes in sizes:
            out.append(
                {"set": label, "groups": groups, "work_h": WORK_H, "frac": FRAC, "d_min": D_MIN,
                 "nodes": nodes, "windows": n, "seed": seed}
            )  # fmt: skip
    return out


def print_gang(cells: list[dict[str, Any]], names: list[str], label: dict[str, str]) -> None:
    """The gang table: per cell, each strategy's mean cost / optimum (launches after the
    first: restarts and switches)."""
    if not cells:
        return
    print(
        f"\n== Gangs on the multi-node sets (C = {WORK_H:g} h, C/D = {FRAC:g}, d = {D_MIN:g} min; "
        "up while >= N of the zone's instances are, billed x N): mean cost / optimum "
        "(launches after the first) =="
    )
    head = "".join(f"{SHORT.get(n, label[n])[:15]:>16}" for n in names)
    print(
        f"   {'set':<33}{'N':>3}{'zones':>6}{'windows':>8}{'gang up':>8}{'opt $':>9}{head}  misses"
    )
    for c in cells:
        row = "".join(
            f"{p['cost_over_optimum_mean']:.3f} ({p['relaunches']:4.1f})".rjust(16)
            for p in c["policies"].values()
        )
        misses = sum(round(p["miss_rate"] * c["windows"]) for p in c["policies"].values())
        print(
            f"   {c['set']:<33}{c['nodes']:>3}{c['zones']:>6}{c['windows']:>8}"
            f"{c['gang_up']:>8.0%}{c['optimum']['cost_mean']:>9.0f}{row}  {misses}"
        )
    print(
        "   (gang up: share of the steps before the deadline with spot for the gang in some zone;"
        " opt $: the optimum's mean cost of the job, every node)"
    )
