"""A store with jobs in every state, for the dashboard's tests, screenshot and benchmark.

The rows are written through the store's own API in the shapes the reconciler writes them:
attempt rows from :func:`provisioner.control.reconciler.attempt_row` on placements the real planner
ranks over the built-in catalog, launch events carrying :func:`provisioner.control.inputs.plan_digest`
of that plan, and the event kinds and messages the reconciler and agent produce (submitted,
launch, notice, checkpoint, preempted, launch-failed, finished, failed, cancelled). Price
quotes come from the built-in catalog; the price history from the daemon's own recorder.

``python tools/dashboard_sample.py sqlite:///demo.db`` writes one for a look with
``provisioner dashboard --store sqlite:///demo.db``.
"""

from __future__ import annotations

import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from policies.loader import parse_policy  # noqa: E402
from provisioner.control.store import AttemptRow, InstanceRow, JobRow, Store  # noqa: E402
from provisioner.control.store.outbox import Notice  # noqa: E402

LEGACY_ENV = "  env:\n    WANDB_API_KEY: sk-live-do-not-render-0123456789\n"
HOSTILE_NAME = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'
HOSTILE_REASON = "<b>bold</b> & <iframe src=javascript:alert(2)></iframe>"

POLICY = """\
name: {name}
job:
  command: ["python", "-m", "examples.train"]
  compute_hours: 6
  reference_gpu: A10G
  secrets:
    WANDB_API_KEY: aws-sm:wandb-api-key
resources:
  gpu_count: 1
  gpus: {gpus}
market: {market}
bid_cap:
  max_spot_price_per_gpu_hour: 2.5
budget:
  max_total: {budget}
deadline: 48h
residency:
  allow: [EEA]
"""

#: What the sample holds besides any bulk jobs: name -> final state.
SAMPLE_STATES = {
    "llama-7b-lora": "running",  # preempted once, restarted
    "mistral-sft": "succeeded",
    "whisper-batch": "failed",
    "sdxl-finetune": "cancelled",
    "bert-eval": "pending",
    "qwen-dpo": "recovering",
    "t5-distill": "waiting",
    "vit-pretrain": "stopped",
    HOSTILE_NAME: "running",
}


def _policy(
    name: str,
    market: str = "spot-then-on-demand",
    budget: float = 60,
    gpus: str = "[A10G, L4, A100, L40S]",
) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip("-.") or "job"
    return POLICY.format(name=safe[:60], market=market, budget=budget, gpus=gpus)


