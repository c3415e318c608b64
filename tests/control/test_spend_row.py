"""A running job's spend on its row, on the daemon's beat: written when it first moves, then
at most once per ``SPEND_ROW_EVERY`` (at 10,000 jobs a write per job per pass was most of the
pass's store time); with ``up``'s beat (progress read every pass) on every pass that moved it.
The bill is the attempts' either way. Through the reconciler on moto's EC2 server."""

from __future__ import annotations

import itertools
import math
from datetime import timedelta

import pytest

pytest.importorskip("moto")

from provisioner.control.jobpass.settle import SPEND_ROW_EVERY
from tests.control.test_daemon_regressions import aws_world, policy

JOB = "{command: ['true'], compute_hours: 5, reference_gpu: A10G}"


@pytest.mark.parametrize("beat", ["daemon", "up"])
def test_the_spend_column_follows_the_beat(beat: str) -> None:
    with aws_world() as w:
        job_id = w.job(policy(job=JOB, bid_cap="{max_spot_price_per_hour: 0.5}"))
        every = timedelta(seconds=10) if beat == "daemon" else timedelta(0)
        rec = w.reconciler(progress_every=every, decide_every=timedelta(seconds=120))
        rec.run_pass()  # launches (spot at $0.30/h)
        [attempt] = w.store.attempts(job_id)
        assert attempt.launched_at is not None

        def row_spend() -> float:
            job = w.store.job(job_id)
            assert job is not None
            return job.spent_usd

        seen = []
        for _ in range(40):  # ten minutes of 15 s passes: $0.30/h moves the row $0.00125 each
            w.later(seconds=15)
            rec.run_pass()
            seen.append(row_spend())
        changes = sum(1 for a, b in itertools.pairwise(seen) if b != a)
        if beat == "daemon":
            # past AWS's 60 s minimum the spend moves every pass; the row follows once per 30 s
            assert 2 <= changes <= 600 // SPEND_ROW_EVERY.total_seconds() + 1, seen
        else:
            assert changes >= 34, seen  # every pass past the 60 s minimum
        # whatever the beat, the row never claims more than is billed to now (60 s minimum)
        run_s = (w.clock["now"] - attempt.launched_at).total_seconds()
        assert 0.0 < seen[-1] <= 0.3 * max(math.ceil(run_s), 60) / 3600.0 + 1e-9
        rec.close()
