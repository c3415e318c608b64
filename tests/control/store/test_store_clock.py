"""Every time the store writes comes from its caller's clock (issue 39, defect 10).

A test that fixed a date and let the store stamp rows with the real clock failed from that
date on. Two guards:

* the store's modules (and the pass's records) never read the real clock: checked on their
  source, so that a new ``datetime.now()`` there fails here before it fails on some date;
* the store's paths (a submission, events with their outbox rows, the claim and delivery of
  notifications, a job's update, ``down``, the ledger) run with the caller's clock set years
  away from today, in the past and in the future: every stamp they write is that clock's.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from provisioner.control import ledger
from provisioner.control.cancel import cancel_job
from provisioner.control.notify.outbox import Deliverer, Delivery
from provisioner.control.notify.targets import TargetBook
from provisioner.control.store import AttemptRow, Notice, Store
from tests.clock_shift import ENV

REPO = Path(__file__).resolve().parents[2].parent
#: modules that write the store and must take every time from their caller
NO_CLOCK = [
    *sorted((REPO / "provisioner/control/store").glob("*.py")),
    REPO / "provisioner/control/records.py",
]
CLOCK_CALLS = {"now", "utcnow", "today", "time", "time_ns", "monotonic"}
#: far from any day these tests run on: a row stamped with the real clock cannot pass for it
DATES = [datetime(2019, 3, 1, 8, 30, tzinfo=UTC), datetime(2030, 6, 1, 23, 45, tzinfo=UTC)]


def _clock_reads(path: Path) -> list[str]:
    """``datetime.now()``, ``date.today()``, ``time.time()`` and the like, by line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
        if node.func.attr in CLOCK_CALLS and name in ("datetime", "date", "time"):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}.{node.func.attr}()")
    return found


def test_the_store_never_reads_the_real_clock() -> None:
    reads = [r for p in NO_CLOCK for r in _clock_reads(p)]
    assert reads == [], "take the time from the caller (a `now`/`at` argument):\n" + "\n".join(
        reads
    )


def test_the_guard_sees_a_clock_read(tmp_path: Path) -> None:
    probe = REPO / "provisioner/control/store" / "_probe_for_the_guard.py"
    try:
        probe.write_text("from datetime import UTC, datetime\nx = datetime.now(UTC)\n")
        assert _clock_reads(probe) == [
            "provisioner/control/store/_probe_for_the_guard.py:2: datetime.now()"
        ]
    finally:
        probe.unlink()


@pytest.fixture(params=DATES, ids=lambda d: str(d.year))
def at(request: pytest.FixtureRequest) -> datetime:
    return request.param


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 's.db'}")
    yield s
    s.close()


def _submit(store: Store, at: datetime) -> str:
    return store.submit(
        name="train", policy_yaml="name: x\n", policy_path=None, provider="sim",
        provider_options={}, now=at, deadline=None, work_total_h=None,
    ).id  # fmt: skip


def test_events_and_their_outbox_rows_carry_the_callers_time(store: Store, at: datetime) -> None:
    jid = _submit(store, at)
    store.add_event(jid, "preempted", "p", at=at, notify=Notice("preempted", ("a",), "t", "b"))
    assert [e.at for e in store.events(jid)] == [at, at]  # submitted, preempted
    [row] = store.notifications(jid)
    assert row.created_at == at and row.next_try_at == at
    # due at once on the caller's clock, and not a moment before
    lease = timedelta(seconds=30)
    assert store.claim_notifications("r1", at - timedelta(seconds=1), lease) == []
    [[claimed]] = store.claim_notifications("r1", at, lease)
    assert claimed.id == row.id and claimed.claimed_until == at + lease
    store.mark_notifications_sent([row.id], at + timedelta(seconds=2))
    assert store.messages_sent_since(jid, "a", at) == 1
    assert store.messages_sent_since(jid, "a", at + timedelta(seconds=2)) == 0


