"""Delivery per target and what each message carries, in this process, to real receivers on
127.0.0.1 (a Slack-format webhook server and an SMTP server, through apprise):

* one worker per target: a webhook's messages are not held behind an email target that
  apprise throttles (one message per 5.5 s), nor behind a webhook that does not answer; the
  order per job and target is kept;
* the scheduled job only wakes the workers, so APScheduler never skips it (counted by the
  scheduler's own max-instances events, not by a log line a filter could hide);
* a worker that finds its claim taken over by another replica sends no more of that queue;
* every message carries the job's dashboard page and a stable event id (the webhook also in
  the ``X-Provisioner-Event`` header); a rate-limit summary lists each folded event's id;
* the dashboard's job page lists the job's notifications with their delivery state.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

pytest.importorskip("apprise")
pytest.importorskip("aiosmtpd")

from provisioner.control.notify.outbox import Deliverer, Delivery, event_key
from provisioner.control.notify.targets import TargetBook
from provisioner.control.notify.workers import TargetWorkers
from provisioner.control.store import Store
from tests.control.notify.test_notify import FAST, Clock, _drain, _job, _tell
from tests.notify_util import TOKEN, MailReceiver, SlackReceiver, wait_for

DASH = "http://dash.example:8470/"


@pytest.fixture(autouse=True)
def _logging_undone() -> Iterator[None]:
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
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 's.db'}")
    yield s
    s.close()


def _workers(d: Deliverer) -> TargetWorkers:
    return TargetWorkers(d, lambda _rep: None)


def _wake_until(w: TargetWorkers, done: object, timeout: float = 60.0) -> None:
    """Wake the workers as the daemon's scheduled job does, until ``done()`` holds."""

    def step() -> bool:
        w.wake()
        return bool(done())  # type: ignore[operator]

    assert wait_for(step, timeout, every=0.05)


# -- one worker per target ---------------------------------------------------------------------


def test_a_webhook_is_not_held_behind_an_email_that_apprise_throttles(
    store: Store, slack: SlackReceiver, mail: MailReceiver
) -> None:
    """Three events to an email target and a webhook: the webhook gets all three before the
    email's second (apprise waits 5.5 s between two emails to one target); each target gets
    its own three in order. The times are printed, not asserted."""
    clock = Clock()
    book = TargetBook({"mail": mail.url, "team": slack.url}, {}, {})
    d = Deliverer(store, book, "r1", FAST, clock=clock, dashboard_url=DASH)
    jid = _job(store)
    # the email's rows first: one thread in id order would send all of it before the webhook
    for event in ("preempted", "restarted", "succeeded"):
        _tell(store, jid, event, ("mail", "team"))
    w = _workers(d)
    start = time.time()
    try:
        _wake_until(w, lambda: len(slack.messages) == 3 and len(mail.messages) == 3)
    finally:
        w.close()
    [email] = d.sender._objects[mail.url]  # the premise: apprise throttles this target
    assert email.request_rate_per_sec > 0
    second_email = mail.messages[1].seq
    assert all(m.seq < second_email for m in slack.messages), (
        "the webhook waited behind the throttled email: "
        + ", ".join(f"{m.title} #{m.seq}" for m in [*slack.messages, *mail.messages])
    )
    words = ["preempted number 1", "restarted number 1", "succeeded number 1"]
    assert [m.text for m in slack.messages] == words
    assert [m.text.strip() for m in mail.messages] == words
    print(
        f"\nwebhook: its 3 messages {slack.messages[-1].at - start:.2f} s after the first wake;"
        f" email: its 3 after {mail.messages[-1].at - start:.2f} s (apprise's throttle: "
        f"{email.request_rate_per_sec} s)"
    )
    assert {r.state for r in store.notifications(jid)} == {"sent"}


