"""Hostile policy documents, as hypothesis strategies (shared by the fuzz test and
``benchmarks/policy_fuzz.py``).

Each strategy yields YAML text of one kind the loader must answer quickly and with a located
``PolicyError`` (or accept): mutated valid policies, wrong types at real fields, non-finite
and huge numbers, unicode and control characters, deep nesting, duplicate and merge keys,
alias bombs, long strings. :func:`classify` runs one document through ``parse_policy`` and
says what came back.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = [
    (REPO / "policies" / f"{n}.yaml").read_text()
    for n in ("spot-finetune", "on-demand-inference", "cheapest-anywhere")
]
EXAMPLE_DATA = [yaml.safe_load(t) for t in EXAMPLES]
LOCATED = re.compile(r"^p\.yaml:\d+:\d+: \S")

#: What a real field may be set to when the fuzzer wants a number that is not one.
HOSTILE_NUMBERS = [
    ".inf",
    "-.inf",
    ".nan",
    ".NaN",
    "1e309",
    "-1e309",
    "1.0e+309",
    "'inf'",
    "'nan'",
    "'1e999'",
    "99999999999999999999999999999999999999",
    "9" * 5000,
    "1" + "0" * 400 + ".0",
    "-0",
    "-1",
    "0",
    "0x7fffffffffffffff",
    "0o777777777777777777777",
    "0b" + "1" * 100,
    "190:20:30:40:50:59:59:59",
    "1_000_000_000_000_000_000",
    "2.5e-324",
    "1e15",
    "1.0e+16",
    "99999999999999999d",
    "'-5h'",
    "'999999999w'",
    "'1.5e3h'",
    "2026-02-30",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59-23:59",
    "2026-12-24T18:00:00+99:99",
]

#: Characters that break naive handling: controls, escapes, BOM, bidi, surrogate escapes.
NASTY_CHARS = [
    "\x00",
    "\x07",
    "\x1b",
    "\x7f",
    "\x85",
    "\u2028",
    "\u2029",
    "\ufeff",
    "\u202e",
    "\u200b",
    "\ufffe",
    "\uffff",
    "\U0010ffff",
    "\ud800",
    "\t",
    "\r",
    "\\",
    '"',
    "'",
    ":",
    "#",
    "&",
    "*",
    "!",
    "%",
    "@",
    "`",
    "[",
    "]",
    "{",
    "}",
    "|",
    ">",
    "-",
    "?",
]
ESCAPES = ['"\\e[2J"', '"\\x00"', '"\\u202e"', '"\\ud800"', '"\\N"', '"\\_"', '"\\L"', '"\\P"']

FIELDS: list[tuple[str, ...]] = [
    ("name",),
    ("description",),
    ("job",),
    ("job", "command"),
    ("job", "compute_hours"),
    ("job", "reference_gpu"),
    ("job", "env"),
    ("job", "disk_gb"),
    ("resources",),
    ("resources", "gpus"),
    ("resources", "gpu_count"),
    ("resources", "min_vram_gb"),
    ("resources", "workload"),
    ("resources", "workload", "parameters_b"),
    ("resources", "workload", "sequence_length"),
    ("resources", "workload", "method"),
    ("resources", "exclude_gpus"),
    ("market",),
    ("bid_cap", "max_spot_price_per_gpu_hour"),
    ("bid_cap", "max_fraction_of_on_demand"),
    ("budget", "max_total"),
    ("budget", "max_price_per_hour"),
    ("budget", "on_exhausted"),
    ("deadline",),
    ("residency", "allow"),
    ("residency", "deny_regions"),
    ("residency", "providers"),
    ("latency", "targets"),
    ("latency", "max_rtt_ms"),
    ("latency", "measured"),
    ("preferences", "price"),
    ("checkpoint", "uri"),
    ("checkpoint", "interval"),
    ("checkpoint", "signal"),
    ("checkpoint", "grace"),
    ("restart", "max_restarts"),
    ("restart", "zone_cooldown"),
    ("windows",),
]


def _set(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    cur = out
    for key in path[:-1]:
        nxt = cur.get(key)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[key] = nxt
        cur = nxt
    cur[path[-1]] = value
    return out


def _dump(doc: Any) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


def _with_raw(path: tuple[str, ...], raw: str, base: dict[str, Any]) -> str:
    """The base policy with the YAML text ``raw`` (unparsed) as the value at ``path``."""
    marker = "__FUZZ_VALUE__"
    return _dump(_set(base, path, marker)).replace(f"'{marker}'", raw).replace(marker, raw)


wrong_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.sampled_from(["spot", "EEA", "48h", "A100", "SIGUSR1", "aws:eu-west-1", "0 22 * * *"]),
)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A valid example with a few character-level edits."""
    text = draw(st.sampled_from(EXAMPLES))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["delete", "insert", "dup", "swap", "indent"]))
        i = draw(st.integers(0, len(text)))
        lines = text.splitlines()
        if op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 40)) :]
        elif op == "insert":
            junk = draw(
                st.text(alphabet=st.sampled_from([*NASTY_CHARS, "x", "0", " ", "\n"]), max_size=8)
            )
            text = text[:i] + junk + text[i:]
        elif op == "dup" and lines:
            j = draw(st.integers(0, len(lines) - 1))
            lines.insert(j, lines[j])
            text = "\n".join(lines)
        elif op == "swap" and len(lines) > 1:
            a, b = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[a], lines[b] = lines[b], lines[a]
            text = "\n".join(lines)
        elif op == "indent" and lines:
            j = draw(st.integers(0, len(lines) - 1))
            lines[j] = " " * draw(st.integers(1, 7)) + lines[j]
            text = "\n".join(lines)
    return text


