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


def imports_outside(module_prefix: str, allowed: tuple[str, ...]) -> list[tuple[str, str]]:
    """(module, dependency) pairs where a module under `module_prefix` imports a project module
    outside `allowed` (prefixes)."""
    return [(m, d) for m, deps in import_graph().items() if m == module_prefix or m.startswith(module_prefix + ".")
            for d in deps if not d.startswith(allowed) and d not in ("elastic_launcher", "training")]


def test_the_launcher_reaches_the_trainer_only_through_its_contract():
    """The launcher (compose, plan, render, submit, local runs, the simulator) shares with the
    trainer only `training.contract`: the config schema, batching, file and env names, records."""
    assert not imports_outside("elastic_launcher", ("elastic_launcher", "training.contract"))
    # A violation is caught: a launcher module importing the trainer's runtime.
    graph = import_graph()
    graph["elastic_launcher.render.manifests"] = graph["elastic_launcher.render.manifests"] | {"training.runtime.elastic"}
    assert [(m, d) for m, deps in graph.items() if m.startswith("elastic_launcher")
            for d in deps if d.startswith("training") and not d.startswith("training.contract")] == \
        [("elastic_launcher.render.manifests", "training.runtime.elastic")]


def test_the_contract_imports_nothing_else_and_no_torch():
    assert not imports_outside("training.contract", ("training.contract",))
    blocked = ("import sys; sys.modules['torch'] = None\n"  # `import torch` now fails
               "import training.contract.config, training.contract.batching, training.contract.config_files, "
               "training.contract.records, training.contract.checkpoint_dirs, training.contract.typed")
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", blocked], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    broken = subprocess.run([sys.executable, "-c", blocked.replace("training.contract.typed", "training.state.sampler")],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert broken.returncode != 0 and "torch" in broken.stderr  # the check does catch a torch import


def test_local_runs_cluster_and_simulator_do_not_import_each_other():
    for package in ("local", "cluster", "simulate"):
        others = tuple(f"elastic_launcher.{p}" for p in ("local", "cluster", "simulate") if p != package)
        crossing = [(m, d) for m, d in imports_outside(f"elastic_launcher.{package}", ("elastic_launcher", "training"))]
        crossing += [(m, d) for m, deps in import_graph().items() if m.startswith(f"elastic_launcher.{package}.")
                     for d in deps if d.startswith(others)]
        assert not crossing, crossing


def test_a_local_run_renders_no_manifest():
    assert not [d for d in import_graph()["elastic_launcher.local.run"] if d.startswith("elastic_launcher.render.")
                and d != "elastic_launcher.render.configs"]