def test_the_scheduled_job_never_waits_on_a_send_and_is_never_skipped(
    store: Store, slack: SlackReceiver
) -> None:
    """A webhook that holds every request: the job APScheduler runs every 0.1 s returns at
    once (no max-instances skip in 3 s), and another webhook gets its messages meanwhile."""
    from apscheduler.events import EVENT_JOB_EXECUTED, EVENT_JOB_MAX_INSTANCES
    from apscheduler.schedulers.background import BackgroundScheduler

    from provisioner.control.daemon.config import NotifyConfig
    from provisioner.control.daemon.metrics import Metrics
    from provisioner.control.daemon.notifying import Notifications

    other = SlackReceiver()
    try:
        book = TargetBook({"slow": slack.url, "other": other.url}, {}, {})
        n = Notifications(store, NotifyConfig(), "r1", book, Clock())
        n.deliverer.delivery = FAST
        jid = _job(store)
        slack.holding.set()  # seen, never answered until released
        _tell(store, jid, "preempted", ("slow", "other"))
        metrics = Metrics()
        skipped: list[object] = []
        ran: list[object] = []
        sched = BackgroundScheduler()
        sched.add_listener(skipped.append, EVENT_JOB_MAX_INSTANCES)
        sched.add_listener(ran.append, EVENT_JOB_EXECUTED)
        sched.add_job(n.tick, "interval", args=[metrics], seconds=0.1, max_instances=1)
        sched.start()
        try:
            assert wait_for(lambda: len(slack.messages) == 1, 30), "the slow target got nothing"
            _tell(store, jid, "restarted", ("slow", "other"))  # while the slow one is held
            assert wait_for(lambda: len(other.messages) == 2, 30), other.titles()
            assert "slow" in n.workers.busy()  # still in its first send
            runs = len(ran)
            assert wait_for(lambda: len(ran) >= runs + 10, 30)  # ten more while it is held
            assert "slow" in n.workers.busy() and len(slack.messages) == 1
            assert skipped == [], f"{len(skipped)} runs of the job were skipped"
        finally:
            sched.shutdown(wait=True)
            slack.holding.clear()
            slack.release.set()
        assert wait_for(lambda: n.workers.busy() == [], 30)
        n.tick(metrics)  # the held one was sent and marked: the next is sent in order
        assert wait_for(lambda: len(slack.messages) == 2, 30)
        assert [m.text for m in slack.messages] == [m.text for m in other.messages]
        assert [m.text for m in slack.messages] == ["preempted number 1", "restarted number 1"]
        n.close()
    finally:
        other.close()


def test_a_worker_whose_claim_was_taken_over_sends_no_more_of_that_queue(
    store: Store, slack: SlackReceiver
) -> None:
    """Its lease ran out while it sent (a slow target) and another replica claimed the queue:
    the renewal before the next send fails and it stops; the other replica sends the rest in
    order, nothing twice."""
    clock = Clock()
    jid = _job(store)
    _tell(store, jid, "restarted", ("team",), n=3)
    book = TargetBook({"team": slack.url}, {}, {})
    lease = timedelta(seconds=30)
    slow = Deliverer(store, book, "r1", Delivery(lease=lease), clock=clock)
    [queue] = store.claim_notifications("r1", clock(), lease)

    passed = [timedelta(0)]  # how long r1's sends have taken (its clock runs on by it)
    slow.clock = lambda: clock() + passed[0]

    class TakenOver:
        """r1's sender: its first send takes longer than the lease, and r2 claims the queue
        meanwhile (r1's claim ran out)."""

        def __init__(self, real: object) -> None:
            self.real, self.sends = real, 0

        def send(self, *args: object, **kw: object) -> None:
            self.real.send(*args, **kw)  # type: ignore[attr-defined]
            self.sends += 1
            passed[0] = lease + timedelta(seconds=1)
            assert store.claim_notifications("r2", slow.clock(), lease) != []

    sender = TakenOver(slow.sender)
    slow.sender = sender  # type: ignore[assignment]
    from provisioner.control.notify.outbox import TickReport, _Tick

    t = _Tick(TickReport())
    assert slow._queue(queue, t) is False
    assert sender.sends == 1  # the first message only: the queue is r2's now
    first = store.notifications(jid)[0]
    assert first.state == "sent"
    assert all(r.claimed_by == "r2" for r in store.notifications(jid)[1:])
    r2 = Deliverer(store, book, "r2", FAST, clock=lambda: clock() + lease + timedelta(seconds=2))
    _drain(r2, lambda: len(slack.messages) == 3)
    assert [m.text for m in slack.messages] == [f"restarted number {i}" for i in (1, 2, 3)]


# -- what a message carries --------------------------------------------------------------------


