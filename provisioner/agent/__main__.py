"""``python -m provisioner.agent --spec spec.json``: run one attempt of a job (exit code = the job's)."""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m provisioner.agent", description=__doc__)
    parser.add_argument(
        "--spec", required=True, help="the job spec (JSON, see provisioner.agent.spec)"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s [agent] %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    from providers.base import RedactingFilter

    for handler in logging.getLogger().handlers:  # a secret read on the VM is registered:
        handler.addFilter(RedactingFilter())  # scrubbed from every line the agent logs
    from provisioner.agent.runner import Agent
    from provisioner.agent.spec import AgentSpec, SpecError

    try:
        spec = AgentSpec.load(args.spec)
    except (OSError, SpecError) as exc:
        print(f"provisioner.agent: {args.spec}: {exc}", file=sys.stderr)
        return 2
    return Agent(spec).run()


if __name__ == "__main__":
    sys.exit(main())
