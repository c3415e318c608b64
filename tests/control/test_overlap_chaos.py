"""kill -9 of the daemon inside a pass, while an old and a new instance overlap (a switch made
before break: on-demand to spot, the equivalence scenario ``accepted-look``).

The harness of tests/e2e/test_equivalence.py runs the daemon's reconciler on the sim provider (a
real server process following the trace on a virtual clock, a real SQLite store); here, before
the pass of a given step, a separate daemon process (:mod:`tests.overlap_pass`) runs that pass
and dies at a failpoint (exit 137, nothing flushed, as SIGKILL leaves it); a new process then
runs the pass again from the store and the cloud. The points: in the pass that launches the
new instance (the intent written; the launch sent, nothing recorded, and the recovery killed
as it adopts it; the launch recorded, the job not yet), and in the pass that hands over (the
old instance's terminate sent, not recorded). Asserted: never a third instance (nor after a
kill), never an orphan (every instance the cloud ran is an attempt in the store, none left
running), the old instance stopped at the handover once the new one runs, and the same steps,
outcome and cost as the run without a kill (and as the simulator's).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.e2e.test_equivalence import CASES, STEP_S
from tests.equivalence_util import changeover_h, explain, run_daemon, run_engine

pytestmark = [pytest.mark.e2e]

LOOK = CASES["accepted-look"]  # on-demand first; then the look at spot in A, accepted


def _steps() -> tuple[int, int]:
    """The step of the accepted look (the spot launch) and of the handover, as the engine
    takes them (the strategy's rules decide when; the kills follow them)."""
    spot_at = next(
        e.step for e in run_engine(LOOK).effects if (e.kind, e.market) == ("launch", "spot")
    )
    return spot_at, spot_at + round(changeover_h() * 3600 / STEP_S)


def kills(name: str) -> tuple[tuple[int, str], ...]:
    spot_at, handover = _steps()
    return {
        "launch-intent-written": ((spot_at, "after-attempt-row"),),
        "launch-sent-unrecorded-then-adopting": (
            (spot_at, "after-launch-call"),
            (spot_at, "after-adopt"),
        ),
        "launch-recorded": ((spot_at, "after-instance-record"),),
        "old-terminate-sent-unrecorded": ((handover, "after-terminate"),),
        "every-point-in-one-run": (
            (spot_at, "after-instance-record"),
            (handover, "after-terminate"),
        ),
    }[name]


NAMES = [
    "launch-intent-written",
    "launch-sent-unrecorded-then-adopting",
    "launch-recorded",
    "old-terminate-sent-unrecorded",
    "every-point-in-one-run",
]


@pytest.mark.parametrize("name", NAMES)
def test_kill_9_mid_pass_during_the_overlap(name: str, tmp_path: Path) -> None:
    engine = run_engine(LOOK)
    calm = run_daemon(LOOK, tmp_path / "calm")
    spot_at, handover = _steps()
    run = run_daemon(replace(LOOK, name=name, kills=kills(name)), tmp_path / name)
    why = explain(engine, run)
    assert not run.notes, why  # every kill landed where it was aimed (exit 137 there)
    assert [(k, p) for k, p, _ in run.killed] == list(kills(name)), run.killed
    assert max(run.live) <= 2 and all(n <= 2 for _, _, n in run.killed), (run.live, run.killed)
    assert run.left == 0 and run.ran <= run.recorded, (run.ran, run.recorded)  # no orphan
    assert len(run.ran) == 2, run.ran  # the on-demand instance and the spot one: no third
    assert run.live[spot_at] == 2 and run.live[handover] == 1, run.live  # handed over
    assert all(n == 1 for n in run.live[handover:]), run.live  # the old one stays stopped
    assert run.effects == calm.effects == engine.effects, why
    assert run.outcome == calm.outcome == engine.outcome and run.outcome[0] == "succeeded", why
    assert run.cost == pytest.approx(calm.cost), why
