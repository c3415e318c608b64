"""Every relative link in README.md and docs/*.md reaches a file that exists and, where it
names an anchor, a heading of that file (GitHub's slugs: lower case, punctuation dropped,
spaces as hyphens, a repeated heading numbered)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links() -> list[str]:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    bad = []
    for page in pages:
        for lineno, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (page.parent / file_part).resolve() if file_part else page
                where = f"{page.relative_to(REPO)}:{lineno}: {target}"
                if not dest.exists():
                    bad.append(f"{where} (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    bad.append(f"{where} (no such heading)")
    return bad


def test_the_slug_is_githubs() -> None:
    assert slug("Measuring the estimate (`benchmarks/estimate_bench.py`)") == (
        "measuring-the-estimate-benchmarksestimate_benchpy"
    )
    assert slug("Money: the estimate's model") == "money-the-estimates-model"


def test_every_relative_link_in_the_docs_resolves() -> None:
    assert broken_links() == []
