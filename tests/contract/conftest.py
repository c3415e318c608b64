"""The contract suite's fixtures: one ``harness`` per cloud, skipped where it cannot run yet.

A cloud runs when its SDK is installed and ``tests/contract/harness_<cloud>.py`` exists and
imports (it needs the cloud's adapter in ``providers/``); otherwise its tests are skipped with
the reason, so the suite works while adapters are still being written.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from providers.base import CLOUDS, Provider

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # harness modules import each other as top-level modules
    sys.path.insert(0, str(HERE))

#: the module that tells whether each cloud's SDK is installed
SDK_MODULES = {
    "aws": "boto3",
    "gcp": "google.cloud.compute_v1",
    "azure": "azure.mgmt.compute",
    "alibaba": "alibabacloud_ecs20140526",
    "tencent": "tencentcloud.cvm",
}

Factory = Callable[[], AbstractContextManager[object]]


def sdk_installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def harness_factory(cloud: str) -> tuple[Factory | None, str]:
    """``make_harness`` of the cloud's harness module, or None and why it cannot run."""
    sdk = SDK_MODULES.get(cloud, "")
    if sdk and not sdk_installed(sdk):
        return None, f"{cloud}: SDK not installed ({sdk})"
    if not (HERE / f"harness_{cloud}.py").exists():
        return None, f"{cloud}: no tests/contract/harness_{cloud}.py yet"
    try:
        module = importlib.import_module(f"harness_{cloud}")
    except ImportError as exc:
        return None, f"{cloud}: harness_{cloud} does not import yet ({exc})"
    factory = getattr(module, "make_harness", None)
    if factory is None:
        return None, f"{cloud}: harness_{cloud} has no make_harness()"
    return factory, ""


#: the five clouds, and the sim provider, which keeps the same contract
PROVIDERS = (*CLOUDS, "sim")


@pytest.fixture(params=PROVIDERS, ids=list(PROVIDERS))
def harness(request: pytest.FixtureRequest) -> Iterator[object]:
    factory, reason = harness_factory(request.param)
    if factory is None:
        pytest.skip(reason)
    with factory() as h:
        yield h


@pytest.fixture
def provider(harness: object) -> Iterator[Provider]:
    p = harness.provider()  # type: ignore[attr-defined]
    assert isinstance(p, Provider)
    try:
        yield p
    finally:
        p.close()
