"""Provider faults at a set rate: throttling, 5xx, capacity and quota errors.

A proxy stands between the daemon and the cloud API (the sim server; moto's EC2 server) and
answers a fixed share of the requests with one of those errors, in the cloud's own format (the
sim's JSON error document; EC2's XML with its HTTP status), from a seeded generator. Jobs
still finish, and retries stay bounded: every launch request on the wire belongs to an
attempt in the store, and no attempt sent more requests than the provider's retry policy
allows; listing stays within the retry policy's multiple of the passes that listed.

For the sim the proxy takes the server's place in its ``server.json`` (where adapters find
the server); the instances' metadata endpoints stay with the server itself, unfaulted.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from provisioner.control.store import FINAL_STATES, Store
from provisioner.core.models import TAG_MANAGED
from tests.daemon_util import (
    DaemonProc,
    FaultProxy,
    Watch,
    check_books,
    ec2_error,
    ec2_operation,
    sim_error,
    sim_operation,
    sim_options,
    submit,
    wait_for,
    write_config,
    write_policy,
)

pytestmark = pytest.mark.e2e

#: Faulted share of the launch requests, and of every other call.
LAUNCH_RATE, RATE = 0.3, 0.2
#: Seeds with which the first five launch requests meet a capacity and a quota error (each
#: operation's faults are a fixed sequence for a seed; see FaultProxy).
SIM_SEED, AWS_SEED = 37, 29
JOBS = 6
LAUNCH_FAULTS = ["throttled", "5xx", "capacity", "quota"]
CALL_FAULTS = ["throttled", "5xx"]


def metrics(log: Path) -> dict[str, float]:
    """The daemon's Prometheus counters (the port is in its JSON log)."""
    port = None
    for line in log.read_text().splitlines():
        if "metrics on" in line:
            port = int(re.search(r":(\d+)/metrics", json.loads(line)["msg"]).group(1))  # type: ignore[union-attr]
    assert port, "the daemon logs where its metrics are"
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def run_jobs(
    tmp_path: Path,
    provider: str,
    options: dict[str, Any],
    watch: Watch,
    *,
    steps: int,
    extra: str = "",
) -> tuple[Store, list[str], dict[str, float]]:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store(store_url)
    cfg = write_config(tmp_path / "daemon.yaml", store_url, metrics={"port": 0})
    policy = write_policy(
        tmp_path / "policy.yaml", ckpt=tmp_path / "ckpt", steps=steps, extra=extra
    )
    jobs = submit(store, policy, JOBS, provider, options)
    log = tmp_path / "daemon.log"
    d = DaemonProc(cfg, log).start()
    watch.start()
    try:
        assert d.ready(store), log.read_text()[-3000:]
        done = wait_for(
            lambda: all((j := store.job(x)) is not None and j.state in FINAL_STATES for x in jobs),
            timeout=240,
            every=0.5,
        )
        assert done, [(x, store.job(x).state) for x in jobs]  # type: ignore[union-attr]
        assert wait_for(lambda: not [i for i in watch.look() if i.state.alive], timeout=30)
        counters = metrics(log)
        assert d.stop() == 0
    finally:
        watch.stop()
        if d.alive():
            d.kill()
    watch.look()
    return store, jobs, counters


