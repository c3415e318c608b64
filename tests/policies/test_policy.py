from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from policies import PolicyError, load_policy, parse_policy, policy_schema
from policies.cron import CronSpec, in_window, next_window_start
from policies.model import MarketChoice, parse_duration

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["spot-finetune", "on-demand-inference", "cheapest-anywhere"])
def test_example_policies_load(name: str) -> None:
    pol = load_policy(REPO / "policies" / f"{name}.yaml")
    assert pol.name


def test_spot_finetune_has_what_the_issue_asks() -> None:
    pol = load_policy(REPO / "policies" / "spot-finetune.yaml")
    assert pol.resources.workload is not None
    assert pol.resources.workload.method.value == "lora"
    assert pol.resources.workload.parameters_b == 7
    assert "EEA" in pol.residency.allow
    assert pol.bid_cap.max_spot_price_per_gpu_hour == 1.20
    assert pol.deadline == timedelta(hours=48)
    assert pol.market is MarketChoice.SPOT_THEN_ON_DEMAND


def issues(text: str) -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.yaml")
    return [str(i) for i in info.value.issues]


def test_error_names_file_line_column_and_field() -> None:
    text = "name: x\nbid_cap:\n  max_spot_price_per_gpu_hour: 0\n"
    assert issues(text) == ["p.yaml:3:32: bid_cap.max_spot_price_per_gpu_hour must be > 0"]


def test_unknown_key_suggests_the_close_one() -> None:
    (msg,) = issues("name: x\nbudget:\n  max_totl: 5\n")
    assert msg.startswith("p.yaml:3:3: unknown key 'budget.max_totl'")
    assert "did you mean 'max_total'" in msg


def test_unknown_top_level_key() -> None:
    (msg,) = issues("name: x\nresidncy:\n  allow: [EU]\n")
    assert msg.startswith("p.yaml:2:1:") and "did you mean 'residency'" in msg


def test_several_errors_are_all_reported() -> None:
    msgs = issues("resources:\n  gpu_count: 0\nmarket: cheap\n")
    assert any(m == "p.yaml:2:14: resources.gpu_count must be >= 1" for m in msgs)
    assert any(m.startswith("p.yaml:3:9: market must be one of") for m in msgs)


def test_error_inside_a_list_names_the_index() -> None:
    msgs = issues("windows:\n  - cron: '0 25 * * *'\n    duration: 2h\n")
    assert msgs == ["p.yaml:2:11: windows[0].cron cron hour: '25' is not acceptable, out of range"]


def test_unknown_gpu_is_an_error_with_location() -> None:
    (msg,) = issues("resources:\n  gpus: [A100, A1000]\n")
    assert msg.startswith("p.yaml:2:")
    assert "A1000" in msg


def test_duplicate_keys_are_errors() -> None:
    (msg,) = issues("name: a\nname: b\n")
    assert msg == "p.yaml:2:1: name is given twice; keep one"


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("", "p.yaml:1:1: the policy is empty"),
        ("- a\n- b\n", "p.yaml:1:1: a policy must be a mapping of keys, got list"),
        ("name: [unclosed\n", "p.yaml:2:1: YAML syntax error"),
    ],
)
def test_bad_documents(text: str, expect: str) -> None:
    (msg,) = issues(text)
    assert msg.startswith(expect)


def test_missing_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path / "nope.yaml")
    assert "no such file" in str(info.value)


def test_deadline_forms() -> None:
    assert parse_policy("deadline: 36h").deadline == timedelta(hours=36)
    absolute = parse_policy("deadline: 2026-12-24T18:00:00Z").deadline
    assert absolute == datetime(2026, 12, 24, 18, tzinfo=UTC)
    assert issues("deadline: soon")[0].startswith("p.yaml:1:11: deadline")


def test_durations() -> None:
    assert parse_duration("15m") == timedelta(minutes=15)
    assert parse_duration(90) == timedelta(seconds=90)
    assert parse_duration("1.5d") == timedelta(hours=36)
    with pytest.raises(ValueError):
        parse_duration("fortnight")


def test_signal_names_are_normalised_and_checked() -> None:
    assert parse_policy("checkpoint: {signal: usr1}").checkpoint.signal == "SIGUSR1"
    assert "unknown signal" in issues("checkpoint: {signal: SIGNOPE}")[0]


def test_schema_describes_the_fields() -> None:
    schema = policy_schema()
    assert schema["title"] == "provisioner policy"
    assert {"resources", "bid_cap", "budget", "residency", "latency", "checkpoint"} <= set(
        schema["properties"]
    )


def test_cron_day_of_month_or_day_of_week_like_vixie_cron() -> None:
    # both restricted: either matches (croniter's default, Vixie cron's rule)
    spec = CronSpec.parse("0 0 1 * mon")
    assert spec.matches(datetime(2026, 12, 1, 0, 0, tzinfo=UTC))  # the 1st, a Tuesday
    assert spec.matches(datetime(2026, 12, 7, 0, 0, tzinfo=UTC))  # a Monday
    assert not spec.matches(datetime(2026, 12, 2, 0, 0, tzinfo=UTC))  # neither
    # one of them '*': only the other counts
    assert not CronSpec.parse("0 0 1 * *").matches(datetime(2026, 12, 7, 0, 0, tzinfo=UTC))
    assert CronSpec.parse("0 0 * * 7").matches(datetime(2026, 12, 6, 0, 0, tzinfo=UTC))  # Sunday
    # a date that never comes: no next opening rather than a hang
    assert CronSpec.parse("0 0 31 2 *").next(datetime(2026, 12, 1, tzinfo=UTC)) is None
    with pytest.raises(ValueError, match="5 fields"):
        CronSpec.parse("0 0 0 * * *")  # croniter's seconds field is not policy syntax
    with pytest.raises(ValueError, match=r"cron minute: '\*/0' step"):
        CronSpec.parse("*/0 * * * *")


def test_cron_parsing_and_windows() -> None:
    spec = CronSpec.parse("30 22 * * mon-fri")
    assert spec.matches(datetime(2026, 12, 2, 22, 30, tzinfo=UTC))  # a Wednesday
    assert not spec.matches(datetime(2026, 12, 5, 22, 30, tzinfo=UTC))  # a Saturday
    wins = [("0 22 * * *", timedelta(hours=8))]
    assert in_window(wins, datetime(2026, 12, 3, 3, 0, tzinfo=UTC))
    assert not in_window(wins, datetime(2026, 12, 3, 12, 0, tzinfo=UTC))
    assert next_window_start(wins, datetime(2026, 12, 3, 12, 0, tzinfo=UTC)) == datetime(
        2026, 12, 3, 22, 0, tzinfo=UTC
    )
    for bad in ["* * *", "61 * * * *", "*/0 * * * *", "x * * * *"]:
        with pytest.raises(ValueError):
            CronSpec.parse(bad)
