"""The facts data under provisioner/data: GPU specs, regions and the built-in offer catalog."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from collections import defaultdict
from datetime import date
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "provisioner" / "data"
SHARED = ROOT.parent / "shared" / "data"

GPUS_HEADER = [
    "model", "vendor", "vram_gb", "mem_bandwidth_gbs", "fp32_tflops", "tf32_tflops",
    "bf16_tflops", "fp16_tflops", "interconnect", "interconnect_gbs", "host_link_gbs", "tdp_w",
    "aliases", "source",
]  # fmt: skip
REGIONS_HEADER = ["provider", "region", "city", "country", "jurisdictions", "lat", "lon", "name"]
OFFERS_HEADER = [
    "provider", "region", "zone", "instance_type", "gpu", "gpu_count", "vcpus", "memory_gib",
    "price", "spot_price", "price_date", "interruption_band",
]  # fmt: skip

PROVIDERS = {"aws", "gcp", "azure", "alibaba", "tencent"}
VOCABULARY = {"EU", "EEA", "GDPR", "CN-mainland", "US", "UK", "CH", "APAC", "EMEA", "AMER"}
EU_MEMBERS = {
    "AT", "BE", "BG", "HR", "CY", "CZ", "DK", "EE", "FI", "FR", "DE", "GR", "HU", "IE", "IT",
    "LV", "LT", "LU", "MT", "NL", "PL", "PT", "RO", "SK", "SI", "ES", "SE",
}  # fmt: skip
EEA_ONLY = {"IS", "LI", "NO"}
#: Countries with an EU adequacy decision (Canada: commercial organisations); not the US.
ADEQUACY = {"CH", "GB", "JP", "KR", "CA", "IL", "NZ", "UY", "AR", "AD", "FO", "GG", "IM", "JE"}
BANDS = {"", "<5%", "5-10%", "10-15%", "15-20%", ">20%"}

#: GPUs the planner must know (the issue's list), by canonical model name.
REQUIRED_GPUS = {
    "K80", "P100", "V100", "V100-32GB", "T4", "A10", "A10G", "L4", "L40S", "A40", "A100",
    "A100-80GB", "H100-PCIE", "H100", "H200", "B200", "MI300X", "RTX-A6000", "RTX-PRO-6000",
}  # fmt: skip


def _read(name: str) -> tuple[list[str], list[dict[str, str]]]:
    path = ROOT / "policies" / name if name == "gpus.csv" else DATA / name
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def _norm(name: str) -> str:
    return "".join(c for c in name.lower() if c.isalnum())


@pytest.fixture(scope="module")
def gpus() -> list[dict[str, str]]:
    header, rows = _read("gpus.csv")
    assert header == GPUS_HEADER
    return rows


@pytest.fixture(scope="module")
def regions() -> list[dict[str, str]]:
    header, rows = _read("regions.csv")
    assert header == REGIONS_HEADER
    return rows


@pytest.fixture(scope="module")
def offers() -> list[dict[str, str]]:
    header, rows = _read("offers.csv")
    assert header == OFFERS_HEADER
    return rows


# ---------------------------------------------------------------------------------- gpus.csv


def test_gpus_parse_with_sane_numbers(gpus: list[dict[str, str]]) -> None:
    assert len({g["model"] for g in gpus}) == len(gpus)
    for g in gpus:
        assert g["vendor"] in {"NVIDIA", "AMD"}, g["model"]
        assert 4 <= float(g["vram_gb"]) <= 300, g["model"]
        assert float(g["mem_bandwidth_gbs"]) > 100, g["model"]
        assert float(g["fp32_tflops"]) > 1, g["model"]
        assert g["interconnect"], g["model"]
        assert float(g["interconnect_gbs"]) > 0, g["model"]
        assert float(g["host_link_gbs"]) in (15.75, 31.5, 63, 126), g["model"]  # PCIe3-6 x16
        assert 50 <= float(g["tdp_w"]) <= 1500, g["model"]
        assert g["source"].strip(), g["model"]
        for col in ("tf32_tflops", "bf16_tflops", "fp16_tflops"):
            if g[col]:
                assert float(g[col]) >= float(g["fp32_tflops"]), (g["model"], col)


def test_required_gpus_are_known(gpus: list[dict[str, str]]) -> None:
    assert {g["model"] for g in gpus} >= REQUIRED_GPUS


def test_key_gpu_figures(gpus: list[dict[str, str]]) -> None:
    """Spot checks against the vendors' datasheets: these drive VRAM and cost decisions."""
    by = {g["model"]: g for g in gpus}
    assert float(by["A100"]["vram_gb"]) == 40 and float(by["A100-80GB"]["vram_gb"]) == 80
    assert float(by["V100"]["vram_gb"]) == 16 and float(by["V100-32GB"]["vram_gb"]) == 32
    assert float(by["H100"]["bf16_tflops"]) == pytest.approx(989.4, rel=0.01)  # dense, not sparse
    assert float(by["H200"]["vram_gb"]) == 141
    assert float(by["L4"]["vram_gb"]) == 24 and float(by["T4"]["vram_gb"]) == 16
    assert float(by["RTX-PRO-6000"]["vram_gb"]) == 96
    assert float(by["MI300X"]["vram_gb"]) == 192
    # no BF16 before Ampere
    for model in ("V100", "V100-32GB", "T4", "P100", "K80"):
        assert by[model]["bf16_tflops"] == "" and by[model]["tf32_tflops"] == "", model


