"""The plan/daemon invariant on stored jobs (provisioner.control.plancheck): the plan a user
would see now against the daemon's launch rule, on the built-in catalog."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from policies import parse_policy
from provisioner.catalog_files import builtin_catalog
from provisioner.control.plancheck import disagreements
from provisioner.control.store import Store
from provisioner.core.admission import SHARED_RULES, Standing
from provisioner.core.catalog import Catalog
from provisioner.core.planner import PlanContext, plan_offers

T0 = datetime(2031, 5, 4, 10, 0, tzinfo=UTC)  # any date: the caller's clock

POLICY = """name: tiny
job:
  compute_hours: {hours}
resources:
  gpu_count: 1
market: spot
budget:
  max_total: {total}
  on_exhausted: stop
"""


def _catalog() -> Catalog:
    return Catalog.from_offers(builtin_catalog().filter(provider="aws"), "aws")


def _job(tmp_path: Path, hours: float, total: float, spent: float) -> tuple[Store, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    text = POLICY.format(hours=hours, total=total)
    row = store.submit(
        name="tiny",
        policy_yaml=text,
        policy_path=None,
        provider="aws",
        provider_options={},
        now=T0,
        deadline=None,
        work_total_h=hours,
    )
    store.update_job(row.id, at=T0, spent_usd=spent)
    return store, row.id


def test_a_stored_job_s_plan_and_the_daemon_agree_whatever_its_spend(tmp_path: Path) -> None:
    cat = _catalog()
    for i, (hours, total, spent) in enumerate(
        [(2.0, 50.0, 0.0), (0.001, 0.003, 0.0), (1.0, 5.0, 4.99), (0.5, 20.0, 19.0)]
    ):
        store, jid = _job(tmp_path / str(i), hours, total, spent)
        job = store.job(jid)
        assert job is not None
        policy = parse_policy(job.policy_yaml)
        assert disagreements(job, policy, store.attempts(jid), cat, T0 + timedelta(minutes=5)) == []
        # and the check is not vacuous: plan judged rows by the rules it shares with the daemon
        rows = plan_offers(
            policy, cat, PlanContext(now=T0, standing=Standing()), top=None, with_rows=True
        ).rows
        assert [r for r in rows if r.reason is None or r.reason in SHARED_RULES]


def test_a_finished_job_has_nothing_to_disagree_about(tmp_path: Path) -> None:
    store, jid = _job(tmp_path, 2.0, 50.0, 0.0)
    store.update_job(jid, at=T0, state="succeeded")
    job = store.job(jid)
    assert job is not None
    assert disagreements(job, parse_policy(job.policy_yaml), [], _catalog(), T0) == []
