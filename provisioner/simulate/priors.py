"""What the estimate assumes of a zone's spot capacity before, and while, it sees it.

A zone's spot capacity is the two-state model of :mod:`provisioner.simulate.estimate`: up for
an exponential time at the failure rate ``lam``, down for an exponential time at the recovery
rate ``mu``. Nobody knows a zone's rates, least of all a new account, so the prior is a
distribution over them, one draw per simulated run: ``lam ~ Gamma(shape, mean)`` and
``mu`` alike. That mixture over plausible rates is what widens the P10-P90 to the spread of
what real zones do; a single fixed rate gives a range far narrower than the outcomes.

* **Before any history** (:func:`new_account_rates`): the means scale with the zone's Spot
  Advisor band (its monthly interruption rate, :data:`~provisioner.core.catalog.BAND_RISK`),
  from the ``>20%`` reference fitted on one recorded set (below); the shapes are the spread
  of the rates between days and zones on that set. The band comes from the offer
  (``Offer.interruption_band``), or per instance type and region from the Spot Advisor feed
  (:func:`load_advisor_bands`, the flat CSV or AWS's JSON); a zone without a band (clouds that
  publish none) takes the planner's default risk. Whether the zone is up now is unknown: each
  run starts up with its rates' stationary share.
  What the cloud says of the zone itself (an AWS placement score, an Azure eviction rate, an
  Alibaba 30-day interruption rate, cached by ``provisioner priors --refresh``) refines the
  band: its monthly risk stands in for the band's (:mod:`provisioner.core.zone_priors`). A
  placement score also sets the zone's share of time with capacity (its outages' length and
  the chance it is up now): what tells apart zones of one band, where the band alone gives
  them one estimate (``estimate_bench.py --prior score`` measures it, on a proxy).
* **With history** (:func:`fit_rates`): the Gamma posterior given what the zone showed
  (its falls over its up hours, its recoveries over its down hours) and the state it is in
  now. The shape grows by one per period seen, so a long history leaves the prior behind and
  narrows the range to the zone's own rates. The period the zone is in now counts whole,
  however old: a zone without spot for days is believed to stay so. :func:`history_rates` does the same from the
  daemon's totals of a zone (its :class:`~provisioner.core.views.ZoneHistory`).

The reference figures (:data:`REF_FAIL_RATE`, :data:`FAIL_SHAPE`, :data:`REF_BACK_RATE`,
:data:`BACK_SHAPE`) are the empirical-Bayes fit (:func:`fit_gamma`, the negative binomial
likelihood of counts over exposures) on every recorded AWS trace in the project's data (35
distinct files from eight sets, 2022-2023, p2/p3/r5 in us-east-1, us-east-2 and us-west-2,
all band ``>20%``) cut into days, at :data:`CALIBRATION_STEP_S`;
``benchmarks/estimate_bench.py --calibrate`` prints them. A fit on one set alone generalised
worse to the others: ``estimate_bench.py --prior cross`` measures each set against the fit
made without it.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from provisioner.core.catalog import BAND_RISK, BANDS
from provisioner.core.planner.planrows import DEFAULT_SPOT_RISK
from provisioner.core.views import ZoneHistory, ZoneRisk
from provisioner.errors import SimulationError

#: The step the reference was fitted at (and the estimate's finest step), seconds.
CALIBRATION_STEP_S = 300.0
#: The day the traces were cut into for the fit (hours).
CALIBRATION_CHUNK_H = 24.0
#: The reference band and its fitted figures: mean failure rate (per hour up) and its Gamma
#: shape; mean recovery rate (per hour down) and its shape.
REF_BAND = ">20%"
REF_FAIL_RATE = 0.676
FAIL_SHAPE = 0.67
REF_BACK_RATE = 0.898
BACK_SHAPE = 1.105
#: How long ago a zone's history counts half in :func:`fit_rates` (hours): chosen on the
#: 2022-10-26 Can't Be Late set (``benchmarks/estimate_bench.py --half-life``).
HISTORY_HALF_LIFE_H = 6.0
#: How fast a zone's rates move away from what its history says (the squared coefficient of
#: variation gained per hour ahead, :attr:`Rates.drift`): chosen on the same set as the
#: half-life (``benchmarks/estimate_bench.py --drift``). Without it the posterior's range
#: held 56% of realised 48 h costs, held out; a week of history says how the zone was, and
#: 60 h ahead it is further from that than the posterior alone allows.
HISTORY_DRIFT = 0.01
#: The least (and one minus the most) share of time up a placement score is taken to say.
MIN_SHARE = 0.05


@dataclass(frozen=True)
class Rates:
    """A zone's spot capacity as a two-state model.

    ``up_h`` / ``down_h``: the mean up and down periods (hours), one over the mean rates.
    ``up_shape`` / ``down_shape``: the Gamma shapes of the failure and recovery rates over
    runs (None: one fixed rate, every run the same zone). ``up_now``: the zone's state at the
    start (None: unknown; each run starts up with probability ``p_up``, or where that is None
    with its rates' stationary share). ``drift``: how far the rates may move from now over
    the job, as the squared coefficient of variation they gain per hour ahead (the shapes
    widen with the horizon, :func:`draw_rates`; 0: not at all).
    """

    up_h: float
    down_h: float
    source: str
    up_now: bool | None = True
    up_shape: float | None = None
    down_shape: float | None = None
    p_up: float | None = None
    drift: float = 0.0


def band_risk(band: str) -> float:
    """The monthly interruption rate of Spot Advisor ``band`` ("" or unknown: the default)."""
    risk = BAND_RISK.get(band)
    return DEFAULT_SPOT_RISK if risk is None else risk


@dataclass(frozen=True)
class Reference:
    """The new account's reference figures (the ``>20%`` band): the failure rate's Gamma
    shape and mean (per hour up), the recovery rate's shape and mean (per hour down)."""

    fail_shape: float = FAIL_SHAPE
    fail_rate: float = REF_FAIL_RATE
    back_shape: float = BACK_SHAPE
    back_rate: float = REF_BACK_RATE


def new_account_rates(
    band: str, prior: ZoneRisk | None = None, ref: Reference | None = None
) -> Rates:
    """The prior of a zone in ``band`` with no recorded history (see the module). ``prior``:
    what the cloud says of the zone (an AWS placement score, an Azure eviction rate, an
    Alibaba 30-day interruption rate, a price volatility; provisioner.core.zone_priors), which
    refines the band's monthly risk: it replaces it, or scales it (a volatility alone). Where
    it knows the zone's share of time with capacity (``ZoneRisk.up_share``, from a placement
    score), the outages are as long as that share makes them (the model's stationary share,
    ``mu / (lam + mu)``, is the share) and each run starts up with that probability: a zone
    scored 2 is mostly down, one scored 10 mostly up, where the band alone gave both the
    same. ``ref``: other reference figures (the benchmark's held-out fits)."""
    ref = ref or Reference()
    source = f"band {band}" if band in BAND_RISK else "default band"
    r = band_risk(band)
    if prior is not None:
        r, source = prior.apply(r), f"{source}, {prior.source}"
    scale = r / BAND_RISK[REF_BAND]
    up_h = 1.0 / (ref.fail_rate * scale)
    down_h, p_up = 1.0 / ref.back_rate, None
    if prior is not None and prior.up_share is not None:
        p_up = min(max(prior.up_share, MIN_SHARE), 1.0 - MIN_SHARE)
        down_h = up_h * (1.0 - p_up) / p_up
    return Rates(
        up_h,
        down_h,
        source,
        up_now=None,
        up_shape=ref.fail_shape,
        down_shape=ref.back_shape,
        p_up=p_up,
    )


def fit_rates(
    avail: np.ndarray,
    step_s: float,
    prior: Rates | None = None,
    half_life_h: float | None = None,
    drift: float | None = None,
) -> Rates:
    """The posterior after ``avail`` (one boolean per step of ``step_s``; the last is now).

    Falls over up hours update the failure rate, recoveries over down hours the recovery
    rate: Gamma(shape + count, shape x prior mean period + exposure). A prior without
    shapes counts as one period of each kind (and the result has none either).
    ``half_life_h``: a zone's rates drift, so what it showed that long ago counts half
    (None: all of it alike; :data:`HISTORY_HALF_LIFE_H` is the calibrated figure). The
    period the zone is in now counts whole, however long ago it began: it is what the zone
    is doing now, not a drifted past, so a zone down for days is believed to stay down
    (about days, not the half-life's hours; a week-long outage estimates near the
    on-demand cost). ``drift``: the result's :attr:`Rates.drift` (None:
    :data:`HISTORY_DRIFT`).
    """
    a = np.asarray(avail, dtype=bool)
    h = step_s / 3600.0
    if half_life_h is None or len(a) == 0:
        w = np.ones(len(a))
    else:
        age_h = (len(a) - 1 - np.arange(len(a))) * h
        w = np.power(0.5, age_h / half_life_h)
        w[len(a) - current_run(a) :] = 1.0
    up, down = float(w[a].sum()) * h, float(w[~a].sum()) * h
    falls = float(np.sum(w[1:][a[:-1] & ~a[1:]])) if len(a) > 1 else 0.0
    rises = float(np.sum(w[1:][~a[:-1] & a[1:]])) if len(a) > 1 else 0.0
    p = prior or new_account_rates("")
    ku = 1.0 if p.up_shape is None else p.up_shape
    kd = 1.0 if p.down_shape is None else p.down_shape
    now = bool(a[-1]) if len(a) else p.up_now
    return Rates(
        (ku * p.up_h + up) / (ku + falls),
        (kd * p.down_h + down) / (kd + rises),
        "trace",
        now,
        None if p.up_shape is None else ku + falls,
        None if p.down_shape is None else kd + rises,
        drift=HISTORY_DRIFT if drift is None else drift,
    )


def current_run(a: np.ndarray) -> int:
    """How many of ``a``'s last steps are in its last state (0 for no steps)."""
    if len(a) == 0:
        return 0
    changed = np.flatnonzero(a != a[-1])
    return len(a) if changed.size == 0 else len(a) - 1 - int(changed[-1])


def history_rates(prior: Rates, hist: ZoneHistory) -> Rates:
    """The posterior after a zone's recorded totals (the daemon's
    :class:`~provisioner.core.views.ZoneHistory`: hours its spot instances ran there and how
    many were taken back, outages seen to end and their hours), as :func:`fit_rates` counts
    them; the state now stays the prior's."""
    ku = 1.0 if prior.up_shape is None else prior.up_shape
    kd = 1.0 if prior.down_shape is None else prior.down_shape
    return Rates(
        (ku * prior.up_h + hist.up_h) / (ku + hist.lost),
        (kd * prior.down_h + hist.down_h) / (kd + hist.recovered),
        f"{prior.source}, history",
        prior.up_now,
        None if prior.up_shape is None else ku + hist.lost,
        None if prior.down_shape is None else kd + hist.recovered,
    )


def draw_rates(
    rates: Rates, n: int, rng: np.random.Generator, horizon_h: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` failure and recovery rates (per hour), one per run, from ``rates``, for a job
    ``horizon_h`` ahead: each Gamma's squared coefficient of variation (1 / shape) grows by
    ``rates.drift`` per hour of it."""
    widen = max(rates.drift, 0.0) * max(horizon_h, 0.0)

    def one(mean_period_h: float, shape: float | None) -> np.ndarray:
        mean = 1.0 / max(mean_period_h, 1e-6)
        if widen > 0.0:
            shape = 1.0 / ((0.0 if shape is None else 1.0 / shape) + widen)
        if shape is None:
            return np.full(n, mean)
        return rng.gamma(shape, mean / shape, n)

    return one(rates.up_h, rates.up_shape), one(rates.down_h, rates.down_shape)


def _nb_loglik(shape: float, mean: float, counts: np.ndarray, expo: np.ndarray) -> float:
    """log P(counts | exposures) with counts ~ Poisson(rate x exposure), rate ~ Gamma."""
    b = shape / mean
    lg = np.vectorize(math.lgamma)
    return float(
        np.sum(
            lg(shape + counts) - math.lgamma(shape) + shape * math.log(b)
            - (shape + counts) * np.log(b + expo)
        )
    )  # fmt: skip


def fit_gamma(counts: np.ndarray, expo: np.ndarray) -> tuple[float, float]:
    """(shape, mean rate) of the Gamma that best explains ``counts`` over ``expo`` (hours):
    the maximum of the negative binomial likelihood on a grid (no optimiser needed)."""
    c = np.asarray(counts, dtype=float)
    e = np.asarray(expo, dtype=float)
    m0 = max(c.sum(), 1.0) / max(e.sum(), 1e-9)
    best = (-math.inf, 1.0, m0)
    for lk in np.linspace(-3.0, 4.0, 71):
        for lm in np.linspace(math.log(m0) - 1.5, math.log(m0) + 1.5, 61):
            v = _nb_loglik(math.exp(lk), math.exp(lm), c, e)
            if v > best[0]:
                best = (v, math.exp(lk), math.exp(lm))
    return best[1], best[2]


def chunk_counts(avail: np.ndarray, step_s: float, chunk_h: float) -> np.ndarray:
    """(falls, up hours, rises, down hours) per whole chunk of ``chunk_h`` of ``avail``."""
    a = np.asarray(avail, dtype=bool)
    n = max(1, round(chunk_h * 3600.0 / step_s))
    h = step_s / 3600.0
    rows = []
    for s in range(0, len(a) - n + 1, n):
        c = a[s : s + n]
        rows.append((np.sum(c[:-1] & ~c[1:]), c.sum() * h, np.sum(~c[:-1] & c[1:]), (~c).sum() * h))
    return np.asarray(rows, dtype=float).reshape(-1, 4)


class AdvisorError(SimulationError, ValueError):
    """A Spot Advisor file that cannot be read (the message names it)."""


def load_advisor_bands(path: str | Path, os_name: str = "Linux") -> dict[tuple[str, str], str]:
    """Spot Advisor interruption bands by (region, instance type), from the flat CSV
    (region, os, instance_type, ..., interrupt_frequency_label) or AWS's JSON feed
    (``spot_advisor`` and ``ranges``)."""
    p = Path(path)
    out: dict[tuple[str, str], str] = {}
    try:
        if p.suffix == ".json":
            doc = json.loads(p.read_text())
            labels = {int(r["index"]): str(r["label"]) for r in doc["ranges"]}
            for region, by_os in doc["spot_advisor"].items():
                for itype, v in by_os.get(os_name, {}).items():
                    out[(region, itype)] = _band(labels.get(int(v["r"]), ""))
        else:
            with p.open(newline="") as f:
                for row in csv.DictReader(f):
                    if row.get("os", os_name) == os_name:
                        band = _band(row["interrupt_frequency_label"])
                        out[(row["region"], row["instance_type"])] = band
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AdvisorError(f"{p}: not a Spot Advisor file ({exc})") from None
    return out


def _band(label: str) -> str:
    label = label.strip().replace(" ", "")
    return label if label in BANDS else ""
