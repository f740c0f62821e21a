"""Every hyper-parameter's default is written once: within a package, no two signatures (or dataclass fields) give
a setting the same literal default (the same name with another value is another quantity: an index command's batch
size is not the data module's). A setting's one default is its LightningCLI class's (`<pkg>.ranker`,
`<pkg>.data`), or a constant both the model and the data module read; inner modules take the value they are given."""

import ast
import collections
from pathlib import Path

import pytest

from tests.project import REPO

PACKAGES = ("qds", "conformer_kernel", "earl", "mva")


def hyper_parameters(package: str) -> set[str]:
    """The settings of `package`'s model and data classes (their ``__init__`` parameters)."""
    import importlib
    import inspect

    command = importlib.import_module(f"{package}.train").COMMAND
    names = set()
    for path in (command.model, command.data):
        module, name = path.rsplit(".", 1)
        names |= set(inspect.signature(getattr(importlib.import_module(module), name)).parameters) - {"self"}
    return names


def literal_defaults(path: Path, names: set[str]) -> list[tuple[tuple, str]]:
    """((name, value), where) for each literal default of a parameter or field named in `names` in the file `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = [*zip(positional[len(positional) - len(args.defaults):], args.defaults),
                     *((a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)]
            found += [((a.arg, d.value), f"{path.relative_to(REPO)}:{node.lineno} {node.name}") for a, d in pairs
                      if a.arg in names and isinstance(d, ast.Constant) and d.value is not None]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in names \
                and isinstance(node.value, ast.Constant) and node.value.value is not None:
            found.append(((node.target.id, node.value.value), f"{path.relative_to(REPO)}:{node.lineno}"))
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_each_setting_has_one_default_in_its_package(package):
    names = hyper_parameters(package)
    sites = collections.defaultdict(list)
    for path in sorted((REPO / package).rglob("*.py")):
        for name, where in literal_defaults(path, names):
            sites[name].append(where)
    assert {name: places for name, places in sites.items() if len(places) > 1} == {}
