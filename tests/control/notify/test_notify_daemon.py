"""Notifications delivered by real ``provisioner daemon`` subprocesses to real receivers on
127.0.0.1 (a Slack-format webhook server, an SMTP server):

* a job preempted and restarted on the sim sends exactly ``preempted``, ``restarted``,
  ``succeeded`` to each target, in order; its target's token is in no store row, log line or
  dashboard page;
* at least once across kill -9: a daemon killed between the send and the mark (at the
  ``after-notify-send`` failpoint, and by a real SIGKILL while the receiver holds the message)
  repeats that one message once, nothing else; one killed after the claim, before the send,
  loses nothing and repeats nothing;
* passes, and another target's messages, go on while one target's delivery is stuck on a
  receiver that does not answer;
* every message carries the job's page on the dashboard the daemon serves and its event id
  (a repeat after kill -9 the same id); the success message says what was billed, what
  on-demand would have cost and what spot saved; the job page lists the notifications;
* two daemons on one PostgreSQL store deliver every message once, each job's in order.
"""

from __future__ import annotations

import json
import re
import sqlite3
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("apprise")
pytest.importorskip("aiosmtpd")

from provisioner.control.notify.route import Router
from provisioner.control.store import ReplicaRow, Store
from tests.daemon_util import DaemonProc, write_config
from tests.notify_util import TOKEN, MailReceiver, SlackReceiver, wait_for, write_targets
from tests.pg import fresh_database

pytestmark = pytest.mark.e2e


@pytest.fixture
def slack() -> Iterator[SlackReceiver]:
    r = SlackReceiver()
    yield r
    r.close()


@pytest.fixture
def mail() -> Iterator[MailReceiver]:
    r = MailReceiver()
    yield r
    r.close()


def _config(tmp_path: Path, url: str, targets: dict[str, str], **notify: Any) -> Path:
    book = write_targets(tmp_path / "notify.yaml", targets)
    section = {"targets_file": str(book), "interval": "0.2s", "lease": "2s", **notify}
    return write_config(tmp_path / "daemon.yaml", url, notify=section)


def _three(store: Store, target: str = "team", name: str = "done") -> str:
    """A finished job with three committed events, each with its outbox row (as a pass writes
    them); the daemon has nothing else to do with it."""
    now = datetime.now(UTC)  # the daemon delivers on the real clock
    jid = store.submit(
        name=name, policy_yaml="name: x\n", policy_path=None, provider="sim",
        provider_options={}, now=now, deadline=None, work_total_h=None,
    ).id  # fmt: skip
    store.update_job(jid, at=now, state="succeeded")
    router = Router.of([target])
    for i, kind in enumerate(("preempted", "restarted", "succeeded"), start=1):
        text = f"{name} message {i}"
        store.add_event(
            jid,
            kind,
            text,
            at=now,
            notify=router.notice(jid, name, None, kind, text, {"restart": 1}),
        )
    return jid


def _all_sent(store: Store) -> bool:
    return bool(store.notifications()) and all(r.state == "sent" for r in store.notifications())


def _texts(r: SlackReceiver) -> list[str]:
    return [m.text for m in r.messages]


