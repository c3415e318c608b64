"""`provisioner tco`: the commitment maths, residency, the EU night/day example, errors."""

from __future__ import annotations

import json
import struct
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from policies.loader import PolicyError, load_policy, parse_policy
from policies.profile import parse_profile
from provisioner.catalog_files import builtin_catalog, read_commitments
from provisioner.cli import cli
from provisioner.core.planner import PlanContext
from provisioner.core.planner.tco_plan import compare
from provisioner.core.regions import regions
from provisioner.core.tco import (
    Commitment,
    Leg,
    break_even,
    committed,
    pay_per_use,
    peak_instances,
    spot_share,
)

REPO = Path(__file__).resolve().parents[2]
EU_POLICY = str(REPO / "policies" / "eu-tco.yaml")
NIGHT_DAY = str(REPO / "examples" / "tco-night-train-day-serve.yaml")
NOW = PlanContext(now=datetime(2026, 12, 1, tzinfo=UTC))


def invoke(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.stdout, res.stderr


def _phase(text: str) -> object:
    return parse_profile(f"horizon_months: 18\nphases:\n  - {text}\n").phases[0]


def _leg(phase_text: str, n: int, od: float, spot: float | None = None, share: float = 1.0) -> Leg:
    return Leg(_phase(phase_text), "t.8x", 8, n, od, spot, share)  # type: ignore[arg-type]


def test_break_even_against_a_hand_computed_case() -> None:
    # 2 instances at $10/h on-demand, 12 h a day (u = 0.5); a 1-year commitment at an
    # effective $6/h. Break-even u* = 6 / 10 = 0.6: at 0.5 on-demand is cheaper.
    leg = _leg("{name: p, gpu: A100, count: 16, hours_per_day: 12}", 2, 10.0)
    assert leg.phase.utilisation == pytest.approx(0.5)
    assert break_even(6.0, 10.0) == pytest.approx(0.6)
    od = pay_per_use("x", "r", [leg], "on-demand", 18)
    assert od.monthly == pytest.approx(2 * 0.5 * 730 * 10)  # 7,300 a month
    assert od.horizon_cost == pytest.approx(18 * 7300)

    no_up = Commitment("x", "r", "t.8x", "1y", "ri", "no", 6.0, 0.0)
    c = committed("x", "r", [leg], {"t.8x": no_up}, 18)
    assert c is not None
    assert c.monthly == pytest.approx(2 * 6 * 730)  # 8,760 a month, used or not
    assert c.break_even_on_demand == (pytest.approx(0.6),)
    # the second 1-year term runs 6 months past the 18-month horizon: still owed
    assert c.owed_after == pytest.approx(6 * 8760)
    assert c.total == pytest.approx(24 * 8760)

    all_up = Commitment("x", "r", "t.8x", "1y", "ri", "all", 6.0, 6.0 * 8760)
    a = committed("x", "r", [leg], {"t.8x": all_up}, 18)
    assert a is not None and a.monthly == 0.0
    assert a.upfront_at == ((0, 2 * 52560.0), (12, 2 * 52560.0))
    curve = a.cumulative()
    assert curve[0] == pytest.approx(105120) and curve[11] == curve[0]
    assert curve[12] == pytest.approx(210240)

    # at exactly u* the commitment and on-demand cost the same per month
    at_be = _leg("{name: p, gpu: A100, count: 16, hours_per_day: 14.4}", 2, 10.0)
    assert pay_per_use("x", "r", [at_be], "on-demand", 12).monthly == pytest.approx(c.monthly)


def test_spot_share_and_blend() -> None:
    assert spot_share(0.175) == pytest.approx(0.825)
    assert spot_share(None) == pytest.approx(0.9)  # no band published: 10%
    leg = _leg("{name: p, gpu: A100, count: 8, hours_per_day: 24}", 1, 10.0, 4.0, 0.9)
    assert leg.spot_blend == pytest.approx(0.9 * 4 + 0.1 * 10)  # 4.6
    # against spot with fallback, a $6/h commitment pays only above 130% use: never
    assert break_even(6.0, leg.spot_blend) == pytest.approx(6 / 4.6)


def test_phases_in_windows_that_do_not_overlap_share_committed_instances() -> None:
    night = _leg('{name: a, gpu: A100, count: 32, window: "22:00-06:00"}', 4, 10.0)
    day = _leg('{name: b, gpu: A100, count: 8, window: "06:00-22:00"}', 1, 10.0)
    assert peak_instances([night, day]) == 4
    late = _leg('{name: c, gpu: A100, count: 16, window: "00:00-08:00"}', 2, 10.0)
    assert peak_instances([night, late]) == 6
    hours_only = _leg("{name: d, gpu: A100, count: 8, hours_per_day: 2}", 1, 10.0)
    assert peak_instances([night, hours_only]) == 5  # no window: taken to overlap


def test_a_forbidden_regions_commitments_are_never_offered() -> None:
    catalog, commitments = builtin_catalog(), read_commitments()
    profile = parse_profile(Path(NIGHT_DAY).read_text())
    us_east = [c for c in commitments if c.provider == "aws" and c.region == "us-east-1"]
    assert any(c.instance_type == "p4d.24xlarge" for c in us_east), "the file has US offers"
    eu = compare(profile, load_policy(EU_POLICY), catalog, commitments, NOW)
    assert eu.options and any(o.term for o in eu.options)
    for o in eu.options:
        assert "EEA" in regions()[(o.provider, o.region)].jurisdictions, o.label
    # the same workload under a US policy is offered us-east-1's commitments
    us_text = Path(EU_POLICY).read_text().replace("allow: [EEA]", "allow: [US]")
    us = compare(profile, parse_policy(us_text), catalog, commitments, NOW)
    assert any(o.region == "us-east-1" and o.term == "3y" for o in us.options)


def test_budget_total_rejects_options_over_it() -> None:
    catalog, commitments = builtin_catalog(), read_commitments()
    profile = parse_profile(Path(NIGHT_DAY).read_text())
    text = Path(EU_POLICY).read_text().replace("budget:\n", "budget:\n  max_total: 150000\n")
    res = compare(profile, parse_policy(text), catalog, commitments, NOW)
    assert res.options and all(o.total <= 150000 for o in res.options)
    assert res.rejected["budget_total"] > 0


def test_eu_night_day_example_answers_with_a_table_and_a_png(tmp_path: Path) -> None:
    png = tmp_path / "tco.png"
    code, out, err = invoke(
        "tco", "--policy", EU_POLICY, "--profile", NIGHT_DAY, "--plot", str(png), "--top", "200"
    )
    assert code == 0, err
    assert "night-train-day-serve" in out and "break-even" in out
    for word in ("spot+fallback", "reserved-instance 3y", "cud 3y", "reservation 1y"):
        assert word in out, word
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # IHDR
    assert (width, height) == (1000, 550) and len(data) > 20_000


def test_json_shape() -> None:
    code, out, _ = invoke("tco", "--policy", EU_POLICY, "--profile", NIGHT_DAY, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["horizon_months"] == 36 and doc["currency"] == "USD"
    assert [p["name"] for p in doc["phases"]] == ["train", "serve"]
    assert doc["best"] == doc["options"][0]
    totals = [o["total"] for o in doc["options"]]
    assert totals == sorted(totals)
    kinds = {o["option"] for o in doc["options"]}
    assert {"on-demand", "spot+fallback", "reserved-instance", "cud"} <= kinds
    o = next(o for o in doc["options"] if o["term"] == "3y")
    assert len(o["cumulative"]) == 37
    assert len(o["break_even_utilisation_vs_on_demand"]) == 2
    assert o["cumulative"][-1] == pytest.approx(o["horizon_cost"], abs=0.05)
    assert doc["assumptions"] and doc["regions"][0]["legs"][0]["expected_spot_share"] <= 1


def test_bad_profile_exits_2_with_file_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "horizon_months: 12\nphases:\n  - name: t\n    gpu: A100\n    count: -1\n"
        "    hours_per_day: 8\n"
    )
    code, _, err = invoke("tco", "--policy", EU_POLICY, "--profile", str(bad))
    assert code == 2
    assert f"{bad}:5:" in err and "count" in err and "Traceback" not in err
    typo = tmp_path / "typo.yaml"
    typo.write_text("horizon_month: 12\nphases: []\n")
    code, _, err = invoke("tco", "--policy", EU_POLICY, "--profile", str(typo))
    assert code == 2 and f"{typo}:1:1: unknown key 'horizon_month'" in err
    code, _, err = invoke("tco", "--policy", EU_POLICY, "--profile", str(tmp_path / "no.yaml"))
    assert code == 2 and "no such file" in err


def test_profile_errors_are_located() -> None:
    with pytest.raises(PolicyError) as exc:
        parse_profile(
            'horizon_months: 12\nphases:\n  - {name: a, gpu: A100, count: 1, window: "9-5"}\n',
            "p.yaml",
        )
    assert str(exc.value).startswith("p.yaml:3:") and "daily window" in str(exc.value)
    with pytest.raises(PolicyError) as exc:
        parse_profile("horizon_months: 12\nphases:\n  - {name: a, gpu: NoSuch, count: 1}\n")
    assert "unknown GPU" in str(exc.value)


def test_help() -> None:
    code, out, _ = invoke("tco", "--help")
    assert code == 0 and "--profile" in out and "--plot" in out and "break-even" in out
    code, out, _ = invoke("--help")
    assert "tco" in out


SHARED = REPO.parent / "shared" / "data"


def test_commitments_file_rows_are_offers_and_below_on_demand() -> None:
    od: dict[tuple[str, str, str], float] = {}
    for o in builtin_catalog().offers:
        if o.price is not None:
            key = (o.provider, o.region, o.instance_type)
            od[key] = min(od.get(key, o.price), o.price)
    rows = read_commitments()
    assert {c.provider for c in rows} == {"aws", "gcp", "azure", "alibaba", "tencent"}
    for c in rows:
        key = (c.provider, c.region, c.instance_type)
        assert key in od, key
        assert 0 < c.hourly < od[key], (key, c.term, c.option)
        assert c.source and c.date
        if c.payment == "all":
            assert c.upfront == pytest.approx(c.hourly * 730 * c.term_months, rel=1e-3)
            assert c.monthly == 0.0
        if c.provider not in ("aws", "gcp"):
            assert c.source.startswith("published rate"), c.source


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_commitments_csv_is_what_the_generator_writes() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "build_commitments.py"),
            "--check",
            "--shared",
            str(SHARED),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_plot_without_matplotlib_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import raises ImportError
    png = tmp_path / "x.png"
    code, _, err = invoke("tco", "--policy", EU_POLICY, "--profile", NIGHT_DAY, "--plot", str(png))
    assert code == 2 and "provisioner[plot]" in err and not png.exists()


