"""Several daemon replicas on one PostgreSQL database.

Three real ``provisioner daemon`` processes share a fresh database on the machine's
PostgreSQL server (127.0.0.1:5432; skipped without it) and the sim cloud, with the daemon's
default timings (a pass every 5 s, 8 s leases). The jobs spread over the replicas; one
replica is SIGKILLed; the others take its jobs over within 15 s (the issue's bound, which the
default lease and interval keep) and adopt their running instances: no job is launched again,
none ever has two live instances, and every job finishes with the right result.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from provisioner.control.store import FINAL_STATES, Store
from provisioner.core.models import TAG_MANAGED
from tests.daemon_util import (
    DaemonProc,
    Watch,
    check_books,
    sim_options,
    submit,
    wait_for,
    write_config,
    write_policy,
)
from tests.pg import fresh_database

pytestmark = [pytest.mark.postgres, pytest.mark.e2e, pytest.mark.slow]

JOBS = 6
STEPS = 900  # 45 s of work: the jobs outlive the takeover
TAKEOVER_S = 15.0


def owners(store: Store, job_ids: list[str]) -> dict[str, str | None]:
    return {j: (r.owner if (r := store.job(j)) else None) for j in job_ids}


def test_a_killed_replica_s_jobs_are_taken_over(tmp_path: Path) -> None:
    from providers.sim import SimProvider
    from tests.e2e_util import reference_result

    options = sim_options(tmp_path / "sim")
    sim = SimProvider(**options)  # type: ignore[arg-type]
    watch = Watch(lambda: sim.list({TAG_MANAGED: "true"}))
    daemons: list[DaemonProc] = []
    with fresh_database() as url:
        store = Store(url)
        try:
            policy = write_policy(tmp_path / "policy.yaml", ckpt=tmp_path / "ckpt", steps=STEPS)
            jobs = submit(store, policy, JOBS, "sim", options)
            # the daemon's own timings: reconcile every 5 s, 8 s leases
            cfg = write_config(
                tmp_path / "daemon.yaml",
                url,
                reconcile_interval="5s",
                lease="8s",
                interruption_poll_interval="5s",
                progress_interval="10s",
                decide_interval="60s",
            )
            watch.start()
            for n in range(3):
                daemons.append(DaemonProc(cfg, tmp_path / f"daemon-{n}.log").start())
            for d in daemons:
                assert d.ready(store), d.log.read_text()[-3000:]

            def spread() -> bool:  # every replica holds some of the jobs
                held = owners(store, jobs).values()
                return all(any((o or "").endswith(d.owner_suffix) for o in held) for d in daemons)

            def all_running() -> bool:
                return all((r := store.job(j)) is not None and r.state == "running" for j in jobs)

            assert wait_for(lambda: all_running() and spread(), timeout=60, every=0.5), (
                owners(store, jobs),
                [(j, r.state if (r := store.job(j)) else None) for j in jobs],
            )
            held = owners(store, jobs)
            share = Counter((o or "").rsplit(":", 1)[-1] for o in held.values())
            assert len(share) == 3 and max(share.values()) <= 3, share  # the work is shared

            victim = daemons[0]
            theirs = [j for j, o in held.items() if (o or "").endswith(victim.owner_suffix)]
            attempts_before = {j: len(store.attempts(j)) for j in jobs}
            t_kill = time.monotonic()
            victim.kill()

            def taken_over() -> bool:
                now = owners(store, theirs)
                return all(o and not o.endswith(victim.owner_suffix) for o in now.values())

            assert wait_for(taken_over, timeout=40, every=0.1), owners(store, theirs)
            took = time.monotonic() - t_kill
            print(
                f"\nreplicas: {len(theirs)} job(s) of the killed replica taken over in {took:.1f} s"
            )
            assert took <= TAKEOVER_S, f"takeover took {took:.1f} s"

            done = wait_for(
                lambda: all(
                    (r := store.job(j)) is not None and r.state in FINAL_STATES for j in jobs
                ),
                timeout=180,
                every=0.5,
            )
            assert done, [(j, r.state if (r := store.job(j)) else None) for j in jobs]
            assert wait_for(lambda: not [i for i in watch.look() if i.state.alive], timeout=30)
            for d in daemons[1:]:
                assert d.stop() == 0
            watch.stop()
            watch.look()
            # nobody ran a job twice: the survivors adopted the instances, launched nothing new
            assert not watch.violations, watch.violations
            assert {j: len(store.attempts(j)) for j in jobs} == attempts_before
            check_books(store, watch.instances.values(), jobs)
            ref = reference_result(STEPS)
            for j in jobs:
                row = store.job(j)
                assert row is not None and row.state == "succeeded", (j, row and row.reason)
                assert row.result.get("params_sha256") == ref["params_sha256"]
            kinds = Counter(e.kind for e in store.events())
            assert kinds["launch"] == JOBS, kinds
        finally:
            watch.stop()
            for d in daemons:
                if d.alive():
                    d.kill()
            watch.look()
            sim.shutdown_server(terminate_all=True)
            store.close()
