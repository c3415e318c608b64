"""The daemon's delivery of the outbox, off the reconcile pass's path (its own scheduled job).

Each tick claims queues (one job's rows for one target, in order; see
:mod:`provisioner.control.store.outbox`), sends each row and marks it sent right after. A
target that fails a send is not tried again in that tick (its other queues are released), so
a dead receiver costs one timeout a tick, not one per job.

**At least once.** A row is marked sent only after the target accepted it. A daemon killed
between the send and the mark leaves that row claimed; once the claim's lease runs out the
next claimer sends it again: that one message is repeated once, nothing is lost. A daemon
killed before the send (after the event was committed, after the claim) loses nothing either:
the row is sent when its lease runs out. Only the row in flight can be repeated, since each is
marked as soon as it is sent.

**In order, rate-limited.** A queue is sent oldest first and stops at a row that fails (it is
retried on tenacity's exponential schedule, kept in the row so that it outlives the process;
after ``tries`` it is given up and an event says so). At most ``rate_messages`` messages per
``rate_per`` go to one target about one job; when more are waiting than the window has room
for, the last message of the window is a summary that carries all the rest.

**Per target.** :meth:`Deliverer.tick` with a ``target`` claims only that target's queues;
the daemon runs one worker per target (:mod:`.workers`), so a target that is slow or
throttled (apprise sends email at most once per 5.5 s) delays its own queues only. A queue
held longer than half its lease is renewed before the next send; a claim found lost (another
replica took the queue over) stops the queue, so one job's messages to one target are never
sent by two senders at once, nor out of order.

**What a message carries.** The row's title and body, then the job's dashboard page (when the
daemon serves one) and the event id (:func:`event_key`: the job and the store's event row,
the same on every try), which webhooks also get in the ``X-Provisioner-Event`` header: a
receiver drops a message whose id it has seen (at least once may mean twice).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from provisioner.control.failpoints import Failpoints, installed
from provisioner.control.notify.send import EVENT_HEADER, NoApprise, Sender, SendError
from provisioner.control.notify.targets import TargetBook
from provisioner.control.store import NotificationRow, Store
from provisioner.control.store.outbox import EXPIRED, FAILED

log = logging.getLogger("provisioner.control.notify")


@dataclass(frozen=True)
class Delivery:
    """How the outbox is delivered (the daemon's ``notify:`` configuration)."""

    lease: timedelta = timedelta(seconds=60)
    tries: int = 12
    first_retry: timedelta = timedelta(seconds=10)
    max_retry: timedelta = timedelta(minutes=10)
    rate_messages: int = 5
    rate_per: timedelta = timedelta(minutes=1)
    max_age: timedelta = timedelta(hours=24)
    queues_per_tick: int = 20

    def retry_after(self, tries: int) -> timedelta:
        """The wait after the ``tries``-th failed send: tenacity's exponential schedule."""
        import tenacity

        state = tenacity.RetryCallState(tenacity.Retrying(), fn=None, args=(), kwargs={})
        state.attempt_number = max(1, tries)
        wait = tenacity.wait_exponential(
            multiplier=self.first_retry.total_seconds(), max=self.max_retry.total_seconds()
        )
        return timedelta(seconds=float(wait(state)))


@dataclass
class TickReport:
    sent: int = 0  # messages (a summary is one)
    rows: int = 0  # rows marked sent (a summary marks several)
    retried: int = 0
    failed: int = 0  # rows given up (tries spent, or no such target)
    expired: int = 0
    held: int = 0  # rows waiting for room in the rate window
    errors: list[str] = field(default_factory=list)


def _utcnow() -> datetime:
    return datetime.now(UTC)


def event_key(row: NotificationRow) -> str:
    """A message's event id: the job and its event's row in the store (``JOB/EVENT``); the
    same on every try and on a repeat after a crash, so a receiver can drop duplicates."""
    job = row.job_id or "daemon"
    return f"{job}/{row.event_id}" if row.event_id is not None else f"{job}/n{row.id}"


def job_link(base: str | None, job_id: str | None) -> str | None:
    """The job's page on the dashboard at ``base`` (None: no dashboard served, or no job)."""
    if not base or not job_id:
        return None
    return f"{base.rstrip('/')}/jobs/{job_id}"


@dataclass
class _Tick:
    """One tick's working state (ticks of different targets run at once, in workers)."""

    rep: TickReport
    release: list[int] = field(default_factory=list)  # claimed and not tried: freed at the end


class Deliverer:
    def __init__(
        self,
        store: Store,
        book: TargetBook,
        owner: str,
        delivery: Delivery | None = None,
        *,
        sender: Sender | None = None,
        failpoints: Failpoints | None = None,
        clock: Callable[[], datetime] | None = None,
        dashboard_url: str | None = None,
    ) -> None:
        self.store, self.book, self.owner = store, book, owner
        self.delivery = delivery or Delivery()
        self.sender = sender or Sender()
        self.failpoints = failpoints or installed()
        self.clock = clock or _utcnow  # the daemon's: every time written here comes from it
        self.dashboard_url = dashboard_url  # the job's page in every message (when served)
        self._warned: set[str] = set()

    def tick(self, target: str | None = None) -> TickReport:
        """Claim what is due (``target``'s queues only, when given) and deliver it; the rest
        waits for a later tick. Ticks of different targets may run at once; two ticks of one
        target must not (the daemon's workers: one per target)."""
        d, t = self.delivery, _Tick(TickReport())
        queues = self.store.claim_notifications(
            self.owner, self.clock(), d.lease, queues=d.queues_per_tick, target=target
        )
        down: set[str] = set()  # targets that failed this tick: not tried again until the next
        try:
            for i, rows in enumerate(queues):
                if rows[0].target in down:
                    t.release += [r.id for r in rows]
                    continue
                try:
                    if not self._queue(rows, t):
                        down.add(rows[0].target)
                except NoApprise as exc:  # nothing can be sent: every queue to a later tick
                    self._warn_once("apprise", str(exc))
                    t.release += [r.id for later in queues[i:] for r in later]
                    break
        finally:
            self.store.release_notifications(self.owner, t.release)
        return t.rep

    def _queue(self, rows: list[NotificationRow], t: _Tick) -> bool:
        """Deliver one queue in order; False when its target failed a send (or the claim on
        the queue was lost)."""
        d, now, rep = self.delivery, self.clock(), t.rep
        old = [r for r in rows if r.created_at < now - d.max_age]
        if old:
            age = f"older than {d.max_age}: not sent"
            self.store.end_notifications([r.id for r in old], EXPIRED, age)
            rep.expired += len(old)
            rows = [r for r in rows if r.created_at >= now - d.max_age]
        if not rows:
            return True
        job_id, target = rows[0].job_id, rows[0].target
        url = self.book.url(target)
        if url is None:
            from policies.notify import NOTIFY_FILE, env_name

            why = f"no target named {target!r}: give its URL in {NOTIFY_FILE} or {env_name(target)}"
            self.store.end_notifications([r.id for r in rows], FAILED, why)
            self._warn_once("target:" + target, f"notifications to {target} not sent: {why}")
            self._event(job_id, target, why, len(rows))
            rep.failed += len(rows)
            return True
        room = d.rate_messages - self.store.messages_sent_since(job_id, target, now - d.rate_per)
        if room <= 0:  # the window is full: they wait (claimed rows freed for a later tick)
            t.release += [r.id for r in rows]
            rep.held += len(rows)
            return True
        singles = rows if len(rows) <= room else rows[: room - 1]
        link = job_link(self.dashboard_url, job_id)
        held_until = rows[0].claimed_until
        for i, r in enumerate(singles):
            held_until = self._hold(rows[i:], held_until)
            if held_until is None:  # another replica has the queue now: it goes on from here
                return False
            key = event_key(r)
            if not self._send(url, r, r.title, _body(r.body, link, key), [r.id], rep, key):
                t.release += [x.id for x in rows[i + 1 :]]
                return False
        rest = rows[len(singles) :]
        if rest:
            if self._hold(rest, held_until) is None:
                return False
            title, body = _summary(rest, d, link)
            keys = ",".join(event_key(r) for r in rest)
            return self._send(url, rest[0], title, body, [r.id for r in rest], rep, keys)
        return True

    def _hold(self, rows: list[NotificationRow], until: datetime | None) -> datetime | None:
        """The queue's claim before a send: renewed when less than half the lease is left
        (a slow target's long queue); None when it is no longer this replica's."""
        now, lease = self.clock(), self.delivery.lease
        if until is not None and until - now > lease / 2:
            return until
        new = now + lease
        if not self.store.renew_notifications(self.owner, [r.id for r in rows], new):
            log.info(
                "notifications of job %s to %s: the claim ran out and another replica has "
                "them; it sends the rest", rows[0].job_id, rows[0].target,
            )  # fmt: skip
            return None
        return new

    def _send(
        self,
        url: str,
        carrier: NotificationRow,
        title: str,
        body: str,
        ids: Sequence[int],
        rep: TickReport,
        key: str,
    ) -> bool:
        self.failpoints.hit("after-notify-claim")  # claimed, nothing sent yet
        try:
            self.sender.send(url, title, body, {EVENT_HEADER: key})
        except SendError as exc:
            tries = carrier.tries + 1
            give_up = tries >= self.delivery.tries
            wait = self.delivery.retry_after(tries)
            self.store.retry_notification(
                carrier.id, self.clock() + wait, str(exc), give_up=give_up
            )
            rep.errors.append(str(exc))
            if give_up:
                rep.failed += 1
                why = f"gave up after {tries} tries: {exc}"
                log.warning("notification %d to %s %s", carrier.id, carrier.target, why)
                self._event(carrier.job_id, carrier.target, why, 1)
            else:
                rep.retried += 1
                log.info(
                    "notification %d to %s failed (try %d of %d): %s; again in %s",
                    carrier.id, carrier.target, tries, self.delivery.tries, exc, wait,
                )  # fmt: skip
            return False
        self.failpoints.hit("after-notify-send")  # sent, not marked: sent again after the lease
        self.store.mark_notifications_sent(
            ids, self.clock(), carrier=carrier.id if len(ids) > 1 else None
        )
        rep.sent += 1
        rep.rows += len(ids)
        return True

    def _event(self, job_id: str | None, target: str, why: str, n: int) -> None:
        try:
            self.store.add_event(
                job_id, "notify-failed", f"{n} notification(s) to {target} not sent: {why}",
                at=self.clock(), target=target,
            )  # fmt: skip
        except Exception as exc:  # the store's trouble: the log has it
            log.warning("cannot record a failed notification: %s", exc)

    def _warn_once(self, key: str, text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", text)


def _body(body: str, link: str | None, key: str) -> str:
    """The row's words, then the job's page and the event id."""
    tail = [f"Job page: {link}"] if link else []
    return "\n".join([body, "", *tail, f"Event id: {key}"])


def _summary(rows: list[NotificationRow], d: Delivery, link: str | None) -> tuple[str, str]:
    """One message for the rows the rate limit folds together (their titles and event ids,
    in order)."""
    per = int(d.rate_per.total_seconds())
    window = f"{per // 60} min" if per % 60 == 0 else f"{per} s"
    title = f"provisioner: job {rows[0].job_id}: {len(rows)} more notifications"
    lines = [
        f"- {r.created_at:%H:%M:%S}Z {r.title.removeprefix('provisioner: ')} "
        f"[event id {event_key(r)}]"
        for r in rows
    ]
    tail = [f"Job page: {link}"] if link else []
    body = "\n".join(
        [
            *lines,
            f"(at most {d.rate_messages} messages a {window} about one job; folded into one)",
            *tail,
        ]
    )
    return title, body
