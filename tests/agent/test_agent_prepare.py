"""The agent's steps before the job, run as a real subprocess: setup once per VM, its failures
(exit code, timeout, a secret that is not there) reported as `setup-failed` with the last lines
and a fingerprint that is the same on another VM, and the job's output shipped to the store in
chunks with its secrets scrubbed."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from provisioner.agent.logship import LogCursor, read_new
from provisioner.agent.runner import EXIT_SETUP_FAILED
from provisioner.agent.spec import AgentSpec
from provisioner.agent.store import CheckpointStore, read_progress
from tests.agent.test_agent import PY, run_agent, unreachable_url

SECRET = "s3cr3t-Zq9Wv2Lp7"


def _spec(tmp_path: Path, vm: str, **kw: object) -> AgentSpec:
    values: dict[str, object] = {
        "job_id": "j",
        "attempt": 1,
        "checkpoint_uri": f"file://{tmp_path}/store",
        "metadata_url": unreachable_url(),
        "workdir": str(tmp_path / vm),
        "cache_dir": str(tmp_path / "cache"),
        "command": [PY, "-c", "print('job ran')"],
        "probe": "off",
    }
    values.update(kw)
    return AgentSpec(**values)  # type: ignore[arg-type]


def _run(spec: AgentSpec, tmp_path: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    if env:
        os.environ.update(env)
    try:
        proc = run_agent(spec, tmp_path)
        out, _ = proc.communicate(timeout=60)
    finally:
        for key in env or {}:
            os.environ.pop(key, None)
    return proc.returncode, out


def test_setup_runs_once_per_vm(tmp_path: Path) -> None:
    count = tmp_path / "count"
    spec = _spec(tmp_path, "vm1", setup=[f"echo x >> {count}", "echo setting up"])
    code, out = _run(spec, tmp_path)
    assert code == 0 and "job ran" in out, out
    prog = read_progress(spec.checkpoint_uri, "j")
    assert prog is not None and prog["prepared"]["setup"]["how"] == "ran"
    code, out = _run(spec, tmp_path)  # the agent again on the same VM (a restart)
    assert code == 0
    prog = read_progress(spec.checkpoint_uri, "j")
    assert prog is not None and prog["prepared"]["setup"]["how"] == "skipped"
    assert count.read_text() == "x\n"
    _run(_spec(tmp_path, "vm2", setup=[f"echo x >> {count}"]), tmp_path)  # another VM
    assert count.read_text() == "x\nx\n"


def test_a_failing_setup_is_reported_with_its_last_lines_and_a_stable_fingerprint(
    tmp_path: Path,
) -> None:
    setup = ["echo fetching", "echo 'ERROR: no matching distribution' >&2; exit 3", "echo never"]
    prints: list[str] = []
    for vm in ("vm1", "vm2"):
        spec = _spec(tmp_path, vm, setup=setup, attempt=1 if vm == "vm1" else 2)
        code, out = _run(spec, tmp_path)
        assert code == EXIT_SETUP_FAILED and "job ran" not in out
        prog = read_progress(spec.checkpoint_uri, "j")
        assert prog is not None and prog["state"] == "setup-failed"
        err = prog["setup_error"]
        assert err["stage"] == "setup" and err["exit_code"] == 3
        assert err["command"] == "echo 'ERROR: no matching distribution' >&2; exit 3"
        assert "ERROR: no matching distribution" in err["tail"]
        assert "never" not in err["tail"]
        prints.append(err["fingerprint"])
    assert prints[0] == prints[1]  # the same failure on another VM: the same fingerprint
    store = CheckpointStore(f"file://{tmp_path}/store", "j")
    lines = [x.text for x in read_new(store, LogCursor())]
    assert "$ echo fetching" in lines and "fetching" in lines  # the setup's own log


def test_a_setup_over_its_time_is_stopped(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "vm1", setup=["sleep 30"], setup_timeout_s=1.0)
    code, _ = _run(spec, tmp_path)
    prog = read_progress(spec.checkpoint_uri, "j")
    assert code == EXIT_SETUP_FAILED and prog is not None
    assert "still running after 1 s" in prog["setup_error"]["message"]


def test_a_secret_that_is_not_there_fails_setup_and_one_that_is_never_shows(
    tmp_path: Path,
) -> None:
    pytest.importorskip("providers.secrets")
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text(f"TOKEN: {SECRET}\n")
    env = {"PROVISIONER_SIM_SECRETS": str(secrets)}
    missing = _spec(tmp_path, "vm1", secret_refs={"OTHER": "sim:OTHER"})
    code, _ = _run(missing, tmp_path, env)
    prog = read_progress(missing.checkpoint_uri, "j")
    assert code == EXIT_SETUP_FAILED and prog is not None
    assert prog["setup_error"]["stage"] == "secrets" and "OTHER" in prog["setup_error"]["message"]

    show = "import os; t = os.environ['TOKEN']; print('token', t); print('len', len(t))"
    spec = _spec(
        tmp_path, "vm2", attempt=2, secret_refs={"TOKEN": "sim:TOKEN"}, command=[PY, "-c", show]
    )
    code, out = _run(spec, tmp_path, env)
    assert code == 0, out
    assert "token ***" in out and f"len {len(SECRET)}" in out and SECRET not in out
    store = CheckpointStore(f"file://{tmp_path}/store", "j")
    shipped = [x.text for x in read_new(store, LogCursor(), attempt=2)]
    assert "token ***" in shipped
    for path in tmp_path.rglob("*"):
        if path.is_file() and path != secrets:
            assert SECRET.encode() not in path.read_bytes(), path


def test_the_job_s_output_goes_to_the_store_in_chunks(tmp_path: Path) -> None:
    many = "import sys\nfor i in range(3000):\n    print('line', i)\nprint('x' * 70000)\n"
    spec = _spec(tmp_path, "vm1", command=[PY, "-c", many])
    code, _ = _run(spec, tmp_path)
    assert code == 0
    store = CheckpointStore(f"file://{tmp_path}/store", "j")
    chunks = store.fs.ls(store.path("logs", "a1-n0"), detail=False)
    assert chunks and all("/job-" in str(c) for c in chunks)
    got = read_new(store, LogCursor())
    texts = [x.text for x in got]
    assert texts[:3] == ["line 0", "line 1", "line 2"] and "line 2999" in texts
    assert texts[-1].endswith("[line cut]") and len(texts[-1]) < 20000  # bounded lines
    assert all(x.at.endswith("Z") and x.attempt == 1 for x in got)
    local = json.dumps(sorted(p.name for p in (tmp_path / "vm1" / "logs" / "a1-n0").iterdir()))
    assert "job.log" in local  # and a copy on the VM


@pytest.mark.e2e
def test_a_notice_while_preparing_is_reported_and_recorded(tmp_path: Path) -> None:
    """A notice served while the agent is still preparing the job (a setup that takes long)
    is reported in the agent's record and its log, the controller writes the ``notice``
    event, and the agent stops preparing: the job never starts, the attempt ends
    ``interrupted`` long before the setup would have ended."""
    from providers.sim import SimProvider
    from provisioner.api import submit
    from provisioner.control.reconciler import Reconciler, cancel_job
    from provisioner.control.store import Store
    from tests.waiting import until, wait_for

    ck = f"file://{tmp_path / 'ck'}"
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "name: prep\njob:\n"
        f'  command: ["{PY}", "-c", "print(\'job ran\')"]\n'
        '  setup: ["echo preparing", "sleep 300"]\n'
        f"market: spot\ncheckpoint:\n  uri: {ck}\n"
    )
    options: dict[str, Any] = {
        "state_dir": str(tmp_path / "sim"),
        "mimic": "aws",  # whose API reports no notice: only the agent can
        "mtbp_hours": None,
        "idle_exit_s": 60,
    }
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    _, job_id = submit(
        policy, provider="sim", provider_defaults=False, provider_options=options, store=store
    )
    sim = SimProvider(**options)
    rec = Reconciler(store, job_ids=[job_id])
    try:

        def preparing() -> bool:
            rec.run_pass()
            prog = read_progress(ck, job_id) or {}
            return prog.get("state") == "preparing" and prog.get("attempt") == 1

        assert wait_for(preparing, timeout=60, every=0.3)
        (first,) = [a for a in store.attempts(job_id) if a.instance_id]
        iid = str(first.instance_id)
        sim.preempt(iid, notice_s=120)  # the setup would outlast it: sleep 300

        def noticed() -> bool:
            rec.run_pass()
            return store.has_event(job_id, "notice", iid)

        assert until(noticed, 30, every=0.3), [e.message for e in store.events(job_id)]
        assert wait_for(lambda: sim.sandbox(iid)["agent_exit"] is not None, timeout=30)
        assert sim.sandbox(iid)["agent_exit"] == 0  # it stopped preparing, as interrupted
        prog = read_progress(ck, job_id)
        assert prog is not None and prog["attempt"] == 1, prog
        assert prog["state"] == "interrupted" and prog["notice"] is not None, prog
        assert prog["notice"]["source"] == "metadata" and prog["exit_code"] == 0
        log = Path(sim.sandbox(iid)["sandbox"], "agent.log").read_text()
        assert "interruption notice" in log and "while preparing" in log, log
        assert "job ran" not in log
    finally:
        store.release_jobs(rec.owner)
        rec.close()
        cancel_job(store, job_id, now=datetime.now(UTC))
        sim.shutdown_server(terminate_all=True)
