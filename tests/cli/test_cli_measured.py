"""``provisioner status`` shows a job's probes and GPU utilisation; ``catalog measured``
shows the store's measured figures beside the datasheet (on a real SQLite store)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from click.testing import CliRunner

from provisioner.cli import cli
from provisioner.control.store import Store
from provisioner.control.store.probes import save_probe
from provisioner.control.store.schema import AttemptRow

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def seeded(tmp_path: Path) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    job = store.submit(
        name="m", policy_yaml="name: m\n", policy_path=None, provider="aws",
        provider_options={}, now=NOW, deadline=None, work_total_h=None,
    )  # fmt: skip
    store.add_attempt(
        AttemptRow(
            job_id=job.id,
            attempt=1,
            token="t",
            provider="aws",
            region="us-east-1",
            zone="us-east-1a",
            instance_type="p4d.24xlarge",
            gpu="A100",
            gpu_count=8,
            market="spot",
            price_per_hour=12.0,
            bid_cap_per_hour=None,
            instance_id="i-1",
            state="running",
            reason="",
            created_at=NOW,
        )
    )
    store.update_job(
        job.id,
        at=NOW,
        progress={"attempt": 1, "gpu": [{"index": 0, "utilization_pct": 3.0}],
                  "gpu_idle": {"since": "2026-12-03T09:10:00Z", "threshold_pct": 5}},
    )  # fmt: skip
    for attempt, fraction in ((1, 0.62), (None, 0.66), (None, 0.7)):
        report = {
            "backend": "torch",
            "summary": {"fraction": fraction, "precision": "bf16", "tflops": 312 * 8 * fraction},
        }
        save_probe(
            store, job_id=job.id if attempt else None, attempt=attempt, provider="aws",
            instance_type="p4d.24xlarge", gpu="A100", gpu_count=8, zone="us-east-1a",
            instance_id="i-1", at=NOW, report=report, verdict="below" if attempt else "ok",
        )  # fmt: skip
    assert not save_probe(
        store,
        job_id=job.id,
        attempt=1,
        provider="aws",
        instance_type="p4d.24xlarge",
        gpu="A100",
        gpu_count=8,
        zone="us-east-1a",
        instance_id="i-1",
        at=NOW,
        report={},
        verdict="ok",
    )  # fmt: skip  (one row per attempt: a second write is a no-op)
    store.close()
    return url, job.id


def test_status_shows_probes_and_utilisation(tmp_path: Path) -> None:
    url, job_id = seeded(tmp_path)
    runner = CliRunner()
    res = runner.invoke(cli, ["status", job_id, "--store", url, "--json"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    (p,) = doc["probes"]
    assert (p["attempt"], p["fraction"], p["verdict"], p["gpu"]) == (1, 0.62, "below", "8x A100")
    text = runner.invoke(cli, ["status", job_id, "--store", url]).stdout
    assert "probe, attempt 1: p4d.24xlarge (8x A100) 62% of datasheet BF16" in text
    assert "GPU utilisation: 3% (every GPU under 5% since 2026-12-03T09:10:00Z)" in text


def test_catalog_measured_beside_the_datasheet(tmp_path: Path) -> None:
    url, _ = seeded(tmp_path)
    runner = CliRunner()
    res = runner.invoke(cli, ["catalog", "measured", "--store", url, "--json"])
    assert res.exit_code == 0, res.stderr
    (row,) = json.loads(res.stdout)["measured"]
    assert (row["provider"], row["instance_type"], row["runs"]) == ("aws", "p4d.24xlarge", 3)
    assert row["fraction"] == 0.66 and row["lowest"] == 0.62 and row["gpu_count"] == 8
    assert row["datasheet_tflops"] == 312 * 8
    assert row["measured_tflops_per_dollar"] == row["datasheet_tflops_per_dollar"] * 0.66
    text = runner.invoke(cli, ["catalog", "measured", "--store", url]).stdout
    assert "p4d.24xlarge" in text and "66%" in text
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    assert runner.invoke(cli, ["catalog", "measured", "--store", empty]).exit_code == 3
    assert runner.invoke(cli, ["catalog", "measured", "--gpu", "Z1", "--store", url]).exit_code == 2


def test_plan_measured_ranks_on_the_stores_probes(tmp_path: Path) -> None:
    url, _ = seeded(tmp_path)
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "market: on-demand\nresources: {gpus: [A100], gpu_count: 8}\n"
        "residency: {providers: [aws]}\n"
        "preferences: {price: 0, interruption_risk: 0, tflops_per_dollar: 1}\n"
    )
    runner = CliRunner()
    plain = runner.invoke(cli, ["plan", "--policy", str(policy), "--json", "--top", "50"])
    assert plain.exit_code == 0, plain.stderr
    res = runner.invoke(
        cli, ["plan", "--policy", str(policy), "--json", "--top", "50", "--measured",
              "--store", url],
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    before = {p["instance_type"]: p for p in json.loads(plain.stdout)["placements"]}
    after = {p["instance_type"]: p for p in json.loads(res.stdout)["placements"]}
    p4d_before, p4d_after = before["p4d.24xlarge"], after["p4d.24xlarge"]
    assert p4d_after["tflops_per_dollar"] == round(p4d_before["tflops_per_dollar"] * 0.66, 3)
    assert any(r.startswith("measured") and "over 3 run(s)" in r for r in p4d_after["reasons"])
    text = runner.invoke(
        cli, ["plan", "--policy", str(policy), "--top", "50", "--measured", "--store", url]
    ).stdout
    assert "p4d.24xlarge: measured" in text and "(66% of datasheet" in text
