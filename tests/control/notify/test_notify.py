"""Notifications in this process: the policy's ``notify:`` section and the daemon's, the
targets' file and variables (secrets), the router, the outbox in the store (written in the
event's transaction; claims that never split a queue, on SQLite and on PostgreSQL with two
claimers in threads), and delivery to real receivers on 127.0.0.1 (a Slack-format webhook
server and an SMTP server): order, retries through a receiver that answers 500 until told
otherwise, the rate limit's summary, unknown targets, giving up, expiry, ``notify test``.

The daemon's own delivery (its scheduled job, kill -9 between send and mark, a job on the sim)
is in tests/control/notify/test_notify_daemon.py.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytest.importorskip("apprise")
pytest.importorskip("aiosmtpd")

from policies.loader import PolicyError, parse_policy
from providers.base import redact
from provisioner.control.notify.outbox import Deliverer, Delivery
from provisioner.control.notify.route import Router
from provisioner.control.notify.targets import TargetBook, TargetsError, secret_parts
from provisioner.control.store import Notice, Store
from tests.notify_util import (
    MAIL_PASSWORD,
    TOKEN,
    MailReceiver,
    SlackReceiver,
    wait_for,
    write_targets,
)
from tests.pg import fresh_database

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


class Clock:
    """The tests' clock: it starts at ``start`` and runs at the real rate (the deliverer's
    retries wait in real time), whatever the date is (nothing here reads the real clock)."""

    def __init__(self, start: datetime = T0) -> None:
        self.start, self.t = start, time.monotonic()

    def __call__(self) -> datetime:
        return self.start + timedelta(seconds=time.monotonic() - self.t)


FAST = Delivery(
    lease=timedelta(seconds=5),
    tries=1000,
    first_retry=timedelta(milliseconds=50),
    max_retry=timedelta(milliseconds=200),
)


@pytest.fixture(autouse=True)
def _cli_logging_undone() -> Iterator[None]:
    """The commands run here in-process set the root logger up (a redacting handler): undone
    after each test, so that no later test's capture sees records scrubbed by it."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    root.setLevel(level)


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


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 's.db'}")
    yield s
    s.close()


def _job(store: Store, name: str = "train") -> str:
    return store.submit(
        name=name, policy_yaml="name: x\n", policy_path=None, provider="sim",
        provider_options={}, now=T0, deadline=None, work_total_h=None,
    ).id  # fmt: skip


def _tell(
    store: Store, job_id: str, event: str, targets: tuple[str, ...], n: int = 1, at: datetime = T0
) -> None:
    """Events as the pass writes them at ``at``: each with its outbox rows, in one
    transaction."""
    router = Router.of(targets)
    kind = {"deadline": "deadline-risk", "capacity": "no-capacity", "price": "price-cap"}.get(
        event, event
    )
    for i in range(n):
        text = f"{event} number {i + 1}"
        notice = router.notice(job_id, "train", None, kind, text, {"restart": i + 1, "level": 50})
        store.add_event(job_id, kind, text, at=at, notify=notice)


def _drain(d: Deliverer, until: Callable[[], bool], timeout: float = 20.0) -> None:
    """Tick the deliverer until ``until`` holds (a timeout only fails)."""

    def step() -> bool:
        d.tick()
        return until()

    assert wait_for(step, timeout, every=0.02)


# -- the policy and the daemon's configuration ------------------------------------------------


def test_a_policy_names_targets_and_refuses_a_url_at_its_line() -> None:
    ok = parse_policy(
        "name: x\nnotify:\n  targets: [slack-team, oncall]\n  events: [preempted, failed]\n"
    )
    assert ok.notify is not None and ok.notify.targets == ["slack-team", "oncall"]
    assert ok.notify.budget_levels == [50.0, 80.0, 100.0] and ok.notify.deadline_miss == 0.2
    text = (
        "name: x\nnotify:\n  targets:\n    - slack-team\n"
        f"    - https://hooks.slack.com/services/T000/B000/{TOKEN}\n"
    )
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.yaml")
    shown = str(info.value.issues[0])
    assert shown.startswith("p.yaml:5:7: notify.targets")
    assert "/etc/provisioner/notify.yaml" in shown and "PROVISIONER_NOTIFY_" in shown
    assert TOKEN not in shown
    for bad, why in (
        ("targets: [xoxb-1234567890-abcdefghij]", "URL or token here"),  # a Slack token, not a name
        ("targets: ['a b']", "not a target name"),
        ("events: [preempted, nope]", "not an event"),
        ("budget_levels: [0]", "budget level"),
        ("deadline_miss: 1.5", "must be <= 1"),
    ):
        with pytest.raises(PolicyError) as info:
            parse_policy(f"name: x\nnotify: {{{bad}}}\n", "p.yaml")
        assert why in str(info.value), (bad, str(info.value))


