"""The package's layering, read from the import graph of ``test_import_cycles``.

A *room* is a top-level module or subpackage of fastprep (a subpackage's modules are one
room; the package's own ``__init__`` is the room ``fastprep``; a compiled module is a
room). A room's *floor* is one more than the highest floor it imports (a room that imports
none is on floor 1). The tests check that

- the house has at most :data:`MAX_FLOORS` floors;
- every room belongs to a layer of :data:`LAYERS` and imports only rooms of its own layer or
  of a lower one (an import within a layer is allowed; the cycle test keeps those acyclic);
- no module uses a private name (``_x``) of another, public fastprep module, by
  ``from M import _x`` or by ``M._x`` on an imported module (a private module such as
  ``fastprep._threads`` exists to be shared; a private name of a public module is that
  module's own business: add a public name, or move the helper to a private module);
- nor does the checkout's tooling (``bench/``, ``fuzz/``, ``ci/``, ``examples/``).
"""

import ast
import functools
from pathlib import Path

from test_import_cycles import PACKAGE, from_module, import_graph, modules

ROOT = "fastprep"
MAX_FLOORS = 9
#: The checkout's tooling, which must use public names (and private modules) only.
TOOLING = ("bench", "fuzz", "ci", "examples")

#: Layers from the bottom up: ``{layer: rooms}``. A room may import rooms of its own layer
#: and of the layers listed before it. A new top-level module or subpackage gets a layer here.
LAYERS: dict[str, set[str]] = {
    # compiled code, its Python glue, and private helpers shared by every layer
    "leaves": {"_C", "_ops", "_kernels", "_threads", "_platform", "_seeding",
               "_checks", "_layout", "_progress", "_cache"},
    # JPEG decode and the resize op
    "decode": {"io", "resize"},
    # tensor kernels on decoded images
    "functional": {"functional"},
    # transforms, and the package's front door that hands on io, functional and transforms
    "transforms": {"transforms", "decode_transforms", ""},
    # datasets, loaders and the engines behind them
    "data": {"data"},
    # tools built on the data path
    "tools": {"pack", "ray"},
    # the benchmark drives everything
    "bench": {"bench"},
}

#: Private names of public modules that other modules may still use while a change moves
#: them: ``(user module, owner module, name)``. Empty: none. An entry that no longer occurs
#: fails the test (remove it).
KNOWN_PRIVATE_USES: set[tuple[str, str, str]] = set()


def room(module: str) -> str:
    """The room of a module: its top-level name below ``fastprep`` (``""`` for ``fastprep``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph collapsed to rooms (an import inside a room is no edge)."""
    rooms: dict[str, set[str]] = {}
    for module, imported in graph.items():
        rooms.setdefault(room(module), set())
        for other in imported:
            rooms.setdefault(room(other), set())
            if room(other) != room(module):
                rooms[room(module)].add(room(other))
    return rooms


def floors(rooms: dict[str, set[str]]) -> dict[str, int]:
    """``{room: floor}`` of an acyclic room graph."""

    @functools.cache
    def floor(name: str) -> int:
        return 1 + max((floor(other) for other in rooms[name]), default=0)

    return {name: floor(name) for name in rooms}


def describe(rooms: dict[str, set[str]]) -> str:
    """The house floor by floor, top first: ``floor N: room (-> rooms it imports)``."""
    levels = floors(rooms)
    lines = []
    for level in range(max(levels.values(), default=0), 0, -1):
        here = sorted(name for name in levels if levels[name] == level)
        lines.append(f"floor {level}: " + ", ".join(
            f"{name or ROOT} (-> {', '.join(sorted(o or ROOT for o in rooms[name]))})" if rooms[name] else name or ROOT
            for name in here))
    return "\n".join(lines)


