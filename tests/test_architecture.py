"""Two rules of the source tree that import-linter cannot state, read from the source with `ast`.

- No import circles among the modules of `statewise`, counting every import anywhere in a
  module: at the top, inside functions, and behind `TYPE_CHECKING`. A circle is a strongly
  connected component of the import graph with more than one module.
- No module uses another module's private names: no `from statewise.x import _name`
  (unless `_name` is a module: a package's private module is its private API) and no
  `x._name` on an imported statewise module.
- No module over 700 lines.

Each test names what it finds, so a failure says which modules to untangle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import statewise

ROOT = Path(statewise.__file__).parent

# Circles still inside db/, each to be removed by the change that splits its modules (none
# left). A circle found is known when it holds one of these sets and lies wholly inside db/.
KNOWN_CYCLES: dict[frozenset[str], str] = {}

# Private names still used across modules inside db/ (module, imported name).
KNOWN_PRIVATE_USES = {
    ("statewise.db.testing._pg", "statewise.db.testing.harnesses._corrupt_sql"): (
        "the PostgreSQL harness reuses the shared corruption helper"
    ),
    ("statewise.db.testing._redis", "statewise.db.testing.harnesses._need"): (
        "the Redis harness reuses the shared skip-if-unavailable helper"
    ),
}

# Modules still over the size limit, in db/, being split by concern (none left).
MAX_LINES = 700
KNOWN_LARGE: dict[str, str] = {}


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


def _modules(root: Path = ROOT) -> dict[str, Module]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = ["statewise", *path.relative_to(root).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        name = ".".join(parts)
        found[name] = Module(name, path, is_package, ast.parse(path.read_text(), str(path)))
    return found


def _from_target(module: Module, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    base = module.package.split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _imports(module: Module, modules: dict[str, Module]) -> Iterator[tuple[str, str, int]]:
    """(imported module, name imported from it or "", line) for every import in `module`;
    `from pkg import name` imports `pkg.name` when that is a module, else `pkg`."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield alias.name, "", node.lineno
        elif isinstance(node, ast.ImportFrom):
            target = _from_target(module, node)
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in modules:
                    yield submodule, "", node.lineno
                elif target in modules:
                    yield target, alias.name, node.lineno


def import_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    return {
        name: {target for target, _, _ in _imports(module, modules)} - {name}
        for name, module in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(modules: dict[str, Module]) -> list[tuple[str, str, int]]:
    """(module, `other.module._name`, line) for each use of another module's private name."""
    uses = []
    for name, module in modules.items():
        bound: dict[str, str] = {}  # local name -> the statewise module it is bound to
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules:
                        bound[alias.asname or alias.name.partition(".")[0]] = (
                            alias.name if alias.asname else alias.name.partition(".")[0]
                        )
            elif isinstance(node, ast.ImportFrom):
                target = _from_target(module, node)
                for alias in node.names:
                    if f"{target}.{alias.name}" in modules:
                        bound[alias.asname or alias.name] = f"{target}.{alias.name}"
                    elif target in modules and target != name and _private(alias.name):
                        uses.append((name, f"{target}.{alias.name}", node.lineno))
        for node in ast.walk(module.tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            chain = []
            value = node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if not isinstance(value, ast.Name) or value.id not in bound:
                continue
            owner = ".".join([bound[value.id], *reversed(chain)])
            if owner in modules and owner != name and f"{owner}.{node.attr}" not in modules:
                uses.append((name, f"{owner}.{node.attr}", node.lineno))
    return uses


def _known(cycle: frozenset[str]) -> bool:
    inside_db = all(name.startswith("statewise.db.") for name in cycle)
    return inside_db and any(known <= cycle for known in KNOWN_CYCLES)


def test_no_import_circles() -> None:
    found = cycles(import_graph(_modules()))
    new = [sorted(c) for c in found if not _known(c)]
    gone = [sorted(k) for k in KNOWN_CYCLES if not any(k <= c for c in found)]
    print(f"{len(found)} import circles ({len(found) - len(new)} known, in db/)")
    assert not new, "import circles (move the shared piece down, or pass a callable): " + str(new)
    assert not gone, "these known circles are gone: remove them from KNOWN_CYCLES: " + str(gone)


def test_no_module_uses_another_modules_private_names() -> None:
    uses = private_uses(_modules())
    found = {(module, name) for module, name, _ in uses}
    new = [
        f"{module}:{line} uses {name}"
        for module, name, line in uses
        if (module, name) not in KNOWN_PRIVATE_USES
    ]
    gone = sorted(set(KNOWN_PRIVATE_USES) - found)
    print(f"{len(uses)} uses of another module's private names ({len(uses) - len(new)} known)")
    assert not new, "make the name public in its module, or move the caller: " + str(new)
    assert not gone, "these known uses are gone: remove them from KNOWN_PRIVATE_USES: " + str(gone)


def test_the_checks_see_circles_and_private_names(tmp_path: Path) -> None:
    """The graph counts imports inside functions and behind TYPE_CHECKING, and
    resolves relative imports; the private-name check sees both forms of use."""
    package = tmp_path / "statewise"
    package.mkdir()
    (package / "__init__.py").write_text("from statewise.a import A\n")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\nA = 1\n"
    )
    (package / "b.py").write_text("def f():\n    from statewise import a\n    return a._x\n")
    (package / "c.py").write_text("from statewise.a import _hidden\n")
    modules = _modules(package)
    assert cycles(import_graph(modules)) == [frozenset({"statewise.a", "statewise.b"})]
    assert sorted((m, n) for m, n, _ in private_uses(modules)) == [
        ("statewise.b", "statewise.a._x"),
        ("statewise.c", "statewise.a._hidden"),
    ]


def test_no_module_is_over_700_lines() -> None:
    sizes = {m.name: len(m.path.read_text().splitlines()) for m in _modules().values()}
    large = {name: n for name, n in sizes.items() if n > MAX_LINES and name not in KNOWN_LARGE}
    assert not large, f"split these by responsibility (at most {MAX_LINES} lines): {large}"
