"""``provisioner probe`` on the CPU: the numpy path measures for real; NVML is a fake module
object injected in place of ``pynvml`` (tests/fakes/nvml.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from provisioner.cli import cli
from provisioner.probe import nvml as nvml_
from provisioner.probe.backends import Device, NumpyBackend
from provisioner.probe.datasheet import compare, headline, model_of
from provisioner.probe.run import ProbeOptions, run_probe
from tests.fakes.nvml import FakeGPU, FakeNVML

REPO = Path(__file__).resolve().parents[2]
TINY = ProbeOptions(size=128, seconds=0.02, buffer_mib=4)


class LabelledGPUs(NumpyBackend):
    """numpy's arithmetic on devices named as GPUs: the multi-GPU paths (peers, the headline
    over several GPUs, NVML beside the figures) on a machine with none. The figures are the
    CPU's, so against an A100's datasheet they come out far below 1, as they should."""

    name = "numpy-as-gpus"

    def __init__(self, names: list[str]) -> None:
        super().__init__()
        self.names = names

    def devices(self) -> list[Device]:
        return [Device(i, n, "gpu", (8, 0), 40 << 30) for i, n in enumerate(self.names)]

    def precisions(self, device: Device) -> list[str]:
        return ["fp32", "bf16"]

    def h2d_gbs(self, device: Device, nbytes: int, seconds: float) -> float | None:
        return self.copy_gbs(device, nbytes, seconds) / 2

    def peer_gbs(self, src: Device, dst: Device, nbytes: int, seconds: float) -> float | None:
        return self.copy_gbs(src, nbytes, seconds) / 2


def test_numpy_probe_measures_the_cpu_without_nvml() -> None:
    report = run_probe(TINY, backend=NumpyBackend(), nvml=FakeNVML(fail_init=True))
    names = {f["name"] for f in report["figures"]}
    assert names == {"matmul_fp32", "memory_copy"}
    for f in report["figures"]:
        assert f["value"] > 0 and f["method"].startswith("numpy:")
        assert f["datasheet"] is None and f["ratio"] is None  # a CPU has no row in gpus.csv
    assert report["devices"][0]["kind"] == "cpu"
    assert report["nvml"] == {"available": False, "note": "NVML cannot start: Driver Not Loaded"}
    assert report["summary"]["fraction"] is None and "no GPU" in report["summary"]["note"]
    json.dumps(report)  # JSON-ready


def test_probe_samples_nvml_before_and_under_load() -> None:
    fake = FakeNVML(
        [FakeGPU(utilization=97, power_mw=390_500, sm_clock=1005, throttle_bits=0x4 | 0x40)]
    )
    report = run_probe(TINY, backend=NumpyBackend(), nvml=fake)
    nv = report["nvml"]
    assert nv["available"] and nv["driver"] == "550.54.15"
    idle = nv["idle"][0]
    assert idle["name"] == "NVIDIA A100-SXM4-40GB" and idle["power_w"] == 390.5
    assert idle["power_limit_w"] == 400.0 and idle["memory_total_mib"] == 40 * 1024
    assert idle["throttle_reasons"] == ["sw_power_cap", "hw_thermal_slowdown"]
    load = nv["under_load"][0]
    assert load["samples"] >= 1
    assert load["clock_fraction"] == pytest.approx(1005 / 1410, abs=1e-3)
    assert load["slowdowns"] == ["hw_thermal_slowdown", "sw_power_cap"]
    assert fake.shutdowns >= 1  # NVML is shut down after the probe


def test_unsupported_nvml_queries_leave_the_figure_empty() -> None:
    fake = FakeNVML([FakeGPU(supported={"power": False, "throttle": False})])
    rows = nvml_.sample_gpus(fake)
    assert rows is not None
    assert rows[0]["power_w"] is None and rows[0]["power_limit_w"] is None
    assert rows[0]["utilization_pct"] == 0.0 and rows[0]["throttle_reasons"] == []
    assert nvml_.sample_gpus(FakeNVML(fail_init=True)) is None


def test_a_node_of_gpus_gets_peers_paths_and_a_headline() -> None:
    fake = FakeNVML([FakeGPU(), FakeGPU(), FakeGPU(nvlinks=0)])
    backend = LabelledGPUs(["NVIDIA A100-SXM4-40GB"] * 3)
    report = run_probe(TINY, backend=backend, nvml=fake)
    peers = [f for f in report["figures"] if f["name"] == "peer"]
    assert [(p["device"], p["peer"], p["path"]) for p in peers] == [
        (0, 1, "nvlink"),
        (0, 2, "pcie"),
    ]
    assert all(p["datasheet"] == 300.0 for p in peers)  # NVLink3 600 GB/s both ways, halved
    h2d = next(f for f in report["figures"] if f["name"] == "host_to_device")
    assert h2d["datasheet"] == 31.5  # A100: PCIe4 x16, one direction
    bf16 = [f for f in report["figures"] if f["name"] == "matmul_bf16"]
    assert all(f["datasheet"] == 312.0 for f in bf16)
    s = report["summary"]
    assert s["gpu"] == "A100" and s["gpu_count"] == 3 and s["precision"] == "bf16"
    assert s["fraction"] == min(f["ratio"] for f in bf16)  # the slowest GPU
    assert 0 < s["fraction"] < 0.5  # CPU arithmetic against an A100's datasheet
    full = run_probe(
        ProbeOptions(size=64, seconds=0.01, buffer_mib=1, all_pairs=True), backend=backend
    )
    assert len([f for f in full["figures"] if f["name"] == "peer"]) == 6


def test_headline_prefers_the_planners_precision_and_takes_the_slowest_gpu() -> None:
    figs = [
        compare("matmul_fp32", 0, 18.0, "m", "A100"),
        compare("matmul_bf16", 0, 280.0, "m", "A100"),
        compare("matmul_bf16", 1, 156.0, "m", "A100"),  # a throttled card
    ]
    gpus = [{"index": 0, "model": "A100"}, {"index": 1, "model": "A100"}]
    s = headline(figs, gpus)
    assert s["precision"] == "bf16" and s["fraction"] == 0.5 and s["tflops"] == 436.0
    assert s["fraction_by_gpu"] == {"0": 0.8974, "1": 0.5}
    # V100: no BF16 on the datasheet, FP16 is the planner's figure
    v = headline([compare("matmul_fp16", 0, 100.0, "m", "V100")], [{"index": 0, "model": "V100"}])
    assert v["precision"] == "fp16" and v["fraction"] == 0.8


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("Tesla T4", "T4"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA H200", "H200"),
        ("AMD Instinct MI300X", "MI300X"),
        ("Intel Xeon", None),
    ],
)
def test_driver_names_map_to_datasheet_rows(name: str, model: str | None) -> None:
    assert model_of(name) == model


def test_cli_probe_json_help_and_bad_input() -> None:
    runner = CliRunner()
    res = runner.invoke(
        cli, ["probe", "--json", "--backend", "numpy", "--size", "128", "--seconds", "0.02"]
    )
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["backend"] == "numpy" and doc["figures"][0]["name"] == "matmul_fp32"
    assert "probe:" in res.stderr  # progress goes to stderr, never into the JSON
    res = runner.invoke(cli, ["probe", "--help"])
    assert res.exit_code == 0 and "--full" in res.stdout and "--json" in res.stdout
    assert runner.invoke(cli, ["probe", "--size", "3"]).exit_code == 2
    bad = runner.invoke(cli, ["probe", "--gpu", "Z9000"])
    assert bad.exit_code == 2 and "unknown GPU" in bad.stderr


def test_cli_probe_text_and_output_file(tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    res = subprocess.run(
        [sys.executable, "-m", "provisioner", "probe", "--size", "128", "--seconds", "0.02",
         "--buffer-mib", "4", "--output", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "matmul_fp32" in res.stdout and "TFLOPS" in res.stdout
    assert json.loads(out.read_text())["figures"]
