"""Catalog files: reading offers from CSV files and the built-in catalog shipped with the package.

The core (:mod:`provisioner.core.catalog`) parses lines of text and indexes offers; opening a
file is done here, one layer up, beside the providers (which load the built-in catalog too).
:class:`Catalog` is the core class with :meth:`Catalog.load`, the Python API's
``provisioner.Catalog.load()``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from importlib import resources
from typing import TYPE_CHECKING

from provisioner.core import catalog as core
from provisioner.core.catalog import CatalogError, parse_offers
from provisioner.core.models import Offer

if TYPE_CHECKING:  # tco's model is imported by `tco`, not by every command that reads offers
    from provisioner.core.network import NetworkFacts
    from provisioner.core.tco import Commitment

__all__ = [
    "Catalog",
    "CatalogError",
    "builtin_catalog",
    "load_catalog",
    "read_commitments",
    "read_network",
    "read_offers",
    "write_commitments",
]

BUILTIN_SOURCE = "builtin:provisioner/data/offers.csv"


def read_offers(path: str | os.PathLike[str], provider: str | None = None) -> list[Offer]:
    """Read offers from a CSV in any supported layout; rows without a known GPU are skipped."""
    p = str(path)
    try:
        fh = open(p, newline="", encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise CatalogError(f"{p}: cannot read catalog: {exc.strerror}") from None
    with fh:
        return parse_offers(fh, p, provider)


def load_catalog(*paths: str | os.PathLike[str], provider: str | None = None) -> core.Catalog:
    """The catalog from ``paths`` (any supported layout); no paths: the built-in catalog."""
    if not paths:
        return builtin_catalog()
    offers: list[Offer] = []
    for p in paths:
        offers.extend(read_offers(p, provider))
    return core.Catalog(offers, [str(p) for p in paths], read_network())


_BUILTIN: core.Catalog | None = None


def builtin_catalog() -> core.Catalog:
    """The offline catalog shipped with the package (provisioner/data/offers.csv), read once."""
    global _BUILTIN
    if _BUILTIN is None:
        ref = resources.files("provisioner.data").joinpath("offers.csv")
        with resources.as_file(ref) as path:
            _BUILTIN = core.Catalog(read_offers(path), [BUILTIN_SOURCE], read_network())
    return _BUILTIN


class Catalog(core.Catalog):
    """:class:`provisioner.core.catalog.Catalog` with a file loader (``provisioner.Catalog``)."""

    @classmethod
    def load(cls, *paths: str | os.PathLike[str], provider: str | None = None) -> core.Catalog:
        """The catalog from ``paths`` (any supported layout); no paths: the built-in catalog."""
        return load_catalog(*paths, provider=provider)


COMMITMENT_COLUMNS = (
    "provider",
    "region",
    "instance_type",
    "term",
    "option",
    "payment",
    "hourly",
    "upfront",
    "source",
    "date",
)


def parse_commitments(lines: Iterable[str], source: str) -> list[Commitment]:
    """Commitment offers from CSV text in commitments.csv's layout (see provisioner/data/SOURCES.md)."""
    import csv

    from provisioner.core.tco import Commitment

    reader = csv.DictReader(lines)
    missing = [c for c in COMMITMENT_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise CatalogError(f"{source}: not a commitments file (missing {', '.join(missing)})")
    out: list[Commitment] = []
    for n, row in enumerate(reader, start=2):
        try:
            hourly, upfront = float(row["hourly"]), float(row["upfront"] or 0)
        except (TypeError, ValueError):
            raise CatalogError(f"{source}:{n}: hourly and upfront must be numbers") from None
        if row["term"] not in ("1y", "3y") or row["payment"] not in ("all", "partial", "no"):
            raise CatalogError(f"{source}:{n}: term must be 1y/3y, payment all/partial/no")
        if not (hourly >= 0 and upfront >= 0):
            raise CatalogError(f"{source}:{n}: prices cannot be negative")
        out.append(
            Commitment(
                row["provider"],
                row["region"],
                row["instance_type"],
                row["term"],
                row["option"],
                row["payment"],
                hourly,
                upfront,
                row["source"],
                row["date"],
            )
        )
    return out


def read_commitments(path: str | os.PathLike[str] | None = None) -> list[Commitment]:
    """Commitment offers from ``path`` (default: the built-in provisioner/data/commitments.csv)."""
    if path is None:
        ref = resources.files("provisioner.data").joinpath("commitments.csv")
        with resources.as_file(ref) as p, open(p, newline="", encoding="utf-8") as fh:
            return parse_commitments(fh, "builtin:provisioner/data/commitments.csv")
    try:
        fh = open(path, newline="", encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read commitments: {exc.strerror}") from None
    with fh:
        return parse_commitments(fh, str(path))


def write_commitments(commitments: Iterable[Commitment], path: str | os.PathLike[str]) -> int:
    """Write ``commitments`` to ``path`` in commitments.csv's layout (what
    :func:`read_commitments` and ``provisioner tco --commitments`` read), sorted; the rows
    written. Raises OSError where the file cannot be written."""
    import csv

    rows = sorted(
        (
            c.provider,
            c.region,
            c.instance_type,
            c.term,
            c.option,
            c.payment,
            f"{c.hourly:.8g}",
            f"{c.upfront:.2f}",
            c.source,
            c.date,
        )
        for c in commitments
    )
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(COMMITMENT_COLUMNS)
        writer.writerows(rows)
    return len(rows)


NETWORK_SOURCE = "builtin:provisioner/data/network.csv"
_NETWORK: dict[tuple[str, str], NetworkFacts] | None = None


def read_network(path: str | os.PathLike[str] | None = None) -> dict[tuple[str, str], NetworkFacts]:
    """Network and GPU-link facts by (provider, instance type): ``path``, or the built-in
    ``provisioner/data/network.csv`` (read once). Read only for policies that ask for an
    interconnect or run more than one node."""
    global _NETWORK
    from provisioner.core.network import NetworkFileError, parse_network

    if path is None and _NETWORK is not None:
        return _NETWORK
    try:
        if path is None:
            ref = resources.files("provisioner.data").joinpath("network.csv")
            with ref.open("r", encoding="utf-8") as fh:
                _NETWORK = parse_network(fh, NETWORK_SOURCE)
            return _NETWORK
        with open(path, newline="", encoding="utf-8") as fh:
            return parse_network(fh, str(path))
    except OSError as exc:
        raise NetworkFileError(f"{path or NETWORK_SOURCE}: cannot read: {exc.strerror}") from None
