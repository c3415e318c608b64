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
from collections.abc import Collection, Sequence
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
        if self.no_color:  # NO_COLOR: no escape codes at all, bold included
            return text
        codes = [_CODES[s] for s in styles if s in _CODES]
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
        self,
        headers: Sequence[str],
        right: Sequence[bool],
        rows: Sequence[Sequence[str]],
        *,
        force: bool = False,
    ) -> bool:
        """Columns two spaces apart, a bold header; False (nothing written) when too wide,
        unless ``force`` (then lines run past the width: the terminal folds them, nothing is
        cut)."""
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        if sum(widths) + 2 * (len(widths) - 1) > self.width and not force:
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


def fit_columns(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    keep: Collection[str],
    drop_order: Sequence[str] = (),
    gap: int = 2,
    edge: int = 0,
) -> list[int]:
    """The indices of the columns to show in ``width`` characters, cells never cut: columns
    are left out, whole, until the rest fits. Those in ``keep`` (ids and money) always
    stay; the others go, first those named nowhere (right to left), then ``drop_order``'s,
    in its order. What stays may still be wider than ``width`` when ``keep``'s alone is."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    shown = list(range(len(headers)))

    def total() -> int:
        return sum(widths[i] for i in shown) + gap * max(0, len(shown) - 1) + edge

    unnamed = [i for i, h in enumerate(headers) if h not in keep and h not in drop_order]
    order = [*reversed(unnamed), *(headers.index(h) for h in drop_order if h in headers)]
    for i in order:
        if total() <= width:
            break
        if headers[i] not in keep:
            shown.remove(i)
    for i in reversed(order):  # one left out early may fit beside the rest after all
        if i not in shown and headers[i] not in keep:
            shown.append(i)
            if total() > width:
                shown.remove(i)
    return sorted(shown)


def left_out_note(headers: Sequence[str], shown: Sequence[int], width: int) -> str | None:
    """A line that names the columns left out at this width, or None."""
    gone = [h for i, h in enumerate(headers) if i not in shown]
    if not gone:
        return None
    return f"left out at {width} columns: {', '.join(gone)} (--json or a wider terminal shows them)"