def test_a_spot_only_policy_is_offered_no_commitments_or_on_demand() -> None:
    text = Path(EU_POLICY).read_text().replace("market: spot-then-on-demand", "market: spot")
    res = compare(
        parse_profile(Path(NIGHT_DAY).read_text()),
        parse_policy(text),
        builtin_catalog(),
        read_commitments(),
        NOW,
    )
    assert res.options == [] and res.regions  # placed on spot, but spot alone is not costed
    assert "spot only" in res.notes[0]


def test_no_color_leaves_no_escape_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    code, out, _ = invoke("tco", "--policy", EU_POLICY, "--profile", NIGHT_DAY, "--top", "3")
    assert code == 0 and "\x1b[" not in out


def test_the_policys_gpu_list_bounds_the_phases() -> None:
    text = Path(EU_POLICY).read_text().replace("gpus: [A100, A100-80GB]", "gpus: [H100]")
    res = compare(
        parse_profile(Path(NIGHT_DAY).read_text()),
        parse_policy(text),
        builtin_catalog(),
        read_commitments(),
        NOW,
    )
    assert res.options == [] and any("resources.gpus" in n for n in res.notes)


def test_a_bad_commitments_file_exits_2_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "c.csv"
    bad.write_text(
        "provider,region,instance_type,term,option,payment,hourly,upfront,source,date\n"
        "gcp,europe-west4,a2-highgpu-2g,3y,cud,no,2.6,0,x,2026-01-01\n"
        "gcp,europe-west4,a2-highgpu-2g,5y,cud,no,2.6,0,x,2026-01-01\n"
    )
    code, _, err = invoke(
        "tco", "--policy", EU_POLICY, "--profile", NIGHT_DAY, "--commitments", str(bad)
    )
    assert code == 2 and f"{bad}:3:" in err and "term" in err
    bad.write_text(bad.read_text().replace("5y", "1y"))
    code, out, _ = invoke(
        "tco", "--policy", EU_POLICY, "--profile", NIGHT_DAY, "--commitments", str(bad), "--json"
    )
    doc = json.loads(out)
    assert code == 0 and {o["option"] for o in doc["options"] if o["term"]} == {"cud"}


