"""The ``provisioner`` command line.

Subcommands live in their own modules and are imported only when invoked, so ``--help`` and
``plan`` start fast with no cloud SDK installed. Exit codes (documented in the README):

0 ok · 1 unexpected error · 2 bad input (policy, flags) · 3 nothing eligible / not found ·
4 provider error (auth, quota) · 5 job failed · 6 deadline or budget cannot be met ·
130 interrupted (Ctrl-C)
"""

from __future__ import annotations

import importlib
from typing import Any

import click

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_NOTHING_ELIGIBLE = 3
EXIT_NOT_FOUND = 3
EXIT_PROVIDER = 4
EXIT_JOB_FAILED = 5
EXIT_UNMEETABLE = 6
EXIT_INTERRUPTED = 130

# name -> (module, attribute, one-line help). Add a command by adding a line here.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "plan": ("provisioner.cli.plan_cmd", "plan", "Rank eligible GPU offers for a policy."),
    "policy": ("provisioner.cli.policy_cmd", "policy", "Check a policy file or print its schema."),
    "catalog": ("provisioner.cli.catalog_cmd", "catalog", "Show or refresh the offer catalog."),
    "providers": (
        "provisioner.cli.providers_cmd",
        "providers",
        "Which clouds can be used here: SDK installed, credentials found.",
    ),
    "up": ("provisioner.cli.up_cmd", "up", "Submit a job and supervise it through interruptions."),
    "jobs": ("provisioner.cli.jobs_cmd", "jobs", "List jobs."),
    "daemon": ("provisioner.cli.daemon_cmd", "daemon", "Run the controller (under systemd)."),
    "status": ("provisioner.cli.jobs_cmd", "status", "Show a job's state, placement and spend."),
    "logs": ("provisioner.cli.jobs_cmd", "logs", "Print a job's events (-f to follow)."),
    "down": (
        "provisioner.cli.jobs_cmd",
        "down",
        "Stop a job: terminate instances, keep checkpoints.",
    ),
    "cost": (
        "provisioner.cli.jobs_cmd",
        "cost",
        "What a job cost, per attempt, spot vs on-demand.",
    ),
    "probe": (
        "provisioner.cli.probe_cmd",
        "probe",
        "Measure this machine's GPUs beside their datasheet (matmul, memory, links, NVML).",
    ),
    "simulate": (
        "provisioner.cli.simulate_cmd",
        "simulate",
        "What a policy would cost on spot traces.",
    ),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module = importlib.import_module(entry[0])
        cmd = getattr(module, entry[1])
        assert isinstance(cmd, click.Command)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="provisioner")
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
@click.pass_context
def cli(ctx: click.Context, verbose: int) -> None:
    """provisioner: keep long GPU jobs on the cheapest eligible capacity, through interruptions.

    Exit codes: 0 ok, 1 unexpected error, 2 bad input, 3 nothing eligible or not found,
    4 provider error (auth, quota), 5 job failed, 6 deadline or budget cannot be met,
    130 interrupted.
    """
    from provisioner.logs import setup_logging

    setup_logging(verbose)
    ctx.ensure_object(dict)


def main(argv: list[str] | None = None) -> Any:
    return cli.main(args=argv, prog_name="provisioner")
