"""The control loop on gangs (issue 10), on the sim and a real store: all or nothing, the
shortfall remembered, the group sweep, the store's gang columns (migration 0004) and money
counted for every node."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from providers.base import ErrorKind
from providers.sim import SimProvider
from provisioner.api import submit
from provisioner.control.failpoints import Failpoints
from provisioner.control.groups import sweep_groups
from provisioner.control.inputs import gang_shortfalls
from provisioner.control.reconciler import PassReport, Reconciler, default_provider_factory
from provisioner.control.records import attempt_cost
from provisioner.control.store import Store
from provisioner.core.models import TAG_ATTEMPT, TAG_JOB, TAG_MANAGED, placement_group_name
from tests.pg import fresh_database
from tests.store_util import insert_legacy_job

T0 = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)


def gang_policy(path: Path, ckpt: Path, nodes: int = 2) -> Path:
    path.write_text(f"""
name: gang-ctl
job:
  command: ["{sys.executable}", "-c", "import time; time.sleep(60)"]  # the job: a minute of work
  compute_hours: 2
  reference_gpu: A10G
resources:
  min_vram_gb: 16
  nodes: {nodes}
  interconnect:
    inter_node: placement-group
market: spot
bid_cap:
  max_spot_price_per_gpu_hour: 3.0
residency:
  allow: [EEA]
checkpoint:
  uri: file://{ckpt}
  shared: true
restart:
  max_restarts: 10
