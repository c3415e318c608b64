"""Plain lines and aligned columns for short outputs, without loading rich.

`provisioner plan` prints a head line, a table and a few notes; rich costs about a tenth of its
cold start to import. This printer writes the same layout (columns two spaces apart, numbers
right-aligned, long lines wrapped at spaces) with ANSI bold and colour only on a terminal
(colour dropped under NO_COLOR, as rich does). A table wider than the screen is not drawn here:
:meth:`Plain.table` returns False and the caller falls back to rich, which wraps cells.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from typing import TextIO

from provisioner.console import UNWRAPPED

_CODES = {"bold": "1", "red": "31", "yellow": "33"}


class Plain:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.no_color = os.environ.get("NO_COLOR", "") != ""
        if self.tty:
            columns = int(os.environ.get("COLUMNS", "0") or 0)
            self.width = columns or shutil.get_terminal_size().columns
        else:  # a pipe, a file, a test: no line is wrapped or cut (as console())
            self.width = UNWRAPPED

    def style(self, text: str, *styles: str) -> str:
        if not self.tty:
            return text
        codes = [_CODES[s] for s in styles if s == "bold" or not self.no_color]
        return f"\x1b[{';'.join(codes)}m{text}\x1b[0m" if codes else text

    def line(self, *parts: tuple[str, tuple[str, ...]] | str) -> None:
        """One logical line of (text, styles) parts, wrapped at spaces to the width."""
        words: list[tuple[str, tuple[str, ...]]] = []
        for part in parts:
            text, styles = (part, ()) if isinstance(part, str) else part
            for i, word in enumerate(text.split(" ")):
                if i:
                    words.append((" ", ()))
                if word:
                    words.append((word, styles))
        out: list[str] = []
        length = 0
        wrapped = False  # spaces at a break are dropped; the line's own indentation is kept
        for word, styles in words:
            if word == " ":
                if not wrapped or length:
                    out.append(" ")
                    length += 1
                continue
            if length and length + len(word) > self.width and out[-1] == " ":
                while out and out[-1] == " ":
                    out.pop()
                out.append("\n")
                length, wrapped = 0, True
            out.append(self.style(word, *styles))
            length += len(word)
        while out and out[-1] == " ":
            out.pop()
        self.stream.write("".join(out) + "\n")

    def table(
        self, headers: Sequence[str], right: Sequence[bool], rows: Sequence[Sequence[str]]
    ) -> bool:
        """Columns two spaces apart, a bold header; False (nothing written) when too wide."""
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        if sum(widths) + 2 * (len(widths) - 1) > self.width:
            return False

        def cells(values: Sequence[str], styles: tuple[str, ...] = ()) -> str:
            text = [
                v.rjust(w) if r else v.ljust(w)
                for v, w, r in zip(values, widths, right, strict=True)
            ]
            joined = "  ".join(text).rstrip()
            return self.style(joined, *styles) if styles else joined

        self.stream.write(cells(headers, ("bold",)) + "\n")
        for r in rows:
            self.stream.write(cells(r) + "\n")
        return True
