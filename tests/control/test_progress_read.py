"""The daemon's read of a progress file (provisioner.control.jobpass.progress.read_small): the bare
system calls, whole files of any size, and a file it cannot use read as no progress."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from provisioner.control.jobpass.progress import read_small


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 3 * 4096])
def test_whole_file_whatever_its_size(tmp_path: Path, size: int) -> None:
    f = tmp_path / "progress.json"
    data = os.urandom(size)
    f.write_bytes(data)
    assert read_small(str(f), chunk=4096) == data


def test_progress_document_round_trips(tmp_path: Path) -> None:
    f = tmp_path / "progress.json"
    doc = {"state": "running", "attempt": 2, "step": 10, "note": "é ünïcode"}
    f.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    assert json.loads(read_small(str(f)).decode()) == doc


def test_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_small(str(tmp_path / "nope.json"))


def test_bytes_that_are_not_utf8_fail_as_value_error(tmp_path: Path) -> None:
    # read_progress catches ValueError: a half-written or foreign file reads as no progress
    f = tmp_path / "progress.json"
    f.write_bytes(b'{"state": "\xff\xfe"}')
    with pytest.raises(ValueError):
        json.loads(read_small(str(f)).decode())
