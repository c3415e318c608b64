"""Spot availability learned online: per-zone lifetime and outage estimates from what was seen.

Pure and vectorised (numpy arrays or floats). The inputs are a zone's observed history, the
same four numbers from either driver (:class:`provisioner.core.views.ZoneHistory`): hours a
spot instance ran there, preemptions seen there, and the outages seen to end (from the first
sign of no capacity to the next spot launch that held) with their total length. Nothing here
looks ahead: the simulator builds the history from the trace prefix it has replayed, the
daemon from the store's attempts.

The model is the two-state (up/down) renewal with exponential periods, the simplest one that
has both a lifetime and an outage length: with a gamma prior worth ``PRIOR_N`` observations,

* mean spot lifetime ``U = (U0·N0 + hours up) / (N0 + preemptions)`` (the hazard is ``1/U``);
* mean outage ``D = (D0·N0 + hours down) / (N0 + outages ended)``;
* a zone last seen without capacity ``a`` hours ago, and not looked at since, has capacity
  now with probability ``U/(U+D)·(1 - exp(-a·(1/U + 1/D)))``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from provisioner.core.views import ZoneHistory

#: Prior mean spot lifetime and outage length (hours), and the prior's weight (observations).
#: Round numbers (chosen on the 2022-10-26 traces only) of the order the public GPU spot traces
#: show (lifetimes: median 0.5-2 h, mean 1-4 h; outages: median 0.2-1 h, mean 1-3 h); a zone's
#: own history overrides them within a few preemptions.
PRIOR_LIFE_H = 2.0
PRIOR_OUTAGE_H = 2.0
PRIOR_N = 1.0


def lifetime_h(
    up_h: np.ndarray | float, lost: np.ndarray | float, prior_h: np.ndarray | float = PRIOR_LIFE_H
) -> np.ndarray:
    """Posterior mean spot lifetime (hours) after ``up_h`` hours up and ``lost`` preemptions
    (``prior_h``: the prior mean, per zone where a cloud's availability prior seeds it)."""
    return (np.asarray(prior_h, dtype=float) * PRIOR_N + np.asarray(up_h, dtype=float)) / (
        PRIOR_N + np.asarray(lost, dtype=float)
    )


def outage_h(down_h: np.ndarray | float, ended: np.ndarray | float) -> np.ndarray:
    """Posterior mean outage length (hours) after ``ended`` outages of ``down_h`` hours in all."""
    return (PRIOR_OUTAGE_H * PRIOR_N + np.asarray(down_h, dtype=float)) / (
        PRIOR_N + np.asarray(ended, dtype=float)
    )


def p_up(since_down_h: np.ndarray | float, life: np.ndarray, outage: np.ndarray) -> np.ndarray:
    """Probability that a zone last seen down ``since_down_h`` hours ago has capacity now."""
    a = np.maximum(np.asarray(since_down_h, dtype=float), 0.0)
    rate = 1.0 / life + 1.0 / outage
    return life / (life + outage) * -np.expm1(-a * rate)


def zone_scores(
    known: np.ndarray, since_down_h: np.ndarray, life: np.ndarray, outage: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per zone (rows, zones): the probability capacity is there now, and the expected spot
    hours a launch there buys (``p_up · U``; 0 where the zone is not usable now)."""
    p = np.where(known, p_up(since_down_h, life, outage), 0.0)
    return p, p * life


def best_zone(
    known: np.ndarray, since_down_h: np.ndarray, life: np.ndarray, outage: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: the usable zone with the most expected spot hours; the chance that a spot try
    finds capacity in *some* usable zone (a refused launch moves on to the next zone at once:
    ``1 - prod(1 - p_up)``); and that zone's lifetime (where none is usable: ``-1``, 0 and the
    longest lifetime of any zone)."""
    p, score = zone_scores(known, since_down_h, life, outage)
    n = known.shape[0]
    if known.shape[1] == 0:
        z = np.zeros(n)
        return np.full(n, -1, dtype=np.int64), z, np.full(n, PRIOR_LIFE_H)
    idx = np.argmax(np.where(known, score, -1.0), axis=1)
    rows = np.arange(n)
    ok = known.any(axis=1)
    return (
        np.where(ok, idx, -1),
        np.where(ok, 1.0 - np.prod(1.0 - p, axis=1), 0.0),
        np.where(ok, life[rows, idx], life.max(axis=1)),
    )


def for_options(
    hist: Sequence[ZoneHistory],
    known: np.ndarray,
    since_down_h: np.ndarray,
    saving: np.ndarray | None = None,
    prior_life: Sequence[float] | None = None,
) -> tuple[float, float, np.ndarray]:
    """For one job's spot options (``decide()``): the best usable option's ``p_up`` and mean
    lifetime, and each option's score (expected spot hours, times what an hour there saves
    against on-demand where ``saving`` is given: with several zones at different prices, the
    score ranks them by expected saving). ``prior_life``: each option's prior mean lifetime
    where a cloud's availability prior is known (provisioner.core.zone_priors.prior_life_h;
    None: :data:`PRIOR_LIFE_H` for all)."""
    prior = PRIOR_LIFE_H if prior_life is None else np.asarray(prior_life, dtype=float)
    life = lifetime_h(np.asarray([h.up_h for h in hist]), np.asarray([h.lost for h in hist]), prior)
    out = outage_h(np.asarray([h.down_h for h in hist]), np.asarray([h.recovered for h in hist]))
    _, p, lf = best_zone(known[None, :], since_down_h[None, :], life[None, :], out[None, :])
    _, score = zone_scores(known, since_down_h, life, out)
    if saving is not None:
        score = score * saving
    return float(p[0]), float(lf[0]), score
