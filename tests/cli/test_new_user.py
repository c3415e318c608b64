"""What a new user tripped on, one test per item: each fails on the tree before its fix."""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from provisioner.control.store import Store
from tests.daemon_util import DaemonProc, wait_for, write_config


def test_12_the_daemon_s_journal_holds_our_lines_not_the_libraries(tmp_path: Path) -> None:
    """A daemon's journal: alembic's migrations and APScheduler's every run stay out (below
    WARNING); our own lines go in."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    log = tmp_path / "daemon.log"
    d = DaemonProc(write_config(tmp_path / "d.yaml", url), log).start()
    try:
        store = Store(url)
        assert d.ready(store)
        # passes for 3 s (each an APScheduler job run, which it logs at INFO): the daemon's
        # heartbeat, written every pass, moves on by that much
        first = _last_seen(store)
        assert wait_for(lambda: (_last_seen(store) - first).total_seconds() >= 3, 60)
    finally:
        assert d.stop() == 0
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    theirs = [x for x in lines if x["logger"].split(".")[0] not in ("provisioner", "providers")]
    assert [x for x in theirs if x["level"] in ("debug", "info")] == []
    assert any(x["logger"].startswith("provisioner") for x in lines)  # ours still there


def _last_seen(store: Store) -> Any:
    from provisioner.control.store.schema import ReplicaRow

    with store.session() as s:
        return max(r.last_seen for r in s.query(ReplicaRow).all())


def test_12_libraries_can_be_let_through(monkeypatch: object) -> None:
    from provisioner.logs import LibraryFilter, setup_logging

    setup_logging(1)
    handler = next(h for h in logging.getLogger().handlers if getattr(h, "_provisioner", False))
    assert any(isinstance(f, LibraryFilter) for f in handler.filters)
    setup_logging(3)
    handler = next(h for h in logging.getLogger().handlers if getattr(h, "_provisioner", False))
    assert not any(isinstance(f, LibraryFilter) for f in handler.filters)
    setup_logging(0)


# -- item 4: progress in words ---------------------------------------------------------------


def _job_row(**kw: Any) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(**{"state": "running", "progress": {}, **kw})


def test_4_progress_reads_as_words_never_none() -> None:
    from provisioner.cli.jobs_cmd import progress_text

    assert progress_text(_job_row(progress={"step": 120, "total_steps": 400})) == (
        "step 120 of 400 (30%)"
    )
    assert progress_text(_job_row(progress={"step": 7})) == "step 7"
    assert progress_text(_job_row(state="succeeded", progress={"state": "done"})) == "done"
    assert progress_text(_job_row(progress={"state": "running"})) == "running, no step reported"
    assert progress_text(_job_row(state="failed", progress={"state": "failed"})) == "-"
    assert "None" not in progress_text(_job_row(progress={"step": None, "total_steps": None}))


# -- item 5: commands that said the wrong thing ----------------------------------------------


def _cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Any:
    import os
    import subprocess
    import sys

    from tests.e2e_util import REPO

    return subprocess.run(
        [sys.executable, "-m", "provisioner", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd or REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        check=False,
    )


def test_5_up_help_names_only_commands_that_exist() -> None:
    from provisioner.cli import COMMANDS

    out = _cli("up", "--help").stdout
    for word in ("wait",):
        assert f"provisioner {word}`" not in out or word in COMMANDS


def test_5_a_bad_store_url_is_named_as_given(tmp_path: Path) -> None:
    done = _cli("dashboard", "--store", "/tmp")
    assert done.returncode == 2 and "<store url>" not in done.stderr
    assert "/tmp" in done.stderr and "sqlite:///" in done.stderr


def test_5_read_only_commands_never_create_a_store(tmp_path: Path) -> None:
    typo = tmp_path / "typo.db"
    for args in (["jobs"], ["status"], ["logs", "x"], ["cost", "--all"], ["down", "x"]):
        done = _cli(*args, "--store", f"sqlite:///{typo}")
        assert done.returncode == 3, (args, done.stderr)
        assert "no store at" in done.stderr
        assert not typo.exists(), args


def test_5_down_on_an_ended_job_adds_nothing(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from provisioner.control.reconciler import cancel_job

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    job = store.submit(
        name="x", policy_yaml="name: x\n", policy_path=None, provider="sim",
        provider_options={}, now=datetime.now(UTC), deadline=None, work_total_h=None,
    )  # fmt: skip
    now = datetime.now(UTC)
    store.update_job(job.id, at=now, state="cancelled")
    store.add_event(job.id, "cancelled", "cancelled; terminated 0 instance(s)", at=now)
    assert cancel_job(store, job.id, now=now) == []
    assert [e.kind for e in store.events(job.id)].count("cancelled") == 1
    done = _cli("down", job.id, "--store", f"sqlite:///{tmp_path / 's.db'}")
    assert done.returncode == 0 and "already cancelled; nothing to stop" in done.stdout
    assert [e.kind for e in store.events(job.id)].count("cancelled") == 1


def test_5_down_ends_a_job_whose_provider_cannot_be_reached(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from provisioner.control.reconciler import cancel_job

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    job = store.submit(
        name="x", policy_yaml="name: x\n", policy_path=None, provider="aws",
        provider_options={}, now=datetime.now(UTC), deadline=None, work_total_h=None,
    )  # fmt: skip

    def no_sdk(name: str, options: dict[str, Any]) -> Any:
        raise ModuleNotFoundError("No module named 'boto3'")

    assert cancel_job(store, job.id, now=datetime.now(UTC), provider_factory=no_sdk) == []
    row = store.job(job.id)
    assert row is not None and row.state == "cancelled"
    ev = store.events(job.id)[-1]
    assert ev.kind == "cancelled"
    assert "could not be reached" in ev.message and "boto3" in ev.message


def test_5_a_backend_asked_for_by_name_that_is_not_installed_is_bad_input() -> None:
    done = _cli("probe", "--backend", "cupy", "--seconds", "0.1")
    assert done.returncode == 2 and "cupy is not installed" in done.stderr


# -- item 6: rich never eats user or package text --------------------------------------------


def test_6_brackets_in_output_survive(tmp_path: Path) -> None:
    done = _cli("providers")
    assert "provisioner[aws]" in done.stdout or "pip install" not in done.stdout
    policy = tmp_path / "p.yaml"
    policy.write_text("name: job\njob:\n  command: [python, x.py]\n")
    done = _cli("policy", "check", str(policy))
    assert done.returncode == 0 and f"{policy}: ok (job," in done.stdout


# -- item 1: the Python API is the CLI -------------------------------------------------------


def _launch_digest(store: Store, job_id: str) -> dict[str, Any]:
    """One supervising pass for the job: what its first launch recorded of the plan."""
    from provisioner.control.reconciler import Reconciler, cancel_job

    rec = Reconciler(store, job_ids=[job_id])
    try:
        rec.run_pass()
    finally:
        store.release_jobs(rec.owner)
        rec.close()
    cancel_job(store, job_id, now=rec.clock())
    launch = next(e for e in store.events(job_id) if e.kind == "launch")
    plan = dict((launch.data or {})["plan"])
    keep = ("candidates", "eligible", "top", "chosen")
    return {k: plan[k] for k in keep}


def test_1_api_and_cli_plan_the_same_candidates_and_placement(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """``provisioner.up()`` takes the road ``provisioner up`` takes: the sim's defaults (every
    cloud mimicked), so the same candidates and the same placement."""
    import provisioner
    from tests.e2e_util import REPO

    text = (REPO / "policies" / "spot-finetune.yaml").read_text()
    text = text.replace("workdir: ../examples", f"workdir: {REPO / 'examples'}")
    text = text.replace("file://./checkpoints", f"file://{tmp_path / 'ck'}")
    policy = tmp_path / "p.yaml"
    policy.write_text(text)
    url = f"sqlite:///{tmp_path / 's.db'}"
    monkeypatch.chdir(tmp_path)
    done = _cli("up", "--policy", str(policy), "--detach", "--json", "--store", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    by_cli = json.loads(done.stdout)["id"]
    job = provisioner.up(str(policy), provider="sim", store=url)
    store = job.store
    assert store.job(job.id).provider_options == store.job(by_cli).provider_options
    assert store.job(job.id).provider_options["mimic"] == "all"
    api_plan, cli_plan = _launch_digest(store, job.id), _launch_digest(store, by_cli)
    assert api_plan["candidates"] == cli_plan["candidates"] > 0
    assert api_plan["top"][0] == cli_plan["top"][0]
    assert api_plan["chosen"] == cli_plan["chosen"] is not None


def test_1_one_state_word_and_money_rounded(tmp_path: Path) -> None:
    """The job's state is ``succeeded`` everywhere (no "finished" beside it), and the API's
    money is rounded to the micro-dollar."""
    from datetime import UTC, datetime

    from provisioner.api import Job
    from provisioner.core import decide as d

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    row = store.submit(
        name="x", policy_yaml="name: x\n", policy_path=None, provider="sim",
        provider_options={}, now=datetime.now(UTC), deadline=None, work_total_h=None,
    )  # fmt: skip
    store.update_job(
        row.id, at=datetime.now(UTC), spent_usd=0.1 + 0.2 + 0.0033699999999999997 - 0.3
    )
    assert repr(Job(store, row.id).spent_usd) == "0.00337"
    from tests.core.test_decide import NOW, job

    (fin,) = [
        a
        for a in d.decide(job(agent=d.AgentReport(state="done")), d.Observations(), NOW)
        if isinstance(a, d.Finish)
    ]
    assert "finished" not in fin.reason  # the state word is "succeeded", the reason says why


def _api_policy(tmp_path: Path, gpu_count: int = 1) -> Path:
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "p.yaml"
    path.write_text(
        'name: x\njob:\n  command: ["true"]\n'
        f"resources:\n  gpus: [H100]\n  gpu_count: {gpu_count}\n"
        f"checkpoint:\n  uri: file://{tmp_path / 'ck'}\n"
    )
    return path


def test_1_the_api_refuses_what_up_refuses_before_writing_anything(tmp_path: Path) -> None:
    """An unknown provider, an option the provider does not take and a policy with nothing
    eligible: ``up`` exits 2, 2 and 3; ``provisioner.up()`` raises the same words, and neither
    leaves a job in the store."""
    import provisioner
    from provisioner.preflight import NothingEligible, Refused

    url = f"sqlite:///{tmp_path / 's.db'}"
    policy, nowhere = _api_policy(tmp_path), _api_policy(tmp_path / "n", gpu_count=3)
    cases: list[tuple[dict[str, Any], Path, int, str, list[str]]] = [
        ({"provider": "simm"}, policy, 2, "unknown provider", ["--provider", "simm"]),
        (
            {"provider": "sim", "provider_options": {"regoin": "x"}},
            policy,
            2,
            "-o regoin: not an option of the sim provider",
            ["-o", "regoin=x"],
        ),
        ({"provider": "sim"}, nowhere, 3, "nothing eligible", []),
    ]
    for kwargs, path, code, words, flags in cases:
        with pytest.raises(Refused) as caught:
            provisioner.up(str(path), store=url, **kwargs)
        assert words in str(caught.value) and caught.value.exit_code == code
        done = _cli("up", "--policy", str(path), "--store", url, *flags, cwd=tmp_path)
        assert done.returncode == code, (done.stdout, done.stderr)
        if code == 2:
            assert words in done.stderr and "Traceback" not in done.stderr
    with pytest.raises(NothingEligible) as none:
        provisioner.up(str(nowhere), store=url)
    assert none.value.plan.rejected and "provisioner plan --policy" in str(none.value)
    assert Store(url).jobs() == []


def test_1_a_job_s_success_is_told_as_succeeded_as_its_state_says() -> None:
    """The notification of a job that succeeded is the ``succeeded`` event (the state word);
    a policy that still lists ``finished`` gets it, and a store row written before the rename
    is told the same way."""
    from policies.notify import Notify
    from provisioner.control.notify.route import Router

    assert Notify(targets=["t"], events=["finished"]).events == ["succeeded"]
    router = Router.of(["t"])
    for kind in ("succeeded", "finished"):
        told = router.notice("j1", "train", None, kind, "job succeeded after 0 restart(s)")
        assert told is not None and told.event == "succeeded", kind
        assert told.title.endswith("(j1) succeeded")


# -- item 7: every shipped policy plans; policy check says when one can run nowhere -----------


def test_7_every_shipped_policy_plans_a_placement_on_the_builtin_catalog() -> None:
    import provisioner
    from tests.e2e_util import REPO

    shipped = sorted((REPO / "policies").glob("*.yaml"))
    assert len(shipped) >= 6
    for path in shipped:
        plan = provisioner.plan(str(path), top=1, estimate=False)
        assert plan.placements, (path.name, plan.rejected, plan.required_vram_gb)


def test_7_policy_check_says_when_a_policy_matches_no_offer(tmp_path: Path) -> None:
    nowhere = tmp_path / "nowhere.yaml"
    nowhere.write_text(
        'name: x\njob:\n  command: ["true"]\nresources:\n  gpus: [H100]\n  gpu_count: 3\n'
    )
    done = _cli("policy", "check", str(nowhere))
    assert done.returncode == 0, done.stderr  # valid: a refreshed catalog may hold an offer
    assert "can run nowhere" in done.stdout and ": ok" not in done.stdout
    assert "matches no offer of the built-in catalog" in done.stderr
    assert "gpu_count" in done.stderr and "provisioner plan --policy" in done.stderr
    as_json = json.loads(_cli("policy", "check", str(nowhere), "--json").stdout)
    assert as_json[0]["matches_catalog"] is False
    from tests.e2e_util import REPO

    ok = _cli("policy", "check", str(REPO / "policies" / "spot-finetune.yaml"))
    assert ": ok (" in ok.stdout and "matches no offer" not in ok.stderr


# -- item 3: each checkpoint told once, credited to the attempt that wrote it -----------------


def _ckpt_job(tmp_path: Path) -> tuple[Store, str, Any]:
    from provisioner.agent.store import CheckpointStore
    from provisioner.api import submit
    from tests.e2e_util import REPO

    text = (REPO / "policies" / "spot-finetune.yaml").read_text()
    text = text.replace("workdir: ../examples", f"workdir: {REPO / 'examples'}")
    text = text.replace("file://./checkpoints", f"file://{tmp_path / 'ck'}")
    policy = tmp_path / "p.yaml"
    policy.write_text(text)
    options = {"state_dir": str(tmp_path / "sim"), "mimic": "aws", "run_agent": False}
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    _, job_id = submit(
        policy, provider="sim", provider_options=options, provider_defaults=False, store=store
    )
    return store, job_id, CheckpointStore(f"file://{tmp_path / 'ck'}", job_id)


def _record(attempt: int, last: str, own: list[str], **kw: Any) -> dict[str, Any]:
    from provisioner.agent.store import step_of

    at = "2026-01-01T00:00:00.000Z"
    return {
        "attempt": attempt,
        "state": "running",
        "step": step_of(last),
        "total_steps": 600,
        "last_checkpoint": last,
        "last_checkpoint_step": step_of(last),
        "last_checkpoint_at": at,
        "checkpoints": [{"name": n, "step": step_of(n), "at": at} for n in own],
        "updated_at": at,
        **kw,
    }


def _told(store: Store, job_id: str) -> list[tuple[str, Any]]:
    return [
        ((e.data or {})["checkpoint"], (e.data or {})["attempt"])
        for e in store.events(job_id)
        if e.kind == "checkpoint"
    ]


def test_3_a_controller_that_reads_progress_seldom_tells_every_checkpoint(
    tmp_path: Path,
) -> None:
    """The daemon reads progress once in a while: two checkpoints between two reads are both
    told (the agent lists its uploads), each once."""
    from datetime import timedelta

    from provisioner.control.reconciler import Reconciler, cancel_job

    store, job_id, ck = _ckpt_job(tmp_path)
    rec = Reconciler(store, job_ids=[job_id], progress_every=timedelta(hours=1))
    try:
        rec.run_pass()  # launches attempt 1
        assert [a.attempt for a in store.attempts(job_id)] == [1]
        ck.write_progress(
            _record(1, "ckpt-000000200", ["ckpt-000000100", "ckpt-000000200"],
                    last_checkpoint_attempt=1)
        )  # fmt: skip
        rec.run_pass()
        rec.run_pass()
    finally:
        store.release_jobs(rec.owner)
        rec.close()
    assert _told(store, job_id) == [("ckpt-000000100", 1), ("ckpt-000000200", 1)]
    cancel_job(store, job_id, now=rec.clock())


def test_3_the_checkpoint_an_attempt_resumed_from_is_the_earlier_attempt_s(
    tmp_path: Path,
) -> None:
    """Attempt 2 resumes from the checkpoint attempt 1 wrote on its notice, and reports it
    before it writes one of its own: it is attempt 1's; attempt 2's own is attempt 2's."""
    from provisioner.control.reconciler import Reconciler, cancel_job

    store, job_id, ck = _ckpt_job(tmp_path)
    rec = Reconciler(store, job_ids=[job_id])
    try:
        rec.run_pass()
        ck.write_progress(_record(2, "ckpt-000000236", [], last_checkpoint_attempt=None))
        rec.run_pass()
        ck.write_progress(
            _record(2, "ckpt-000000300", ["ckpt-000000300"], last_checkpoint_attempt=2)
        )
        rec.run_pass()
    finally:
        store.release_jobs(rec.owner)
        rec.close()
    assert _told(store, job_id) == [("ckpt-000000236", 1), ("ckpt-000000300", 2)]
    cancel_job(store, job_id, now=rec.clock())


