"""A failure the agent meets on every try (a full checkpoint disk, a store that refuses writes)
is logged once, summarised at most once a minute, and its recovery once (issue 43, problem 7):
:class:`provisioner.agent.repeats.Repeats` on the caller's clock, then a real agent whose store
really refuses its checkpoints."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from provisioner.agent.repeats import Repeats
from provisioner.agent.spec import AgentSpec
from provisioner.agent.store import CheckpointStore, read_progress
from tests.agent.test_agent import PY, run_agent, unreachable_url
from tests.waiting import wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_repeated_failure_is_one_line_a_summary_a_minute_and_one_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    log = logging.getLogger("test.repeats")
    repeats = Repeats(log, "checkpoint upload", clock=clock)
    caplog.set_level(logging.INFO, logger="test.repeats")

    def lines() -> list[str]:
        out = [f"{r.levelname} {r.getMessage()}" for r in caplog.records]
        caplog.clear()
        return out

    repeats.ok()  # nothing failed: nothing said
    assert lines() == []
    for i in range(121):  # twice a second for a minute: the checkpoint's name changes
        repeats.failed(f"upload of checkpoint ckpt-{i:09d} failed: OSError: [Errno 28] full")
        clock.now += 0.5
    assert lines() == [  # at 0 s, then at 60 s
        "ERROR upload of checkpoint ckpt-000000000 failed: OSError: [Errno 28] full",
        "ERROR checkpoint upload: 120 more in the last 60 s (the last: upload of checkpoint "
        "ckpt-000000120 failed: OSError: [Errno 28] full)",
    ]
    repeats.failed("upload of checkpoint ckpt-000000121 failed: OSError: [Errno 28] full")
    clock.now += 9.5
    repeats.failed("upload of checkpoint ckpt-000000122 failed: PermissionError: denied")
    assert lines() == [  # another kind: the count so far, then the new one whole
        "ERROR checkpoint upload: 1 more in the last 10 s (the last: upload of checkpoint "
        "ckpt-000000121 failed: OSError: [Errno 28] full)",
        "ERROR upload of checkpoint ckpt-000000122 failed: PermissionError: denied",
    ]
    clock.now += 5
    repeats.ok()
    repeats.ok()
    assert lines() == ["INFO checkpoint upload works again (123 failures in 75 s)"]
    repeats.failed("upload of checkpoint ckpt-000000200 failed: OSError: [Errno 28] full")
    assert lines() == ["ERROR upload of checkpoint ckpt-000000200 failed: OSError: [Errno 28] full"]


def test_an_agent_whose_store_refuses_checkpoints_says_so_once_and_once_when_it_works(
    tmp_path: Path,
) -> None:
    """The store's ``checkpoints`` directory is a regular file: every upload fails for real
    (the filesystem refuses the directory), twice a second, until the file goes."""
    store = f"file://{tmp_path}/store"
    blocker = tmp_path / "store" / "r" / "checkpoints"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("not a directory\n")
    spec = AgentSpec(
        job_id="r",
        attempt=1,
        checkpoint_uri=store,
        metadata_url=unreachable_url(),
        workdir=str(tmp_path / "w"),
        command=[PY, "-m", "examples.train", "--steps", "240", "--step-seconds", "0.05",
                 "--checkpoint-every", "10", "--log-every", "0"],
        interval_s=0,
        probe="off",
    )  # fmt: skip
    proc = run_agent(spec, tmp_path)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout or []), daemon=True)
    reader.start()
    try:
        # checkpoints every 0.5 s, each refused; retried twice a second meanwhile
        wait_for(lambda: ((read_progress(store, "r") or {}).get("step") or 0) >= 80, timeout=60)
        blocker.unlink()  # the disk has room again
        code = proc.wait(timeout=60)
    except BaseException:
        proc.kill()
        raise
    finally:
        proc.wait()
    reader.join(timeout=10)
    assert code == 0, "".join(out)[-3000:]
    failed = [line for line in out if "upload of checkpoint" in line and "failed" in line]
    again = [line for line in out if "checkpoint upload works again" in line]
    assert len(failed) == 1 and "ERROR" in failed[0], "".join(out)[-3000:]
    assert len(again) == 1, "".join(out)[-3000:]
    failures = int(again[0].split("(")[1].split()[0])
    assert failures >= 5, again  # it kept trying: each try after the first went unsaid
    assert CheckpointStore(store, "r").latest() == "ckpt-000000240"
    assert not [line for line in out if "Traceback" in line]
