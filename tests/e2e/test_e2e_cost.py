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


#: two zones per cloud: however the planner orders them, each cloud has one left for the
#: job after up to five preemptions
THREE_CLOUDS = {
    "eu-west-1a": "aws", "eu-west-1b": "aws", "europe-west4-a": "gcp", "europe-west4-b": "gcp",
    "westeurope-1": "azure", "westeurope-2": "azure",
}  # fmt: skip


def test_focus_export_of_a_job_preempted_on_three_clouds_passes_focus_1_0(
    tmp_path: Path, sim_dir: Path
) -> None:
    """The sim playing AWS, GCP and Azure; each attempt preempted at once (its zone then out)
    until the job has lost one on every cloud. The FOCUS export breaks no MUST rule, and on
    every row unit price x PricingQuantity = cost, the quantity being the hours billed under
    the played cloud's rule (the minimum and increment included)."""
    from providers.facts import billing_for
    from tests.focus_spec import problems

    policy = write_policy(tmp_path / "p.yaml", steps=300, ckpt=tmp_path / "ck")
    options = {
        "state_dir": str(sim_dir), "mimic": THREE_CLOUDS, "seconds_per_hour": 60,
        "mtbp_hours": None, "idle_exit_s": 120,
    }  # fmt: skip
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    _, job_id = submit(
        policy, provider="sim", provider_defaults=False, provider_options=options, store=store
    )
    job, sim = Job(store, job_id), SimProvider(sim_dir)
    preempted: dict[str, str] = {}  # instance -> the cloud it played

    def take_back(_report: object) -> None:
        """After each pass: every running attempt's capacity taken back at once (its zone then
        out for the rest of the test) until one was lost on each of the three clouds."""
        for a in store.attempts(job_id):
            if len(set(preempted.values())) == 3:
                return
            if a.state == "running" and a.instance_id and a.instance_id not in preempted:
                sim.preempt(a.instance_id, outage_s=900)
                preempted[a.instance_id] = THREE_CLOUDS[a.zone]

    state = job.wait(timeout=240, poll_s=0.5, on_pass=take_back)
    assert state == "succeeded", job.refresh().reason
    assert set(preempted.values()) == {"aws", "gcp", "azure"}, preempted
    attempts = {a.attempt: a for a in store.attempts(job_id)}
    lost = {THREE_CLOUDS[a.zone] for a in attempts.values() if a.state == "preempted"}
    assert lost == {"aws", "gcp", "azure"}, [(a.zone, a.state) for a in attempts.values()]

    runner = CliRunner()
    out = tmp_path / "focus.csv"
    res = runner.invoke(cli, ["cost", job_id, "--store", url, "--focus", str(out)])
    assert res.exit_code == 0, res.output
    reader = csv.DictReader(io.StringIO(out.read_text()))
    rows = list(reader)
    assert problems(list(reader.fieldnames or []), rows) == []
    billed = sum(a.cost_usd for a in attempts.values())
    assert sum(float(r["BilledCost"]) for r in rows) == pytest.approx(billed, abs=1e-9)
    quantity: dict[int, float] = {}
    for r in rows:
        for price, cost in (("ListUnitPrice", "ListCost"), ("ContractedUnitPrice", "BilledCost")):
            assert float(r[price]) * float(r["PricingQuantity"]) == pytest.approx(
                float(r[cost]), rel=1e-9, abs=1e-12
            ), r
        quantity[int(r["x_Attempt"])] = quantity.get(int(r["x_Attempt"]), 0.0) + float(
            r["PricingQuantity"]
        )
    names = {"aws": "Europe (Ireland)", "gcp": "Netherlands", "azure": "West Europe"}
    for n, hours in quantity.items():
        a = attempts[n]
        cloud = THREE_CLOUDS[a.zone]
        assert a.launched_at is not None and a.ended_at is not None
        ran = (a.ended_at - a.launched_at).total_seconds()
        rule = billing_for(cloud)
        # the billed hours: the run under the played cloud's rule, the minimum folded in
        assert hours * 3600 == pytest.approx(rule.billed_seconds(ran), abs=1e-6), (cloud, ran)
        mine = [r for r in rows if r["x_Attempt"] == str(n)]
        assert {r["RegionName"] for r in mine} == {names[cloud]}
        assert {r["SkuId"] for r in mine} == {f"{cloud}:{a.instance_type}"}
    services = {r["ServiceName"] for r in rows}
    assert {"Amazon Elastic Compute Cloud", "Compute Engine", "Virtual Machines"} <= services
    # the note under the table names the rule of each cloud the sim played, as billed
    text = runner.invoke(cli, ["cost", job_id, "--store", url], env={"NO_COLOR": "1"}).output
    for cloud in ("aws", "gcp", "azure"):
        assert f"{billing_for(cloud).rule} ({cloud})" in text, text