# -- item 8: 80 columns in a terminal: ids and money whole; NO_COLOR: no escape codes --------


def _in_a_terminal(*args: str, columns: int = 80, no_color: bool = True) -> str:
    """The CLI run in a pseudo-terminal ``columns`` wide; what it wrote, CRLF as LF."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import subprocess
    import sys
    import termios

    from tests.e2e_util import REPO

    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": str(columns), "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    if no_color:
        env["NO_COLOR"] = "1"
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "provisioner", *args],
        stdin=slave, stdout=slave, stderr=slave, env=env, cwd=REPO, close_fds=True,
    )  # fmt: skip
    os.close(slave)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal's other end closed: the command is done
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
        proc.wait(timeout=60)
    return out.decode(errors="replace").replace("\r\n", "\n")


def _store_with_a_job(tmp_path: Path) -> tuple[str, str]:
    from datetime import UTC, datetime, timedelta

    from provisioner.control.store.schema import AttemptRow

    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    t0 = datetime.now(UTC) - timedelta(hours=2)
    job = store.submit(
        name="llama-7b-lora-finetune-eu", policy_yaml="name: x\n", policy_path=None,
        provider="sim", provider_options={}, now=t0, deadline=None, work_total_h=6.0,
    )  # fmt: skip
    store.add_attempt(
        AttemptRow(
            job_id=job.id, attempt=1, token="t", provider="azure", region="swedencentral",
            zone="swedencentral-2", instance_type="Standard_NC24ads_A100_v4", gpu="A100-80GB",
            gpu_count=1, market="spot", price_per_hour=0.4912, instance_id="sim-fcd8dec8304b",
            state="ended", created_at=t0, launched_at=t0, ended_at=t0 + timedelta(hours=1),
            end_reason="job finished", cost_usd=0.4912, estimate_usd=0.7974,
        )
    )  # fmt: skip
    store.update_job(job.id, at=t0, state="succeeded", spent_usd=0.4912, attempt=1)
    store.close()
    return url, job.id


def test_8_at_80_columns_ids_and_money_are_never_cut(tmp_path: Path) -> None:
    url, job_id = _store_with_a_job(tmp_path)
    jobs = _in_a_terminal("jobs", "--all", "--store", url)
    assert job_id in jobs and "0.4912" in jobs and "…" not in jobs, jobs
    cost = _in_a_terminal("cost", job_id, "--store", url)
    assert job_id in cost and "sim-fcd8dec8304b" in cost and "…" not in cost, cost
    assert "0.4912" in cost and "0.7974" in cost
    plan = _in_a_terminal("plan", "--policy", "policies/spot-finetune.yaml", "--top", "3")
    assert "…" not in plan and "Standard_NC24ads_A100_v4" in plan, plan
    rows = [line for line in plan.splitlines() if line[:2] in ("1 ", "2 ", "3 ")]
    assert len(rows) == 3 and all(len(r) <= 80 for r in rows), plan
    assert "left out at 80 columns" in plan
    # catalog show: the longest instance type whole on one line, zones and prices whole
    cat = _in_a_terminal(
        "catalog", "show", "--provider", "gcp", "--gpu", "T4", "--region", "us-central1",
        "--top", "2",
    )  # fmt: skip
    lines = [line for line in cat.splitlines() if line.startswith(" gcp ")]
    assert len(lines) == 2 and all(len(line) <= 80 for line in lines), cat
    assert all("n1-standard-8+nvidia-tesla-t4x1" in line for line in lines), cat
    assert all(" us-central1-" in line for line in lines) and "…" not in cat, cat
    assert "left out at 80 columns: region" in cat  # named, not cut
    wide = _in_a_terminal("catalog", "show", "--provider", "gcp", "--top", "1", columns=200)
    assert "left out" not in wide and re.search(r"\b20\d\d-\d\d-\d\d\b", wide), wide
    for out in (jobs, cost, plan):
        assert "\x1b[" not in out  # NO_COLOR: no escape codes at all, bold included
    bold = _in_a_terminal("jobs", "--all", "--store", url, no_color=False)
    assert "\x1b[" in bold and job_id in bold  # a terminal without NO_COLOR keeps its styles


def test_8_a_pipe_gets_every_column_whatever_columns_says(tmp_path: Path) -> None:
    url, job_id = _store_with_a_job(tmp_path)
    done = _cli("cost", job_id, "--store", url, env={"COLUMNS": "80"})
    header = next(line for line in done.stdout.splitlines() if "attempt" in line)
    for col in ("where", "type", "USD/h", "OD USD", "lost h", "ended"):
        assert col in header, done.stdout
    assert "left out" not in done.stdout and "\x1b[" not in done.stdout


# -- item 5: cost --since <future> ---------------------------------------------------------


def test_5_cost_since_the_future_lists_nothing_at_minus_100_percent(tmp_path: Path) -> None:
    url, job_id = _store_with_a_job(tmp_path)
    future = "2099-01-01T00:00:00Z"
    doc = json.loads(_cli("cost", "--all", "--since", future, "--store", url, "--json").stdout)
    assert doc["jobs"] == [] and doc["attempts"] == [] and doc["total_usd"] == 0
    done = _cli("cost", "--all", "--since", future, "--store", url)
    assert done.returncode == 0 and "nothing ran between --since and --until" in done.stdout
    assert "-100" not in done.stdout and job_id not in done.stdout
    # a window that holds part of the job: its cost there, no difference against the whole
    # job's estimate
    one = json.loads(_cli("cost", job_id, "--until", _an_hour_and_a_half_ago(), "--store", url,
                          "--json").stdout)  # fmt: skip
    assert 0 < one["total_usd"] < 0.4912 and one["jobs"][0]["diff_pct"] is None
    text = _cli("cost", job_id, "--until", _an_hour_and_a_half_ago(), "--store", url).stdout
    assert "no difference against a part of it" in text


def _an_hour_and_a_half_ago() -> str:
    from datetime import UTC, datetime, timedelta

    return (datetime.now(UTC) - timedelta(minutes=90)).isoformat()


# -- item 14: docs for users ---------------------------------------------------------------


def test_14_docs_never_cite_internal_issue_numbers() -> None:
    import re

    from tests.e2e_util import REPO

    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    cited = [
        f"{p.name}:{n}: {line.strip()}"
        for p in pages
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bissue [0-9]", line, re.IGNORECASE)
    ]
    assert cited == []


def _policy_fields(
    model: Any = None, prefix: str = "", seen: frozenset[Any] = frozenset()
) -> list[str]:
    """Every field of the policy model, as dotted paths (``resources.workload.mfu``)."""
    import typing

    from pydantic import BaseModel

    from policies.model import Policy

    out = []
    for name, field in (model or Policy).model_fields.items():
        path = prefix + name
        out.append(path)
        stack = [field.annotation]
        while stack:
            t = stack.pop()
            if isinstance(t, type) and issubclass(t, BaseModel):
                if t not in seen:
                    out += _policy_fields(t, path + ".", seen | {t})
            else:
                stack.extend(typing.get_args(t))
    return out


def test_14_policy_md_documents_every_field_of_the_policy_model() -> None:
    """Each field is in policy.md's key table: by its dotted path, or in the row of the
    section that holds it (``resources.workload``'s row lists ``mfu``)."""
    import re

    from tests.e2e_util import REPO

    doc = (REPO / "docs" / "policy.md").read_text(encoding="utf-8")
    rows = [line for line in doc.splitlines() if line.startswith("| `")]
    keyed = [(re.findall(r"`([^`]+)`", row.split("|")[1]), row) for row in rows]
    fields = _policy_fields()
    assert {"job.env", "job.image", "job.disk_gb", "resources.workload.mfu"} <= set(fields)

    def named(path: str, names: list[str]) -> bool:
        return path in names or any(n.startswith(path + ".") for n in names)

    missing = []
    for path in fields:
        parts = path.split(".")
        above = [".".join(parts[:i]) for i in range(1, len(parts))]
        if not any(
            named(path, names) or (any(named(a, names) for a in above) and f"`{parts[-1]}`" in row)
            for names, row in keyed
        ):
            missing.append(path)
    assert missing == []


# -- item 9: the demo's bill against its estimate, explained --------------------------------


def test_9_the_demo_s_cost_says_time_was_compressed_and_the_billing_minimum(
    tmp_path: Path,
) -> None:
    url, job_id = _store_with_a_job(tmp_path)
    store = Store(url)
    store.update_job(
        job_id, at=datetime.now(UTC), provider_options={"seconds_per_hour": 60, "mimic": "all"}
    )
    store.close()
    out = _cli("cost", job_id, "--store", url).stdout
    # the rule of the cloud the sim played in the attempt's zone (Azure's here), not AWS's
    assert "60 s per simulated hour" in out and "per started minute (azure)" in out, out
    assert "per second, 60 s minimum" not in out
    assert "far below the estimate" in out
    many = _cli("cost", "--all", "--store", url).stdout
    assert "60 s per simulated hour" in many
    from provisioner.cli.cost_cmd import demo_note

    real = Store(url).job(job_id)
    real.provider_options = {"seconds_per_hour": 3600}
    assert demo_note(real) is None  # real time: nothing to explain


# -- item 11: gangs shown with their node count and the gang's price -------------------------


def _gang_store(tmp_path: Path) -> tuple[str, str]:
    url, job_id = _store_with_a_job(tmp_path)
    store = Store(url)
    store.update_attempt(job_id, 1, nodes=2, state="running", ended_at=None)
    store.update_job(job_id, at=datetime.now(UTC), state="running")
    store.close()
    return url, job_id


def test_11_a_gang_shows_its_nodes_and_the_gang_s_price(tmp_path: Path) -> None:
    url, job_id = _gang_store(tmp_path)
    status = _cli("status", job_id, "--store", url).stdout
    assert "2 nodes x 1x A100-80GB" in status, status
    assert "$0.9824/h (2 x $0.4912/h per node)" in status
    doc = json.loads(_cli("status", job_id, "--store", url, "--json").stdout)
    assert doc["placement"]["nodes"] == 2 and doc["placement"]["gang_price_per_hour"] == 0.9824
    # up's live table (what stays on screen when the job ends)
    import io
    import time

    from rich.console import Console

    from provisioner.api import Job
    from provisioner.cli.up_cmd import _view

    out = Console(width=200, record=True, file=io.StringIO())
    out.print(_view(Job(Store(url), job_id), time.monotonic()))
    text = out.export_text()
    assert "2 nodes x 1x A100-80GB" in text and "$0.9824/h (2 x $0.4912/h per node)" in text


def test_11_the_dashboard_shows_a_gang_s_nodes_and_price(tmp_path: Path) -> None:
    import urllib.request

    from provisioner.dashboard import DashboardServer

    url, job_id = _gang_store(tmp_path)
    server = DashboardServer(Store(url), port=0)
    server.start()
    try:
        base = server.url.rstrip("/")
        pages = {}
        for path in ("/", f"/jobs/{job_id}"):
            with urllib.request.urlopen(base + path, timeout=10) as r:
                pages[path] = r.read().decode()
    finally:
        server.close()
    for path, html in pages.items():
        assert "2 nodes</span> ×" in html, path
        assert "$0.9824" in html and "2 × $0.4912" in html, path


# -- item 10: simulate on traces the policy could never run on ------------------------------


def test_10_simulate_refuses_traces_outside_the_policy_or_lets_them_stand_in(
    tmp_path: Path,
) -> None:
    """A shipped EU policy on a US V100 trace: refused with both reasons (exit 2); with
    --stand-in the trace stands for the policy's placements and the report says so."""
    import numpy as np

    from tests.e2e_util import REPO

    rng = np.random.default_rng(0)
    data = (rng.random(400) > 0.3).astype(int).tolist()
    trace = tmp_path / "us-east-1c_v100_1.json"
    trace.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))
    policy = str(REPO / "policies" / "spot-finetune.yaml")
    done = _cli("simulate", "--policy", policy, "--trace", str(trace))
    assert done.returncode == 2, done.stderr
    assert "aws:us-east-1 is outside the policy's residency (allow EEA)" in done.stderr
    assert "V100 has 16 GB, the job needs 21.9 GB per GPU" in done.stderr
    assert "--stand-in" in done.stderr and "Traceback" not in done.stderr
    ok = _cli("simulate", "--policy", policy, "--trace", str(trace), "--stand-in", "--json")
    assert ok.returncode in (0, 6), ok.stderr
    report = json.loads(ok.stdout)
    assert len(report["stand_in"]) == 2 and report["windows"]
    # a trace the policy allows (no residency, no GPU list, no sizing) is taken as it is
    plain = tmp_path / "plain.yaml"
    plain.write_text("name: x\njob:\n  compute_hours: 6\ndeadline: 48h\n")
    fine = _cli("simulate", "--policy", str(plain), "--trace", str(trace), "--json")
    assert fine.returncode in (0, 6) and json.loads(fine.stdout)["stand_in"] == []