def test_live_commitments_round_trip_from_refresh_into_tco(tmp_path: Path) -> None:
    """catalog refresh --commitments-out against the Azure fake writes commitments.csv's
    layout; tco --commitments reads it and prices the reservation option with those figures."""
    pytest.importorskip("azure.core")
    from fakes.azure_server import AzureServer

    from provisioner.catalog_files import COMMITMENT_COLUMNS

    a100 = "Standard_NC24ads_A100_v4"
    live = tmp_path / "live.csv"
    with AzureServer(token="eyJ0.tco-roundtrip-token.0123456789") as server:
        code, out, err = invoke(
            "catalog",
            "refresh",
            "--provider",
            "azure",
            "-o",
            f"subscription_id={server.subscription_id}",
            "-o",
            f"resource_group={server.resource_group}",
            "-o",
            "location=eastus",
            "-o",
            f"endpoint={server.endpoint}",
            "-o",
            "credentials=eyJ0.tco-roundtrip-token.0123456789",
            "--store",
            f"sqlite:///{tmp_path / 's.db'}",
            "--commitments-out",
            str(live),
            "--json",
        )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["commitments_file"] == str(live)
    assert live.read_text().splitlines()[0] == ",".join(COMMITMENT_COLUMNS)
    written = read_commitments(live)
    assert doc["commitments_written"] == len(written)
    assert {c.region for c in written} == {"eastus"}
    rows = {(c.term, c.payment): c for c in written if c.instance_type == a100}
    assert len(rows) == 4  # 1 and 3 years, each paid upfront or monthly
    year, three = round(3.673 * 0.62 * 8760, 2), round(3.673 * 0.4 * 26280, 2)  # the fake's
    assert rows[("1y", "all")].upfront == pytest.approx(year)
    assert rows[("1y", "no")].hourly == pytest.approx(year / 8760)
    assert rows[("3y", "all")].hourly == pytest.approx(three / 26280)
    assert {c.option for c in rows.values()} == {"reservation"}
    assert all(c.source == "Azure Retail Prices API (Reservation)" for c in rows.values())

    policy = tmp_path / "p.yaml"
    policy.write_text(
        "name: az\nresources:\n  gpus: [A100-80GB]\nmarket: spot-then-on-demand\n"
        "residency:\n  providers: [azure]\n  allow_regions: [eastus]\n"
    )
    profile = tmp_path / "w.yaml"
    profile.write_text(
        "horizon_months: 12\nphases:\n  - {name: serve, gpu: A100-80GB, count: 2, "
        "hours_per_day: 24}\n"
    )
    code, out, err = invoke(
        "tco", "--policy", str(policy), "--profile", str(profile), "--commitments", str(live),
        "--json",
    )  # fmt: skip
    assert code == 0, err
    options = {(o["option"], o["term"], o["payment"]): o for o in json.loads(out)["options"]}
    res = options[("reservation", "1y", "all")]
    assert res["region"] == "eastus" and res["sources"] == ["Azure Retail Prices API (Reservation)"]
    assert res["upfront"] == [{"month": 0, "usd": pytest.approx(2 * year, abs=0.01)}]
    assert res["total"] == pytest.approx(2 * year, abs=0.05)
    assert res["break_even_utilisation_vs_on_demand"] == [pytest.approx(0.62, abs=1e-4)]
    monthly = options[("reservation", "1y", "no")]
    assert monthly["monthly"] == pytest.approx(2 * year / 12, abs=0.01)
    assert ("reservation", "3y", "all") in options  # a 3-year term, owed past the horizon
    # the built-in file's offers are not mixed in: no reserved-instance, no cud
    assert {k[0] for k in options if k[1]} == {"reservation"}


def test_refresh_refuses_commitments_from_a_provider_without_them(tmp_path: Path) -> None:
    out_csv = tmp_path / "c.csv"
    store = f"sqlite:///{tmp_path / 's.db'}"
    code, _, err = invoke(
        "catalog", "refresh", "--provider", "sim", "--store", store,
        "--commitments-out", str(out_csv),
    )  # fmt: skip
    assert code == 2 and "sim quotes no commitment prices live" in err
    assert not out_csv.exists()
