"""The repository's import graph, read from the source with `ast` (lazy imports inside functions included): no
module imports itself back through others, no part of `common` imports a part on a higher floor, `common` never
imports a paper package, and no paper package imports another.

The floors of `common` (README, "`common` at a glance"), lowest first; a module may import from its own part, from
a part on its floor that does not import it back, and from lower floors.
"""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("qds", "conformer_kernel", "earl", "mva")
FLOORS = [
    {"common", "common.io", "common.refusals", "common.portable"},
    {"common.metrics", "common.kernels", "common.benchmarks"},
    {"common.data"},
    {"common.training", "common.stores", "common.report", "common.report_tables", "common.scale"},
    {"common.encoders"},
    {"common.commands", "common.evaluate", "common.gpu_check", "common.api", "common.export", "common.pyterrier"},
    set(PACKAGES),
]


def modules() -> dict[str, Path]:
    """Every module of `common` and the four packages by dotted name (a package by its own name)."""
    found = {}
    for top in ("common", *PACKAGES):
        for path in (REPO / top).rglob("*.py"):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def imports(name: str, path: Path, known: dict) -> set[str]:
    """The repository's modules that `name` imports anywhere in its source (relative imports resolved)."""
    def resolve(target: str) -> str | None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found.update(t for t in map(resolve, targets) if t and t != name)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def part(module: str) -> str:
    """``common.data.formats`` -> ``common.data``; ``qds.model`` -> ``qds``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "common" and len(parts) > 1 else parts[0]


def floor(module: str) -> int:
    return next(i for i, names in enumerate(FLOORS) if part(module) in names)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each a set of modules in a cycle."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in edges.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(edges):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle_and_only_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_the_graph_sees_lazy_and_relative_imports(tmp_path):
    known = {"common": tmp_path / "c", "common.io": tmp_path / "io.py", "common.data.formats": tmp_path / "f.py"}
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from common.data.formats import read_run\n    import common.io\n")
    assert imports("common.x", module, known) == {"common.data.formats", "common.io"}


def test_no_module_imports_itself_back():
    assert cycles(graph()) == []


def test_every_part_of_common_has_a_floor():
    assert {part(m) for m in modules()} <= set().union(*FLOORS)


def test_no_import_reaches_up_a_floor_or_across_packages():
    wrong = []
    for module, targets in graph().items():
        for target in targets:
            if part(target) == part(module):
                continue
            if floor(target) > floor(module) or (floor(target) == floor(module) == len(FLOORS) - 1):
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_the_parts_of_common_on_one_floor_do_not_import_each_other_both_ways():
    edges = {}
    for module, targets in graph().items():
        edges.setdefault(part(module), set()).update(part(t) for t in targets if part(t) != part(module))
    assert cycles(edges) == []