def test_every_message_has_the_jobs_link_and_an_event_id(
    store: Store, slack: SlackReceiver, mail: MailReceiver
) -> None:
    clock = Clock()
    book = TargetBook({"team": slack.url, "mail": mail.url}, {}, {})
    d = Deliverer(store, book, "r1", FAST, clock=clock, dashboard_url=DASH)
    jid = _job(store)
    for event in ("preempted", "succeeded"):
        _tell(store, jid, event, ("team", "mail"))
    _drain(d, lambda: len(slack.messages) == 2 and len(mail.messages) == 2)
    events = [e for e in store.events(jid) if e.kind in ("preempted", "succeeded")]
    ids = [f"{jid}/{e.id}" for e in events]
    link = f"http://dash.example:8470/jobs/{jid}"
    for receiver in (slack, mail):
        assert [m.link for m in receiver.messages] == [link, link]
        assert [m.event_id for m in receiver.messages] == ids
    assert [m.header for m in slack.messages] == ids  # the webhook's header: the same id
    assert [event_key(r) for r in store.notifications(jid)] == [ids[0], ids[0], ids[1], ids[1]]
    # without a dashboard: no link, the event id still
    plain = Deliverer(store, book, "r1", FAST, clock=clock)
    _tell(store, jid, "failed", ("team",))
    _drain(plain, lambda: len(slack.messages) == 3)
    assert slack.messages[-1].link is None and slack.messages[-1].event_id.startswith(jid + "/")


def test_a_repeat_carries_the_same_event_id(store: Store, slack: SlackReceiver) -> None:
    """The daemon died between the send and the mark: the message is sent again once its
    lease runs out, with the id it had, so the receiver can drop it."""
    clock = Clock()
    jid = _job(store)
    _tell(store, jid, "preempted", ("team",))
    book = TargetBook({"team": slack.url}, {}, {})
    d = Deliverer(store, book, "r1", FAST, clock=clock)
    [queue] = store.claim_notifications("r1", clock(), FAST.lease)
    [row] = queue
    d.sender.send(slack.url, row.title, f"{row.body}\n\nEvent id: {event_key(row)}")  # sent...
    # ... and never marked: another replica, after the lease
    later = Deliverer(store, book, "r2", FAST, clock=lambda: clock() + FAST.lease * 2)
    _drain(later, lambda: len(slack.messages) == 2)
    assert slack.messages[0].event_id == slack.messages[1].event_id == f"{jid}/{row.event_id}"
    assert slack.messages[1].header == slack.messages[1].event_id


def test_a_summary_lists_the_event_id_of_each_folded_message(
    store: Store, slack: SlackReceiver
) -> None:
    clock = Clock()
    limited = Delivery(rate_messages=2, rate_per=timedelta(minutes=1), lease=timedelta(seconds=5))
    d = Deliverer(
        store, TargetBook({"team": slack.url}, {}, {}), "r1", limited, clock=clock,
        dashboard_url=DASH,
    )  # fmt: skip
    jid = _job(store)
    _tell(store, jid, "restarted", ("team",), n=4)
    d.tick()
    assert len(slack.messages) == 2
    rows = store.notifications(jid)
    summary = slack.messages[1]
    for r in rows[1:]:
        assert f"[event id {event_key(r)}]" in summary.text
    assert summary.header == ",".join(event_key(r) for r in rows[1:])
    assert summary.link == f"http://dash.example:8470/jobs/{jid}"


# -- the dashboard -----------------------------------------------------------------------------


