"""Test-only entry point: one reconciler pass of the equivalence harness, in its own process.

``python -m tests.overlap_pass ARGS_JSON`` with ``PROVISIONER_CRASH_AT=<point>``: builds the
reconciler the harness builds (:func:`tests.equivalence_util.pass_process_args` writes the
arguments: the store, the sim's options, the zones, the virtual time of the pass, the step),
installs the failpoints of :mod:`tests.crash_daemon` and runs one pass. The process exits 137
at the point, as SIGKILL would leave it (nothing flushed, no lease given back), or 0 when the
pass never met it. The package itself never reads these.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any


def main(raw: str) -> int:
    from provisioner.control.store import Store
    from tests.crash_daemon import install_from_env
    from tests.equivalence_util import catalog_for, reconciler_for

    args: dict[str, Any] = json.loads(raw)
    install_from_env()
    store = Store(args["store"])
    clock = [datetime.fromisoformat(args["now"])]
    rec = reconciler_for(store, clock, catalog_for(args["zones"]), float(args["step_s"]))
    rec.run_pass()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