def test_aliases_unique_case_insensitively(gpus: list[dict[str, str]]) -> None:
    owner: dict[str, str] = {}
    for g in gpus:
        names = {g["model"], *(a for a in g["aliases"].split("|") if a)}
        for name in names:
            assert name == name.strip() and name, g["model"]
            for key in (name.lower(), _norm(name)):  # also as policies.gpus normalises names
                assert owner.setdefault(key, g["model"]) == g["model"], (
                    f"{name!r} names both {owner[key]} and {g['model']}"
                )


def test_cloud_names_resolve_through_aliases(gpus: list[dict[str, str]]) -> None:
    table = {}
    for g in gpus:
        for name in (g["model"], *g["aliases"].split("|")):
            if name:
                table[_norm(name)] = g["model"]
    expected = {
        "nvidia-tesla-t4": "T4", "T4G": "T4", "nvidia-l4": "L4", "a100-80gb": "A100-80GB",
        "nvidia-a100-80gb": "A100-80GB", "A100-SXM4-80GB": "A100-80GB", "h100-80gb": "H100",
        "h100-80gb-mega": "H100", "rtx6000": "RTX-PRO-6000", "RTX PRO 6000": "RTX-PRO-6000",
        "nvidia-tesla-v100": "V100", "nvidia-tesla-a100": "A100", "RTX A6000": "RTX-A6000",
    }  # fmt: skip
    for name, model in expected.items():
        assert table.get(_norm(name)) == model, name


# ------------------------------------------------------------------------------- regions.csv


def test_regions_parse(regions: list[dict[str, str]]) -> None:
    keys = [(r["provider"], r["region"]) for r in regions]
    assert len(set(keys)) == len(keys)
    for r in regions:
        assert r["provider"] in PROVIDERS
        assert re.fullmatch(r"[A-Z]{2}", r["country"]), r
        assert r["city"].strip(), r
        assert r["name"].strip() and r["name"] != r["region"], r  # the cloud's display name
        assert -90 <= float(r["lat"]) <= 90 and -180 <= float(r["lon"]) <= 180, r


def test_jurisdictions_follow_the_country(regions: list[dict[str, str]]) -> None:
    for r in regions:
        tags = set(r["jurisdictions"].split("|"))
        cc = r["country"]
        where = f"{r['provider']}/{r['region']}"
        assert tags <= VOCABULARY, where
        assert ("EU" in tags) == (cc in EU_MEMBERS), where
        assert ("EEA" in tags) == (cc in EU_MEMBERS | EEA_ONLY), where
        assert ("GDPR" in tags) == (cc in EU_MEMBERS | EEA_ONLY | ADEQUACY), where
        assert ("CN-mainland" in tags) == (cc == "CN"), where
        assert ("US" in tags) == (cc == "US"), where
        assert ("UK" in tags) == (cc == "GB"), where
        assert ("CH" in tags) == (cc == "CH"), where
        assert len(tags & {"APAC", "EMEA", "AMER"}) == 1, where
        if "EU" in tags:
            assert {"EEA", "GDPR", "EMEA"} <= tags, where


