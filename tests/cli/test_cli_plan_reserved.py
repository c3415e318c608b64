"""``provisioner plan --held sim``: on an account holding a matching reservation, a policy that
allows ``reserved`` ranks it first at a marginal $0/h, naming it, with what is free and what
it costs the team per hour anyway."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from providers.sim import SimProvider
from provisioner.cli import cli

POLICY = """
name: held
job:
  compute_hours: 4
  reference_gpu: A10G
resources:
  gpus: [A10G]
market: {market}
residency:
  allow_regions: [eu-west-1]
"""


@pytest.fixture
def sim_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "sim"
    yield d
    SimProvider(d).shutdown_server(terminate_all=True)


def _plan(tmp_path: Path, sim_dir: Path, market: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    pol = tmp_path / f"{market}.yaml"
    pol.write_text(POLICY.format(market=market))
    res = CliRunner().invoke(
        cli,
        ["plan", "--policy", str(pol), "--held", "sim", "-o", f"state_dir={sim_dir}",
         "-o", "mimic=aws", "--json", "--top", "5"],
    )  # fmt: skip
    return res.exit_code, json.loads(res.stdout) if res.stdout.strip() else {}


def test_plan_ranks_a_held_reservation_first_at_zero_marginal(
    tmp_path: Path, sim_dir: Path
) -> None:
    sim = SimProvider(sim_dir, mimic="aws")
    itype = next(o.instance_type for o in sim.offers() if o.gpu == "A10G" and o.gpu_count == 1
                 and o.zone == "eu-west-1a")  # fmt: skip
    sim.hold(
        [
            {
                "id": "cb-plan",
                "zone": "eu-west-1a",
                "instance_type": itype,
                "kind": "capacity-block",
                "total": 2,
                "ends_at": time.time() + 3 * 86400,
                "held_usd_per_hour": 1.25,
            }
        ]
    )
    code, doc = _plan(tmp_path, sim_dir, "reserved-then-spot-then-on-demand")
    assert code == 0, doc
    first = doc["placements"][0]
    assert first["market"] == "reserved" and first["price_per_hour"] == 0.0
    assert first["instance_type"] == itype and first["zone"] == "eu-west-1a"
    held = first["reservation"]
    assert held["id"] == "cb-plan" and held["free"] == 2 and held["held_usd_per_hour"] == 1.25
    assert any("cb-plan" in r and "$0/h" in r for r in first["reasons"])
    assert all(p["market"] != "reserved" for p in doc["placements"][1:])

    # a policy that does not allow reserved capacity never gets it
    code, doc = _plan(tmp_path, sim_dir, "spot-then-on-demand")
    assert code == 0 and all(p["market"] != "reserved" for p in doc["placements"])


def test_plan_held_from_a_provider_without_the_capability_is_a_clear_error(
    tmp_path: Path,
) -> None:
    pol = tmp_path / "p.yaml"
    pol.write_text(POLICY.format(market="reserved"))
    res = CliRunner().invoke(cli, ["plan", "--policy", str(pol), "--held", "nosuch"])
    assert res.exit_code == 2 and "Traceback" not in (res.output or "")
