"""The README's Quick start and .ci/run must tell the same story."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def quick_start_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    m = re.search(r"^#{1,6}[^\n]*quick ?start[^\n]*\n", text, re.I | re.M)
    assert m, "README needs a Quick start heading"
    block = re.search(r"^```[^\n]*\n(.*?)^```", text[m.end() :], re.S | re.M)
    assert block
    return [
        ln.strip()
        for ln in block.group(1).splitlines()
        if ln.strip() and not ln.strip().startswith("#")
    ]


def test_quick_start_has_two_commands() -> None:
    cmds = quick_start_commands()
    assert len(cmds) == 2
    assert "policies/spot-finetune.yaml" in cmds[0]
    assert "pytest" in cmds[1]


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert quick_start_commands()[1] in ci
