"""The modules' import graph: no circles (not even through imports inside functions), and the
training package never reaches up into the launcher."""

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest
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


def test_no_module_is_over_500_lines():
    """One job per module: a module grown past 500 lines has taken a second one (split it along its seam)."""
    long = {name: n for name, f in module_files().items() if (n := len(f.read_text().splitlines())) > 500}
    assert not long, long


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


def imports_outside(graph: dict[str, set[str]], prefix: str, allowed: tuple[str, ...]) -> list[tuple[str, str]]:
    """(module, dependency) pairs where a module under `prefix` imports a project module outside
    the `allowed` prefixes (the top packages themselves excepted)."""
    return [(m, d) for m, deps in graph.items() if m == prefix or m.startswith(prefix + ".")
            for d in deps if not d.startswith(allowed) and d not in PACKAGES]


def test_the_launcher_reaches_the_trainer_only_through_its_contract():
    """The launcher (compose, plan, render, submit, local runs, the simulator) shares with the
    trainer only `training.contract`: the config schema, batching, file and env names, records."""
    allowed = ("elastic_launcher", "training.contract")
    graph = import_graph()
    assert not imports_outside(graph, "elastic_launcher", allowed)
    # A violation is caught: a launcher module importing the trainer's runtime.
    graph["elastic_launcher.render.manifests"] |= {"training.runtime.elastic"}
    assert imports_outside(graph, "elastic_launcher", allowed) == [("elastic_launcher.render.manifests",
                                                                    "training.runtime.elastic")]


def test_the_contract_imports_nothing_else_and_no_torch():
    assert not imports_outside(import_graph(), "training.contract", ("training.contract",))
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
    graph, actions = import_graph(), ("local", "cluster", "simulate")
    for package in actions:
        others = tuple(f"elastic_launcher.{p}" for p in actions if p != package)
        crossing = [(m, d) for m, deps in graph.items() if m.startswith(f"elastic_launcher.{package}.")
                    for d in deps if d.startswith(others)]
        assert not crossing, crossing


def test_a_local_run_renders_no_manifest():
    assert not [d for d in import_graph()["elastic_launcher.local.run"] if d.startswith("elastic_launcher.render.")
                and d != "elastic_launcher.render.configs"]


WEIGHTED_SFT = '''"""SFT whose token loss is scaled by a weight: a third method, written as one module."""

from dataclasses import dataclass

from training.contract.typed import ranged
from training.methods.sft import SFT

SEQUENCES_PER_SAMPLE = 1
PACKING = True


@dataclass
class Args:
    weight: float = ranged(1.0, gt=0)


class WeightedSFT(SFT):
    def forward_backward(self, model, micro_batches, label_tokens, global_batch, documents=None):
        loss_sum, stats = super().forward_backward(model, micro_batches, label_tokens / self.options.weight,
                                                   global_batch, documents)
        return loss_sum * self.options.weight, stats


METHOD = WeightedSFT
'''


@pytest.mark.parametrize("name", ["sft", "dpo", "grpo"])
def test_a_methods_facts_and_keys_are_its_contract_modules_own(name):
    """The project's methods keep their facts and `Args` in a torch-free module of training.contract
    that the method imports too: the launcher takes that class as it is, defaults and checks included,
    not a copy rebuilt from source."""
    import importlib

    from training.contract.methods import method_facts
    from training.methods import load_method

    contract = importlib.import_module(f"training.contract.{name}_args")
    assert method_facts(name).args is contract.Args
    assert method_facts(name).data_format == contract.DATA_FORMAT == importlib.import_module(
        f"training.methods.{name}").METHOD.data_format
    if name == "grpo":
        assert method_facts(name).build_args({"loss_fn": "cispo"}).loss_fn == "cispo"
    args = SimpleNamespace(trainer_type=name, method_args={})
    assert isinstance(load_method(args, "cpu").options, contract.Args)


def test_a_new_method_is_one_new_module(tmp_path):
    """A copy of the project with one file added (training/methods/weighted_sft.py) plans, validates
    and trains the new method locally: its keys are checked, its line is printed, and its loss is
    the weight times SFT's on the same data and init."""
    import subprocess
    import sys

    from conftest import losses, tracked_copy

    copy = tracked_copy(tmp_path / "project")
    (copy / "training" / "methods" / "weighted_sft.py").write_text(WEIGHTED_SFT)

    def launch(run, *overrides, action="local"):
        return subprocess.run([sys.executable, "launcher.py", "recipes=llama/tiny_llama_sft", f"action={action}",
                               "recipes.training_config.training_args.max_steps=2", f"local.run_dir={tmp_path / run}",
                               f"output_dir={tmp_path / 'dry_run'}", *overrides],
                              cwd=copy, capture_output=True, text=True, timeout=300)

    weighted = ["recipes.training_config.training_args.trainer_type=weighted_sft",
                "+recipes.training_config.training_args.method_args.weight=2"]
    refused = launch("bad", weighted[0], "+recipes.training_config.training_args.method_args.wieght=2")
    assert refused.returncode == 2 and "method_args.wieght': did you mean 'weight'?" in refused.stderr
    assert "method: WEIGHTED_SFT (weight 2)" in launch("plan", *weighted, action="dry_run").stdout
    # a module that does not import is the run's one line, naming the module and its error
    (copy / "training" / "methods" / "broken_sft.py").write_text("import not_a_module\n")
    broken = launch("broken", "recipes.training_config.training_args.trainer_type=broken_sft", action="dry_run")
    assert broken.returncode == 2 and broken.stderr.count("\n") == 1, broken.stderr
    assert "methods/broken_sft.py does not import (ModuleNotFoundError: No module named 'not_a_module')" in broken.stderr
    for run, overrides in (("weighted", weighted), ("sft", [])):
        out = launch(run, *overrides)
        assert out.returncode == 0, out.stderr[-2000:]
    got, sft = losses(tmp_path / "weighted"), losses(tmp_path / "sft")
    assert got.keys() == sft.keys() == {1, 2}
    assert abs(got[1] - 2 * sft[1]) <= 1e-6 * sft[1]


def test_the_launchers_configuration_sits_below_its_plan():
    """Composition and the recipe's own blocks (elastic_policy, hardware) are read by the planner and
    everything above it, and import none of them."""
    graph = import_graph()
    assert not imports_outside(graph, "elastic_launcher.config", ("elastic_launcher.config", "training.contract"))


# The trainer's layers, top to bottom: an import points down or within its layer. The run's driver on
# top, then the methods, the parts they use, the model, the process's services and data, the contract.
TRAINING_LAYERS = (
    ("training.launch", "training.__main__", "training.worker", "training.trainer", "training.validation", "training.run_config",
     "training.evaluate",
     "training.memory_trace"),
    ("training.methods",),
    ("training.rl", "training.export"),
    ("training.model",),
    ("training.runtime", "training.state", "training.data", "training.cached_rows", "training.batches", "training.chat_tokens",
     "training.tracking", "training.doctor"),
    ("training.contract",),
)


def training_layer(module: str) -> int:
    return next(i for i, prefixes in enumerate(TRAINING_LAYERS)
                if any(module == p or module.startswith(p + ".") for p in prefixes))


def test_the_trainers_imports_only_point_down_its_layers():
    graph = import_graph()
    modules = [m for m in graph if m.startswith("training.")]
    assert all(training_layer(m) is not None for m in modules)  # every module has its layer
    upward = [(m, d) for m in modules for d in graph[m]
              if d.startswith("training.") and training_layer(d) < training_layer(m)]
    assert not upward
