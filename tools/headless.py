"""Debian's Chromium and chromedriver, headless, driven by selenium (the dashboard's browser
tests and its screenshot). Nothing is downloaded: the binaries are the system's
(``apt-get install chromium chromium-driver``; .ci/run installs them)."""

from __future__ import annotations

import os
import shutil
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
DRIVER_NAMES = ("chromedriver",)


def _which(names: tuple[str, ...], env: str) -> str | None:
    if os.environ.get(env):
        return os.environ[env]
    for n in names:
        found = shutil.which(n) or (f"/usr/bin/{n}" if os.path.exists(f"/usr/bin/{n}") else None)
        if found:
            return found
    return None


def missing() -> str | None:
    """Why a headless browser cannot run here (None: it can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    if _which(CHROMIUM_NAMES, "CHROMIUM") is None:
        return "no chromium binary (apt-get install chromium)"
    if _which(DRIVER_NAMES, "CHROMEDRIVER") is None:
        return "no chromedriver (apt-get install chromium-driver)"
    return None


def chromium(width: int = 1440, height: int = 1000) -> Any:
    """A headless Chromium session that records the console (``get_log("browser")``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = _which(CHROMIUM_NAMES, "CHROMIUM") or "chromium"
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in CI containers
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--window-size={width},{height}",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=_which(DRIVER_NAMES, "CHROMEDRIVER") or "chromedriver")
    return webdriver.Chrome(service=service, options=opts)


def console_errors(driver: Any) -> list[str]:
    """The console's errors and failed loads since the last call (CSP violations included)."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
