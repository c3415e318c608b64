"""The seeded whole-system run over many seeds (docs/testing.md, "The seeded whole-system run").

    python benchmarks/seeded_run.py --seeds 1000 --workers 2     # the benchmark
    python benchmarks/seeded_run.py --seed 1234 -v               # replay one seed

Each seed draws a market, jobs and faults, runs the real reconciler(s) against the sim cloud
on a virtual clock and checks every invariant (provisioner.control.invariants) after every
pass (tests/seeded.py). Prints each seed's violations with the command that replays it, then
the totals: seeds, jobs, passes, violations by invariant, and the time. Exit 1 when any
seed broke an invariant.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _base() -> Path:
    shm = Path("/dev/shm")  # tmpfs: the stores' fsyncs cost nothing there
    root = shm if shm.is_dir() else Path(tempfile.gettempdir())
    return Path(tempfile.mkdtemp(prefix="seeded-", dir=root))


def one(
    seed: int, verbose: bool = False
) -> tuple[int, list[tuple[int, str, str, str]], int, int, float, str]:
    import shutil

    from tests.seeded import run_seed

    base = _base()
    try:
        r = run_seed(seed, base / str(seed), verbose=verbose)
    except Exception as exc:  # the harness itself failed: that seed's result, not the run's
        import traceback

        where = traceback.format_exc().strip().splitlines()[-3:]
        why = f"{type(exc).__name__}: {exc}"
        text = f"seed {seed}: the run itself failed: {why}\n  " + "\n  ".join(where)
        return seed, [(0, "harness", "-", why)], 0, 0, 0.0, text
    finally:
        shutil.rmtree(base, ignore_errors=True)
    found = [(k, v.invariant.value, v.job_id, v.message) for k, v in r.violations]
    text = r.report() + ("\n  outcomes: " + str(r.outcomes) if verbose else "")
    if verbose and r.notes:
        text += "\n  " + "\n  ".join(r.notes)
    return seed, found, r.jobs, r.passes, r.seconds, text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seed", type=int, help="run this one seed (a replay)")
    ap.add_argument("--seeds", type=int, default=1000, help="how many seeds (from --first)")
    ap.add_argument("--first", type=int, default=0, help="the first seed")
    ap.add_argument("--workers", type=int, default=2, help="processes (one per core)")
    ap.add_argument("-v", "--verbose", action="store_true", help="every seed's report, logs")
    args = ap.parse_args(argv)
    seeds = (
        [args.seed] if args.seed is not None else list(range(args.first, args.first + args.seeds))
    )
    t0 = time.perf_counter()
    by_invariant: Counter[str] = Counter()
    bad: dict[str, list[int]] = {}
    jobs = passes = 0
    results: Iterator[tuple[int, list[tuple[int, str, str, str]], int, int, float, str]]
    if len(seeds) == 1 or args.workers <= 1:
        results = (one(s, args.verbose) for s in seeds)
    else:
        pool = ProcessPoolExecutor(args.workers)
        results = pool.map(one, seeds, [args.verbose] * len(seeds), chunksize=1)
    for seed, found, n_jobs, n_passes, _secs, text in results:
        jobs += n_jobs
        passes += n_passes
        if found or args.verbose:
            print(text, flush=True)
        for _k, name, _job, _msg in found:
            by_invariant[name] += 1
            bad.setdefault(name, []).append(seed)
    took = time.perf_counter() - t0
    total = sum(by_invariant.values())
    print(
        f"\n{len(seeds)} seed(s), {jobs} jobs, {passes} passes, {total} violation(s) "
        f"in {len({s for v in bad.values() for s in v})} seed(s), {took:.0f} s"
    )
    for name, n in by_invariant.most_common():
        seeds_of = sorted(set(bad[name]))
        print(f"  {name}: {n} in {len(seeds_of)} seed(s), e.g. {seeds_of[:8]}")
    return 1 if total else 0


if __name__ == "__main__":
    raise SystemExit(main())
