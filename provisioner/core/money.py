"""Dollar figures in words, to the precision the policy gives them.

A budget is shown as written (``max_total: 0.005`` is "$0.005", never "$0.01"; at least
cents), and spend against it to a hundredth of it, so the percent levels it is told at read
true ("spent $0.00400 of the $0.005 budget: 80% of it", not "$0.00 of the $0.00 budget").
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

#: never more decimals than this (a millionth of a dollar: the ledger's rounding)
MAX_DECIMALS = 6


def written_decimals(value: float) -> int:
    """The decimals ``value`` has as written (its shortest form): ``0.005`` has 3, ``25.0``
    none; at least 2 (cents), at most :data:`MAX_DECIMALS`."""
    try:
        exp = Decimal(repr(float(value))).normalize().as_tuple().exponent
    except (InvalidOperation, ValueError, OverflowError):
        return 2
    places = -exp if isinstance(exp, int) and exp < 0 else 0
    return min(max(2, places), MAX_DECIMALS)


def against_decimals(total: float) -> int:
    """Decimals that show a hundredth of ``total`` (spend told against a budget): 2 for a
    budget of $1 or more, 4 for $0.01, at most :data:`MAX_DECIMALS`."""
    if not math.isfinite(total) or total <= 0:
        return 2
    need = math.ceil(-math.log10(total / 100) - 1e-9)
    return min(max(2, need, written_decimals(total)), MAX_DECIMALS)


def usd(value: float, decimals: int = 2) -> str:
    """``$1.23`` (``-$0.50`` below zero), to ``decimals`` places."""
    sign = "-" if value < 0 and round(abs(value), decimals) > 0 else ""
    return f"{sign}${abs(value):.{decimals}f}"
