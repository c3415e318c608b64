"""The layout keeps its promises (docs/architecture.md, "Layers and rules"):

- the pure core (``provisioner.core`` and ``policies``) imports with every I/O-ish module
  refused, in a real subprocess;
- no clock, no file opening and no environment in the core's source (an AST scan);
- the import graph of ``policies/``, ``provisioner/`` and ``providers/`` (module-level,
  function-level and ``TYPE_CHECKING`` imports alike: a type is a dependency too) has no
  cycle, between packages or inside one, and no arrow running up the layers of ``LAYERS``:
  ground < core < first I/O < node side < agent < control < faces.
- no function over 80 lines in ``provisioner/core`` and ``provisioner/control`` unless its
  docstring says why (``LONG_REASON``).

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

#: layer of each package prefix (the longest matching prefix wins); docs/architecture.md draws it
LAYERS = {
    # 0 ground: what the user wants, the one error tree, package data
    "policies": 0,
    "provisioner.errors": 0,  # the one error tree: imports nothing of ours, below every layer
    "provisioner.data": 0,  # package data (CSV files), no code
    # 1 the pure core
    "provisioner.core": 1,
    # 2 first I/O: the clouds, catalog files, trace files
    "providers": 2,
    "provisioner.catalog_files": 2,  # catalog files, beside the clouds
    "provisioner.trace_files": 2,  # and trace files, for the simulator and the sim's market
    # 3 the node side: what runs on the VM beside or inside the job, below the agent
    "provisioner.job": 3,  # the job's side (stdlib; framework integrations, lazily)
    "provisioner.probe": 3,  # the GPU probe and the idle tracker (the agent runs them)
    "provisioner.objstore": 3,  # the object store: checkpoints, the job's code, the wheel
    "provisioner.jobcode": 3,  # the job's code: packed at `up`, fetched by the agent
    # 4 the agent, and its own wheel
    "provisioner.agent": 4,  # the agent; its wire contract (spec, protocol, store layout)
    "provisioner.agentwheel": 4,  # the agent's own wheel: built, stored and linked per launch
    # 5 the control side: the daemon's loop, the simulator, what `up` writes and refuses
    "provisioner.control": 5,
    "provisioner.simulate": 5,  # the trace simulator: the same decide() as the daemon
    "provisioner.submission": 5,  # what `up` prepares and writes
    "provisioner.preflight": 5,  # what `up` and the API refuse before a job is written
    "provisioner.logs": 5,  # logging set-up for the daemon and the CLI
    "provisioner.providers_config": 5,  # provider defaults read by the CLI
    # 6 the faces
    "provisioner.cli": 6,
    "provisioner.api": 6,
    "provisioner.dashboard": 6,
    "provisioner.planning": 6,  # the Python API's provisioner.plan()
    "provisioner.console": 6,  # the CLI's rich console
    "provisioner.drill": 6,  # `provisioner drill`: drives the API, the reconciler, the agent
    "provisioner.__main__": 6,
    "provisioner": 6,  # the package itself: the Python API's lazy names
}
#: (importer, imported) arrows allowed for now, each with the reason and who removes it
KNOWN_ARROWS: dict[tuple[str, str], str] = {}
#: strongly connected sets of modules (a cycle, in one package or across several) allowed for now
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def _modules(root: Path = REPO) -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for top in ("policies", "provisioner", "providers"):
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _from_module(package: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` in ``package`` names (relative ones resolved)."""
    base = node.module or ""
    if not node.level:
        return base
    parts = package.split(".")
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, base] if base else parts)


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Modules of ours that ``name`` imports anywhere in its body: at module level, in a
    function, and in ``TYPE_CHECKING`` blocks (they never run, but a type named there is a
    dependency all the same: an upward one is the layering's leak, a circular one a cycle)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if _is_package(path) else name.rpartition(".")[0]
    targets: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _from_module(package, node)
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


def _owns(prefix: str, module: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _layer(module: str) -> int:
    best = max((p for p in LAYERS if _owns(p, module)), key=len)
    return LAYERS[best]


def _graph(root: Path = REPO) -> tuple[dict[str, Path], dict[str, set[str]]]:
    mods = _modules(root)
    return mods, {m: _imports(m, p, mods) for m, p in mods.items()}


def _arrows_up(graph: dict[str, set[str]]) -> list[str]:
    """Every import of ``graph`` that runs up ``LAYERS``, but those in ``KNOWN_ARROWS``."""
    up = []
    for src, targets in sorted(graph.items()):
        for dst in sorted(targets):
            if _layer(dst) > _layer(src) and (src, dst) not in KNOWN_ARROWS:
                up.append(f"{src} (layer {_layer(src)}) -> {dst} (layer {_layer(dst)})")
    return up


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle of ``graph`` (a strongly connected set of modules), but those in
    ``KNOWN_CYCLES``."""
    return [
        sorted(comp)
        for comp in _strongly_connected(graph)
        if len(comp) > 1 and frozenset(comp) not in KNOWN_CYCLES
    ]


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
    assert _arrows_up(graph) == []
    stale = [k for k in KNOWN_ARROWS if k[1] not in graph.get(k[0], set())]
    assert stale == [], "allowed arrows that no longer exist: remove them from KNOWN_ARROWS"
    unused = sorted(set(LAYERS) - {p for m in graph for p in LAYERS if _owns(p, m)})
    assert unused == [], "LAYERS names a prefix no module has"


def test_no_cycle_in_the_import_graph() -> None:
    """No module reaches itself through imports: not across packages, and not inside one
    (``cli.tco_cmd`` <-> ``cli.tco_plot`` and ``providers._common`` -> ``bootstrap`` ->
    ``facts`` -> ``_common`` were the last two; with the types read, ``core.catalog`` <->
    ``core.price_age``, ``core.views`` <-> ``core.looks`` and ``agent.runner`` <->
    ``agent.report``)."""
    mods, graph = _graph()
    assert len(mods) > 150 and all(m in mods for m in graph)  # the scan saw the tree
    assert _cycles(graph) == []
    found = {frozenset(c) for c in _strongly_connected(graph)}
    stale = [sorted(k) for k in KNOWN_CYCLES if k not in found]
    assert stale == [], "allowed cycles that no longer exist: remove them from KNOWN_CYCLES"


def _plant(root: Path, files: dict[str, str]) -> dict[str, set[str]]:
    """The import graph of a tree of ``files`` (path -> source) written under ``root``, read
    by the same scan as the real tree's."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return _graph(root)[1]


def test_the_layer_check_finds_a_planted_upward_import(tmp_path: Path) -> None:
    """A core module importing the control loop (in a function) and one naming an agent's
    type for its hints only: both are reported, each with its layers; a downward import is
    not."""
    graph = _plant(
        tmp_path,
        {
            "provisioner/__init__.py": "",
            "provisioner/core/__init__.py": "",
            "provisioner/core/models.py": "X = 1\n",
            "provisioner/core/bad.py": (
                "def f():\n    from provisioner.control import store\n    return store\n"
            ),
            "provisioner/core/hinted.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from provisioner.agent.spec import AgentSpec\n"
            ),
            "provisioner/control/__init__.py": "",
            "provisioner/control/store.py": "from provisioner.core import models\n",
            "provisioner/agent/__init__.py": "",
            "provisioner/agent/spec.py": "from ..core.models import X\n",
        },
    )
    assert _arrows_up(graph) == [
        "provisioner.core.bad (layer 1) -> provisioner.control.store (layer 5)",
        "provisioner.core.hinted (layer 1) -> provisioner.agent.spec (layer 4)",
    ]


def test_the_cycle_check_finds_a_planted_type_only_cycle(tmp_path: Path) -> None:
    """Two agent modules, one importing the other and that one naming the first's type in a
    ``TYPE_CHECKING`` block: a cycle, reported; the same files without the block, none."""
    files = {
        "provisioner/__init__.py": "",
        "provisioner/agent/__init__.py": "",
        "provisioner/agent/runner.py": (
            "from provisioner.agent.report import write\n\nclass Agent:\n    pass\n"
        ),
        "provisioner/agent/report.py": (
            "from __future__ import annotations\n\nfrom typing import TYPE_CHECKING\n\n"
            "if TYPE_CHECKING:\n    from provisioner.agent.runner import Agent\n\n\n"
            "def write(agent: Agent) -> None:\n    pass\n"
        ),
    }
    graph = _plant(tmp_path / "typed", files)
    assert graph["provisioner.agent.report"] == {"provisioner.agent.runner"}
    assert _cycles(graph) == [["provisioner.agent.report", "provisioner.agent.runner"]]
    files["provisioner/agent/report.py"] = "def write(agent: object) -> None:\n    pass\n"
    assert _cycles(_plant(tmp_path / "untyped", files)) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    """The same search, on a graph with a circle of three and a tail, names the circle only."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    comps = [sorted(c) for c in _strongly_connected(graph) if len(c) > 1]
    assert comps == [["a", "b", "c"]]


def test_the_allow_lists_are_documented() -> None:
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [f for f in PURE_EXCEPTIONS if f"`{f}`" not in doc]
    assert missing == []


#: Functions of the decision core and the daemon longer than this say why in their docstring,
#: in a sentence starting with LONG_REASON (a migration, one table of cases read top to bottom).
MAX_FUNCTION_LINES = 80
LONG_REASON = "Over 80 lines:"
LONG_DIRS = ("provisioner/core", "provisioner/control")


def _long_functions(root: Path, dirs: tuple[str, ...] = LONG_DIRS) -> list[str]:
    """``file:line name (N lines)`` of each function over MAX_FUNCTION_LINES whose docstring
    gives no reason."""
    out = []
    for top in dirs:
        for path in sorted((root / top).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES and LONG_REASON not in (ast.get_docstring(node) or ""):
                    where = path.relative_to(root)
                    out.append(f"{where}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_function_over_80_lines_in_core_and_control_without_its_reason() -> None:
    assert _long_functions(REPO) == []


def test_the_function_check_finds_a_planted_long_function(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(85))
    pkg = tmp_path / "provisioner" / "core"
    pkg.mkdir(parents=True)
    (pkg / "long.py").write_text(
        f"def long() -> None:\n{body}\n\n\ndef short() -> None:\n    pass\n"
    )
    (pkg / "said.py").write_text(
        f'def said() -> None:\n    """{LONG_REASON} one table of cases."""\n{body}'
    )
    assert _long_functions(tmp_path) == ["provisioner/core/long.py:1 long (86 lines)"]


def _private_imports(root: Path) -> list[str]:
    """``importer <- module.name`` for each ``_name`` of ours imported from another module
    (a helper two modules share is a public name of the one that owns it)."""
    mods = _modules(root)
    out = []
    for name, path in sorted(mods.items()):
        package = name if _is_package(path) else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _from_module(package, node)
            if base == name or base.split(".")[0] not in ("policies", "provisioner", "providers"):
                continue
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    out.append(f"{name} <- {base}.{a.name}")
    return out


def test_no_private_name_is_imported_across_modules() -> None:
    assert _private_imports(REPO) == []


def test_the_private_import_check_finds_a_planted_one(tmp_path: Path) -> None:
    pkg = tmp_path / "provisioner"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def _helper() -> None:\n    pass\n")
    (pkg / "b.py").write_text("from provisioner.a import _helper\n")
    (pkg / "c.py").write_text("from .a import _helper as helper\n")
    assert _private_imports(tmp_path) == [
        "provisioner.b <- provisioner.a._helper",
        "provisioner.c <- provisioner.a._helper",
    ]