def layer_violations(rooms: dict[str, set[str]], layers: dict[str, set[str]]) -> list[str]:
    """Rooms in no layer, and imports of a higher layer, one line each."""
    rank = {name: k for k, members in enumerate(layers.values()) for name in members}
    names = list(layers)
    out = [f"{name or ROOT} is in no layer of LAYERS" for name in sorted(rooms) if name not in rank]
    for name in sorted(rooms):
        for other in sorted(rooms[name]):
            if name in rank and other in rank and rank[other] > rank[name]:
                out.append(f"{name or ROOT} (layer {names[rank[name]]}) imports {other or ROOT} "
                           f"(higher layer {names[rank[other]]})")
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _public(module: str) -> bool:
    return not any(_private(part) for part in module.split("."))


def _dotted(node: ast.AST) -> list[str] | None:
    """``["a", "b", "c"]`` for the expression ``a.b.c``, else ``None``."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(names)]


def private_uses(source: str, module: str, is_pkg: bool, mods) -> set[tuple[str, str, str]]:
    """``(module, owner, name)`` for each private name of another public fastprep module that
    the code of ``module`` uses (imports anywhere in the file count, as in the cycle test)."""
    package = module if is_pkg else module.rpartition(".")[0]
    tree = ast.parse(source)
    bound: dict[str, str] = {}  # local name -> the fastprep module it holds
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == ROOT:
                    bound[alias.asname or ROOT] = alias.name if alias.asname else ROOT
        elif isinstance(node, ast.ImportFrom):
            owner = from_module(node, package)
            if owner.split(".")[0] != ROOT:
                continue
            for alias in node.names:
                sub = f"{owner}.{alias.name}"
                if sub in mods:
                    bound[alias.asname or alias.name] = sub
                elif _private(alias.name):
                    found.add((module, owner, alias.name))
    for node in ast.walk(tree):
        chain = _dotted(node) if isinstance(node, ast.Attribute) else None
        if not chain or chain[0] not in bound:
            continue
        owner = bound[chain[0]]
        for name in chain[1:]:
            if f"{owner}.{name}" in mods:
                owner = f"{owner}.{name}"
                continue
            if _private(name):
                found.add((module, owner, name))
            break
    return {(user, owner, name) for user, owner, name in found if owner != user and _public(owner)}


def all_private_uses() -> set[tuple[str, str, str]]:
    mods = modules()
    found = set()
    for name, (path, is_pkg) in mods.items():
        if path is not None:
            found |= private_uses(path.read_text(encoding="utf-8"), name, is_pkg, mods)
    return found


def tooling_private_uses() -> set[tuple[str, str, str]]:
    """:func:`private_uses` of the checkout's scripts (``bench/``, ``fuzz/``...), by path."""
    checkout = Path(__file__).resolve().parent.parent
    mods = modules()
    found = set()
    for folder in TOOLING:
        for path in sorted((checkout / folder).glob("*.py")):
            where = str(path.relative_to(checkout))
            found |= private_uses(path.read_text(encoding="utf-8"), where, False, mods)
    return found


def test_room_graph_and_floors():
    rooms = {"a": {"b", "c"}, "b": {"c"}, "c": set()}
    assert floors(rooms) == {"a": 3, "b": 2, "c": 1}
    assert room_graph({"fastprep.x.y": {"fastprep.x.z", "fastprep._C"}, "fastprep.x.z": set(),
                       "fastprep._C": set()}) == {"x": {"_C"}, "_C": set()}
    assert describe({"x": {"_C"}, "_C": set()}) == "floor 2: x (-> _C)\nfloor 1: _C"


def test_layer_violations_name_the_upward_import():
    layers = {"low": {"a"}, "high": {"b"}}
    assert layer_violations({"a": set(), "b": {"a"}}, layers) == []
    assert layer_violations({"a": {"b"}, "b": set()}, layers) == ["a (layer low) imports b (higher layer high)"]
    assert layer_violations({"a": set(), "c": set()}, layers) == ["c is in no layer of LAYERS"]


