"""The layout keeps its promises (docs/architecture.md, "Layers and rules"):

- the pure core (``provisioner.core`` and ``policies``) imports with every I/O-ish module
  refused, in a real subprocess;
- no clock, no file opening and no environment in the core's source (an AST scan);
- the import graph of ``policies/``, ``provisioner/`` and ``providers/`` (module-level and
  function-level imports alike) has no cycle, between packages or inside one, and no arrow running up the
  layers ``policies < provisioner.core < providers < control/simulate/agent/probe < faces``;
- no module over 500 lines, except the documented allow-list below.

Each allow-list entry carries its reason; the same entries are listed in docs/architecture.md.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PURE_DIRS = ("provisioner/core", "policies")
BLOCKED = (
    "socket",
    "sqlite3",
    "sqlalchemy",
    "psycopg",
    "boto3",
    "botocore",
    "google",
    "azure",
    "alibabacloud",
    "tencentcloud",
    "urllib.request",
    "http.client",
    "subprocess",
    "fsspec",
    "apscheduler",
    "requests",
)
#: Prepended to a subprocess's code: refuses an import of a BLOCKED module *by our code*. It sits
#: in builtins.__import__, which sees the importing module's globals, so it refuses our import
#: even when a library loaded that module first (pydantic's plugin loader pulls
#: importlib.metadata -> email -> socket: the library's business, not the core doing I/O); a
#: meta-path finder alone would both refuse the library and miss a module already loaded.
GUARD = (
    "import builtins, importlib, json, sys\n"
    f"BLOCKED = {BLOCKED!r}\n"
    "OURS = ('policies', 'provisioner', 'providers')\n"
    "refused = []\n"
    "def blocked(name):\n"
    "    return any(name == b or name.startswith(b + '.') for b in BLOCKED)\n"
    "real = builtins.__import__\n"
    "def guarded(name, globals=None, locals=None, fromlist=(), level=0):\n"
    "    who = (globals or {}).get('__name__') or ''\n"
    "    if level == 0 and who.split('.')[0] in OURS:\n"
    "        wanted = [name, *(f'{name}.{f}' for f in fromlist or ())]\n"
    "        if any(blocked(w) for w in wanted):\n"
    "            refused.append(f'{who} -> {name}')\n"
    "            raise ImportError(f'{who} imports {name}: refused in the pure core')\n"
    "    return real(name, globals, locals, fromlist, level)\n"
    "builtins.__import__ = guarded\n"
)
#: Calls the core may not make. ``open`` means the builtin and ``os.open``/``io.open``; reading
#: package data through importlib.resources (immutable facts shipped with the code: the GPU
#: table, the regions) is allowed and is the only file access in the core.
FORBIDDEN_CALLS = {
    "datetime.now",
    "datetime.utcnow",
    "datetime.today",
    "date.today",
    "time.time",
    "time.time_ns",
    "time.monotonic",
    "time.perf_counter",
    "open",
    "io.open",
    "os.open",
    "os.fdopen",
    "os.getenv",
}
#: file -> (forbidden names it may use, why)
PURE_EXCEPTIONS: dict[str, tuple[set[str], str]] = {
    "policies/loader.py": (
        {"os.open", "os.fdopen"},
        "load_policy(path) reads the one policy file its caller names (refusing FIFOs and "
        "devices); parse_policy(text) is the pure entry",
    ),
}

#: layer of each package prefix (the longest matching prefix wins)
LAYERS = {
    "policies": 0,
    "provisioner.errors": 0,  # the one error tree: imports nothing of ours, below every layer
    "provisioner.core": 1,
    "providers": 2,
    "provisioner.catalog_files": 2,  # the first I/O layer: catalog files, beside the clouds
    "provisioner.trace_files": 2,  # and trace files, for the simulator and the sim's market
    "provisioner.control": 3,
    "provisioner.simulate": 3,
    "provisioner.agent": 3,
    "provisioner.probe": 3,
    "provisioner.logs": 3,  # logging set-up for the daemon and the CLI
    "provisioner.providers_config": 3,  # provider defaults read by the CLI
    "provisioner.jobcode": 3,  # the job's code: packed at `up`, fetched by the agent
    "provisioner.agentwheel": 3,  # the agent's own wheel: built, stored and linked per launch
    "provisioner.job": 3,  # the job's side on the VM (stdlib; framework integrations, lazily)
    "provisioner.submission": 3,
    "provisioner.preflight": 3,  # what `up` and the API refuse before a job is written  # what `up` checks and prepares before a job is written
    "provisioner.data": 0,  # package data (CSV files), no code
    "provisioner.cli": 4,
    "provisioner.api": 4,
    "provisioner.dashboard": 4,
    "provisioner.planning": 4,  # the Python API's provisioner.plan()
    "provisioner.console": 4,  # the CLI's rich console
    "provisioner.__main__": 4,
    "provisioner": 4,  # the package itself: the Python API's lazy names
}
#: (importer, imported) arrows allowed for now, each with the reason and who removes it
KNOWN_ARROWS: dict[tuple[str, str], str] = {}
#: strongly connected sets of modules (a cycle, in one package or across several) allowed for now
KNOWN_CYCLES: dict[frozenset[str], str] = {}

MAX_LINES = 500
#: module file -> why it is allowed over MAX_LINES (a long file is a smell to read, never a
#: reason to cut one idea in two: each of these was read and is one idea)
OVERSIZE: dict[str, str] = {
    "provisioner/core/planner.py": "the planner's one vectorised pass over the catalog, now "
    "with the budget and window rules it shares with the daemon and the rows it keeps for the "
    "plan/daemon invariant; its per-row helpers are in planrows.py",
    "provisioner/control/reconciler.py": "the pass over every job: claim, list once per "
    "provider, hand each job its pass, flush, check the cheap invariants",
    "provisioner/control/invariants/checks.py": "the job's promises, one check each, read "
    "side by side (the snapshot they read and the daemon's per-pass check are modules of "
    "their own)",
    "providers/sim/adapter.py": "the sim's Provider: one method per call of the Provider "
    "interface and of its capabilities, each a request to the sim server (its held capacity "
    "and market views in modules of their own)",
    "providers/sim/cloud.py": "the sim cloud's state behind one lock: launch, list, terminate, "
    "notices and the scheduler (the market, placement groups, held capacity, records and "
    "sandboxes in modules of their own)",
}


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for top in ("policies", "provisioner", "providers"):
        for path in sorted((REPO / top).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Modules of ours that ``name`` imports anywhere in its body (``TYPE_CHECKING`` blocks
    excluded: they never run)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for sub in node.body for n in ast.walk(sub))
    package = name if _is_package(path) else name.rpartition(".")[0]
    targets: list[str] = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            for a in node.names:
                full = f"{base}.{a.name}"
                targets.append(full if full in mods else base)
    out = set()
    for t in targets:
        while t and t not in mods:
            t = t.rpartition(".")[0]
        if t and t != name:
            out.add(t)
    return out


def _layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def _graph() -> tuple[dict[str, Path], dict[str, set[str]]]:
    mods = _modules()
    return mods, {m: _imports(m, p, mods) for m, p in mods.items()}


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(comp)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_pure_core_imports_with_io_modules_blocked() -> None:
    pure = sorted(
        m
        for m, p in _modules().items()
        if any(str(p.relative_to(REPO)).startswith(d) for d in PURE_DIRS)
    )
    assert "provisioner.core.planner" in pure and "policies.cron" in pure
    code = (
        GUARD + f"for m in {pure!r}:\n    importlib.import_module(m)\nprint(json.dumps(refused))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_the_import_guard_refuses_a_blocked_import(tmp_path: Path) -> None:
    """The same guard on a ``policies`` package that imports socket (shadowing ours from the
    working directory): refused, so the test above can fail."""
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "__init__.py").write_text("import json\nfrom http import client\n")
    code = GUARD + "import policies\n"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode != 0 and "policies imports http: refused" in done.stderr


def _call_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _call_name(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def test_the_core_reads_no_clock_no_file_and_no_environment() -> None:
    found: list[str] = []
    for d in PURE_DIRS:
        for path in sorted((REPO / d).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            allowed = PURE_EXCEPTIONS.get(rel, (set(), ""))[0]
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                name = None
                if isinstance(node, ast.Call):
                    name = _call_name(node.func)
                    if name is not None and name.startswith("datetime.datetime."):
                        name = name.removeprefix("datetime.")
                    if name not in FORBIDDEN_CALLS:
                        name = None
                elif isinstance(node, ast.Attribute) and _call_name(node) == "os.environ":
                    name = "os.environ"
                if name is not None and name not in allowed:
                    found.append(f"{rel}:{node.lineno}: {name}")
    assert found == []


def test_the_scan_sees_what_it_forbids(tmp_path: Path) -> None:
    """The AST scan is not vacuous: each forbidden form is recognised."""
    text = (
        "import os, time\nfrom datetime import datetime\n"
        "a = datetime.now()\nb = time.monotonic()\nc = open('x')\nd = os.environ['X']\n"
    )
    names = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and _call_name(node.func) in FORBIDDEN_CALLS:
            names.append(_call_name(node.func))
        elif isinstance(node, ast.Attribute) and _call_name(node) == "os.environ":
            names.append("os.environ")
    assert sorted(n or "" for n in names) == [
        "datetime.now",
        "open",
        "os.environ",
        "time.monotonic",
    ]


def test_no_import_runs_up_the_layers() -> None:
    _, graph = _graph()
    assert "provisioner.control.store" in graph["provisioner.control.reconciler"]  # not vacuous
    up = []
    for src, targets in sorted(graph.items()):
        for dst in sorted(targets):
            if _layer(dst) > _layer(src) and (src, dst) not in KNOWN_ARROWS:
                up.append(f"{src} (layer {_layer(src)}) -> {dst} (layer {_layer(dst)})")
    assert up == []
    stale = [k for k in KNOWN_ARROWS if k[1] not in graph.get(k[0], set())]
    assert stale == [], "allowed arrows that no longer exist: remove them from KNOWN_ARROWS"


def test_no_cycle_in_the_import_graph() -> None:
    """No module reaches itself through imports: not across packages, and not inside one
    (``cli.tco_cmd`` <-> ``cli.tco_plot`` and ``providers._common`` -> ``bootstrap`` ->
    ``facts`` -> ``_common`` were the last two)."""
    mods, graph = _graph()
    assert len(mods) > 150 and all(m in mods for m in graph)  # the scan saw the tree
    bad = [
        sorted(comp)
        for comp in _strongly_connected(graph)
        if len(comp) > 1 and frozenset(comp) not in KNOWN_CYCLES
    ]
    assert bad == []


def test_the_cycle_check_finds_a_cycle() -> None:
    """The same search, on a graph with a circle of three and a tail, names the circle only."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    comps = [sorted(c) for c in _strongly_connected(graph) if len(c) > 1]
    assert comps == [["a", "b", "c"]]


def test_no_module_over_500_lines_but_the_documented_ones() -> None:
    over = {}
    for top in ("policies", "provisioner", "providers"):
        for path in sorted((REPO / top).rglob("*.py")):
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > MAX_LINES:
                over[str(path.relative_to(REPO))] = n
    assert sorted(set(over) - set(OVERSIZE)) == [], over
    stale = sorted(set(OVERSIZE) - set(over))
    assert stale == [], "under the limit now: remove from OVERSIZE (and docs/architecture.md)"


def test_the_allow_lists_are_documented() -> None:
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [f for f in [*OVERSIZE, *PURE_EXCEPTIONS] if f"`{f}`" not in doc]
    assert missing == []
