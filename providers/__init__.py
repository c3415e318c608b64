"""Cloud adapters behind one interface. Every cloud SDK is imported lazily, inside its module."""

from providers.base import (
    CLOUDS,
    ErrorKind,
    Provider,
    ProviderError,
    ProviderUnavailable,
    get,
    provider_names,
)

__all__ = [
    "CLOUDS",
    "ErrorKind",
    "Provider",
    "ProviderError",
    "ProviderUnavailable",
    "get",
    "provider_names",
]
