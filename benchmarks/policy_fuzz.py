"""Hostile policy documents through the loader: counts, the slowest, peak memory.

Draws documents from the strategies in ``tests/policy_docs.py`` (mutated valid policies,
wrong types, non-finite and huge numbers, unicode and control characters, deep nesting,
duplicate and merge keys, alias bombs, long strings up to just past 1 MB), runs each through
``parse_policy`` and prints how many were accepted, refused with a location
(``file:line:column``), or anything else (an unlocated ``PolicyError`` or another exception:
each is a bug, listed). Then times the 370-byte alias bomb from issue 9 (seven levels of ten
aliases) and its eight-level sibling, and measures the peak memory (tracemalloc) of the
largest and slowest documents.

    .venv/bin/python benchmarks/policy_fuzz.py [--documents 10000] [--seed 9]

Exits 1 when any document was answered with anything but a located PolicyError (or a
policy), so it can gate a release.
"""

from __future__ import annotations

import argparse
import collections
import resource
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.policy_docs import KINDS, classify  # noqa: E402


def alias_bomb(levels: int, width: int = 10) -> str:
    """The issue's shape: level 0 a list of ``width`` scalars, each level ``width`` aliases
    to the one before."""
    lines = ["a0: &a0 [" + ",".join(["x"] * width) + "]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def peak_of(text: str) -> tuple[float, int]:
    """(seconds, peak bytes allocated) for one document, under tracemalloc."""
    tracemalloc.start()
    t0 = time.perf_counter()
    classify(text)
    dt = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return dt, peak


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--documents", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=9)
    args = ap.parse_args()

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    counts: collections.Counter[str] = collections.Counter()
    by_kind: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    failures: list[tuple[str, str, str]] = []
    timings: list[tuple[float, str, int, str]] = []  # seconds, kind, bytes, first 80 chars
    largest: list[tuple[int, str]] = []
    started = time.perf_counter()
    shown = [0.0]

    @seed(args.seed)
    @settings(
        max_examples=args.documents,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        kind = data.draw(st.sampled_from(sorted(KINDS)))
        text = data.draw(KINDS[kind]())
        t0 = time.perf_counter()
        outcome, detail = classify(text)
        dt = time.perf_counter() - t0
        counts[outcome] += 1
        by_kind[kind][outcome] += 1
        size = len(text.encode("utf-8", "surrogatepass"))
        timings.append((dt, kind, size, text[:80]))
        largest.append((size, text))
        largest.sort(key=lambda x: -x[0])
        del largest[5:]
        if outcome in ("unlocated", "crashed"):
            failures.append((kind, detail, text[:200]))
        now = time.perf_counter()
        if now - shown[0] > 5:  # progress on a long run
            shown[0] = now
            print(f"  ... {sum(counts.values()):,} documents", file=sys.stderr, flush=True)

    run()
    wall = time.perf_counter() - started
    n = sum(counts.values())
    timings.sort(key=lambda x: -x[0])
    print(f"documents              {n:,} (seed {args.seed}; {wall:.1f} s in all, draws included)")
    print(f"accepted               {counts['accepted']:,}")
    print(f"refused with location  {counts['refused']:,}")
    print(
        f"anything else          {counts['unlocated'] + counts['crashed']:,}"
        f" (unlocated PolicyError {counts['unlocated']}, other exceptions {counts['crashed']})"
    )
    print(f"over 1 s               {sum(1 for t in timings if t[0] > 1.0)}")
    print("by kind (accepted / refused / else):")
    for kind in sorted(by_kind):
        c = by_kind[kind]
        print(
            f"  {kind:<13} {c['accepted']:>6} / {c['refused']:>6} / {c['unlocated'] + c['crashed']:>3}"
        )
    loader_s = sorted(t[0] for t in timings)
    if loader_s:
        print(
            f"loader time per document: median {loader_s[len(loader_s) // 2] * 1000:.2f} ms, "
            f"p99 {loader_s[int(len(loader_s) * 0.99)] * 1000:.1f} ms, max {loader_s[-1] * 1000:.1f} ms"
        )
    print("slowest:")
    for dt, kind, size, head in timings[:5]:
        print(f"  {dt * 1000:8.1f} ms  {kind:<13} {size:>9,} B  {head!r:.70}")
    worst_peak = (0, "")
    for _, text in largest:
        _, peak = peak_of(text)
        worst_peak = max(worst_peak, (peak, f"{len(text):,} chars"))
    print(
        f"peak memory: process max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB "
        f"(at start {rss0 / 1024:.0f} MB); the largest documents' peak allocation "
        f"{worst_peak[0] / 1e6:.1f} MB ({worst_peak[1]})"
    )
    for levels in (7, 8, 9):
        bomb = alias_bomb(levels)
        dt, peak = peak_of(bomb)
        outcome, detail = classify(bomb)
        print(
            f"alias bomb, {levels} levels of 10 ({len(bomb)} bytes): {outcome} in {dt * 1000:.2f} ms, "
            f"peak {peak / 1e3:.0f} kB: {detail}"
        )
    if failures:
        print(f"\n{len(failures)} failure(s):")
        for kind, detail, head in failures[:20]:
            print(f"  [{kind}] {detail}\n      document: {head!r}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