def check(
    store: Store,
    jobs: list[str],
    watch: Watch,
    proxy: FaultProxy,
    counters: dict[str, float],
    *,
    launch_op: str,
    list_op: str,
    retries: int,
) -> None:
    attempts = [a for j in jobs for a in store.attempts(j)]
    print(
        f"\nfaults: requests {dict(proxy.requests)}, injected {dict(proxy.injected)}, "
        f"attempts {len(attempts)} ({sum(a.state == 'failed' for a in attempts)} failed), "
        f"passes {counters.get('provisioner_reconcile_passes_total')}"
    )
    for jid in jobs:
        job = store.job(jid)
        assert job is not None and job.state == "succeeded", (
            jid,
            job and job.state,
            job and job.reason,
        )
    assert not watch.violations, watch.violations
    check_books(store, watch.instances.values(), jobs)
    injected = sum(proxy.injected.values())
    assert injected >= 10, "faults were injected"
    kinds = {k for (_op, k) in proxy.injected}
    assert {"throttled", "5xx"} <= kinds, kinds
    assert (launch_op, "capacity") in proxy.injected and (launch_op, "quota") in proxy.injected
    failed = [a.end_reason for a in attempts if a.state == "failed"]
    assert any(r.startswith("capacity") for r in failed) and any(
        r.startswith("quota") for r in failed
    ), failed
    # each quota refusal went into the quota cache (`provisioner quotas`, plan's `quota` reason)
    cached = [q for q in store.quotas() if " at launch: " in q.name]
    assert cached and all(q.remaining == 0 for q in cached), cached
    # retries stay bounded: each launch request belongs to an attempt, at most `retries` each
    launches = proxy.requests[launch_op]
    assert len(attempts) <= launches <= retries * len(attempts), (launches, len(attempts))
    # listing: no storm. Logical calls: one list per pass, and on AWS one describe per
    # interruption check (each pass, and the 1 s poll: passes run every 0.5 s) and per launch;
    # each is retried at most `retries` times
    passes = counters["provisioner_reconcile_passes_total"]
    bound = retries * (3 * passes + len(attempts) + 10)
    assert proxy.requests[list_op] <= bound, (proxy.requests, passes)


# -- the sim ------------------------------------------------------------------------------------


def test_jobs_finish_through_provider_faults_on_sim(tmp_path: Path) -> None:
    from providers.sim import SimProvider

    state = tmp_path / "sim"
    options = sim_options(state)
    sim = SimProvider(**options)  # type: ignore[arg-type]
    real = sim.url  # starts the server
    proxy = FaultProxy(
        real,
        sim_operation,
        sim_error,
        rate={
            "launch": LAUNCH_RATE,
            "list": RATE,
            "get": RATE,
            "terminate": RATE,
            "interruptions": RATE,
        },
        seed=SIM_SEED,
        faults={
            "launch": LAUNCH_FAULTS,
            "list": CALL_FAULTS,
            "get": CALL_FAULTS,
            "terminate": CALL_FAULTS,
            "interruptions": CALL_FAULTS,
        },
    )
    info = json.loads((state / "server.json").read_text())
    (state / "server.json").write_text(json.dumps({**info, "url": proxy.url}))
    watch = Watch(lambda: sim.list({TAG_MANAGED: "true"}))  # this adapter keeps the real URL
    try:
        store, jobs, counters = run_jobs(tmp_path, "sim", options, watch, steps=100)
        check(
            store,
            jobs,
            watch,
            proxy,
            counters,
            launch_op="launch",
            list_op="list",
            retries=sim.retry.attempts,
        )
    finally:
        proxy.close()
        (state / "server.json").write_text(json.dumps(info))
        sim.shutdown_server(terminate_all=True)


# -- AWS through moto ------------------------------------------------------------------------------


def test_jobs_finish_through_provider_faults_on_aws_moto(tmp_path: Path) -> None:
    pytest.importorskip("boto3")
    pytest.importorskip("moto")
    from providers.base import RetryPolicy
    from tests.control.test_daemon_chaos import AWS_POLICY_EXTRA, JobShim, aws_options, describe_all

    contract = Path(__file__).resolve().parents[1] / "contract"
    import sys

    if str(contract) not in sys.path:
        sys.path.insert(0, str(contract))
    from harness_aws import make_harness

    with make_harness() as harness:
        proxy = FaultProxy(
            harness.endpoint,
            ec2_operation,
            ec2_error,
            rate={
                "RunInstances": LAUNCH_RATE,
                "DescribeInstances": RATE,
                "TerminateInstances": RATE,
            },
            seed=AWS_SEED,
            faults={
                "RunInstances": LAUNCH_FAULTS,
                "DescribeInstances": CALL_FAULTS,
                "TerminateInstances": CALL_FAULTS,
            },
        )
        shim = JobShim(tmp_path / "ckpt")

        def look() -> list[Any]:
            found = describe_all(harness)
            shim(found)
            return found

        watch = Watch(look)
        try:
            store, jobs, counters = run_jobs(
                tmp_path,
                "aws",
                aws_options(harness, endpoint=proxy.url),
                watch,
                steps=10,
                extra=AWS_POLICY_EXTRA,
            )
            check(
                store,
                jobs,
                watch,
                proxy,
                counters,
                launch_op="RunInstances",
                list_op="DescribeInstances",
                retries=RetryPolicy().attempts,
            )
        finally:
            proxy.close()
