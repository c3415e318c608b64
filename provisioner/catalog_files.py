"""Catalog files: reading offers from CSV files and the built-in catalog shipped with the package.

The core (:mod:`provisioner.core.catalog`) parses lines of text and indexes offers; opening a
file is done here, one layer up, beside the providers (which load the built-in catalog too).
:class:`Catalog` is the core class with :meth:`Catalog.load`, the Python API's
``provisioner.Catalog.load()``.
"""

from __future__ import annotations

import os
from importlib import resources

from provisioner.core import catalog as core
from provisioner.core.catalog import CatalogError, parse_offers
from provisioner.core.models import Offer

__all__ = ["Catalog", "CatalogError", "builtin_catalog", "load_catalog", "read_offers"]

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
    return core.Catalog(offers, [str(p) for p in paths])


_BUILTIN: core.Catalog | None = None


def builtin_catalog() -> core.Catalog:
    """The offline catalog shipped with the package (provisioner/data/offers.csv), read once."""
    global _BUILTIN
    if _BUILTIN is None:
        ref = resources.files("provisioner.data").joinpath("offers.csv")
        with resources.as_file(ref) as path:
            _BUILTIN = core.Catalog(read_offers(path), [BUILTIN_SOURCE])
    return _BUILTIN


class Catalog(core.Catalog):
    """:class:`provisioner.core.catalog.Catalog` with a file loader (``provisioner.Catalog``)."""

    @classmethod
    def load(cls, *paths: str | os.PathLike[str], provider: str | None = None) -> core.Catalog:
        """The catalog from ``paths`` (any supported layout); no paths: the built-in catalog."""
        return load_catalog(*paths, provider=provider)