def test_the_daemon_config_names_targets_too(tmp_path: Path) -> None:
    from provisioner.control.daemon.config import load_config

    cfg = tmp_path / "d.yaml"
    cfg.write_text(f"notify:\n  targets: [ops, 'slack://T000/B000/{TOKEN}']\n")
    with pytest.raises(PolicyError) as info:
        load_config(str(cfg))
    shown = str(info.value.issues[0])
    assert ":2:18: notify.targets.1" in shown and TOKEN not in shown, shown
    cfg.write_text("notify: {targets: [ops], rate_limit: {messages: 3, per: 30s}, lease: 5s}\n")
    c = load_config(str(cfg)).notify
    assert c.targets == ["ops"] and c.rate_limit.messages == 3 and c.lease == timedelta(seconds=5)


# -- targets: where the URLs are, and that they are secrets ------------------------------------


def test_targets_come_from_a_private_file_and_the_environment(tmp_path: Path) -> None:
    f = write_targets(tmp_path / "notify.yaml", {"slack-team": "json://h/a/B0TOKENxyz123"})
    env = {"PROVISIONER_NOTIFY_ONCALL": "mailto://u:Pw0rdPw0rd@h?to=x@y", "OTHER": "1"}
    book = TargetBook.load(str(f), env)
    assert book.url("slack-team") == "json://h/a/B0TOKENxyz123"
    assert book.url("SLACK_TEAM") == book.url("slack-team")  # names match whatever their case
    assert book.url("oncall") == "mailto://u:Pw0rdPw0rd@h?to=x@y"
    assert book.listed() == [("oncall", "PROVISIONER_NOTIFY_ONCALL"), ("slack-team", str(f))]
    env2 = {"PROVISIONER_NOTIFY_SLACK_TEAM": "json://h/b/OTHERtoken99"}
    assert TargetBook.load(str(f), env2).url("slack-team") == "json://h/b/OTHERtoken99"  # env wins
    f.chmod(0o644)
    with pytest.raises(TargetsError, match="chmod 600"):
        TargetBook.load(str(f), {})
    with pytest.raises(TargetsError, match="no such file"):
        TargetBook.load(str(tmp_path / "missing.yaml"), {})
    bad = write_targets(tmp_path / "bad.yaml", {"ops": "not a url"})
    with pytest.raises(TargetsError) as info:
        TargetBook.load(str(bad), {})
    assert "not a url" not in str(info.value)


def test_every_url_and_its_token_parts_are_scrubbed() -> None:
    url = f"json://127.0.0.1:9/services/T000/B000/{TOKEN}?:message=text"
    discord = "discord://123456789012345678/AbCdEf0123456789GhIjKl"
    parts = secret_parts(url)
    assert TOKEN in parts and "services" not in parts and "127.0.0.1" not in parts
    assert "123456789012345678" in secret_parts(discord)
    TargetBook({"a": url, "b": discord, "c": f"mailto://u:{MAIL_PASSWORD}@h"}, {}, {})
    for text in (url, TOKEN, f"error at {discord}", MAIL_PASSWORD, "AbCdEf0123456789GhIjKl"):
        assert "***" in redact(text) and TOKEN not in redact(text)
    assert redact("the services path") == "the services path"


# -- the router ------------------------------------------------------------------------------


def test_the_router_joins_the_daemons_targets_and_the_policys() -> None:
    pol = parse_policy("name: x\nnotify: {targets: [team, ops], events: [failed]}\n").notify
    r = Router.of(["ops"], ["preempted", "failed"])
    n = r.notice("j1", "train", pol, "failed", "out of memory")
    assert n is not None and n.targets == ("ops", "team") and n.event == "failed"
    assert n.title == "provisioner: job train (j1) failed" and n.body == "out of memory"
    assert r.notice("j1", "train", pol, "preempted", "x").targets == ("ops",)  # type: ignore[union-attr]
    assert r.notice("j1", "train", pol, "checkpoint", "x") is None  # not an event that is told
    assert Router().notice("j1", "train", None, "failed", "x") is None  # nobody to tell
    assert r.notice("j1", "t", None, "policy-error", "x").event == "failed"  # type: ignore[union-attr]
    b = Router.of(["ops"]).notice("j", "t", None, "budget", "x", {"level": 80.0})
    assert b is not None and b.title.endswith("at 80% of its budget")