class _Sample:
    def __init__(self, store: Store, now: datetime) -> None:
        from provisioner.catalog_files import builtin_catalog
        from provisioner.core.catalog import Catalog

        self.store, self.now = store, now
        cat = builtin_catalog()
        self.catalogs = {
            p: Catalog.from_offers(cat.filter(provider=p), p) for p in ("aws", "gcp", "azure")
        }

    def plan(
        self,
        text: str,
        at: datetime,
        cooled: frozenset[tuple[str, str]] = frozenset(),
        provider: str = "aws",
    ) -> Any:
        from provisioner.control.inputs import candidate_plan

        pol = parse_policy(text, "sample.yaml")
        return candidate_plan(pol, self.catalogs[provider], cooled, at)

    def job(self, name: str, text: str, at: datetime, provider: str = "aws", **cols: Any) -> JobRow:
        job = self.store.submit(
            name=name,
            policy_yaml=text,
            policy_path="policies/spot-finetune.yaml",
            provider=provider,
            provider_options={"region": "eu-west-1", "secret_access_key": "NEVER-RENDER-ME"},
            now=at,
            deadline=at + timedelta(hours=48),
            work_total_h=6.0,
        )
        if cols:
            self.store.update_job(job.id, at=at, **cols)
        return job

    def launch(
        self,
        job: JobRow,
        attempt: int,
        text: str,
        at: datetime,
        *,
        rank: int = 0,
        cooled: frozenset[tuple[str, str]] = frozenset(),
        reason: str = "",
        store_plan: bool = True,
    ) -> AttemptRow:
        from provisioner.control.inputs import plan_digest
        from provisioner.control.reconciler import attempt_row

        plan = self.plan(text, at, cooled, job.provider)
        p = plan.placements[min(rank, len(plan.placements) - 1)]
        why = reason or (
            f"cheapest eligible {p.market.value} offer ({p.offer.gpu}, "
            f"${p.price_per_hour:.4f}/h, est. ${p.est_job_cost or 0:.2f} for the job)"
        )
        row = attempt_row(job, attempt, p, at, why)
        self.store.add_attempt(row)
        iid = f"i-{abs(hash((job.id, attempt))) % 16**12:012x}"
        self.store.update_attempt(
            job.id,
            attempt,
            instance_id=iid,
            state="running",
            launched_at=at + timedelta(seconds=40),
        )
        o = p.offer
        self.store.add_event(
            job.id,
            "launch",
            f"attempt {attempt}: {o.provider}:{o.zone or o.region} {o.instance_type} "
            f"({o.gpu_count}x {o.gpu}) {p.market.value} ${p.price_per_hour:.4f}/h -> {iid}; "
            f"why: {why}",
            at=at + timedelta(seconds=40),
            zone=o.zone,
            instance=iid,
            market=p.market.value,
            price=p.price_per_hour,
            attempt=attempt,
            plan=plan_digest(plan, p) if store_plan else None,
        )
        self.store.upsert_instance(
            InstanceRow(
                provider=o.provider,
                instance_id=iid,
                job_id=job.id,
                attempt=attempt,
                region=o.region,
                zone=o.zone or o.region,
                instance_type=o.instance_type,
                market=p.market.value,
                state="running",
                raw_state="running",
                state_reason="",
                price_per_hour=p.price_per_hour,
                launched_at=at + timedelta(seconds=40),
                ended_at=None,
                last_seen_at=self.now,
            )
        )
        row.instance_id, row.launched_at = iid, at + timedelta(seconds=40)
        return row

    def end(self, job: JobRow, a: AttemptRow, at: datetime, state: str, reason: str) -> float:
        from provisioner.control.reconciler import billed_cost

        cost = billed_cost(a.provider, a.price_per_hour, a.launched_at, at)
        self.store.update_attempt(
            job.id, a.attempt, state=state, ended_at=at, end_reason=reason, cost_usd=cost
        )
        self.store.upsert_instance(
            InstanceRow(
                provider=a.provider,
                instance_id=a.instance_id or "",
                job_id=job.id,
                attempt=a.attempt,
                region=a.region,
                zone=a.zone,
                instance_type=a.instance_type,
                market=a.market,
                state="preempted" if state == "preempted" else "terminated",
                raw_state="terminated",
                state_reason=reason,
                price_per_hour=a.price_per_hour,
                launched_at=a.launched_at,
                ended_at=at,
                last_seen_at=at,
            )
        )
        return cost

    def checkpoint(self, job: JobRow, at: datetime, step: int, attempt: int) -> str:
        name = f"step-{step:08d}"
        self.store.add_event(
            job.id,
            "checkpoint",
            f"checkpoint {name} in the checkpoint store (step {step}), attempt {attempt}",
            at=at,
            checkpoint=name,
            attempt=attempt,
        )
        return name

    def progress(self, step: int, total: int, ck: str | None, ck_at: datetime, attempt: int):
        return {
            "state": "running",
            "attempt": attempt,
            "step": step,
            "total_steps": total,
            "last_checkpoint": ck,
            "last_checkpoint_step": int(ck.split("-")[1]) if ck else None,
            "last_checkpoint_at": ck_at.isoformat(),
            "updated_at": self.now.isoformat(),
        }


def _deliver(store: Store, at: datetime) -> None:
    """The notifications just written, delivered as the daemon would: the webhook at once,
    the email after one failed try."""
    lease = timedelta(minutes=1)
    for queue in store.claim_notifications("sample", at, lease):
        for row in queue:
            if row.target == "oncall-email":
                error = "SMTP 421 try again later"
                store.retry_notification(row.id, at + timedelta(seconds=10), error)
                store.mark_notifications_sent([row.id], at + timedelta(seconds=12))
            else:
                store.mark_notifications_sent([row.id], at + timedelta(seconds=1))