def test_delivery_stamps_its_rows_and_events_with_its_clock(store: Store, at: datetime) -> None:
    jid = _submit(store, at)
    store.add_event(jid, "failed", "f", at=at, notify=Notice("failed", ("nobody",), "t", "b"))
    later = at + timedelta(minutes=3)
    d = Deliverer(store, TargetBook({}, {}, {}), "r1", Delivery(), clock=lambda: later)
    d.tick()
    [row] = store.notifications(jid)
    assert row.state == "failed"
    [told] = [e for e in store.events(jid) if e.kind == "notify-failed"]
    assert told.at == later
    # a row older than max_age on the deliverer's clock expires; not on the real clock's
    store.add_event(jid, "failed", "g", at=at, notify=Notice("failed", ("x",), "t", "b"))
    old = Deliverer(
        store, TargetBook({"x": "json://127.0.0.1:9/"}, {}, {}), "r1", Delivery(),
        clock=lambda: at + timedelta(days=2),
    )  # fmt: skip
    old.tick()
    assert store.notifications(jid)[-1].state == "expired"


def test_a_jobs_update_and_down_are_stamped_with_the_callers_time(
    store: Store, at: datetime
) -> None:
    jid = _submit(store, at)
    store.update_job(jid, at=at + timedelta(minutes=1), reason="x")
    job = store.job(jid)
    assert job is not None and job.updated_at == at + timedelta(minutes=1)
    store.add_attempt(
        AttemptRow(
            job_id=jid, attempt=1, token="t1", provider="aws", region="us-east-1",
            zone="us-east-1a", instance_type="g5.xlarge", gpu="A10G", gpu_count=1,
            market="spot", price_per_hour=1.0, bid_cap_per_hour=None, instance_id="i-1",
            state="running", reason="", created_at=at, launched_at=at,
        )
    )  # fmt: skip

    def unreachable(name: str, options: dict[str, Any]) -> Any:
        raise ModuleNotFoundError("No module named 'boto3'")

    down = at + timedelta(hours=2)
    cancel_job(store, jid, now=down, provider_factory=unreachable)
    job = store.job(jid)
    assert job is not None and job.state == "cancelled" and job.updated_at == down
    [a] = store.attempts(jid)
    assert a.ended_at == down and a.cost_usd == pytest.approx(2.0)
    assert store.events(jid)[-1].kind == "cancelled" and store.events(jid)[-1].at == down
    [rows] = ledger.store_ledgers(store, [jid], down).values()
    assert [r.attempt for r in rows] == [1] and rows[0].billed_usd == pytest.approx(2.0)


# -- the suite's fixed dates under a moved real clock ----------------------------------------

#: test files that fix dates and drive the store, notifications, the ledger and the pass: they
#: must pass whatever day it is (``tests/clock_shift.py`` moves this process's real clock)
FIXED_DATES = [
    "tests/control/store/test_store_clock.py",
    "tests/control/notify/test_notify.py",
    "tests/control/test_ledger.py",
    "tests/control/test_cost_report.py",
    "tests/cli/test_cli_measured.py",
    "tests/control/store/test_store.py",
    "tests/providers/test_real_account_answers.py",
    "tests/control/test_instance_rows.py",
    "tests/control/test_preemption_after_restart.py",
]


def test_the_shift_moves_the_clock_the_code_reads() -> None:
    import subprocess
    import sys

    code = (
        "from datetime import UTC, datetime; import time; "
        "from provisioner.control.cancel import utcnow; "
        "print(datetime.now(UTC).year, utcnow().year, time.gmtime(time.time()).tm_year)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), ENV: "-36500"}  # a century back
    done = subprocess.run(
        [sys.executable, "-c", "import tests.clock_shift; " + code],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    years = [int(y) for y in done.stdout.split()]
    assert len(set(years)) == 1 and years[0] < datetime.now(UTC).year - 90, done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("days", [1500, -2500], ids=["4-years-on", "7-years-back"])
def test_the_fixed_date_tests_pass_on_any_day(days: int) -> None:
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(REPO), ENV: str(days)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
           "tests.clock_shift", "-m", "not slow", "-x", *FIXED_DATES]  # fmt: skip
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
