"""Notifications: a job's events told to people, through apprise (Slack, Discord, Teams, email,
ntfy, webhooks and the rest).

* :mod:`.targets`: target names to URLs (the daemon's ``notify.yaml``, mode 0600, and
  ``PROVISIONER_NOTIFY_<NAME>``), every URL and its token parts registered for redaction;
* :mod:`.route`: which event goes to which targets, with what words (the pass writes the
  outbox rows in the event's own transaction);
* :mod:`.send`: one message to one URL through apprise (an optional extra, imported lazily);
* :mod:`.outbox`: the daemon's delivery, off the pass's path: claims, ordered queues per job
  and target, the rate limit, retries on tenacity's schedule, at least once; each message
  with the job's dashboard page and its event id;
* :mod:`.workers`: one delivery thread per target, woken by the daemon's scheduled job, so
  a slow or throttled target delays only itself.
"""