def test_region_examples(regions: list[dict[str, str]]) -> None:
    by = {(r["provider"], r["region"]): r for r in regions}
    assert by[("aws", "eu-central-1")]["jurisdictions"] == "EU|EEA|GDPR|EMEA"
    assert by[("alibaba", "cn-hongkong")]["jurisdictions"] == "APAC"
    assert by[("aws", "us-east-1")]["jurisdictions"] == "US|AMER"
    assert by[("aws", "me-central-1")]["jurisdictions"] == "EMEA"
    assert by[("alibaba", "cn-beijing")]["jurisdictions"] == "CN-mainland|APAC"
    for provider in PROVIDERS:
        assert sum(1 for p, _ in by if p == provider) >= 15, provider


# -------------------------------------------------------------------------------- offers.csv


def test_offers_refer_to_known_gpus_and_regions(
    offers: list[dict[str, str]], gpus: list[dict[str, str]], regions: list[dict[str, str]]
) -> None:
    models = {g["model"] for g in gpus}
    known = {(r["provider"], r["region"]) for r in regions}
    for o in offers:
        assert o["gpu"] in models, o
        assert (o["provider"], o["region"]) in known, o


def test_offer_fields(offers: list[dict[str, str]]) -> None:
    assert len(offers) >= 2000
    seen = set()
    for o in offers:
        key = (o["provider"], o["region"], o["zone"], o["instance_type"])
        assert key not in seen, key
        seen.add(key)
        assert int(o["gpu_count"]) >= 1, o
        assert float(o["vcpus"]) > 0 and float(o["memory_gib"]) > 0, o
        assert o["price"], o
        price = float(o["price"])
        assert price > 0, o
        if o["spot_price"]:
            spot = float(o["spot_price"])
            assert 0 < spot <= price, o
        else:
            assert o["interruption_band"] == "", o
        assert o["interruption_band"] in BANDS, o
        date.fromisoformat(o["price_date"])
        if o["zone"]:
            assert o["zone"].startswith(o["region"]), o


def test_zone_names_follow_each_clouds_style(offers: list[dict[str, str]]) -> None:
    style = {
        "aws": r"[a-z]{2}(-[a-z]+)+-\d[a-z]",
        "gcp": r"[a-z]+(-[a-z]+)*\d+-[a-z]",
        "azure": r"[a-z0-9]+-[1-3]",
        "alibaba": r"[a-z]{2}-[a-z0-9-]+-[a-z]",
        "tencent": r"[a-z]{2}-[a-z]+-\d",
    }
    for o in offers:
        if o["zone"]:
            assert re.fullmatch(style[o["provider"]], o["zone"]), o


def test_every_provider_has_gpu_offers_in_several_regions(offers: list[dict[str, str]]) -> None:
    regions_with_offers: dict[str, set[str]] = defaultdict(set)
    for o in offers:
        regions_with_offers[o["provider"]].add(o["region"])
    for provider in PROVIDERS:
        assert len(regions_with_offers[provider]) >= 3, provider


def test_eu_regions_have_offers_for_a_7b_lora(
    offers: list[dict[str, str]], regions: list[dict[str, str]]
) -> None:
    """A LoRA fine-tune of a 7B model wants a 24 GB-class GPU or better, spot, in the EU."""
    eu = {(r["provider"], r["region"]) for r in regions if "EU" in r["jurisdictions"].split("|")}
    good = {"A10G", "A10", "L4", "L40S", "A100", "A100-80GB", "H100", "RTX-PRO-6000"}
    providers = {
        o["provider"]
        for o in offers
        if (o["provider"], o["region"]) in eu and o["gpu"] in good and o["spot_price"]
    }
    assert providers == PROVIDERS


def test_spot_prices_of_regional_markets_match_across_zones(offers: list[dict[str, str]]) -> None:
    """GCP, Azure, Alibaba and Tencent price spot per region; only AWS varies by zone."""
    prices: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for o in offers:
        if o["provider"] != "aws":
            prices[(o["provider"], o["region"], o["instance_type"])].add(o["spot_price"])
    assert all(len(p) == 1 for p in prices.values())


@pytest.mark.data
@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_offers_csv_is_what_the_generator_writes() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "build_catalog.py"),
            "--check",
            "--shared",
            str(SHARED),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
