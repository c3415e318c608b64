"""``python -m providers.sim serve --state-dir DIR``: run the sim cloud's server."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m providers.sim")
    sub = parser.add_subparsers(dest="command", required=True)
    serve_p = sub.add_parser("serve", help="run the sim cloud (API and metadata endpoints)")
    serve_p.add_argument("--state-dir", required=True, type=Path)
    serve_p.add_argument("--host", default="127.0.0.1")
    serve_p.add_argument("--port", type=int, default=0, help="0: any free port")
    serve_p.add_argument("--detach", action="store_true", help="go to the background at once")
    serve_p.add_argument(
        "--owner-pid",
        type=int,
        default=None,
        help="terminate every instance and exit once this process is gone",
    )
    serve_p.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)

    from providers.sim.server import detach, serve

    state_dir: Path = args.state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    if args.detach and not detach(state_dir / "server.log"):
        return 0
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format=f"%(asctime)s [sim {os.getpid()}] %(levelname)s %(message)s",
    )
    code = serve(state_dir, host=args.host, port=args.port, owner_pid=args.owner_pid)
    if args.detach:
        sys.stdout.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
