"""The seeded whole-system run (tests/seeded.py, docs/testing.md): 20 seeds and the seeds
that once found a defect, every invariant after every pass. A failure names its seed and the
one command that replays it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.seeded import REPLAY, run_seed

pytestmark = pytest.mark.slow

#: the slow tier's 20, and each seed a longer run once failed on (kept: it fails on the code
#: before its fix): 63, 136, 143, 212, 228 killed a daemon between a preemption's event and
#: the attempt's end (the event was lost, its instance row left live, the restart untold);
#: 338 left the rows of instances gone after their notice live (and, once it drew a
#: share-of-on-demand cap, a gang's resend refused by the guard, its started node left running); 473, 515, 542, 632: a gang's
#: node taken while the cloud still listed it was ended with no event; 633: a gang's nodes
#: started by a launch sent again after a crash ran on after their attempt failed, unbilled;
#: 875, 951: a daemon killed between a replacement's record and its launch event left the
#: launch untold and the restart untold until the job ended; 75: a replacement whose zone's
#: price passed the cap during its handover was kept until the handover ended (and, once
#: stopped, the instance it was to replace, over the cap too, waited a pass to be moved).
#: Bid caps and price surges are drawn from a generator of their own, so the seeds older
#: than them draw the same market, jobs and faults as when they failed.
REGRESSIONS = (63, 75, 136, 143, 212, 228, 338, 473, 515, 542, 632, 633, 875, 951)
SEEDS = (*range(20), *REGRESSIONS)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_promise_holds_on_a_seeded_run(seed: int, tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    base = tmp_path
    if shm.is_dir():  # tmpfs: the stores' fsyncs cost nothing there
        import tempfile

        base = Path(tempfile.mkdtemp(prefix="seeded-", dir=shm))
    try:
        r = run_seed(seed, base / "run")
    finally:
        if base != tmp_path:
            import shutil

            shutil.rmtree(base, ignore_errors=True)
    assert r.jobs > 0 and r.passes > 0
    assert r.ok, f"{r.report()}\nreplay: {REPLAY.format(seed=seed)}"


def test_regression_seeds_replay_their_run() -> None:
    """A seed kept for the defect it found draws what it drew then: no held capacity."""
    from tests.seeded import REPLAYED, draw

    assert set(REGRESSIONS) <= REPLAYED
    assert all(not draw(s).reservations for s in REGRESSIONS)


def test_a_seed_draws_the_same_run() -> None:
    from tests.seeded import draw

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)
