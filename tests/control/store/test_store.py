from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import inspect

from provisioner.control.store import InstanceRow, Store, engine, heartbeat, live_replicas
from provisioner.control.store.schema import Base
from tests.daemon_util import wait_for
from tests.pg import fresh_database

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        s = Store(f"sqlite:///{tmp_path / 'p.db'}")
        yield s
        s.close()
    else:
        with fresh_database() as url:
            s = Store(url)
            yield s
            s.close()


def submit(store: Store, name: str = "job") -> str:
    return store.submit(
        name=name,
        policy_yaml="name: x\n",
        policy_path=None,
        provider="sim",
        provider_options={},
        now=NOW,
        deadline=None,
        work_total_h=None,
    ).id


def test_migrations_create_the_orm_schema(store: Store) -> None:
    insp = inspect(store.engine)
    for table in Base.metadata.sorted_tables:
        cols = {c["name"] for c in insp.get_columns(table.name)}
        assert cols == {c.name for c in table.columns}, table.name


def test_migrate_twice_is_harmless(store: Store) -> None:
    store.migrate()
    assert submit(store)


def test_schema_head_is_alembics_head() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(engine.__file__).parents[1] / "migrations"))
    assert ScriptDirectory.from_config(cfg).get_current_head() == engine.SCHEMA_HEAD


def _schema(url: str) -> list[tuple[str, str, str]]:
    con = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        rows = con.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite%'"
        ).fetchall()
        return sorted(rows) + [("version", v, "") for (v,) in con.execute(
            "SELECT version_num FROM alembic_version")]  # fmt: skip
    finally:
        con.close()


def test_a_new_sqlite_store_gets_exactly_the_schema_alembic_makes(tmp_path: Path) -> None:
    """The second new SQLite store of a process copies the schema the first one's migrations
    made; it is the same, statement for statement, as Alembic's on another new file, and it
    takes new rows and later migrations alike."""
    Store(f"sqlite:///{tmp_path / 'first.db'}").close()  # keeps the schema, if none was yet
    by_alembic = f"sqlite:///{tmp_path / 'alembic.db'}"
    st = Store(by_alembic, migrate=False)
    with st.engine.begin() as conn:
        Store._alembic_upgrade(conn, "head")
    st.close()
    copied = f"sqlite:///{tmp_path / 'copied.db'}"
    st = Store(copied)
    assert st.schema_revision() == engine.SCHEMA_HEAD
    assert submit(st)
    st.migrate()
    st.close()
    assert _schema(copied) == _schema(by_alembic)
    assert ("version", engine.SCHEMA_HEAD, "") in _schema(copied)


