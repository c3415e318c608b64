"""Importing the package and every provider module loads no cloud SDK (a real subprocess)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

MODULES = [
    "provisioner",
    "providers",
    "providers.base",
    "providers.aws",
    "providers.gcp",
    "providers.azure",
    "providers.alibaba",
    "providers.tencent",
    "providers.bootstrap",
    "provisioner.cli",
]
SDK_ROOTS = ("boto3", "botocore", "azure", "alibabacloud_ecs20140526", "tencentcloud", "grpc")


def test_provider_modules_import_no_cloud_sdk() -> None:
    present = [m for m in MODULES if importlib.util.find_spec(m) is not None]
    assert "providers.aws" in present
    code = (
        "import importlib, json, sys\n"
        f"for m in {present!r}:\n"
        "    importlib.import_module(m)\n"
        f"roots = {SDK_ROOTS!r}\n"
        "loaded = sorted(m for m in sys.modules\n"
        "                if m.split('.')[0] in roots or m.startswith('google.cloud'))\n"
        "print(json.dumps(loaded))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
