"""Optional capabilities are protocols (providers/capabilities.py), checked with isinstance.

An adapter has a capability by having its methods; the one interface (providers.base.Provider)
no longer asks every adapter for offers and prices, and the code that refreshes prices asks
``isinstance(provider, LivePrices)`` instead of reading a flag.
"""

from __future__ import annotations

import builtins
import json
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path

import pytest

from providers import base
from providers.capabilities import (
    CommitmentQuote,
    Commitments,
    ListsOffers,
    LivePrices,
    PlacementGroup,
    PlacementGroups,
)
from provisioner.core.models import Instance, Interruption, LaunchRequest

PROTOCOLS = (LivePrices, ListsOffers, PlacementGroups, Commitments)


class PlainProvider(base.Provider):
    """The interface and nothing more: no live prices, no offer list."""

    name = "plain"

    def __init__(self) -> None:
        self.closed = 0

    def launch(self, request: LaunchRequest) -> Instance:
        raise NotImplementedError

    def get(self, instance_id: str) -> Instance:
        raise NotImplementedError

    def list(self, tags: Mapping[str, str] | None = None) -> builtins.list[Instance]:
        return []

    def terminate(self, instance_ids: Iterable[str]) -> None:
        pass

    def interruptions(self, since: datetime) -> builtins.list[Interruption]:
        return []

    def prices_please(self) -> None:  # a near miss is not the capability
        pass


@pytest.mark.parametrize(
    "target",
    [
        "providers.aws:AWSProvider",
        "providers.gcp:GCPProvider",
        "providers.azure:AzureProvider",
        "providers.alibaba:AlibabaProvider",
        "providers.tencent:TencentProvider",
        "providers.sim:SimProvider",
    ],
)
def test_every_shipped_adapter_quotes_live_prices_and_lists_offers(target: str) -> None:
    cls = base._load_target(target)
    assert issubclass(cls, base.Provider)
    assert issubclass(cls, LivePrices)
    assert issubclass(cls, ListsOffers)


def test_the_interface_alone_is_a_provider_without_the_optional_capabilities() -> None:
    plain = PlainProvider()  # offers and prices are no longer abstract: this builds
    assert isinstance(plain, base.Provider)
    for protocol in PROTOCOLS:
        assert not isinstance(plain, protocol), protocol.__name__
    # how a cap is honoured is each adapter's business (GCP checks it before launch): no flag
    assert not hasattr(base.Provider, "accepts_bid_cap")
    for target in ("aws:AWSProvider", "gcp:GCPProvider", "azure:AzureProvider", "sim:SimProvider"):
        assert not hasattr(base._load_target(f"providers.{target}"), "accepts_bid_cap"), target


def test_each_protocol_is_matched_by_its_methods_and_by_nothing_less() -> None:
    class Gangs:
        def ensure_placement_group(
            self, name: str, region: str, zone: str, tags: Mapping[str, str]
        ) -> str:
            return f"pg-{name}"

        def delete_placement_group(self, group_id: str) -> None:
            pass

        def list_placement_groups(
            self, tags: Mapping[str, str] | None = None
        ) -> builtins.list[PlacementGroup]:
            return []

    class HalfGangs:
        def ensure_placement_group(
            self, name: str, region: str, zone: str, tags: Mapping[str, str]
        ) -> str:
            return f"pg-{name}"

    class Committed:
        def commitment_prices(
            self, regions: Iterable[str] | None = None
        ) -> builtins.list[CommitmentQuote]:
            return []

    assert isinstance(Gangs(), PlacementGroups)
    assert not isinstance(HalfGangs(), PlacementGroups)
    assert isinstance(Committed(), Commitments)
    assert not isinstance(Committed(), PlacementGroups)
    for protocol in PROTOCOLS:  # none is empty (an empty protocol matches every object)
        assert not isinstance(object(), protocol), protocol.__name__


def test_catalog_refresh_of_a_provider_without_live_prices_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from provisioner.cli import EXIT_PROVIDER, main

    monkeypatch.setitem(base.BUILTIN, "plain", f"{__name__}:PlainProvider")
    store = f"sqlite:///{tmp_path / 'store.db'}"
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        with pytest.raises(SystemExit) as info:
            main(["catalog", "refresh", "--provider", "plain", "--store", store])
    finally:  # main() sets up logging onto the captured stderr: leave the root as it was
        root.handlers[:] = handlers
        root.setLevel(level)
    err = capsys.readouterr().err
    assert info.value.code == EXIT_PROVIDER, err
    assert "plain quotes no live prices" in err
    assert "Traceback" not in err


def test_the_daemons_price_refresh_skips_a_provider_without_live_prices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from providers.sim import SimProvider
    from provisioner.control.daemon.service import Daemon

    caplog.set_level(logging.INFO)

    monkeypatch.setitem(base.BUILTIN, "plain", f"{__name__}:PlainProvider")
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text(
        json.dumps(
            {
                "store": f"sqlite:///{tmp_path / 'd.db'}",
                "metrics": {"enabled": False},
                "dashboard": {"enabled": False},
                "providers": {
                    "plain": {},
                    "sim": {"state_dir": str(tmp_path / "sim"), "mimic": "aws"},
                },
            }
        )
    )
    d = Daemon(str(cfg))
    try:
        d.open()
        d.refresh_prices()
        said = [r.getMessage() for r in caplog.records]
        assert "plain quotes no live prices; the catalog's prices stand" in said
        assert not [m for m in said if "price refresh at plain failed" in m], said
        assert d.store.prices("plain") == []
        assert len(d.store.prices("sim")) > 0  # the provider after it is still refreshed
    finally:
        if d.reconciler is not None:
            d.reconciler.close()
        if d.store is not None:
            d.store.close()
        SimProvider(tmp_path / "sim").shutdown_server(terminate_all=True)
