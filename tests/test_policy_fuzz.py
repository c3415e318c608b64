"""Fuzz: random and malformed YAML never gives a traceback, and every error names a location."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import PolicyError, parse_policy
from policies.model import Policy

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = (REPO / "policies" / "spot-finetune.yaml").read_text()
LOCATION = re.compile(r"^p\.yaml:\d+:\d+: \S")


def check(text: str) -> None:
    try:
        result = parse_policy(text, "p.yaml")
    except PolicyError as exc:
        assert exc.issues, "a PolicyError must carry at least one issue"
        for issue in exc.issues:
            assert issue.line >= 1 and issue.column >= 1
            assert LOCATION.match(str(issue)), str(issue)
    else:
        assert isinstance(result, Policy)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["spot", "EEA", "48h", "A100", "SIGUSR1", "-1", "0"]),
)
keys = st.one_of(
    st.sampled_from(
        [
            "name",
            "job",
            "resources",
            "gpus",
            "gpu_count",
            "workload",
            "parameters_b",
            "market",
            "bid_cap",
            "max_spot_price_per_gpu_hour",
            "budget",
            "max_total",
            "deadline",
            "residency",
            "allow",
            "latency",
            "targets",
            "lat",
            "lon",
            "checkpoint",
            "interval",
            "restart",
            "windows",
            "cron",
            "duration",
        ]
    ),
    st.text(max_size=8),
)
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=5)),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents)
def test_random_structures(doc: object) -> None:
    check(yaml.safe_dump(doc, allow_unicode=True))


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_mutated_example(data: st.DataObject) -> None:
    text = EXAMPLE
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["delete", "insert", "dup", "swap"]))
        i = data.draw(st.integers(0, len(text)))
        if op == "delete":
            text = text[:i] + text[i + data.draw(st.integers(1, 20)) :]
        elif op == "insert":
            text = (
                text[:i]
                + data.draw(st.text(alphabet=":-[]{}&*!|>'\"#%@` \n\tx0", max_size=6))
                + text[i:]
            )
        elif op == "dup":
            lines = text.splitlines()
            j = data.draw(st.integers(0, max(0, len(lines) - 1)))
            lines.insert(j, lines[j] if lines else "")
            text = "\n".join(lines)
        else:
            lines = text.splitlines()
            if len(lines) > 1:
                a = data.draw(st.integers(0, len(lines) - 1))
                b = data.draw(st.integers(0, len(lines) - 1))
                lines[a], lines[b] = lines[b], lines[a]
            text = "\n".join(lines)
    check(text)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=200))
def test_random_text(text: str) -> None:
    check(text)


def test_hostile_documents() -> None:
    for text in [
        "a: &a [*a]",  # recursive alias
        "x: " + "[" * 5000,  # deep nesting
        "lol: &a [1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\nc: [*b,*b,*b,*b,*b,*b,*b,*b]",
        "!!python/object/apply:os.system ['echo hi']",
        "name: \x00",
        "\ufeffname: bom",
        "resources: {gpus: !!binary aGVsbG8=}",
    ]:
        check(text)


def test_cli_never_prints_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbid_cap:\n  max_spot_price_per_gpu_hour: -1\nresidency: {allow: EU\n")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    for f in (bad, binary, tmp_path / "missing.yaml", tmp_path):
        proc = subprocess.run(
            [sys.executable, "-m", "provisioner", "policy", "check", str(f)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr + proc.stdout
        assert str(f) in proc.stderr
