"""Importing the package and every provider module loads no cloud SDK (a real subprocess)."""

from __future__ import annotations

import importlib.util
import json
import os
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
    # a wide screen: the plain table fits, so rich (for tables wider than the screen) stays out
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


#: What `provisioner plan` must never load: the store, the scheduler, the templates, the
#: checkpoint filesystem, metrics, plotting, the retrying SDK glue.
NOT_FOR_PLAN = (
    "sqlalchemy",
    "alembic",
    "apscheduler",
    "jinja2",
    "fsspec",
    "prometheus_client",
    "matplotlib",
    "tenacity",
    "rich",  # the plan table is plain text (rich only for a table wider than the screen)
    "apprise",  # notifications: the daemon's and `notify test`'s alone
    "starlette",  # the dashboard's HTTP stack: the daemon's and `dashboard`'s alone
    "uvicorn",
    "h11",
    "anyio",
)


def _loaded_after(argv: list[str], roots: tuple[str, ...]) -> tuple[int, list[str]]:
    code = (
        "import json, sys\n"
        "from provisioner.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit as exc:\n"
        "    rc = exc.code\n"
        f"roots = {roots!r}\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & set(roots))\n"
        "print(json.dumps([rc, loaded]), file=sys.stderr)\n"
    )
    # a wide screen: the plain table fits, so rich (for tables wider than the screen) stays out
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    rc, loaded = json.loads(done.stderr.strip().splitlines()[-1])
    return rc, loaded


def test_plan_imports_only_what_it_uses() -> None:
    from pathlib import Path

    policy = str(Path(__file__).resolve().parents[1] / "policies" / "spot-finetune.yaml")
    for argv in (["plan", "--policy", policy], ["plan", "--policy", policy, "--json"]):
        rc, loaded = _loaded_after(argv, (*NOT_FOR_PLAN, "numpy"))
        assert rc == 0
        assert loaded == ["numpy"], argv  # the planner's columns; nothing else of the list


def test_help_imports_no_command() -> None:
    rc, loaded = _loaded_after(["--help"], ("numpy", "pydantic", "rich", "yaml", *NOT_FOR_PLAN))
    assert rc == 0 and loaded == []