def build(store: Store, now: datetime | None = None) -> dict[str, str]:
    """Write the sample jobs; returns ``{name: job id}``."""
    now = now or datetime.now(UTC).replace(microsecond=0)
    s = _Sample(store, now)
    ids: dict[str, str] = {}
    h = timedelta(hours=1)

    # running, preempted once and restarted elsewhere: the timeline the tests look at
    text = _policy("llama-7b-lora")
    t0 = now - 5 * h
    job = s.job("llama-7b-lora", text, t0)
    a1 = s.launch(job, 1, text, t0 + timedelta(seconds=20))
    c1 = s.checkpoint(job, t0 + 0.75 * h, 150, 1)
    s.checkpoint(job, t0 + 1.5 * h, 300, 1)
    notice_at = t0 + 2 * h
    store.add_event(
        job.id,
        "notice",
        f"interruption notice for {a1.instance_id} in {a1.zone} (instance-action: terminate); "
        f"capacity goes at {notice_at + timedelta(minutes=2):%H:%M:%S}; the agent checkpoints",
        at=notice_at,
        instance=a1.instance_id,
    )
    c_final = s.checkpoint(job, notice_at + timedelta(seconds=50), 398, 1)
    pre_at = notice_at + timedelta(minutes=2)
    cost1 = s.end(job, a1, pre_at, "preempted", "Server.SpotInstanceTermination")
    preempted = (
        f"attempt 1 on {a1.provider}:{a1.zone} preempted (Server.SpotInstanceTermination); "
        f"zone cooled down until {pre_at + timedelta(minutes=30):%H:%M:%S}"
    )
    store.add_event(
        job.id,
        "preempted",
        preempted,
        at=pre_at,
        # told to two targets: the webhook took it, the email was retried once, then sent
        notify=Notice("preempted", ("ops-webhook", "oncall-email"), preempted, preempted),
        zone=a1.zone,
        instance=a1.instance_id,
    )
    _deliver(store, pre_at)
    a2 = s.launch(
        job,
        2,
        text,
        pre_at + timedelta(seconds=30),
        cooled=frozenset({(a1.provider, a1.zone)}),
        reason=f"restart from checkpoint {c_final}: cheapest eligible spot offer outside the "
        f"cooled-down zone {a1.zone}",
    )
    c4 = s.checkpoint(job, pre_at + 1.2 * h, 560, 2)
    from provisioner.control.reconciler import billed_cost

    spent = cost1 + billed_cost(a2.provider, a2.price_per_hour, a2.launched_at, now)
    store.update_job(
        job.id,
        at=now,
        state="running",
        restarts=1,
        spent_usd=spent,
        progress=s.progress(640, 1200, c4, pre_at + 1.2 * h, 2),
        work_done_h=6.0 * 560 / 1200,
    )
    ids["llama-7b-lora"] = job.id
    del c1

    # succeeded on on-demand
    text = _policy("mistral-sft", market="on-demand", budget=40)
    t0 = now - 30 * h
    job = s.job("mistral-sft", text, t0)
    a = s.launch(job, 1, text, t0 + timedelta(seconds=15))
    ck = s.checkpoint(job, t0 + 5.5 * h, 1200, 1)
    cost = s.end(job, a, t0 + 5.8 * h, "ended", "job finished")
    store.add_event(
        job.id, "finished", "all work checkpointed and the job exited 0", at=t0 + 5.8 * h
    )
    store.update_job(
        job.id,
        at=now,
        state="succeeded",
        spent_usd=cost,
        reason="all work checkpointed and the job exited 0",
        progress=s.progress(1200, 1200, ck, t0 + 5.5 * h, 1),
        work_done_h=6.0,
    )
    ids["mistral-sft"] = job.id

    # failed: the job's command exited non-zero
    text = _policy("whisper-batch")
    t0 = now - 20 * h
    job = s.job("whisper-batch", text, t0)
    a = s.launch(job, 1, text, t0 + timedelta(seconds=15))
    cost = s.end(job, a, t0 + 0.4 * h, "ended", "job failed: the job exited 1")
    store.add_event(job.id, "failed", "the job exited 1 (CUDA out of memory)", at=t0 + 0.4 * h)
    store.update_job(
        job.id,
        at=now,
        state="failed",
        spent_usd=cost,
        reason="the job exited 1 (CUDA out of memory)",
    )
    ids["whisper-batch"] = job.id

    # cancelled by the user
    text = _policy("sdxl-finetune")
    t0 = now - 9 * h
    job = s.job("sdxl-finetune", text, t0)
    a = s.launch(job, 1, text, t0 + timedelta(seconds=15), rank=1)
    cost = s.end(job, a, t0 + 1.1 * h, "ended", "cancelled")
    store.add_event(
        job.id,
        "cancelled",
        "cancelled; terminated 1 instance(s); checkpoints kept",
        at=t0 + 1.1 * h,
    )
    store.update_job(
        job.id, at=now, state="cancelled", spent_usd=cost, reason="cancelled by the user"
    )
    ids["sdxl-finetune"] = job.id

    # pending: submitted, nothing launched yet (its plan is re-planned on the page)
    text = _policy("bert-eval")
    job = s.job("bert-eval", text, now - timedelta(minutes=2))
    ids["bert-eval"] = job.id

    # recovering: preempted, the next launch hit a capacity error
    text = _policy("qwen-dpo")
    t0 = now - 3 * h
    job = s.job("qwen-dpo", text, t0)
    a = s.launch(job, 1, text, t0 + timedelta(seconds=15))
    cost = s.end(job, a, now - timedelta(minutes=6), "preempted", "Server.SpotInstanceTermination")
    store.add_event(
        job.id,
        "preempted",
        f"attempt 1 on {a.provider}:{a.zone} preempted (Server.SpotInstanceTermination)",
        at=now - timedelta(minutes=6),
        instance=a.instance_id,
    )
    from provisioner.control.reconciler import attempt_row

    plan = s.plan(text, now - timedelta(minutes=5), frozenset({(a.provider, a.zone)}))
    p = plan.placements[0]
    row = attempt_row(job, 2, p, now - timedelta(minutes=5), "restart after preemption")
    store.add_attempt(row)
    store.update_attempt(
        job.id,
        2,
        state="failed",
        ended_at=now - timedelta(minutes=5),
        end_reason="capacity: InsufficientInstanceCapacity",
    )
    store.add_event(
        job.id,
        "launch-failed",
        f"attempt 2 on {p.offer.provider}:{p.offer.zone} {p.offer.instance_type} spot: capacity "
        "(InsufficientInstanceCapacity); trying the next offer",
        at=now - timedelta(minutes=5),
    )
    store.update_job(
        job.id,
        at=now,
        state="recovering",
        restarts=1,
        spent_usd=cost,
        reason="no capacity in the next zone; trying the next offer",
    )
    ids["qwen-dpo"] = job.id

    # waiting: spot above the bid cap everywhere for now
    text = _policy("t5-distill", market="spot")
    job = s.job("t5-distill", text, now - 1.5 * h)
    store.add_event(
        job.id,
        "decide",
        "waiting: every eligible spot offer is above the bid cap; deadline slack 41h",
        at=now - 1.4 * h,
    )
    store.update_job(
        job.id, at=now, state="waiting", reason="every eligible spot offer is above the bid cap"
    )
    ids["t5-distill"] = job.id

    # stopped: the budget ran out
    text = _policy("vit-pretrain", budget=5)
    t0 = now - 40 * h
    # stored before job.env refused credentials: its policy text still carries one, which no
    # page may render (the page shows that the stored policy cannot be read)
    job = s.job("vit-pretrain", text.replace("  secrets:", LEGACY_ENV + "  secrets:"), t0)
    a = s.launch(job, 1, text, t0 + timedelta(seconds=15))
    cost = s.end(job, a, t0 + 7 * h, "ended", "budget exhausted")
    store.update_job(
        job.id,
        at=now,
        state="stopped",
        spent_usd=max(cost, 5.0),
        reason="budget.max_total $5.00 reached; stopped (on_exhausted: stop)",
    )
    ids["vit-pretrain"] = job.id

    # a hostile name and reason: the page must show them as text
    text = _policy("hostile")
    t0 = now - 1 * h
    job = s.job(HOSTILE_NAME, text, t0)
    s.launch(job, 1, text, t0 + timedelta(seconds=15), reason=HOSTILE_REASON, store_plan=False)
    store.add_event(job.id, "notice", HOSTILE_REASON, at=t0 + 0.5 * h)
    store.update_job(job.id, at=now, state="running", reason=HOSTILE_REASON, spent_usd=0.42)
    ids[HOSTILE_NAME] = job.id

    # more of the fleet: a few running jobs on GCP and Azure
    for k, (provider, name) in enumerate(
        [("gcp", "gemma-sft"), ("gcp", "gemma-sft-b"), ("azure", "phi-eval"), ("gcp", "llava-ft")]
    ):
        text = _policy(
            name,
            market="spot-then-on-demand" if k % 2 else "spot",
            gpus="[T4, A10, A100, V100, L4]" if provider == "azure" else "[A10G, L4, A100, L40S]",
        )
        t0 = now - (0.5 + k) * h
        job = s.job(name, text, t0, provider=provider)
        a = s.launch(job, 1, text, t0 + timedelta(seconds=25), rank=k)
        store.update_job(
            job.id,
            at=now,
            state="running",
            spent_usd=billed_cost(a.provider, a.price_per_hour, a.launched_at, now),
            progress=s.progress(150 * (k + 1), 1200, None, t0, 1),
        )
        ids[name] = job.id

    prices(store, now)
    return ids