# -- the outbox in the store -------------------------------------------------------------------


def test_the_outbox_rows_are_written_in_the_events_transaction(store: Store) -> None:
    jid = _job(store)
    notice = Notice("preempted", ("a", "b", "a"), "t", "b")
    store.add_event(jid, "preempted", "p", at=T0, notify=notice)
    ev = store.events(jid)[-1]
    rows = store.notifications(jid)
    assert [(r.event_id, r.target, r.state) for r in rows] == [
        (ev.id, "a", "pending"),
        (ev.id, "b", "pending"),
    ]
    # the transaction fails (a duplicate row for one event and target): no event either
    before = len(store.events(jid))
    from sqlalchemy.exc import IntegrityError

    with pytest.raises(IntegrityError), store.session() as s:
        from provisioner.control.store import EventRow

        row = EventRow(job_id=jid, at=T0, kind="failed", message="x", data={})
        s.add(row)
        s.flush()
        store.enqueue(s, row.id, jid, Notice("failed", ("a",), "t", "b"), T0)
        store.enqueue(s, row.id, jid, Notice("failed", ("a",), "t", "b"), T0)
    assert len(store.events(jid)) == before and len(store.notifications(jid)) == 2


def test_a_queue_is_claimed_whole_by_one_owner_until_its_lease_ends(store: Store) -> None:
    jid = _job(store)
    _tell(store, jid, "preempted", ("a",), n=3)
    _tell(store, jid, "succeeded", ("b",))
    [qa, qb] = store.claim_notifications("r1", T0, timedelta(seconds=30))
    assert [r.target for r in qa] == ["a"] * 3 and [r.target for r in qb] == ["b"]
    assert store.claim_notifications("r2", T0 + timedelta(seconds=10), timedelta(seconds=30)) == []
    _tell(store, jid, "failed", ("a",))  # a newer row of a held queue: not for anyone else
    assert store.claim_notifications("r2", T0 + timedelta(seconds=10), timedelta(seconds=30)) == []
    later = store.claim_notifications("r2", T0 + timedelta(seconds=31), timedelta(seconds=30))
    assert sorted(len(q) for q in later) == [1, 4]  # r1 died: its queues, whole, in order


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_concurrent_claimers_never_send_a_row_twice_nor_out_of_order(
    backend: str, tmp_path: Path
) -> None:
    clock = Clock()

    def run(url: str) -> None:
        main = Store(url)
        jobs = [_job(main, f"j{i}") for i in range(12)]
        for jid in jobs:
            _tell(main, jid, "preempted", ("a", "b"), n=4)
        sent: dict[str, list[tuple[int, str]]] = {}
        lock = threading.Lock()

        def claimer(owner: str) -> None:
            s = Store(url, migrate=False)
            try:
                while True:
                    now = clock()
                    queues = s.claim_notifications(owner, now, timedelta(seconds=30), queues=3)
                    if not queues:
                        if s.outbox_pending() == 0:
                            return
                        continue
                    for rows in queues:
                        for r in rows:
                            with lock:
                                sent.setdefault(f"{r.job_id}/{r.target}", []).append((r.id, owner))
                            s.mark_notifications_sent([r.id], now)
            finally:
                s.close()

        threads = [threading.Thread(target=claimer, args=(f"r{i}",)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        all_ids = [i for q in sent.values() for i, _ in q]
        assert len(all_ids) == len(set(all_ids)) == 12 * 2 * 4, "a row sent twice or lost"
        for q in sent.values():
            assert [i for i, _ in q] == sorted(i for i, _ in q), "a queue sent out of order"
        assert len({o for _, o in (x for q in sent.values() for x in q)}) >= 2, "one claimer"
        main.close()

    if backend == "sqlite":
        run(f"sqlite:///{tmp_path / 'c.db'}")
    else:
        with fresh_database() as url:
            run(url)


# -- delivery to real receivers ----------------------------------------------------------------


def test_messages_reach_a_webhook_and_a_mailbox_in_order(
    store: Store, slack: SlackReceiver, mail: MailReceiver, clock: Clock
) -> None:
    book = TargetBook({"team": slack.url, "mail": mail.url}, {}, {})
    d = Deliverer(store, book, "r1", FAST, clock=clock)
    jid = _job(store)
    for event in ("preempted", "restarted", "succeeded"):
        _tell(store, jid, event, ("team", "mail"))
    _drain(d, lambda: len(slack.messages) == 3 and len(mail.messages) == 3)
    want = [
        f"provisioner: job train ({jid}) preempted",
        f"provisioner: job train ({jid}) restarted (restart 1)",
        f"provisioner: job train ({jid}) succeeded",
    ]
    assert slack.titles() == want and mail.titles() == want
    assert [m.text for m in slack.messages] == ["preempted number 1", "restarted number 1",
                                                 "succeeded number 1"]  # fmt: skip
    assert "succeeded number 1" in mail.messages[-1].text
    assert {r.state for r in store.notifications(jid)} == {"sent"}
    d.tick()
    assert len(slack.messages) == 3 and len(mail.messages) == 3  # nothing twice


def test_a_receiver_that_answers_500_gets_everything_after_in_order(
    store: Store, slack: SlackReceiver, clock: Clock
) -> None:
    slack.failing.set()
    d = Deliverer(store, TargetBook({"team": slack.url}, {}, {}), "r1", FAST, clock=clock)
    jid = _job(store)
    for event in ("preempted", "restarted", "succeeded"):
        _tell(store, jid, event, ("team",))
    _drain(d, lambda: slack.failures >= 5)  # retried on the (short) schedule, still down
    assert slack.messages == []
    head = store.notifications(jid)[0]
    assert head.tries >= 4 and "500" in head.error and TOKEN not in head.error
    assert all(r.tries == 0 for r in store.notifications(jid)[1:])  # the queue waits behind it
    slack.failing.clear()  # the receiver is back
    _drain(d, lambda: len(slack.messages) == 3)
    assert [m.text.split()[0] for m in slack.messages] == ["preempted", "restarted", "succeeded"]


def test_the_rate_limit_folds_the_rest_into_one_summary(
    store: Store, slack: SlackReceiver, clock: Clock
) -> None:
    limited = Delivery(rate_messages=3, rate_per=timedelta(minutes=1), lease=timedelta(seconds=5))
    d = Deliverer(store, TargetBook({"team": slack.url}, {}, {}), "r1", limited, clock=clock)
    jid = _job(store)
    _tell(store, jid, "restarted", ("team",), n=8)
    d.tick()
    assert len(slack.messages) == 3, slack.titles()
    assert [m.text for m in slack.messages[:2]] == ["restarted number 1", "restarted number 2"]
    summary = slack.messages[2]
    assert "6 more notifications" in summary.title
    assert (
        summary.text.count("restarted (restart") == 6
        and "at most 3 messages a 1 min" in summary.text
    )
    rows = store.notifications(jid)
    assert {r.state for r in rows} == {"sent"}
    assert [r.folded_into for r in rows[3:]] == [rows[2].id] * 5
    _tell(store, jid, "failed", ("team",))  # the window is full: it waits, it is not lost
    d.tick()
    assert len(slack.messages) == 3 and store.notifications(jid)[-1].state == "pending"
    later = Deliverer(store, d.book, "r1", limited, clock=lambda: clock() + timedelta(minutes=2))
    later.tick()
    assert len(slack.messages) == 4 and slack.messages[-1].text == "failed number 1"


def test_an_unknown_target_a_dead_end_and_old_rows(
    store: Store, slack: SlackReceiver, clock: Clock
) -> None:
    jid = _job(store)
    _tell(store, jid, "failed", ("nobody",))
    d = Deliverer(store, TargetBook({"team": slack.url}, {}, {}), "r1", FAST, clock=clock)
    d.tick()
    [row] = store.notifications(jid)
    assert row.state == "failed" and "PROVISIONER_NOTIFY_NOBODY" in row.error
    assert any(e.kind == "notify-failed" for e in store.events(jid))
    # a receiver that never takes it: given up after `tries`, and said so
    slack.failing.set()
    few = Delivery(
        tries=2, first_retry=timedelta(milliseconds=10), max_retry=timedelta(milliseconds=10)
    )
    d2 = Deliverer(store, d.book, "r1", few, clock=clock)
    _tell(store, jid, "succeeded", ("team",))
    _drain(d2, lambda: store.notifications(jid)[-1].state == "failed")
    assert sum(e.kind == "notify-failed" for e in store.events(jid)) == 2
    # rows older than max_age are dropped, not sent
    slack.failing.clear()
    _tell(store, jid, "preempted", ("team",))
    old = Deliverer(store, d.book, "r1", FAST, clock=lambda: clock() + timedelta(days=2))
    old.tick()
    assert store.notifications(jid)[-1].state == "expired" and slack.messages == []


def test_notify_test_sends_one_message_to_each_target(
    tmp_path: Path, slack: SlackReceiver, mail: MailReceiver, capsys: pytest.CaptureFixture[str]
) -> None:
    from provisioner.cli import main

    targets = write_targets(tmp_path / "notify.yaml", {"team": slack.url, "mail": mail.url})
    cfg = tmp_path / "d.yaml"
    cfg.write_text(f"notify: {{targets_file: {targets}}}\n")
    with pytest.raises(SystemExit) as info:
        main(["notify", "test", "--config", str(cfg)])
    out, err = capsys.readouterr()
    assert info.value.code == 0, (out, err)
    assert "team: sent" in out and "mail: sent" in out
    assert slack.titles() == ["provisioner: test message"]
    assert mail.titles() == ["provisioner: test message"]
    slack.failing.set()
    with pytest.raises(SystemExit) as info:
        main(["notify", "test", "--config", str(cfg), "--target", "team"])
    out, err = capsys.readouterr()
    assert info.value.code == 4 and "team: NOT sent" in out and TOKEN not in out + err


def test_the_token_is_nowhere_but_in_the_targets_file(
    tmp_path: Path,
    store: Store,
    slack: SlackReceiver,
    caplog: pytest.LogCaptureFixture,
    clock: Clock,
) -> None:
    """Store dump (events, outbox rows and their errors), log records, and the dashboard."""
    caplog.set_level(logging.DEBUG)
    book = TargetBook({"team": slack.url}, {}, {})
    d = Deliverer(store, book, "r1", FAST, clock=clock)
    jid = _job(store)
    slack.failing.set()
    _tell(store, jid, "preempted", ("team",))
    _drain(d, lambda: slack.failures >= 2)
    slack.failing.clear()
    _drain(d, lambda: len(slack.messages) == 1)
    db = store.url.removeprefix("sqlite:///")
    con = sqlite3.connect(db)
    dump = "\n".join(con.iterdump())
    con.close()
    assert "notifications" in dump and "team" in dump and TOKEN not in dump
    from providers.base import RedactingFilter

    f = RedactingFilter()
    for rec in caplog.records:
        f.filter(rec)
        assert TOKEN not in rec.getMessage()
    from provisioner.dashboard import DashboardServer

    server = DashboardServer(store, port=0)
    server.start()
    try:
        import urllib.request

        for path in ("/", f"/jobs/{jid}", "/?format=json", f"/jobs/{jid}?format=json"):
            body = urllib.request.urlopen(server.url.rstrip("/") + path, timeout=10).read()
            assert TOKEN.encode() not in body, path
    finally:
        server.close()


def test_a_daemon_without_apprise_says_so_once(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, clock: Clock
) -> None:
    from provisioner.control.daemon import notifying
    from provisioner.control.daemon.config import NotifyConfig
    from provisioner.control.daemon.metrics import Metrics

    monkeypatch.setattr(notifying, "have_apprise", lambda: False)
    caplog.set_level(logging.INFO)
    book = TargetBook({"team": "json://127.0.0.1:9/services/T/B/XyZ12345678"}, {}, {})
    n = notifying.Notifications(store, NotifyConfig(targets=["team"]), "r1", book, clock)
    jid = _job(store)
    _tell(store, jid, "failed", ("team",))
    metrics = Metrics()
    for _ in range(3):
        n.tick(metrics)
    said = [r.getMessage() for r in caplog.records if "apprise is not installed" in r.getMessage()]
    assert len(said) == 1 and "pip install 'provisioner[notify]'" in said[0]
    assert [r.state for r in store.notifications(jid)] == ["pending"]  # it waits, not lost
