"""Cold start of the command line: `provisioner plan` and `provisioner --help` in fresh processes.

Each run is a new interpreter started through the installed ``provisioner`` console script (as a
person types it), so the figure includes Python's own start-up, the imports the command pulls
in, and the command's work. Prints the median and p90 wall time over ``--runs`` runs of each.
The target for `provisioner plan --policy policies/spot-finetune.yaml` is a median of 0.3 s or
less on the project's two-core machine.

    .venv/bin/python benchmarks/cold_start.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

COMMANDS = {
    "plan": ["plan", "--policy", str(REPO / "policies" / "spot-finetune.yaml")],
    "--help": ["--help"],
}


def executable() -> list[str]:
    """The console script beside this interpreter, else ``python -m provisioner``."""
    script = Path(sys.executable).with_name("provisioner")
    if script.exists():
        return [str(script)]
    found = shutil.which("provisioner")
    return [found] if found else [sys.executable, "-m", "provisioner"]


def time_runs(argv: list[str], runs: int) -> list[float]:
    env = dict(os.environ, NO_COLOR="1", COLUMNS="120")
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr}")
    return times


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    exe = executable()
    time_runs([*exe, "--help"], 2)  # warm the OS file cache; bytecode is compiled once here
    for name, tail in COMMANDS.items():
        t = time_runs([*exe, *tail], args.runs)
        print(
            f"provisioner {name:<7} median {statistics.median(t):.3f} s  p90 {p90(t):.3f} s"
            f"  ({args.runs} cold runs)"
        )


if __name__ == "__main__":
    main()