@pytest.mark.parametrize(
    ("point", "expected"),
    [
        # killed after the send, before the mark: that message again, once; nothing else
        ("after-notify-send", ["done message 1", "done message 1", "done message 2",
                               "done message 3"]),
        # killed after the claim, before the send: nothing lost, nothing twice
        ("after-notify-claim", ["done message 1", "done message 2", "done message 3"]),
    ],
)  # fmt: skip
def test_a_daemon_killed_at_a_failpoint_loses_nothing_and_repeats_at_most_one(
    tmp_path: Path, slack: SlackReceiver, point: str, expected: list[str]
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    _three(store)
    cfg = _config(tmp_path, url, {"team": slack.url})
    crashing = DaemonProc(cfg, tmp_path / "crash.log", {"PROVISIONER_CRASH_AT": point}).start()
    assert crashing.wait(60) == 137, (tmp_path / "crash.log").read_text()[-2000:]
    sent_before = expected[:1] if point == "after-notify-send" else []
    assert _texts(slack) == sent_before
    d = DaemonProc(cfg, tmp_path / "d.log").start()
    try:
        assert wait_for(lambda: _all_sent(store), 60), store.notifications()
        assert _texts(slack) == expected
    finally:
        assert d.stop() == 0
    store.close()


def test_sigkill_while_the_receiver_holds_the_message_repeats_it_once(
    tmp_path: Path, slack: SlackReceiver
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    _three(store)
    cfg = _config(tmp_path, url, {"team": slack.url})
    slack.holding.set()  # the receiver takes the message and keeps the sender waiting
    d = DaemonProc(cfg, tmp_path / "d1.log").start()
    assert wait_for(lambda: len(slack.messages) == 1, 60)
    assert d.kill() == -9  # kill -9 between the send and the mark
    slack.holding.clear()
    slack.release.set()
    assert store.notifications()[0].state == "pending"  # sent, never marked
    d2 = DaemonProc(cfg, tmp_path / "d2.log").start()
    try:
        assert wait_for(lambda: _all_sent(store), 60)
        assert _texts(slack) == ["done message 1", "done message 1", "done message 2",
                                 "done message 3"]  # fmt: skip
        # the repeat carries the id it had: the receiver can drop it
        ids = [m.event_id for m in slack.messages]
        assert ids[0] == ids[1] and len(set(ids)) == 3 and None not in ids
        assert [m.header for m in slack.messages] == ids
    finally:
        assert d2.stop() == 0
    store.close()


def test_passes_and_other_targets_go_on_while_a_receiver_does_not_answer(
    tmp_path: Path, slack: SlackReceiver
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    _three(store)
    other = SlackReceiver()
    _three(store, target="other", name="free")
    cfg = _config(tmp_path, url, {"team": slack.url, "other": other.url})
    slack.holding.set()  # every message is held: team's worker waits on the socket
    d = DaemonProc(cfg, tmp_path / "d.log").start()
    try:
        assert wait_for(lambda: len(slack.messages) == 1, 60)
        # another target's worker: all of its messages, in order, while team's is held
        assert wait_for(lambda: len(other.messages) == 3, 60), _texts(other)
        assert _texts(other) == [f"free message {i}" for i in (1, 2, 3)]

        def beats() -> list[datetime]:
            with store.session() as s:
                return [r.last_seen for r in s.query(ReplicaRow).all()]

        seen: set[Any] = set()

        def passes() -> bool:  # a heartbeat is written before and after every pass
            seen.update(beats())
            return len(seen) >= 6

        assert wait_for(passes, 30), "the passes stopped while delivery waited"
        assert len(slack.messages) == 1 and slack.holding.is_set()  # still stuck meanwhile
    finally:
        slack.holding.clear()
        slack.release.set()
        assert d.stop() == 0
        other.close()
    store.close()


def test_two_daemons_on_postgresql_deliver_every_message_once(
    tmp_path: Path, slack: SlackReceiver
) -> None:
    with fresh_database() as url:
        store = Store(url)
        jobs = [_three(store, name=f"job{i}") for i in range(8)]
        cfg = _config(tmp_path, url, {"team": slack.url})
        a = DaemonProc(cfg, tmp_path / "a.log").start()
        b = DaemonProc(cfg, tmp_path / "b.log").start()
        try:
            assert wait_for(lambda: _all_sent(store), 90)
            texts = _texts(slack)
            assert len(texts) == len(set(texts)) == 3 * len(jobs), texts
            for i in range(len(jobs)):
                mine = [t for t in texts if t.startswith(f"job{i} ")]
                assert mine == [f"job{i} message {n}" for n in (1, 2, 3)]
        finally:
            assert a.stop() == 0 and b.stop() == 0
        store.close()


def test_a_preempted_job_on_the_sim_tells_each_target_in_order(
    tmp_path: Path, slack: SlackReceiver, mail: MailReceiver
) -> None:
    from providers.sim import SimProvider
    from provisioner.api import submit
    from tests.e2e_util import write_policy

    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    sim_dir = tmp_path / "sim"
    options = {
        "state_dir": str(sim_dir), "mimic": {"eu-west-1a": "aws", "europe-west4-a": "gcp"},
        "seconds_per_hour": 60, "mtbp_hours": None, "preempt_first_after_s": 6,
        "demo_outage_s": 8, "idle_exit_s": 120,
    }  # fmt: skip
    policy = write_policy(
        tmp_path / "p.yaml", steps=400, ckpt=tmp_path / "ck",
        extra="notify: {targets: [team, mail], events: [preempted, restarted, succeeded, failed]}",
    )  # fmt: skip
    cfg = _config(
        tmp_path, url, {"team": slack.url, "mail": mail.url},
    )  # fmt: skip
    text = cfg.read_text().replace('"dashboard": {"enabled": false}', '"dashboard": {"port": 0}')
    text = text.replace(
        '"metrics": {"enabled": false}', '"metrics": {"port": 0, "ledger_interval": "1s"}'
    )
    cfg.write_text(text)
    d = DaemonProc(cfg, tmp_path / "d.log").start()
    try:
        assert d.ready(store)
        _, jid = submit(
            policy, provider="sim", provider_defaults=False, provider_options=options, store=store
        )

        def done() -> bool:
            job = store.job(jid)
            return job is not None and job.state in ("succeeded", "failed") and _all_sent(store)

        assert wait_for(done, 180), (store.job(jid), store.notifications())
        job = store.job(jid)
        assert job is not None and job.state == "succeeded" and job.restarts == 1
        want = [
            f"provisioner: job e2e ({jid}) preempted",
            f"provisioner: job e2e ({jid}) restarted (restart 1)",
            f"provisioner: job e2e ({jid}) succeeded",
        ]
        assert slack.titles() == want
        assert wait_for(lambda: len(mail.messages) == 3, 10) and mail.titles() == want
        assert "restart 1: attempt" in slack.messages[1].text
        # what spot saved, in the success message (the on-demand references kept at launch)
        done = slack.messages[2].text
        assert re.search(r"; billed \$\d+\.\d{4,}; the same runs on on-demand \$\d+\.\d{4,}", done)
        assert re.search(r"spot saved \$\d+\.\d{4,} \(\d+\.\d %\)", done), done
        ev = [e for e in store.events(jid) if e.kind == "succeeded"][-1]
        assert ev.data["on_demand_usd"] > ev.data["billed_usd"] > 0
        # every message: the job's page on the dashboard this daemon serves, an event id
        log_text = (tmp_path / "d.log").read_text()
        served = re.search(r"dashboard on (http://[0-9.:]+/)", log_text)
        assert served, log_text[-2000:]
        ids = [
            f"{jid}/{e.id}"
            for e in store.events(jid)
            if e.kind in ("preempted", "restarted", "succeeded")
        ]
        for receiver in (slack, mail):
            assert [m.link for m in receiver.messages] == [f"{served.group(1)}jobs/{jid}"] * 3
            assert [m.event_id for m in receiver.messages] == ids
        assert [m.header for m in slack.messages] == ids
        job_doc = json.loads(
            urllib.request.urlopen(f"{served.group(1)}jobs/{jid}?format=json", timeout=10).read()
        )
        shown = job_doc["notifications"]["rows"]
        assert sorted((n["event_id"], n["target"], n["state"]) for n in shown) == sorted(
            (i, t, "sent") for i in ids for t in ("team", "mail")
        )
        # the token: in no row of the store, no log line, no dashboard page
        con = sqlite3.connect(str(tmp_path / "s.db"))
        dump = "\n".join(con.iterdump())
        con.close()
        assert TOKEN not in dump and "team" in dump
        log = (tmp_path / "d.log").read_text()
        assert TOKEN not in log
        found = re.search(r"dashboard on (http://[0-9.:]+/)", log)
        assert found, log[-2000:]
        for path in ("", f"jobs/{jid}", "?format=json", f"jobs/{jid}?format=json"):
            body = urllib.request.urlopen(found.group(1) + path, timeout=10).read()
            assert TOKEN.encode() not in body, path
        page = urllib.request.urlopen(found.group(1), timeout=10).read().decode()
        assert "vs on-demand" in page  # the jobs page's saving
        # Prometheus: the messages sent, and the ledger's counters
        port = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", log)
        assert port, log[-2000:]

        def metrics() -> str:
            url = f"http://127.0.0.1:{port.group(1)}/metrics"  # type: ignore[union-attr]
            return urllib.request.urlopen(url, timeout=10).read().decode()

        def counted() -> bool:
            m = metrics()
            sent = re.search(r'^provisioner_notifications_total\{result="sent"\} (\S+)$', m, re.M)
            billed = re.search(r"^provisioner_ledger_billed_usd_total (\S+)$", m, re.M)
            return bool(
                sent and float(sent.group(1)) == 6.0 and billed and float(billed.group(1)) > 0
            )

        assert wait_for(counted, 30), metrics()
        assert "provisioner_ledger_saved_usd" in metrics()
    finally:
        assert d.stop() == 0
        SimProvider(sim_dir).shutdown_server(terminate_all=True)
    store.close()
