"""Accelerate's ``save_state``/``load_state`` through ``provisioner.job.hf``: committed
atomically like any checkpoint, and a run that loads it goes on with the same bits (model,
optimizer and every RNG state restored)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import provisioner.job as job
from tests.frameworks import need


@pytest.fixture(autouse=True)
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(job.ENV_CHECKPOINT_DIR, str(tmp_path / "ck"))
    monkeypatch.delenv(job.ENV_RESUME_FROM, raising=False)
    monkeypatch.delenv(job.ENV_NOTICE_FILE, raising=False)
    job._reset_for_tests()
    yield tmp_path
    job._reset_for_tests()


def test_accelerate_state_saved_committed_and_resumed_bit_identical(env: Path) -> None:
    torch = need("torch")
    need("accelerate")
    from accelerate import Accelerator

    from provisioner.job.hf import load_state, save_state
    from provisioner.job.torch import params_sha256

    torch.manual_seed(0)
    acc = Accelerator(cpu=True)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
    model, opt = acc.prepare(net, torch.optim.AdamW(net.parameters(), lr=1e-2))

    def train(n: int) -> None:
        for _ in range(n):
            x = torch.randn(8, 4)  # the global generator: restored or not, it shows
            acc.backward(model(x).pow(2).mean())
            opt.step()
            opt.zero_grad()

    train(5)
    final = save_state(acc, 5)
    assert final.name == "ckpt-000000005" and job.resume_dir() == final
    assert (env / "ck" / "latest").read_text().strip() == "ckpt-000000005"
    assert not list((env / "ck").glob(".ckpt-*"))
    train(5)
    straight = params_sha256(net)

    with torch.no_grad():  # another state altogether, and the generators moved on
        for p in net.parameters():
            p.zero_()
    torch.manual_seed(123)
    assert load_state(acc) == 5
    train(5)
    assert params_sha256(net) == straight
