"""No import cycles inside the fastprep package.

Every ``import``/``from ... import`` in every module is read with ``ast`` -- at module
level and inside functions, since a function-level import is a cycle deferred, not
removed -- and resolved to a module of the package (``from . import x`` is an edge to the
submodule ``x`` when there is one, else to the package). Compiled extension modules
(``*.so``, ``*.pyd``) are leaves. A submodule's implicit import of its parent package is
not an edge (every package ``__init__`` that imports its submodules would be a cycle).
"""

import ast
from pathlib import Path

import fastprep

PACKAGE = Path(fastprep.__file__).resolve().parent

# Edges that form a known cycle elsewhere in the tree, being removed by other work; each
# names the module pair. Keep this empty when possible.
KNOWN_EDGES: set[tuple[str, str]] = set()


def from_module(node: ast.ImportFrom, package: str) -> str:
    """The absolute name of the module in ``from <module> import ...`` written in a module
    of ``package`` (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def modules() -> dict[str, tuple[Path | None, bool]]:
    """``{module name: (source path or None for a compiled module, is a package)}``."""
    mods: dict[str, tuple[Path | None, bool]] = {}
    for path in PACKAGE.rglob("*"):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        rel = path.relative_to(PACKAGE.parent)
        if path.suffix == ".py":
            parts = rel.with_suffix("").parts
            is_pkg = parts[-1] == "__init__"
            mods[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
        elif path.suffix in (".so", ".pyd"):
            stem = path.name.split(".", 1)[0]
            mods[".".join(rel.parts[:-1] + (stem,))] = (None, False)
    return mods


def import_graph() -> dict[str, set[str]]:
    """``{module: modules of the package it imports}``."""
    mods = modules()
    root = PACKAGE.name
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, (path, is_pkg) in mods.items():
        if path is None:
            continue
        package = name if is_pkg else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                for alias in node.names:
                    # `import a.b.c` runs a, a.b and a.b.c; the deepest is what the code uses
                    targets.append(alias.name)
            elif isinstance(node, ast.ImportFrom):
                module = from_module(node, package)
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    targets.append(sub if sub in mods else module)
            for t in targets:
                if t.split(".")[0] != root:
                    continue
                while t not in mods and "." in t:  # `import fastprep.x.attr` style
                    t = t.rpartition(".")[0]
                if t in mods and t != name:
                    graph[name].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or ``None`` (iterative DFS, three colours)."""
    state = dict.fromkeys(graph, 0)  # 0 new, 1 on the stack, 2 done
    for start in sorted(graph):
        if state[start]:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state[child] == 1:
                return path[path.index(child):] + [child]
            elif state[child] == 0:
                state[child] = 1
                stack.append((child, iter(sorted(graph[child]))))
                path.append(child)
    return None


def test_graph_sees_function_level_and_relative_imports():
    graph = import_graph()
    assert "fastprep.io" in graph["fastprep"]  # `from . import io` in __init__
    assert "fastprep._C" in graph["fastprep.io"]  # a compiled module is a node
    assert "fastprep.bench.cli" in graph["fastprep.bench.__main__"]
    # a function-level import is an edge too (fastprep.bench.cli imports profiling inside functions)
    assert "fastprep.bench.profiling" in graph["fastprep.bench.cli"]


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycles_in_the_package():
    graph = import_graph()
    for a, b in KNOWN_EDGES:
        graph.get(a, set()).discard(b)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
