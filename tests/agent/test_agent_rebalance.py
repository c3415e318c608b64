"""AWS's rebalance recommendation, an early signal: the sim cloud serves it on its metadata
endpoint from its market's model, the node agent (a real subprocess) reads it over HTTP and
reports it in its progress record without asking the job for a checkpoint."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from providers.aws.notice import parse_rebalance
from providers.facts import cloud_facts
from providers.sim import SimProvider
from providers.sim.market import Market
from provisioner.agent.signals import EarlyReader
from provisioner.agent.spec import AgentSpec
from provisioner.agent.store import CheckpointStore, read_progress
from provisioner.core.models import LaunchRequest
from provisioner.core.models import Market as Mkt
from provisioner.core.rebalance import RebalanceModel, grid
from tests.agent.test_agent import REPO, TRAIN
from tests.waiting import wait_for

GAP = 600.0  # a trace point covers ten simulated minutes


def trace(path: Path, values: list[int]) -> str:
    path.write_text(json.dumps({"metadata": {"gap_seconds": GAP}, "data": values}))
    return str(path)


def test_the_rebalance_answer_is_read() -> None:
    got = parse_rebalance(200, '{"noticeTime": "2020-11-05T08:22:00Z"}')
    assert got is not None and got.deadline is not None
    assert got.deadline.isoformat() == "2020-11-05T08:22:00+00:00"
    assert parse_rebalance(404, "<html>Not Found</html>") is None
    assert parse_rebalance(200, '{"other": 1}') is None


@pytest.fixture
def sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SimProvider]:
    monkeypatch.chdir(REPO)  # the sandbox finds `examples` through the launcher's cwd
    provider = SimProvider(tmp_path / "sim", mimic="aws", mtbp_hours=None, idle_exit_s=60)
    try:
        yield provider
    finally:
        provider.shutdown_server(terminate_all=True)


def test_the_agent_reports_the_recommendation_and_the_job_goes_on(
    sim: SimProvider, tmp_path: Path
) -> None:
    offer = sim.offers()[0]
    # capacity goes one simulated hour in (one real minute at 60 s an hour); the model serves
    # the recommendation from 100 simulated seconds on (under two real seconds)
    path = trace(tmp_path / "z.json", [1] * 6 + [0] * 6)
    sim.configure(
        traces={offer.zone: path},
        rebalance_lead_s=3500.0,
        rebalance_precede_p=1.0,
        rebalance_false_per_day=0.0,
    )
    store_uri = f"file://{tmp_path}/store"
    spec = AgentSpec(
        job_id="job-rb",
        attempt=1,
        command=TRAIN,
        checkpoint_uri=store_uri,
        interval_s=0,
        grace_s=10,
        progress_every_s=0.5,
    )
    inst = sim.launch(
        LaunchRequest(
            job_id=spec.job_id, attempt=1, offer=offer, market=Mkt.SPOT, job_spec=spec.to_dict()
        )
    )
    # the endpoint, over HTTP with the IMDSv2 token, as the agent reads it
    url = sim.sandbox(inst.id)["metadata_url"]
    early = cloud_facts("aws").early
    assert early is not None
    reader = EarlyReader("aws", url, early)
    assert wait_for(lambda: reader.read() is not None, timeout=10)

    def reported() -> dict[str, str] | None:
        return (read_progress(store_uri, spec.job_id) or {}).get("rebalance")

    rb = wait_for(reported, timeout=20)  # the agent looks every 5 s
    assert rb and rb["at"] and "noticeTime" in rb["raw"], rb
    progress = read_progress(store_uri, spec.job_id)
    assert progress is not None
    assert progress["state"] == "running" and progress["notice"] is None  # not a notice
    assert CheckpointStore(store_uri, spec.job_id).latest() is None  # no checkpoint asked for
    sim.terminate(inst.id)


def test_no_recommendation_without_the_model(tmp_path: Path) -> None:
    """No market model (capacity never goes) or a lead of 0: 404, the agent reports none."""
    path = trace(tmp_path / "z.json", [1] * 6 + [0] * 6)
    off = Market(traces={"z": path}, rebalance=RebalanceModel(lead_s=0.0))
    assert off.rebalance_since("z", 0.0, 3000.0) is None
    never = Market(mtbp_hours=None, rebalance=RebalanceModel(precede_p=1.0, false_per_day=9.0))
    assert never.rebalance_since("z", 0.0, 3000.0) is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_sim_serves_what_the_simulator_models(tmp_path: Path, seed: int) -> None:
    """The sim's market and the simulator's drivers see the same recommendations at every
    step of the same trace under the same seed (so the equivalence test can hold)."""
    rng = np.random.default_rng(seed)
    values = (rng.random(300) < 0.85).astype(int)
    path = trace(tmp_path / "z.json", values.tolist())
    model = RebalanceModel(lead_s=900.0, precede_p=0.7, false_per_day=3.0, seed=seed)
    market = Market(traces={"us-east-1a": path}, rebalance=model)
    expected = grid(model, values[:, None].astype(bool), GAP, ["us-east-1a"])[:, 0]
    served = [market.rebalance_since("us-east-1a", 0.0, k * GAP) for k in range(len(values))]
    got = np.asarray([np.nan if s is None else s for s in served])
    assert np.array_equal(got, expected, equal_nan=True)
    assert (~np.isnan(got)).sum() > 3  # some were served
    again = Market(traces={"us-east-1a": path}, rebalance=model)
    assert [again.rebalance_since("us-east-1a", 0.0, k * GAP) for k in range(300)] == served
