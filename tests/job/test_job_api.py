"""``provisioner.job``, the job's side: the flag, the handlers, the notice and its deadline,
atomic saves, progress and warnings, the checkpoint interval; and the agent's half of it (the
notice file written before the signal)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import provisioner.job as job
from provisioner.agent import protocol
from provisioner.agent.spec import AgentSpec

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The agent's environment, in ``tmp_path``; a fresh module state."""
    for name in list(os.environ):
        if name.startswith("PROVISIONER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv(job.ENV_CHECKPOINT_DIR, str(tmp_path / "ck"))
    monkeypatch.setenv(job.ENV_OUTPUT_DIR, str(tmp_path / "out"))
    monkeypatch.setenv(job.ENV_PROGRESS_FILE, str(tmp_path / "progress.json"))
    monkeypatch.setenv(job.ENV_NOTICE_FILE, str(tmp_path / "notice.json"))
    job._reset_for_tests()
    yield tmp_path
    job._reset_for_tests()


def _notice(tmp: Path, left_s: float, seen: str | None = None) -> None:
    now = datetime.now(UTC)
    protocol.write_notice(
        tmp / "notice.json",
        seen or now.isoformat().replace("+00:00", "Z"),
        (now + timedelta(seconds=left_s)).isoformat().replace("+00:00", "Z"),
        "aws",
        '{"action": "terminate"}',
    )


def _progress(tmp: Path) -> dict[str, object]:
    doc: dict[str, object] = json.loads((tmp / "progress.json").read_text())
    return doc


def test_the_names_are_the_agents() -> None:
    for name in (
        "ENV_JOB_ID",
        "ENV_ATTEMPT",
        "ENV_CHECKPOINT_DIR",
        "ENV_RESUME_FROM",
        "ENV_SIGNAL",
        "ENV_OUTPUT_DIR",
        "ENV_PROGRESS_FILE",
        "ENV_NOTICE_FILE",
        "LATEST",
    ):
        assert getattr(job, name) == getattr(protocol, name), name
    assert job.checkpoint_name(120) == protocol.checkpoint_name(120)


def test_importing_it_loads_the_standard_library_only() -> None:
    code = (
        "import sys, json; import provisioner.job, provisioner.job.torch, "
        "provisioner.job.lightning, provisioner.job.hf, provisioner.job.torchrun, "
        "provisioner.job.dist\n"
        "roots = {m.split('.')[0] for m in sys.modules}\n"
        "ours = sorted(m for m in sys.modules if m.startswith(('provisioner', 'providers')))\n"
        "print(json.dumps([sorted(roots & {'numpy', 'torch', 'lightning', 'transformers', "
        "'accelerate', 'pydantic', 'yaml', 'fsspec'}), ours]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    heavy, ours = json.loads(done.stdout.strip().splitlines()[-1])
    assert heavy == []
    assert all(m == "provisioner" or m.startswith("provisioner.job") for m in ours), ours


def test_the_signal_sets_a_flag_and_the_handler_before_is_restored() -> None:
    seen: list[int] = []

    def mine(signum: int, frame: object) -> None:
        seen.append(signum)

    before = signal.signal(signal.SIGUSR1, mine)
    try:
        with job.watch():
            with job.watch():  # nested: restored once, at the outermost
                assert job.handling()
            assert job.handling() and not job.checkpoint_requested()
            os.kill(os.getpid(), signal.SIGUSR1)
            assert job.checkpoint_requested()  # a flag, nothing else: no save in the handler
            assert not (job.checkpoint_dir() / "latest").exists()
        assert not job.handling()
        assert signal.getsignal(signal.SIGUSR1) is mine
        os.kill(os.getpid(), signal.SIGUSR1)
        assert seen == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_the_signal_named_by_the_agent_and_off_the_main_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(job.ENV_SIGNAL, "SIGUSR2")
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(job.install()))
    t.start()
    t.join()
    assert got == [False] and not job.handling()  # Python's rule; the notice file still works
    before = signal.getsignal(signal.SIGUSR2)
    with job.watch():
        os.kill(os.getpid(), signal.SIGUSR2)
        assert job.checkpoint_requested()
    assert signal.getsignal(signal.SIGUSR2) == before


def test_the_notice_its_deadline_and_interrupted(env: Path) -> None:
    assert job.notice() is None and job.deadline() is None and job.seconds_left() is None
    assert not job.checkpoint_requested() and not job.interrupted()
    _notice(env, 90)
    deadline = job.deadline()
    assert deadline is not None and deadline.tzinfo is not None
    left = job.seconds_left()
    assert left is not None and 85 < left <= 90
    assert job.notice()["cloud"] == "aws"  # type: ignore[index]
    assert job.checkpoint_requested() and not job.interrupted()  # no signal needed
    with job.saving(5) as tmp:
        (tmp / "w").write_text("x")
    assert not job.checkpoint_requested() and job.interrupted()
    _notice(env, 30, seen="2030-01-01T00:00:00Z")  # another notice: wanted again
    assert job.checkpoint_requested() and not job.interrupted()


def test_a_notice_that_comes_during_a_save_is_answered_by_it(env: Path) -> None:
    with job.saving(7) as tmp:
        (tmp / "a").write_text("1")
        _notice(env, 60)  # the notice (and its signal) while the files are being written
        job._state.requested = True
    assert not job.checkpoint_requested() and job.interrupted()


def test_saves_are_atomic_and_committed(env: Path) -> None:
    ck = env / "ck"
    with job.saving(10) as tmp:
        (tmp / "state.bin").write_bytes(b"ten")
    assert (ck / "latest").read_text().strip() == "ckpt-000000010"
    meta = json.loads((ck / "ckpt-000000010" / job.META).read_text())
    assert meta["step"] == 10 and meta["save_s"] >= 0
    assert job.last_save_seconds() is not None

    with pytest.raises(RuntimeError), job.saving(20) as tmp:  # a failed save: nothing left
        (tmp / "state.bin").write_bytes(b"half")
        raise RuntimeError("disk full")
    assert (ck / "latest").read_text().strip() == "ckpt-000000010"
    assert sorted(p.name for p in ck.iterdir()) == ["ckpt-000000010", "latest"]

    partial = ck / ".ckpt-000000030.partial-deadbeef"  # what a kill mid-save leaves
    partial.mkdir()
    (partial / "state.bin").write_bytes(b"ha")
    assert job.resume_dir() == ck / "ckpt-000000010"  # never the partial one
    for step in (30, 40, 50, 50):  # the same step twice: swapped whole
        with job.saving(step) as tmp:
            (tmp / "state.bin").write_bytes(str(step).encode())
    assert not partial.exists(), "the next save removes what a kill left"
    names = sorted(p.name for p in ck.iterdir())
    assert names == ["ckpt-000000030", "ckpt-000000040", "ckpt-000000050", "latest"]
    assert job.resume_dir() == ck / "ckpt-000000050"


def test_resume_dir_prefers_the_agents_and_knows_the_save_time(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert job.resume_dir() is None
    fetched = env / "fetched" / "ckpt-000000042"
    fetched.mkdir(parents=True)
    (fetched / job.META).write_text(json.dumps({"step": 42, "save_s": 12.5}))
    monkeypatch.setenv(job.ENV_RESUME_FROM, str(fetched))
    assert job.resume_dir() == fetched
    assert job.last_save_seconds() == 12.5  # known before this run saves once


def test_adopt_and_save_done(env: Path) -> None:
    hf = env / "ck" / ".hf" / "checkpoint-9"
    hf.mkdir(parents=True)
    (hf / "model.safetensors").write_bytes(b"m")
    final = job.adopt(hf, 9, save_s=1.5)
    assert final == env / "ck" / "ckpt-000000009" and not hf.exists()
    assert (final / "model.safetensors").read_bytes() == b"m"
    assert job.resume_dir() == final
    with pytest.raises(ValueError):
        job.save_done(env / "elsewhere")


def test_progress_and_the_warning_when_a_save_cannot_finish(env: Path) -> None:
    job.report_progress(3, 10, loss=0.5)
    assert _progress(env) == {"step": 3, "total_steps": 10, "loss": 0.5}
    job._state.last_save_s = 8.0  # the last save took 8 s
    _notice(env, 30)
    assert not job.warn_if_late(4)  # 30 s left: it fits
    _notice(env, 5, seen="2030-01-01T00:00:00Z")
    assert job.warn_if_late(4)
    doc = _progress(env)
    assert "may not finish before the capacity goes" in str(doc["checkpoint_warning"])
    assert "8.0 s" in str(doc["checkpoint_warning"])
    with job.saving(4) as tmp:  # saving() asks too; the warning stays in later reports
        (tmp / "x").write_text("x")
    job.report_progress(5, 10)
    doc = _progress(env)
    assert "checkpoint_warning" in doc and isinstance(doc["last_save_s"], float)


def test_answered_clears_a_rank_that_does_not_write(env: Path) -> None:
    job._state.requested = True
    _notice(env, 60)
    job.answered()
    assert not job.checkpoint_requested() and job.interrupted()
    assert not (env / "ck" / "latest").exists()


def test_young_daly_interval_and_the_periodic_clock() -> None:
    # a zone losing spot capacity once every 8 hours, a 30 s save: checkpoint every ~22 min
    assert job.young_daly_interval(30, 8 * 3600) == pytest.approx(1314.5, abs=0.1)
    with pytest.raises(ValueError):
        job.young_daly_interval(0, 100)
    now = [0.0]
    fixed = job.Interval(60, clock=lambda: now[0])
    now[0] = 59.0
    assert not fixed.due()
    now[0] = 60.0
    assert fixed.due()
    rate = job.Interval(mtbi_s=8 * 3600, first_s=100, clock=lambda: now[0])
    assert rate.seconds() == 100  # no save measured yet
    job._state.last_save_s = 30.0
    assert rate.seconds() == pytest.approx(1314.5, abs=0.1)
    job._state.saves += 1  # a save: the interval starts again from here
    assert not rate.due()
    now[0] += 1315
    assert rate.due()


def test_the_agent_writes_the_notice_file_before_it_signals(tmp_path: Path) -> None:
    """SIGTERM to the agent is a notice with ``grace_s`` left: the job finds the notice file
    (absent before) and its deadline through provisioner.job."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = (
        "import json, os, sys, time\n"
        "import provisioner.job as job\n"
        "with job.watch():\n"
        "    print('before', os.path.exists(os.environ['PROVISIONER_NOTICE_FILE']), flush=True)\n"
        "    while not job.checkpoint_requested():\n"
        "        time.sleep(0.02)\n"  # the job's step: its own work
        "    print('notice', json.dumps(job.notice()), round(job.seconds_left()), flush=True)\n"
    )
    spec = AgentSpec(
        job_id="n",
        attempt=1,
        checkpoint_uri=f"file://{tmp_path}/store",
        metadata_url=f"http://127.0.0.1:{port}",
        workdir=str(tmp_path / "w"),
        command=[sys.executable, "-c", script],
        grace_s=20,
        interval_s=0,
    )
    path = tmp_path / "spec.json"
    spec.save(path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "provisioner.agent", "--spec", str(path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "before False" in line:
            proc.send_signal(signal.SIGTERM)
        if "notice {" in line:
            break
    proc.communicate(timeout=30)
    said = next((ln for ln in lines if "notice {" in ln), None)
    assert said is not None, "".join(lines)[-3000:]
    doc = json.loads(said.split("notice ", 1)[1].rsplit(" ", 1)[0])
    assert doc["reason"] == "SIGTERM" and doc["cloud"] == "aws"
    assert 17 <= int(said.rsplit(" ", 1)[1]) <= 20  # grace_s from when the agent was told
    assert (tmp_path / "w" / "notice.json").is_file()
