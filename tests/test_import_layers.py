"""Imports follow the data flow, at two levels.

Packages are layers, each importing only the layers below it (LAYERS, bottom first): the fused
ops' contract and the error types (contracts), the graph pass that loads, normalizes, matches and
fuses (lowering), the kernel generator that lowers fused nodes to IR, schedules and emits them
(codegen), the execution and diff of the fused model (runtime), and the `lower` command that joins
them (app). No cycle among modules either, inside or across packages; and codegen and runtime read
only lowering's model helpers, never the pass.

The import graph is read from the source with ast (every import statement, also those inside
functions, except under `if TYPE_CHECKING:`), so the test needs no import side effects. Importing
a module also runs its packages' __init__ modules, so where a layer must not reach a module, the
test follows those implicit edges too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("contracts", "lowering", "codegen", "runtime", "app")  # each imports only those before it

# What codegen and runtime may take from lowering/: its plain ONNX helpers (loading and saving
# models, reading constants and types, printing model text), none of which imports the pass. The
# layer order lets codegen and runtime import lowering; this narrows it to the load stage.
MODEL_HELPERS = frozenset({"lowering.loading", "lowering.graph", "lowering.onnx_values", "lowering.local_types",
                           "lowering.terminal"})


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_package: bool, modules: dict[str, Path],
             type_only: bool = False) -> set[str]:
    """The project modules `module` imports by name (not its parent packages); with `type_only`,
    also those imported only for type checkers."""
    package = module if is_package else module.rpartition(".")[0]
    targets: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_only:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {t for t in targets if t in modules and t != module}


def _graph(type_only: bool = False) -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[name] = _imports(tree, name, path.name == "__init__.py", modules, type_only)
    return graph


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def strongconnect(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return found


def _without_package_inits(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph without a module's edges to its own ancestor packages: a submodule that reads a
    name its package's __init__ re-exports is the ordinary package layout, not a cycle."""
    return {m: {t for t in targets if t not in _ancestors(m)} for m, targets in graph.items()}


def _reach(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every module importing `start` runs, with the module that imports it (or whose package
    __init__ it is), counting the implicit imports of parent packages."""
    via: dict[str, str] = {}
    todo = [start]
    while todo:
        m = todo.pop()
        for t in sorted(graph[m] | {a for a in _ancestors(m) if a in graph}):
            if t not in via and t != start:
                via[t] = m
                todo.append(t)
    return via


def _is_pass_module(module: str) -> bool:
    return module.startswith("lowering.") and module not in MODEL_HELPERS


def _package(module: str) -> str:
    return module.split(".")[0]


def _package_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """{(importing package, imported package): the module imports behind it}, counting the
    implicit import of each imported module's parent packages (their __init__ modules run too)."""
    edges: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            for reached in [target, *(a for a in _ancestors(target) if a in graph)]:
                if _package(reached) != _package(module):
                    edges.setdefault((_package(module), _package(reached)), []).append((module, reached))
    return edges


def test_no_import_cycle_among_the_projects_modules() -> None:
    assert _cycles(_without_package_inits(_graph())) == []


def test_no_cycle_through_imports_for_type_checkers_either() -> None:
    assert _cycles(_without_package_inits(_graph(type_only=True))) == []


def test_every_package_is_a_layer() -> None:
    """A new top-level package must take its place in LAYERS, or the checks below skip it."""
    found = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    assert found == sorted(LAYERS)


def test_no_import_cycle_among_the_packages() -> None:
    edges = _package_edges(_graph())
    packages = {name: {b for a, b in edges if a == name} for name in LAYERS}
    assert _cycles(packages) == [], "package imports: " + ", ".join(f"{a} -> {b}" for a, b in sorted(edges))


def test_packages_import_only_the_layers_below() -> None:
    edges = _package_edges(_graph())
    upward = {f"{a} -> {b}": via[:3] for (a, b), via in sorted(edges.items()) if LAYERS.index(b) > LAYERS.index(a)}
    assert upward == {}, f"imports against the layer order {' < '.join(LAYERS)}"


def test_codegen_and_runtime_name_no_pass_module() -> None:
    graph = _graph()
    named = sorted((m, t) for m, targets in graph.items() if m.split(".")[0] in ("codegen", "runtime")
                   for t in targets if _is_pass_module(t) or t == "lowering")
    assert named == [], "codegen/runtime import these pass modules: " + ", ".join(f"{m} -> {t}" for m, t in named)


def test_codegen_and_runtime_reach_no_pass_module() -> None:
    """Following every import, also the implicit one of each parent package (lowering/__init__.py
    loads its public names on first use, so importing lowering.graph runs no pass module)."""
    graph = _graph()
    leaks = {}
    for module in graph:
        if module.split(".")[0] not in ("codegen", "runtime"):
            continue
        reached = sorted(t for t in _reach(graph, module) if _is_pass_module(t))
        if reached:
            leaks[module] = reached
    assert leaks == {}


def test_importing_codegen_rules_loads_no_pass_module() -> None:
    """What Python really imports for `import codegen.rules` (the lowering rules, which need two op
    names from the contract): no pass module."""
    code = "import sys, codegen.rules; print(' '.join(sorted(m for m in sys.modules if m.startswith('lowering'))))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=ROOT).stdout.split()
    assert [m for m in loaded if _is_pass_module(m)] == []
