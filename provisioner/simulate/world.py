"""The simulated cloud of the decide()-driven simulator (:mod:`provisioner.simulate.engine`):
its zones, what they cost, and the capacity the account holds there; what the planner would
rank in it at each step (:meth:`World.candidates`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from provisioner.core.models import Market, Offer, Placement, Reservation
from provisioner.simulate.scenario import Scenario

#: the engine's own note of which reservation an instance runs in (its free count)
HELD_TAG = "sim-reservation"


@dataclass
class World:
    """The simulated cloud: which zones exist and what they cost."""

    zones: list[str]
    provider: str = "aws"
    instance_type: str = "p3.2xlarge"
    gpu: str = "V100"
    #: the capacity the account holds (reservations, capacity blocks) of the world's type:
    #: a policy whose market allows ``reserved`` is offered each, first, at a marginal $0/h
    reservations: tuple[Reservation, ...] = ()

    def region(self, zone: str) -> str:
        return zone[:-1] if len(zone) > 1 and zone[-1].isalpha() and zone[-2].isdigit() else zone

    def offer(self, region: str, zone: str, sc: Scenario, spot: float) -> Offer:
        return Offer(
            self.provider, region, zone, self.instance_type, self.gpu, 1, 8, 61,
            sc.price_on_demand, spot,
        )  # fmt: skip

    def candidates(
        self,
        sc: Scenario,
        spot_prices: np.ndarray | None,
        held: bool = False,
        used: Mapping[str, int] | None = None,
    ) -> tuple[Placement, ...]:
        """The planner's candidates in this world: spot in each zone, on-demand in the first;
        with ``held`` (the policy allows ``reserved``), each reservation first, its free count
        less what ``used`` says runs in it (decide() judges whether it is usable now)."""
        out: list[Placement] = []
        for r in self.reservations if held else ():
            free = max(0, r.total - (used or {}).get(r.id, 0))
            offer = self.offer(r.region, r.zone, sc, sc.price_spot)
            held_p = Placement(
                offer, Market.RESERVED, 0.0, None, score=0.0, rank=len(out) + 1,
                nodes=sc.nodes, reservation=replace(r, free=free),
            )  # fmt: skip
            out.append(held_p)
        n_held = len(out)
        for z, zone in enumerate(self.zones):
            price = sc.price_spot if spot_prices is None else float(spot_prices[z])
            offer = self.offer(self.region(zone), zone, sc, price)
            rank = n_held + z + 1
            out.append(Placement(offer, Market.SPOT, price, None, float(z), rank, nodes=sc.nodes))
        first = out[n_held].offer
        od = Placement(
            first, Market.ON_DEMAND, sc.price_on_demand, None, score=99.0, rank=len(out) + 1,
            nodes=sc.nodes,
        )  # fmt: skip
        out.append(od)
        return tuple(out)
