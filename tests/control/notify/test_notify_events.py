"""The events a pass writes for people, each with its outbox rows: budget levels, the deadline
at risk, no capacity anywhere, every offer above the price caps. Through the daemon's
reconciler on moto's EC2 server (the real AWS adapter), with a clock the test moves."""

from __future__ import annotations

import pytest

pytest.importorskip("moto")

from tests.control.test_daemon_regressions import aws_world, policy

NOTIFY = "{targets: [team]}"


def _told(w: object, job_id: str) -> list[tuple[str, str]]:
    store = w.store  # type: ignore[attr-defined]
    return [(r.event, r.target) for r in store.notifications(job_id)]


def _kinds(w: object, job_id: str, kind: str) -> list[str]:
    return [e.message for e in w.store.events(job_id) if e.kind == kind]  # type: ignore[attr-defined]


def test_spend_crossing_budget_levels_is_told_once_each() -> None:
    with aws_world() as w:
        job_id = w.job(
            policy(
                market="spot",
                job="{command: ['true']}",
                bid_cap="{max_spot_price_per_hour: 0.5}",
                budget="{max_total: 1.0}",
                notify=NOTIFY,
            )
        )
        rec = w.reconciler()
        rec.run_pass()  # launches spot at $0.30/h
        w.later(hours=1)
        rec.run_pass()
        assert _kinds(w, job_id, "budget") == []  # $0.30: under 50%
        w.later(hours=1)
        rec.run_pass()
        rec.run_pass()
        assert _kinds(w, job_id, "budget") == ["spent $0.60 of the $1.00 budget: 50% of it"]
        w.later(minutes=45)
        rec.run_pass()
        assert (
            len(_kinds(w, job_id, "budget")) == 2 and "80% of it" in _kinds(w, job_id, "budget")[1]
        )
        assert _told(w, job_id)[:2] == [("budget", "team"), ("budget", "team")]
        rec.close()
        # a new process (a restarted daemon) does not tell them again
        rec2 = w.reconciler()
        w.later(minutes=1)
        rec2.run_pass()
        assert len(_kinds(w, job_id, "budget")) == 2
        rec2.close()


def test_a_budget_of_cents_is_told_in_its_own_precision() -> None:
    """A $0.05 budget: spend to a hundredth of it, the budget as written (never "$0.03 of
    the $0.05 budget", nor "$0.00 of the $0.00 budget" for less than a cent)."""
    import re

    with aws_world() as w:
        job_id = w.job(
            policy(
                market="spot",
                job="{command: ['true']}",
                bid_cap="{max_spot_price_per_hour: 0.5}",
                budget="{max_total: 0.05}",
                notify=NOTIFY,
            )
        )
        rec = w.reconciler()
        rec.run_pass()  # launches spot at $0.30/h: $0.005 a minute
        w.later(minutes=5, seconds=30)
        rec.run_pass()
        rec.run_pass()
        told = _kinds(w, job_id, "budget")
        assert len(told) == 1, told
        assert re.fullmatch(
            r"spent \$0\.0(2[5-9]|3[0-9])\d of the \$0\.05 budget: 50% of it", told[0]
        ), told
        rec.close()


def test_money_is_shown_to_the_precision_the_policy_gives_it() -> None:
    from provisioner.core.money import against_decimals, usd, written_decimals

    assert [written_decimals(v) for v in (1.0, 0.005, 25.5, 12.345, 1e-05)] == [2, 3, 2, 3, 5]
    assert usd(0.004, against_decimals(0.005)) == "$0.00400"
    assert usd(0.005, written_decimals(0.005)) == "$0.005"
    assert usd(80, against_decimals(100)) == "$80.00"
    assert usd(0.008, against_decimals(0.01)) == "$0.0080"
    assert usd(-0.5) == "-$0.50" and usd(-0.0001) == "$0.00"


def test_a_launch_whose_estimate_may_miss_the_deadline_is_told() -> None:
    with aws_world() as w:
        job_id = w.job(
            policy(
                market="spot",
                job="{command: ['true'], compute_hours: 3, reference_gpu: A10G}",
                bid_cap="{max_spot_price_per_hour: 0.5}",
                deadline="2h",
                notify="{targets: [team], deadline_miss: 0.2}",
            )
        )
        rec = w.reconciler()
        rec.run_pass()
        [a] = w.store.attempts(job_id)
        assert a.estimate_p_miss is not None and a.estimate_p_miss >= 0.2
        [msg] = _kinds(w, job_id, "deadline-risk")
        assert "chance of finishing after the deadline" in msg
        assert ("deadline", "team") in _told(w, job_id)
        rec.close()


def test_no_capacity_anywhere_is_told_once() -> None:
    with aws_world() as w:
        job_id = w.job(policy(bid_cap="{max_spot_price_per_hour: 0.5}", notify=NOTIFY))
        w.harness.inject_error("InsufficientInstanceCapacity", times=20)
        rec = w.reconciler()
        rec.run_pass()  # spot refused, then on-demand: nowhere left
        w.later(seconds=10)
        rec.run_pass()
        [msg] = _kinds(w, job_id, "no-capacity")
        assert "every eligible offer (2)" in msg
        assert ("capacity", "team") in _told(w, job_id)
        rec.close()


def test_every_offer_above_the_cap_is_told_once() -> None:
    with aws_world() as w:
        job_id = w.job(
            policy(market="spot", bid_cap="{max_spot_price_per_hour: 0.01}", notify=NOTIFY)
        )
        rec = w.reconciler()
        rec.run_pass()
        w.later(seconds=10)
        rec.run_pass()
        [msg] = _kinds(w, job_id, "price-cap")
        assert msg == "no offer within the price caps: 1 above the bid cap"
        assert _told(w, job_id) == [("price", "team")]
        assert w.store.attempts(job_id) == []
        rec.close()
