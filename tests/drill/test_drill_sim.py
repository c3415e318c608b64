"""``provisioner drill --provider sim``: the whole drill as a user runs it (a real subprocess,
the sim cloud's server, real agents), every step held and timed, nothing left behind; a drill
killed half-way leaves a ledger that ``provisioner drill --cleanup`` empties."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provisioner.drill.interrupters import Interrupter
from provisioner.drill.job import expected_result
from provisioner.drill.ledger import Ledger
from provisioner.drill.runner import Drill, prepare
from provisioner.drill.steps import Outcome, StepName
from provisioner.drill.target import DrillTarget
from tests.e2e_util import REPO
from tests.simleaks import sim_servers
from tests.waiting import until

pytestmark = pytest.mark.e2e


def cli(*args: str, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "provisioner", "drill", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO), NO_COLOR="1"),
        **kw,
    )


def ledger_of(state: Path) -> Ledger:
    [path] = list((state / "drills").glob("*/ledger.json"))
    return Ledger.load(path)


def nothing_left(state: Path, ledger: Ledger, pids: list[int]) -> None:
    """No sim server for the drill, no sandbox process, no object in the checkpoint store."""
    sim_dir = Path(str(ledger.provider_options["state_dir"])).resolve()
    assert not [s for s in sim_servers() if s.state_dir and s.state_dir.resolve() == sim_dir]
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
    ck = Path(ledger.checkpoint_uri.removeprefix("file://")) / ledger.job_id
    assert not ck.exists(), sorted(ck.rglob("*"))
    assert Ledger.load(ledger.path or Path()).cleaned


def sandbox_pids(ledger: Ledger) -> list[int]:
    sim_dir = Path(str(ledger.provider_options["state_dir"]))
    pids = []
    for rec in sim_dir.glob("instances/*/*.json"):
        doc = json.loads(rec.read_text() or "{}")
        if isinstance(doc.get("pid"), int):
            pids.append(doc["pid"])
    return pids


def test_the_sim_drill_passes_every_step_and_leaves_nothing(tmp_path: Path) -> None:
    proc = cli("--provider", "sim", "--max-cost", "1", "--state-dir", str(tmp_path), "--json")
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    doc = json.loads(out)
    assert doc["passed"] is True and not doc["stopped"], doc
    steps = {s["step"]: s for s in doc["steps"]}
    assert list(steps) == [n.value for n in StepName]
    for s in doc["steps"]:
        assert s["outcome"] == "held", s
        assert s["at_s"] is not None and s["took_s"] is not None, s
        assert s["substitute"] is False
        assert f"{s['step']}" in err  # each step told as it happened (stderr under --json)
    assert steps["resumed"]["detail"] == f"from {steps['checkpoint']['detail'].split()[0]}"
    assert "before the old instance went" in steps["replacement"]["detail"]
    [call] = doc["interruption_calls"]
    assert call["call"].endswith("/preempt")
    assert doc["left_behind"] == []
    assert 0 < doc["cost_usd"] <= 1
    ledger = ledger_of(tmp_path)
    with sqlite3.connect(ledger.store_url.removeprefix("sqlite:///")) as db:
        [(result,)] = db.execute("select result from jobs").fetchall()
    assert json.loads(result) == expected_result(60)
    report = json.loads(Path(doc["report"]).read_text())
    assert report["passed"] is True
    nothing_left(tmp_path, ledger, sandbox_pids(ledger))


def test_the_drill_prints_a_table_with_each_steps_time(tmp_path: Path) -> None:
    proc = cli("--provider", "sim", "--max-cost", "1", "--state-dir", str(tmp_path))
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, out + err
    for name in StepName:
        [row] = [line for line in out.splitlines() if line.strip().startswith(name.value + " ")]
        assert "held" in row and row.count(" s ") + row.count(" s") >= 2, row
    assert "every step held" in out


def test_a_drill_refuses_to_start_without_max_cost(tmp_path: Path) -> None:
    proc = cli("--provider", "sim", "--state-dir", str(tmp_path))
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "--max-cost USD is required" in err and "Traceback" not in err
    assert not (tmp_path / "drills").exists(), "nothing was made"


def test_a_drill_killed_half_way_is_cleaned_up_by_cleanup(tmp_path: Path) -> None:
    proc = cli("--provider", "sim", "--max-cost", "1", "--state-dir", str(tmp_path))
    try:

        def launched() -> bool:
            try:
                ledger = ledger_of(tmp_path)
                with sqlite3.connect(ledger.store_url.removeprefix("sqlite:///")) as db:
                    rows = db.execute("select instance_id from attempts").fetchall()
                return bool(rows and rows[0][0]) and bool(sandbox_pids(ledger))
            except (ValueError, sqlite3.Error, OSError):
                return False

        assert until(launched, 120, every=0.2), "the drill launched its instance"
    finally:
        proc.send_signal(signal.SIGKILL)  # no cleanup of its own: the ledger is all there is
        proc.communicate(timeout=30)
    ledger = ledger_of(tmp_path)
    assert not ledger.cleaned
    pids = sandbox_pids(ledger)
    assert pids and all(_alive(p) for p in pids), "the kill left the instance running"

    done = cli("--cleanup", "--state-dir", str(tmp_path))
    out, err = done.communicate(timeout=240)
    assert done.returncode == 0, out + err
    assert f"{ledger.drill_id} (sim): everything deleted" in out
    nothing_left(tmp_path, ledger, pids)
    again = cli("--cleanup", "--state-dir", str(tmp_path))
    out, _ = again.communicate(timeout=60)
    assert again.returncode == 0 and "no drill to clean up" in out


def _alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ctrl_c_stops_the_drill_and_deletes_everything(tmp_path: Path) -> None:
    proc = cli("--provider", "sim", "--max-cost", "1", "--state-dir", str(tmp_path))
    try:

        def launched() -> bool:
            try:
                return bool(sandbox_pids(ledger_of(tmp_path)))
            except (ValueError, OSError):
                return False

        assert until(launched, 120, every=0.2)
        pids = sandbox_pids(ledger_of(tmp_path))
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert "interrupted (Ctrl-C)" in out and "Traceback" not in out + err
    ledger = ledger_of(tmp_path)
    nothing_left(tmp_path, ledger, pids)


class SilentCloud(Interrupter):
    """A cloud that takes the interruption call and never interrupts (no notice comes)."""

    cloud, api = "sim", "an interruption call the cloud ignores"

    def interrupt(self, instance_id: str, zone: str) -> dict[str, Any]:
        return {"call": "ignored", "instance": instance_id}


def test_a_notice_that_never_comes_fails_the_drill_and_it_still_cleans_up(tmp_path: Path) -> None:
    target = DrillTarget(provider="sim", max_cost=1.0, state_dir=tmp_path, steps=40)
    ledger = prepare(target)
    lines: list[str] = []
    report = Drill(target, ledger, say=lines.append, interrupter=SilentCloud(None, ledger)).run()
    assert not report.passed
    assert report.step(StepName.INTERRUPT).outcome is Outcome.HELD
    assert report.step(StepName.NOTICE).outcome is Outcome.NOT_REACHED
    assert report.stopped == "notice: not seen before the job finished", report.stopped
    assert report.step(StepName.CLEANUP).outcome is Outcome.HELD and report.leftovers == []
    nothing_left(tmp_path, ledger, sandbox_pids(ledger))
