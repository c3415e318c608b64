from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from provisioner.simulate.traces import (
    TraceError,
    load_trace,
    step_for,
    synthetic_trace,
    window_starts,
)

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
TRACES = SHARED / "traces" / "cant_be_late" / "availability" / "1-node"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_json_trace_round_trip(tmp_path: Path) -> None:
    doc = {"metadata": {"gap_seconds": 600}, "data": [1, 0, 0, 1], "prices": [0.9, 0.9, 1.0, 1.1]}
    tr = load_trace(write(tmp_path, "us-west-2a_v100_1.json", json.dumps(doc)))
    assert tr.zone == "us-west-2a" and tr.region == "us-west-2"
    assert tr.gap_s == 600 and len(tr) == 4 and tr.duration_h == pytest.approx(4 / 6)
    assert tr.available().tolist() == [True, False, False, True]
    assert tr.prices is not None and tr.prices.tolist() == [0.9, 0.9, 1.0, 1.1]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("[1, 2]", "expected"),
        ('{"metadata": {}, "data": [1]}', "gap_seconds"),
        ('{"metadata": {"gap_seconds": 60}, "data": []}', "non-empty"),
        ('{"metadata": {"gap_seconds": 60}, "data": [1], "prices": [1, 2]}', "one value per"),
        ("{not json", "not valid JSON"),
    ],
)
def test_json_trace_errors_name_the_file(tmp_path: Path, doc: str, message: str) -> None:
    p = write(tmp_path, "bad.json", doc)
    with pytest.raises(TraceError, match=message) as exc:
        load_trace(p)
    assert str(p) in str(exc.value)


def test_csv_trace_with_header_iso_times_and_prices(tmp_path: Path) -> None:
    text = (
        "timestamp,available,price\n"
        "2023-01-01T00:00:00Z,1,0.9\n"
        "2023-01-01T00:05:00Z,0,0.9\n"
        "2023-01-01T00:15:00Z,1,1.2\n"  # a missing row: the previous value holds
        "2023-01-01T00:20:00Z,1,1.3\n"
    )
    tr = load_trace(write(tmp_path, "zone-a.csv", text))
    assert tr.gap_s == 300
    assert tr.values.tolist() == [1, 0, 0, 1, 1]
    assert tr.prices is not None and tr.prices.tolist() == [0.9, 0.9, 0.9, 1.2, 1.3]


def test_csv_trace_epoch_seconds_without_header(tmp_path: Path) -> None:
    tr = load_trace(write(tmp_path, "z.csv", "0,1\n60,1\n120,0\n"))
    assert tr.gap_s == 60 and tr.available().tolist() == [True, True, False]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0,1\n", "at least two rows"),
        ("0,1\n0,1\n", "increase"),
        ("0,1,0.5\n60,1\n", "every row"),
        ("0,1\nsoon,1\n", ":2:"),
    ],
)
def test_csv_trace_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        load_trace(write(tmp_path, "z.csv", text))


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(tmp_path / "nope.json")


def test_available_on_a_coarser_step_needs_the_whole_step() -> None:
    tr = synthetic_trace([1, 1, 1, 0, 1, 1, 1, 1, 1], gap_s=100)
    # steps of 300 s: [0,300) all up; [300,600) has the blip at 300; [600,900) up
    assert tr.available_on(300).tolist() == [True, False, True]
    # a step straddling tick boundaries (250 s): [0,250) up, [250,500) covers tick 3 (down)
    assert tr.available_on(250).tolist() == [True, False, True]


def test_available_on_a_finer_step_repeats_ticks() -> None:
    tr = synthetic_trace([1, 0], gap_s=600)
    assert tr.available_on(300).tolist() == [True, True, False, False]
    assert tr.available_on(600).tolist() == [True, False]


def test_multi_node_traces_count_instances() -> None:
    tr = synthetic_trace([16, 4, 0], gap_s=300)
    assert tr.available(1).tolist() == [True, True, False]
    assert tr.available(8).tolist() == [True, False, False]


def test_window_starts_fit_and_repeat_with_the_seed() -> None:
    a = window_starts(1000, 360, 300, seed=7)
    assert len(a) == 300 and a.min() >= 0 and a.max() <= 640
    assert np.array_equal(a, window_starts(1000, 360, 300, seed=7))
    assert not np.array_equal(a, window_starts(1000, 360, 300, seed=8))
    with pytest.raises(TraceError, match="shorter"):
        window_starts(100, 360, 1, seed=0)


@pytest.mark.parametrize(
    ("overhead", "gap", "step"),
    [
        (720, 600, 360),
        (360, 600, 360),
        (600, 600, 600),
        (360, 195, 180),
        (720, 195, 180),
        (0, 195, 195),
    ],
)
def test_step_divides_the_changeover_within_the_gap(
    overhead: float, gap: float, step: float
) -> None:
    assert step_for(overhead, gap) == step


@pytest.mark.data
def test_real_trace_matches_its_documented_shape() -> None:
    path = TRACES / "aws-10-26-2022" / "us-west-2a_v100_1.json"
    if not path.exists():
        pytest.skip("needs ../shared/data beside the repo")
    tr = load_trace(path)
    assert tr.gap_s == 600 and len(tr) == 3895
    assert set(np.unique(tr.values).tolist()) <= {0.0, 1.0}
    assert 0.75 < tr.available().mean() < 0.85  # index.csv: mean_fraction_available 0.7926