def test_the_job_page_lists_its_notifications_and_their_delivery_state(
    store: Store, slack: SlackReceiver
) -> None:
    from provisioner.dashboard import DashboardServer

    clock = Clock()
    book = TargetBook({"team": slack.url}, {}, {})
    d = Deliverer(store, book, "r1", FAST, clock=clock)
    jid = _job(store)
    _tell(store, jid, "preempted", ("team", "nobody"))  # sent; no such target: failed
    d.tick()
    assert wait_for(lambda: len(slack.messages) == 1, 10)
    slack.failing.set()
    _tell(store, jid, "restarted", ("team",))  # the receiver answers 500: pending, retried
    _drain(d, lambda: store.notifications(jid)[-1].tries >= 1)
    server = DashboardServer(store, port=0, clock=clock)
    server.start()
    try:
        base = server.url.rstrip("/")
        doc = json.loads(urllib.request.urlopen(f"{base}/jobs/{jid}?format=json").read())
        html = urllib.request.urlopen(f"{base}/jobs/{jid}").read().decode()
    finally:
        server.close()
    rows = doc["notifications"]["rows"]
    assert [(r["event"], r["target"], r["state"]) for r in rows] == [
        ("preempted", "team", "sent"),
        ("preempted", "nobody", "failed"),
        ("restarted", "team", "pending"),
    ]
    assert rows[0]["sent_at"] is not None and rows[0]["event_id"] == event_key(
        store.notifications(jid)[0]
    )
    assert "PROVISIONER_NOTIFY_NOBODY" in rows[1]["error"]
    assert rows[2]["tries"] >= 1 and "500" in rows[2]["error"]
    assert doc["notifications"]["counts"] == {"sent": 1, "failed": 1, "pending": 1}
    assert 'id="notifications"' in html
    for r in rows:
        assert r["event_id"] in html
    assert html.count('class="notification"') == 3
    for state in ("sent", "failed", "pending"):
        assert f'data-state="{state}"' in html
    assert TOKEN not in html and TOKEN not in json.dumps(doc)


def test_two_targets_sharing_one_url_send_one_at_a_time(store: Store, slack: SlackReceiver) -> None:
    """The per-URL lock: two names for one webhook are two workers, one apprise object; the
    header of one message never leaks into another's."""
    clock = Clock()
    book = TargetBook({"a": slack.url, "b": slack.url}, {}, {})
    d = Deliverer(store, book, "r1", FAST, clock=clock)
    jid = _job(store)
    for _ in range(3):
        _tell(store, jid, "restarted", ("a", "b"))
    w = _workers(d)
    try:
        _wake_until(w, lambda: len(slack.messages) == 6)
    finally:
        w.close()
    assert all(m.header == m.event_id for m in slack.messages)
    assert len({m.event_id for m in slack.messages}) == 3  # each event, once to each name


def test_a_reload_keeps_one_thread_per_target(store: Store, slack: SlackReceiver) -> None:
    """``systemctl reload`` while a send is held: the same thread goes on with the new
    settings, so no second thread sends the held message again or the next one before it."""
    from provisioner.control.daemon.config import NotifyConfig
    from provisioner.control.daemon.metrics import Metrics
    from provisioner.control.daemon.notifying import Notifications

    book = TargetBook({"team": slack.url}, {}, {})
    n = Notifications(store, NotifyConfig(), "r1", book, Clock())
    n.deliverer.delivery = FAST
    jid = _job(store)
    slack.holding.set()
    _tell(store, jid, "preempted", ("team",))
    metrics = Metrics()
    n.tick(metrics)
    assert wait_for(lambda: len(slack.messages) == 1, 30)
    n.reconfigure(NotifyConfig(lease="5s"), TargetBook({"team": slack.url}, {}, {}), DASH)
    _tell(store, jid, "restarted", ("team",))
    for _ in range(20):  # the daemon's job, again and again, while the first send is held
        n.tick(metrics)
        time.sleep(0.02)
    assert len(slack.messages) == 1, [m.text for m in slack.messages]
    assert [t.name for t in threading.enumerate()].count("notify-team") == 1
    slack.holding.clear()
    slack.release.set()
    assert wait_for(lambda: (n.tick(metrics), len(slack.messages) == 2)[1], 30)
    assert [m.text for m in slack.messages] == ["preempted number 1", "restarted number 1"]
    assert slack.messages[0].link is None and slack.messages[1].link == f"{DASH}jobs/{jid}"
    n.close()


def test_the_dashboards_public_url_is_an_address_or_refused_at_its_line(tmp_path: Path) -> None:
    from policies.loader import PolicyError
    from provisioner.control.daemon.config import load_config

    cfg = tmp_path / "d.yaml"
    cfg.write_text("dashboard:\n  public_url: gpu.example.com\n")
    with pytest.raises(PolicyError) as info:
        load_config(str(cfg))
    shown = str(info.value.issues[0])
    assert ":2:" in shown and "dashboard.public_url" in shown and "https://" in shown, shown
    cfg.write_text("dashboard: {public_url: 'https://gpu.example.com/'}\n")
    assert load_config(str(cfg)).dashboard.public_url == "https://gpu.example.com/"
