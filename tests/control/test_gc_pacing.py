"""The daemon's garbage collector, paced by its passes (provisioner.control.heap): off inside a
pass, the survivors frozen after it, a full collection at most once per period, thawed at the
end; and a reconciler paces it only when asked (the daemon's does)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import ClassVar

from provisioner.control.heap import GcPacer, paced
from provisioner.control.store import Store


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_paced_pass_runs_without_the_collector_and_freezes_what_survives() -> None:
    pacer = GcPacer(enabled=True, full_every_s=3600.0)
    assert gc.isenabled()
    try:
        with pacer.pass_():
            assert not gc.isenabled()  # no automatic collection inside a pass
            kept = [Cycle() for _ in range(100)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(kept)  # the survivors are skipped from now on
        assert pacer.full_collections == 0  # the period has not passed
    finally:
        pacer.close()
    assert gc.get_freeze_count() == 0  # thawed: the collector sees them again


def test_frozen_cycles_wait_for_the_periodic_full_collection_or_the_thaw() -> None:
    import weakref

    every = GcPacer(enabled=True, full_every_s=0.0)  # every pass ends a period
    try:
        kept = Cycle()
        with every.pass_():
            pass
        gone = weakref.ref(kept)
        del kept  # garbage now, frozen by the pass before
        gc.collect()
        assert gone() is not None  # frozen: an ordinary collection skips it
        with every.pass_():
            pass
        assert gone() is None  # the full collection after the pass freed it
        assert every.full_collections == 2
    finally:
        every.close()
    seldom = GcPacer(enabled=True, full_every_s=3600.0)
    try:
        kept = Cycle()
        with seldom.pass_():
            pass
        gone = weakref.ref(kept)
        del kept
        with seldom.pass_():
            pass
        gc.collect()
        assert gone() is not None and seldom.full_collections == 0  # it waits
    finally:
        seldom.close()
    gc.collect()
    assert gone() is None  # thawed at the reconciler's close: collected as usual


def test_only_a_reconciler_asked_to_paces_the_collector(tmp_path: Path) -> None:
    from datetime import timedelta

    from provisioner.control.daemon.config import DaemonConfig
    from provisioner.control.daemon.service import reconciler_for
    from provisioner.control.reconciler import Reconciler

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    plain = Reconciler(store)
    daemon = reconciler_for(store, DaemonConfig(reconcile_interval=timedelta(seconds=5)), "t")
    try:
        assert not plain.gc.enabled and daemon.gc.enabled

        class Probe:
            gc = GcPacer(enabled=True)
            seen: ClassVar[list[bool]] = []

            @paced
            def run(self) -> int:
                self.seen.append(gc.isenabled())
                return 7

        probe = Probe()
        assert probe.run() == 7 and probe.seen == [False]
        probe.gc.close()
    finally:
        plain.close()
        daemon.close()
        store.close()