""")
    return path


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[tuple[SimProvider, dict[str, object]]]:
    options: dict[str, object] = {
        "state_dir": str(tmp_path / "sim"),
        "mimic": {"eu-west-1a": "aws", "eu-west-1b": "aws"},
        "mtbp_hours": None,
        "idle_exit_s": 120,
    }
    prov = SimProvider(**options)  # type: ignore[arg-type]
    yield prov, options
    prov.shutdown_server(terminate_all=True)


def test_a_gang_short_of_a_node_is_torn_down_and_the_next_plan_says_why(
    tmp_path: Path, sim: tuple[SimProvider, dict[str, object]]
) -> None:
    prov, options = sim
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    _, job_id = submit(
        gang_policy(tmp_path / "g.yaml", tmp_path / "ck"),
        provider="sim",
        provider_defaults=False,
        provider_options=options,
        store=store,
    )
    # node 0 comes up, node 1 finds no capacity
    prov.inject_error(ErrorKind.CAPACITY, "InsufficientInstanceCapacity", skip=1)
    rec = Reconciler(
        store, job_ids=[job_id], provider_factory=default_provider_factory, pass_interval_s=0.5
    )
    try:
        rec.run_pass()
        attempts = store.attempts(job_id)
        first = attempts[0]
        assert first.state == "failed"
        assert first.end_reason.endswith("(1 of 2 nodes)"), first.end_reason
        assert first.nodes == 2
        events = store.events(job_id)
        [short] = [e for e in events if e.kind == "gang-incomplete"]
        assert "only 1 of 2 nodes" in short.message
        assert short.data["nodes_launched"] == 1
        # nothing of the first attempt is left running, and its group went with it
        first_nodes = prov.list({TAG_JOB: job_id, TAG_ATTEMPT: "1"})
        assert len(first_nodes) == 1 and not first_nodes[0].state.alive
        assert prov.list_placement_groups({TAG_JOB: job_id, TAG_ATTEMPT: "1"}) == []

        # the shortfall is fed to the plan: that zone's offer is rejected for gang capacity
        now = datetime.now(UTC)
        short_where = gang_shortfalls(attempts, now)
        assert short_where == frozenset(
            {((first.provider, first.zone, first.instance_type, first.market), 1)}
        )
        policy = rec.policy_of(store.job(job_id))  # type: ignore[arg-type]
        plan = rec.plan_for(store.job(job_id), policy, frozenset(), now, short_where)  # type: ignore[arg-type]
        assert plan.rejected.get("gang_capacity", 0) >= 1
        assert (first.zone, first.instance_type) not in {
            (p.offer.zone, p.offer.instance_type) for p in plan.placements
        }

        # the same pass went on to launch the whole gang elsewhere, in its own group
        live = [a for a in store.attempts(job_id) if a.state == "running"]
        assert len(live) == 1 and live[0].nodes == 2 and live[0].placement_group
        nodes = [i for i in prov.list({TAG_JOB: job_id}) if i.state.alive]
        assert sorted(i.node for i in nodes) == [0, 1]
        assert {i.attempt for i in nodes} == {live[0].attempt}
        for _ in range(3):  # more passes: never a second gang
            rec.run_pass()
            alive = [i for i in prov.list({TAG_JOB: job_id}) if i.state.alive]
            assert len(alive) == 2 and {i.attempt for i in alive} == {live[0].attempt}
    finally:
        rec.close()


def test_the_sweep_deletes_only_groups_whose_gang_is_gone(
    tmp_path: Path, sim: tuple[SimProvider, dict[str, object]]
) -> None:
    prov, _ = sim
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    job = store.submit(
        name="j", policy_yaml="name: j\n", policy_path=None, provider="sim",
        provider_options={}, now=T0, deadline=None, work_total_h=None,
    )  # fmt: skip
    region = "eu-west-1"

    def group(attempt: int, job_id: str = job.id) -> str:
        tags = {TAG_MANAGED: "true", TAG_JOB: job_id, TAG_ATTEMPT: str(attempt)}
        return prov.ensure_placement_group(
            placement_group_name(job_id, attempt), region, "eu-west-1a", tags
        )

    def add_attempt(attempt: int, state: str) -> None:
        with store.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO attempts (job_id, attempt, token, provider, region, zone, "
                    "instance_type, gpu, gpu_count, market, price_per_hour, state, reason, "
                    "created_at, end_reason, cost_usd, nodes) VALUES (:j, :a, :t, 'sim', "
                    "'eu-west-1', 'eu-west-1a', 'g5.xlarge', 'A10G', 1, 'spot', 1.0, :s, '', "
                    ":c, '', 0, 2)"
                ),
                {"j": job.id, "a": attempt, "t": f"tok{attempt}", "s": state, "c": T0},
            )

    ended, launching, running = group(1), group(2), group(3)
    stranger = group(1, job_id="unknown-job")
    add_attempt(1, "preempted")
    add_attempt(2, "launching")
    add_attempt(3, "running")
    report = PassReport()
    gone = sweep_groups(store, prov, [], T0, report, Failpoints())
    assert gone == 2  # the ended attempt's and the unknown job's
    left = {g.id for g in prov.list_placement_groups()}
    assert left == {launching, running}
    assert ended not in left and stranger not in left
    assert [e.kind for e in store.events(job.id)].count("group-deleted") == 1
    # again: nothing more to do, and no error
    assert sweep_groups(store, prov, [], T0, PassReport(), Failpoints()) == 0


# -- the store: migration 0004 and money x nodes ------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'g.db'}"
    else:
        with fresh_database() as u:
            yield u


def test_upgrade_from_0003_keeps_attempts_as_single_nodes(url: str) -> None:
    old = Store(url, migrate=False)
    old.migrate("0003")
    cols = {c["name"] for c in inspect(old.engine).get_columns("attempts")}
    assert "nodes" not in cols and "placement_group" not in cols
    with old.engine.begin() as conn:  # both rows written as 0003 had them
        jid = insert_legacy_job(conn, "old-0003", T0)
        conn.execute(
            text(
                "INSERT INTO attempts (job_id, attempt, token, provider, region, zone, "
                "instance_type, gpu, gpu_count, market, price_per_hour, state, reason, "
                "created_at, launched_at, ended_at, end_reason, cost_usd) VALUES (:j, 1, 'tok', "
                " 'aws', 'eu-west-1', 'eu-west-1a', 'g5.xlarge', 'A10G', 1, 'spot', 1.5, "
                "'ended', '', :t, :t, :e, 'finished', 1.5)"
            ),
            {"j": jid, "t": T0, "e": T0 + timedelta(hours=1)},
        )
    old.close()
    store = Store(url)  # upgrades to head
    (a,) = store.attempts(jid)
    assert a.nodes == 1 and a.placement_group is None
    assert attempt_cost(a, T0 + timedelta(hours=1)) == pytest.approx(1.5)
    store.update_attempt(jid, 1, nodes=4, placement_group="eu-west-1/prov-old-a1")
    (a,) = store.attempts(jid)
    assert (a.nodes, a.placement_group) == (4, "eu-west-1/prov-old-a1")
    # a gang of 4 is billed four times one node's hour
    assert attempt_cost(a, T0 + timedelta(hours=1)) == pytest.approx(6.0)
    store.close()
