"""Screenshots of the dashboard for the docs: a sample store (tools/dashboard_sample.py), the
real server on a free loopback port, Debian's headless Chromium.

    python tools/dashboard_screenshot.py            # writes out/dashboard-*.png
    python tools/dashboard_screenshot.py --docs     # and docs/dashboard.png (the job page)

Fails (exit 1) if the browser's console reports an error on any page.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def small(src: Path, dst: Path) -> None:
    """A copy for the docs in 256 colours (a third of the size; the page has few colours)."""
    try:
        from PIL import Image
    except ImportError:
        shutil.copy(src, dst)
    else:
        with Image.open(src) as im:
            im.convert("RGB").quantize(256, dither=Image.Dither.NONE).save(dst, optimize=True)
    print(f"wrote {dst} ({dst.stat().st_size // 1024} KB)")


def main(argv: list[str] | None = None) -> int:
    from provisioner.control.store import Store
    from provisioner.dashboard import DashboardServer
    from tools import dashboard_sample, headless

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "out"), help="Folder for the PNGs (default out/).")
    ap.add_argument("--docs", action="store_true", help="Also copy the job page to docs/.")
    ap.add_argument("--width", type=int, default=1440)
    args = ap.parse_args(argv)
    why = headless.missing()
    if why:
        print(f"dashboard_screenshot: {why}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{tmp}/sample.db")
        ids = dashboard_sample.build(store)
        server = DashboardServer(store, port=0, source="sample store")
        server.start()
        driver = headless.chromium(args.width, 1000)
        errors: list[str] = []
        try:
            pages = {
                "jobs": "",
                "job": f"jobs/{ids['llama-7b-lora']}",
                "fleet": "fleet",
                "prices": "prices",
            }
            for name, path in pages.items():
                driver.get(server.url + path)
                for _ in range(50):
                    if driver.execute_script("return document.documentElement.dataset.ready"):
                        break
                    time.sleep(0.1)
                height = driver.execute_script("return document.documentElement.scrollHeight")
                driver.set_window_size(args.width, min(int(height) + 20, 4000))
                target = out / f"dashboard-{name}.png"
                driver.save_screenshot(str(target))
                errors += [f"{name}: {e}" for e in headless.console_errors(driver)]
                print(f"wrote {target} ({target.stat().st_size // 1024} KB)")
        finally:
            driver.quit()
            server.close()
            store.close()
    if args.docs:
        for name, target in (("job", "dashboard.png"), ("jobs", "dashboard-jobs.png")):
            small(out / f"dashboard-{name}.png", REPO / "docs" / target)
    for e in errors:
        print(f"console error: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