def prices(store: Store, now: datetime, refreshes: int = 24) -> None:
    """Current quotes from the built-in catalog and a day of hourly refreshes in the history
    (spot prices wandering around the catalog's), through the daemon's recorder."""
    from providers.base import PriceQuote
    from provisioner.catalog_files import builtin_catalog
    from provisioner.dashboard.history import record_price_refresh

    rng = random.Random(7)
    offers = [o for o in builtin_catalog().offers if o.provider in ("aws", "gcp", "azure")]
    drift = {o.instance_type: 1.0 for o in offers}
    quotes: list[Any] = []
    for k in range(refreshes):
        at = now - timedelta(hours=refreshes - 1 - k)
        for t in drift:
            drift[t] = min(1.6, max(0.6, drift[t] * (1 + rng.gauss(0, 0.05))))
        by_provider: dict[str, list[Any]] = {}
        for o in offers:
            spot = None if o.spot_price is None else round(o.spot_price * drift[o.instance_type], 4)
            by_provider.setdefault(o.provider, []).append(
                PriceQuote(o.provider, o.region, o.zone or "", o.instance_type, spot, o.price, at)
            )
        for provider, qs in sorted(by_provider.items()):
            record_price_refresh(store, provider, qs, at)
        quotes = [q for qs in by_provider.values() for q in qs]
    store.save_prices(quotes)


