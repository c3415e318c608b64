"""End to end on the sim provider: `provisioner cost` reconciles to the cent with the attempts
the reconciler billed, for a real job that was preempted and restarted."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from providers.sim import SimProvider
from provisioner.api import Job, submit
from provisioner.cli import cli
from provisioner.control.store import Store
from tests.e2e_util import write_policy

pytestmark = pytest.mark.e2e


@pytest.fixture
def sim_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "sim"
    yield d
    SimProvider(d).shutdown_server(terminate_all=True)


def test_cost_reconciles_with_the_billed_attempts_of_a_preempted_job(
    tmp_path: Path, sim_dir: Path
) -> None:
    policy = write_policy(tmp_path / "p.yaml", steps=500, ckpt=tmp_path / "ck")
    options = {
        "state_dir": str(sim_dir),
        "mimic": {"eu-west-1a": "aws", "europe-west4-a": "gcp"},
        "seconds_per_hour": 60,
        "mtbp_hours": None,
        "preempt_first_after_s": 6,
        "demo_outage_s": 8,
        "idle_exit_s": 120,
    }
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    _, job_id = submit(
        policy, provider="sim", provider_defaults=False, provider_options=options, store=store
    )
    state = Job(store, job_id).wait(timeout=150, poll_s=0.5)
    assert state == "succeeded", Job(store, job_id).refresh().reason

    attempts = store.attempts(job_id)
    assert any(a.state == "preempted" for a in attempts), [a.state for a in attempts]
    launched = [a for a in attempts if a.launched_at is not None]
    assert all(a.estimate_usd is not None and a.estimate_usd > 0 for a in launched)
    billed = round(sum(a.cost_usd for a in attempts), 2)
    assert billed > 0

    runner = CliRunner()
    res = runner.invoke(cli, ["cost", job_id, "--store", url, "--json"], env={"NO_COLOR": "1"})
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert round(doc["total_usd"], 2) == billed
    for key in ("jobs", "attempts", "by_cloud", "by_day"):
        assert round(sum(r["cost_usd"] for r in doc[key]), 2) == billed, key
    assert len(doc["attempts"]) == len(attempts)
    assert doc["estimate_usd"] == launched[0].estimate_usd
    assert doc["diff_usd"] == pytest.approx(doc["total_usd"] - launched[0].estimate_usd, abs=1e-5)
    for by in ("job", "cloud", "day", "attempt"):
        res = runner.invoke(cli, ["cost", "--all", "--store", url, "--by", by, "--csv", "-"])
        rows = list(csv.DictReader(io.StringIO(res.stdout)))
        assert round(sum(float(r["cost_usd"]) for r in rows), 2) == billed, by
