"""Fuzz: random, malformed and hostile YAML never gives a traceback, and every error names a
location. The hostile kinds (tests/policy_docs.py) are the ones benchmarks/policy_fuzz.py runs
10,000 of; here a few hundred per run, through both YAML parsers (libyaml and pure Python)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import PolicyError, load_policy, parse_policy, safeyaml
from policies.model import Policy
from tests.policy_docs import KINDS, classify

REPO = Path(__file__).resolve().parents[2]
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


@settings(
    max_examples=400,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_hostile_documents_get_a_located_answer(data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(sorted(KINDS)), label="kind")
    text = data.draw(KINDS[kind](), label="document")
    outcome, detail = classify(text)
    assert outcome in ("accepted", "refused"), f"[{kind}] {outcome}: {detail}"


@settings(max_examples=120, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_hostile_documents_through_the_pure_python_parser(data: st.DataObject) -> None:
    """Where libyaml is not installed the loader falls back to PyYAML's own parser: the same
    limits hold (and reader errors are located by character, not by byte)."""
    kind = data.draw(st.sampled_from(sorted(KINDS)), label="kind")
    text = data.draw(KINDS[kind](), label="document")
    original = safeyaml.loader_class
    safeyaml.loader_class = lambda: yaml.SafeLoader  # type: ignore[assignment]
    try:
        outcome, detail = classify(text)
    finally:
        safeyaml.loader_class = original  # type: ignore[assignment]
    assert outcome in ("accepted", "refused"), f"[{kind}] {outcome}: {detail}"


def alias_bomb(levels: int) -> str:
    lines = ["a0: &a0 [" + ",".join(["x"] * 10) + "]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_the_alias_bomb_is_refused_at_the_alias_that_crosses_the_budget() -> None:
    for levels in (7, 8, 12):
        with pytest.raises(PolicyError) as info:
            parse_policy(alias_bomb(levels), "p.yaml")
        (issue,) = info.value.issues
        # level 3 holds 1,111 values per alias: its 8th alias (line 4) crosses the 10,000 budget
        assert (issue.line, issue.column, issue.field) == (4, 38, "a3[7]"), str(issue)
        assert "alias" in issue.message and "10,000" in issue.message


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("checkpoint: {interval: .inf}", "1:24: checkpoint.interval must be a finite number"),
        ("deadline: 99999999999999999d", "1:11: deadline must be at most 3650d"),
        ("deadline: -5h", "1:11: deadline must be an ISO time"),
        ("checkpoint: {signal: SIG_DFL}", "1:22: checkpoint.signal unknown signal 'SIG_DFL'"),
        ("checkpoint: {signal: kill}", "1:22: checkpoint.signal 'kill' cannot be caught"),
        ("latency: {measured: {a: 5}}", "1:22: latency.measured.a 'a' is not provider:region"),
        ("latency: {measured: {a: .inf}}", "1:25: latency.measured.a must be a finite number"),
        (
            "latency: {measured: {'aws:eu-west-1': 0}}",
            "1:39: latency.measured.aws:eu-west-1 must be > 0",
        ),
        ("budget: {max_total: '1e999'}", "1:21: budget.max_total must be a finite number"),
        ("resources: {gpu_count: " + "9" * 40 + "}", "1:24: resources.gpu_count the number 99"),
        ("name: x\nname: y\n", "2:1: name is given twice"),
        ("a: &a [*a]\n", "1:8: a[0] alias *a is inside the node it names"),
        ("job: {env: {1: x}}", "1:13: job.env.1 key '1' reads as int"),
        ("name: !!binary aGVsbG8=", "1:7: name the tag 'tag:yaml.org,2002:binary' is not used"),
        ("name: a\n---\nname: b\n", "2:1: a policy is one YAML document"),
        ("x: " + "{a: " * 40 + "1" + "}" * 40, "the policy nests deeper than 32 levels"),
        ("name: \x07", "1:7: the character U+0007 is not allowed"),
    ],
)
def test_what_the_loader_refuses(text: str, expect: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.yaml")
    assert expect in str(info.value), str(info.value)
    assert LOCATION.match(str(info.value.issues[0]))


def test_merge_keys_and_aliases_within_the_budget_work() -> None:
    pol = parse_policy(
        "base: &b {max_total: 50, on_exhausted: pause}\n".replace("base", "budget")
        + "residency: {allow: &eu [EEA], deny: []}\n"
        + "windows:\n  - &w {cron: '0 22 * * *', duration: 8h}\n  - {<<: *w, cron: '0 2 * * 6'}\n",
        "p.yaml",
    )
    assert pol.budget.max_total == 50 and pol.residency.allow == ["EEA"]
    assert [w.cron for w in pol.windows] == ["0 22 * * *", "0 2 * * 6"]
    assert {w.duration.total_seconds() for w in pol.windows} == {8 * 3600}


def test_files_that_are_not_policies(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    big = tmp_path / "big.yaml"
    big.write_text("description: " + "x" * 1_000_001 + "\n")
    cases = {
        tmp_path / "missing.yaml": "missing.yaml: no such file",
        tmp_path: "is a directory",
        fifo: "is not a regular file",  # opening it would block until a writer came
        Path("/dev/zero"): "is not a regular file",
        big: "big.yaml:1:1: is larger than 1,000,000 bytes",
    }
    for path, expect in cases.items():
        with pytest.raises(PolicyError) as info:
            load_policy(path)
        assert expect in str(info.value), str(info.value)
        assert ":0:0" not in str(info.value)
