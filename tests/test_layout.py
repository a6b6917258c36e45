"""The modules' import graph: no circles (not even through imports inside functions), and the
training package never reaches up into the launcher."""

import ast
from pathlib import Path

from conftest import ROOT

PACKAGES = ("elastic_launcher", "training")


def module_files() -> dict[str, Path]:
    """Module name -> file, subpackages included (a package's __init__ under the package's name)."""
    files = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return files


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    names = set(files)
    graph = {}
    for name in names:
        deps = set()
        for node in ast.walk(ast.parse(files[name].read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                deps |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                deps |= {alias.name for alias in node.names}
        graph[name] = (deps & names) - {name}
    return graph


def test_no_import_circles():
    graph, circles = import_graph(), []

    def visit(module, path):
        for dep in graph[module]:
            if dep in path:
                circles.append(path[path.index(dep):] + [dep])
            else:
                visit(dep, path + [dep])

    for module in graph:
        visit(module, [module])
    assert not circles, [" -> ".join(c) for c in circles]


def test_training_never_imports_the_launcher():
    upward = [(m, d) for m, deps in import_graph().items() for d in deps
              if m.startswith("training.") and d.startswith("elastic_launcher.")]
    assert not upward