@st.composite
def wrong_types(draw: st.DrawFn) -> str:
    """A real field given a value of another type (or another shape)."""
    base = draw(st.sampled_from(EXAMPLE_DATA))
    doc = base
    for _ in range(draw(st.integers(1, 3))):
        doc = _set(doc, draw(st.sampled_from(FIELDS)), draw(wrong_values))
    return _dump(doc)


@st.composite
def hostile_numbers(draw: st.DrawFn) -> str:
    """Non-finite, huge, tiny, odd-base and overflowing numbers (and durations, times)."""
    base = draw(st.sampled_from(EXAMPLE_DATA))
    raw = draw(st.sampled_from(HOSTILE_NUMBERS))
    if draw(st.booleans()):
        raw = str(draw(st.one_of(st.integers(-(10**400), 10**400), st.floats())))
    path = draw(st.sampled_from(FIELDS))
    if draw(st.booleans()):
        path = ("latency", "measured", draw(st.sampled_from(["aws:eu-west-1", "a", "x:y:z", ""])))
    return _with_raw(path, raw, base)


@st.composite
def unicode_and_controls(draw: st.DrawFn) -> str:
    """Unicode, control characters and escapes in keys and values, raw or escaped."""
    base = draw(st.sampled_from(EXAMPLE_DATA))
    path = draw(st.sampled_from(FIELDS))
    kind = draw(st.sampled_from(["raw", "escape", "key", "text", "bom"]))
    if kind == "raw":
        value = draw(st.text(alphabet=st.sampled_from(NASTY_CHARS), min_size=1, max_size=12))
        return _with_raw(path, value, base)
    if kind == "escape":
        return _with_raw(path, draw(st.sampled_from(ESCAPES)), base)
    if kind == "key":
        key = draw(st.sampled_from([*ESCAPES, '"[bold]x[/]"', '"[/oops]"', "'a.b'", "'<<'"]))
        return _dump(base) + f"{key}: 1\n"
    if kind == "bom":
        return "\ufeff" + _dump(base) + "\ufeff"
    return _with_raw(
        path,
        yaml.safe_dump(draw(st.text(min_size=1, max_size=40)), allow_unicode=True)
        .split("\n...")[0]
        .strip(),
        base,
    )


@st.composite
def deep_nesting(draw: st.DrawFn) -> str:
    """Flow or block collections nested tens to thousands of levels."""
    depth = draw(st.integers(2, 6000))
    style = draw(st.sampled_from(["flow-list", "flow-map", "block-map", "block-list", "open"]))
    if style == "flow-list":
        return "resources: {gpus: " + "[" * depth + "A100" + "]" * depth + "}\n"
    if style == "flow-map":
        return "job: " + "{a: " * depth + "1" + "}" * depth + "\n"
    if style == "block-map":
        depth = min(depth, 800)
        return "".join(" " * i + f"k{i}:\n" for i in range(depth)) + " " * depth + "x: 1\n"
    if style == "block-list":
        depth = min(depth, 800)
        return (
            "windows:\n" + "".join(" " * i + "-\n" for i in range(1, depth)) + " " * depth + "- 1\n"
        )
    return "x: " + "[" * depth  # never closed


@st.composite
def duplicate_and_merge_keys(draw: st.DrawFn) -> str:
    base = _dump(draw(st.sampled_from(EXAMPLE_DATA)))
    kind = draw(
        st.sampled_from(
            ["dup-top", "dup-nested", "merge", "merge-list", "merge-bad", "merge-chain"]
        )
    )
    if kind == "dup-top":
        line = draw(
            st.sampled_from([ln for ln in base.splitlines() if ln and not ln.startswith(" ")])
        )
        return base + line + "\n"
    if kind == "dup-nested":
        return base + "budget:\n  max_total: 5\n  max_total: 6\n"
    if kind == "merge":
        return "defaults: &d {market: spot, name: x}\n<<: *d\nname: y\n"
    if kind == "merge-list":
        return "a: &a {market: spot}\nb: &b {name: b}\n<<: [*a, *b]\n"
    if kind == "merge-bad":
        return draw(
            st.sampled_from(["<<: 5\n", "<<: [1, 2]\n", "<<: *nope\n", "<<: {<<: {<<: 1}}\n"])
        )
    n = draw(st.integers(2, 40))
    chain = "m0: &m0 {market: spot}\n" + "".join(
        f"m{i}: &m{i} {{<<: *m{i - 1}, k{i}: {i}}}\n" for i in range(1, n)
    )
    return chain + f"<<: *m{n - 1}\n"


