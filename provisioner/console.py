"""One rich Console for the CLI, honouring NO_COLOR and non-terminal output."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def console(stderr: bool = False) -> Console:
    """A Console writing to the *current* stdout/stderr (so redirection and tests work)."""
    from rich.console import Console

    no_color = os.environ.get("NO_COLOR", "") != ""
    return Console(stderr=stderr, no_color=no_color, highlight=False, soft_wrap=False)


def error(message: str) -> None:
    """Print an error line to stderr (never a traceback)."""
    console(stderr=True).print(f"[bold red]error:[/] {message}", markup=True, highlight=False)
