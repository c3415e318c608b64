"""Cold start of the command line: `provisioner plan` and `provisioner --help` in fresh processes.

Each run is a new interpreter, so the figure includes Python's own start-up, the imports the
command pulls in and the command's work. Prints the median and p90 wall time over ``--runs``
runs of each, and the median CPU time (user + system of the child: less sensitive to other
load on the machine than the wall time). The target for
`provisioner plan --policy policies/spot-finetune.yaml` is a median of 0.3 s or less on the
project's two-core machine. The children run with bytecode caching on
(``PYTHONDONTWRITEBYTECODE`` is dropped from their environment), as an installed tool runs.

``--baseline DIR`` measures another checkout (a ``git worktree`` of an older commit) in the
same run, interleaved run by run, so that both see the same load: before and after in one run.
Both trees are then started the same way (``python -c``, the source tree first on the path,
the editable-install finder bypassed).

    .venv/bin/python benchmarks/cold_start.py [--runs 20] [--baseline /tmp/old-checkout]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
POLICY = str(REPO / "policies" / "spot-finetune.yaml")
COMMANDS = {"plan": ["plan", "--policy", POLICY], "--help": ["--help"]}
#: start the CLI from the source tree given as the first argument, not from the installed one
FROM_TREE = (
    "import sys; sys.meta_path = [f for f in sys.meta_path"
    " if 'editable' not in type(f).__module__]; sys.path.insert(0, sys.argv.pop(1));"
    " from provisioner.cli import main; main()"
)


def console_script() -> list[str]:
    """The installed ``provisioner`` script beside this interpreter, else ``python -m``."""
    script = Path(sys.executable).with_name("provisioner")
    return [str(script)] if script.exists() else [sys.executable, "-m", "provisioner"]


def run_once(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run; exits if the command fails."""
    env = dict(os.environ, NO_COLOR="1", COLUMNS="160")
    # Bytecode is written and read as on an installed machine (pip compiles a wheel's modules;
    # Python caches the rest on first import). With PYTHONDONTWRITEBYTECODE set, as some
    # sandboxes do, every run would compile the project's modules from source again.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr}")
    return wall, cpu


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def report(label: str, runs: list[tuple[float, float]]) -> None:
    wall = [w for w, _ in runs]
    cpu = [c for _, c in runs]
    print(
        f"{label:<28} median {statistics.median(wall):.3f} s  p90 {p90(wall):.3f} s"
        f"  cpu {statistics.median(cpu):.3f} s  ({len(runs)} cold runs)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--baseline", help="another checkout to measure in the same run")
    args = ap.parse_args()
    if args.baseline:
        trees = {
            "this tree": [sys.executable, "-c", FROM_TREE, str(REPO)],
            "baseline": [sys.executable, "-c", FROM_TREE, str(Path(args.baseline).resolve())],
        }
    else:
        trees = {"provisioner": console_script()}
    for head in trees.values():  # warm the OS file cache and compile the bytecode once
        run_once([*head, "--help"])
        run_once([*head, *COMMANDS["plan"]])
    for name, tail in COMMANDS.items():
        results: dict[str, list[tuple[float, float]]] = {t: [] for t in trees}
        for _ in range(args.runs):
            for tree, head in trees.items():
                results[tree].append(run_once([*head, *tail]))
        for tree, runs in results.items():
            report(f"{tree}: {name}" if len(trees) > 1 else f"provisioner {name}", runs)


if __name__ == "__main__":
    main()
