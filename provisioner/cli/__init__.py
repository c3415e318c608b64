"""The ``provisioner`` command line.

Subcommands live in their own modules and are imported only when invoked, so ``--help`` and
``plan`` start fast with no cloud SDK installed. Exit codes (documented in the README):

0 ok · 1 unexpected error · 2 bad input (policy, flags) · 3 nothing eligible / not found ·
4 provider error (auth, quota) · 5 job failed · 6 deadline or budget cannot be met ·
130 interrupted (Ctrl-C)
"""

from __future__ import annotations

import importlib
from typing import Any, NoReturn

import click

from provisioner.errors import (  # the codes and their one table live with the error tree
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_CODES,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_JOB_FAILED,
    EXIT_NOT_FOUND,
    EXIT_NOTHING_ELIGIBLE,
    EXIT_OK,
    EXIT_PROVIDER,
    EXIT_UNMEETABLE,
    exit_code_for,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BROKEN_PIPE",
    "EXIT_CODES",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_JOB_FAILED",
    "EXIT_NOTHING_ELIGIBLE",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_PROVIDER",
    "EXIT_UNMEETABLE",
    "exit_code_for",
]


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
    "quotas": (
        "provisioner.cli.quotas_cmd",
        "quotas",
        "The account's GPU quotas per cloud and region, as last read (--refresh reads them).",
    ),
    "priors": (
        "provisioner.cli.priors_cmd",
        "priors",
        "What each cloud says of its zones' spot capacity, as last read (--refresh reads it).",
    ),
    "reserve": (
        "provisioner.cli.reserve_cmd",
        "reserve",
        "GPU capacity bookable for a date range (AWS Capacity Blocks), priced; buys with --yes.",
    ),
    "up": ("provisioner.cli.up_cmd", "up", "Submit a job and supervise it through interruptions."),
    "jobs": ("provisioner.cli.jobs_cmd", "jobs", "List jobs."),
    "check": (
        "provisioner.cli.check_cmd",
        "check",
        "Check a job's promises (invariants) against the store, its cloud and its events.",
    ),
    "drill": (
        "provisioner.cli.drill_cmd",
        "drill",
        "Prove recovery on your account: one tiny job through a real interruption.",
    ),
    "daemon": ("provisioner.cli.daemon_cmd", "daemon", "Run the controller (under systemd)."),
    "dashboard": (
        "provisioner.cli.dashboard_cmd",
        "dashboard",
        "Serve the read-only web dashboard over a store.",
    ),
    "status": ("provisioner.cli.jobs_cmd", "status", "Show a job's state, placement and spend."),
    "logs": (
        "provisioner.cli.logs_cmd",
        "logs",
        "A job's events and its own output, per attempt (-f to follow).",
    ),
    "exec": (
        "provisioner.cli.logs_cmd",
        "exec_",
        "Run a command beside a running job (sim), or say how on its cloud.",
    ),
    "down": (
        "provisioner.cli.jobs_cmd",
        "down",
        "Stop a job: terminate instances, keep checkpoints.",
    ),
    "cost": (
        "provisioner.cli.cost_cmd",
        "cost",
        "What ran and what it cost: per job, attempt, cloud or day, beside the estimate.",
    ),
    "notify": (
        "provisioner.cli.notify_cmd",
        "notify",
        "Notification targets: `notify test` sends a message to each.",
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
    "tco": (
        "provisioner.cli.tco_cmd",
        "tco",
        "Sustained workload: spot, on-demand and 1-/3-year commitments over months.",
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

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; an exception it did not handle becomes one error line and an exit
        code (never a traceback, unless -vv asks for it)."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            _quiet_broken_pipe()
        except Exception as exc:
            verbose = int((ctx.obj or {}).get("verbose", 0)) if isinstance(ctx.obj, dict) else 0
            raise SystemExit(report_unhandled(exc, verbose)) from None

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
    130 interrupted, 141 output pipe closed.
    """
    from provisioner.logs import setup_logging

    setup_logging(verbose)
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose


def report_unhandled(exc: BaseException, verbose: int = 0) -> int:
    """Print what went wrong in one line (stderr) and return the exit code for it, from
    :data:`EXIT_CODES` (2 bad input, 3 nothing eligible, 4 a cloud's refusal, 5 a failed job);
    2 for a store that cannot be used as given (a directory, read-only, not a database); 1 for
    anything else, said as unexpected."""
    import traceback

    from provisioner.console import error

    if verbose >= 2:
        traceback.print_exception(exc)
    from policies.loader import PolicyError

    if isinstance(exc, PolicyError):
        for issue in exc.issues:
            error(str(issue))
        return exit_code_for(exc)
    problem = store_problem(exc)
    if problem is not None:
        error(
            f"the store cannot be used: {problem} (check --store / PROVISIONER_STORE: "
            "a writable SQLite file or a reachable PostgreSQL database)"
        )
        return EXIT_BAD_INPUT
    from providers.base import redact

    code = exit_code_for(exc)
    if code != EXIT_ERROR:
        error(redact(str(exc)))
        return code
    hint = "" if verbose >= 2 else " (run with -vv for the traceback)"
    error(f"unexpected error: {type(exc).__name__}: {redact(str(exc))[:500]}{hint}")
    return EXIT_ERROR


def store_problem(exc: BaseException) -> str | None:
    """The database's own message for a store error (without the SQL or its parameters)."""
    import sqlite3

    try:
        from sqlalchemy.exc import SQLAlchemyError
    except ImportError:  # pragma: no cover - a dependency
        SQLAlchemyError = ()  # type: ignore[assignment,misc]
    if isinstance(exc, SQLAlchemyError):
        orig = getattr(exc, "orig", None)
        text = str(orig) if orig is not None else str(exc).split("\n")[0]
        return text.split("\n")[0][:300]
    if isinstance(exc, sqlite3.Error):
        return str(exc).split("\n")[0][:300]
    return None


#: Short commands that do no linear algebra, start no process and validate only our own
#: policy models. For them numpy is loaded with one BLAS thread (OpenBLAS starts a pool per
#: core at import: pure start-up cost here) and pydantic looks for no plugins (it would read
#: the entry points of every installed distribution, ~15 ms). A user's own setting wins.
LEAN_COMMANDS = frozenset({"plan", "policy"})
LEAN_ENVIRONMENT = {"OPENBLAS_NUM_THREADS": "1", "PYDANTIC_DISABLE_PLUGINS": "__all__"}


def _lean_start(args: list[str]) -> None:
    import os

    command = next((a for a in args if not a.startswith("-")), None)
    if command in LEAN_COMMANDS:
        for key, value in LEAN_ENVIRONMENT.items():
            os.environ.setdefault(key, value)


def _quiet_broken_pipe() -> NoReturn:
    """The reader of our output went away (`provisioner plan | head`): stop quietly with 141,
    as a pipe expects; stdout goes to /dev/null so the interpreter's last flush cannot fail."""
    import os
    import sys

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(EXIT_BROKEN_PIPE)


def main(argv: list[str] | None = None) -> Any:
    """The console entry point. Usage errors (an unknown option, a value out of range) are
    printed in the same one-line style as every other error, with exit 2."""
    import sys

    from provisioner.console import error

    _lean_start(sys.argv[1:] if argv is None else argv)

    try:
        rv = cli.main(args=argv, prog_name="provisioner", standalone_mode=False)
    except click.UsageError as exc:
        where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        error(f"{exc.format_message()}{where}")
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        error(exc.format_message())
        sys.exit(exc.exit_code)
    except click.Abort:
        error("interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        _quiet_broken_pipe()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_broken_pipe()
    sys.exit(rv if isinstance(rv, int) else EXIT_OK)