def test_private_uses_are_found_by_import_and_by_attribute():
    mods = {"fastprep", "fastprep.io", "fastprep.data", "fastprep.data.batch", "fastprep.data.loader",
            "fastprep._threads"}
    source = (
        "import fastprep.io as fio\n"
        "from fastprep import io\n"
        "from . import batch\n"
        "from .batch import _check, check\n"
        "from fastprep._threads import _pool\n"  # a private module's names are shared on purpose
        "import fastprep\n"
        "def f():\n"
        "    from fastprep.data import _local\n"
        "    return fio._as_tensor, io._mode, batch._x, fastprep.io._int, fio.decode_jpeg, fio.__name__\n"
    )
    assert private_uses(source, "fastprep.data.loader", False, mods) == {
        ("fastprep.data.loader", "fastprep.data.batch", "_check"),
        ("fastprep.data.loader", "fastprep.data", "_local"),
        ("fastprep.data.loader", "fastprep.io", "_as_tensor"),
        ("fastprep.data.loader", "fastprep.io", "_mode"),
        ("fastprep.data.loader", "fastprep.data.batch", "_x"),
        ("fastprep.data.loader", "fastprep.io", "_int"),
    }
    # a module's own private names are its own business
    assert private_uses("import fastprep.io as fio\nfio._x\n", "fastprep.io", False, mods) == set()


def test_at_most_nine_floors():
    rooms = room_graph(import_graph())
    assert max(floors(rooms).values()) <= MAX_FLOORS, (
        f"the import graph has more than {MAX_FLOORS} floors:\n{describe(rooms)}")


def test_no_room_imports_a_higher_layer():
    rooms = room_graph(import_graph())
    bad = layer_violations(rooms, LAYERS)
    assert not bad, "\n".join(bad) + f"\n\nthe house today:\n{describe(rooms)}"


def test_no_private_names_of_public_modules_used_elsewhere():
    found = all_private_uses()
    new = sorted(found - KNOWN_PRIVATE_USES)
    gone = sorted(KNOWN_PRIVATE_USES - found)
    assert not new, "private names of public modules used elsewhere (add a public name or move the helper " \
        "to a private module such as fastprep/_threads.py):\n" + "\n".join(
            f"{user} uses {owner}.{name}" for user, owner, name in new)
    assert not gone, "no longer used, remove from KNOWN_PRIVATE_USES:\n" + "\n".join(map(str, gone))


def test_tooling_uses_public_names_only():
    found = sorted(tooling_private_uses())
    assert not found, "scripts using private names of public modules:\n" + "\n".join(
        f"{user} uses {owner}.{name}" for user, owner, name in found)


# ------------------------------------------------------------------ function size

MAX_FUNCTION_LINES = 100
MAX_PARAMETERS = 16


def oversized_functions(source: str, name: str = "<source>") -> list[str]:
    """Functions of ``source`` longer than :data:`MAX_FUNCTION_LINES` lines (decorators
    excluded, docstring included) or with more than :data:`MAX_PARAMETERS` parameters
    (``self``/``cls`` not counted, ``*args``/``**kwargs`` one each)."""
    out = []
    for node in ast.walk(ast.parse(source, name)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        lines = node.end_lineno - node.lineno + 1
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
        count = len(params) + (a.vararg is not None) + (a.kwarg is not None)
        if params and params[0].arg in ("self", "cls"):
            count -= 1
        if lines > MAX_FUNCTION_LINES or count > MAX_PARAMETERS:
            out.append(f"{name}:{node.lineno} {node.name}: {lines} lines, {count} parameters")
    return out


def test_oversized_functions_detector():
    params = ", ".join(f"p{i}" for i in range(16))
    assert oversized_functions(f"def f(self, {params}):\n    pass\n") == []
    assert oversized_functions(f"def f({params}, *rest):\n    pass\n") == ["<source>:1 f: 2 lines, 17 parameters"]
    body = "".join("    x = 1\n" for _ in range(99))
    assert oversized_functions("def g():\n" + body) == []
    assert oversized_functions("def g():\n" + body + "    x = 2\n") == ["<source>:1 g: 101 lines, 0 parameters"]


def test_functions_are_short_and_take_few_parameters():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += oversized_functions(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))
    assert not found, "split these functions or group their parameters:\n" + "\n".join(found)
