"""The layers, read from the code's own imports (ast over every module of s3kv/ and warp/).

From the ground up (docs/architecture.md): the ground floor (errors, sizes, log, retry, clock,
frames, config, argument types, output paths, reference data, the S3 wire); beside each other
above it, the object backends and the load generator (warp); the block store on the backends;
the gateway on the store; at the top the tools and commands (s3kv.commands, kvbench, tuning,
planning, doctor, the CLI, the client).
A module imports only from its own layer or below; there are no import circles; the store's
background jobs work on its catalog, not on BlockStore; no private attribute is used outside
its class.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

GROUND = ("s3kv", "s3kv.errors", "s3kv.sizes", "s3kv.log", "s3kv.retry", "s3kv.clock",
          "s3kv.frames", "s3kv.config", "s3kv.reference", "s3kv.wire", "s3kv.argtypes",
          "s3kv.outputs", "s3kv.procs")
#: what each layer may import besides itself (layers named by module prefix)
ALLOWED: dict[str, tuple[str, ...]] = {
    "ground": (),
    "warp": ("ground",),
    "s3kv.backends": ("ground",),
    "s3kv.store": ("ground", "s3kv.backends"),
    "s3kv.gateway": ("ground", "s3kv.backends", "s3kv.store"),
    "tools": ("ground", "warp", "s3kv.backends", "s3kv.store", "s3kv.gateway"),
}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for pkg in ("s3kv", "warp"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _is_submodule(package: str, name: str, modules: dict[str, Path]) -> bool:
    """``from package import name`` names a module (a .py file or a compiled extension)."""
    if f"{package}.{name}" in modules:
        return True
    init = modules.get(package)
    return init is not None and init.name == "__init__.py" and any(
        init.parent.glob(f"{name}.*"))


@functools.cache
def import_graph() -> dict[str, frozenset[str]]:
    """module -> the s3kv/warp modules it imports (anywhere in it: also inside functions and
    under TYPE_CHECKING, which are imports all the same)."""
    modules = _modules()
    graph: dict[str, frozenset[str]] = {}
    for mod, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{mod}: relative import (use absolute ones)"
                assert node.module is not None
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    deps.add(sub if _is_submodule(node.module, alias.name, modules)
                             else node.module)
        graph[mod] = frozenset(d for d in deps if d.split(".")[0] in ("s3kv", "warp")
                               and d != mod)
    return graph


def layer_of(module: str) -> str:
    if any(module == g or module.startswith(g + ".") for g in GROUND if g != "s3kv") or \
            module == "s3kv":
        return "ground"
    for layer in ("warp", "s3kv.backends", "s3kv.store", "s3kv.gateway"):
        if module == layer or module.startswith(layer + "."):
            return layer
    return "tools"


def cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_graph_sees_the_modules() -> None:
    """The walk itself: it finds the known edges (a walk that saw nothing would pass all)."""
    graph = import_graph()
    assert "s3kv.wire.sigv4" in graph["s3kv.wire.sigv4_verify"]
    assert "s3kv.wire.sigv4" in graph["warp.s3"]
    assert "s3kv.store.codecs._kvq_native" in graph["s3kv.store.codecs.kvq_native"]
    ring = {"a": frozenset("b"), "b": frozenset("c"), "c": frozenset("a"), "d": frozenset("a")}
    assert cycles(ring) == [["a", "b", "c"]]


def test_imports_follow_the_layers() -> None:
    wrong = []
    for mod, deps in sorted(import_graph().items()):
        layer = layer_of(mod)
        for dep in sorted(deps):
            target = layer_of(dep)
            if target != layer and target not in ALLOWED[layer]:
                wrong.append(f"{mod} ({layer}) imports {dep} ({target})")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_data_path_does_not_import_the_load_generator() -> None:
    graph = import_graph()
    for mod, deps in graph.items():
        if layer_of(mod) in ("s3kv.backends", "s3kv.store", "s3kv.gateway", "ground"):
            assert not {d for d in deps if d.split(".")[0] == "warp"}, mod
        if layer_of(mod) == "warp":
            assert all(layer_of(d) in ("ground", "warp") for d in deps), mod


def test_no_import_circles() -> None:
    found = cycles(import_graph())
    assert not found, f"import circles: {found}"


def test_only_the_face_of_the_store_is_blockstore() -> None:
    """Recovery, eviction and the rest of s3kv.store work on narrow parts (the catalog, the
    writer), never on BlockStore: nothing in s3kv.store imports s3kv.store.store."""
    graph = import_graph()
    users = sorted(m for m, deps in graph.items()
                   if m.startswith("s3kv.store.") and "s3kv.store.store" in deps)
    assert not users, users
    assert "s3kv.store.store" in graph["s3kv.gateway.state"]  # the walk sees the real users


def private_accesses(source: str) -> list[str]:
    """``obj._name`` on anything but ``self``/``cls``/``super()`` or an imported module."""
    tree = ast.parse(source)
    modules = {alias.asname or alias.name for node in ast.walk(tree)
               if isinstance(node, ast.Import) for alias in node.names}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            continue
        base = node.value
        if isinstance(base, ast.Name) and (base.id in ("self", "cls") or base.id in modules):
            continue
        if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and \
                base.func.id == "super":  # an override calling the method it overrides
            continue
        found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_private_attribute_used_outside_its_class() -> None:
    assert private_accesses("import os\nos._exit\nself._x\nstore._dead\nsuper()._m()\n") == [
        "line 4: store._dead"]
    wrong = [f"{path.relative_to(ROOT)} {hit}" for path in _modules().values()
             for hit in private_accesses(path.read_text())]
    assert not wrong, "\n".join(wrong)
