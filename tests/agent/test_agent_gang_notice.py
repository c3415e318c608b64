"""A gang node whose job stops on a peer's notice before its agent has read that notice still
reports the notice (the controller learns of a gang's notice through node 0's record).

The race, made certain: node 0's job writes node 1's notice into the checkpoint store itself
(as node 1's agent does when its VM is told to go) and exits at once with the peer-lost code,
as a job whose collective saw the other rank stop; node 0's agent sees the exit before its next
look at the gang's notice. Its record must say it was a notice, with the peer's deadline.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from provisioner.agent.gang import EXIT_PEER_LOST
from provisioner.agent.spec import AgentSpec
from provisioner.agent.store import read_progress
from tests.agent.test_agent import run_agent, unreachable_url

JOB = """
import json, sys
from datetime import UTC, datetime, timedelta
from provisioner.agent.store import CheckpointStore
store = CheckpointStore(sys.argv[1], sys.argv[2])
now = datetime.now(UTC)
doc = {"node": 1, "seen_at": now.isoformat(),
       "deadline": (now + timedelta(seconds=30)).isoformat(), "raw": "spot/instance-action"}
store.write_progress(doc, "gang/a1/notice.json")
sys.exit(int(sys.argv[3]))
"""


def test_node_0_reports_a_peers_notice_that_stopped_its_job_first(tmp_path: Path) -> None:
    store = f"file://{tmp_path / 'store'}"
    spec = AgentSpec(
        job_id="g",
        attempt=1,
        checkpoint_uri=store,
        metadata_url=unreachable_url(),
        workdir=str(tmp_path / "w"),
        command=[sys.executable, "-c", JOB, store, "g", str(EXIT_PEER_LOST)],
        node=0,
        nodes=2,
        poll_s=1.0,
    )
    proc = run_agent(spec, tmp_path)
    out, _ = proc.communicate(timeout=60)
    progress = read_progress(store, "g")
    assert progress is not None, out
    assert progress["state"] == "interrupted", (progress, out)
    notice = progress.get("notice")
    assert notice, json.dumps(progress)[:800]
    assert "gang: node 1" in notice["raw"] and notice["deadline"], notice