@st.composite
def alias_bombs(draw: st.DrawFn) -> str:
    """The billion-laughs shape and its relatives: nested aliases, cycles, undefined names."""
    levels = draw(st.integers(1, 12))
    width = draw(st.integers(2, 20))
    kind = draw(st.sampled_from(["list", "map", "merge", "cycle", "undefined", "key"]))
    if kind == "cycle":
        return draw(
            st.sampled_from(
                ["a: &a [*a]\n", "a: &a {b: *a}\n", "&a [*a, *a]\n", "<<: &a {<<: *a}\n"]
            )
        )
    if kind == "undefined":
        return "name: *nowhere\n"
    lines = ["l0: &l0 " + ("[" + ",".join(["lol"] * width) + "]")]
    for i in range(1, levels):
        refs = [f"*l{i - 1}"] * width
        if kind == "list":
            lines.append(f"l{i}: &l{i} [" + ",".join(refs) + "]")
        elif kind == "map":
            lines.append(
                f"l{i}: &l{i} {{" + ",".join(f"k{j}: {r}" for j, r in enumerate(refs)) + "}"
            )
        elif kind == "merge":
            lines.append(f"l{i}: &l{i} {{k: [" + ",".join(refs) + "]}}")
        else:  # aliases used as keys
            lines.append(f"l{i}: &l{i} [" + ",".join(refs) + "]\n? *l0\n: x")
    target = draw(st.sampled_from(["resources: {gpus: *l%d}", "job: {env: *l%d}", "windows: *l%d"]))
    return "\n".join(lines) + "\n" + target % (levels - 1) + "\n"


@st.composite
def long_strings(draw: st.DrawFn) -> str:
    """Long values, long keys and many keys, up to just past the 1 MB limit."""
    base = draw(st.sampled_from(EXAMPLE_DATA))
    n = draw(st.sampled_from([1_000, 65_536, 300_000, 999_000, 1_000_001, 1_200_000]))
    char = draw(st.sampled_from(["x", "é", "9", " ", "-", "\u4e00", "\U0001f600"]))
    kind = draw(st.sampled_from(["value", "key", "many-keys", "many-items", "comment"]))
    path = draw(st.sampled_from(FIELDS))
    if kind == "value":
        return _dump(_set(base, path, char * (n // len(char.encode()))))
    if kind == "key":
        return _dump(base) + "k" * min(n, 1_100_000) + ": 1\n"
    if kind == "many-keys":
        count = n // 12
        return "job:\n  env:\n" + "".join(f"    K{i}: v\n" for i in range(count))
    if kind == "many-items":
        return "resources:\n  gpus: [" + ",".join(["A100"] * (n // 5)) + "]\n"
    return _dump(base) + "#" + "c" * n + "\n"


hostile_documents = st.one_of(
    mutated(),
    wrong_types(),
    hostile_numbers(),
    unicode_and_controls(),
    deep_nesting(),
    duplicate_and_merge_keys(),
    alias_bombs(),
    long_strings(),
)

KINDS = {
    "mutated": mutated,
    "wrong-types": wrong_types,
    "numbers": hostile_numbers,
    "unicode": unicode_and_controls,
    "nesting": deep_nesting,
    "dup-merge": duplicate_and_merge_keys,
    "alias-bombs": alias_bombs,
    "long-strings": long_strings,
}


def classify(text: str) -> tuple[str, str]:
    """("accepted" | "refused" | "unlocated" | "crashed", detail) for one document."""
    from policies import PolicyError, parse_policy
    from policies.model import Policy

    try:
        result = parse_policy(text, "p.yaml")
    except PolicyError as exc:
        bad = [
            str(i)
            for i in exc.issues
            if not (i.line and i.line >= 1 and i.column and i.column >= 1 and LOCATED.match(str(i)))
        ]
        if not exc.issues or bad:
            return "unlocated", (bad or ["(no issues)"])[0][:300]
        return "refused", str(exc.issues[0])[:300]
    except Exception as exc:  # what the fuzzing is for: anything but a PolicyError
        return "crashed", f"{type(exc).__name__}: {exc}"[:300]
    if not isinstance(result, Policy):
        return "crashed", f"returned {type(result).__name__}"
    return "accepted", result.name
