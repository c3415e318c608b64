"""The daemon's interruption poll starts a pass (or has the pass in flight run again) for a
notice it has not seen, once: several clouds report a notice on every answer while it stands
(Alibaba's Recycling lock), and a poll every 0.5 s must not turn that into a pass every
0.5 s, nor count one notice a hundred times in the metrics. A real sim server and instance."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from providers.sim import SimProvider
from provisioner.control.daemon.service import Daemon, reconciler_for
from provisioner.control.store import Store
from provisioner.core.models import LaunchRequest, Market


def test_a_standing_notice_starts_one_pass_and_counts_once(tmp_path: Path) -> None:
    # a cloud whose API reports the notice (none of the five's adapters reads one today)
    sim = SimProvider(tmp_path / "sim", mtbp_hours=None, idle_exit_s=60, api_notices=True)
    try:
        offer = next(o for o in sim.offers(["us-east-1"]) if o.spot_price)
        inst = sim.launch(
            LaunchRequest(
                job_id="job-a", attempt=1, offer=offer, market=Market.SPOT, bid_cap_per_hour=99.0
            )
        )
        daemon = Daemon(None, f"sqlite:///{tmp_path}/s.db")
        daemon.store = Store(f"sqlite:///{tmp_path}/s.db")
        daemon.reconciler = reconciler_for(daemon.store, daemon.config, daemon.owner)
        daemon.reconciler._providers["sim"] = sim
        start = daemon.last_interruption_poll

        daemon.poll_interruptions()
        assert not daemon.run_again.is_set()  # nothing yet

        sim.preempt(inst.id, notice_s=120)
        daemon.last_interruption_poll = start
        daemon.poll_interruptions()
        assert daemon.run_again.is_set()  # a new notice: a pass now
        counted = daemon.metrics.interruptions.labels(provider="sim")._value.get()
        assert counted == 1

        for _ in range(3):  # the same notice answered again, as a level-triggered cloud does
            daemon.run_again.clear()
            daemon.last_interruption_poll = start
            daemon.poll_interruptions()
            assert not daemon.run_again.is_set()
        assert daemon.metrics.interruptions.labels(provider="sim")._value.get() == counted
        assert daemon.last_interruption_poll > start + timedelta(minutes=5)
        daemon.reconciler._providers.clear()
        daemon.store.close()
        daemon.metrics.close()
    finally:
        sim.shutdown_server(terminate_all=True)
