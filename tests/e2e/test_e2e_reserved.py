"""End to end on the sim: a job on a capacity block that ends before the job does checkpoints
before the block's usable end and finishes elsewhere, bit-identical to an uninterrupted run.

The sim account holds an AWS-style capacity block (providers/sim/held.py) in one zone. The
policy's market is ``reserved-then-spot``: the daemon plans the block first (marginal $0/h),
launches into it, and from the block's notice time (AWS: 40 minutes before the end, on the
sim's scaled clock) the agent serves itself the notice from its job spec (a block's instance
gets no spot notice in its metadata), checkpoints, and the daemon launches the replacement on
spot made before break; the block's instance is gone before the block's usable end (AWS: 30
minutes before the end, when the cloud begins to terminate them).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from policies import parse_policy
from providers.sim import SimProvider
from provisioner.api import Job, submit
from provisioner.control.store import Store
from provisioner.core.catalog import Catalog
from provisioner.core.planner import PlanContext, plan_offers
from provisioner.core.reserved import END_MARGINS
from tests.e2e_util import reference_result, write_policy

pytestmark = pytest.mark.e2e

ZONES = {"eu-west-1a": "aws", "eu-west-1b": "aws"}
STEPS = 1000
SPH = 60.0  # one simulated hour per real minute: the block's margins are 40 s and 30 s


@pytest.fixture
def sim_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "sim"
    yield d
    SimProvider(d).shutdown_server(terminate_all=True)


def _block_type(policy_path: Path, sim: SimProvider) -> str:
    """The instance type the policy takes in eu-west-1a (what the block holds)."""
    from dataclasses import replace

    pol = parse_policy(
        policy_path.read_text().replace("market: reserved-then-spot", "market: spot")
    )
    offers = [replace(o, provider="aws") for o in sim.offers() if o.zone == "eu-west-1a"]
    plan = plan_offers(pol, Catalog.from_offers(offers), PlanContext(now=datetime.now(UTC)))
    assert plan.best is not None
    return plan.best.offer.instance_type


def test_job_on_a_block_moves_before_its_end(tmp_path: Path, sim_dir: Path) -> None:
    policy = write_policy(
        tmp_path / "p.yaml", steps=STEPS, ckpt=tmp_path / "ck", market="reserved-then-spot"
    )
    options = {
        "state_dir": str(sim_dir),
        "mimic": ZONES,
        "seconds_per_hour": SPH,
        "mtbp_hours": None,
        "idle_exit_s": 120,
        "changeover_s": 5.0,
    }
    sim = SimProvider(**options)
    itype = _block_type(policy, sim)
    m = END_MARGINS["aws"]
    scale = 3600.0 / SPH
    # the block ends ~30 s of work after the job starts: its notice 40 s (sim: 40 min) before
    ends = time.time() + 30.0 + m.warn_s / scale
    block = {
        "id": "cb-e2e",
        "zone": "eu-west-1a",
        "instance_type": itype,
        "kind": "capacity-block",
        "total": 1,
        "ends_at": ends,
        "held_usd_per_hour": 1.5,
    }
    options["reservations"] = [block]
    held = SimProvider(**options).reservations()
    assert [(r.id, r.free) for r in held] == [("cb-e2e", 1)]

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    _, job_id = submit(
        policy, provider="sim", provider_defaults=False, provider_options=options, store=store
    )
    job = Job(store, job_id)
    state = job.wait(timeout=240, poll_s=0.5)
    assert state == "succeeded", job.refresh().reason

    attempts = [a for a in store.attempts(job_id) if a.state != "failed"]
    first, rest = attempts[0], attempts[1:]
    # launched into the block first, at a marginal $0/h, naming it
    assert first.market == "reserved" and first.reservation_id == "cb-e2e"
    assert first.price_per_hour == 0.0 and first.cost_usd == 0.0
    # then moved on before the block's usable end, and finished elsewhere
    assert rest and all(a.market != "reserved" for a in rest)
    usable_end = datetime.fromtimestamp(ends - m.stop_s / scale, UTC)
    assert first.ended_at is not None
    ended = first.ended_at if first.ended_at.tzinfo else first.ended_at.replace(tzinfo=UTC)
    assert ended <= usable_end + timedelta(seconds=1), (ended, usable_end)
    # the block's instance went by our hand (handed over), not by the cloud at the end
    inst = sim.get(first.instance_id or "")
    assert inst.state_reason != "capacity block expired"

    # checkpointed before the end: the same result as an uninterrupted run
    result = job.result
    assert result["params_sha256"] == reference_result(STEPS)["params_sha256"]
    assert result["final_loss"] == reference_result(STEPS)["final_loss"]
    events = [e.kind for e in store.events(job_id)]
    notices = [e.message for e in store.events(job_id) if e.kind == "notice"]
    assert any("capacity block ends" in m for m in notices), events
    assert not [i for i in sim.list({"provisioner-job": job_id}) if i.state.alive]