# -- item 13: one flag vocabulary, in one table ----------------------------------------------


def test_13_every_flag_of_every_command_is_in_the_readme_s_flag_table() -> None:
    import re

    import click

    from provisioner.cli import cli
    from tests.e2e_util import REPO

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme.split("### Flags: one meaning each", 1)[1].split("\n\n", 2)[1]
    named = set(re.findall(r"`(-{1,2}[a-z][a-z-]*)", table))
    flags: dict[str, set[str]] = {}

    def walk(cmd: Any, name: str) -> None:
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for sub in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, sub), f"{name} {sub}".strip())
            return
        for p in cmd.params:
            if isinstance(p, click.Option):
                for opt in (*p.opts, *p.secondary_opts):
                    flags.setdefault(opt, set()).add(name)

    walk(cli, "")
    assert sorted(set(flags) - named - {"--help"}) == []
    # one name each: --top for a row count, --provider for a cloud, --output for logs' output
    assert "--top" in {o for o, c in flags.items() if "catalog show" in c}
    assert "--catalog-provider" in flags and "--report-file" in flags
    done = _cli("catalog", "show", "--top", "2")
    assert done.returncode == 0 and "2 of" in done.stdout


def test_3_under_a_notice_the_relaunch_reads_the_work_left_afresh(tmp_path: Path) -> None:
    """A daemon reads progress seldom; under an interruption notice it reads it every pass, so
    the replacement's launch reason counts the work the last checkpoint holds (as ``up``)."""
    from datetime import UTC, datetime, timedelta

    from providers.sim import SimProvider
    from provisioner.control.reconciler import Reconciler, cancel_job

    store, job_id, ck = _ckpt_job(tmp_path)
    sim = SimProvider(state_dir=str(tmp_path / "sim"), mimic="aws", run_agent=False)
    rec = Reconciler(store, job_ids=[job_id], progress_every=timedelta(hours=1))
    try:
        rec.run_pass()  # launches attempt 1
        rec.run_pass()  # reads progress once: none yet
        (first,) = store.attempts(job_id)
        sim.preempt(str(first.instance_id), notice_s=600)
        # the agent's record under the notice (no cloud's API reports it: the agent does)
        now = datetime.now(UTC)
        notice = {
            "seen_at": now.isoformat(),
            "deadline": (now + timedelta(seconds=600)).isoformat(),
            "raw": "instance-action: terminate",
            "source": "metadata",
        }
        ck.write_progress(
            _record(
                1, "ckpt-000000400", ["ckpt-000000400"], last_checkpoint_attempt=1, notice=notice
            )
        )
        assert wait_for(lambda: rec.run_pass() is not None and len(store.attempts(job_id)) > 1, 60)
    finally:
        store.release_jobs(rec.owner)
        rec.close()
    launches = [e.message for e in store.events(job_id) if e.kind == "launch"]
    assert "work left 2.00 h" in launches[-1], launches  # 6 h x (1 - 400/600)
    cancel_job(store, job_id, now=rec.clock())