def bulk(store: Store, n: int, now: datetime | None = None, seed: int = 1) -> None:
    """``n`` more jobs (states spread like a busy fleet's), each with one attempt, in a few
    transactions: for the benchmark's 10,000."""
    from provisioner.core.models import launch_token

    now = now or datetime.now(UTC)
    rng = random.Random(seed)
    text = _policy("bulk-job")
    states = ["running"] * 6 + ["succeeded"] * 2 + ["pending", "recovering", "failed", "waiting"]
    zones = [
        ("aws", "eu-west-1", "eu-west-1a"),
        ("aws", "eu-central-1", "eu-central-1b"),
        ("gcp", "europe-west4", "europe-west4-a"),
        ("azure", "westeurope", "westeurope-1"),
    ]
    jobs: list[JobRow] = []
    rest: list[Any] = []  # attempts and instances, written after their jobs
    for i in range(n):
        jid = f"bulk-{i:05d}-{rng.randrange(16**6):06x}"
        at = now - timedelta(minutes=rng.randrange(1, 60 * 48))
        state = rng.choice(states)
        spent = round(rng.uniform(0, 50), 4)
        jobs.append(
            JobRow(
                id=jid,
                name=f"sweep-{i:05d}",
                policy_yaml=text,
                policy_path=None,
                workdir=None,
                provider="aws",
                provider_options={},
                state=state,
                submitted_at=at,
                updated_at=at + timedelta(minutes=5),
                deadline=at + timedelta(hours=48),
                attempt=1,
                restarts=rng.choice([0, 0, 1]),
                spent_usd=spent,
                work_total_h=6.0,
                work_done_h=rng.uniform(0, 6),
                progress={"step": rng.randrange(0, 1200), "total_steps": 1200},
                result={},
                reason="",
                cancel_requested=False,
                owner=None,
                lease_until=None,
                version=0,
            )
        )
        prov, region, zone = rng.choice(zones)
        rest.append(
            AttemptRow(
                job_id=jid,
                attempt=1,
                token=launch_token(jid, 1),
                provider=prov,
                region=region,
                zone=zone,
                instance_type="g5.xlarge",
                gpu="A10G",
                gpu_count=1,
                market=rng.choice(["spot", "spot", "on-demand"]),
                price_per_hour=round(rng.uniform(0.3, 1.2), 4),
                bid_cap_per_hour=None,
                instance_id=f"i-{i:012x}",
                state="running" if state == "running" else "ended",
                reason="cheapest eligible offer",
                created_at=at,
                launched_at=at,
                ended_at=None,
                end_reason="",
                cost_usd=spent,
            )
        )
        if state == "running":
            rest.append(
                InstanceRow(
                    provider=prov,
                    instance_id=f"i-{i:012x}",
                    job_id=jid,
                    attempt=1,
                    region=region,
                    zone=zone,
                    instance_type="g5.xlarge",
                    market="spot",
                    state="running",
                    raw_state="running",
                    state_reason="",
                    price_per_hour=0.5,
                    launched_at=at,
                    ended_at=None,
                    last_seen_at=now,
                )
            )
    with store.session() as sess:
        sess.add_all(jobs)
        sess.flush()
        sess.add_all(rest)


if __name__ == "__main__":
    url = sys.argv[1] if len(sys.argv) > 1 else "sqlite:///dashboard-sample.db"
    st = Store(url)
    got = build(st)
    extra = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    if extra:
        bulk(st, extra)
    print(f"wrote {len(got) + extra} jobs to {url}")
