"""Python API for pipeline orchestration: submit a job, wait for it, cancel it.

    import provisioner
    job = provisioner.up("policies/spot-finetune.yaml")       # sim provider, SQLite store
    job.wait()                                                 # supervises unless a daemon does
    print(job.status, job.spent_usd)

When a daemon (``provisioner daemon``) is alive on the same store, ``up`` hands the job over
and ``wait`` only watches the store; otherwise ``wait`` runs the reconciler itself.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from policies.loader import load_policy, parse_policy
from policies.model import Policy
from provisioner.control.store import FINAL_STATES, Store, live_replicas
from provisioner.errors import JobError

log = logging.getLogger("provisioner")

DEFAULT_PROVIDER = "sim"


class JobFailed(JobError, RuntimeError):
    """Raised by :meth:`Job.wait` (with ``raise_on_failure``) when a job did not succeed."""


def submit(
    policy: Policy | str | os.PathLike[str],
    *,
    provider: str | None = None,
    provider_options: dict[str, Any] | None = None,
    store: Store | str | None = None,
    now: datetime | None = None,
    job_id: str | None = None,
    say: Callable[[str], None] | None = None,
    provider_defaults: bool = True,
    check: bool = True,
    reach_store: bool = False,
) -> tuple[Store, str]:
    """The road ``provisioner up`` takes: the provider's options are its defaults (the sim's
    demo defaults, or the provider's section of ``~/.config/provisioner/providers.yaml``) with
    ``provider_options`` over them, as on the command line (``provider_defaults=False``: the
    options exactly as given). Validate the policy, prepare what its VMs will need (the checkpoint store, the secrets'
    references, the code packed into the store or its git commit pinned, the package a
    cloud's VM installs: :mod:`provisioner.submission`) and record the job in the store;
    returns (store, job id).
    A policy that cannot run raises :class:`~policies.loader.PolicyError` with each problem's
    place, and nothing is written. Before that, what ``up`` refuses is refused here too
    (:func:`provisioner.preflight.check_submission`): an unknown provider or provider option,
    a cloud whose SDK is not installed, and a policy with nothing eligible in the built-in
    catalog raise :class:`~provisioner.preflight.Refused` (``NothingEligible`` for the last,
    with the plan's rejections), and nothing is written (``check=False``: the caller has
    already run that check). ``reach_store=True`` (``up`` asks it) also looks at a remote
    checkpoint store once, with short timeouts
    (:func:`provisioner.objstore.fs.reach_problem`): one this machine cannot reach is a
    problem at the policy's ``checkpoint.uri``."""
    from provisioner.preflight import check_submission
    from provisioner.submission import prepare

    if isinstance(policy, Policy):
        import yaml

        text = yaml.safe_dump(policy.model_dump(mode="json", exclude_none=True), sort_keys=False)
        pol, path = policy, None
    else:
        path = str(policy)
        load_policy(path)  # a PolicyError (file:line:column) for a missing or bad file
        text = Path(path).read_text(encoding="utf-8")
        pol = parse_policy(text, path)  # what the store keeps is what was validated
    prov = provider or DEFAULT_PROVIDER
    provider_options = job_provider_options(prov, provider_options, defaults=provider_defaults)
    if check:
        check_submission(pol, path or pol.name, prov, provider_options)
    ready = prepare(
        pol,
        provider=prov,
        provider_options=provider_options,
        policy_path=path,
        policy_text=text,
        say=say,
        reach_store=reach_store,
    )
    st = store if isinstance(store, Store) else Store(store)
    now = now or datetime.now(UTC)
    work_total = pol.job.compute_hours
    job = st.submit(
        name=pol.name,
        policy_yaml=text,
        policy_path=path,
        provider=prov,
        provider_options=dict(provider_options or {}),
        now=now,
        deadline=pol.deadline_at(now),
        work_total_h=work_total,
        job_id=job_id,
        workdir=os.getcwd(),
        checkpoint_uri=ready.checkpoint_uri,
        code=ready.code,
    )
    for note in ready.notes:
        st.add_event(job.id, "submitted", note, at=now)
    return st, job.id


def job_provider_options(
    provider: str, given: dict[str, Any] | None, *, defaults: bool = True
) -> dict[str, Any]:
    """The options a job's provider is built with: the provider's defaults (see
    :func:`provisioner.providers_config.provider_defaults`) with ``given`` over them."""
    from provisioner.providers_config import provider_defaults

    return {**(provider_defaults(provider) if defaults else {}), **(given or {})}


class Job:
    """A handle on one job in the store."""

    def __init__(
        self, store: Store, job_id: str, *, provider_factory: Callable[..., Any] | None = None
    ) -> None:
        self.store = store
        self.id = job_id
        self._factory = provider_factory

    def refresh(self) -> Any:
        row = self.store.job(self.id)
        if row is None:
            raise KeyError(self.id)
        return row

    @property
    def status(self) -> str:
        return str(self.refresh().state)

    @property
    def spent_usd(self) -> float:
        """What the job has been billed so far, in US dollars to the micro-dollar."""
        return round(float(self.refresh().spent_usd), 6)

    @property
    def result(self) -> dict[str, Any]:
        return dict(self.refresh().result or {})

    def events(self) -> list[Any]:
        return self.store.events(self.id)

    @property
    def ledger(self) -> dict[str, Any]:
        """What the job was billed, what the same runs would have cost on on-demand, what spot
        saved, and what interruptions cost, in total and per attempt (docs/money.md, "The
        ledger"); figures as computed, not rounded."""
        from provisioner.control import ledger

        rows = ledger.store_ledgers(self.store, [self.id], datetime.now(UTC))[self.id]
        return {
            **ledger.totals(rows).as_dict(digits=None),
            "attempts": [ledger.attempt_doc(a, digits=None) for a in rows],
        }

    def cancel(self, now: datetime | None = None) -> None:
        """Terminate the job's instances (checkpoints stay) and mark it cancelled, at ``now``
        (default: the real clock)."""
        from provisioner.control.reconciler import cancel_job, default_provider_factory

        factory = self._factory or default_provider_factory
        cancel_job(self.store, self.id, now=now or datetime.now(UTC), provider_factory=factory)

    def supervised_by_daemon(self) -> bool:
        return bool(live_replicas(self.store, datetime.now(UTC)))

    def wait(
        self,
        timeout: float | None = None,
        *,
        poll_s: float = 1.0,
        raise_on_failure: bool = False,
        on_pass: Callable[[Any], None] | None = None,
    ) -> str:
        """Block until the job ends; supervise it here unless a daemon does. Returns the state."""
        from provisioner.control.reconciler import Reconciler, default_provider_factory

        deadline = None if timeout is None else time.monotonic() + timeout
        rec: Reconciler | None = None
        try:
            while True:
                row = self.refresh()
                if row.state in FINAL_STATES:
                    if rec is not None and any(a.nodes > 1 for a in self.store.attempts(self.id)):
                        left = rec.sweep_job_groups(self.id)  # a gang's group goes with it
                        if left:
                            log.warning(
                                "job %s: placement group(s) %s still in use; the daemon's "
                                "sweep deletes them",
                                self.id,
                                ", ".join(left),
                            )
                    break
                if not self.supervised_by_daemon():
                    if rec is None:
                        rec = Reconciler(
                            self.store,
                            job_ids=[self.id],
                            provider_factory=self._factory or default_provider_factory,
                            lease=timedelta(seconds=max(10.0, 5 * poll_s)),
                            pass_interval_s=poll_s,
                        )
                    report = rec.run_pass()
                    if on_pass:
                        on_pass(report)
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"job {self.id} still {row.state} after {timeout} s")
                time.sleep(poll_s)
        finally:
            if rec is not None:
                self.store.release_jobs(rec.owner)
                rec.close()
        state = self.status
        if raise_on_failure and state != "succeeded":
            raise JobFailed(f"job {self.id} ended {state}: {self.refresh().reason}")
        return state

    def __repr__(self) -> str:
        return f"<Job {self.id}>"


def up(
    policy: Policy | str | os.PathLike[str],
    *,
    provider: str | None = None,
    provider_options: dict[str, Any] | None = None,
    store: Store | str | None = None,
) -> Job:
    """Submit a job under ``policy`` as ``provisioner up --detach`` does (the same provider
    defaults, the same checks of the job's road); call :meth:`Job.wait` to see it through."""
    st, job_id = submit(policy, provider=provider, provider_options=provider_options, store=store)
    return Job(st, job_id)