def test_a_store_at_head_opens_without_loading_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    st = Store(url)
    submit(st)
    st.close()
    code = (
        "import sys; from provisioner.control.store import Store;"
        f"s = Store({url!r}); assert len(s.jobs()) == 1;"
        "print('alembic' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "False", out.stderr


def test_a_store_at_an_older_revision_is_upgraded_to_head(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    st = Store(url, migrate=False)
    st.migrate("0011_price_changed")
    assert st.schema_revision() == "0011_price_changed"
    st.close()
    st = Store(url)
    assert st.schema_revision() == engine.SCHEMA_HEAD
    assert submit(st)
    st.close()


def test_submit_find_by_prefix_and_name(store: Store) -> None:
    jid = submit(store, "llama")
    assert store.job(jid).state == "pending"  # type: ignore[union-attr]
    assert store.job(jid[:8]).id == jid  # type: ignore[union-attr]
    assert store.job("llama").id == jid  # type: ignore[union-attr]
    assert store.job("nope") is None
    assert [e.kind for e in store.events(jid)] == ["submitted"]


def test_datetimes_come_back_aware(store: Store) -> None:
    jid = submit(store)
    assert store.job(jid).submitted_at == NOW  # type: ignore[union-attr]


def test_leases_one_owner_until_expiry(store: Store) -> None:
    ids = {submit(store, f"j{i}") for i in range(5)}
    assert set(store.claim_jobs("a", NOW, timedelta(seconds=10))) == ids
    assert store.claim_jobs("b", NOW + timedelta(seconds=5), timedelta(seconds=10)) == []
    assert (
        set(store.claim_jobs("a", NOW + timedelta(seconds=5), timedelta(seconds=10))) == ids
    )  # renew
    assert (
        set(store.claim_jobs("b", NOW + timedelta(seconds=16), timedelta(seconds=10))) == ids
    )  # expired
    store.release_jobs("b")
    assert set(store.claim_jobs("c", NOW + timedelta(seconds=16), timedelta(seconds=10))) == ids


def test_concurrent_claims_never_share_a_job(store: Store) -> None:
    if not store.is_postgres:
        pytest.skip("several replicas need PostgreSQL")
    for i in range(40):
        submit(store, f"j{i}")
    results: dict[str, list[str]] = {}

    def claim(owner: str) -> None:
        s = Store(store.url, migrate=False)
        results[owner] = s.claim_jobs(owner, NOW, timedelta(seconds=30), limit=15)
        s.close()

    threads = [threading.Thread(target=claim, args=(f"r{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claimed = [j for ids in results.values() for j in ids]
    assert len(claimed) == len(set(claimed)), "a job was claimed twice"
    assert len(claimed) == 40  # 4 x limit 15 >= 40: all claimed, none twice


def test_cooldowns_expire(store: Store) -> None:
    jid = submit(store)
    store.cool_down(jid, "aws", "eu-west-1a", NOW + timedelta(minutes=30), "preempted")
    assert store.cooldowns(jid, NOW) == {("aws", "eu-west-1a"): NOW + timedelta(minutes=30)}
    assert store.cooldowns(jid, NOW + timedelta(hours=1)) == {}


def test_replica_heartbeats(store: Store) -> None:
    heartbeat(store, "r1", NOW)
    assert live_replicas(store, NOW + timedelta(seconds=10)) == ["r1"]
    assert live_replicas(store, NOW + timedelta(minutes=5)) == []


def test_events_never_carry_a_registered_secret(store: Store) -> None:
    from providers.base import register_secret

    register_secret("AKIASECRETVALUE123")
    jid = submit(store)
    store.add_event(jid, "x", "failed with key AKIASECRETVALUE123 in message", at=NOW)
    assert "AKIASECRETVALUE123" not in store.events(jid)[-1].message


def _instance_row(i: int, state: str, seen: datetime) -> InstanceRow:
    return InstanceRow(
        provider="sim",
        instance_id=f"i-{i:05d}",
        job_id=f"job-{i}",
        attempt=1,
        region="sim-eu-1",
        zone="sim-eu-1a",
        instance_type="g5.xlarge",
        market="spot",
        state=state,
        raw_state=state,
        state_reason="",
        price_per_hour=0.5 + i / 10_000,
        launched_at=NOW,
        ended_at=None,
        last_seen_at=seen,
    )


def test_upsert_instances_inserts_then_updates_in_place_across_chunks(store: Store) -> None:
    """2,500 rows: three chunks of the one compiled upsert. A second upsert of the same keys
    updates every column but the keys and adds no row."""
    store.upsert_instances([_instance_row(i, "running", NOW) for i in range(2500)])
    first = {r.instance_id: r for r in store.instances()}
    assert len(first) == 2500
    assert first["i-01234"].state == "running" and first["i-01234"].job_id == "job-1234"
    later = NOW + timedelta(minutes=5)
    changed = [_instance_row(i, "preempted", later) for i in range(0, 2500, 2)]
    store.upsert_instances(changed)
    after = {r.instance_id: r for r in store.instances()}
    assert len(after) == 2500
    assert {r.state for k, r in after.items() if int(k[2:]) % 2 == 0} == {"preempted"}
    assert {r.state for k, r in after.items() if int(k[2:]) % 2 == 1} == {"running"}
    assert after["i-00002"].last_seen_at == later and after["i-00003"].last_seen_at == NOW
    assert after["i-02498"].price_per_hour == pytest.approx(0.5 + 2498 / 10_000)
    store.upsert_instances([])  # nothing to write is no statement, not an error
    assert len(store.instances()) == 2500


_OPEN_AT_ONCE = """
import sys, time
from pathlib import Path
from provisioner.control.store import Store
go = Path(sys.argv[2])
Path(sys.argv[3]).touch()
while not go.exists():
    time.sleep(0.005)
Store(sys.argv[1]).close()
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_processes_opening_a_new_store_together_all_get_it(backend: str, tmp_path: Path) -> None:
    """`up` and the daemon (or two CLI calls) opening a store that does not exist yet: every
    one of them gets the schema (SQLite used to let two create the tables and one fail)."""
    import subprocess
    import sys
    from contextlib import ExitStack

    with ExitStack() as stack:
        if backend == "sqlite":
            url = f"sqlite:///{tmp_path / 'new.db'}"
        else:
            url = stack.enter_context(fresh_database())
        go = tmp_path / "go"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _OPEN_AT_ONCE, url, str(go), str(tmp_path / f"up{i}")],
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(4)
        ]
        # every one imported and waiting, then all at once
        assert wait_for(lambda: all((tmp_path / f"up{i}").exists() for i in range(4)), 60)
        go.touch()
        errors = [p.communicate(timeout=60)[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
        store = Store(url, migrate=False)
        tables = set(inspect(store.engine).get_table_names())
        assert {t.name for t in Base.metadata.sorted_tables} <= tables
        store.close()
