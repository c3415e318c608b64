"""A package's names, imported when first asked for (PEP 562).

Each cloud's package (``providers/<cloud>/__init__.py``) offers its adapter, error table and a
few helpers by name, but importing the package must stay cheap: reading a cloud's facts
(``providers.<cloud>.facts``, through the ``provisioner.clouds`` entry points) imports the
package first, and ``provisioner plan`` reads them to price its estimates. The adapter
module, and what it pulls in, is imported only when one of its names is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``names[name]`` (a module path)
    and returns its attribute ``name``, kept in the package's namespace for the next use."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(importlib.import_module(package), name, value)
        return value

    return __getattr__
